"""The ``AdminService`` of a controller: topics, cluster, and the broker lifecycle RPCs.

Writes go to the active controller only: an operation of the pure ``ControllerStateMachine``
runs inside the driver loop (serialized, with the offset its records will get), its records are
appended as one batch, and the answer is sent once the high watermark passes them, carrying the
committing ``metadata_offset``. Any other controller answers NOT_CONTROLLER naming the leader
and its address. Reads that carry ``min_metadata_offset`` are served by every controller from
its committed image, after waiting (bounded by the deadline) until that image has applied the
offset (read-your-writes); reads without it go to the active controller, like writes, which
serves them linearizably: it first confirms with a majority of voters that it still leads
(``RaftDriver.read_index``), so a leader cut off from the quorum, or paused while another was
elected, never answers from a stale image (docs/architecture.md#linearizable-reads).

Per-topic outcomes carry Kafka error codes; only transport failures use gRPC status codes.

Every request is authorized first (docs/authorization.md): a topic the caller may not act on
is answered TOPIC_AUTHORIZATION_FAILED - whether or not it exists, for a name - and is never
handed to the controller; the broker lifecycle needs CLUSTER_ACTION, and a node may register
and heartbeat only as itself (docs/security.md#what-a-node-may-claim).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

import grpc
import structlog

from quorum import limits
from quorum.config import HostPort
from quorum.controller.acls import describe_acls
from quorum.controller.describe import describe_topics, list_topics_page
from quorum.controller.requests import (
    BrokerHeartbeatRequest,
    CreatableReplicaAssignment,
    CreatableTopic,
    CreatePartitionsRequest,
    CreatePartitionsTopic,
    CreateTopicsRequest,
    DeleteTopic,
    DeleteTopicsRequest,
    DescribeTopic,
    RegisterBrokerRequest,
)
from quorum.controller.result import ControllerResult
from quorum.controller.state_machine import ControllerStateMachine
from quorum.errors import ErrorCode
from quorum.ids import ZERO_UUID, InvalidUuidError, Uuid
from quorum.metadata.image import MetadataImage
from quorum.metadata.records import BrokerEndpoint
from quorum.raft.node import NotLeaderError
from quorum.rpc.v1 import admin_pb2, admin_pb2_grpc
from quorum.security.acl_wire import binding_from_proto, binding_to_proto, filter_from_proto
from quorum.security.acls import AclBinding, AclOperation, ResourceType
from quorum.security.authorization import RequestAuthorization
from quorum.security.identity import Caller, CallerResolver
from quorum.security.node_identity import BROKER_ONLY, Claim, refuse_claim
from quorum.server.driver import (
    OperationQueueFullError,
    RaftDriver,
    ShuttingDownError,
    TooManyWaitersError,
)

T = TypeVar("T")

# Answer a little before the caller's deadline, so it gets our answer rather than its timeout.
DEADLINE_MARGIN_S = 0.05
DEFAULT_TIMEOUT_S = 30.0
# A read waiting for its min_metadata_offset waits at most this long, whatever its deadline.
METADATA_OFFSET_WAIT_S_MAX = limits.METADATA_OFFSET_WAIT_MS_MAX / 1000

# The start of every error message of a write that may or may not have happened.
OUTCOME_UNKNOWN = "outcome unknown"

# Negative controls of the fault harness (docs/faults.md#negative-controls): test-only switches,
# read from the environment at start-up, that break linearizability on purpose so the history
# checker is seen to catch it. A node with one on logs ``unsafe_switch_on`` at start. Never set
# them outside a test.
UNSAFE_STALE_READS_ENV = "METAQUORUM_UNSAFE_STALE_READS"  # any controller answers reads at once
UNSAFE_ACK_BEFORE_COMMIT_ENV = "METAQUORUM_UNSAFE_ACK_BEFORE_COMMIT"  # answer writes on append


def unsafe_switches() -> tuple[str, ...]:
    """The negative-control switches set in this process's environment."""
    return tuple(
        name
        for name in (UNSAFE_STALE_READS_ENV, UNSAFE_ACK_BEFORE_COMMIT_ENV)
        if os.environ.get(name) == "1"
    )


def _uuid(data: bytes, what: str) -> Uuid:
    if not data:
        return ZERO_UUID
    try:
        return Uuid.from_bytes(data)
    except InvalidUuidError as exc:
        raise ValueError(f"{what} must be 16 bytes, got {len(data)}") from exc


def _id_bytes(topic_id: Uuid) -> bytes:
    return b"" if topic_id == ZERO_UUID else topic_id.bytes


class NotCaughtUpError(Exception):
    """A broker that has not yet caught up with the metadata log since it started: its image
    may be older than what it answered before it restarted. Retriable (UNAVAILABLE)."""


class RequestRejected(Exception):
    """A request-level error: nothing happened; answer with this code and message."""

    def __init__(self, code: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.code = code


class AdminServicer(admin_pb2_grpc.AdminServiceServicer):
    def __init__(
        self,
        driver: RaftDriver,
        state_machine: ControllerStateMachine | None,
        *,
        cluster_id: str,
        voters: Mapping[int, HostPort],
        controller_ready: Callable[[], bool],
        image: Callable[[], MetadataImage] | None = None,
        serve_reads_without_offset: bool = False,
        callers: CallerResolver | None = None,
        authorization: RequestAuthorization | None = None,
        caught_up: Callable[[], str | None] | None = None,
    ) -> None:
        """``state_machine`` None: a broker, which serves reads from its own ``image`` (like a
        Kafka broker's metadata cache, answering even without ``min_metadata_offset``) and
        answers every write with NOT_CONTROLLER. ``caught_up`` (brokers): None once the image
        has caught up with the metadata log since the process started, else why not; until
        then reads without ``min_metadata_offset`` are refused UNAVAILABLE (retriable), so a
        restarted broker never answers from an image older than what it served before."""
        assert state_machine is not None or image is not None
        self._driver = driver
        self._sm = state_machine
        self._cluster_id = cluster_id
        self._voters = voters
        self._controller_ready = controller_ready
        self._image: Callable[[], MetadataImage] = image or (
            lambda: self._controller().committed_image
        )
        switches = unsafe_switches()
        self._serve_reads_without_offset = (
            serve_reads_without_offset or UNSAFE_STALE_READS_ENV in switches
        )
        self._ack_before_commit = UNSAFE_ACK_BEFORE_COMMIT_ENV in switches
        if switches:
            structlog.get_logger("quorum.admin").warning(
                "unsafe_switch_on", switches=list(switches), meaning="test only: not linearizable"
            )
        self._callers = callers or CallerResolver()
        self._authorization = authorization or RequestAuthorization.disabled(cluster_id)
        self._caught_up = caught_up or (lambda: None)

    # ----- authorization --------------------------------------------------------------------

    def _topic_refusals(
        self,
        caller: Caller,
        image: MetadataImage,
        operation: AclOperation,
        topics: list[tuple[str | None, str]],
    ) -> dict[int, str]:
        """Position -> message for each topic the caller may not ``operation``. Each entry is
        (the name to authorize, what to call it in the message); a None name (an id no topic
        has) is left to the controller's UNKNOWN_TOPIC_ID. A topic asked for by id is called
        by its id: the caller may not know its name."""
        authorization = self._authorization
        refused: dict[int, str] = {}
        for index, (name, shown) in enumerate(topics):
            if name is None:
                continue
            if not authorization.allows_topic(caller, image, operation, name):
                refused[index] = (
                    f"{caller.principal} may not {operation.name} topic {shown}: the ACLs do "
                    f"not allow it (metaquorum acls --add --allow-principal {caller.principal} "
                    f"--operation {operation.name} --topic NAME)"
                )
        return refused

    def _check_broker(self, context: grpc.aio.ServicerContext, broker_id: int) -> None:
        """The broker lifecycle: CLUSTER_ACTION on the cluster, and a broker only as itself (a
        controller's certificate may not register or heartbeat a broker)."""
        caller = self._callers.caller(context)
        refusal = refuse_claim(caller, self._cluster_id, Claim("broker_id", broker_id, BROKER_ONLY))
        if refusal is not None:
            raise RequestRejected(refusal.error_code, refusal.message)
        if not self._authorization.allows(
            caller, self._image(), AclOperation.CLUSTER_ACTION, ResourceType.CLUSTER
        ):
            raise RequestRejected(
                ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
                f"{caller.principal} may not register or heartbeat brokers: that needs "
                "CLUSTER_ACTION on the cluster (a broker's own node certificate has it)",
            )

    def _controller(self) -> ControllerStateMachine:
        if self._sm is None:
            raise self._not_controller()
        return self._sm

    # ----- shared plumbing ------------------------------------------------------------------

    def _header(self, response: Any, code: ErrorCode = ErrorCode.NONE, message: str = "") -> Any:
        node = self._driver.node
        leader = node.leader_id
        response.error_code = int(code)
        response.error_message = message
        response.controller_id = -1 if leader is None else leader
        address = self._voters.get(leader) if leader is not None else None
        response.controller_endpoint = f"{address.host}:{address.port}" if address else ""
        if code is not ErrorCode.NONE:
            response.metadata_offset = -1
        return response

    def _not_controller(self, *, appended: bool = False) -> RequestRejected:
        """NOT_CONTROLLER naming the active controller. ``appended``: the change was appended
        before this node lost its epoch, so a later leader may still commit it: the message
        says its outcome is unknown (Kafka answers NOT_CONTROLLER alike)."""
        node = self._driver.node
        leader = node.leader_id
        if leader is None:
            text = "no controller is active right now (an election is running); retry shortly"
        else:
            address = self._voters.get(leader)
            text = f"this node is not the active controller; send writes to node {leader}" + (
                f" at {address.host}:{address.port}" if address else ""
            )
        if appended:
            text = (
                f"{OUTCOME_UNKNOWN}: this node lost its leadership after appending the change, "
                f"which a later leader may still commit (describe the topics to find out); {text}"
            )
        return RequestRejected(ErrorCode.NOT_CONTROLLER, text)

    @staticmethod
    def _budget_s(context: grpc.aio.ServicerContext) -> float:
        remaining: float | None = context.time_remaining()
        if remaining is None:
            return DEFAULT_TIMEOUT_S
        return max(0.0, remaining - DEADLINE_MARGIN_S)

    async def _write(
        self,
        context: grpc.aio.ServicerContext,
        operation: Callable[[int], ControllerResult[T]],
        *,
        linearizable: bool = True,
        timeout_s: float | None = None,
    ) -> tuple[T, int]:
        """Run a controller operation as the active controller; wait until its records are
        committed. Returns the answer and the committing metadata offset.

        An operation that appends nothing (every topic refused: TOPIC_ALREADY_EXISTS, ...)
        was decided on the latest image, which may hold changes not committed yet; its answer
        waits like a linearizable read (``_linearizable_offset``) until the image it was
        decided on is committed, so a refusal never rests on a change that is then lost.
        Heartbeats (``linearizable`` False) are answered at once, as Kafka's are: a broker
        heartbeats again within its interval, and waiting would only delay its liveness.
        ``timeout_s``: a bound of the request's own (Kafka's ``timeout_ms``) below the deadline."""
        driver = self._driver
        node = driver.node

        budget = self._budget_s(context)
        if timeout_s is not None:
            budget = min(budget, max(0.0, timeout_s))
        if self._sm is None or not node.is_leader():
            raise self._not_controller()
        if not self._controller_ready():
            ready = await driver.wait_for(
                lambda: self._controller_ready() or not node.is_leader(), budget
            )
            if not ready or not node.is_leader():
                raise self._not_controller()

        decided_on: list[int] = []

        def run(next_offset: int) -> tuple[tuple[Any, ...], T]:
            decided_on.append(next_offset)  # the latest image ends just before it
            result = operation(next_offset)
            return result.records, result.response

        appended = False
        # The request's deadline bounds running the operation and its commit; the driver keeps
        # it (no loop timer per request: a busy leader answers thousands per second).
        deadline_s = time.monotonic() + budget
        try:
            proposal, answer = await driver.submit(run, from_client=True, deadline_s=deadline_s)
            if proposal is not None and not self._ack_before_commit:
                appended = True
                await driver.wait_committed(proposal, deadline_s=deadline_s)
        except NotLeaderError:
            raise self._not_controller(appended=appended) from None
        except TimeoutError:
            raise RequestRejected(
                ErrorCode.REQUEST_TIMED_OUT,
                f"{OUTCOME_UNKNOWN}: the change was not "
                + ("committed" if appended else "run and committed")
                + " before the deadline (describe the topics to find out)",
            ) from None
        if proposal is not None:
            # Committed; or appended only, for the negative control UNSAFE_ACK_BEFORE_COMMIT_ENV.
            return answer, proposal.last_offset
        if not linearizable or self._ack_before_commit:
            # The negative control answers a refusal at once too, on an image that may hold
            # changes never committed.
            return answer, self._image().offset
        wanted = max(await self._linearizable_offset(budget), decided_on[0] - 1)
        await self._wait_applied(wanted, budget)
        return answer, self._image().offset

    async def _read_at(self, request: Any, context: grpc.aio.ServicerContext) -> None:
        """Wait until the committed image has applied ``min_metadata_offset``. A read that
        names no offset wants the newest state: only the active controller has it for sure,
        so any other controller redirects it (NOT_CONTROLLER) instead of answering stale, and
        the active controller first confirms it still leads (``RaftDriver.read_index``), then
        waits until its image has applied its high watermark at that moment.

        The wait is bounded: at most ``METADATA_OFFSET_WAIT_MS_MAX`` (or the deadline), at most
        ``METADATA_OFFSET_WAITERS_MAX`` reads at once (then RESOURCE_EXHAUSTED). An offset this
        node has not reached yet is not refused (a follower or broker may lag the leader); if it
        is not reached in time the answer is REQUEST_TIMED_OUT."""
        budget = min(self._budget_s(context), METADATA_OFFSET_WAIT_S_MAX)
        if request.HasField("min_metadata_offset"):
            wanted = request.min_metadata_offset
        elif self._serve_reads_without_offset:
            if (behind := self._caught_up()) is not None:
                raise NotCaughtUpError(behind)
            return
        elif not self._driver.node.is_leader():
            raise self._not_controller()
        else:
            wanted = await self._linearizable_offset(budget)
        await self._wait_applied(wanted, budget)

    async def _linearizable_offset(self, budget: float) -> int:
        """The offset a linearizable read on this (leading) controller must have applied: its
        high watermark once a majority confirmed it still leads (``RaftDriver.read_index``),
        minus one."""
        try:
            return await self._driver.read_index(budget) - 1
        except NotLeaderError:
            raise self._not_controller() from None
        except TimeoutError:
            raise RequestRejected(
                ErrorCode.REQUEST_TIMED_OUT,
                "this controller could not confirm with a majority of the voters that it "
                "still leads before the deadline (cut off from the quorum?); retry, or ask "
                "another controller",
            ) from None

    async def _wait_applied(self, wanted: int, budget: float) -> None:
        """Wait (bounded) until the committed image has applied offset ``wanted``."""
        if self._image().offset >= wanted:
            return
        reached = await self._driver.wait_for_offset(wanted, lambda: self._image().offset, budget)
        if not reached:
            raise RequestRejected(
                ErrorCode.REQUEST_TIMED_OUT,
                f"this node has applied the metadata log up to offset {self._image().offset}, "
                f"not yet {wanted}; retry, or ask another node",
            )

    async def _guard(self, response: Any, context: grpc.aio.ServicerContext, body: Any) -> Any:
        try:
            return await body
        except RequestRejected as exc:
            return self._header(response, exc.code, str(exc))
        except ValueError as exc:
            return self._header(response, ErrorCode.INVALID_REQUEST, str(exc))
        except (ShuttingDownError, NotCaughtUpError) as exc:
            await context.abort(grpc.StatusCode.UNAVAILABLE, str(exc))
        except (OperationQueueFullError, TooManyWaitersError) as exc:
            # Overload is a transport condition (like a full inbox): retriable, no answer.
            await context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED, str(exc))

    # ----- topics ---------------------------------------------------------------------------

    async def CreateTopics(self, request: Any, context: grpc.aio.ServicerContext) -> Any:
        response = admin_pb2.CreateTopicsResponse()
        return await self._guard(response, context, self._create(request, context, response))

    async def _create(self, request: Any, context: grpc.aio.ServicerContext, response: Any) -> Any:
        _check_count(len(request.topics), limits.CREATE_TOPICS_TOPICS_MAX, "create")
        topics = tuple(
            CreatableTopic(
                name=t.name,
                num_partitions=t.num_partitions,
                replication_factor=t.replication_factor,
                assignments=tuple(
                    CreatableReplicaAssignment(a.partition_index, tuple(a.broker_ids))
                    for a in t.assignments
                ),
                configs=tuple((c.name, c.value) for c in t.configs),
            )
            for t in request.topics
        )
        caller = self._callers.caller(context)
        image = self._image() if self._sm is not None else None
        refused: dict[int, str] = {}
        if image is not None and not self._authorization.allows(
            caller, image, AclOperation.CREATE, ResourceType.CLUSTER
        ):
            refused = self._topic_refusals(
                caller, image, AclOperation.CREATE, [(t.name, repr(t.name)) for t in topics]
            )
        allowed = tuple(t for i, t in enumerate(topics) if i not in refused)
        create = CreateTopicsRequest(allowed, validate_only=request.validate_only)
        if allowed or not refused:
            answer, offset = await self._write(
                context,
                lambda next_offset: self._controller().create_topics(
                    create, next_offset=next_offset, new_topic_id=Uuid.random
                ),
            )
            results = iter(answer.topics)
        else:
            results, offset = iter(()), self._image().offset
        for index, topic in enumerate(topics):
            if index in refused:
                response.topics.add(
                    name=topic.name,
                    error_code=int(ErrorCode.TOPIC_AUTHORIZATION_FAILED),
                    error_message=refused[index],
                )
                continue
            result = next(results)
            response.topics.add(
                name=result.name,
                topic_id=_id_bytes(result.topic_id),
                creation_offset=result.creation_offset,
                error_code=int(result.error_code),
                error_message=result.error_message or "",
                num_partitions=result.num_partitions,
                replication_factor=result.replication_factor,
                configs=[admin_pb2.TopicConfig(name=k, value=v) for k, v in result.configs],
            )
        self._header(response)
        response.metadata_offset = offset
        return response

    async def DeleteTopics(self, request: Any, context: grpc.aio.ServicerContext) -> Any:
        response = admin_pb2.DeleteTopicsResponse()
        return await self._guard(response, context, self._delete(request, context, response))

    async def _delete(self, request: Any, context: grpc.aio.ServicerContext, response: Any) -> Any:
        _check_count(len(request.topics), limits.DELETE_TOPICS_TOPICS_MAX, "delete")
        entries = tuple(
            DeleteTopic(
                name=t.name or None,
                topic_id=_uuid(t.topic_id, "topic_id"),
                expected_topic_id=_uuid(t.expected_topic_id, "expected_topic_id")
                if t.expected_topic_id
                else None,
            )
            for t in request.topics
        )
        caller = self._callers.caller(context)
        image = self._image() if self._sm is not None else None
        refused: dict[int, str] = {}
        if image is not None:
            refused = self._topic_refusals(
                caller, image, AclOperation.DELETE, [_topic_name(image, e) for e in entries]
            )
        allowed = tuple(e for i, e in enumerate(entries) if i not in refused)
        delete = DeleteTopicsRequest(allowed)
        if allowed or not refused:
            answer, offset = await self._write(
                context,
                lambda next_offset: self._controller().delete_topics(
                    delete, next_offset=next_offset
                ),
            )
            results = iter(answer.topics)
        else:
            results, offset = iter(()), self._image().offset
        for index, entry in enumerate(entries):
            if index in refused:
                response.topics.add(
                    # By id, the name is not told: the caller may not know it.
                    name="" if _by_id(entry) else entry.name or "",
                    topic_id=_id_bytes(entry.topic_id),
                    error_code=int(ErrorCode.TOPIC_AUTHORIZATION_FAILED),
                    error_message=refused[index],
                )
                continue
            result = next(results)
            response.topics.add(
                name=result.name or "",
                topic_id=_id_bytes(result.topic_id),
                error_code=int(result.error_code),
                error_message=result.error_message or "",
            )
        self._header(response)
        response.metadata_offset = offset
        return response

    async def CreatePartitions(self, request: Any, context: grpc.aio.ServicerContext) -> Any:
        response = admin_pb2.CreatePartitionsResponse()
        return await self._guard(
            response, context, self._create_partitions(request, context, response)
        )

    async def _create_partitions(
        self, request: Any, context: grpc.aio.ServicerContext, response: Any
    ) -> Any:
        """Kafka's CreatePartitions: ALTER on each topic (else TOPIC_AUTHORIZATION_FAILED,
        whether or not it exists), then the controller's ``create_partitions``."""
        _check_count(len(request.topics), limits.CREATE_PARTITIONS_TOPICS_MAX, "create-partitions")
        entries = tuple(
            CreatePartitionsTopic(
                name=t.name or None,
                count=t.count,
                assignments=tuple(tuple(a.broker_ids) for a in t.assignments)
                if t.assignments
                else None,
                topic_id=_uuid(t.topic_id, "topic_id"),
            )
            for t in request.topics
        )
        caller = self._callers.caller(context)
        image = self._image() if self._sm is not None else None
        refused: dict[int, str] = {}
        if image is not None:
            refused = self._topic_refusals(
                caller, image, AclOperation.ALTER, [_topic_name(image, e) for e in entries]
            )
        allowed = tuple(e for i, e in enumerate(entries) if i not in refused)
        grow = CreatePartitionsRequest(allowed, validate_only=request.validate_only)
        timeout_s = request.timeout_ms / 1000 if request.timeout_ms > 0 else None
        if allowed or not refused:
            answer, offset = await self._write(
                context,
                lambda next_offset: self._controller().create_partitions(
                    grow, next_offset=next_offset
                ),
                timeout_s=timeout_s,
            )
            results = iter(answer.results)
        else:
            results, offset = iter(()), self._image().offset
        for index, entry in enumerate(entries):
            if index in refused:
                response.results.add(
                    name="" if _by_id(entry) else entry.name or "",
                    topic_id=_id_bytes(entry.topic_id),
                    error_code=int(ErrorCode.TOPIC_AUTHORIZATION_FAILED),
                    error_message=refused[index],
                )
                continue
            result = next(results)
            response.results.add(
                name=result.name or "",
                topic_id=_id_bytes(result.topic_id),
                error_code=int(result.error_code),
                error_message=result.error_message or "",
            )
        self._header(response)
        response.metadata_offset = offset
        return response

    async def DescribeTopics(self, request: Any, context: grpc.aio.ServicerContext) -> Any:
        response = admin_pb2.DescribeTopicsResponse()
        return await self._guard(response, context, self._describe(request, context, response))

    async def _describe(
        self, request: Any, context: grpc.aio.ServicerContext, response: Any
    ) -> Any:
        _check_count(len(request.topics), limits.DESCRIBE_TOPICS_TOPICS_MAX, "describe")
        await self._read_at(request, context)
        image = self._image()
        wanted = tuple(
            DescribeTopic(name=t.name or None, topic_id=_uuid(t.topic_id, "topic_id"))
            for t in request.topics
        )
        caller = self._callers.caller(context)
        refused = self._topic_refusals(
            caller, image, AclOperation.DESCRIBE, [_topic_name(image, w) for w in wanted]
        )
        for index, d in enumerate(describe_topics(image, wanted)):
            if index in refused:
                entry = wanted[index]
                response.topics.add(
                    name="" if _by_id(entry) else entry.name or "",
                    topic_id=_id_bytes(entry.topic_id),
                    error_code=int(ErrorCode.TOPIC_AUTHORIZATION_FAILED),
                    error_message=refused[index],
                )
                continue
            response.topics.add(
                name=d.name or "",
                topic_id=_id_bytes(d.topic_id),
                error_code=int(d.error_code),
                error_message=d.error_message or "",
                is_internal=d.is_internal,
                creation_offset=d.creation_offset,
                partitions=[
                    admin_pb2.PartitionDescription(
                        partition_index=p.partition,
                        leader_id=p.leader,
                        leader_epoch=p.leader_epoch,
                        replica_nodes=p.replicas,
                        isr_nodes=p.isr,
                        offline_replicas=p.offline_replicas,
                    )
                    for p in d.partitions
                ],
                configs=[admin_pb2.TopicConfig(name=k, value=v) for k, v in d.configs],
            )
        self._header(response)
        response.metadata_offset = image.offset
        return response

    async def ListTopics(self, request: Any, context: grpc.aio.ServicerContext) -> Any:
        response = admin_pb2.ListTopicsResponse()
        return await self._guard(response, context, self._list(request, context, response))

    async def _list(self, request: Any, context: grpc.aio.ServicerContext, response: Any) -> Any:
        if request.page_topics_max < 0:
            raise RequestRejected(
                ErrorCode.INVALID_REQUEST,
                f"page_topics_max {request.page_topics_max} is negative; give 0 (the server's "
                f"bound, {limits.LIST_TOPICS_PAGE_TOPICS_MAX}) or a positive number",
            )
        if len(request.cursor) > limits.TOPIC_NAME_CHARS_MAX:
            raise RequestRejected(
                ErrorCode.INVALID_REQUEST,
                f"a cursor of {len(request.cursor)} characters is not a topic name (at most "
                f"{limits.TOPIC_NAME_CHARS_MAX}): pass the next_cursor of the previous page",
            )
        topics_max = request.page_topics_max or limits.LIST_TOPICS_PAGE_TOPICS_MAX
        await self._read_at(request, context)
        image = self._image()
        caller = self._callers.caller(context)
        authorization = self._authorization
        # A topic the caller may not describe is not listed (Kafka's rule), and the page's
        # cursor is chosen among the ones it may: it names no topic the caller cannot see.
        page, response.next_cursor = list_topics_page(
            image,
            include_internal=not request.exclude_internal,
            cursor=request.cursor,
            topics_max=min(topics_max, limits.LIST_TOPICS_PAGE_TOPICS_MAX),
            visible=lambda name: authorization.allows_topic(
                caller, image, AclOperation.DESCRIBE, name
            ),
        )
        for t in page:
            response.topics.add(
                name=t.name,
                topic_id=t.topic_id.bytes,
                is_internal=t.is_internal,
                creation_offset=t.creation_offset,
            )
        self._header(response)
        response.metadata_offset = image.offset
        return response

    async def DescribeCluster(self, request: Any, context: grpc.aio.ServicerContext) -> Any:
        response = admin_pb2.DescribeClusterResponse()
        return await self._guard(response, context, self._cluster(request, context, response))

    async def _cluster(self, request: Any, context: grpc.aio.ServicerContext, response: Any) -> Any:
        await self._read_at(request, context)
        image = self._image()
        response.cluster_id = self._cluster_id
        for broker in sorted(image.brokers.values(), key=lambda b: b.broker_id):
            endpoint = broker.endpoints[0] if broker.endpoints else None
            response.brokers.add(
                broker_id=broker.broker_id,
                host=endpoint.host if endpoint else "",
                port=endpoint.port if endpoint else 0,
                rack=broker.rack or "",
                is_fenced=broker.fenced,
                broker_epoch=broker.broker_epoch,
            )
        for node_id, address in sorted(self._voters.items()):
            response.controllers.add(node_id=node_id, host=address.host, port=address.port)
        if image.metadata_topic_id is not None:
            response.metadata_topic_id = image.metadata_topic_id.bytes
        self._header(response)
        response.metadata_offset = image.offset
        return response

    # ----- brokers --------------------------------------------------------------------------

    async def RegisterBroker(self, request: Any, context: grpc.aio.ServicerContext) -> Any:
        response = admin_pb2.RegisterBrokerResponse()
        return await self._guard(response, context, self._register(request, context, response))

    async def _register(
        self, request: Any, context: grpc.aio.ServicerContext, response: Any
    ) -> Any:
        self._check_broker(context, request.broker_id)
        if request.cluster_id != self._cluster_id:
            raise RequestRejected(
                ErrorCode.INCONSISTENT_CLUSTER_ID,
                f"broker {request.broker_id} belongs to cluster {request.cluster_id!r}, this "
                f"quorum is cluster {self._cluster_id!r}: format the broker's log dirs with this "
                "cluster's id",
            )
        register = RegisterBrokerRequest(
            broker_id=request.broker_id,
            incarnation_id=_uuid(request.incarnation_id, "incarnation_id"),
            endpoints=tuple(BrokerEndpoint(e.name, e.host, e.port) for e in request.listeners),
            rack=request.rack or None,
        )
        now = self._driver.clock.now_ms()
        answer, offset = await self._write(
            context,
            lambda next_offset: self._controller().register_broker(
                register, next_offset=next_offset, now_ms=now
            ),
        )
        self._header(response, answer.error_code, answer.error_message or "")
        response.broker_epoch = answer.broker_epoch
        response.metadata_offset = offset
        return response

    async def BrokerHeartbeat(self, request: Any, context: grpc.aio.ServicerContext) -> Any:
        response = admin_pb2.BrokerHeartbeatResponse()
        return await self._guard(response, context, self._heartbeat(request, context, response))

    async def _heartbeat(
        self, request: Any, context: grpc.aio.ServicerContext, response: Any
    ) -> Any:
        self._check_broker(context, request.broker_id)
        heartbeat = BrokerHeartbeatRequest(
            broker_id=request.broker_id,
            broker_epoch=request.broker_epoch,
            current_metadata_offset=request.current_metadata_offset,
            want_shut_down=request.want_shut_down,
        )
        now = self._driver.clock.now_ms()
        answer, offset = await self._write(
            context,
            lambda next_offset: self._controller().broker_heartbeat(
                heartbeat, next_offset=next_offset, now_ms=now
            ),
            linearizable=False,
        )
        self._header(response, answer.error_code, answer.error_message or "")
        response.is_caught_up = answer.is_caught_up
        response.is_fenced = answer.is_fenced
        response.should_shut_down = answer.should_shut_down
        response.metadata_offset = offset
        return response

    # ----- ACLs (docs/authorization.md) -----------------------------------------------------

    def _authorize_acls(self, context: grpc.aio.ServicerContext, operation: AclOperation) -> None:
        """SECURITY_DISABLED without an authorizer (Kafka); else ``operation`` on the cluster."""
        if not self._authorization.enabled:
            raise RequestRejected(
                ErrorCode.SECURITY_DISABLED,
                "no authorizer is configured (authorizer.class.name is empty), so there are no "
                "ACLs to manage: set it to "
                "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
            )
        caller = self._callers.caller(context)
        if not self._authorization.allows(caller, self._image(), operation, ResourceType.CLUSTER):
            raise RequestRejected(
                ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
                f"{caller.principal} may not {operation.name} the cluster's ACLs: that needs "
                f"{operation.name} on the cluster (or a super user)",
            )

    async def CreateAcls(self, request: Any, context: grpc.aio.ServicerContext) -> Any:
        response = admin_pb2.CreateAclsResponse()
        return await self._guard(response, context, self._create_acls(request, context, response))

    async def _create_acls(
        self, request: Any, context: grpc.aio.ServicerContext, response: Any
    ) -> Any:
        _check_acl_entries(len(request.creations), "ACL creations")
        self._authorize_acls(context, AclOperation.ALTER)
        bindings: list[AclBinding] = []
        invalid: dict[int, str] = {}
        for index, pb in enumerate(request.creations):
            try:
                bindings.append(binding_from_proto(pb))
            except ValueError as exc:
                invalid[index] = f"cannot store this ACL: {exc}"
        answer, offset = await self._write(
            context,
            lambda next_offset: self._controller().create_acls(
                bindings, next_offset=next_offset, new_acl_id=Uuid.random
            ),
        )
        outcomes = iter(answer)
        for index in range(len(request.creations)):
            if index in invalid:
                response.results.add(
                    error_code=int(ErrorCode.INVALID_REQUEST), error_message=invalid[index]
                )
                continue
            outcome = next(outcomes)
            response.results.add(
                error_code=int(outcome.error_code), error_message=outcome.error_message or ""
            )
        self._header(response)
        response.metadata_offset = offset
        return response

    async def DeleteAcls(self, request: Any, context: grpc.aio.ServicerContext) -> Any:
        response = admin_pb2.DeleteAclsResponse()
        return await self._guard(response, context, self._delete_acls(request, context, response))

    async def _delete_acls(
        self, request: Any, context: grpc.aio.ServicerContext, response: Any
    ) -> Any:
        _check_acl_entries(len(request.filters), "ACL filters")
        self._authorize_acls(context, AclOperation.ALTER)
        filters = [filter_from_proto(pb) for pb in request.filters]  # ValueError: INVALID_REQUEST
        answer, offset = await self._write(
            context,
            lambda next_offset: self._controller().delete_acls(filters, next_offset=next_offset),
        )
        for outcome in answer:
            response.filter_results.add(
                error_code=int(outcome.error_code),
                error_message=outcome.error_message or "",
                matching_acls=[binding_to_proto(b) for b in outcome.acls],
            )
        self._header(response)
        response.metadata_offset = offset
        return response

    async def DescribeAcls(self, request: Any, context: grpc.aio.ServicerContext) -> Any:
        response = admin_pb2.DescribeAclsResponse()
        return await self._guard(response, context, self._describe_acls(request, context, response))

    async def _describe_acls(
        self, request: Any, context: grpc.aio.ServicerContext, response: Any
    ) -> Any:
        self._authorize_acls(context, AclOperation.DESCRIBE)
        acl_filter = filter_from_proto(request.filter)
        await self._read_at(request, context)
        image = self._image()
        response.acls.extend(binding_to_proto(b) for b in describe_acls(image, acl_filter))
        self._header(response)
        response.metadata_offset = image.offset
        return response


def _check_acl_entries(count: int, what: str) -> None:
    if count > limits.ACL_REQUEST_ENTRIES_MAX:
        raise RequestRejected(
            ErrorCode.INVALID_REQUEST,
            f"{count} {what} in one request; at most {limits.ACL_REQUEST_ENTRIES_MAX} are "
            "allowed: split it",
        )


def _by_id(entry: DeleteTopic | DescribeTopic | CreatePartitionsTopic) -> bool:
    return entry.topic_id != ZERO_UUID  # KIP-516: the id wins when both are given


def _topic_name(
    image: MetadataImage, entry: DeleteTopic | DescribeTopic | CreatePartitionsTopic
) -> tuple[str | None, str]:
    """(the name a request entry means, what to call it): by name, or by the id of a live
    topic; None for an id no live topic has, which the controller answers UNKNOWN_TOPIC_ID."""
    if not _by_id(entry):
        return entry.name, repr(entry.name)
    topic = image.topic(entry.topic_id)
    return (None if topic is None else topic.name), str(entry.topic_id)


def _check_count(count: int, maximum: int, what: str) -> None:
    if count > maximum:
        raise RequestRejected(
            ErrorCode.INVALID_REQUEST,
            f"{count} topics in one {what} request; at most {maximum} are allowed: split it",
        )
