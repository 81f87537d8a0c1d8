#!/usr/bin/env python3
"""What a new mTLS connection costs a node, against a plaintext one, on 127.0.0.1.

How the numbers are taken: one controller process is started through the CLI (a quorum of one,
fsync on) with mTLS (the default) and, in a second run, PLAINTEXT. For each of ``--connections``
rounds the client opens a new gRPC channel (as the admin, presenting its certificate), makes one
DescribeQuorum call, and closes the channel; the time from opening the channel to the answer is
one sample (handshake + one call). The same is done with one channel kept open (the call alone),
so the difference is what the connection costs. The server's CPU time (user + system from
/proc/PID/stat) over the rounds, divided by the rounds, is its CPU per new connection.

Usage: .venv/bin/python scripts/bench/handshake.py [--connections 300]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

from quorum.harness import ProcessCluster, cpu_seconds, process_cluster
from quorum.rpc.v1 import raft_pb2, raft_pb2_grpc


def quantile(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def measure(cluster: ProcessCluster, rounds: int) -> dict[str, float]:
    address = cluster.nodes[1].address
    security = cluster.client_security()
    pid = cluster.nodes[1].process.pid  # type: ignore[union-attr]
    request = raft_pb2.DescribeQuorumRequest()
    fresh: list[float] = []
    cpu_before = cpu_seconds(pid)
    for _ in range(rounds):
        started = time.perf_counter()
        with security.channel(address) as channel:
            raft_pb2_grpc.QuorumServiceStub(channel).DescribeQuorum(request, timeout=10)
        fresh.append((time.perf_counter() - started) * 1000)
    cpu_per_connection_ms = (cpu_seconds(pid) - cpu_before) / rounds * 1000
    kept: list[float] = []
    with security.channel(address) as channel:
        stub = raft_pb2_grpc.QuorumServiceStub(channel)
        stub.DescribeQuorum(request, timeout=10)
        cpu_before = cpu_seconds(pid)
        for _ in range(rounds):
            started = time.perf_counter()
            stub.DescribeQuorum(request, timeout=10)
            kept.append((time.perf_counter() - started) * 1000)
        cpu_per_call_ms = (cpu_seconds(pid) - cpu_before) / rounds * 1000
    return {
        "new_p50_ms": statistics.median(fresh),
        "new_p99_ms": quantile(fresh, 0.99),
        "kept_p50_ms": statistics.median(kept),
        "server_cpu_per_new_connection_ms": cpu_per_connection_ms,
        "server_cpu_per_call_ms": cpu_per_call_ms,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--connections", type=int, default=300)
    args = parser.parse_args()
    results: dict[str, dict[str, float]] = {}
    for security in ("ssl", "plaintext"):
        with (
            tempfile.TemporaryDirectory(prefix="mq-handshake-") as root,
            process_cluster(Path(root), voters=1, security=security) as cluster,
        ):
            cluster.format()
            cluster.start_all()
            cluster.wait_for_leader(timeout_s=30)
            results[security] = measure(cluster, args.connections)
    print(f"{args.connections} connections each; one controller, 127.0.0.1, 2 cores")
    print(f"{'':38} {'mTLS':>10} {'plaintext':>10} {'ratio':>7}")
    for key in results["ssl"]:
        ssl_value, plain = results["ssl"][key], results["plaintext"][key]
        ratio = ssl_value / plain if plain else float("nan")
        print(f"{key:38} {ssl_value:10.3f} {plain:10.3f} {ratio:7.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
