"""The ``QuorumService`` servicer of a controller (inbound Raft RPCs, FetchSnapshot, voter
changes, DescribeQuorum). The clients that send these requests to other controllers are
quorum/server/peers.py; the gRPC options both use, quorum/server/grpc_options.py.

Handlers translate protobuf to the core's messages (``quorum/wire/raft.py``), hand them to the
driver and translate the answer back. Transport-level failures become gRPC status codes here and
only here: a shutting-down node answers UNAVAILABLE, a full inbox RESOURCE_EXHAUSTED, a request
that cannot be parsed INVALID_ARGUMENT. Protocol errors travel as Kafka error codes in the
response.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Mapping
from pathlib import Path
from typing import Any, cast, overload

import grpc
import structlog

from quorum import limits
from quorum.errors import (
    ErrorCode,
    InvalidRequestError,
    PositionOutOfRangeError,
    SnapshotNotFoundError,
)
from quorum.ids import METADATA_TOPIC_ID
from quorum.logs import LogThrottle
from quorum.metadata.image import MetadataImage
from quorum.raft.messages import (
    AddRaftVoterRequest,
    BeginQuorumEpochRequest,
    BeginQuorumEpochResponse,
    DescribeQuorumResponse,
    EndQuorumEpochRequest,
    EndQuorumEpochResponse,
    FetchRequest,
    FetchResponse,
    Message,
    SnapshotId,
    UpdateRaftVoterRequest,
    VoterChangeRequest,
    VoterChangeResponse,
    VoteRequest,
    VoteResponse,
)
from quorum.rpc.v1 import raft_pb2, raft_pb2_grpc
from quorum.security.acls import AclOperation, ResourceType
from quorum.security.authorization import RequestAuthorization
from quorum.security.events import SECURITY_EVENTS
from quorum.security.identity import Caller, CallerResolver
from quorum.security.node_identity import (
    CONTROLLER_ONLY,
    Claim,
    IdentityRefusal,
    claim_of,
    fetch_claim,
    refuse_claim,
)
from quorum.server.driver import InboxFullError, RaftDriver, ShuttingDownError
from quorum.server.peers import PeerClients
from quorum.storage.snapshots import read_chunk, snapshot_size
from quorum.wire.raft import (
    CoreResponse,
    MalformedMessageError,
    RequestProto,
    ResponseProto,
    VoterChangeProto,
    request_from_proto,
    response_to_proto,
    voter_change_from_proto,
    voter_change_response_to_proto,
)

# The slack a handler allows beyond the long-poll wait before giving up on the core.
HANDLER_TIMEOUT_S = 5.0
# A FetchStream without a request for this long is ended (replicas fetch every long poll).
FETCH_STREAM_IDLE_S = 60.0
# A FetchSnapshot answer stays well under the message cap.
CHUNK_BYTES_MAX = 4 * 1024 * 1024


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
        peers: PeerClients | None = None,
        authorization: RequestAuthorization | None = None,
        image: Callable[[], MetadataImage] | None = None,
    ) -> None:
        """``peers``: the node's address book (KIP-853: leader endpoints in answers, learned
        from BeginQuorumEpoch); ``authorization`` and ``image``: who may add and remove voters
        (ALTER on the cluster, by the ACLs of the image)."""
        self._driver = driver
        self._cluster_id = cluster_id
        self._endpoints = endpoints
        self._leader_stub = leader_stub
        self._snapshot_dir = snapshot_dir
        self._callers = callers or CallerResolver()
        self._refusals = _RefusalLog(structlog.get_logger("quorum.security"))
        self._peers = peers
        self._authorization = authorization or RequestAuthorization.disabled(cluster_id)
        self._image = image or (lambda: MetadataImage.EMPTY)

    def _refuse(
        self,
        context: grpc.aio.ServicerContext,
        method: str,
        claim: Claim,
        caller: Caller | None = None,
    ) -> tuple[Caller, IdentityRefusal] | None:
        """The refusal of a request making ``claim`` (its sender's id and role), or None.
        ``caller``: who the call's connection authenticated, if already known."""
        if caller is None:
            caller = self._callers.caller(context)
        refusal = refuse_claim(caller, self._cluster_id, claim)
        if refusal is None:
            return None
        self._refusals.log(caller, method, refusal)
        return caller, refusal

    async def FetchSnapshot(
        self, request: raft_pb2.FetchSnapshotRequest, context: grpc.aio.ServicerContext
    ) -> raft_pb2.FetchSnapshotResponse:
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
        claim = fetch_claim(request.replica_id, node.voters)
        refused = self._refuse(context, "FetchSnapshot", claim)
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

    @overload
    async def _handle(
        self,
        request: raft_pb2.VoteRequest,
        context: grpc.aio.ServicerContext,
        caller: Caller | None = None,
    ) -> raft_pb2.VoteResponse: ...
    @overload
    async def _handle(
        self,
        request: raft_pb2.BeginQuorumEpochRequest,
        context: grpc.aio.ServicerContext,
        caller: Caller | None = None,
    ) -> raft_pb2.BeginQuorumEpochResponse: ...
    @overload
    async def _handle(
        self,
        request: raft_pb2.EndQuorumEpochRequest,
        context: grpc.aio.ServicerContext,
        caller: Caller | None = None,
    ) -> raft_pb2.EndQuorumEpochResponse: ...
    @overload
    async def _handle(
        self,
        request: raft_pb2.FetchRequest,
        context: grpc.aio.ServicerContext,
        caller: Caller | None = None,
    ) -> raft_pb2.FetchResponse: ...
    async def _handle(
        self, request: RequestProto, context: grpc.aio.ServicerContext, caller: Caller | None = None
    ) -> ResponseProto:
        """Vote, BeginQuorumEpoch, EndQuorumEpoch and Fetch: the core answers each with the
        response of the request's own type (the overloads say which)."""
        try:
            message = request_from_proto(request)
        except MalformedMessageError as exc:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(exc))
        claim = claim_of(message, self._driver.node.voters)
        if claim is not None:
            refused = self._refuse(context, type(message).__name__, claim, caller=caller)
            if refused is not None:
                return response_to_proto(
                    self._refusal_response(message, refused[1]), refused[1].message
                )
        timeout_s = HANDLER_TIMEOUT_S
        if isinstance(message, FetchRequest):
            timeout_s += message.max_wait_ms / 1000
        remaining = context.time_remaining()
        if remaining is not None:
            timeout_s = min(timeout_s, max(0.0, remaining))
        if isinstance(message, BeginQuorumEpochRequest) and self._peers is not None:
            # KIP-853: the leader says where it listens (this node may not know it yet).
            assert isinstance(request, raft_pb2.BeginQuorumEpochRequest)
            self._peers.learn(message.leader_id, request.leader_endpoint)
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
        response = _response(answer)
        return response_to_proto(
            response, leader_endpoint=self._leader_endpoint(response.leader_id)
        )

    def _leader_endpoint(self, leader_id: int | None) -> str:
        if leader_id is None or self._peers is None:
            return ""
        return self._peers.endpoint_text(leader_id)

    # ----- voter changes (KIP-853) ----------------------------------------------------------

    async def AddRaftVoter(
        self, request: raft_pb2.AddRaftVoterRequest, context: grpc.aio.ServicerContext
    ) -> raft_pb2.VoterChangeResponse:
        return await self._voter_change(request, context)

    async def RemoveRaftVoter(
        self, request: raft_pb2.RemoveRaftVoterRequest, context: grpc.aio.ServicerContext
    ) -> raft_pb2.VoterChangeResponse:
        return await self._voter_change(request, context)

    async def UpdateRaftVoter(
        self, request: raft_pb2.UpdateRaftVoterRequest, context: grpc.aio.ServicerContext
    ) -> raft_pb2.VoterChangeResponse:
        return await self._voter_change(request, context)

    async def _voter_change(
        self, request: VoterChangeProto, context: grpc.aio.ServicerContext
    ) -> raft_pb2.VoterChangeResponse:
        """Hand a voter change to the core (which answers once it commits). Who may ask: for
        AddRaftVoter and RemoveRaftVoter, a principal allowed ALTER on the cluster (Kafka's
        rule), or a controller adding itself (controller.quorum.auto.join.enable); for
        UpdateRaftVoter, the voter itself (its certificate's node id)."""
        try:
            message = voter_change_from_proto(request)
        except MalformedMessageError as exc:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(exc))
        node = self._driver.node
        refusal = self._voter_change_refusal(message, self._callers.caller(context))
        if refusal is not None:
            code, text = refusal
            return voter_change_response_to_proto(
                VoterChangeResponse(code, text, node.leader_id, node.epoch)
            )
        timeout_s = HANDLER_TIMEOUT_S
        if isinstance(message, AddRaftVoterRequest):
            timeout_s += min(message.timeout_ms, limits.VOTER_CHANGE_TIMEOUT_MS_MAX) / 1000
        else:
            timeout_s += limits.VOTER_CHANGE_TIMEOUT_MS_MAX / 1000
        remaining = context.time_remaining()
        if remaining is not None:
            timeout_s = min(timeout_s, max(0.0, remaining))
        try:
            answer = await self._driver.request(-1, message, timeout_s)
        except ShuttingDownError as exc:
            await context.abort(grpc.StatusCode.UNAVAILABLE, str(exc))
        except InboxFullError as exc:
            await context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED, str(exc))
        except TimeoutError:
            await context.abort(
                grpc.StatusCode.DEADLINE_EXCEEDED,
                "the voter change did not finish before the call's deadline; it may still "
                "take effect: run `metaquorum quorum describe --status`",
            )
        assert isinstance(answer, VoterChangeResponse), answer
        return voter_change_response_to_proto(answer, self._leader_endpoint(answer.leader_id))

    def _voter_change_refusal(
        self, message: VoterChangeRequest, caller: Caller
    ) -> tuple[ErrorCode, str] | None:
        method = type(message).__name__.removesuffix("Request")
        if isinstance(message, UpdateRaftVoterRequest):
            claim = Claim("voter_id", message.voter_id, CONTROLLER_ONLY)
            identity = refuse_claim(caller, self._cluster_id, claim)
            if identity is not None:
                self._refusals.log(caller, method, identity)
                return identity.error_code, identity.message
            return None
        if caller.is_node:
            if isinstance(message, AddRaftVoterRequest) and caller.node_id == message.voter_id:
                # A controller adding itself (controller.quorum.auto.join.enable); a broker's
                # certificate may not (it would make the broker a voter).
                claim = Claim("voter_id", message.voter_id, CONTROLLER_ONLY)
                identity = refuse_claim(caller, self._cluster_id, claim)
                if identity is not None:
                    self._refusals.log(caller, method, identity)
                    return identity.error_code, identity.message
                return None
            refusal = IdentityRefusal(
                ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
                f"{caller.describe_node()} may only add itself to the voter set; adding or "
                "removing other voters needs an operator's principal with ALTER on the cluster",
            )
            self._refusals.log(caller, method, refusal)
            return refusal.error_code, refusal.message
        if not self._authorization.allows(
            caller, self._image(), AclOperation.ALTER, ResourceType.CLUSTER
        ):
            refusal = IdentityRefusal(
                ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
                f"{caller.principal} may not change the voter set: it needs ALTER on the "
                "cluster (an ACL, or super.users)",
            )
            self._refusals.log(caller, method, refusal)
            return refusal.error_code, refusal.message
        return None

    def _refusal_response(self, message: Message, refusal: IdentityRefusal) -> CoreResponse:
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

    async def Vote(
        self, request: raft_pb2.VoteRequest, context: grpc.aio.ServicerContext
    ) -> raft_pb2.VoteResponse:
        return await self._handle(request, context)

    async def BeginQuorumEpoch(
        self, request: raft_pb2.BeginQuorumEpochRequest, context: grpc.aio.ServicerContext
    ) -> raft_pb2.BeginQuorumEpochResponse:
        return await self._handle(request, context)

    async def EndQuorumEpoch(
        self, request: raft_pb2.EndQuorumEpochRequest, context: grpc.aio.ServicerContext
    ) -> raft_pb2.EndQuorumEpochResponse:
        return await self._handle(request, context)

    async def Fetch(
        self, request: raft_pb2.FetchRequest, context: grpc.aio.ServicerContext
    ) -> raft_pb2.FetchResponse:
        return await self._handle(request, context)

    async def FetchStream(
        self, requests: AsyncIterator[raft_pb2.FetchRequest], context: grpc.aio.ServicerContext
    ) -> AsyncIterator[raft_pb2.FetchResponse]:
        """Fetch on one stream: each request answered in order as ``Fetch`` answers it (the
        same checks, long poll and codes). One request is handled at a time, so a replica that
        writes ahead only fills gRPC's flow-control window. A failure that would end a unary
        call with a status (shutting down, a full inbox, a malformed request) ends the stream
        with it; the replica opens a new one. A stream that carries no request for
        ``FETCH_STREAM_IDLE_S`` ends DEADLINE_EXCEEDED: a replica fetches at least every long
        poll, so only a stalled or hostile one holds a stream that long."""
        pending = aiter(requests)
        # Every request of a stream comes over one call of one connection: who sent it is
        # resolved once, not per Fetch (the certificate and metadata cannot change).
        caller: Caller | None = None
        while True:
            try:
                async with asyncio.timeout(FETCH_STREAM_IDLE_S):
                    request = await anext(pending)
            except StopAsyncIteration:
                return
            except TimeoutError:
                await context.abort(
                    grpc.StatusCode.DEADLINE_EXCEEDED,
                    f"no Fetch on this stream for {FETCH_STREAM_IDLE_S:g} s; a replica sends "
                    "one at least every long poll: open a new stream",
                )
            if caller is None:
                caller = self._callers.caller(context)
            yield await self._handle(request, context, caller)

    async def DescribeQuorum(
        self, request: raft_pb2.DescribeQuorumRequest, context: grpc.aio.ServicerContext
    ) -> raft_pb2.DescribeQuorumResponse:
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
            message = request_from_proto(request)
        except MalformedMessageError as exc:
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
                    return cast(raft_pb2.DescribeQuorumResponse, forwarded)
        node = self._driver.node
        foreign = getattr(answer, "error_code", None) is ErrorCode.INCONSISTENT_CLUSTER_ID
        # A request of another cluster learns nothing of this one (docs/invariants.md I15).
        shown = not foreign and self._shows_cluster_id(asked_for, context)
        described = response_to_proto(
            _response(answer),
            cluster_id=self._cluster_id if shown else "",
            topic_id=node.metadata_topic_id or METADATA_TOPIC_ID,
            to_wall_ms=self._driver.clock.to_wall_ms,
            endpoints=self._endpoints,
        )
        return cast(raft_pb2.DescribeQuorumResponse, described)

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
        SECURITY_EVENTS.refused("request_refused", refusal.error_code.name)
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


def _response(answer: Message) -> CoreResponse:
    assert isinstance(
        answer,
        VoteResponse
        | BeginQuorumEpochResponse
        | EndQuorumEpochResponse
        | FetchResponse
        | DescribeQuorumResponse,
    ), answer
    return answer
