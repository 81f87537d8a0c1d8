"""A node's clients to the other controllers (outbound Raft RPCs), shared by controllers and
brokers (``RaftManager`` builds them): one channel per peer, the core's requests sent with
deadlines, Fetch on one long-lived stream per leader (``FetchStreams``), and the node's address
book (KIP-853). The servicer that answers these requests is quorum/server/quorum_service.py.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import grpc

from quorum.config import HostPort
from quorum.raft.messages import (
    BeginQuorumEpochRequest,
    DescribeQuorumRequest,
    EndQuorumEpochRequest,
    Envelope,
    FetchRequest,
    Message,
    VoterChangeRequest,
    VoterChangeResponse,
    VoteRequest,
)
from quorum.raft.voters import VoterSet
from quorum.rpc.v1 import raft_pb2, raft_pb2_grpc
from quorum.security.identity import ROLE_CONTROLLER, node_server_name
from quorum.security.tls import AioChannels, ClientSecurity
from quorum.server.grpc_options import NODE_CHANNEL_OPTIONS
from quorum.wire.raft import (
    CoreRequest,
    request_to_proto,
    response_from_proto,
    voter_change_response_from_proto,
    voter_change_to_proto,
)

__all__ = ["FetchStreams", "PeerClients"]


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
        self._channels = AioChannels(security or ClientSecurity.plaintext(), NODE_CHANNEL_OPTIONS)
        self._stubs: dict[int, tuple[grpc.aio.Channel, Any]] = {}
        self._fetch_streams = FetchStreams()

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
        if not isinstance(message, CoreRequest):
            raise AssertionError(f"not a request the core sends to peers: {message!r}")
        wire = request_to_proto(message)
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
        answer = response_from_proto(response)
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
        wire = voter_change_to_proto(request)
        call = {
            "AddRaftVoterRequest": stub.AddRaftVoter,
            "RemoveRaftVoterRequest": stub.RemoveRaftVoter,
            "UpdateRaftVoterRequest": stub.UpdateRaftVoter,
        }[type(wire).__name__]
        response = await call(wire, timeout=timeout_s)
        return voter_change_response_from_proto(response), response.leader_endpoint

    async def close(self) -> None:
        self._fetch_streams.close()
        self._stubs.clear()
        await self._channels.close()


class FetchStreams:
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
