"""gRPC glue: the ``QuorumService`` servicer (inbound) and the peer clients (outbound).

Handlers translate protobuf to the core's messages (``transport.py``), hand them to the driver
and translate the answer back. Transport-level failures become gRPC status codes here and only
here: a shutting-down node answers UNAVAILABLE, a full inbox RESOURCE_EXHAUSTED, a request that
cannot be parsed INVALID_ARGUMENT. Protocol errors travel as Kafka error codes in the response.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import grpc
import structlog

from quorum.config import HostPort
from quorum.errors import (
    ErrorCode,
    InvalidRequestError,
    PositionOutOfRangeError,
    SnapshotNotFoundError,
)
from quorum.ids import METADATA_TOPIC_ID
from quorum.logs import LogThrottle
from quorum.raft.messages import (
    BeginQuorumEpochRequest,
    BeginQuorumEpochResponse,
    DescribeQuorumRequest,
    DescribeQuorumResponse,
    EndQuorumEpochRequest,
    EndQuorumEpochResponse,
    Envelope,
    FetchRequest,
    FetchResponse,
    Message,
    SnapshotId,
    VoteRequest,
    VoteResponse,
)
from quorum.rpc.v1 import raft_pb2, raft_pb2_grpc
from quorum.security.identity import Caller, CallerResolver
from quorum.security.node_identity import IdentityRefusal, claimed_node_id, refuse_claim
from quorum.security.tls import AioChannels, ClientSecurity
from quorum.server import transport
from quorum.server.driver import InboxFullError, RaftDriver, ShuttingDownError
from quorum.storage.snapshots import (
    read_chunk,
    snapshot_size,
)

# The slack a handler allows beyond the long-poll wait before giving up on the core.
HANDLER_TIMEOUT_S = 5.0
MESSAGE_BYTES_MAX = 16 * 1024 * 1024  # a full 8 MiB fetch plus framing, with room
# A FetchSnapshot answer stays well under the message cap.
CHUNK_BYTES_MAX = 4 * 1024 * 1024

# Requests a node accepts are small (Fetch is pull: the large messages are responses); an admin
# request above this is refused by gRPC with RESOURCE_EXHAUSTED before it is parsed.
REQUEST_BYTES_MAX = 4 * 1024 * 1024

GRPC_OPTIONS: list[tuple[str, Any]] = [
    ("grpc.max_receive_message_length", MESSAGE_BYTES_MAX),
    ("grpc.max_send_message_length", MESSAGE_BYTES_MAX),
    ("grpc.keepalive_time_ms", 10_000),
    ("grpc.keepalive_timeout_ms", 5_000),
    ("grpc.http2.min_ping_interval_without_data_ms", 5_000),
]
SERVER_OPTIONS: list[tuple[str, Any]] = [
    ("grpc.max_receive_message_length", REQUEST_BYTES_MAX),
    ("grpc.max_send_message_length", MESSAGE_BYTES_MAX),
    ("grpc.http2.min_ping_interval_without_data_ms", 5_000),
    ("grpc.max_concurrent_streams", 1_000),
]


def _source_of(message: Message) -> int:
    match message:
        case VoteRequest():
            return message.candidate_id
        case BeginQuorumEpochRequest() | EndQuorumEpochRequest():
            return message.leader_id
        case FetchRequest():
            return message.replica_id
    return -1


class QuorumServicer(raft_pb2_grpc.QuorumServiceServicer):
    def __init__(
        self,
        driver: RaftDriver,
        *,
        cluster_id: str,
        endpoints: Mapping[int, list[str]],
        leader_stub: Callable[[int], Any],
        snapshot_dir: Path | None = None,
        callers: CallerResolver | None = None,
    ) -> None:
        self._driver = driver
        self._cluster_id = cluster_id
        self._endpoints = endpoints
        self._leader_stub = leader_stub
        self._snapshot_dir = snapshot_dir
        self._callers = callers or CallerResolver()
        self._refusals = _RefusalLog(structlog.get_logger("quorum.security"))

    def _refuse(
        self, context: grpc.aio.ServicerContext, method: str, field: str, claimed: int
    ) -> tuple[Caller, IdentityRefusal] | None:
        caller = self._callers.caller(context)
        refusal = refuse_claim(caller, self._cluster_id, field, claimed)
        if refusal is None:
            return None
        self._refusals.log(caller, method, refusal)
        return caller, refusal

    async def FetchSnapshot(self, request: Any, context: grpc.aio.ServicerContext) -> Any:
        """KIP-630: a chunk of the leader's snapshot. Errors: INCONSISTENT_CLUSTER_ID,
        UNKNOWN_TOPIC_OR_PARTITION, NOT_LEADER_OR_FOLLOWER, FENCED_LEADER_EPOCH,
        SNAPSHOT_NOT_FOUND, POSITION_OUT_OF_RANGE (a position outside [0, size), negative
        included), INVALID_REQUEST (a snapshot id no snapshot can have, negative max_bytes)."""
        node = self._driver.node
        response = raft_pb2.FetchSnapshotResponse()
        response.current_leader.leader_id = node.leader_id if node.leader_id is not None else -1
        response.current_leader.leader_epoch = node.epoch
        response.snapshot_id.CopyFrom(request.snapshot_id)
        code = ErrorCode.NONE
        refused = self._refuse(context, "FetchSnapshot", "replica_id", request.replica_id)
        if refused is not None:
            response.error_code = int(refused[1].error_code)
            response.error_message = refused[1].message
            return response
        if request.cluster_id != self._cluster_id:
            code = ErrorCode.INCONSISTENT_CLUSTER_ID
        elif request.partition_index != 0:
            code = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        elif not node.is_leader():
            code = ErrorCode.NOT_LEADER_OR_FOLLOWER
        elif request.current_leader_epoch < node.epoch:
            code = ErrorCode.FENCED_LEADER_EPOCH
        if code is not ErrorCode.NONE or self._snapshot_dir is None:
            response.error_code = int(code or ErrorCode.SNAPSHOT_NOT_FOUND)
            return response
        if request.max_bytes < 0:
            response.error_code = int(ErrorCode.INVALID_REQUEST)
            response.error_message = (
                f"max_bytes {request.max_bytes} is negative; ask for 1 to {CHUNK_BYTES_MAX} "
                "bytes (0: the server's chunk size)"
            )
            return response
        snapshot = SnapshotId(request.snapshot_id.end_offset, request.snapshot_id.epoch)
        max_bytes = min(request.max_bytes or CHUNK_BYTES_MAX, CHUNK_BYTES_MAX)
        try:
            size = snapshot_size(self._snapshot_dir, snapshot)
            data = await asyncio.to_thread(
                read_chunk, self._snapshot_dir, snapshot, request.position, max_bytes
            )
        except (SnapshotNotFoundError, PositionOutOfRangeError, InvalidRequestError) as exc:
            response.error_code = int(exc.error_code)
            response.error_message = exc.message
            return response
        response.size = size
        response.position = request.position
        response.unaligned_records = data
        return response

    async def _handle(self, request: Any, context: grpc.aio.ServicerContext) -> Any:
        try:
            message = transport.request_from_proto(request)
        except transport.MalformedMessageError as exc:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(exc))
        claim = claimed_node_id(message)
        if claim is not None:
            refused = self._refuse(context, type(message).__name__, *claim)
            if refused is not None:
                return transport.response_to_proto(
                    self._refusal_response(message, refused[1]), refused[1].message
                )
        timeout_s = HANDLER_TIMEOUT_S
        if isinstance(message, FetchRequest):
            timeout_s += message.max_wait_ms / 1000
        remaining = context.time_remaining()
        if remaining is not None:
            timeout_s = min(timeout_s, max(0.0, remaining))
        try:
            answer = await self._driver.request(_source_of(message), message, timeout_s)
        except ShuttingDownError as exc:
            await context.abort(grpc.StatusCode.UNAVAILABLE, str(exc))
        except InboxFullError as exc:
            await context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED, str(exc))
        except TimeoutError:
            await context.abort(
                grpc.StatusCode.DEADLINE_EXCEEDED, "the quorum did not answer in time"
            )
        return transport.response_to_proto(_response(answer))

    def _refusal_response(
        self, message: Message, refusal: IdentityRefusal
    ) -> transport.CoreResponse:
        """The request's own response type carrying the refusal's code; the core never sees
        the request. The current epoch is no secret (every voter's Fetch answer has it)."""
        epoch = self._driver.node.epoch
        match message:
            case VoteRequest():
                return VoteResponse(refusal.error_code, None, epoch, vote_granted=False)
            case BeginQuorumEpochRequest():
                return BeginQuorumEpochResponse(refusal.error_code, None, epoch)
            case EndQuorumEpochRequest():
                return EndQuorumEpochResponse(refusal.error_code, None, epoch)
            case FetchRequest():
                return FetchResponse(refusal.error_code, None, epoch, -1, -1)
        raise AssertionError(f"no claimed id in {type(message).__name__}")

    async def Vote(self, request: Any, context: grpc.aio.ServicerContext) -> Any:
        return await self._handle(request, context)

    async def BeginQuorumEpoch(self, request: Any, context: grpc.aio.ServicerContext) -> Any:
        return await self._handle(request, context)

    async def EndQuorumEpoch(self, request: Any, context: grpc.aio.ServicerContext) -> Any:
        return await self._handle(request, context)

    async def Fetch(self, request: Any, context: grpc.aio.ServicerContext) -> Any:
        return await self._handle(request, context)

    async def DescribeQuorum(self, request: Any, context: grpc.aio.ServicerContext) -> Any:
        """Answered by the leader. Tools do not know the cluster id: an empty one means this
        node's. A follower forwards the request to the leader it knows (one hop).

        The answer names the cluster id only to a caller that authenticated with a
        certificate or that sent the id itself (docs/security.md#what-a-node-may-claim): on a
        plaintext listener an anonymous caller learns the quorum's shape, not the id every
        other request must carry."""
        asked_for = request.cluster_id
        if not request.cluster_id:
            request.cluster_id = self._cluster_id
        if not request.topic_id:
            request.topic_id = METADATA_TOPIC_ID.bytes
        try:
            message = transport.request_from_proto(request)
        except transport.MalformedMessageError as exc:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(exc))
        answer = await self._ask_core(message, context)
        if (
            isinstance(answer, DescribeQuorumResponse)
            and answer.error_code is ErrorCode.NOT_LEADER_OR_FOLLOWER
            and answer.leader_id is not None
            and answer.leader_id != self._driver.node.node_id
        ):
            stub = self._leader_stub(answer.leader_id)
            if stub is not None:
                try:
                    forwarded = await stub.DescribeQuorum(request, timeout=HANDLER_TIMEOUT_S)
                except grpc.aio.AioRpcError:
                    pass  # answer with what this node knows
                else:
                    if not self._shows_cluster_id(asked_for, context):
                        forwarded.cluster_id = ""
                    return forwarded
        node = self._driver.node
        foreign = getattr(answer, "error_code", None) is ErrorCode.INCONSISTENT_CLUSTER_ID
        # A request of another cluster learns nothing of this one (docs/invariants.md I15).
        shown = not foreign and self._shows_cluster_id(asked_for, context)
        return transport.response_to_proto(
            _response(answer),
            cluster_id=self._cluster_id if shown else "",
            topic_id=node.metadata_topic_id or METADATA_TOPIC_ID,
            to_wall_ms=self._driver.clock.to_wall_ms,
            endpoints=self._endpoints,
        )

    def _shows_cluster_id(self, asked_for: str, context: grpc.aio.ServicerContext) -> bool:
        return asked_for == self._cluster_id or self._callers.caller(context).authenticated

    async def _ask_core(self, message: Message, context: grpc.aio.ServicerContext) -> Message:
        try:
            return await self._driver.request(-1, message, HANDLER_TIMEOUT_S)
        except (ShuttingDownError, InboxFullError, TimeoutError) as exc:
            await context.abort(grpc.StatusCode.UNAVAILABLE, str(exc) or type(exc).__name__)
        raise AssertionError("unreachable")  # pragma: no cover


class _RefusalLog:
    """Logs refused claims: the first of each (caller, method, reason) in full, then one line
    per 1,000 (``LogThrottle``) so a flood of forged requests cannot flood the log."""

    def __init__(self, log: Any) -> None:
        self._log = log
        self._throttle = LogThrottle()

    def log(self, caller: Caller, method: str, refusal: IdentityRefusal) -> None:
        count = self._throttle.count((caller.principal, method, refusal.error_code.name))
        if count is not None:
            self._log.warning(
                "request_refused",
                method=method,
                peer=caller.peer,
                principal=caller.principal,
                certificate_node_id=caller.node_id,
                error_code=refusal.error_code.name,
                reason=refusal.message,
                refused_so_far=count,
            )


def _response(answer: Message) -> transport.CoreResponse:
    assert isinstance(
        answer,
        VoteResponse
        | BeginQuorumEpochResponse
        | EndQuorumEpochResponse
        | FetchResponse
        | DescribeQuorumResponse,
    ), answer
    return answer


class PeerClients:
    """One channel per voter; sends the core's outbound requests with deadlines."""

    def __init__(
        self,
        voters: Mapping[int, HostPort],
        request_timeout_ms: int,
        security: ClientSecurity | None = None,
    ) -> None:
        self._addresses = dict(voters)
        self._request_timeout_s = request_timeout_ms / 1000
        # The node's own certificate is its client certificate; a channel is recreated when
        # the files changed (docs/security.md#rotation).
        self._channels = AioChannels(security or ClientSecurity.plaintext(), GRPC_OPTIONS)
        self._stubs: dict[int, tuple[grpc.aio.Channel, Any]] = {}

    def stub(self, node_id: int) -> Any:
        if node_id not in self._addresses:
            return None
        address = self._addresses[node_id]
        channel = self._channels.get(f"{address.host}:{address.port}")
        cached = self._stubs.get(node_id)
        if cached is None or cached[0] is not channel:
            cached = self._stubs[node_id] = (channel, raft_pb2_grpc.QuorumServiceStub(channel))
        return cached[1]

    async def send(self, envelope: Envelope) -> Message:
        stub = self.stub(envelope.destination)
        if stub is None:
            raise OSError(f"no address for node {envelope.destination}")
        message = envelope.message
        timeout_s = self._request_timeout_s
        match message:
            case VoteRequest():
                call = stub.Vote
            case BeginQuorumEpochRequest():
                call = stub.BeginQuorumEpoch
            case EndQuorumEpochRequest():
                call = stub.EndQuorumEpoch
            case FetchRequest():
                call = stub.Fetch
                timeout_s += message.max_wait_ms / 1000
            case DescribeQuorumRequest():
                call = stub.DescribeQuorum
            case _:
                raise AssertionError(f"not a request: {message!r}")
        response = await call(transport.request_to_proto(message), timeout=timeout_s)
        return transport.response_from_proto(response)

    async def close(self) -> None:
        self._stubs.clear()
        await self._channels.close()
