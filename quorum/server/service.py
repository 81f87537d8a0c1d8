"""gRPC glue: the ``QuorumService`` servicer (inbound) and the peer clients (outbound).

Handlers translate protobuf to the core's messages (``transport.py``), hand them to the driver
and translate the answer back. Transport-level failures become gRPC status codes here and only
here: a shutting-down node answers UNAVAILABLE, a full inbox RESOURCE_EXHAUSTED, a request that
cannot be parsed INVALID_ARGUMENT. Protocol errors travel as Kafka error codes in the response.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import grpc
import structlog

from quorum import limits
from quorum.config import HostPort
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
    DescribeQuorumRequest,
    DescribeQuorumResponse,
    EndQuorumEpochRequest,
    EndQuorumEpochResponse,
    Envelope,
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
from quorum.raft.voters import VoterSet
from quorum.rpc.v1 import raft_pb2, raft_pb2_grpc
from quorum.security.acls import AclOperation, ResourceType
from quorum.security.authorization import RequestAuthorization
from quorum.security.events import SECURITY_EVENTS
from quorum.security.identity import ROLE_CONTROLLER, Caller, CallerResolver, node_server_name
from quorum.security.node_identity import (
    CONTROLLER_ONLY,
    Claim,
    IdentityRefusal,
    claim_of,
    fetch_claim,
    refuse_claim,
)
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
# A FetchStream without a request for this long is ended (replicas fetch every long poll).
FETCH_STREAM_IDLE_S = 60.0
# A FetchSnapshot answer stays well under the message cap.
CHUNK_BYTES_MAX = 4 * 1024 * 1024

# Requests a node accepts are small (Fetch is pull: the large messages are responses); an admin
# request above this is refused by gRPC with RESOURCE_EXHAUSTED before it is parsed.
REQUEST_BYTES_MAX = 4 * 1024 * 1024

# A channel to a peer whose connection failed retries after a backoff, and a request made
# meanwhile fails at once with the last error (UNAVAILABLE, connection refused) even if the
# peer is back: with gRPC's default backoff (1 s, growing 1.6x) a controller restarted a
# moment ago looked dead to its peers for up to seconds, and a follower of it as a new leader
# took that for its leader's death (``peer_gone``) and ran a needless pre-vote. Kafka's
# reconnect.backoff.ms (50) and reconnect.backoff.max.ms (1,000) instead; and a channel
# waiting out its backoff is replaced by a fresh one before a request (``AioChannels``).
RECONNECT_BACKOFF_MS = 50
RECONNECT_BACKOFF_MAX_MS = 1_000
GRPC_OPTIONS: list[tuple[str, Any]] = [
    ("grpc.max_receive_message_length", MESSAGE_BYTES_MAX),
    ("grpc.max_send_message_length", MESSAGE_BYTES_MAX),
    ("grpc.keepalive_time_ms", 10_000),
    ("grpc.keepalive_timeout_ms", 5_000),
    ("grpc.http2.min_ping_interval_without_data_ms", 5_000),
    ("grpc.initial_reconnect_backoff_ms", RECONNECT_BACKOFF_MS),
    ("grpc.min_reconnect_backoff_ms", RECONNECT_BACKOFF_MS),
    ("grpc.max_reconnect_backoff_ms", RECONNECT_BACKOFF_MAX_MS),
    # Subchannels of its own: a channel that replaces one waiting out a backoff
    # (``AioChannels``) then really connects anew instead of sharing the waiting subchannel.
    ("grpc.use_local_subchannel_pool", 1),
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

    async def _handle(
        self, request: Any, context: grpc.aio.ServicerContext, caller: Caller | None = None
    ) -> Any:
        try:
            message = transport.request_from_proto(request)
        except transport.MalformedMessageError as exc:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(exc))
        claim = claim_of(message, self._driver.node.voters)
        if claim is not None:
            refused = self._refuse(context, type(message).__name__, claim, caller=caller)
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
        if isinstance(message, BeginQuorumEpochRequest) and self._peers is not None:
            # KIP-853: the leader says where it listens (this node may not know it yet).
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
        return transport.response_to_proto(
            response, leader_endpoint=self._leader_endpoint(response.leader_id)
        )

    def _leader_endpoint(self, leader_id: int | None) -> str:
        if leader_id is None or self._peers is None:
            return ""
        return self._peers.endpoint_text(leader_id)

    # ----- voter changes (KIP-853) ----------------------------------------------------------

    async def AddRaftVoter(self, request: Any, context: grpc.aio.ServicerContext) -> Any:
        return await self._voter_change(request, context)

    async def RemoveRaftVoter(self, request: Any, context: grpc.aio.ServicerContext) -> Any:
        return await self._voter_change(request, context)

    async def UpdateRaftVoter(self, request: Any, context: grpc.aio.ServicerContext) -> Any:
        return await self._voter_change(request, context)

    async def _voter_change(self, request: Any, context: grpc.aio.ServicerContext) -> Any:
        """Hand a voter change to the core (which answers once it commits). Who may ask: for
        AddRaftVoter and RemoveRaftVoter, a principal allowed ALTER on the cluster (Kafka's
        rule), or a controller adding itself (controller.quorum.auto.join.enable); for
        UpdateRaftVoter, the voter itself (its certificate's node id)."""
        try:
            message = transport.voter_change_from_proto(request)
        except transport.MalformedMessageError as exc:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(exc))
        node = self._driver.node
        refusal = self._voter_change_refusal(message, self._callers.caller(context))
        if refusal is not None:
            code, text = refusal
            return transport.voter_change_response_to_proto(
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
        return transport.voter_change_response_to_proto(
            answer, self._leader_endpoint(answer.leader_id)
        )

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

    async def FetchStream(
        self, requests: AsyncIterator[Any], context: grpc.aio.ServicerContext
    ) -> AsyncIterator[Any]:
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
    """One channel per peer; sends the core's outbound requests with deadlines. Also the node's
    address book (KIP-853): node id -> address, from the static controller.quorum.voters, the
    voter sets in the log (``update_from_voter_sets``) and the leaders that said where they
    listen (``learn``); negative ids are controller.quorum.bootstrap.servers, in order.
    ``voter_addresses`` is a live dict other services may read (NOT_CONTROLLER redirects)."""

    def __init__(
        self,
        voters: Mapping[int, HostPort],
        request_timeout_ms: int,
        security: ClientSecurity | None = None,
        *,
        bootstrap: Sequence[HostPort] = (),
        local_id: int | None = None,
        local_endpoint: HostPort | None = None,
        listener_name: str = "",
        cluster_id: str | None = None,
    ) -> None:
        """``cluster_id``: check that each peer reached is the controller meant (over SSL the
        peer's certificate must carry ``node_server_name(cluster_id, "controller", id)``, or
        for a bootstrap server the name every controller of the cluster carries); None: check
        the host only (tests of the transport)."""
        self._cluster_id = cluster_id
        self._static = dict(voters)
        self.voter_addresses: dict[int, HostPort] = dict(voters)
        if local_id is not None and local_endpoint is not None:
            self.voter_addresses.setdefault(local_id, local_endpoint)
        self._from_sets: dict[int, HostPort] = {}
        self._learned: dict[int, HostPort] = {}
        # A controller may be among its own bootstrap servers: never fetch from itself.
        others = [address for address in bootstrap if address != local_endpoint]
        self._bootstrap = {-(index + 1): address for index, address in enumerate(others)}
        self._local_id = local_id
        self._local_endpoint = local_endpoint
        self._listener_name = listener_name
        self._request_timeout_s = request_timeout_ms / 1000
        # The node's own certificate is its client certificate; a channel is recreated when
        # the files changed (docs/security.md#rotation).
        self._channels = AioChannels(security or ClientSecurity.plaintext(), GRPC_OPTIONS)
        self._stubs: dict[int, tuple[grpc.aio.Channel, Any]] = {}
        self._fetch_streams = _FetchStreams()

    @property
    def bootstrap_ids(self) -> tuple[int, ...]:
        return tuple(self._bootstrap)

    def address_of(self, node_id: int) -> HostPort | None:
        if node_id < 0:
            return self._bootstrap.get(node_id)
        return self.voter_addresses.get(node_id)

    def endpoint_text(self, node_id: int) -> str:
        address = self.address_of(node_id)
        return "" if address is None else f"{address.host}:{address.port}"

    def update_from_voter_sets(self, sets: Iterable[VoterSet]) -> None:
        """The voter sets of the log changed: take every voter's endpoint (on this node's
        listener name when it has one, else its first), later sets winning."""
        found: dict[int, HostPort] = {}
        for voters in sets:
            for node in voters:
                if not node.endpoints:
                    continue
                chosen = next(
                    (e for e in node.endpoints if e.name == self._listener_name), node.endpoints[0]
                )
                found[node.node_id] = HostPort(chosen.host, chosen.port)
        self._from_sets = found
        self._rebuild()

    def learn(self, node_id: int | None, endpoint: str) -> None:
        """A leader said where it listens ("host:port"); kept unless the voter sets know it."""
        if node_id is None or node_id < 0 or not endpoint or node_id == self._local_id:
            return
        host, sep, port = endpoint.rpartition(":")
        if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
            return
        address = HostPort(host.strip("[]"), int(port))
        if self._learned.get(node_id) == address:
            return
        self._learned[node_id] = address
        self._rebuild()

    def _rebuild(self) -> None:
        addresses = {**self._learned, **self._static, **self._from_sets}
        if self._local_id is not None and self._local_endpoint is not None:
            addresses[self._local_id] = self._local_endpoint
        self.voter_addresses.clear()
        self.voter_addresses.update(addresses)

    def stub(self, node_id: int) -> Any:
        found = self._channel_and_stub(node_id)
        return None if found is None else found[1]

    def _server_name(self, node_id: int) -> str | None:
        """Whom this node means to reach as ``node_id``: controller ``node_id`` (a leader
        learned from a BeginQuorumEpoch is believed only if its certificate proves it), or any
        controller of the cluster (a bootstrap server, negative ids)."""
        if self._cluster_id is None:
            return None
        return node_server_name(self._cluster_id, ROLE_CONTROLLER, None if node_id < 0 else node_id)

    def _channel_and_stub(self, node_id: int) -> tuple[grpc.aio.Channel, Any] | None:
        address = self.address_of(node_id)
        if address is None:
            return None
        channel = self._channels.get(f"{address.host}:{address.port}", self._server_name(node_id))
        cached = self._stubs.get(node_id)
        if cached is None or cached[0] is not channel:
            cached = self._stubs[node_id] = (channel, raft_pb2_grpc.QuorumServiceStub(channel))
        return cached

    async def send(self, envelope: Envelope) -> Message:
        found = self._channel_and_stub(envelope.destination)
        if found is None:
            raise OSError(f"no address for node {envelope.destination}")
        channel, stub = found
        message = envelope.message
        timeout_s = self._request_timeout_s
        if not isinstance(message, transport.CoreRequest):
            raise AssertionError(f"not a request the core sends to peers: {message!r}")
        wire = transport.request_to_proto(message)
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
        if isinstance(wire, raft_pb2.BeginQuorumEpochRequest) and self._local_endpoint is not None:
            wire.leader_endpoint = f"{self._local_endpoint.host}:{self._local_endpoint.port}"
        response = None
        if isinstance(message, FetchRequest):
            response = await self._fetch_streams.exchange(
                envelope.destination, channel, stub, wire, timeout_s
            )
        if response is None:
            response = await call(wire, timeout=timeout_s)
        answer = transport.response_from_proto(response)
        leader_endpoint = getattr(response, "leader_endpoint", "")
        if leader_endpoint:
            self.learn(getattr(answer, "leader_id", None), leader_endpoint)
        return answer

    async def send_voter_change(
        self, destination: int, request: VoterChangeRequest, timeout_s: float
    ) -> tuple[VoterChangeResponse, str]:
        """Send AddRaftVoter / RemoveRaftVoter / UpdateRaftVoter to ``destination``; returns
        the answer and the leader endpoint it names."""
        stub = self.stub(destination)
        if stub is None:
            raise OSError(f"no address for node {destination}")
        wire = transport.voter_change_to_proto(request)
        call = {
            "AddRaftVoterRequest": stub.AddRaftVoter,
            "RemoveRaftVoterRequest": stub.RemoveRaftVoter,
            "UpdateRaftVoterRequest": stub.UpdateRaftVoter,
        }[type(wire).__name__]
        response = await call(wire, timeout=timeout_s)
        return transport.voter_change_response_from_proto(response), response.leader_endpoint

    async def close(self) -> None:
        self._fetch_streams.close()
        self._stubs.clear()
        await self._channels.close()


class _FetchStreams:
    """A replica's Fetch streams (``FetchStream``), one per destination on its current
    channel, each with one request in flight. A stream that failed, timed out or was
    interrupted mid-exchange is cancelled and dropped (its next answer could belong to the
    wrong request); the next Fetch opens a new one. ``exchange`` returns None when the caller
    should use unary ``Fetch`` instead: the destination's stream is busy, or the destination's
    address answered UNIMPLEMENTED (a node without FetchStream)."""

    def __init__(self) -> None:
        self._streams: dict[int, tuple[grpc.aio.Channel, Any]] = {}
        self._busy: set[int] = set()
        # destination -> the channel on which it answered UNIMPLEMENTED (a node without it)
        self._unary_only: dict[int, grpc.aio.Channel] = {}

    async def exchange(
        self, destination: int, channel: grpc.aio.Channel, stub: Any, wire: Any, timeout_s: float
    ) -> Any | None:
        if destination in self._busy or self._unary_only.get(destination) is channel:
            return None
        entry = self._streams.get(destination)
        if entry is not None and entry[0] is not channel:
            entry[1].cancel()  # the channel was replaced (new certificates): start afresh
            entry = None
        if entry is None:
            entry = self._streams[destination] = (channel, stub.FetchStream())
        call = entry[1]
        self._busy.add(destination)
        finished = False
        try:
            async with asyncio.timeout(timeout_s):
                await call.write(wire)
                response = await call.read()
            if response is grpc.aio.EOF:
                raise OSError(f"node {destination} ended its Fetch stream")
            finished = True
            return response
        except asyncio.InvalidStateError:
            # The call had already ended: surface its status as a unary call would.
            raise grpc.aio.AioRpcError(
                await call.code(),
                grpc.aio.Metadata(),
                grpc.aio.Metadata(),
                details=await call.details(),
            ) from None
        except grpc.aio.AioRpcError as exc:
            if exc.code() is grpc.StatusCode.UNIMPLEMENTED:
                self._unary_only[destination] = channel
                return None
            raise
        finally:
            self._busy.discard(destination)
            if not finished:
                call.cancel()
                if self._streams.get(destination, (None, None))[1] is call:
                    del self._streams[destination]

    def close(self) -> None:
        for _, call in self._streams.values():
            call.cancel()
        self._streams.clear()
