#!/usr/bin/env python3
"""How long adding and removing a controller takes (KIP-853), on real processes with mTLS.

How the numbers are taken: controller 1 is formatted with ``storage format --standalone`` and
leads a one-voter quorum; three test brokers (registrations and heartbeats from this process)
let it place replicas; CreateTopics requests (909 topics x 10 partitions, RF 3: one batch each)
fill its metadata log to about ``--log-mb`` MB. Snapshots are off, so the new controller
catches the whole log up, not a snapshot. Controller 2 is formatted with
``--no-initial-controllers`` and started; the add clock starts when ``metaquorum quorum
add-controller`` is run, right after the process starts, and stops when it exits successfully:
the new controller fetched the whole log as an observer, the leader appended the new voter set
and a majority of the new set (both voters) committed it. The remove clock covers ``metaquorum
quorum remove-controller`` of controller 2 (alive, caught up). Both include starting the CLI
(about 0.5 s of Python imports and a TLS handshake).

Usage: .venv/bin/python scripts/bench/reconfiguration.py [--log-mb 100] [--runs 1]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from quorum.admin import NewTopic
from quorum.harness import FakeBrokers, ProcessCluster, process_cluster, wait_until
from quorum.meta_properties import read as read_meta_properties

NO_SNAPSHOTS = {
    "metadata.log.max.record.bytes.between.snapshots": 1 << 50,
    "metadata.log.max.snapshot.interval.ms": 1 << 50,
}
TOPICS_PER_REQUEST = 909  # 11 records per topic: one atomic batch of at most 10,000 records


def log_bytes(directory: Path) -> int:
    return sum(p.stat().st_size for p in directory.glob("*.log"))


def fill(cluster: ProcessCluster, target_bytes: int) -> tuple[int, float]:
    """Create topics until controller 1's log holds ``target_bytes``; returns topics, seconds."""
    directory = cluster.nodes[1].metadata_dir
    started = time.monotonic()
    created = 0
    with cluster.admin(timeout_s=120) as admin:
        while log_bytes(directory) < target_bytes:
            topics = [NewTopic(f"t{created + i}", 10, 3) for i in range(TOPICS_PER_REQUEST)]
            admin.create_topics(topics).all()
            created += len(topics)
    return created, time.monotonic() - started


def one_run(root: Path, log_mb: float) -> dict[str, float]:
    with process_cluster(root, voters=2, dynamic=True, settings=NO_SNAPSHOTS) as cluster:
        cluster.format(1, extra=["--standalone"])
        cluster.start(1)
        wait_until(lambda: cluster.leader([1]), 60, "controller 1 leading")
        brokers = FakeBrokers(cluster, [101, 102, 103])
        brokers.register()
        try:
            wait_until(brokers.heartbeat_all, 30, "the test brokers unfenced")
            topics, fill_s = fill(cluster, int(log_mb * 1e6))
            size = log_bytes(cluster.nodes[1].metadata_dir)
            print(f"filled {size / 1e6:.1f} MB ({topics:,} topics) in {fill_s:.0f} s")

            cluster.format(2, extra=["--no-initial-controllers"])
            cluster.start(2)
            started = time.monotonic()
            _run(cluster, "add-controller", "--config", str(cluster.nodes[2].config))
            add_s = time.monotonic() - started
            voters = [v.replica_id for v in cluster.describe(1).current_voters]
            assert voters == [1, 2], voters

            directory = str(read_meta_properties(cluster.nodes[2].data_dir).directory_id)
            started = time.monotonic()
            _run(
                cluster,
                "remove-controller",
                "--controller-id",
                "2",
                "--controller-directory-id",
                directory,
            )
            remove_s = time.monotonic() - started
            voters = [v.replica_id for v in cluster.describe(1).current_voters]
            assert voters == [1], voters
        finally:
            brokers.stop()
        return {"log_mb": size / 1e6, "add_s": add_s, "remove_s": remove_s}


def _run(cluster: ProcessCluster, command: str, *args: str) -> None:
    cluster.run_cli(
        "quorum",
        command,
        *args,
        "--bootstrap-controller",
        cluster.nodes[1].address,
        "--timeout-s",
        "600",
        timeout_s=700,
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--log-mb", type=float, default=100.0)
    parser.add_argument("--runs", type=int, default=1)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="mq-reconfig-") as tmp:
        results = [one_run(Path(tmp) / f"run-{n}", args.log_mb) for n in range(args.runs)]
    for key in ("log_mb", "add_s", "remove_s"):
        values = [round(r[key], 2) for r in results]
        print(f"{key:>10}: median {statistics.median(values):.2f}  all {values}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
