"""The fault proxy (quorum/faults/proxy.py) against plain TCP echo servers and a real gRPC
server: bytes pass intact, a blackhole is silence both ways, a reset is immediate, delay
keeps order, and the group operations set exactly the links they should."""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Iterator
from concurrent import futures

import grpc
import pytest
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

from quorum.faults.proxy import PASS, FaultProxy, LinkFaults, LinkMode
from quorum.harness import wait_until


@contextlib.contextmanager
def echo_server() -> Iterator[int]:
    """A threaded TCP echo server on 127.0.0.1; yields its port."""
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.bind(("127.0.0.1", 0))
    listener.listen(16)
    listener.settimeout(0.2)
    stop = threading.Event()
    threads: list[threading.Thread] = []

    def serve(conn: socket.socket) -> None:
        with conn:
            conn.settimeout(0.2)
            while not stop.is_set():
                try:
                    data = conn.recv(65536)
                except TimeoutError:
                    continue
                except OSError:
                    return
                if not data:
                    return
                with contextlib.suppress(OSError):
                    conn.sendall(data)

    def accept() -> None:
        while not stop.is_set():
            try:
                conn, _ = listener.accept()
            except (TimeoutError, OSError):
                continue
            thread = threading.Thread(target=serve, args=(conn,), daemon=True)
            threads.append(thread)
            thread.start()

    acceptor = threading.Thread(target=accept, daemon=True)
    acceptor.start()
    try:
        yield int(listener.getsockname()[1])
    finally:
        stop.set()
        acceptor.join(5)
        for thread in threads:
            thread.join(5)
        listener.close()


def connect(port: int, timeout_s: float = 2.0) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", port), timeout=timeout_s)
    sock.settimeout(timeout_s)
    return sock


def round_trip(sock: socket.socket, payload: bytes) -> bytes:
    sock.sendall(payload)
    received = b""
    while len(received) < len(payload):
        chunk = sock.recv(1 << 20)
        if not chunk:
            break
        received += chunk
    return received


@pytest.fixture
def proxied() -> Iterator[tuple[FaultProxy, int]]:
    """A started proxy with link a -> b in front of an echo server; yields (proxy, port)."""
    with echo_server() as target, FaultProxy(seed=1) as proxy:
        yield proxy, proxy.add_link("a", "b", target)


def test_bytes_pass_intact(proxied: tuple[FaultProxy, int]) -> None:
    proxy, port = proxied
    payload = bytes(range(256)) * 32_768  # 8 MiB
    with connect(port, timeout_s=20) as sock:
        assert round_trip(sock, payload) == payload
    assert proxy.link("a", "b").bytes_forwarded >= 2 * len(payload)


@pytest.mark.timing  # the heal's reset within 2 s
def test_a_blackhole_is_silence_both_ways_and_the_heal_resets(
    proxied: tuple[FaultProxy, int],
) -> None:
    proxy, port = proxied
    sock = connect(port, timeout_s=0.5)
    assert round_trip(sock, b"before") == b"before"
    proxy.set("a", "b", LinkFaults(LinkMode.BLACKHOLE))
    sock.sendall(b"lost")
    with pytest.raises(TimeoutError):
        sock.recv(100)  # no answer, and no error either
    with connect(port, timeout_s=0.5) as fresh:  # a new connection is accepted, then silent
        fresh.sendall(b"x")
        with pytest.raises(TimeoutError):
            fresh.recv(100)
    proxy.heal()
    sock.settimeout(2)
    with pytest.raises((ConnectionResetError, OSError)):
        data = sock.recv(100)
        if data == b"":
            raise ConnectionResetError("closed")  # a FIN instead of a reset: closed too
    sock.close()
    with connect(port) as after:
        assert round_trip(after, b"after") == b"after"


@pytest.mark.timing  # within 1.5 s
def test_a_reset_closes_at_once_and_refuses_new_connections(
    proxied: tuple[FaultProxy, int],
) -> None:
    proxy, port = proxied
    sock = connect(port)
    assert round_trip(sock, b"x") == b"x"
    started = time.monotonic()
    proxy.reset("a", "b")
    with pytest.raises((ConnectionResetError, OSError)):
        if sock.recv(10) == b"":
            raise ConnectionResetError("closed")

    def use_a_new_connection() -> None:
        with connect(port) as fresh:
            fresh.sendall(b"y")
            if fresh.recv(10) == b"":
                raise ConnectionResetError("closed")

    with pytest.raises((ConnectionResetError, OSError)):  # at connect, or at the first use
        use_a_new_connection()
    assert time.monotonic() - started < 1.5
    sock.close()


def test_delay_holds_every_chunk_and_keeps_order(proxied: tuple[FaultProxy, int]) -> None:
    proxy, port = proxied
    proxy.set("a", "b", LinkFaults(LinkMode.PASS, delay_ms=80))
    with connect(port) as sock:
        started = time.monotonic()
        assert round_trip(sock, b"ping") == b"ping"
        assert time.monotonic() - started >= 0.16  # 80 ms each way
        messages = [f"m{i};".encode() for i in range(50)]
        for message in messages:
            sock.sendall(message)
        expected = b"".join(messages)
        received = b""
        while len(received) < len(expected):
            received += sock.recv(4096)
        assert received == expected


def test_group_operations_set_exactly_their_links() -> None:
    with echo_server() as target, FaultProxy(seed=2) as proxy:
        nodes = ["1", "2", "3"]
        for src in nodes:
            for dst in nodes:
                if src != dst:
                    proxy.add_link(src, dst, target)

        def blackholed() -> set[tuple[str, str]]:
            return {
                (link.src, link.dst)
                for link in proxy.links()
                if link.faults.mode is LinkMode.BLACKHOLE
            }

        proxy.isolate("2")
        assert blackholed() == {("1", "2"), ("2", "1"), ("3", "2"), ("2", "3")}
        proxy.heal()
        assert blackholed() == set()
        proxy.partition(["1"], ["2", "3"])
        assert blackholed() == {("1", "2"), ("2", "1"), ("1", "3"), ("3", "1")}
        proxy.partition(["1", "2"], ["3"])
        assert blackholed() == {("1", "3"), ("3", "1"), ("2", "3"), ("3", "2")}
        proxy.heal()
        proxy.one_way("3", "1")
        assert blackholed() == {("3", "1")}
        proxy.heal()
        assert all(link.faults == PASS for link in proxy.links())
        assert [what for _, what in proxy.timeline()][:2] == ["isolate 2", "heal"]


def test_stop_leaves_no_thread_and_no_listener() -> None:
    before = set(threading.enumerate())
    with echo_server() as target:
        proxy = FaultProxy(seed=3)
        port = proxy.add_link("a", "b", target)
        proxy.start()
        with connect(port) as sock:
            assert round_trip(sock, b"x") == b"x"
        proxy.stop()
    assert set(threading.enumerate()) <= before
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", port), timeout=0.5).close()


def test_a_real_grpc_call_times_out_while_blackholed_and_works_after_the_heal() -> None:
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    health_pb2_grpc.add_HealthServicer_to_server(health.HealthServicer(), server)
    target = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        with FaultProxy(seed=4) as proxy:
            port = proxy.add_link("client", "server", target)
            with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
                stub = health_pb2_grpc.HealthStub(channel)
                request = health_pb2.HealthCheckRequest()
                assert (
                    stub.Check(request, timeout=5).status == health_pb2.HealthCheckResponse.SERVING
                )
                proxy.set("client", "server", LinkFaults(LinkMode.BLACKHOLE))
                with pytest.raises(grpc.RpcError) as raised:
                    stub.Check(request, timeout=0.5)
                assert raised.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
                proxy.heal()
                wait_until(
                    lambda: (
                        stub.Check(request, timeout=1).status
                        == health_pb2.HealthCheckResponse.SERVING
                    ),
                    10,
                    "the call to work again after the heal",
                )
    finally:
        server.stop(None)
