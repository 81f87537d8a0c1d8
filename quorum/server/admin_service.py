"""The ``AdminService`` handlers that controllers and brokers share: topics, cluster, the broker
lifecycle RPCs and ACLs. Two services build on it, one per kind of node:

- ``ControllerAdminServicer`` (quorum/server/controller_admin.py): writes run on the active
  controller and are answered once committed; reads are linearizable or read-your-writes;
- ``BrokerAdminServicer`` (broker/admin_service.py): reads from the broker's own image (Kafka's
  metadata cache); every write is answered NOT_CONTROLLER.

This base translates each request (``quorum/wire/admin.py``), authorizes it and builds the
answer. What differs is asked of the service: how a write runs (``_write``), when a read that
names no ``min_metadata_offset`` may be answered (``_read_newest``), which image a write is
authorized against (``_write_image``).

Per-topic outcomes carry Kafka error codes; only transport failures use gRPC status codes.

Every request is authorized first (docs/authorization.md): a topic the caller may not act on
is answered TOPIC_AUTHORIZATION_FAILED - whether or not it exists, for a name - and is never
handed to the controller; the broker lifecycle needs CLUSTER_ACTION, and a node may register
and heartbeat only as itself (docs/security.md#what-a-node-may-claim).
"""

from __future__ import annotations

import os
from collections.abc import Awaitable, Callable, Mapping
from typing import ClassVar, Final, Protocol, TypeAlias, TypeVar

import grpc
import structlog

from quorum import limits
from quorum.config import HostPort
from quorum.controller.acls import describe_acls
from quorum.controller.alter_configs import AlterConfigsRequest, AlterConfigsResult
from quorum.controller.describe import describe_topics, list_topics_page
from quorum.controller.describe_configs import Describer
from quorum.controller.requests import (
    CreatePartitionsRequest,
    CreatePartitionsTopic,
    CreateTopicsRequest,
    DeleteTopic,
    DeleteTopicsRequest,
    DescribeTopic,
)
from quorum.controller.result import ControllerResult
from quorum.controller.state_machine import ControllerStateMachine
from quorum.errors import ErrorCode
from quorum.ids import ZERO_UUID, Uuid
from quorum.metadata.image import MetadataImage
from quorum.rpc.v1 import admin_pb2, admin_pb2_grpc
from quorum.security.acls import AclBinding, AclOperation, ResourceType
from quorum.security.authorization import RequestAuthorization
from quorum.security.identity import Caller, CallerResolver
from quorum.security.node_identity import BROKER_ONLY, Claim, refuse_claim
from quorum.server import client_quotas_rpc
from quorum.server.alter_configs_auth import alter_configs_refusals, describe_configs_answer
from quorum.server.driver import (
    OperationQueueFullError,
    RaftDriver,
    ShuttingDownError,
    TooManyWaitersError,
)
from quorum.wire.acls import binding_from_proto, binding_to_proto, filter_from_proto
from quorum.wire.admin import (
    add_alter_partition_results,
    add_created_topic,
    add_deleted_topic,
    add_election_results,
    add_grown_topic,
    add_topic_description,
    allocate_producer_ids_from_proto,
    alter_partition_from_proto,
    broker_heartbeat_from_proto,
    creatable_topics_from_proto,
    deletable_topics_from_proto,
    elect_leaders_from_proto,
    partitions_topics_from_proto,
    register_broker_from_proto,
    topic_id_to_proto,
    topic_refs_from_proto,
)
from quorum.wire.alter_configs import add_alter_configs_results, alter_configs_from_proto
from quorum.wire.describe_configs import add_describe_configs_outcome

__all__ = [
    "DEADLINE_MARGIN_S",
    "METADATA_OFFSET_WAIT_S_MAX",
    "OUTCOME_UNKNOWN",
    "TIMEOUT_S_DEFAULT",
    "UNSAFE_ACK_BEFORE_COMMIT_ENV",
    "UNSAFE_STALE_READS_ENV",
    "AdminServicer",
    "NotCaughtUpError",
    "ReadRequest",
    "RequestRejected",
    "WriteOperation",
    "unsafe_switches",
]

T = TypeVar("T")

# Answer a little before the caller's deadline, so it gets our answer rather than its timeout.
DEADLINE_MARGIN_S: Final = 0.05
# The budget of a request that came without a deadline (Kafka's request.timeout.ms).
TIMEOUT_S_DEFAULT: Final = 30.0
# A read waits for the image it is answered from at most this long, whatever its deadline.
METADATA_OFFSET_WAIT_S_MAX: Final = limits.METADATA_OFFSET_WAIT_MS_MAX / 1000

# The start of every error message of a write that may or may not have happened.
OUTCOME_UNKNOWN: Final = "outcome unknown"

# Negative controls of the fault harness (docs/faults.md#negative-controls): test-only switches,
# read from the environment at start-up, that break linearizability on purpose so the history
# checker is seen to catch it (the controller's service acts on them). A node with one on logs
# ``unsafe_switch_on`` at start. Never set them outside a test.
UNSAFE_STALE_READS_ENV: Final = "METAQUORUM_UNSAFE_STALE_READS"  # reads answered at once
UNSAFE_ACK_BEFORE_COMMIT_ENV: Final = "METAQUORUM_UNSAFE_ACK_BEFORE_COMMIT"  # writes on append


def unsafe_switches() -> tuple[str, ...]:
    """The negative-control switches set in this process's environment."""
    return tuple(
        name
        for name in (UNSAFE_STALE_READS_ENV, UNSAFE_ACK_BEFORE_COMMIT_ENV)
        if os.environ.get(name) == "1"
    )


# A controller operation (quorum/controller/state_machine.py) the active controller runs on its
# state machine at the offset its first record will get.
WriteOperation: TypeAlias = Callable[[ControllerStateMachine, int], ControllerResult[T]]
# The reads, which may name the ``min_metadata_offset`` to wait for.
ReadRequest: TypeAlias = (
    admin_pb2.DescribeTopicsRequest
    | admin_pb2.ListTopicsRequest
    | admin_pb2.DescribeClusterRequest
    | admin_pb2.DescribeAclsRequest
    | admin_pb2.DescribeConfigsRequest
    | admin_pb2.DescribeClientQuotasRequest
)


class AdminResponse(Protocol):
    """The header every AdminService response has."""

    error_code: int
    error_message: str
    controller_id: int
    controller_endpoint: str
    metadata_offset: int


R = TypeVar("R", bound=AdminResponse)


class NotCaughtUpError(Exception):
    """A broker that has not yet caught up with the metadata log since it started: its image
    may be older than what it answered before it restarted. Answered UNAVAILABLE."""

    retriable: ClassVar[bool] = True


class RequestRejected(Exception):
    """A request-level error: nothing happened; answer with this code and message."""

    def __init__(self, code: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.code = code


class AdminServicer(admin_pb2_grpc.AdminServiceServicer):
    """The handlers of every AdminService RPC; a controller's and a broker's service subclass
    it (see the module docstring)."""

    def __init__(
        self,
        driver: RaftDriver,
        *,
        cluster_id: str,
        voters: Mapping[int, HostPort],
        image: Callable[[], MetadataImage],
        callers: CallerResolver | None = None,
        authorization: RequestAuthorization | None = None,
    ) -> None:
        """``voters``: the controllers' addresses (a live mapping: the voter set may change,
        KIP-853); ``image``: the image reads are answered from."""
        self._driver = driver
        self._cluster_id = cluster_id
        self._voters = voters
        self._image = image
        self._callers = callers or CallerResolver()
        self._authorization = authorization or RequestAuthorization.disabled(cluster_id)
        # What DescribeConfigs answers: a controller knows no broker's file (a broker's servicer
        # replaces it with one that does).
        self.describer = Describer(None, ())
        self._unsafe_switches = unsafe_switches()
        if self._unsafe_switches:
            structlog.get_logger("quorum.admin").warning(
                "unsafe_switch_on",
                switches=list(self._unsafe_switches),
                meaning="test only: not linearizable",
            )

    # ----- what a kind of node decides ------------------------------------------------------

    async def _write(
        self,
        context: grpc.aio.ServicerContext,
        operation: WriteOperation[T],
        *,
        linearizable: bool = True,
        timeout_s: float | None = None,
    ) -> tuple[T, int]:
        """Run ``operation`` as the active controller and wait until its records are committed;
        the answer and the committing metadata offset. Raises ``RequestRejected``.
        ``linearizable`` False: an answer that appends nothing need not wait for the image it
        was decided on to be committed (heartbeats). ``timeout_s``: a bound of the request's
        own (Kafka's ``timeout_ms``) below the deadline."""
        raise NotImplementedError

    async def _read_newest(self, timeout_s: float) -> None:
        """Return, within ``timeout_s``, once ``self._image()`` may answer a read that names
        no offset; raise ``RequestRejected`` or ``NotCaughtUpError`` when it may not."""
        raise NotImplementedError

    def _write_image(self) -> MetadataImage | None:
        """The image a write's topics are authorized against; None: not authorized here (the
        write is refused anyway)."""
        raise NotImplementedError

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
        """The broker lifecycle (RegisterBroker, BrokerHeartbeat, AllocateProducerIds,
        AlterPartition):
        CLUSTER_ACTION on the cluster, and a broker only as itself (a controller's certificate
        may not register or heartbeat a broker)."""
        caller = self._callers.caller(context)
        refusal = refuse_claim(caller, self._cluster_id, Claim("broker_id", broker_id, BROKER_ONLY))
        if refusal is not None:
            raise RequestRejected(refusal.error_code, refusal.message)
        if not self._authorization.allows(
            caller, self._image(), AclOperation.CLUSTER_ACTION, ResourceType.CLUSTER
        ):
            raise RequestRejected(
                ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
                f"{caller.principal} may not register, heartbeat, allocate producer ids or "
                "alter partitions as a broker: that needs "
                "CLUSTER_ACTION on the cluster (a broker's own node certificate has it)",
            )

    # ----- shared plumbing ------------------------------------------------------------------

    def _header(self, response: R, code: ErrorCode = ErrorCode.NONE, message: str = "") -> R:
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
        """What is left of the call's deadline, less ``DEADLINE_MARGIN_S``."""
        remaining: float | None = context.time_remaining()
        if remaining is None:
            return TIMEOUT_S_DEFAULT
        return max(0.0, remaining - DEADLINE_MARGIN_S)

    async def _read_at(self, request: ReadRequest, context: grpc.aio.ServicerContext) -> None:
        """Return once the image may answer ``request``: it has applied the request's
        ``min_metadata_offset`` (read-your-writes), or ``_read_newest`` says so. The wait is
        bounded: at most ``METADATA_OFFSET_WAIT_MS_MAX`` (or the deadline), at most
        ``METADATA_OFFSET_WAITERS_MAX`` reads at once (then RESOURCE_EXHAUSTED). An offset this
        node has not reached yet is not refused (followers and brokers may lag the leader); if
        it is not reached in time the answer is REQUEST_TIMED_OUT."""
        budget = min(self._budget_s(context), METADATA_OFFSET_WAIT_S_MAX)
        if request.HasField("min_metadata_offset"):
            await self._wait_applied(request.min_metadata_offset, budget)
        else:
            await self._read_newest(budget)

    async def _wait_applied(self, wanted: int, timeout_s: float) -> None:
        """Wait at most ``timeout_s`` until the image has applied offset ``wanted``."""
        if self._image().offset >= wanted:
            return
        reached = await self._driver.wait_for_offset(
            wanted, lambda: self._image().offset, timeout_s
        )
        if not reached:
            raise RequestRejected(
                ErrorCode.REQUEST_TIMED_OUT,
                f"this node has applied the metadata log up to offset {self._image().offset}, "
                f"not yet {wanted}; retry, or ask another node",
            )

    async def _guard(self, response: R, context: grpc.aio.ServicerContext, body: Awaitable[R]) -> R:
        try:
            return await body
        except RequestRejected as exc:
            return self._header(response, exc.code, str(exc))
        except ValueError as exc:
            return self._header(response, ErrorCode.INVALID_REQUEST, str(exc))
        except (ShuttingDownError, NotCaughtUpError) as exc:
            status, text = grpc.StatusCode.UNAVAILABLE, str(exc)
        except (OperationQueueFullError, TooManyWaitersError) as exc:
            # Overload is a transport condition (like a full inbox): retriable, no answer.
            status, text = grpc.StatusCode.RESOURCE_EXHAUSTED, str(exc)
        await context.abort(status, text)
        raise AssertionError("context.abort raises")  # pragma: no cover

    # ----- topics ---------------------------------------------------------------------------

    async def CreateTopics(
        self, request: admin_pb2.CreateTopicsRequest, context: grpc.aio.ServicerContext
    ) -> admin_pb2.CreateTopicsResponse:
        response = admin_pb2.CreateTopicsResponse()
        return await self._guard(response, context, self._create(request, context, response))

    async def _create(
        self,
        request: admin_pb2.CreateTopicsRequest,
        context: grpc.aio.ServicerContext,
        response: admin_pb2.CreateTopicsResponse,
    ) -> admin_pb2.CreateTopicsResponse:
        _check_count(len(request.topics), limits.CREATE_TOPICS_TOPICS_MAX, "create")
        topics = creatable_topics_from_proto(request.topics)
        caller = self._callers.caller(context)
        image = self._write_image()
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
                lambda sm, next_offset: sm.create_topics(
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
            add_created_topic(response.topics, next(results))
        self._header(response)
        response.metadata_offset = offset
        return response

    async def DeleteTopics(
        self, request: admin_pb2.DeleteTopicsRequest, context: grpc.aio.ServicerContext
    ) -> admin_pb2.DeleteTopicsResponse:
        response = admin_pb2.DeleteTopicsResponse()
        return await self._guard(response, context, self._delete(request, context, response))

    async def _delete(
        self,
        request: admin_pb2.DeleteTopicsRequest,
        context: grpc.aio.ServicerContext,
        response: admin_pb2.DeleteTopicsResponse,
    ) -> admin_pb2.DeleteTopicsResponse:
        _check_count(len(request.topics), limits.DELETE_TOPICS_TOPICS_MAX, "delete")
        entries = deletable_topics_from_proto(request.topics)
        caller = self._callers.caller(context)
        image = self._write_image()
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
                lambda sm, next_offset: sm.delete_topics(delete, next_offset=next_offset),
            )
            results = iter(answer.topics)
        else:
            results, offset = iter(()), self._image().offset
        for index, entry in enumerate(entries):
            if index in refused:
                response.topics.add(
                    # By id, the name is not told: the caller may not know it.
                    name="" if _by_id(entry) else entry.name or "",
                    topic_id=topic_id_to_proto(entry.topic_id),
                    error_code=int(ErrorCode.TOPIC_AUTHORIZATION_FAILED),
                    error_message=refused[index],
                )
                continue
            add_deleted_topic(response.topics, next(results))
        self._header(response)
        response.metadata_offset = offset
        return response

    async def CreatePartitions(
        self, request: admin_pb2.CreatePartitionsRequest, context: grpc.aio.ServicerContext
    ) -> admin_pb2.CreatePartitionsResponse:
        response = admin_pb2.CreatePartitionsResponse()
        return await self._guard(
            response, context, self._create_partitions(request, context, response)
        )

    async def _create_partitions(
        self,
        request: admin_pb2.CreatePartitionsRequest,
        context: grpc.aio.ServicerContext,
        response: admin_pb2.CreatePartitionsResponse,
    ) -> admin_pb2.CreatePartitionsResponse:
        """Kafka's CreatePartitions: ALTER on each topic (else TOPIC_AUTHORIZATION_FAILED,
        whether or not it exists), then the controller's ``create_partitions``."""
        _check_count(len(request.topics), limits.CREATE_PARTITIONS_TOPICS_MAX, "create-partitions")
        entries = partitions_topics_from_proto(request.topics)
        caller = self._callers.caller(context)
        image = self._write_image()
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
                lambda sm, next_offset: sm.create_partitions(grow, next_offset=next_offset),
                timeout_s=timeout_s,
            )
            results = iter(answer.results)
        else:
            results, offset = iter(()), self._image().offset
        for index, entry in enumerate(entries):
            if index in refused:
                response.results.add(
                    name="" if _by_id(entry) else entry.name or "",
                    topic_id=topic_id_to_proto(entry.topic_id),
                    error_code=int(ErrorCode.TOPIC_AUTHORIZATION_FAILED),
                    error_message=refused[index],
                )
                continue
            add_grown_topic(response.results, next(results))
        self._header(response)
        response.metadata_offset = offset
        return response

    async def DescribeTopics(
        self, request: admin_pb2.DescribeTopicsRequest, context: grpc.aio.ServicerContext
    ) -> admin_pb2.DescribeTopicsResponse:
        response = admin_pb2.DescribeTopicsResponse()
        return await self._guard(response, context, self._describe(request, context, response))

    async def _describe(
        self,
        request: admin_pb2.DescribeTopicsRequest,
        context: grpc.aio.ServicerContext,
        response: admin_pb2.DescribeTopicsResponse,
    ) -> admin_pb2.DescribeTopicsResponse:
        _check_count(len(request.topics), limits.DESCRIBE_TOPICS_TOPICS_MAX, "describe")
        await self._read_at(request, context)
        image = self._image()
        wanted = topic_refs_from_proto(request.topics)
        caller = self._callers.caller(context)
        refused = self._topic_refusals(
            caller, image, AclOperation.DESCRIBE, [_topic_name(image, w) for w in wanted]
        )
        for index, description in enumerate(describe_topics(image, wanted)):
            if index in refused:
                entry = wanted[index]
                response.topics.add(
                    name="" if _by_id(entry) else entry.name or "",
                    topic_id=topic_id_to_proto(entry.topic_id),
                    error_code=int(ErrorCode.TOPIC_AUTHORIZATION_FAILED),
                    error_message=refused[index],
                )
                continue
            add_topic_description(response.topics, description)
        self._header(response)
        response.metadata_offset = image.offset
        return response

    async def ListTopics(
        self, request: admin_pb2.ListTopicsRequest, context: grpc.aio.ServicerContext
    ) -> admin_pb2.ListTopicsResponse:
        response = admin_pb2.ListTopicsResponse()
        return await self._guard(response, context, self._list(request, context, response))

    async def _list(
        self,
        request: admin_pb2.ListTopicsRequest,
        context: grpc.aio.ServicerContext,
        response: admin_pb2.ListTopicsResponse,
    ) -> admin_pb2.ListTopicsResponse:
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

    async def DescribeCluster(
        self, request: admin_pb2.DescribeClusterRequest, context: grpc.aio.ServicerContext
    ) -> admin_pb2.DescribeClusterResponse:
        response = admin_pb2.DescribeClusterResponse()
        return await self._guard(response, context, self._cluster(request, context, response))

    async def _cluster(
        self,
        request: admin_pb2.DescribeClusterRequest,
        context: grpc.aio.ServicerContext,
        response: admin_pb2.DescribeClusterResponse,
    ) -> admin_pb2.DescribeClusterResponse:
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

    async def RegisterBroker(
        self, request: admin_pb2.RegisterBrokerRequest, context: grpc.aio.ServicerContext
    ) -> admin_pb2.RegisterBrokerResponse:
        response = admin_pb2.RegisterBrokerResponse()
        return await self._guard(response, context, self._register(request, context, response))

    async def _register(
        self,
        request: admin_pb2.RegisterBrokerRequest,
        context: grpc.aio.ServicerContext,
        response: admin_pb2.RegisterBrokerResponse,
    ) -> admin_pb2.RegisterBrokerResponse:
        self._check_broker(context, request.broker_id)
        if request.cluster_id != self._cluster_id:
            raise RequestRejected(
                ErrorCode.INCONSISTENT_CLUSTER_ID,
                f"broker {request.broker_id} belongs to cluster {request.cluster_id!r}, this "
                f"quorum is cluster {self._cluster_id!r}: format the broker's log dirs with this "
                "cluster's id",
            )
        register = register_broker_from_proto(request)
        now = self._driver.clock.now_ms()
        answer, offset = await self._write(
            context,
            lambda sm, next_offset: sm.register_broker(
                register, next_offset=next_offset, now_ms=now
            ),
        )
        self._header(response, answer.error_code, answer.error_message or "")
        response.broker_epoch = answer.broker_epoch
        response.metadata_offset = offset
        return response

    async def BrokerHeartbeat(
        self, request: admin_pb2.BrokerHeartbeatRequest, context: grpc.aio.ServicerContext
    ) -> admin_pb2.BrokerHeartbeatResponse:
        response = admin_pb2.BrokerHeartbeatResponse()
        return await self._guard(response, context, self._heartbeat(request, context, response))

    async def _heartbeat(
        self,
        request: admin_pb2.BrokerHeartbeatRequest,
        context: grpc.aio.ServicerContext,
        response: admin_pb2.BrokerHeartbeatResponse,
    ) -> admin_pb2.BrokerHeartbeatResponse:
        self._check_broker(context, request.broker_id)
        heartbeat = broker_heartbeat_from_proto(request)
        now = self._driver.clock.now_ms()
        answer, offset = await self._write(
            context,
            lambda sm, next_offset: sm.broker_heartbeat(
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

    async def AllocateProducerIds(
        self, request: admin_pb2.AllocateProducerIdsRequest, context: grpc.aio.ServicerContext
    ) -> admin_pb2.AllocateProducerIdsResponse:
        response = admin_pb2.AllocateProducerIdsResponse(producer_id_start=-1)
        return await self._guard(
            response, context, self._allocate_producer_ids(request, context, response)
        )

    async def _allocate_producer_ids(
        self,
        request: admin_pb2.AllocateProducerIdsRequest,
        context: grpc.aio.ServicerContext,
        response: admin_pb2.AllocateProducerIdsResponse,
    ) -> admin_pb2.AllocateProducerIdsResponse:
        # A broker only, as itself, with CLUSTER_ACTION (Kafka's AllocateProducerIds needs
        # CLUSTER_ACTION too); the state machine checks its registration and epoch.
        self._check_broker(context, request.broker_id)
        allocate = allocate_producer_ids_from_proto(request)
        answer, offset = await self._write(
            context,
            lambda sm, next_offset: sm.allocate_producer_ids(allocate, next_offset=next_offset),
        )
        self._header(response, answer.error_code, answer.error_message or "")
        if answer.error_code is ErrorCode.NONE:
            response.producer_id_start = answer.producer_id_start
            response.producer_id_len = answer.producer_id_len
            response.metadata_offset = offset
        return response

    async def AlterPartition(
        self, request: admin_pb2.AlterPartitionRequest, context: grpc.aio.ServicerContext
    ) -> admin_pb2.AlterPartitionResponse:
        response = admin_pb2.AlterPartitionResponse()
        return await self._guard(
            response, context, self._alter_partition(request, context, response)
        )

    async def _alter_partition(
        self,
        request: admin_pb2.AlterPartitionRequest,
        context: grpc.aio.ServicerContext,
        response: admin_pb2.AlterPartitionResponse,
    ) -> admin_pb2.AlterPartitionResponse:
        # A broker only, as itself, with CLUSTER_ACTION (Kafka's AlterPartition needs
        # CLUSTER_ACTION too); the state machine checks the rest (quorum/controller/
        # alter_partition.py).
        self._check_broker(context, request.broker_id)
        alter = alter_partition_from_proto(request)  # ValueError: INVALID_REQUEST
        answer, offset = await self._write(
            context, lambda sm, next_offset: sm.alter_partition(alter, next_offset=next_offset)
        )
        self._header(response, answer.error_code, answer.error_message or "")
        if answer.error_code is ErrorCode.NONE:
            add_alter_partition_results(response, answer)
            response.metadata_offset = offset
        return response

    async def AlterConfigs(
        self, request: admin_pb2.AlterConfigsRequest, context: grpc.aio.ServicerContext
    ) -> admin_pb2.AlterConfigsResponse:
        response = admin_pb2.AlterConfigsResponse()
        return await self._guard(response, context, self._alter_configs(request, context, response))

    async def _alter_configs(
        self,
        request: admin_pb2.AlterConfigsRequest,
        context: grpc.aio.ServicerContext,
        response: admin_pb2.AlterConfigsResponse,
    ) -> admin_pb2.AlterConfigsResponse:
        """Kafka's IncrementalAlterConfigs / AlterConfigs: authorized per resource
        (quorum/server/alter_configs_auth.py), then the controller's ``alter_configs``
        (quorum/controller/alter_configs.py)."""
        _check_count(len(request.resources), limits.ALTER_CONFIGS_RESOURCES_MAX, "alter-configs")
        alter = alter_configs_from_proto(request)
        caller = self._callers.caller(context)
        image = self._write_image()
        refused = (
            {}
            if image is None
            else alter_configs_refusals(self._authorization, caller, image, alter)
        )
        allowed = AlterConfigsRequest(
            tuple(r for i, r in enumerate(alter.resources) if i not in refused),
            validate_only=alter.validate_only,
            incremental=alter.incremental,
        )
        if allowed.resources or not refused:
            answer, offset = await self._write(
                context, lambda sm, next_offset: sm.alter_configs(allowed, next_offset=next_offset)
            )
            results = iter(answer.results)
        else:
            results, offset = iter(()), self._image().offset
        add_alter_configs_results(
            response,
            tuple(
                AlterConfigsResult(r.resource_type, r.resource_name, *refused[index])
                if index in refused
                else next(results)
                for index, r in enumerate(alter.resources)
            ),
        )
        self._header(response)
        response.metadata_offset = offset
        return response

    async def ElectLeaders(
        self, request: admin_pb2.ElectLeadersRequest, context: grpc.aio.ServicerContext
    ) -> admin_pb2.ElectLeadersResponse:
        response = admin_pb2.ElectLeadersResponse()
        return await self._guard(response, context, self._elect_leaders(request, context, response))

    async def _elect_leaders(
        self,
        request: admin_pb2.ElectLeadersRequest,
        context: grpc.aio.ServicerContext,
        response: admin_pb2.ElectLeadersResponse,
    ) -> admin_pb2.ElectLeadersResponse:
        """Kafka's ElectLeaders: ALTER on the cluster (else CLUSTER_AUTHORIZATION_FAILED),
        then the controller's ``elect_leaders`` (quorum/controller/elections.py)."""
        caller = self._callers.caller(context)
        if not self._authorization.allows(
            caller, self._image(), AclOperation.ALTER, ResourceType.CLUSTER
        ):
            raise RequestRejected(
                ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
                f"{caller.principal} may not elect leaders: that needs ALTER on the cluster "
                f"(metaquorum acls --add --allow-principal {caller.principal} --operation Alter "
                "--cluster)",
            )
        elect = elect_leaders_from_proto(request)  # ValueError: INVALID_REQUEST
        answer, offset = await self._write(
            context, lambda sm, next_offset: sm.elect_leaders(elect, next_offset=next_offset)
        )
        self._header(response, answer.error_code, answer.error_message or "")
        if answer.error_code is ErrorCode.NONE:
            add_election_results(response, answer)
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

    async def CreateAcls(
        self, request: admin_pb2.CreateAclsRequest, context: grpc.aio.ServicerContext
    ) -> admin_pb2.CreateAclsResponse:
        response = admin_pb2.CreateAclsResponse()
        return await self._guard(response, context, self._create_acls(request, context, response))

    async def _create_acls(
        self,
        request: admin_pb2.CreateAclsRequest,
        context: grpc.aio.ServicerContext,
        response: admin_pb2.CreateAclsResponse,
    ) -> admin_pb2.CreateAclsResponse:
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
            lambda sm, next_offset: sm.create_acls(
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

    async def DeleteAcls(
        self, request: admin_pb2.DeleteAclsRequest, context: grpc.aio.ServicerContext
    ) -> admin_pb2.DeleteAclsResponse:
        response = admin_pb2.DeleteAclsResponse()
        return await self._guard(response, context, self._delete_acls(request, context, response))

    async def _delete_acls(
        self,
        request: admin_pb2.DeleteAclsRequest,
        context: grpc.aio.ServicerContext,
        response: admin_pb2.DeleteAclsResponse,
    ) -> admin_pb2.DeleteAclsResponse:
        _check_acl_entries(len(request.filters), "ACL filters")
        self._authorize_acls(context, AclOperation.ALTER)
        filters = [filter_from_proto(pb) for pb in request.filters]  # ValueError: INVALID_REQUEST
        answer, offset = await self._write(
            context, lambda sm, next_offset: sm.delete_acls(filters, next_offset=next_offset)
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

    async def DescribeConfigs(
        self, request: admin_pb2.DescribeConfigsRequest, context: grpc.aio.ServicerContext
    ) -> admin_pb2.DescribeConfigsResponse:
        response = admin_pb2.DescribeConfigsResponse()
        return await self._guard(
            response, context, self._describe_configs(request, context, response)
        )

    async def _describe_configs(
        self,
        request: admin_pb2.DescribeConfigsRequest,
        context: grpc.aio.ServicerContext,
        response: admin_pb2.DescribeConfigsResponse,
    ) -> admin_pb2.DescribeConfigsResponse:
        """Kafka's DescribeConfigs from this node's image (``describe_configs_answer``)."""
        _check_count(len(request.resources), limits.ALTER_CONFIGS_RESOURCES_MAX, "describe")
        await self._read_at(request, context)
        image = self._image()
        caller = self._callers.caller(context)
        for outcome in describe_configs_answer(
            self.describer, self._authorization, caller, image, request
        ):
            add_describe_configs_outcome(response.results, outcome)
        self._header(response)
        response.metadata_offset = image.offset
        return response

    AlterClientQuotas = client_quotas_rpc.AlterClientQuotas  # quorum/server/client_quotas_rpc.py
    DescribeClientQuotas = client_quotas_rpc.DescribeClientQuotas

    async def DescribeAcls(
        self, request: admin_pb2.DescribeAclsRequest, context: grpc.aio.ServicerContext
    ) -> admin_pb2.DescribeAclsResponse:
        response = admin_pb2.DescribeAclsResponse()
        return await self._guard(response, context, self._describe_acls(request, context, response))

    async def _describe_acls(
        self,
        request: admin_pb2.DescribeAclsRequest,
        context: grpc.aio.ServicerContext,
        response: admin_pb2.DescribeAclsResponse,
    ) -> admin_pb2.DescribeAclsResponse:
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
