#!/usr/bin/env python3
"""Failover and idle-cost benchmark of a real three-controller quorum on 127.0.0.1.

How the numbers are taken: three controller processes are started through the CLI (fsync on,
data in a temporary directory). For each run the current leader is killed (SIGKILL) or asked to
stop (SIGTERM); the clock starts when the signal is sent and stops when a DescribeQuorum answer
from one of the survivors names a new leader whose high watermark is past the one seen before
the kill (polled every 5 ms). The killed node is then restarted and the quorum left to settle
before the next run. Idle CPU is the sum of user+system time of the three controllers over a
window with no client traffic (only NoOps every 500 ms), from /proc/PID/stat; two real brokers
run beside them, and at the end of the window every node's resident memory (VmRSS from
/proc/PID/status) is the idle RSS of a fresh 3-controller + 2-broker cluster.

``--security ssl`` (the default) runs the quorum with mTLS between the controllers (and for the
probing client); ``--security plaintext`` without, to measure what TLS costs (docs/security.md).

Usage: .venv/bin/python scripts/bench/failover.py [--runs 10] [--skip-fast] [--skip-idle]
       (--runs 0: the idle figures alone)
       [--security ssl|plaintext]
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import sys
import tempfile
import time
from pathlib import Path

from quorum.harness import (
    ProcessCluster,
    cpu_seconds,
    process_cluster,
    resident_mib,
    wait_until,
)


def settle(cluster: ProcessCluster) -> tuple[int, int, int]:
    """Wait until every voter is caught up with a committed leader."""

    def settled() -> tuple[int, int, int] | None:
        found = cluster.leader()
        if found is None:
            return None
        answer = cluster.describe(found[0])
        ok = answer.high_watermark > 0 and all(
            v.log_end_offset >= answer.high_watermark for v in answer.current_voters
        )
        return found if ok else None

    return wait_until(settled, 60, "a settled quorum")


def new_leader_committing(
    cluster: ProcessCluster, others: list[int], old: int, epoch: int, hw: int
) -> bool:
    found = cluster.leader(others)
    return found is not None and found[0] != old and found[1] > epoch and found[2] > hw


def measure_failovers(cluster: ProcessCluster, runs: int, sig: int) -> list[float]:
    results: list[float] = []
    for _ in range(runs):
        leader, epoch, hw = settle(cluster)
        others = [n for n in cluster.nodes if n != leader]
        started = time.monotonic()
        cluster.nodes[leader].process.send_signal(sig)  # type: ignore[union-attr]
        wait_until(
            lambda: new_leader_committing(cluster, others, leader, epoch, hw),  # noqa: B023
            30,
            "a new leader committing",
            interval_s=0.005,
        )
        results.append(time.monotonic() - started)
        cluster.nodes[leader].process.wait(timeout=15)  # type: ignore[union-attr]
        cluster.start(leader)
    return results


def report(name: str, values: list[float], target: str) -> None:
    ms = sorted(v * 1000 for v in values)
    print(
        f"{name}: runs={len(ms)} median={statistics.median(ms):.0f} ms "
        f"max={ms[-1]:.0f} ms min={ms[0]:.0f} ms  (target {target})"
    )
    print(f"    all (ms): {', '.join(f'{v:.0f}' for v in ms)}")


def run(runs: int, settings: dict[str, object], label: str, sigterm: bool, security: str) -> None:
    with (
        tempfile.TemporaryDirectory(prefix="mq-bench-") as tmp,
        process_cluster(Path(tmp), settings=settings, security=security) as cluster,
    ):
        cluster.format()
        cluster.start_all()
        cluster.wait_for_leader(30)
        kills = measure_failovers(cluster, runs, signal.SIGKILL)
        report(f"kill -9 failover, {label}", kills, "median <= 2.5 s, max <= 4 s"
               if not settings else "median <= 1.0 s")  # fmt: skip
        if sigterm:
            terms = measure_failovers(cluster, runs, signal.SIGTERM)
            report(f"SIGTERM handover, {label}", terms, "median <= 0.3 s")


def idle_cpu(window_s: float, security: str) -> None:
    with (
        tempfile.TemporaryDirectory(prefix="mq-bench-") as tmp,
        process_cluster(Path(tmp), security=security, brokers=2) as cluster,
    ):
        cluster.format()
        cluster.start_all()
        settle(cluster)
        time.sleep(2)  # let start-up work finish before the window opens
        pids = [cluster.nodes[n].process.pid for n in cluster.controller_ids]  # type: ignore[union-attr]
        before = sum(cpu_seconds(p) for p in pids)
        time.sleep(window_s)
        after = sum(cpu_seconds(p) for p in pids)
        percent = (after - before) / window_s * 100
        print(
            f"idle CPU of the 3-node quorum: {percent:.2f} % of one core over {window_s:.0f} s "
            "(target <= 5 %)"
        )
        rss = {
            f"{'controller' if n in cluster.controller_ids else 'broker'} {n}": resident_mib(
                cluster.nodes[n].process.pid  # type: ignore[union-attr]
            )
            for n in sorted(cluster.nodes)
        }
        print(
            "idle RSS, fresh 3-controller + 2-broker cluster: "
            + ", ".join(f"{name} {mib:.1f} MiB" for name, mib in rss.items())
            + " (target <= 60 MiB)"
        )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--skip-fast", action="store_true")
    parser.add_argument("--skip-idle", action="store_true")
    parser.add_argument("--idle-window-s", type=float, default=20)
    parser.add_argument("--security", choices=("ssl", "plaintext"), default="ssl")
    args = parser.parse_args()
    print(
        f"machine: {os.cpu_count()} cores; python {sys.version.split()[0]}; "
        f"security {args.security}"
    )
    if args.runs:
        run(
            args.runs,
            {},
            "Kafka defaults (election 1000 ms, fetch 2000 ms)",
            sigterm=True,
            security=args.security,
        )
    if args.runs and not args.skip_fast:
        fast = {
            "controller.quorum.election.timeout.ms": 300,
            "controller.quorum.fetch.timeout.ms": 600,
        }
        run(args.runs, fast, "election 300 ms, fetch 600 ms", sigterm=False, security=args.security)
    if not args.skip_idle:
        idle_cpu(args.idle_window_s, args.security)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
