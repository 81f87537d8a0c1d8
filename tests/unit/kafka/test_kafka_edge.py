"""The Kafka listener's edge without processes (docs/kafka-listener.md#robustness): request
bounds checked before decoding, the connection limits, the request quota and its throttling
over a real socket, TLS handshake failures logged and counted. The listener under test is the
real ``KafkaListenerServer`` on 127.0.0.1; only the controller behind it is the stand-in of
tests/unit/kafka/test_kafka_protocol.py.
"""

from __future__ import annotations

import asyncio
import dataclasses
import socket
import ssl
import time
from collections.abc import Iterator
from typing import Any

import pytest
import structlog

from broker.kafka.connections import ConnectionLimits, OverrideUnresolvableError, client_address
from broker.kafka.protocol import (
    API_VERSIONS,
    REQUEST_ENTRIES_MAX,
    SMALL_REQUEST_BYTES_MAX,
    OversizedRequestError,
    build,
    decode_request,
    request_bytes_max,
    request_schema,
    response_schema,
)
from broker.kafka.quota import QUOTA_PRINCIPALS_MAX, RequestQuota
from broker.kafka.server import (
    KAFKA_REQUEST_BYTES_MAX,
    KafkaListenerServer,
    KafkaTls,
    ListenerLimits,
)
from quorum.harness import CLUSTER_ID, ClusterCerts
from quorum.limits import KAFKA_REQUEST_ITEMS_MAX
from quorum.security.identity import ANONYMOUS, CallerResolver
from quorum.security.tls import KeyStore, PemFiles
from tests.unit.kafka.test_kafka_protocol import LISTENER, Harness, decode_answer, image_with_topics

# ----- bounds before decoding --------------------------------------------------------------------


def entries_frame(harness: Harness, api_key: int, version: int, count: int) -> bytes:
    """A request frame of ``api_key`` whose top-level array (its first field) holds ``count``
    default entries (entities, or empty strings for DeleteTopics' topic names)."""
    request_type = request_schema(api_key, version)
    first = dataclasses.fields(request_type)[0].name
    try:
        return harness.frame(api_key, version, build(request_type, {first: [{}] * count}))
    except Exception:  # an array of strings: kio cannot write a mapping there
        return harness.frame(api_key, version, build(request_type, {first: [""] * count}))


def served_array_apis() -> Iterator[tuple[int, int]]:
    for api_key in sorted(REQUEST_ENTRIES_MAX):
        if api_key not in API_VERSIONS:
            continue
        low, high = API_VERSIONS[api_key]
        yield from {(api_key, low), (api_key, high)}


@pytest.mark.parametrize(("api_key", "version"), sorted(served_array_apis()))
def test_a_top_level_array_beyond_its_bound_is_refused_before_decoding(
    api_key: int, version: int
) -> None:
    harness = Harness(image_with_topics())
    bound = REQUEST_ENTRIES_MAX[api_key]
    frame = entries_frame(harness, api_key, version, bound + 1)
    started = time.perf_counter()
    with pytest.raises(OversizedRequestError) as info:
        decode_request(frame)
    assert time.perf_counter() - started < 0.5  # only the header and the count were read
    assert info.value.reason == "too_many_entries"
    assert f"at most {bound}" in str(info.value)


def test_a_top_level_array_at_its_bound_is_decoded() -> None:
    harness = Harness(image_with_topics())
    bound = REQUEST_ENTRIES_MAX[19]
    values = {"topics": [{"name": f"t{i}"} for i in range(bound)], "timeout": 1_000}
    frame = harness.frame(19, 7, build(request_schema(19, 7), values))
    request = decode_request(frame)
    assert len(request.body.topics) == bound  # type: ignore[union-attr]


def test_the_reviews_create_topics_is_refused_in_microseconds() -> None:
    """300,000 one-byte topic names (3.3 MB): 3.3 s of decoding before; now the count alone."""
    harness = Harness(image_with_topics())
    values = {"topics": [{"name": "a"}] * 300_000, "timeout": 1_000}
    frame = harness.frame(19, 7, build(request_schema(19, 7), values))
    assert len(frame) > 3_000_000
    started = time.perf_counter()
    with pytest.raises(OversizedRequestError):
        decode_request(frame)
    assert time.perf_counter() - started < 0.1


def test_nested_arrays_share_one_item_budget() -> None:
    """One topic with more assignments than a request may hold items: refused as the count is
    read, before those items are decoded."""
    harness = Harness(image_with_topics())
    count = KAFKA_REQUEST_ITEMS_MAX + 1
    values = {
        "topics": [
            {"name": "a", "assignments": [{"partition_index": 0, "broker_ids": ()}] * count}
        ],
        "timeout": 1_000,
    }
    frame = harness.frame(19, 7, build(request_schema(19, 7), values))
    with pytest.raises(OversizedRequestError) as info:
        decode_request(frame)
    assert info.value.reason == "too_many_items"
    # The budget is the request's: a client-side reader in this thread is not bounded by it.
    small = harness.frame(3, 12, build(request_schema(3, 12), {"topics": None}))
    assert decode_request(small).body.topics is None  # type: ignore[union-attr]


def test_apis_without_an_array_have_a_small_frame_bound() -> None:
    assert request_bytes_max(18, KAFKA_REQUEST_BYTES_MAX) == SMALL_REQUEST_BYTES_MAX
    assert request_bytes_max(60, KAFKA_REQUEST_BYTES_MAX) == SMALL_REQUEST_BYTES_MAX
    assert request_bytes_max(12, KAFKA_REQUEST_BYTES_MAX) == SMALL_REQUEST_BYTES_MAX  # Heartbeat
    assert request_bytes_max(68, KAFKA_REQUEST_BYTES_MAX) == SMALL_REQUEST_BYTES_MAX  # not served
    assert request_bytes_max(19, KAFKA_REQUEST_BYTES_MAX) == KAFKA_REQUEST_BYTES_MAX
    # The data APIs carry record batches or many partitions: the listener's bound.
    # So do the group APIs that carry subscriptions, assignments or commits (docs/groups.md).
    for data_api in (0, 1, 2, 23, 8, 9, 11, 14):
        assert request_bytes_max(data_api, KAFKA_REQUEST_BYTES_MAX) == KAFKA_REQUEST_BYTES_MAX


# ----- the request quota -------------------------------------------------------------------------


def test_the_quota_throttles_the_excess_as_kafka_computes_it() -> None:
    quota = RequestQuota(50, window_num=11, window_size_ms=1_000)
    # Within the quota: half a thread over the (at least 10 s) span.
    assert quota.record("User:a", 4.0, now_ms=0) == 0
    assert quota.record("User:a", 1.0, now_ms=500) == 0  # 5 s of 10.5 s: 48 %
    # 6 s over 10.6 s: 57 %, (0.57 - 0.5) / 0.5 of the span = 1,321 ms, at most one window.
    assert quota.record("User:a", 1.0, now_ms=600) == 1_000
    assert quota.record("User:b", 0.001, now_ms=600) == 0  # per principal
    # A small excess earns a proportional throttle: 5.25 s over 10 s is 52.5 %, 500 ms.
    other = RequestQuota(50, window_num=11, window_size_ms=1_000)
    assert other.record("User:c", 5.25, now_ms=0) == 500
    assert other.throttled_requests == 1
    # Usage older than the quota window is forgotten.
    assert quota.record("User:a", 0.0, now_ms=600 + 11_001) == 0
    assert quota.share("User:a", 600 + 11_001) == 0.0


def test_the_quota_forgets_every_principal_when_full() -> None:
    quota = RequestQuota(50, window_num=2, window_size_ms=1_000)
    for index in range(QUOTA_PRINCIPALS_MAX):
        quota.record(f"User:{index}", 0.0, now_ms=0)
    quota.record("User:0", 10.0, now_ms=0)
    assert quota.share("User:0", 0) > 0.5
    quota.record("User:new", 0.0, now_ms=0)  # the table was full: cleared
    assert quota.share("User:0", 0) == 0.0


# ----- connection limits -------------------------------------------------------------------------


def test_connection_limits_per_address_and_in_all() -> None:
    limits = ConnectionLimits(5, 2, {"127.0.0.9": 3})
    assert limits.acquire("10.0.0.1") is None
    assert limits.acquire("10.0.0.1") is None
    refusal = limits.acquire("10.0.0.1")
    assert refusal is not None
    assert refusal[0] == "too_many_connections_per_ip"
    assert "allowed: 2 per address (max.connections.per.ip)" in refusal[1]
    for _ in range(3):
        assert limits.acquire("127.0.0.9") is None  # its override
    refusal = limits.acquire("10.0.0.2")
    assert refusal is not None
    assert refusal[0] == "too_many_connections"
    assert "(max.connections)" in refusal[1]
    limits.release("10.0.0.1")
    assert limits.acquire("10.0.0.2") is None
    assert limits.open == 5


def test_overrides_name_hosts_and_addresses() -> None:
    limits = ConnectionLimits(10, 1, {"localhost": 7, "::1": 8})
    assert limits.limit_of("127.0.0.1") == 7
    assert limits.limit_of("10.1.1.1") == 1
    with pytest.raises(OverrideUnresolvableError, match="does not resolve"):
        ConnectionLimits(10, 1, {"no-such-host.invalid": 1})


def test_client_addresses_are_normalised() -> None:
    assert client_address(("::ffff:10.0.0.1", 5, 0, 0)) == "10.0.0.1"
    assert client_address(("127.0.0.2", 9092)) == "127.0.0.2"
    assert client_address(("fe80::1%eth0", 1, 0, 2)) == "fe80::1"


# ----- over a real socket ------------------------------------------------------------------------


def listener(
    harness: Harness, limits: ListenerLimits, tls: KafkaTls | None = None
) -> KafkaListenerServer:
    return KafkaListenerServer(
        LISTENER,
        harness.apis,
        CallerResolver(),
        tls=tls,
        logger=structlog.get_logger(),
        limits=limits,
    )


async def ask(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, frame: bytes) -> bytes:
    writer.write(len(frame).to_bytes(4, "big") + frame)
    await writer.drain()
    size = int.from_bytes(await asyncio.wait_for(reader.readexactly(4), 10), "big")
    return await asyncio.wait_for(reader.readexactly(size), 10)


def test_a_client_over_its_quota_gets_throttle_time_and_its_next_request_waits() -> None:
    harness = Harness(image_with_topics())
    quota = RequestQuota(50, window_num=11, window_size_ms=1_000)
    limits = ListenerLimits(ConnectionLimits(10, 10), connection_idle_ms=60_000, quota=quota)
    request = build(request_schema(3, 12), {"topics": None})
    response_type = response_schema(3, 12)

    async def run() -> tuple[Any, Any, float]:
        server = listener(harness, limits)
        await server.start()
        try:
            # The anonymous principal has used 5.25 s of the last 10 s: 52.5 % of a thread.
            quota.record(ANONYMOUS, 5.25, time.monotonic_ns() // 1_000_000)
            reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
            first = await ask(reader, writer, harness.frame(3, 12, request))
            asked = time.monotonic()
            second = await ask(reader, writer, harness.frame(3, 12, request))
            waited_s = time.monotonic() - asked
            writer.close()
            return first, second, waited_s
        finally:
            await server.stop()

    first, second, waited_s = asyncio.run(run())
    throttled = decode_answer(len(first).to_bytes(4, "big") + first, response_type, 1)
    throttle_s = throttled.throttle_time.total_seconds()
    assert 0.4 < throttle_s <= 1.0, throttle_s
    # Kafka mutes the channel: the next request was read only once the throttle time was over.
    assert waited_s >= throttle_s - 0.01, (waited_s, throttle_s)
    assert second


def test_connections_past_the_per_address_limit_are_refused_and_others_served() -> None:
    harness = Harness(image_with_topics())
    limits = ListenerLimits(ConnectionLimits(100, 2), connection_idle_ms=60_000, quota=None)
    api_versions = harness.frame(18, 0, build(request_schema(18, 0), {}))

    async def run() -> tuple[list[bytes], bytes, int]:
        server = listener(harness, limits)
        await server.start()
        try:
            held = []
            for _ in range(2):  # two from 127.0.0.2, answered: counted
                reader, writer = await asyncio.open_connection(
                    "127.0.0.1", server.port, local_addr=("127.0.0.2", 0)
                )
                await ask(reader, writer, api_versions)
                held.append(writer)
            refused = []
            for _ in range(3):
                reader, writer = await asyncio.open_connection(
                    "127.0.0.1", server.port, local_addr=("127.0.0.2", 0)
                )
                refused.append(await asyncio.wait_for(reader.read(10), 10))
                writer.close()
            reader, writer = await asyncio.open_connection(
                "127.0.0.1", server.port, local_addr=("127.0.0.3", 0)
            )
            other = await ask(reader, writer, api_versions)
            writer.close()
            for writer in held:
                writer.close()
            return refused, other, server.connections_refused
        finally:
            await server.stop()

    with structlog.testing.capture_logs() as logs:
        refused, other, count = asyncio.run(run())
    assert refused == [b"", b"", b""]
    assert other
    assert count == 3
    refusals = [entry for entry in logs if entry["event"] == "kafka_connection_refused"]
    assert len(refusals) == 1  # throttled: the first of its reason in full
    assert refusals[0]["reason"] == "too_many_connections_per_ip"
    assert refusals[0]["peer"].startswith("127.0.0.2:")


def test_a_small_api_beyond_its_frame_bound_is_closed_after_its_first_bytes() -> None:
    harness = Harness(image_with_topics())

    async def run() -> tuple[bytes, int]:
        server = listener(harness, ListenerLimits.unquoted())
        await server.start()
        try:
            reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
            size = SMALL_REQUEST_BYTES_MAX + 1
            # ApiVersions (18) v0 announcing a frame over its bound: only 8 bytes are sent.
            writer.write(size.to_bytes(4, "big") + (18).to_bytes(2, "big") + b"\0\0")
            await writer.drain()
            closed = await asyncio.wait_for(reader.read(10), 10)
            writer.close()
            return closed, server.closed_for_cause
        finally:
            await server.stop()

    with structlog.testing.capture_logs() as logs:
        closed, count = asyncio.run(run())
    assert closed == b""
    assert count == 1
    (entry,) = [e for e in logs if e["event"] == "kafka_request_malformed"]
    assert entry["reason"] == "request_too_large"


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> ClusterCerts:
    return ClusterCerts(tmp_path_factory.mktemp("kafka-edge-certs"), CLUSTER_ID)


@pytest.fixture(scope="module")
def tls(certs: ClusterCerts) -> KafkaTls:
    files = PemFiles(KeyStore(location=certs.node_keystore(101)), certs.ca)
    return KafkaTls(files, "required")


def test_failed_tls_handshakes_are_logged_throttled_and_counted(tls: KafkaTls) -> None:
    """Plaintext Kafka bytes to an SSL listener, five times: five failures counted, one line
    logged (the first of its reason), naming the peer, the listener and the reason."""
    harness = Harness(image_with_topics())
    api_versions = harness.frame(18, 0, build(request_schema(18, 0), {}))

    async def run() -> int:
        server = listener(harness, ListenerLimits.unquoted(), tls)
        await server.start()
        try:
            for _ in range(5):
                reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
                writer.write(len(api_versions).to_bytes(4, "big") + api_versions)
                await writer.drain()
                await asyncio.wait_for(reader.read(100), 10)  # a TLS alert, or the close
                writer.close()
            deadline = time.monotonic() + 10
            while server.tls_handshake_failures < 5 and time.monotonic() < deadline:
                await asyncio.sleep(0.01)  # polling a condition with a deadline
            return server.tls_handshake_failures
        finally:
            await server.stop()

    with structlog.testing.capture_logs() as logs:
        failures = asyncio.run(run())
    assert failures == 5
    lines = [entry for entry in logs if entry["event"] == "tls_handshake_failed"]
    assert len(lines) == 1, lines
    (line,) = lines
    assert line["listener"] == "KAFKA"
    assert line["peer"].startswith("127.0.0.1:")
    assert line["reason"] == "WRONG_VERSION_NUMBER"  # OpenSSL's, as on the gRPC listener


def test_a_tls_client_is_served_when_it_speaks_first(tls: KafkaTls, certs: ClusterCerts) -> None:
    """The listener holds an accepted connection without reading until its handshake starts:
    a client whose ClientHello arrives at once is served (one read before the handshake once
    stalled it until its timeout)."""
    harness = Harness(image_with_topics())
    api_versions = harness.frame(18, 0, build(request_schema(18, 0), {}))
    context = ssl.create_default_context(cafile=str(certs.ca))
    context.check_hostname = False
    context.load_cert_chain(str(certs.client_keystore("alice")))

    def client(port: int) -> bytes:
        raw = socket.create_connection(("127.0.0.1", port), timeout=10)
        with context.wrap_socket(raw) as sock:
            sock.sendall(len(api_versions).to_bytes(4, "big") + api_versions)
            head = b""
            while len(head) < 4:
                head += sock.recv(4 - len(head))
            data = b""
            while len(data) < int.from_bytes(head, "big"):
                data += sock.recv(int.from_bytes(head, "big") - len(data))
            return data

    async def run() -> list[bytes]:
        server = listener(harness, ListenerLimits.unquoted(), tls)
        await server.start()
        try:
            return [await asyncio.to_thread(client, server.port) for _ in range(20)]
        finally:
            await server.stop()

    answers = asyncio.run(run())
    assert all(answers)
