"""Client load never fences a broker (docs/kafka-listener.md#the-brokers-own-work-first).

A real cluster (3 controllers and one broker with an SSL Kafka listener, mTLS and ACLs on,
every key at its default) and, for ``LOAD_SECONDS``, the load of the outside review that fenced
a broker: processes sending a 3.3 MB CreateTopics of 300,000 one-byte names on fresh
connections as fast as the broker takes them, and processes flooding the listener with Metadata
requests for every topic (100 topics of 3 partitions), all as one principal (``User:CN=flood``,
a super user, so every answer lists every partition). Meanwhile a well-behaved client
(``User:CN=admin``) asks for one topic's metadata every ``GOOD_CLIENT_PACE_S``, and the broker's
own loop is timed through its gRPC health check (served on the loop that heartbeats and fetches
the metadata log).

Asserted: the broker is never fenced (DescribeCluster from the controllers, polled through the
load; no ``brokers_fenced`` naming it in a controller's log; no ``fenced`` in its own), and the
well-behaved client's Metadata latency stays bounded. Before the listener's bounds and thread
(the code of commit a989e9d), the same load fenced the broker: each CreateTopics held its only
event loop for seconds (decoding 300,000 topics, then forwarding them).
"""

from __future__ import annotations

import io
import json
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from kio.index import load_request_schema
from kio.serial import entity_writer

from broker.kafka.protocol import build
from quorum.admin import NewTopic
from quorum.harness import ADMIN_PRINCIPAL, REPO, ProcessCluster, process_cluster, wait_until
from tests.kafka_raw import RawConnection, metadata_values

# timing: a client's latency and the broker's loop are bounded, and it must stay unfenced.
pytestmark = [pytest.mark.slow, pytest.mark.timing]

BROKER = 101
LOAD_SECONDS = 30.0
# What the review sent: one CreateTopics of 300,000 one-byte names (3.3 MB).
FLOOD_TOPICS = 300_000
CREATE_FLOODERS = 4  # processes, one connection each at a time (the review's four)
METADATA_FLOODERS = 2  # processes ...
METADATA_FLOOD_CONNECTIONS = 4  # ... of this many connections each
TOPICS = 100
GOOD_CLIENT_PACE_S = 0.05
HEALTH_PACE_S = 0.2
# What "bounded" means on these 2 shared cores with the cluster and the flood running. The
# well-behaved client: most answers within a fraction of a second, none near the 8 s the review
# saw at p50. The broker's own loop (its gRPC health check): never held for a heartbeat interval
# (broker.heartbeat.interval.ms, 2 s), so a heartbeat is never late for client work. Measured
# with the listener's bounds and thread: the client's p50 97 ms and max 199 ms, the loop's max
# 74 ms; before them (a989e9d): the loop's max 14.9 s, the client's max 15 s, fenced.
GOOD_CLIENT_P50_MS_MAX = 250.0
GOOD_CLIENT_P99_MS_MAX = 1_000.0
GOOD_CLIENT_MS_MAX = 2_000.0
BROKER_LOOP_MS_MAX = 1_000.0


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


def summary(values: list[float]) -> str:
    if not values:
        return "none"
    return (
        f"n={len(values)} p50={statistics.median(values):.1f} ms "
        f"p99={percentile(values, 0.99):.1f} ms max={max(values):.1f} ms"
    )


def create_topics_frame() -> bytes:
    """CreateTopics v7 naming ``FLOOD_TOPICS`` one-byte topics, size-prefixed."""
    request_type = load_request_schema(19, 7)
    header_type = request_type.__header_schema__
    letters = "abcdefghijklmnopqrstuvwxyz"
    body = build(
        request_type,
        {
            "topics": [
                {"name": letters[i % len(letters)], "num_partitions": 1, "replication_factor": 1}
                for i in range(FLOOD_TOPICS)
            ],
            "timeout": 30_000,
        },
    )
    buffer = io.BytesIO()
    entity_writer(header_type)(
        buffer,
        header_type(request_api_key=19, request_api_version=7, correlation_id=1, client_id="x"),
    )
    entity_writer(request_type)(buffer, body)
    data = buffer.getvalue()
    return len(data).to_bytes(4, "big") + data


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ProcessCluster]:
    with process_cluster(
        tmp_path_factory.mktemp("kafka-load"),
        brokers=1,
        kafka_listeners={"KAFKA": "SSL"},
        node_settings={"super.users": [ADMIN_PRINCIPAL, "User:CN=flood"]},
    ) as cluster:
        cluster.format()
        cluster.start_all()
        cluster.wait_for_leader(timeout_s=30)
        with cluster.admin() as admin:
            wait_until(
                lambda: any(
                    b.broker_id == BROKER and not b.is_fenced
                    for b in admin.describe_cluster().brokers
                ),
                30,
                f"broker {BROKER} unfenced",
            )
            admin.create_topics([NewTopic(f"load-{i}", 3, 1) for i in range(TOPICS)])
        yield cluster


class Poller:
    """Runs ``probe`` every ``pace_s`` in a thread until stopped, keeping what it returns."""

    def __init__(self, probe: Any, pace_s: float) -> None:
        self.probe = probe
        self.pace_s = pace_s
        self.results: list[Any] = []
        self.errors: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.results.append(self.probe())
            except Exception as exc:  # recorded: a probe that fails is a finding
                self.errors.append(f"{type(exc).__name__}: {exc}")
            self._stop.wait(self.pace_s)  # pacing a probe, not waiting for a condition

    def start(self) -> Poller:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=60)


def test_client_load_never_fences_the_broker(cluster: ProcessCluster, tmp_path: Path) -> None:
    assert cluster.certs is not None
    broker = cluster.nodes[BROKER]
    address = broker.kafka_address("KAFKA")
    ca = str(cluster.certs.ca)
    frame_file = tmp_path / "create-topics.frame"
    frame_file.write_bytes(create_topics_frame())

    # The well-behaved client: its own principal, one topic, one request at a time.
    good = RawConnection(address, (ca, str(cluster.certs.client_keystore("admin"))))

    def good_metadata() -> float:
        started = time.perf_counter()
        answer = good.ask(3, 12, metadata_values(["load-0"]))
        assert int(answer.topics[0].error_code) == 0
        return (time.perf_counter() - started) * 1000

    health_channel = cluster.channel(BROKER)
    health = health_pb2_grpc.HealthStub(health_channel)

    def broker_loop() -> float:
        started = time.perf_counter()
        health.Check(health_pb2.HealthCheckRequest(), timeout=30)
        return (time.perf_counter() - started) * 1000

    admin = cluster.admin(timeout_s=10)

    def fenced() -> bool:
        return any(b.broker_id == BROKER and b.is_fenced for b in admin.describe_cluster().brokers)

    flood_keystore = str(cluster.certs.client_keystore("flood"))
    processes: list[subprocess.Popen[str]] = []
    try:
        good_client = Poller(good_metadata, GOOD_CLIENT_PACE_S).start()
        loop_probe = Poller(broker_loop, HEALTH_PACE_S).start()
        fence_probe = Poller(fenced, 0.5).start()
        command = [sys.executable, "-m", "tests.kafka_raw"]
        common = [address, ca, flood_keystore, str(LOAD_SECONDS)]
        for _ in range(CREATE_FLOODERS):
            processes.append(
                subprocess.Popen(
                    [*command, "create", *common, "--frame", str(frame_file)],
                    cwd=REPO,
                    stdout=subprocess.PIPE,
                    text=True,
                )
            )
        for _ in range(METADATA_FLOODERS):
            processes.append(
                subprocess.Popen(
                    [
                        *command, "metadata", *common,
                        "--connections", str(METADATA_FLOOD_CONNECTIONS),
                    ],
                    cwd=REPO,
                    stdout=subprocess.PIPE,
                    text=True,
                )
            )  # fmt: skip
        floods = []
        for process in processes:  # each stops by itself at its deadline
            out, _ = process.communicate(timeout=LOAD_SECONDS + 120)
            floods.append(json.loads(out.strip().splitlines()[-1]))
        good_client.stop()
        loop_probe.stop()
        fence_probe.stop()
    finally:
        for process in processes:  # only if the test failed before they ended
            if process.poll() is None:
                process.kill()
                process.wait(timeout=10)
        good.close()
        health_channel.close()
        admin.close()

    latencies = good_client.results
    print(f"floods: {floods}")
    print(f"well-behaved Metadata: {summary(latencies)}; errors {good_client.errors[:3]}")
    print(f"broker loop (gRPC health Check): {summary(loop_probe.results)}")
    print(f"fenced polls: {sum(fence_probe.results)} of {len(fence_probe.results)}")

    creates = [f for f in floods if f["kind"] == "create"]
    metadata = [f for f in floods if f["kind"] == "metadata"]
    assert sum(f["sent"] for f in creates) >= CREATE_FLOODERS, floods  # the flood happened
    assert sum(f["answered"] for f in metadata) > 0, floods

    # The broker stayed in the cluster the whole time.
    assert fence_probe.results, fence_probe.errors
    assert not any(fence_probe.results), f"broker {BROKER} was fenced under client load"
    for controller_id in cluster.controller_ids:
        for line in cluster.logs(controller_id).splitlines():
            if '"brokers_fenced"' in line:
                assert BROKER not in json.loads(line)["broker_ids"], line
    assert '"event": "fenced"' not in cluster.logs(BROKER)
    assert '"event": "registration_lost"' not in cluster.logs(BROKER)

    # The well-behaved client was served throughout, promptly.
    assert not good_client.errors, good_client.errors[:3]
    assert len(latencies) > LOAD_SECONDS / 2, summary(latencies)
    assert statistics.median(latencies) < GOOD_CLIENT_P50_MS_MAX, summary(latencies)
    assert percentile(latencies, 0.99) < GOOD_CLIENT_P99_MS_MAX, summary(latencies)
    assert max(latencies) < GOOD_CLIENT_MS_MAX, summary(latencies)
    # ... and the broker's own loop never waited behind client work.
    assert not loop_probe.errors, loop_probe.errors[:3]
    assert max(loop_probe.results) < BROKER_LOOP_MS_MAX, summary(loop_probe.results)
    assert "kafka_request_failed" not in cluster.logs(BROKER)
