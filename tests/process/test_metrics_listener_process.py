"""The metrics listener serves only what it exists for and cannot be held by a slow client
(docs/operating.md#the-metrics-listener), on a real node: one controller with a
``metrics.listener``. ``GET /metrics`` (and ``HEAD``) answer the exposition; every other path
or method is 404; a half-sent request is closed after ``METRICS_REQUEST_READ_MS_MAX``; hundreds
of half-open connections, more than ``METRICS_CONNECTIONS_MAX``, neither stop a scrape nor hold a
thread each.

The listener's bounds are also checked in-process with small values (eviction of the oldest
waiting connection, a request head over its bound).
"""

from __future__ import annotations

import json
import socket
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry, Counter

import quorum.server.metrics_http as metrics_http
from quorum.harness import ProcessCluster, process_cluster, wait_until
from quorum.server.metrics_http import (
    METRICS_CONNECTIONS_MAX,
    METRICS_REQUEST_READ_MS_MAX,
    MetricsHttpServer,
)

HALF_OPEN_CONNECTIONS = METRICS_CONNECTIONS_MAX + 44  # 300: past the bound, so some are closed


def metrics_address(cluster: ProcessCluster, node_id: int) -> tuple[str, int] | None:
    for line in cluster.logs(node_id).splitlines():
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if isinstance(record, dict) and record.get("event") == "metrics_listening":
            host_port = str(record["address"]).removeprefix("http://").removesuffix("/metrics")
            host, port = host_port.rsplit(":", 1)
            return host, int(port)
    return None


def request(address: tuple[str, int], raw: bytes, timeout_s: float = 10) -> bytes:
    """Send ``raw`` and read the whole answer (the listener closes after each); b"" when the
    listener closed the connection without one."""
    chunks = []
    with socket.create_connection(address, timeout=timeout_s) as sock:
        try:
            sock.sendall(raw)
            while chunk := sock.recv(65536):
                chunks.append(chunk)
        except ConnectionResetError:
            pass  # closed with our bytes unread
    return b"".join(chunks)


def threads_of(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("Threads:"):
            return int(line.split()[1])
    raise AssertionError(f"no thread count for pid {pid}")


@pytest.fixture(scope="module")
def node(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[ProcessCluster, tuple[str, int]]]:
    with process_cluster(
        tmp_path_factory.mktemp("metrics-listener"),
        voters=1,
        node_settings={"metrics.listener": "http://127.0.0.1:0"},
    ) as cluster:
        cluster.format()
        cluster.start_all()
        cluster.wait_for_leader(timeout_s=30)
        address = wait_until(lambda: metrics_address(cluster, 1), 30, "metrics_listening")
        yield cluster, address


@pytest.mark.process
@pytest.mark.slow
def test_only_get_metrics_is_served(node: tuple[ProcessCluster, tuple[str, int]]) -> None:
    _, address = node
    url = f"http://{address[0]}:{address[1]}"
    with urllib.request.urlopen(f"{url}/metrics", timeout=10) as response:
        assert response.status == 200
        assert b"kafka_server_raftmetrics_current_epoch" in response.read()
    head = request(address, b"HEAD /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200 ")
    assert head.endswith(b"\r\n\r\n")  # no body
    for method, path in (("GET", "/"), ("POST", "/metrics"), ("GET", "/metrics/x"), ("PUT", "/")):
        with pytest.raises(urllib.error.HTTPError) as info:
            urllib.request.urlopen(
                urllib.request.Request(
                    f"{url}{path}", method=method, data=b"x" if method != "GET" else None
                ),
                timeout=10,
            )
        assert info.value.code == 404, (method, path)
    assert request(address, b"NONSENSE\r\n\r\n").startswith(b"HTTP/1.1 400 ")


@pytest.mark.process
@pytest.mark.slow
@pytest.mark.timing  # closed within 5 s of the read timeout
def test_a_half_sent_request_is_closed_after_the_read_timeout(
    node: tuple[ProcessCluster, tuple[str, int]],
) -> None:
    _, address = node
    with socket.create_connection(address, timeout=METRICS_REQUEST_READ_MS_MAX / 1000 + 10) as sock:
        sock.sendall(b"GET /metr")
        started = time.monotonic()
        assert sock.recv(100) == b""  # closed by the listener, without an answer
        waited_s = time.monotonic() - started
    assert (
        METRICS_REQUEST_READ_MS_MAX / 1000 - 0.5
        <= waited_s
        <= METRICS_REQUEST_READ_MS_MAX / 1000 + 5
    )


@pytest.mark.process
@pytest.mark.slow
@pytest.mark.timing  # the scrape within the read timeout
def test_half_open_connections_neither_stop_a_scrape_nor_hold_threads(
    node: tuple[ProcessCluster, tuple[str, int]],
) -> None:
    cluster, address = node
    process = cluster.nodes[1].process
    assert process is not None
    threads_before = threads_of(process.pid)
    held = []
    try:
        for _ in range(HALF_OPEN_CONNECTIONS):
            sock = socket.create_connection(address, timeout=10)
            sock.sendall(b"GET /metrics HTTP/1.1\r\n")  # and never the rest
            held.append(sock)
        started = time.monotonic()
        with urllib.request.urlopen(f"http://{address[0]}:{address[1]}/metrics", timeout=10) as r:
            assert r.status == 200
            assert b"kafka_server_raftmetrics_current_state" in r.read()
        scrape_s = time.monotonic() - started
        threads_during = threads_of(process.pid)
    finally:
        for sock in held:
            sock.close()
    print(
        f"scrape with {HALF_OPEN_CONNECTIONS} half-open connections: {scrape_s * 1000:.0f} ms; "
        f"threads {threads_before} -> {threads_during}"
    )
    assert scrape_s < METRICS_REQUEST_READ_MS_MAX / 1000  # not after the half-open ones timed out
    assert threads_during <= threads_before + 2  # the render thread, at most


# ----- in-process, with small bounds -------------------------------------------------------------


def test_the_oldest_waiting_connection_makes_room_and_heads_are_bounded(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(metrics_http, "METRICS_CONNECTIONS_MAX", 3)
    registry = CollectorRegistry()
    Counter("probe", "a counter", registry=registry).inc()
    server = MetricsHttpServer(registry, "127.0.0.1", 0)
    server.start()
    address = ("127.0.0.1", server.port)
    try:
        waiting = [socket.create_connection(address, timeout=10) for _ in range(3)]
        wait_until(lambda: server.open_connections == 3, 10, "three connections held")
        answer = request(address, b"GET /metrics HTTP/1.1\r\n\r\n")
        assert answer.startswith(b"HTTP/1.1 200 ")
        assert b"probe_total 1.0" in answer
        assert waiting[0].recv(10) == b""  # the oldest one, closed to make room
        for sock in waiting:
            sock.close()
        too_large = request(address, b"GET /metrics HTTP/1.1\r\nX: " + b"a" * 20_000 + b"\r\n\r\n")
        assert too_large == b""
        assert server.closed_for_cause >= 2
    finally:
        server.stop()
