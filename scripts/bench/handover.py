#!/usr/bin/env python3
"""SIGTERM handover through a broker, phase by phase (the "SIGTERM handover" figure of
``peers.py --peer kafka``, on our side alone).

How the numbers are taken: the cluster of ``peers_kafka.py``'s metaquorum side (3 controllers,
3 brokers, mTLS and ACLs on, fsync on) and its failover loop: eight confluent-kafka
AdminClients, bootstrapped round-robin on the brokers, send CreateTopics attempts (a new topic
each, 5 s timeout) whenever one is idle, at most every 25 ms, from the SIGTERM of the active
controller until the first is acknowledged. After each run the nodes' JSON logs (structlog's
UTC timestamps, one clock on one host) give when each phase ended, in ms after the signal:

- ``resigned``: the old leader's ``became_resigned`` (EndQuorumEpoch sent with it);
- ``prospective`` / ``candidate`` / ``leader``: the successor's ``became_*`` events;
- ``ready``: the new leader's first committed batch of its epoch was applied
  (``controller_activated``);
- ``brokers``: the last broker's ``became_follower`` of the new epoch (its observer found the
  new leader);
- ``ack``: the first CreateTopics acknowledged to a client.

Each figure is the median over the runs, with its min and max; the load average is printed
before and after. The signalled node is restarted and the cluster settles before the next run.

Usage: .venv/bin/python scripts/bench/handover.py [--runs 10] [--security ssl|plaintext]
"""

from __future__ import annotations

import argparse
import datetime
import os
import signal
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from confluent_kafka.admin import AdminClient, NewTopic
from peers_kafka import (
    FAILOVER_ATTEMPT_EVERY_S,
    FAILOVER_CLIENTS,
    Attempts,
    MetaquorumSide,
    create,
    metaquorum_side,
)

PHASES = ("resigned", "prospective", "candidate", "leader", "ready", "brokers", "ack")


def _at(record: dict[str, Any]) -> float:
    return datetime.datetime.fromisoformat(record["timestamp"]).timestamp()


def phases(
    side: MetaquorumSide, old: int, signalled_at: float, acked_at: float
) -> dict[str, float]:
    """When each phase ended, in ms after the signal (absent: not seen in the logs)."""
    cluster = side.cluster
    found: dict[str, float] = {"ack": (acked_at - signalled_at) * 1000}

    def after(node: int, event: str) -> list[dict[str, Any]]:
        return [r for r in cluster.events(node, event) if _at(r) >= signalled_at]

    resigned = after(old, "became_resigned")
    if resigned:
        found["resigned"] = (_at(resigned[0]) - signalled_at) * 1000
    new_leader: int | None = None
    for node in cluster.controller_ids:
        if node == old:
            continue
        led = after(node, "became_leader")
        if led:
            new_leader = node
            found["leader"] = (_at(led[0]) - signalled_at) * 1000
            for event, name in (("became_prospective", "prospective"),
                                ("became_candidate", "candidate"),
                                ("controller_activated", "ready")):  # fmt: skip
                records = after(node, event)
                if records:
                    found[name] = (_at(records[0]) - signalled_at) * 1000
    if new_leader is not None:
        learned = []
        for broker in cluster.broker_ids:
            records = [
                r for r in after(broker, "became_follower") if r.get("leader_id") == new_leader
            ]
            if records:
                learned.append(_at(records[0]))
        if len(learned) == len(cluster.broker_ids):
            found["brokers"] = (max(learned) - signalled_at) * 1000
    return found


def preload(side: MetaquorumSide, topics: int) -> None:
    """``topics`` topics of 1 partition, RF 3, 100 per request, before the runs: the
    handover with a metadata image of some size, as after ``peers.py``'s load."""
    if not topics:
        return
    admin = AdminClient(side.client_config(",".join(side.brokers())))
    started = time.monotonic()
    for first in range(0, topics, 100):
        names = [f"pre-{i}" for i in range(first, min(first + 100, topics))]
        futures = admin.create_topics(
            [NewTopic(n, num_partitions=1, replication_factor=3) for n in names],
            request_timeout=60,
        )
        for future in futures.values():
            future.result(timeout=65)
    print(f"{topics:,} topics created in {time.monotonic() - started:.1f} s", flush=True)


TRACED = ("shutting_down", "resigned", "leader_resigned", "controller_activated", "stopped")


def trace(side: MetaquorumSide, signalled_at: float) -> None:
    """Every node's elections and hand-over events after the signal, in order."""
    cluster = side.cluster
    lines = []
    for node in cluster.nodes:
        for record in cluster.events(node):
            event = str(record.get("event"))
            if _at(record) >= signalled_at and (event.startswith("became_") or event in TRACED):
                lines.append(
                    (_at(record), node, event, record.get("leader_id"), record.get("reason"))
                )
    for at, node, event, leader_id, reason in sorted(lines):
        print(f"    {(at - signalled_at) * 1000:6.0f} ms node {node} {event} "
              f"leader {leader_id} ({reason})")  # fmt: skip


def handover(side: MetaquorumSide, attempt: int, traced: bool = False) -> dict[str, float]:
    brokers = side.brokers()
    side.settle()
    admins = [AdminClient(side.client_config(brokers[i % len(brokers)]))
              for i in range(FAILOVER_CLIENTS)]  # fmt: skip
    for i, admin in enumerate(admins):
        create(admin, f"ho-warm-{attempt}-{i}")
    attempts = Attempts(admins)
    leader = side.active_controller()
    side.signal(leader, signal.SIGTERM)
    started = time.monotonic()
    signalled_at = time.time()
    number = 0
    while not attempts.acknowledged.wait(FAILOVER_ATTEMPT_EVERY_S):
        if time.monotonic() - started > 60:
            raise RuntimeError("no CreateTopics acknowledged 60 s after the SIGTERM")
        number += 1
        attempts.try_one(f"ho-{attempt}-{number}")
    assert attempts.first_ok is not None
    acked_at = signalled_at + (attempts.first_ok - started)
    if traced:
        trace(side, signalled_at)
    side.restart(leader)
    return phases(side, leader, signalled_at, acked_at)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--security", choices=("ssl", "plaintext"), default="ssl")
    parser.add_argument(
        "--topics", type=int, default=0, help="topics created first (1 partition, RF 3)"
    )
    parser.add_argument(
        "--trace", action="store_true", help="print every node's events of the handover"
    )
    args = parser.parse_args()
    print(f"load average at the start: {os.getloadavg()[0]:.2f}", flush=True)
    runs: list[dict[str, float]] = []
    with (
        tempfile.TemporaryDirectory(prefix="mq-handover-") as root,
        metaquorum_side(Path(root), args.security) as side,
    ):
        preload(side, args.topics)
        for attempt in range(args.runs):
            found = handover(side, attempt, args.trace)
            runs.append(found)
            done = ", ".join(f"{name} {found[name]:.0f}" for name in PHASES if name in found)
            print(f"run {attempt}: {done}", flush=True)
    print(f"load average at the end: {os.getloadavg()[0]:.2f}")
    print("phase ends, ms after the SIGTERM: median (min-max) over the runs")
    for name in PHASES:
        values = [r[name] for r in runs if name in r]
        if values:
            print(f"  {name:12} {statistics.median(values):7.0f} "
                  f"({min(values):.0f}-{max(values):.0f}, {len(values)} runs)")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
