#!/usr/bin/env python3
"""Metadata requests from Kafka's own clients against a broker's Kafka listener
(docs/kafka-listener.md): latency and throughput.

How the numbers are taken: three controllers and one broker are started through the CLI in a
temporary directory (mTLS and ACLs on, as the cluster runs), the broker with an SSL Kafka
listener and a PLAINTEXT one; ``--topics`` topics of 3 partitions are created through the
admin gRPC. The clients run in this process:

1. kafka-python 3 ``KafkaAdminClient.describe_topics([one topic])`` and ``list_topics()`` (all
   topics), one request at a time: each call is one Metadata v12 request on an open connection.
2. confluent-kafka (librdkafka) ``AdminClient.list_topics(topic=...)`` and ``list_topics()``,
   one at a time: each call is one Metadata request (librdkafka does not answer it from a
   cache).
3. Throughput: ``--clients`` confluent-kafka clients in threads (librdkafka releases the GIL),
   each asking for one topic's metadata in a loop for ``--seconds``.

Latency is from the call to its return in the client, so it includes the client library's own
work. Each measurement runs over the SSL listener (with the admin's certificate) and over the
PLAINTEXT one (where the caller is User:ANONYMOUS; the broker grants it DESCRIBE on every topic
through an ACL so both answer the same topics).

Usage: .venv/bin/python scripts/bench/kafka_metadata.py [--topics 100] [--requests 500]
       [--clients 8] [--seconds 10]
"""

from __future__ import annotations

import argparse
import socket
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from confluent_kafka.admin import AdminClient as ConfluentAdmin
from kafka import KafkaAdminClient

from quorum.admin import NewTopic
from quorum.harness import ProcessCluster, process_cluster, wait_until
from quorum.security.acls import (
    AclBinding,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourceType,
)


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


def report(label: str, latencies_s: list[float]) -> None:
    ms = [v * 1000 for v in latencies_s]
    total = sum(latencies_s)
    print(
        f"  {label:<46} n={len(ms):>5}  p50={percentile(ms, 0.5):6.2f} ms  "
        f"p99={percentile(ms, 0.99):6.2f} ms  mean={statistics.fmean(ms):6.2f} ms  "
        f"{len(ms) / total:7.0f} req/s",
        flush=True,
    )


def timed(call: Callable[[], Any], count: int, warmup: int = 20) -> list[float]:
    for _ in range(warmup):
        call()
    latencies = []
    for _ in range(count):
        start = time.perf_counter()
        call()
        latencies.append(time.perf_counter() - start)
    return latencies


def listening(address: str) -> bool:
    host, port = address.split(":")
    try:
        socket.create_connection((host, int(port)), timeout=0.5).close()
    except OSError:
        return False
    return True


def clients(cluster: ProcessCluster, listener: str) -> tuple[Any, Callable[[], Any]]:
    address = cluster.nodes[101].kafka_address(listener)
    assert cluster.certs is not None
    ca, keystore = str(cluster.certs.ca), str(cluster.certs.client_keystore())
    if listener == "KAFKA":
        kp = KafkaAdminClient(
            bootstrap_servers=address,
            security_protocol="SSL",
            ssl_cafile=ca,
            ssl_certfile=keystore,
            ssl_keyfile=keystore,
        )
        settings = {
            "bootstrap.servers": address,
            "security.protocol": "SSL",
            "ssl.ca.location": ca,
            "ssl.certificate.location": keystore,
            "ssl.key.location": keystore,
        }
    else:
        kp = KafkaAdminClient(bootstrap_servers=address)
        settings = {"bootstrap.servers": address}
    return kp, lambda: ConfluentAdmin(settings)


def throughput(make: Callable[[], Any], topic: str, threads: int, seconds: float) -> None:
    admins = [make() for _ in range(threads)]
    for admin in admins:
        admin.list_topics(topic=topic, timeout=10)
    counts = [0] * threads
    latencies: list[list[float]] = [[] for _ in range(threads)]
    stop = time.monotonic() + seconds

    def run(index: int) -> None:
        admin = admins[index]
        while time.monotonic() < stop:
            start = time.perf_counter()
            admin.list_topics(topic=topic, timeout=10)
            latencies[index].append(time.perf_counter() - start)
            counts[index] += 1

    workers = [threading.Thread(target=run, args=(i,)) for i in range(threads)]
    started = time.monotonic()
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    elapsed = time.monotonic() - started
    merged = [v * 1000 for per in latencies for v in per]
    print(
        f"  {threads} confluent-kafka clients, one topic, {elapsed:.1f} s: "
        f"{sum(counts) / elapsed:7.0f} req/s  p50={percentile(merged, 0.5):.2f} ms  "
        f"p99={percentile(merged, 0.99):.2f} ms",
        flush=True,
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--topics", type=int, default=100)
    parser.add_argument("--requests", type=int, default=500)
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--seconds", type=float, default=10.0)
    args = parser.parse_args()
    with (
        tempfile.TemporaryDirectory(prefix="kafka-metadata-bench-") as tmp,
        process_cluster(
            Path(tmp),
            brokers=1,
            kafka_listeners={"KAFKA": "SSL", "KAFKA_PLAIN": "PLAINTEXT"},
        ) as cluster,
    ):
        cluster.format()
        cluster.start_all()
        cluster.wait_for_leader(timeout_s=30)
        for name in ("KAFKA", "KAFKA_PLAIN"):
            address = cluster.nodes[101].kafka_address(name)
            wait_until(lambda a=address: listening(a), 30, f"Kafka listener {address}")
        with cluster.admin() as admin:
            wait_until(
                lambda: any(not b.is_fenced for b in admin.describe_cluster().brokers),
                30,
                "the broker unfenced",
            )
            names = [f"bench-{i:04d}" for i in range(args.topics)]
            for start in range(0, len(names), 100):
                admin.create_topics([NewTopic(n, 3, 1) for n in names[start : start + 100]]).all()
            anonymous = "User:ANONYMOUS"
            admin.create_acls(
                [
                    AclBinding(
                        ResourceType.TOPIC,
                        "*",
                        PatternType.LITERAL,
                        anonymous,
                        "*",
                        AclOperation.DESCRIBE,
                        AclPermissionType.ALLOW,
                    )
                ]
            ).all()
        print(
            f"Kafka Metadata against one broker ({args.topics} topics x 3 partitions, "
            f"{args.requests} sequential requests per line; 2 cores shared with the cluster)",
            flush=True,
        )
        one = names[0]
        for listener, label in (("KAFKA", "SSL"), ("KAFKA_PLAIN", "PLAINTEXT")):
            kp, make_confluent = clients(cluster, listener)
            ck = make_confluent()
            print(f"{label} listener:", flush=True)
            report(
                "kafka-python describe_topics([one])",
                timed(lambda kp=kp: kp.describe_topics([one]), args.requests),
            )
            report(
                f"kafka-python list_topics() ({args.topics} topics)",
                timed(kp.list_topics, args.requests),
            )
            report(
                "confluent-kafka list_topics(topic=one)",
                timed(lambda ck=ck: ck.list_topics(topic=one, timeout=10), args.requests),
            )
            report(
                f"confluent-kafka list_topics() ({args.topics} topics)",
                timed(lambda ck=ck: ck.list_topics(timeout=10), args.requests),
            )
            throughput(make_confluent, one, args.clients, args.seconds)
            kp.close()
        logs = cluster.logs(101)
        assert "kafka_request_failed" not in logs
    return 0


if __name__ == "__main__":
    sys.exit(main())
