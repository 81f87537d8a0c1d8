"""Scenario families for the simulator. Each takes a fresh ``SimCluster`` and drives faults;
the invariants run after every event, and ``heal_and_check_liveness`` ends each one.

Reproduce one schedule: ``SIM_SEED=<seed> .venv/bin/pytest tests/sim/test_sim.py -k <family>``.
"""

from __future__ import annotations

from collections.abc import Callable

from quorum import limits
from quorum.errors import ErrorCode
from quorum.ids import METADATA_TOPIC_ID
from quorum.metadata.records import BrokerEndpoint, ConfigRecord, ConfigResourceType
from quorum.raft.messages import (
    AddRaftVoterRequest,
    BeginQuorumEpochRequest,
    DescribeQuorumRequest,
    EndQuorumEpochRequest,
    Envelope,
    FetchRequest,
    Message,
    RemoveRaftVoterRequest,
    RequestFailed,
    RequestHeader,
    VoterChangeResponse,
    VoteRequest,
)
from quorum.raft.state import CandidateState
from quorum.raft.voters import ReplicaKey
from tests.sim.cluster import CLUSTER_ID, SimCluster
from tests.sim.scheduler import SimulationError

# Bounds on virtual time (ms). With Kafka's timings (election timeout 1-2 s, fetch timeout
# 2 s, backoff <= 1 s), a leader with a connected majority appears well within these.
FIRST_LEADER_MS_MAX = 15_000
RECOVERY_MS_MAX = 20_000
CLIENT_INTERVAL_MS = 60


def warm_up(c: SimCluster) -> None:
    c.start()
    c.run_until(c.has_leader, FIRST_LEADER_MS_MAX, "first leader")
    c.start_client(CLIENT_INTERVAL_MS)
    c.run_for(c.rng.randint(300, 1500))


def heal_and_check_liveness(c: SimCluster) -> None:
    """After the faults stop and every node is back, a leader appears and the high watermark
    moves past everything committed before; every voter catches up."""
    c.network.faults.heal()
    for node_id in c.nodes:
        c.restart(node_id)
    committed_before = c.invariants.committed_end

    def progressed() -> bool:
        leader = c.leader()
        return (
            leader is not None
            and leader.raft is not None
            and leader.raft.high_watermark > committed_before
        )

    c.run_until(progressed, RECOVERY_MS_MAX, "a leader and a moving high watermark after healing")
    c.stop_client()
    leader = c.leader()
    assert leader is not None and leader.raft is not None
    target = leader.raft.high_watermark

    def caught_up() -> bool:
        return all(n.raft is not None and n.raft.high_watermark >= target for n in c.nodes.values())

    c.run_until(caught_up, RECOVERY_MS_MAX, "every node catching up to the high watermark")
    check_acked_present(c)


def check_acked_present(c: SimCluster) -> None:
    """I6: every acknowledged proposal is in the current leader's log, same epoch, same offset."""
    leader = c.leader()
    if leader is None or leader.raft is None:
        return
    log = leader.raft.log
    for proposal in c.client.acked:
        if proposal.last_offset < log.log_start_offset:
            # In the leader's snapshot, which I13 checked equal to the committed log.
            batch = c.batch_containing(c.invariants.committed, proposal.last_offset)
            if batch is None or batch.epoch != proposal.epoch:
                raise SimulationError(
                    f"seed {c.seed}: I6 (acknowledged not lost): offset {proposal.last_offset} "
                    "is not in the committed log the snapshot holds"
                )
            continue
        if proposal.last_offset >= log.log_end_offset:
            raise SimulationError(
                f"seed {c.seed}: I6 (acknowledged not lost): offset {proposal.last_offset} "
                f"missing from leader {leader.node_id}"
            )
        if log.epoch_of(proposal.last_offset) != proposal.epoch:
            raise SimulationError(
                f"seed {c.seed}: I6 (acknowledged not lost): offset {proposal.last_offset} "
                f"was acknowledged in epoch {proposal.epoch}, leader has epoch "
                f"{log.epoch_of(proposal.last_offset)}"
            )


def everyone(c: SimCluster) -> set[int]:
    return set(c.nodes)


# ----- families ------------------------------------------------------------------------------


def random_drops(c: SimCluster) -> None:
    """F1: random message loss of 5-50 % while clients propose."""
    warm_up(c)
    for _ in range(3):
        c.network.faults.drop_probability = c.rng.uniform(0.05, 0.5)
        c.run_for(c.rng.randint(1000, 3000))
    heal_and_check_liveness(c)


def duplicate_reorder(c: SimCluster) -> None:
    """F2: duplicated messages and wide random delays (reordering) on every link."""
    warm_up(c)
    faults = c.network.faults
    faults.duplicate_probability = c.rng.uniform(0.05, 0.3)
    faults.delay_ms_min, faults.delay_ms_max = 1, c.rng.randint(20, 150)
    faults.drop_probability = c.rng.uniform(0.0, 0.1)
    c.run_for(c.rng.randint(3000, 6000))
    heal_and_check_liveness(c)


def isolate_leader(c: SimCluster) -> None:
    """F3: cut the leader off; the rest elect a new one; heal."""
    warm_up(c)
    for _ in range(2):
        leader = c.leader()
        if leader is not None:
            c.network.faults.isolate(leader.node_id, everyone(c))
        c.run_for(c.rng.randint(2500, 6000))
        c.network.faults.heal()
        c.run_for(c.rng.randint(500, 2000))
    heal_and_check_liveness(c)


def isolate_follower_prevote(c: SimCluster) -> None:
    """F4 + I14: a follower cut off for a long time rejoins without raising the epoch of a
    healthy leader (pre-vote, KIP-996)."""
    warm_up(c)
    leader = c.leader()
    assert leader is not None and leader.raft is not None
    epoch = leader.raft.epoch
    follower = c.rng.choice([v for v in c.voter_ids if v != leader.node_id])
    c.network.faults.isolate(follower, everyone(c))
    c.run_for(10 * c.config.election_timeout_ms + c.rng.randint(0, 3000))
    c.network.faults.heal()
    node = c.nodes[follower]
    c.run_until(
        lambda: (
            node.raft is not None
            and node.raft.leader_id == leader.node_id
            and node.raft.high_watermark > 0
        ),
        RECOVERY_MS_MAX,
        "the isolated follower rejoining",
    )
    c.run_for(2000)
    if leader.raft is None or not leader.raft.is_leader() or leader.raft.epoch != epoch:
        raise SimulationError(
            f"seed {c.seed}: I14 (no disruption): leader {leader.node_id} of epoch {epoch} "
            f"was disturbed by rejoining follower {follower}: now {leader.raft!r}"
        )
    heal_and_check_liveness(c)


def refused_link_to_live_leader(c: SimCluster) -> None:
    """F27 + I14: a follower's requests to a live leader are refused at once (connection
    refused, as when a port is closed or a proxy resets), now and then, while the leader and
    the other voters are fine. The follower takes that for a dead leader and asks for a
    pre-vote early (``RaftConfig.election_on_connection_loss``), but the voters that still
    hear the leader deny it: the leader keeps its epoch."""
    warm_up(c)
    leader = c.leader()
    assert leader is not None and leader.raft is not None
    epoch = leader.raft.epoch
    for _ in range(3):
        follower = c.rng.choice([v for v in c.voter_ids if v != leader.node_id])
        c.network.faults.refused.add((follower, leader.node_id))
        c.run_for(c.rng.randint(200, 3 * c.config.fetch_timeout_ms))
        c.network.faults.refused.clear()
        c.run_for(c.rng.randint(100, 1000))
    if leader.raft is None or not leader.raft.is_leader() or leader.raft.epoch != epoch:
        raise SimulationError(
            f"seed {c.seed}: I14 (no disruption): leader {leader.node_id} of epoch {epoch} "
            f"was deposed through refused connections: now {leader.raft!r}"
        )
    heal_and_check_liveness(c)


def split_majority_minority(c: SimCluster) -> None:
    """F6: a 2|1 (or 2|3, 3|2) split; the minority makes no progress, the majority does."""
    warm_up(c)
    ids = list(c.voter_ids)
    c.rng.shuffle(ids)
    minority = set(ids[: len(ids) // 2])
    majority = set(ids) - minority
    c.network.faults.partition(minority, majority | set(c.observer_ids))
    committed = c.invariants.committed_end
    c.run_until(
        lambda: (
            (lead := c.leader()) is not None
            and lead.node_id in majority
            and lead.raft is not None
            and lead.raft.high_watermark > committed
        ),
        RECOVERY_MS_MAX,
        "the majority side committing",
    )
    c.run_for(c.rng.randint(1000, 3000))
    heal_and_check_liveness(c)


def bridge(c: SimCluster) -> None:
    """F5: partial connectivity A-B, B-C, but not A-C."""
    warm_up(c)
    ids = list(c.voter_ids)
    c.rng.shuffle(ids)
    a, _, rest_c = ids[0], ids[1], ids[2]
    c.network.faults.cut(a, rest_c)
    c.run_for(c.rng.randint(4000, 8000))
    heal_and_check_liveness(c)


def back_to_back_leader_failures(c: SimCluster) -> None:
    """F7: partition the leader; when a new one appears, heal the old and partition the new."""
    warm_up(c)
    for _ in range(3):
        leader = c.leader()
        if leader is None:
            c.run_until(c.has_leader, RECOVERY_MS_MAX, "a leader between failures")
            leader = c.leader()
        assert leader is not None
        c.network.faults.heal()
        c.network.faults.isolate(leader.node_id, everyone(c))
        old = leader.node_id
        c.run_until(
            lambda old=old: (lead := c.leader()) is not None and lead.node_id != old,  # type: ignore[misc]
            RECOVERY_MS_MAX,
            "a new leader after isolating the old one",
        )
    heal_and_check_liveness(c)


def crash_restart(c: SimCluster) -> None:
    """F8/F10/F12: kill -9 nodes at random moments (losing what was not fsynced), restart
    them, sometimes kill every node and bring back only a majority first."""
    warm_up(c)
    for _ in range(4):
        if c.rng.random() < 0.25:
            for nid in c.nodes:
                c.crash(nid)
            c.run_for(c.rng.randint(10, 300))
            back = c.rng.sample(c.voter_ids, c.majority)
            for nid in back:
                c.restart(nid)
        else:
            victim = c.rng.choice(c.voter_ids + c.observer_ids)
            if c.rng.random() < 0.6 and (leader := c.leader()) is not None:
                victim = leader.node_id
            c.crash(victim)
            c.run_for(c.rng.randint(50, 3000))
            c.restart(victim)
        c.run_for(c.rng.randint(200, 2500))
    heal_and_check_liveness(c)


def vote_amnesia(c: SimCluster) -> None:
    """Election storms: every voter restarts at once, links are slow so candidacies overlap,
    and when two candidates run in one epoch the voter that already voted crashes and comes
    back at once. A voter that forgot its vote would elect two leaders in one epoch (I1)."""
    c.start()
    c.network.faults.delay_ms_min, c.network.faults.delay_ms_max = 100, 400

    def candidates() -> list[tuple[int, int]]:
        return [
            (n.raft.epoch, n.node_id)
            for n in c.voters()
            if n.raft is not None and isinstance(n.raft.state, CandidateState)
        ]

    def voted_in(epoch: int, running: set[int]) -> list[int]:
        return [
            n.node_id
            for n in c.voters()
            if n.raft is not None
            and n.node_id not in running
            and n.raft.epoch == epoch
            and getattr(n.raft.state, "voted_id", None) is not None
        ]

    def contested() -> bool:
        """Two candidates in one epoch and a voter that already voted in it (or a leader)."""
        running = candidates()
        epochs = [epoch for epoch, _ in running]
        for epoch in set(epochs):
            if epochs.count(epoch) >= 2 and voted_in(epoch, {nid for _, nid in running}):
                return True
        return c.has_leader()

    for _ in range(8):
        c.run_until(contested, RECOVERY_MS_MAX, "a contested election or a leader")
        running = candidates()
        epochs = [epoch for epoch, _ in running]
        contested_epochs = [e for e in set(epochs) if epochs.count(e) >= 2]
        voters_who_voted = (
            voted_in(contested_epochs[0], {nid for _, nid in running}) if contested_epochs else []
        )
        if voters_who_voted:
            victim = c.rng.choice(voters_who_voted)
            c.crash(victim)
            c.run_for(c.rng.randint(5, 60))
            c.restart(victim)
        c.run_for(c.rng.randint(1000, 3000))
        for nid in c.voter_ids:
            c.crash(nid)
        for nid in c.voter_ids:
            c.restart(nid)
    heal_and_check_liveness(c)


def figure8(c: SimCluster) -> None:
    """The Raft paper's figure 8, choreographed (3 voters, one batch per Fetch response): an
    entry X of an old epoch reaches a majority through a later leader, which must not count it
    committed before an entry of its own epoch is on a majority; otherwise a third leader
    overwrites a committed entry (I5)."""
    warm_up(c)
    c.stop_client()
    everybody = everyone(c)
    leader = c.leader()
    assert leader is not None and leader.raft is not None

    def caught_up() -> bool:
        lead = c.leader()
        if lead is None or lead.raft is None:
            return False
        end = lead.raft.log_end_offset
        return lead.raft.high_watermark == end and all(
            n.raft is not None and n.raft.log_end_offset == end for n in c.voters()
        )

    c.run_until(caught_up, RECOVERY_MS_MAX, "voters caught up before the choreography")
    a = c.leader()
    assert a is not None and a.raft is not None
    c.network.faults.isolate(a.node_id, everybody)
    k = a.raft.log_end_offset
    a.proposals.append([ConfigRecord(ConfigResourceType.TOPIC, "figure8-X", "k", "x")])
    a.schedule_wake(c.scheduler.now_ms)
    c.run_until(lambda: a.disk_end_offset() > k, RECOVERY_MS_MAX, "X durable on the old leader")
    c.crash(a.node_id)
    c.network.faults.heal()
    c.run_until(
        lambda: (lead := c.leader()) is not None and lead.node_id != a.node_id,
        RECOVERY_MS_MAX,
        "a second leader without X",
    )
    w = c.leader()
    assert w is not None
    c.network.faults.isolate(w.node_id, everybody)
    c.run_until(
        lambda: w.disk_end_offset() > k, RECOVERY_MS_MAX, "the second leader's entry durable"
    )
    c.crash(w.node_id)
    c.restart(a.node_id)
    c.run_until(
        lambda: a.raft is not None and a.raft.is_leader() and a.raft.high_watermark > k,
        RECOVERY_MS_MAX,
        "the old leader back and committing past X",
    )
    other = next(v for v in c.voter_ids if v not in (a.node_id, w.node_id))
    c.network.faults.heal()
    c.network.faults.cut(a.node_id, other)
    c.crash(a.node_id)
    c.restart(w.node_id)
    c.run_for(c.rng.randint(6000, 9000))
    heal_and_check_liveness(c)


def snapshots(c: SimCluster) -> None:
    """KIP-630: every node snapshots at random points and drops the log before it; a node
    brought back from far behind (or with a wiped disk) must use FetchSnapshot, observers too;
    leaders keep changing meanwhile. I13 is checked at every snapshot and install."""
    warm_up(c)
    c.start_snapshots(c.rng.randint(200, 800))
    for _ in range(3):
        victim = c.rng.choice(c.voter_ids + c.observer_ids)
        c.crash(victim)
        if c.rng.random() < 0.3:
            node = c.nodes[victim]
            if node.node_id in c.observer_ids:
                node.disk_batches, node.disk_snapshot, node.disk_snapshot_batches = [], None, ()
        c.run_for(c.rng.randint(1500, 4000))
        if c.rng.random() < 0.4 and (leader := c.leader()) is not None and leader.node_id != victim:
            c.crash(leader.node_id)
            c.run_for(c.rng.randint(100, 2500))
            c.restart(leader.node_id)
        c.restart(victim)
        c.run_for(c.rng.randint(500, 2500))
    heal_and_check_liveness(c)


HOSTILE_ID = 66  # outside the voter set and the observers


class HostilePeer:
    """Issue #12's outsider: sends well-formed requests with any ids and epochs, in its own
    name or spoofing any voter's or observer's, to random nodes: Votes and pre-votes for the
    next epoch or up to INT32_MAX, BeginQuorumEpoch for the current epoch naming anyone (the
    receiver included) or a later one, EndQuorumEpoch for leaders that did not resign, Fetches
    from observer ids at any offset, DescribeQuorum. Only requests: a response can only come
    back on the connection of the request it answers.

    Excluded, because nothing can refuse it without authentication (mTLS, the next issue;
    docs/architecture.md#hostile-peers): a Fetch in a voter's name, which the leader must take
    as that voter's progress, so it can commit what only the leader holds (I4)."""

    def __init__(self, c: SimCluster) -> None:
        self.c = c
        self.rng = c.rng
        self.correlation_id = 1_000_000_000  # far above the nodes' own counters
        self.sent = 0
        self.active = False

    def start(self) -> None:
        self.active = True
        self._schedule()

    def stop(self) -> None:
        self.active = False

    def _schedule(self) -> None:
        self.c.scheduler.after(self.rng.randint(2, 40), "hostile", self._tick)

    def _tick(self) -> None:
        if not self.active:
            return
        for _ in range(self.rng.randint(1, 3)):
            self._send_one()
        self._schedule()

    def _epoch(self) -> int:
        current = self.c.max_epoch()
        return self.rng.choice(
            [
                current,
                current,
                current + 1,
                current + self.rng.randint(2, 5),
                max(0, current - 1),
                limits.EPOCH_MAX,
                limits.EPOCH_MAX + 1,
                limits.INT32_MAX,
                -1,
            ]
        )

    def _send_one(self) -> None:
        rng, c = self.rng, self.c
        target = rng.choice(c.voter_ids + c.observer_ids)
        voters = c.voter_ids
        header = RequestHeader(CLUSTER_ID if rng.random() < 0.95 else "", METADATA_TOPIC_ID, 0)
        node = c.nodes[target].raft
        end = node.log_end_offset if node is not None else 0
        offset = rng.choice([0, end, end + 1, end + 1_000, -1])
        kind = rng.randrange(5)
        message: Message
        if kind == 0:
            candidate = rng.choice([*voters, HOSTILE_ID])
            epoch = self._epoch()
            message = VoteRequest(
                header,
                epoch,
                candidate,
                rng.randint(0, max(0, min(epoch, c.max_epoch() + 1))),
                offset,
                rng.random() < 0.5,
                target,
            )
            source = candidate
        elif kind == 1:
            leader = rng.choice([*voters, HOSTILE_ID])
            message = BeginQuorumEpochRequest(header, leader, self._epoch(), target)
            source = leader
        elif kind == 2:
            leader = rng.choice(voters)
            successors = [v for v in voters if v != leader]
            rng.shuffle(successors)
            message = EndQuorumEpochRequest(header, leader, self._epoch(), tuple(successors))
            source = leader
        elif kind == 3:
            replica = rng.choice([*c.observer_ids, HOSTILE_ID, 1_000 + rng.randrange(50)])
            epoch = self._epoch()
            message = FetchRequest(
                header,
                replica,
                epoch,
                offset,
                rng.randint(0, max(0, min(epoch, c.max_epoch()))),
                rng.choice([0, 500, -1]),
                rng.choice([1 << 20, 0]),
                rng.choice([0, end, -1]),
            )
            source = replica
        else:
            message = DescribeQuorumRequest(header)
            source = HOSTILE_ID
        self.correlation_id += 1
        self.sent += 1
        c.send(Envelope(source, target, self.correlation_id, message))


def hostile_peer(c: SimCluster) -> None:
    """Issue #12: a hostile peer (see ``HostilePeer``) while clients propose, with crashes
    and a partition on top; invariants after every event; liveness once it stops and the
    faults heal (what it can break without authentication is excluded at the source)."""
    warm_up(c)
    peer = HostilePeer(c)
    peer.start()
    for _ in range(3):
        c.run_for(c.rng.randint(800, 2500))
        if c.rng.random() < 0.4:
            victim = c.rng.choice(c.voter_ids + c.observer_ids)
            c.crash(victim)
            c.run_for(c.rng.randint(50, 1500))
            c.restart(victim)
        elif c.rng.random() < 0.3 and (leader := c.leader()) is not None:
            c.network.faults.isolate(leader.node_id, everyone(c))
            c.run_for(c.rng.randint(500, 3000))
            c.network.faults.heal()
    peer.stop()
    heal_and_check_liveness(c)
    assert peer.sent > 0


def lost_write(c: SimCluster) -> None:
    """Issue 28: a voter's key used to forge a Fetch in its name claiming the leader's log end
    while both followers are down, so the leader commits a batch only it holds and the
    observer applies it; then the leader dies and the followers elect a leader without it.
    The observer is told to truncate below its high watermark: it must discard its log and
    converge to the quorum's, never loop (quorum/raft/prefix_divergence.py). Not a family:
    the checkers are told the quorum loses a committed write on purpose (I4, I5)."""
    c.invariants.lost_writes_allowed = True
    warm_up(c)
    c.stop_client()
    c.run_for(600)
    leader = c.leader()
    assert leader is not None and leader.raft is not None
    followers = [v for v in c.voter_ids if v != leader.node_id]
    for follower in followers:
        c.crash(follower)
    leader.proposals.append([ConfigRecord(ConfigResourceType.TOPIC, "lost", "k", "v")])
    leader.schedule_wake(c.scheduler.now_ms)
    c.run_for(50)
    raft = leader.raft
    end, epoch = raft.log_end_offset, raft.epoch
    header = RequestHeader(CLUSTER_ID, raft.metadata_topic_id or METADATA_TOPIC_ID, 0)
    forged = FetchRequest(header, followers[0], epoch, end, epoch, 0, 1 << 20)
    c.send(Envelope(followers[0], leader.node_id, 1_500_000_000, forged))

    def observers_applied() -> bool:
        return all(
            (raft := c.nodes[o].raft) is not None and raft.high_watermark >= end
            for o in c.observer_ids
        )

    c.run_until(
        observers_applied, RECOVERY_MS_MAX, "observers applying the write only the leader holds"
    )
    # The client was told it committed; the quorum is about to lose it (what I6 would catch).
    c.client.acked = [p for p in c.client.acked if p.value != "lost"]
    c.crash(leader.node_id)
    for follower in followers:
        c.restart(follower)
    c.run_until(
        lambda: (new := c.leader()) is not None and new.node_id in followers,
        RECOVERY_MS_MAX,
        "the followers electing a leader without the lost write",
    )
    heal_and_check_liveness(c)


# ----- reconfiguration (KIP-853) --------------------------------------------------------------

VOTER_CHANGE_WAIT_MS = 8_000
SIM_ENDPOINT = (BrokerEndpoint("CONTROLLER", "sim", 9093),)


def run_until_or_not(c: SimCluster, condition: Callable[[], bool], timeout_ms: int) -> bool:
    """Run until ``condition`` holds or ``timeout_ms`` passed; whether it held (a voter change
    may legitimately get no answer: its leader crashed)."""
    end = c.scheduler.now_ms + timeout_ms
    while not condition():
        next_at = c.scheduler.next_at_ms()
        if next_at is None or next_at > end:
            c.scheduler.now_ms = max(c.scheduler.now_ms, min(end, next_at or end))
            return condition()
        c._run_one()
    return True


class VoterAdmin:
    """The simulated `metaquorum quorum add-controller / remove-controller`: sends the change to
    the leader it finds and waits (bounded) for the answer; counts the outcomes."""

    def __init__(self, c: SimCluster) -> None:
        self.c = c
        self.outcomes: dict[str, int] = {}

    def current_voters(self) -> list[ReplicaKey]:
        leader = self.c.leader()
        assert leader is not None and leader.raft is not None
        return list(leader.raft.voter_set.voter_keys())

    def send(self, request: AddRaftVoterRequest | RemoveRaftVoterRequest) -> int | None:
        leader = self.c.leader()
        if leader is None:
            return None
        return self.c.send_admin(leader.node_id, request)

    def wait(self, correlation_id: int | None) -> ErrorCode | None:
        if correlation_id is None:
            return None
        answers = self.c.admin_answers
        run_until_or_not(self.c, lambda: correlation_id in answers, VOTER_CHANGE_WAIT_MS)
        answer = answers.pop(correlation_id, None)
        if answer is None or isinstance(answer, RequestFailed):
            self._count("no answer")  # lost with its leader
            return None
        assert isinstance(answer, VoterChangeResponse), answer
        self._count(answer.error_code.name)
        return answer.error_code

    def _count(self, outcome: str) -> None:
        self.outcomes[outcome] = self.outcomes.get(outcome, 0) + 1

    def add(self, node_id: int) -> int | None:
        node = self.c.nodes[node_id]
        assert node.directory_id is not None
        return self.send(
            AddRaftVoterRequest(CLUSTER_ID, node_id, node.directory_id, SIM_ENDPOINT, 6_000)
        )

    def remove(self, key: ReplicaKey) -> int | None:
        assert key.directory_id is not None
        return self.send(RemoveRaftVoterRequest(CLUSTER_ID, key.node_id, key.directory_id))


def _fault_during(c: SimCluster) -> None:
    """Schedule one fault to strike at a random moment of the coming voter change: a crash of
    the leader (a leader change), of any controller, or the leader cut off for a while."""
    kind = c.rng.random()
    delay = c.rng.randint(0, 400)
    controllers = [n for n in c.nodes if c.nodes[n].controller]

    def strike() -> None:
        leader = c.leader()
        if kind < 0.4 and leader is not None:
            victim = leader.node_id
        elif kind < 0.7:
            victim = c.rng.choice(controllers)
        else:
            if leader is not None:
                c.network.faults.isolate(leader.node_id, everyone(c))
                c.scheduler.after(c.rng.randint(1_000, 5_000), "heal", c.network.faults.heal)
            return
        c.crash(victim)
        c.scheduler.after(c.rng.randint(50, 2_500), "restart", lambda: c.restart(victim))

    c.scheduler.after(delay, "fault", strike)


def reconfiguration(c: SimCluster) -> None:
    """F26, KIP-853: voters added (spare controllers catch up as observers first) and removed,
    the leader itself included, one change at a time, while leaders crash and are cut off; a
    voter's disk wiped and the node back under a new directory id (it cannot vote as the old
    replica) until the old replica is removed and the new one added. Sometimes two removals
    are sent back to back: the second must be refused while the first is uncommitted. I1-I8,
    I13 and I18 after every event; liveness and acknowledged writes at the end."""
    warm_up(c)
    if c.rng.random() < 0.5:
        c.start_snapshots(c.rng.randint(300, 1_500))
    admin = VoterAdmin(c)
    wiped: ReplicaKey | None = None
    for _ in range(c.rng.randint(4, 7)):
        c.network.faults.heal()
        for node_id in c.nodes:
            c.restart(node_id)
        c.run_until(c.has_leader, RECOVERY_MS_MAX, "a leader before a voter change")
        voters = admin.current_voters()
        if wiped is None and len(voters) >= 3 and c.rng.random() < 0.25:
            leader = c.leader()
            assert leader is not None
            victim = c.rng.choice([k for k in voters if k.node_id != leader.node_id])
            c.crash(victim.node_id)
            c.nodes[victim.node_id].wipe()
            c.restart(victim.node_id)
            wiped = victim
            c.run_for(c.rng.randint(200, 1_500))
            continue
        if c.rng.random() < 0.6:
            _fault_during(c)
        if wiped is not None:
            # Replace a failed controller: remove the old replica; the new one (same id, new
            # directory) can be added like any other once it is gone.
            admin.wait(admin.remove(wiped))
            if c.leader() is not None and wiped not in admin.current_voters():
                wiped = None
            continue
        controllers = [n for n, node in c.nodes.items() if node.controller]
        ids = {k.node_id for k in voters}
        addable = [n for n in controllers if n not in ids and c.nodes[n].raft is not None]
        if addable and (len(voters) <= 2 or c.rng.random() < 0.5):
            admin.wait(admin.add(c.rng.choice(addable)))
        elif len(voters) >= 2:
            first, second = c.rng.sample(voters, 2) if len(voters) >= 3 else (voters[0], None)
            pending = admin.remove(first)
            if second is not None and c.rng.random() < 0.3:
                # Two changes at once: the second must wait for the first (KIP-853).
                admin.wait(admin.remove(second))
            admin.wait(pending)
        c.run_for(c.rng.randint(100, 1_500))
    c.network.faults.heal()
    for node_id in c.nodes:
        c.restart(node_id)
    while wiped is not None:
        c.run_until(c.has_leader, RECOVERY_MS_MAX, "a leader to remove the wiped voter")
        if wiped not in set(admin.current_voters()):
            break
        admin.wait(admin.remove(wiped))
    heal_and_check_liveness(c)
    c.reconfiguration_outcomes = admin.outcomes


FAMILIES: dict[str, Callable[[SimCluster], None]] = {
    "random_drops": random_drops,
    "duplicate_reorder": duplicate_reorder,
    "isolate_leader": isolate_leader,
    "isolate_follower_prevote": isolate_follower_prevote,
    "refused_link_to_live_leader": refused_link_to_live_leader,
    "split_majority_minority": split_majority_minority,
    "bridge": bridge,
    "back_to_back_leader_failures": back_to_back_leader_failures,
    "crash_restart": crash_restart,
    "vote_amnesia": vote_amnesia,
    "figure8": figure8,
    "snapshots": snapshots,
    "hostile_peer": hostile_peer,
    "reconfiguration": reconfiguration,
}
