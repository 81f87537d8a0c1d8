#!/usr/bin/env python3
"""CreateTopics benchmark against a real three-controller quorum on 127.0.0.1 (fsync on).

How the numbers are taken: three controllers are started through the CLI in a temporary
directory and three brokers are registered and kept unfenced by heartbeats (no broker
processes: the controller only needs them for placement). The client is a separate process
(this one) speaking gRPC to the active controller; every latency is from sending CreateTopics
to receiving its answer, which the controller sends only after the records are committed
(fsynced on a majority).

1. Sequential: one 1-partition RF=3 topic per request, one request at a time.
2. Concurrent: 64 clients (asyncio tasks on one grpc.aio channel each), 15 s.
3. One request with 1,000 topics.
4. New connections: ``--connections`` times, a new channel (TCP, and with SSL the mutual TLS
   handshake) and one DescribeCluster on it, what a CLI command pays once.

With ``--security ssl`` (the default, as the cluster runs) every connection is mTLS with the
admin's certificate; ``--security plaintext`` runs the same against PLAINTEXT listeners, so the
difference is the cost of TLS (docs/security.md).

Usage: .venv/bin/python scripts/bench/admin.py [--sequential 2000] [--clients 64] [--seconds 15]
       [--security ssl|plaintext]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

from quorum.harness import cluster_with_brokers
from quorum.rpc.v1 import admin_pb2, admin_pb2_grpc
from quorum.security.tls import ClientSecurity


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


def create_request(name: str) -> admin_pb2.CreateTopicsRequest:
    return admin_pb2.CreateTopicsRequest(
        topics=[admin_pb2.CreatableTopic(name=name, num_partitions=1, replication_factor=3)]
    )


def check(answer: admin_pb2.CreateTopicsResponse) -> None:
    assert answer.error_code == 0, answer.error_message
    for topic in answer.topics:
        assert topic.error_code == 0, topic.error_message


def sequential(
    address: str, security: ClientSecurity, count: int, prefix: str = "seq"
) -> list[float]:
    latencies = []
    with security.channel(address) as channel:
        stub = admin_pb2_grpc.AdminServiceStub(channel)
        for i in range(count):
            started = time.perf_counter()
            check(stub.CreateTopics(create_request(f"{prefix}-{i}"), timeout=10))
            latencies.append(time.perf_counter() - started)
    return latencies


async def concurrent(
    address: str, security: ClientSecurity, clients: int, seconds: float
) -> tuple[int, list[float]]:
    latencies: list[float] = []
    deadline = time.perf_counter() + seconds

    async def client(number: int) -> None:
        async with security.aio_channel(address) as channel:
            stub = admin_pb2_grpc.AdminServiceStub(channel)
            i = 0
            while time.perf_counter() < deadline:
                started = time.perf_counter()
                check(await stub.CreateTopics(create_request(f"c{number}-{i}"), timeout=10))
                latencies.append(time.perf_counter() - started)
                i += 1

    await asyncio.gather(*(client(n) for n in range(clients)))
    return len(latencies), latencies


def one_big_request(address: str, security: ClientSecurity, topics: int) -> float:
    request = admin_pb2.CreateTopicsRequest(
        topics=[
            admin_pb2.CreatableTopic(name=f"big-{i}", num_partitions=1, replication_factor=3)
            for i in range(topics)
        ]
    )
    with security.channel(address) as channel:
        stub = admin_pb2_grpc.AdminServiceStub(channel)
        started = time.perf_counter()
        check(stub.CreateTopics(request, timeout=30))
        return time.perf_counter() - started


def new_connections(address: str, security: ClientSecurity, count: int) -> list[float]:
    latencies = []
    for _ in range(count):
        started = time.perf_counter()
        with security.channel(address) as channel:
            stub = admin_pb2_grpc.AdminServiceStub(channel)
            answer = stub.DescribeCluster(admin_pb2.DescribeClusterRequest(), timeout=10)
            assert answer.error_code == 0, answer.error_message
        latencies.append(time.perf_counter() - started)
    return latencies


def ms(value: float) -> str:
    return f"{value * 1000:.2f} ms"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sequential", type=int, default=2000)
    parser.add_argument("--clients", type=int, default=64)
    parser.add_argument("--seconds", type=float, default=15)
    parser.add_argument("--security", choices=("ssl", "plaintext"), default="ssl")
    parser.add_argument("--connections", type=int, default=200)
    args = parser.parse_args()
    print(
        f"machine: {os.cpu_count()} cores; python {sys.version.split()[0]}; "
        f"security {args.security}"
    )
    with (
        tempfile.TemporaryDirectory(prefix="mq-bench-") as tmp,
        cluster_with_brokers(Path(tmp), security=args.security) as cluster,
    ):
        leader, _, _ = cluster.wait_for_leader()
        address = cluster.nodes[leader].address
        security = cluster.client_security()
        sequential(address, security, 50, "warm")  # warm-up: channels, code paths
        lat = sequential(address, security, args.sequential)
        print(
            f"sequential CreateTopics (1 partition, RF 3), {len(lat)} requests: "
            f"p50 {ms(statistics.median(lat))}, p99 {ms(percentile(lat, 0.99))}, "
            f"max {ms(max(lat))}  (target p50 <= 3 ms, p99 <= 10 ms)"
        )
        done, lat = asyncio.run(concurrent(address, security, args.clients, args.seconds))
        rate = done / args.seconds
        print(
            f"{args.clients} concurrent clients for {args.seconds:.0f} s: {rate:,.0f} topics/s"
            f", p50 {ms(statistics.median(lat))}, p99 {ms(percentile(lat, 0.99))}  "
            "(target >= 3,000 topics/s, p99 <= 50 ms)"
        )
        took = one_big_request(address, security, 1000)
        print(f"one CreateTopics with 1,000 topics: {ms(took)}  (target <= 1 s)")
        lat = new_connections(address, security, args.connections)
        print(
            f"new connection + one DescribeCluster, {len(lat)} times: "
            f"p50 {ms(statistics.median(lat))}, p99 {ms(percentile(lat, 0.99))}"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
