"""Kafka's connection keys and the request quota on a real broker (docs/kafka-listener.md):
one controller and one broker with an SSL Kafka listener (KAFKA) and a PLAINTEXT one, mTLS and
ACLs on, and small limits so each shows within seconds:

- ``max.connections.per.ip = 4``: idle TLS connections from one address (127.0.0.2; any
  127.0.0.0/8 address is loopback) beyond it are closed at once, and a client from another
  address is served (the review's 510 idle connections locked every client out);
- ``connections.max.idle.ms = 4000``: an idle connection is closed after it;
- ``quota.request.percentage.default = 1`` over 2 windows of 1 s: a principal that keeps the
  listener busy gets answers with ``throttle_time_ms`` and its next request is read only after
  that time, while another principal is not throttled;
- a failed TLS handshake is logged (``tls_handshake_failed``: peer, listener, reason) and
  counted in ``metaquorum_tls_handshake_failures_total{listener}``.
"""

from __future__ import annotations

import socket
import ssl
import time
import urllib.request
from collections.abc import Iterator

import pytest
from prometheus_client.parser import text_string_to_metric_families

from quorum.harness import ADMIN_PRINCIPAL, ProcessCluster, process_cluster, wait_until
from tests.kafka_raw import RawConnection, metadata_values, request_frame

pytestmark = [pytest.mark.slow]

BROKER = 101
PER_IP_MAX = 4
IDLE_MS = 4_000
# The greedy client asks until an answer carries at least this throttle time, long enough to see
# that its next request waits for it.
THROTTLE_SHOWN_S = 0.2
LIMITS = {
    "max.connections.per.ip": PER_IP_MAX,
    "connections.max.idle.ms": IDLE_MS,
    "quota.request.percentage.default": 1,
    "quota.window.num": 2,
    "quota.window.size.seconds": 1,
    "metrics.listener": "http://127.0.0.1:0",
}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ProcessCluster]:
    with process_cluster(
        tmp_path_factory.mktemp("kafka-limits"),
        voters=1,
        brokers=1,
        kafka_listeners={"KAFKA": "SSL", "KAFKA_PLAIN": "PLAINTEXT"},
        broker_settings=LIMITS,
        node_settings={"super.users": [ADMIN_PRINCIPAL, "User:CN=greedy"]},
    ) as cluster:
        cluster.format()
        cluster.start_all()
        cluster.wait_for_leader(timeout_s=30)
        wait_until(lambda: cluster.events(BROKER, "kafka_listener_started"), 30, "listeners")
        with cluster.admin() as admin:
            wait_until(
                lambda: any(not b.is_fenced for b in admin.describe_cluster().brokers),
                30,
                "the broker unfenced",
            )
        yield cluster
        assert "kafka_request_failed" not in cluster.logs(BROKER)


def tls_files(cluster: ProcessCluster, name: str) -> tuple[str, str]:
    assert cluster.certs is not None
    return str(cluster.certs.ca), str(cluster.certs.client_keystore(name))


def metrics(cluster: ProcessCluster) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    (started,) = cluster.events(BROKER, "metrics_listening")
    with urllib.request.urlopen(started["address"], timeout=10) as response:
        text = response.read().decode()
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def test_idle_connections_beyond_the_per_address_limit_lock_out_no_other_client(
    cluster: ProcessCluster,
) -> None:
    address = cluster.nodes[BROKER].kafka_address("KAFKA")
    files = tls_files(cluster, "admin")
    held: list[RawConnection] = []
    refused = 0
    try:
        for _ in range(PER_IP_MAX + 10):  # idle TLS connections from one address
            try:  # a refused connection is closed before its handshake: this fails
                held.append(RawConnection(address, files, source="127.0.0.2", timeout_s=10))
            except (ssl.SSLError, OSError):
                refused += 1
        # Another address is served while they are held.
        other = RawConnection(address, files, source="127.0.0.3")
        try:
            answer = other.ask(18, 3, {"client_software_name": "x", "client_software_version": "1"})
            assert int(answer.error_code) == 0
        finally:
            other.close()
    finally:
        for connection in held:
            connection.close()
    assert len(held) == PER_IP_MAX
    assert refused == 10
    refusals = cluster.events(BROKER, "kafka_connection_refused")
    assert refusals, "no kafka_connection_refused logged"
    assert refusals[0]["reason"] == "too_many_connections_per_ip"
    assert refusals[0]["peer"].startswith("127.0.0.2:")
    assert "max.connections.per.ip" in refusals[0]["detail"]
    assert len(refusals) == 1  # the rest of that reason throttled


@pytest.mark.timing  # closed within 5 s of connections.max.idle.ms
def test_an_idle_connection_is_closed_after_connections_max_idle_ms(
    cluster: ProcessCluster,
) -> None:
    address = cluster.nodes[BROKER].kafka_address("KAFKA")
    connection = RawConnection(address, tls_files(cluster, "admin"), source="127.0.0.4")
    try:
        connection.ask(18, 3, {"client_software_name": "x", "client_software_version": "1"})
        answered = time.monotonic()
        assert connection.closed_by_peer()  # blocks until the broker closes it
        idle_s = time.monotonic() - answered
    finally:
        connection.close()
    assert IDLE_MS / 1000 - 0.2 <= idle_s <= IDLE_MS / 1000 + 5, idle_s
    idle = [r for r in cluster.events(BROKER, "kafka_connection_idle") if "127.0.0.4" in r["peer"]]
    assert idle and idle[0]["idle_ms"] == IDLE_MS


def test_a_principal_over_its_quota_is_throttled_and_delayed(cluster: ProcessCluster) -> None:
    address = cluster.nodes[BROKER].kafka_address("KAFKA")
    greedy = RawConnection(address, tls_files(cluster, "greedy"))
    polite = RawConnection(address, tls_files(cluster, "admin"))
    try:
        throttle_s = 0.0
        deadline = time.monotonic() + 30
        asked = 0
        while throttle_s < THROTTLE_SHOWN_S and time.monotonic() < deadline:
            answer = greedy.ask(3, 12, metadata_values(None))
            asked += 1
            throttle_s = answer.throttle_time.total_seconds()
        assert throttle_s >= THROTTLE_SHOWN_S, (
            f"throttle_time {throttle_s} s after {asked} requests"
        )
        # Kafka mutes the channel: the next request is read once the throttle time is over.
        sent = time.monotonic()
        greedy.ask(3, 12, metadata_values(None))
        waited_s = time.monotonic() - sent
        # Another principal has its own quota: answered at once, not throttled.
        answer = polite.ask(3, 12, metadata_values(None))
        assert answer.throttle_time.total_seconds() == 0
    finally:
        greedy.close()
        polite.close()
    print(f"throttled after {asked} requests: {throttle_s * 1000:.0f} ms, waited {waited_s:.3f} s")
    assert waited_s >= throttle_s - 0.01
    assert throttle_s <= 1.0  # at most one window (quota.window.size.seconds)
    wait_until(
        lambda: (
            metrics(cluster).get(
                ("metaquorum_kafka_requests_throttled_total", (("listener", "KAFKA"),)), 0
            )
            >= 1
        ),
        10,
        "the throttled request counted",
    )


def test_a_failed_tls_handshake_is_logged_and_counted(cluster: ProcessCluster) -> None:
    host, port = cluster.nodes[BROKER].kafka_address("KAFKA").split(":")
    frame = request_frame(18, 0, {}, 1)
    for _ in range(3):  # a plaintext Kafka client on the SSL listener
        with socket.create_connection((host, int(port)), timeout=10) as sock:
            sock.sendall(frame)
            try:
                while sock.recv(4096):
                    pass
            except ConnectionResetError:
                pass

    def kafka_failures() -> float:
        return sum(
            value
            for (name, labels), value in metrics(cluster).items()
            if name == "metaquorum_tls_handshake_failures_total" and ("listener", "KAFKA") in labels
        )

    failures = wait_until(
        lambda: (
            kafka_failures() >= 3
            and [r for r in cluster.events(BROKER, "tls_handshake_failed") if r.get("peer")]
        ),
        20,
        "three failed handshakes counted and logged",
    )
    (first, *_) = failures
    assert first["listener"] == "KAFKA"
    assert first["peer"].startswith("127.0.0.1:")
    assert first["reason"] == "WRONG_VERSION_NUMBER"  # OpenSSL's, as on the gRPC listener
    values = metrics(cluster)
    assert ("metaquorum_kafka_connections", (("listener", "KAFKA_PLAIN"),)) in values
