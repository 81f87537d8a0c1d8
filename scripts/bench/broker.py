#!/usr/bin/env python3
"""Broker benchmarks on a real cluster (3 controllers + 2 brokers, fsync on, 127.0.0.1).

How the numbers are taken:

1. Metadata propagation: 200 topics (1 partition, RF 2) are created one after another through
   the AdminClient. For each, the clock starts when CreateTopics is acknowledged and stops when
   ``{topic}-0/partition.metadata`` exists on both brokers (polled every 0.5 ms by this process).
2. Broker cold start: 1,000 topics x 10 partitions, RF 2 over the 2 brokers (10,000 partition
   directories each) are created; broker 1 is stopped (SIGTERM: fenced at once, so the
   topics are created while both brokers run) and its partition directories removed; then it
   starts from those empty ``log.dirs`` and its local metadata log; the clock runs from
   process start until its 10,000 directories exist (it has caught up and reconciled). Then it
   is stopped and started again with every directory present: the clock runs until its log
   says it reconciled (FULL).
3. SIGTERM restart (before 2, with the 200 topics of 1): ``--restarts`` times, broker 2 is
   stopped with SIGTERM (Kafka's controlled shutdown: the controller fences it and ends its
   session) and started again at once; the clock runs from the new process's start until the
   active controller describes it unfenced and its log says it reconciled (FULL).

Usage: .venv/bin/python scripts/bench/broker.py [--topics 200] [--big-topics 1000]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import statistics
import sys
import tempfile
import time
from pathlib import Path

from quorum.admin import AdminClient, NewTopic
from quorum.harness import ProcessCluster, process_cluster, wait_until


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


def propagation(cluster: ProcessCluster, admin: AdminClient, topics: int) -> list[float]:
    dirs = [cluster.nodes[b].log_dir for b in cluster.broker_ids]
    latencies = []
    for i in range(topics):
        name = f"prop-{i}"
        admin.create_topics([NewTopic(name, 1, 2)]).all()
        acked = time.perf_counter()
        targets = [d / f"{name}-0" / "partition.metadata" for d in dirs]
        deadline = acked + 10
        while not all(t.exists() for t in targets):
            if time.perf_counter() > deadline:
                raise SystemExit(f"{name} never appeared on every broker")
            time.sleep(0.0005)
        latencies.append(time.perf_counter() - acked)
    return latencies


def count_partition_dirs(log_dir: Path) -> int:
    if not log_dir.exists():
        return 0
    return sum(1 for entry in os.scandir(log_dir) if entry.name.startswith("big-"))


def reconciled_full(cluster: ProcessCluster, broker_id: int, starts_before: int) -> bool:
    lines = [line for line in cluster.logs(broker_id).splitlines() if '"reconciled"' in line]
    return any(json.loads(line).get("mode") == "FULL" for line in lines[starts_before:])


def sigterm_restarts(cluster: ProcessCluster, admin: AdminClient, runs: int) -> list[float]:
    broker_id = cluster.broker_ids[-1]
    times = []
    for _ in range(runs):
        cluster.kill(broker_id, signal.SIGTERM)
        marks = len([ln for ln in cluster.logs(broker_id).splitlines() if '"reconciled"' in ln])
        started = time.perf_counter()
        cluster.start(broker_id)

        def back(marks: int = marks) -> bool:
            fenced = {b.broker_id: b.is_fenced for b in admin.describe_cluster().brokers}
            return not fenced.get(broker_id, True) and reconciled_full(cluster, broker_id, marks)

        wait_until(back, 60, "the restarted broker unfenced and reconciled", 0.01)
        times.append(time.perf_counter() - started)
    return times


def cold_start(cluster: ProcessCluster, admin: AdminClient, topics: int) -> None:
    started = time.perf_counter()
    for first in range(0, topics, 500):
        admin.create_topics(
            [NewTopic(f"big-{i}", 10, 2) for i in range(first, min(topics, first + 500))]
        ).all()
    print(f"    created {topics} topics x 10 partitions in {time.perf_counter() - started:.1f} s")
    # Broker 1 stops (controlled shutdown: fenced at once) and loses its partition
    # directories, then starts with the metadata log it has: it must create all of them.
    broker = cluster.nodes[cluster.broker_ids[0]]
    cluster.kill(broker.node_id, signal.SIGTERM)
    for entry in broker.log_dir.iterdir():
        if entry.is_dir() and entry.name.startswith("big-"):
            shutil.rmtree(entry)
    expected = topics * 10
    started = time.perf_counter()
    cluster.start(broker.node_id)
    wait_until(
        lambda: count_partition_dirs(broker.log_dir) >= expected, 600, "the cold start", 0.05
    )
    cold = time.perf_counter() - started
    print(
        f"broker cold start, empty log.dirs, {expected} partition directories: {cold:.1f} s "
        "(process start -> caught up and every directory created)"
    )
    cluster.kill(broker.node_id, signal.SIGTERM)
    marks = len([ln for ln in cluster.logs(broker.node_id).splitlines() if '"reconciled"' in ln])
    started = time.perf_counter()
    cluster.start(broker.node_id)
    wait_until(
        lambda: reconciled_full(cluster, broker.node_id, marks), 600, "the warm restart", 0.05
    )
    warm = time.perf_counter() - started
    print(
        f"broker restart with all {expected} directories present: {warm:.1f} s "
        "(process start -> FULL reconciliation done)"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--topics", type=int, default=200)
    parser.add_argument("--big-topics", type=int, default=1000)
    parser.add_argument("--restarts", type=int, default=5)
    args = parser.parse_args()
    print(f"machine: {os.cpu_count()} cores; python {sys.version.split()[0]}")
    with (
        tempfile.TemporaryDirectory(prefix="mq-bench-") as tmp,
        process_cluster(Path(tmp), brokers=2) as cluster,
    ):
        cluster.format()
        cluster.start_all()
        cluster.wait_for_leader(30)
        bootstrap = ",".join(cluster.nodes[n].address for n in cluster.controller_ids)
        with cluster.admin(bootstrap, timeout_s=60) as admin:
            wait_until(
                lambda: sum(1 for b in admin.describe_cluster().brokers if not b.is_fenced) == 2,
                60,
                "both brokers unfenced",
            )
            lat = propagation(cluster, admin, args.topics)
            print(
                f"metadata propagation, {len(lat)} topics, CreateTopics acknowledged -> "
                f"partition.metadata on both brokers: p50 {statistics.median(lat) * 1000:.1f} ms, "
                f"p99 {percentile(lat, 0.99) * 1000:.1f} ms, max {max(lat) * 1000:.1f} ms "
                "(target p99 <= 50 ms)"
            )
            if args.restarts:
                times = sorted(sigterm_restarts(cluster, admin, args.restarts))
                print(
                    f"broker SIGTERM restart, {len(times)} runs, process start -> unfenced and "
                    f"reconciled: median {statistics.median(times):.2f} s, min {times[0]:.2f} s, "
                    f"max {times[-1]:.2f} s (target <= 2 s)"
                )
            if args.big_topics:
                cold_start(cluster, admin, args.big_topics)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
