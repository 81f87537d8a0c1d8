"""FetchStream, in-process: the follower side (``PeerClients``) keeps one stream per leader and
one request in flight on it, opens a new stream after a timeout, and uses unary Fetch against a
node that answers UNIMPLEMENTED; the leader side answers each request in order as Fetch does and
ends the stream INVALID_ARGUMENT at the first message that does not decode."""

from __future__ import annotations

import asyncio
import contextlib
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable
from types import SimpleNamespace
from typing import Any, TypeVar

import grpc
import pytest

from quorum.config import HostPort
from quorum.errors import ErrorCode
from quorum.harness import free_port
from quorum.ids import METADATA_TOPIC_ID
from quorum.raft.messages import Envelope, FetchRequest, FetchResponse, RequestHeader
from quorum.rpc.v1 import raft_pb2, raft_pb2_grpc
from quorum.security.identity import Caller, CallerResolver
from quorum.server import peers as peers_module
from quorum.server import quorum_service
from quorum.server.driver import peer_gone
from quorum.server.grpc_server import make_server
from quorum.server.peers import PeerClients

T = TypeVar("T")
HEADER = RequestHeader("stream-test", METADATA_TOPIC_ID, 0)
SERVICE = "quorum.rpc.v1.QuorumService"
TRUNCATED = b"\x0a\x64\x00"  # field 1 announced as 100 bytes long, 1 byte follows


def fetch(offset: int, max_wait_ms: int = 0) -> Envelope:
    request = FetchRequest(HEADER, 1, 3, offset, 0, max_wait_ms, 1024)
    return Envelope(1, 2, offset, request)


class Leader:
    """A leader's Fetch and FetchStream that answer a request at ``fetch_offset`` with that
    offset as high watermark (``stall_at``: never answer that offset), counting the calls."""

    def __init__(self, *, stream: bool = True, stall_at: int | None = None) -> None:
        self.calls: Counter[str] = Counter()
        self.streamed: list[int] = []
        self.stream = stream
        self.stall_at = stall_at

    async def answer(self, request: Any) -> Any:
        if request.fetch_offset == self.stall_at:
            await asyncio.sleep(30)
        return raft_pb2.FetchResponse(
            current_leader=raft_pb2.LeaderIdAndEpoch(leader_id=2, leader_epoch=3),
            high_watermark=request.fetch_offset,
        )

    async def fetch(self, request: Any, context: grpc.aio.ServicerContext) -> Any:
        self.calls["Fetch"] += 1
        return await self.answer(request)

    async def fetch_stream(
        self, requests: AsyncIterator[Any], context: grpc.aio.ServicerContext
    ) -> AsyncIterator[Any]:
        self.calls["FetchStream"] += 1
        async for request in requests:
            self.streamed.append(request.fetch_offset)
            yield await self.answer(request)

    def service(self, details: grpc.HandlerCallDetails) -> grpc.RpcMethodHandler | None:
        if details.method == f"/{SERVICE}/Fetch":
            return grpc.unary_unary_rpc_method_handler(
                self.fetch,
                request_deserializer=raft_pb2.FetchRequest.FromString,
                response_serializer=raft_pb2.FetchResponse.SerializeToString,
            )
        if details.method == f"/{SERVICE}/FetchStream" and self.stream:
            return grpc.stream_stream_rpc_method_handler(
                self.fetch_stream,
                request_deserializer=raft_pb2.FetchRequest.FromString,
                response_serializer=raft_pb2.FetchResponse.SerializeToString,
            )
        self.calls["UNIMPLEMENTED"] += 1
        return None


def leader_server(leader: Leader) -> grpc.aio.Server:
    server = make_server()

    class Handler(grpc.GenericRpcHandler):  # type: ignore[misc]
        def service(self, details: grpc.HandlerCallDetails) -> Any:
            return leader.service(details)

    server.add_generic_rpc_handlers((Handler(),))
    return server


def against(leader: Leader, body: Callable[[PeerClients, int], Awaitable[T]]) -> T:
    async def main() -> T:
        server = leader_server(leader)
        port = server.add_insecure_port("127.0.0.1:0")
        await server.start()
        peers = PeerClients({2: HostPort("127.0.0.1", port)}, request_timeout_ms=2_000)
        try:
            return await body(peers, port)
        finally:
            await peers.close()
            await server.stop(None)

    return asyncio.run(main())


def test_fetches_share_one_stream_one_request_at_a_time() -> None:
    leader = Leader()

    async def body(peers: PeerClients, _port: int) -> None:
        for offset in (5, 6, 7):
            answer = await peers.send(fetch(offset))
            assert isinstance(answer, FetchResponse)
            assert answer.error_code is ErrorCode.NONE
            assert answer.high_watermark == offset  # each answer is its own request's

    against(leader, body)
    assert leader.calls == Counter({"FetchStream": 1})
    assert leader.streamed == [5, 6, 7]


def test_a_timed_out_exchange_drops_the_stream_and_the_next_fetch_opens_another() -> None:
    leader = Leader(stall_at=9)

    async def body(peers: PeerClients, _port: int) -> None:
        peers._request_timeout_s = 0.3  # the Fetch's deadline: request timeout + max wait
        with pytest.raises(TimeoutError):
            await peers.send(fetch(9))
        answer = await peers.send(fetch(10))
        assert isinstance(answer, FetchResponse)
        assert answer.high_watermark == 10  # not the late answer to offset 9

    against(leader, body)
    assert leader.calls["FetchStream"] == 2
    assert leader.calls["Fetch"] == 0


def test_a_leader_without_fetch_stream_is_fetched_from_with_unary_fetch() -> None:
    leader = Leader(stream=False)

    async def body(peers: PeerClients, _port: int) -> None:
        for offset in (3, 4):
            answer = await peers.send(fetch(offset))
            assert isinstance(answer, FetchResponse)
            assert answer.high_watermark == offset

    against(leader, body)
    # UNIMPLEMENTED once, then unary Fetch only on that channel.
    assert leader.calls == Counter({"UNIMPLEMENTED": 1, "Fetch": 2})


def test_a_second_fetch_while_the_stream_is_busy_goes_unary() -> None:
    leader = Leader()

    async def body(peers: PeerClients, _port: int) -> None:
        first = asyncio.create_task(peers.send(fetch(20, max_wait_ms=0)))
        second = asyncio.create_task(peers.send(fetch(21)))
        answers = await asyncio.gather(first, second)
        assert [a.high_watermark for a in answers] == [20, 21]

    against(leader, body)
    assert leader.calls == Counter({"FetchStream": 1, "Fetch": 1})


def test_an_undecodable_message_ends_the_stream_invalid_argument() -> None:
    leader = Leader()

    async def body(_peers: PeerClients, port: int) -> grpc.aio.AioRpcError:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            call = channel.stream_stream(f"/{SERVICE}/FetchStream")()  # raw bytes
            await call.write(raft_pb2.FetchRequest(fetch_offset=4).SerializeToString())
            first = raft_pb2.FetchResponse.FromString(await call.read())
            assert first.high_watermark == 4
            await call.write(TRUNCATED)
            with pytest.raises(grpc.aio.AioRpcError) as caught:
                await call.read()
            return caught.value

    error = against(leader, body)
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
    details = error.details() or ""
    assert details.startswith("request QuorumService/FetchStream could not be decoded: "), details
    assert f"({len(TRUNCATED)} bytes received)" in details


def leading_servicer(**driver: Any) -> quorum_service.QuorumServicer:
    """The QuorumService of node 1, leader of epoch 3, on a stand-in driver (``driver``: its
    other attributes, e.g. ``request``) and with the default ``callers`` unless given."""
    callers = driver.pop("callers", None)
    node = SimpleNamespace(
        leader_id=1, epoch=3, node_id=1, is_leader=lambda: True, voters=frozenset({1})
    )
    return quorum_service.QuorumServicer(
        SimpleNamespace(node=node, **driver),  # type: ignore[arg-type]
        cluster_id="stream-test",
        endpoints={},
        leader_stub=lambda _node_id: None,
        callers=callers,
    )


@contextlib.asynccontextmanager
async def fetch_stream_to(servicer: quorum_service.QuorumServicer) -> AsyncIterator[Any]:
    """A FetchStream call to a server of ``servicer`` on a free port."""
    server = make_server()
    raft_pb2_grpc.add_QuorumServiceServicer_to_server(servicer, server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            yield raft_pb2_grpc.QuorumServiceStub(channel).FetchStream()
    finally:
        await server.stop(None)


def test_the_leader_ends_a_stream_that_carries_no_request(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """An idle stream (a stalled or hostile replica) does not hold a handler for ever."""
    monkeypatch.setattr(quorum_service, "FETCH_STREAM_IDLE_S", 0.2)
    servicer = leading_servicer()

    async def main() -> grpc.aio.AioRpcError:
        async with fetch_stream_to(servicer) as call:
            with pytest.raises(grpc.aio.AioRpcError) as caught:
                async with asyncio.timeout(10):
                    await call.read()
            return caught.value

    error = asyncio.run(main())
    assert error.code() == grpc.StatusCode.DEADLINE_EXCEEDED
    assert "no Fetch on this stream for 0.2 s" in (error.details() or "")


def test_a_stream_resolves_its_caller_once_not_per_fetch() -> None:
    """Who sent a stream's Fetches (certificate, metadata) cannot change within the call: the
    leader resolves it at the first Fetch and checks every Fetch's replica id against it."""
    resolved: list[str] = []

    class CountingResolver(CallerResolver):
        def caller(self, context: Any) -> Caller:
            found = super().caller(context)
            resolved.append(found.principal)
            return found

    async def request(_source: int, message: Any, _timeout_s: float) -> FetchResponse:
        return FetchResponse(ErrorCode.NONE, 1, 3, message.fetch_offset, 0)

    servicer = leading_servicer(request=request, callers=CountingResolver())

    async def main() -> list[int]:
        async with fetch_stream_to(servicer) as call:
            answers = []
            for offset in (4, 5, 6):
                await call.write(
                    raft_pb2.FetchRequest(
                        cluster_id="stream-test",
                        topic_id=METADATA_TOPIC_ID.bytes,
                        replica_id=2,
                        current_leader_epoch=3,
                        fetch_offset=offset,
                        max_bytes=1024,
                    )
                )
                answer = await call.read()
                assert answer.error_code == 0, answer
                answers.append(answer.high_watermark)
            await call.done_writing()
            return answers

    assert asyncio.run(main()) == [4, 5, 6]
    assert resolved == ["User:ANONYMOUS"]


def test_a_peer_back_from_a_restart_is_reached_at_once_not_after_a_reconnect_backoff(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A channel whose connection was refused waits out a reconnect backoff and fails every
    call at once meanwhile with the old error, even once the peer listens again: a leader
    restarted a moment ago looked dead (``peer_gone``) to its followers. PeerClients replaces
    such a channel, so the next Fetch reaches the peer at once. The backoff here is 30 s, so
    only the replacement can explain the answer."""
    monkeypatch.setattr(
        peers_module,
        "NODE_CHANNEL_OPTIONS",
        [
            *peers_module.NODE_CHANNEL_OPTIONS,
            ("grpc.initial_reconnect_backoff_ms", 30_000),
            ("grpc.min_reconnect_backoff_ms", 30_000),
        ],
    )
    leader = Leader()

    async def main() -> None:
        port = free_port()
        peers = PeerClients({2: HostPort("127.0.0.1", port)}, request_timeout_ms=2_000)
        server = None
        try:
            with pytest.raises(grpc.aio.AioRpcError) as refused:  # nothing listens yet
                await peers.send(fetch(1))
            assert peer_gone(refused.value)
            server = leader_server(leader)
            server.add_insecure_port(f"127.0.0.1:{port}")
            await server.start()
            answer = await peers.send(fetch(2))
            assert isinstance(answer, FetchResponse)
            assert answer.high_watermark == 2
        finally:
            await peers.close()
            if server is not None:
                await server.stop(None)

    asyncio.run(main())
    assert leader.streamed == [2]
