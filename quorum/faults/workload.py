"""Clients that run admin operations against a real cluster and record every one of them
(invoke, complete: ok / error / unknown) for the history checker (``quorum.faults.checker``).

Each client is a thread with its own seeded ``random.Random`` and its own channels (one per
node, the tests' admin identity). It runs one operation at a time, on a few topic names shared
by all clients, so operations on one name overlap often; that is where linearizability bugs
show. Each call is one gRPC request with a deadline and no retry: a retry would hide what the
cluster answered. What a failure means for the checker:

- a definite answer (TOPIC_ALREADY_EXISTS, UNKNOWN_TOPIC_OR_PARTITION, UNKNOWN_TOPIC_ID) is an
  ERROR the model must explain;
- a write refused before anything was appended (NOT_CONTROLLER from a node that does not lead,
  a topic refused by validation, e.g. INVALID_REPLICATION_FACTOR while every broker is fenced)
  had no effect and says nothing about the topic: it is left out of the history;
- anything else on a write (a deadline, a lost connection, an answer whose message starts with
  ``OUTCOME_UNKNOWN``: NOT_CONTROLLER from a leader that lost its epoch after appending, or
  REQUEST_TIMED_OUT) is UNKNOWN: the write may or may not have happened;
- anything else on a read constrains nothing and is left out of the history.

Writes go to the controller the client last saw lead (NOT_CONTROLLER answers name it); reads go
there too, or to any controller with ``follower_read_ratio`` (followers redirect them with
NOT_CONTROLLER unless a negative control makes them answer), or to a broker with
``broker_read_ratio`` (brokers answer from their own image: checked for monotonic prefixes, not
for linearizability).
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import grpc

from quorum.errors import ErrorCode
from quorum.faults.history import Kind, Operation, Status
from quorum.ids import Uuid
from quorum.rpc.v1 import admin_pb2, admin_pb2_grpc
from quorum.security.tls import ClientSecurity
from quorum.server.admin_service import OUTCOME_UNKNOWN

# Errors that say for sure what the cluster's state was: the model must explain them.
DEFINITE_ERRORS = {
    ErrorCode.TOPIC_ALREADY_EXISTS: "TOPIC_ALREADY_EXISTS",
    ErrorCode.UNKNOWN_TOPIC_OR_PARTITION: "UNKNOWN_TOPIC_OR_PARTITION",
    ErrorCode.UNKNOWN_TOPIC_ID: "UNKNOWN_TOPIC_ID",
}
# The mix of operations (weights).
MIX: tuple[tuple[Kind, int], ...] = (
    (Kind.CREATE, 30),
    (Kind.DELETE_NAME, 12),
    (Kind.DELETE_ID, 8),
    (Kind.DESCRIBE_NAME, 25),
    (Kind.DESCRIBE_ID, 12),
    (Kind.LIST, 13),
)


# After a call failed at the transport, a client waits this long before its next call (as
# real clients back off), so a dead node is not hammered with calls that fail at once.
FAILURE_BACKOFF_S = 0.05


def _never_sent(error: grpc.RpcError) -> bool:
    """Whether gRPC says the call never reached a server (no connection could be made): then
    the write certainly had no effect. Anything else - a deadline, a reset mid-call - may
    have reached the node."""
    code = error.code() if isinstance(error, grpc.Call) else None
    details = (error.details() if isinstance(error, grpc.Call) else "") or ""
    return code == grpc.StatusCode.UNAVAILABLE and (
        "failed to connect" in details.lower() or "connection refused" in details.lower()
    )


@dataclass(frozen=True)
class Endpoint:
    """A node clients may call: ``name`` as histories show it ("controller-1", "broker-101")."""

    name: str
    address: str
    node_id: int
    is_broker: bool = False


@dataclass
class WorkloadConfig:
    names: tuple[str, ...] = ("t0", "t1", "t2", "t3")
    clients: int = 4
    call_timeout_s: float = 1.5
    follower_read_ratio: float = 0.15
    broker_read_ratio: float = 0.0
    # A pause between two operations of one client (0: none); keeps the history small enough
    # for the checker on long soaks.
    think_s: float = 0.0
    partitions: int = 1
    replication_factor: int = 1
    mix: tuple[tuple[Kind, int], ...] = MIX


@dataclass
class Recorder:
    """The shared history, in invocation order (``op_id``)."""

    operations: list[Operation] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _next_id: int = 0

    def next_id(self) -> int:
        with self._lock:
            self._next_id += 1
            return self._next_id

    def add(self, operation: Operation) -> None:
        with self._lock:
            self.operations.append(operation)

    def history(self) -> list[Operation]:
        with self._lock:
            return sorted(self.operations, key=lambda o: o.op_id)


def _id_text(data: bytes) -> str | None:
    return str(Uuid.from_bytes(data)) if len(data) == 16 else None


class Client(threading.Thread):
    """One client: operations one after another until ``stop`` is set or ``deadline`` passes."""

    def __init__(
        self,
        *,
        client_id: int,
        seed: int,
        controllers: Sequence[Endpoint],
        brokers: Sequence[Endpoint],
        security: ClientSecurity,
        recorder: Recorder,
        config: WorkloadConfig,
        stop: threading.Event,
    ) -> None:
        super().__init__(name=f"fault-client-{client_id}", daemon=True)
        self.client_id = client_id
        self.rng = random.Random(seed)
        self.controllers = list(controllers)
        self.brokers = list(brokers)
        self.security = security
        self.recorder = recorder
        self.config = config
        self.stop_event = stop
        self.leader: Endpoint = self.controllers[0]
        self._channels: dict[str, grpc.Channel] = {}
        # Ids this client saw for each name (from creates and reads): delete/describe by id
        # use them, so an id always belongs to the name the history says.
        self.known_ids: dict[str, list[str]] = {}
        self.error: BaseException | None = None

    def _stub(self, endpoint: Endpoint) -> admin_pb2_grpc.AdminServiceStub:
        channel = self._channels.get(endpoint.address)
        if channel is None:
            channel = self._channels[endpoint.address] = self.security.channel(endpoint.address)
        return admin_pb2_grpc.AdminServiceStub(channel)

    def run(self) -> None:
        try:
            kinds = [k for k, _ in self.config.mix]
            weights = [w for _, w in self.config.mix]
            while not self.stop_event.is_set():
                kind = self.rng.choices(kinds, weights)[0]
                name = self.rng.choice(self.config.names)
                self.one(kind, name)
                if self.config.think_s:
                    self.stop_event.wait(self.config.think_s)
        except BaseException as exc:  # reported by the runner: a client must not die silently
            self.error = exc
        finally:
            for channel in self._channels.values():
                channel.close()

    # ----- one operation -------------------------------------------------------------------

    def _read_target(self) -> Endpoint:
        r = self.rng.random()
        if self.brokers and r < self.config.broker_read_ratio:
            return self.rng.choice(self.brokers)
        if r < self.config.broker_read_ratio + self.config.follower_read_ratio:
            return self.rng.choice(self.controllers)
        return self.leader

    def _follow(self, response: Any) -> None:
        """A NOT_CONTROLLER answer names the leader its node knows: call it next time."""
        if response.error_code == ErrorCode.NOT_CONTROLLER:
            for endpoint in self.controllers:
                if endpoint.node_id == response.controller_id:
                    self.leader = endpoint
                    return
            self.leader = self.rng.choice(self.controllers)

    def one(self, kind: Kind, name: str) -> None:
        topic_id: str | None = None
        if kind in (Kind.DELETE_ID, Kind.DESCRIBE_ID):
            ids = self.known_ids.get(name)
            if not ids:
                kind = Kind.DESCRIBE_NAME
            else:
                topic_id = self.rng.choice(ids[-3:])
        is_read = kind in (Kind.DESCRIBE_NAME, Kind.DESCRIBE_ID, Kind.LIST)
        target = self._read_target() if is_read else self.leader
        op_id = self.recorder.next_id()
        wall_invoke = time.time()
        invoke_ns = time.monotonic_ns()
        try:
            response = self._call(kind, name, topic_id, target)
        except grpc.RpcError as exc:
            response = None
            failure = exc
        complete_ns = time.monotonic_ns()
        if response is None:
            if not target.is_broker:
                self.leader = self.rng.choice(self.controllers)  # maybe it is down: try another
            self.stop_event.wait(FAILURE_BACKOFF_S)
            if is_read or _never_sent(failure):
                return
            self.recorder.add(
                Operation(
                    op_id, self.client_id, kind, invoke_ns, None, Status.UNKNOWN,
                    name=name, topic_id=topic_id, node=target.name, wall_invoke=wall_invoke,
                )
            )  # fmt: skip
            return
        self._follow(response)
        outcome = self._outcome(kind, response)
        if outcome is None:
            return  # refused before anything was appended: no effect, no information
        status, error, result_id, listed = outcome
        if status is Status.UNKNOWN and is_read:
            return
        if result_id is not None:
            ids = self.known_ids.setdefault(name, [])
            if result_id not in ids:
                ids.append(result_id)
        self.recorder.add(
            Operation(
                op_id,
                self.client_id,
                kind,
                invoke_ns,
                None if status is Status.UNKNOWN else complete_ns,
                status,
                name=None if kind is Kind.LIST else name,
                topic_id=topic_id if topic_id is not None else result_id,
                error=error,
                offset=self._offset(kind, status, response),
                listed=listed,
                node=target.name,
                wall_invoke=wall_invoke,
                wall_complete=None if status is Status.UNKNOWN else time.time(),
            )
        )

    @staticmethod
    def _offset(kind: Kind, status: Status, response: Any) -> int | None:
        """The offset the answer carried: a created topic's TopicRecord offset (its
        ``creation_offset``; the batch's last offset may be a PartitionRecord's), else the
        answer's ``metadata_offset`` (the committing offset of a delete, the image offset of
        a read)."""
        if status is not Status.OK:
            return None
        if kind is Kind.CREATE:
            return int(response.topics[0].creation_offset)
        return int(response.metadata_offset)

    def _call(self, kind: Kind, name: str, topic_id: str | None, target: Endpoint) -> Any:
        stub = self._stub(target)
        timeout = self.config.call_timeout_s
        if kind is Kind.CREATE:
            create = admin_pb2.CreateTopicsRequest(
                topics=[
                    admin_pb2.CreatableTopic(
                        name=name,
                        num_partitions=self.config.partitions,
                        replication_factor=self.config.replication_factor,
                    )
                ]
            )
            return stub.CreateTopics(create, timeout=timeout)
        if kind in (Kind.DELETE_NAME, Kind.DELETE_ID):
            deletable = (
                admin_pb2.DeletableTopic(name=name)
                if kind is Kind.DELETE_NAME
                else admin_pb2.DeletableTopic(topic_id=Uuid.parse(topic_id or "").bytes)
            )
            delete = admin_pb2.DeleteTopicsRequest(topics=[deletable])
            return stub.DeleteTopics(delete, timeout=timeout)
        if kind in (Kind.DESCRIBE_NAME, Kind.DESCRIBE_ID):
            ref = (
                admin_pb2.TopicRef(name=name)
                if kind is Kind.DESCRIBE_NAME
                else admin_pb2.TopicRef(topic_id=Uuid.parse(topic_id or "").bytes)
            )
            describe = admin_pb2.DescribeTopicsRequest(topics=[ref])
            return stub.DescribeTopics(describe, timeout=timeout)
        return stub.ListTopics(admin_pb2.ListTopicsRequest(), timeout=timeout)

    def _outcome(
        self, kind: Kind, response: Any
    ) -> tuple[Status, str | None, str | None, tuple[tuple[str, str], ...] | None] | None:
        """(status, definite error name, topic id the answer carried, listed pairs), or None
        for a write refused before anything was appended."""
        if response.error_code != ErrorCode.NONE:
            if response.error_message.startswith(OUTCOME_UNKNOWN):
                return Status.UNKNOWN, None, None, None
            if response.error_code == ErrorCode.NOT_CONTROLLER:
                return None
            return Status.UNKNOWN, None, None, None
        if kind is Kind.LIST:
            if response.next_cursor:
                return Status.UNKNOWN, None, None, None  # one page always holds our few names
            listed = tuple(
                sorted(
                    (t.name, _id_text(t.topic_id) or "")
                    for t in response.topics
                    if t.name in self.config.names
                )
            )
            return Status.OK, None, None, listed
        if len(response.topics) != 1:
            return Status.UNKNOWN, None, None, None
        result = response.topics[0]
        try:
            code: ErrorCode | None = ErrorCode(result.error_code)
        except ValueError:
            code = None
        if code is ErrorCode.NONE:
            if kind in (Kind.CREATE, Kind.DESCRIBE_NAME, Kind.DELETE_NAME):
                return Status.OK, None, _id_text(result.topic_id), None
            return Status.OK, None, None, None
        if code in DEFINITE_ERRORS:
            return Status.ERROR, DEFINITE_ERRORS[code], None, None
        if kind in (Kind.CREATE, Kind.DELETE_NAME, Kind.DELETE_ID) and code is not None:
            return None  # refused by validation: nothing was appended for this topic
        return Status.UNKNOWN, None, None, None


@dataclass
class Workload:
    """``clients`` clients on a cluster, started and stopped together."""

    controllers: Sequence[Endpoint]
    security: ClientSecurity
    seed: int
    config: WorkloadConfig = field(default_factory=WorkloadConfig)
    brokers: Sequence[Endpoint] = ()
    recorder: Recorder = field(default_factory=Recorder)
    stop_event: threading.Event = field(default_factory=threading.Event)
    clients: list[Client] = field(default_factory=list)

    def start(self) -> None:
        rng = random.Random(self.seed)
        for client_id in range(self.config.clients):
            client = Client(
                client_id=client_id,
                seed=rng.randrange(1 << 30),
                controllers=self.controllers,
                brokers=self.brokers,
                security=self.security,
                recorder=self.recorder,
                config=self.config,
                stop=self.stop_event,
            )
            self.clients.append(client)
            client.start()

    def stop(self, timeout_s: float = 10.0) -> None:
        self.stop_event.set()
        deadline = time.monotonic() + timeout_s
        for client in self.clients:
            client.join(max(0.0, deadline - time.monotonic()))
        stuck = [c.name for c in self.clients if c.is_alive()]
        if stuck:
            raise AssertionError(f"clients still running after {timeout_s} s: {stuck}")
        failed = [(c.name, c.error) for c in self.clients if c.error is not None]
        if failed:
            raise AssertionError(f"clients failed: {failed}")

    def history(self) -> list[Operation]:
        return self.recorder.history()


def first_ack_after(history: Sequence[Operation], t_ns: int) -> int | None:
    """When the first write invoked at or after ``t_ns`` was acknowledged (monotonic ns)."""
    times = [
        o.complete_ns
        for o in history
        if o.status is Status.OK
        and o.complete_ns is not None
        and o.kind in (Kind.CREATE, Kind.DELETE_NAME, Kind.DELETE_ID)
        and o.invoke_ns >= t_ns
    ]
    return min(times) if times else None
