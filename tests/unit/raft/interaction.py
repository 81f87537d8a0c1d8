"""Scripted interactions with real ``RaftNode``s, in the style of etcd's datadriven tests
(``raft/testdata/*.txt``): a script says what to do, the harness does it through the core's
driver API (``step``, ``poll``, ``advance``) and writes down what the nodes said.

A script is a list of cases, each a command line, ``----`` and the output it must produce,
ended by a blank line; lines starting with ``#`` between cases are comments::

    # Node 3 loses its link to the leader.
    cut 1 3
    ----
    ok

Commands (ids are node ids; ``from`` may be any id, e.g. an admin tool or a forger):

- ``cluster voters=1,2,3 [observers=4] [controllers=4] [dynamic]``: start the nodes at time 0
  (``dynamic``: a KIP-853 quorum formatted with --initial-controllers; ``controllers``: more
  controllers outside the voter set, to be added; ``observers``: brokers).
- ``run <ms>``: let time pass, polling every running node at its ``next_poll_at_ms`` and
  delivering what they send at once (a perfect network, but for ``cut`` links).
- ``deliver [from=A] [to=B] [drop]``: deliver (or drop) the queued messages (requests queued
  by ``request``), then poll the nodes that received one. ``stabilize``: deliver until nothing
  is queued, without time passing.
- ``cut A B`` / ``heal``: drop everything between A and B (both ways) / no more.
- ``stop A``: the process dies: requests to it fail as a refused connection.
- ``request from=F to=T <rpc> key=value...``: queue a request from F (``vote``,
  ``pre-vote``, ``begin-quorum-epoch``, ``add-voter``, ``remove-voter``).
- ``status``: each node's role, epoch, leader, high watermark, log end and voters.

Output lines: ``1: became_leader epoch=1 reason='won election'`` for an event of node 1's
Ready, and ``77 <- 1 VoterChangeResponse ...`` for an answer to an id outside the cluster.
With the flag ``messages`` a command also shows what the nodes send (``1->2 Vote pre epoch=2
last=(1,1)``), with ``fetches`` the Fetch traffic, which flows all the time. Rerun with
``REWRITE_TESTDATA=1`` to write the outputs anew (then read the diff).
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, field

from quorum.errors import ErrorCode
from quorum.ids import METADATA_TOPIC_ID, Uuid
from quorum.metadata.records import BrokerEndpoint
from quorum.raft.config import RaftConfig
from quorum.raft.messages import (
    AddRaftVoterRequest,
    BeginQuorumEpochRequest,
    BeginQuorumEpochResponse,
    EndQuorumEpochRequest,
    EndQuorumEpochResponse,
    Envelope,
    FetchRequest,
    FetchResponse,
    Message,
    RemoveRaftVoterRequest,
    RequestFailed,
    RequestHeader,
    VoterChangeResponse,
    VoteRequest,
    VoteResponse,
)
from quorum.raft.node import RaftNode, Ready
from quorum.raft.voters import (
    KRAFT_VERSION_DYNAMIC,
    KRAFT_VERSION_STATIC,
    ReplicaKey,
    VoterNode,
    VoterSet,
)

CLUSTER_ID = "interaction-cluster"
HEADER = RequestHeader(CLUSTER_ID, METADATA_TOPIC_ID, 0)
ENDPOINT = (BrokerEndpoint("CONTROLLER", "localhost", 9093),)
POLLS_PER_RUN_MAX = 100_000
ROUNDS_PER_STABILIZE_MAX = 200


def directory_id(node_id: int) -> Uuid:
    """A fixed directory id per node, so that outputs do not change from run to run."""
    return Uuid.random(random.Random(node_id))


def ids(text: str) -> list[int]:
    return [int(part) for part in text.split(",") if part]


def describe(message: Message) -> str:
    """One line for a message: its kind and the fields a reader of the script cares about."""
    error = getattr(message, "error_code", ErrorCode.NONE)
    suffix = "" if error is ErrorCode.NONE else f" error={error.name}"
    match message:
        case VoteRequest():
            kind = "Vote pre" if message.pre_vote else "Vote"
            return (
                f"{kind} epoch={message.candidate_epoch} "
                f"last=({message.last_offset_epoch},{message.last_offset})"
            )
        case VoteResponse():
            kind = "VoteResponse pre" if message.pre_vote else "VoteResponse"
            return (
                f"{kind} granted={message.vote_granted} epoch={message.leader_epoch} "
                f"leader={message.leader_id}{suffix}"
            )
        case BeginQuorumEpochRequest():
            return f"BeginQuorumEpoch leader={message.leader_id} epoch={message.leader_epoch}"
        case EndQuorumEpochRequest():
            return (
                f"EndQuorumEpoch leader={message.leader_id} epoch={message.leader_epoch} "
                f"successors={list(message.preferred_successors)}"
            )
        case BeginQuorumEpochResponse() | EndQuorumEpochResponse():
            return (
                f"{type(message).__name__} epoch={message.leader_epoch} "
                f"leader={message.leader_id}{suffix}"
            )
        case FetchRequest():
            return (
                f"Fetch offset={message.fetch_offset} epoch={message.last_fetched_epoch} "
                f"hw={message.high_watermark}"
            )
        case FetchResponse():
            what = ""
            if message.batches:
                what = (
                    f" batches=[{message.batches[0].base_offset},{message.batches[-1].end_offset})"
                )
            if message.diverging_epoch is not None:
                what = f" diverging={message.diverging_epoch}"
            return (
                f"FetchResponse epoch={message.leader_epoch} leader={message.leader_id} "
                f"hw={message.high_watermark}{what}{suffix}"
            )
        case AddRaftVoterRequest():
            return f"AddRaftVoter voter={message.voter_id} timeout={message.timeout_ms}"
        case RemoveRaftVoterRequest():
            return f"RemoveRaftVoter voter={message.voter_id}"
        case VoterChangeResponse():
            text = f" message={message.error_message!r}" if message.error_message else ""
            return f"VoterChangeResponse error={message.error_code.name}{text}"
        case RequestFailed():
            return f"RequestFailed {message.reason!r}" + (" peer_gone" if message.peer_gone else "")
    return type(message).__name__


def is_fetch(message: Message) -> bool:
    return isinstance(message, FetchRequest | FetchResponse)


@dataclass
class Interaction:
    """A few nodes on a virtual clock and a queue of messages between them."""

    nodes: dict[int, RaftNode] = field(default_factory=dict)
    next_poll_at_ms: dict[int, int] = field(default_factory=dict)
    stopped: set[int] = field(default_factory=set)
    cut: set[tuple[int, int]] = field(default_factory=set)
    queue: list[Envelope] = field(default_factory=list)
    # Requests a node received and has not answered yet (a parked Fetch): when it stops, the
    # kernel resets their connections.
    open_requests: dict[int, dict[tuple[int, int], Envelope]] = field(default_factory=dict)
    now_ms: int = 0
    out: list[str] = field(default_factory=list)
    show_messages: bool = False
    show_fetches: bool = False

    # ----- the commands ---------------------------------------------------------------------

    def run(self, command: str) -> str:
        """Carry out one command line; returns its output."""
        name, *words = command.split()
        args = {k: v for k, _, v in (w.partition("=") for w in words if "=" in w)}
        flags = {w for w in words if "=" not in w}
        self.out = []
        self.show_messages = "messages" in flags
        self.show_fetches = "fetches" in flags
        handlers: dict[str, Callable[[dict[str, str], set[str]], None]] = {
            "cluster": self._cluster,
            "run": self._run,
            "deliver": self._deliver,
            "stabilize": self._stabilize,
            "cut": self._cut,
            "heal": self._heal,
            "stop": self._stop,
            "request": self._request,
            "status": self._status,
        }
        handlers[name](args, flags)
        return "\n".join(self.out) if self.out else "ok"

    def _cluster(self, args: dict[str, str], flags: set[str]) -> None:
        voters = ids(args["voters"])
        controllers = ids(args.get("controllers", ""))
        observers = ids(args.get("observers", ""))
        dynamic = "dynamic" in flags
        config = RaftConfig()
        for node_id in voters + controllers + observers:
            if dynamic:
                bootstrap: frozenset[int] | VoterSet = (
                    VoterSet(VoterNode(ReplicaKey(v, directory_id(v)), ENDPOINT) for v in voters)
                    if node_id in voters
                    else VoterSet()
                )
            else:
                bootstrap = frozenset(voters)
            self.nodes[node_id] = RaftNode(
                node_id=node_id,
                voters=bootstrap,
                cluster_id=CLUSTER_ID,
                config=config,
                rng=random.Random(node_id),
                now_ms=self.now_ms,
                directory_id=directory_id(node_id) if dynamic else None,
                kraft_version=KRAFT_VERSION_DYNAMIC if dynamic else KRAFT_VERSION_STATIC,
                bootstrap_ids=tuple(voters) if dynamic else (),
                persists_election=node_id not in observers,
            )
            self.next_poll_at_ms[node_id] = self.now_ms
        self._status({}, set())

    def _run(self, args: dict[str, str], flags: set[str]) -> None:
        (ms,) = (w for w in flags if w.isdigit())
        target = self.now_ms + int(ms)
        for _ in range(POLLS_PER_RUN_MAX):
            if self.queue:
                self._deliver({}, flags)
                continue
            due = [t for n, t in self.next_poll_at_ms.items() if n not in self.stopped]
            if not due or min(due) > target:
                break
            self.now_ms = max(self.now_ms, min(due))
            for node_id in sorted(self.next_poll_at_ms):
                if node_id not in self.stopped and self.next_poll_at_ms[node_id] <= self.now_ms:
                    self._poll(node_id)
        else:  # pragma: no cover - a node that always wants polling again at once
            raise AssertionError(f"{POLLS_PER_RUN_MAX} rounds within one run")
        self.now_ms = target

    def _deliver(self, args: dict[str, str], flags: set[str]) -> None:
        source, destination = args.get("from"), args.get("to")
        chosen = [
            e
            for e in self.queue
            if (source is None or e.source == int(source))
            and (destination is None or e.destination == int(destination))
        ]
        self.queue = [e for e in self.queue if e not in chosen]
        stepped: set[int] = set()
        for envelope in chosen:
            if "drop" in flags or (envelope.source, envelope.destination) in self.cut:
                self._say(f"dropped {envelope.source}->{envelope.destination}", envelope)
                continue
            node = self.nodes.get(envelope.destination)
            if node is None:  # an answer to an id outside the cluster
                self.out.append(
                    f"{envelope.destination} <- {envelope.source} {describe(envelope.message)}"
                )
                continue
            if envelope.destination in self.stopped:
                if envelope.is_request:  # the kernel refuses the connection
                    failed = RequestFailed("connection refused", peer_gone=True)
                    self.queue.append(
                        Envelope(
                            envelope.destination, envelope.source, envelope.correlation_id, failed
                        )
                    )
                continue
            if envelope.is_request:
                key = (envelope.source, envelope.correlation_id)
                self.open_requests.setdefault(envelope.destination, {})[key] = envelope
            node.step(envelope, self.now_ms)
            stepped.add(envelope.destination)
        for node_id in sorted(stepped):
            self._poll(node_id)

    def _stabilize(self, args: dict[str, str], flags: set[str]) -> None:
        for _ in range(ROUNDS_PER_STABILIZE_MAX):
            if not self.queue:
                return
            self._deliver({}, flags)
        raise AssertionError(f"not stable after {ROUNDS_PER_STABILIZE_MAX} rounds")

    def _cut(self, args: dict[str, str], flags: set[str]) -> None:
        a, b = (int(w) for w in sorted(flags))
        self.cut |= {(a, b), (b, a)}

    def _heal(self, args: dict[str, str], flags: set[str]) -> None:
        self.cut.clear()

    def _stop(self, args: dict[str, str], flags: set[str]) -> None:
        (node_id,) = (int(w) for w in flags if w.isdigit())
        self.stopped.add(node_id)
        for request in self.open_requests.pop(node_id, {}).values():
            failed = RequestFailed("connection reset", peer_gone=True)
            self.queue.append(Envelope(node_id, request.source, request.correlation_id, failed))

    def _request(self, args: dict[str, str], flags: set[str]) -> None:
        source, destination = int(args["from"]), int(args["to"])
        (rpc,) = flags
        message: Message
        match rpc:
            case "vote" | "pre-vote":
                epoch = int(args["epoch"])
                message = VoteRequest(
                    HEADER,
                    epoch,
                    source,
                    epoch - 1,
                    int(args.get("last", "0")),
                    rpc == "pre-vote",
                    destination,
                )
            case "begin-quorum-epoch":
                message = BeginQuorumEpochRequest(
                    HEADER, int(args["leader"]), int(args["epoch"]), destination
                )
            case "add-voter":
                voter = int(args["voter"])
                message = AddRaftVoterRequest(
                    CLUSTER_ID, voter, directory_id(voter), ENDPOINT, int(args["timeout"])
                )
            case "remove-voter":
                voter = int(args["voter"])
                message = RemoveRaftVoterRequest(CLUSTER_ID, voter, directory_id(voter))
            case _:
                raise AssertionError(f"unknown rpc {rpc!r}")
        self.queue.append(Envelope(source, destination, 1_000_000 + len(self.queue), message))

    def _status(self, args: dict[str, str], flags: set[str]) -> None:
        for node_id, node in sorted(self.nodes.items()):
            if node_id in self.stopped:
                self.out.append(f"{node_id}: stopped")
                continue
            voters = ",".join(str(v) for v in sorted(node.voters))
            self.out.append(
                f"{node_id}: {node.state.name} epoch={node.epoch} leader={node.leader_id} "
                f"hw={node.high_watermark} end={node.log_end_offset} voters=[{voters}]"
                + ("" if node.is_voter else " (not a voter)")
            )

    # ----- the driver loop of one node ------------------------------------------------------

    def _poll(self, node_id: int) -> None:
        node = self.nodes[node_id]
        ready: Ready = node.poll(self.now_ms)
        for event in ready.events:
            fields = " ".join(f"{k}={v!r}" for k, v in event.fields.items() if k != "epoch")
            self.out.append(
                f"{node_id}: {event.name} epoch={event.fields['epoch']} {fields}".rstrip()
            )
        for envelope in ready.messages_to_send:
            self._say(f"{envelope.source}->{envelope.destination}", envelope)
            if not envelope.is_request:
                key = (envelope.destination, envelope.correlation_id)
                self.open_requests.get(node_id, {}).pop(key, None)
            self.queue.append(envelope)
        node.advance(ready)  # durable at once: this harness has no disk to wait for
        self.next_poll_at_ms[node_id] = ready.next_poll_at_ms

    def _say(self, prefix: str, envelope: Envelope) -> None:
        fetch = is_fetch(envelope.message)
        if (self.show_messages and not fetch) or (self.show_fetches and fetch):
            self.out.append(f"{prefix} {describe(envelope.message)}")
