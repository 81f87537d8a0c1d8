#!/usr/bin/env python3
"""Scale run (issue 6): 100,000 topics x 10 partitions = 1,000,000 partitions, RF 3, on a real
three-controller quorum on 127.0.0.1 (fsync on), with snapshots, restarts and FetchSnapshot.

How the numbers are taken (every process is started through the CLI in a temporary directory;
durations are this process's monotonic clock unless they come from a node's own log event, whose
ISO timestamps are compared with this process's wall clock at the start of a step):

0. Set-up. Three controllers with Kafka's snapshot settings (a snapshot every
   ``metadata.log.max.record.bytes.between.snapshots`` = 20 MiB of records, ``--snapshot-bytes``).
   One real broker (101) starts, is unfenced and gets 10 small ``away-*`` topics placed on it
   by explicit assignment; then it is stopped (SIGTERM) and the run waits until the controller
   fences it, so no topic of the scale run is placed on it. Half of the ``away-*`` topics are
   deleted while it is away. ``--brokers`` test brokers (registrations + concurrent heartbeats
   from this process, no processes) are registered for placement.
1. Creation: ``--topics`` topics of ``--partitions`` partitions, RF ``--rf``, in CreateTopics
   requests of ``--batch`` topics (default: the most one atomic batch allows, 909 for 10
   partitions: 11 records per topic, RECORDS_PER_BATCH_MAX = 10,000), ``--inflight`` requests
   at a time (one AdminClient per thread). Throughput is topics / wall time; the latency is per
   request (sent -> committed answer). Controllers snapshot on their own meanwhile: every
   ``snapshot_written`` / ``snapshot_taken`` of their logs is reported.
2. (a) RSS: VmRSS and VmHWM of /proc/PID/status of each controller once every controller has
   applied the last CreateTopics offset (a DescribeCluster with that ``min_metadata_offset``).
3. (b) A snapshot of the full image: each controller in turn, followers first, the leader last
   (SIGTERM makes it resign), is restarted with ``--override
   metadata.log.max.snapshot.interval.ms=--full-snapshot-after-ms``, so it writes a snapshot of
   everything soon after it has caught up; the write time is that snapshot's
   ``snapshot_taken.seconds`` (image -> records -> .part file -> fsync -> rename, in a worker
   thread, plus the compaction in the loop), the size its ``snapshot_written.size_bytes``. The
   restart before it (its older snapshot + up to 20 MiB of log after it) is reported too.
4. (c) Restart to serving: the same controller is stopped (SIGTERM) and started with the plain
   config: it loads that full snapshot. The clock runs from process start (Popen) until it
   answers DescribeCluster with ``min_metadata_offset`` = the leader's committed offset at the
   time it was stopped (it has loaded the snapshot, caught up with the leader and applied
   everything: it serves read-your-writes reads). Log events give the breakdown.
5. The run waits until one leader has kept its epoch for ``--settle-s`` and every test broker
   is unfenced. Every phase reports the quorum's turbulence from the controllers' logs
   (elections, check-quorum failures, follower fetch timeouts, uncommitted offsets truncated,
   brokers fenced) and the longest time each controller's event loop took to answer a gRPC
   health check probed every 0.25 s (a stall of the loop that runs the Raft driver).
6. (d) Broker 101 comes back with its old metadata log (``--broker-wipe``: an empty metadata
   directory): its Fetch is below the leader's log start, so it downloads the leader's
   (full) snapshot with FetchSnapshot, installs it, registers, catches up and reconciles FULL
   (the 5 remaining ``away-*`` partitions are kept, the 5 deleted ones moved aside). The clock
   runs from process start until its log says ``reconciled`` mode FULL.

``--profile DIR`` runs py-spy (``.venv/bin/py-spy``, pip-installed, not a project dependency)
on the leader for ``--profile-seconds`` of the creation, on the restarts and on the broker,
writes the raw stacks to DIR and prints the functions that take most samples.

The machine's load average is printed with every figure: other work may share the cores.

Usage: .venv/bin/python scripts/bench/scale.py [--topics 100000] [--partitions 10] [--rf 3]
    [--brokers 100] [--batch N] [--inflight 2] [--snapshot-bytes 20971520] [--controllers 3]
    [--controller-config KEY=VALUE ...] [--broker-wipe] [--profile DIR] [--dir DIR | --keep]
The full run takes about 13 minutes on 2 cores. Small run for development (about a minute):
    .venv/bin/python scripts/bench/scale.py --topics 2000 --brokers 30 --snapshot-bytes 500000
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import datetime
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc

from quorum.admin import (
    AdminClient,
    AdminError,
    InvalidReplicationFactorError,
    NewTopic,
    TopicCollection,
    TopicExistsError,
)
from quorum.harness import (
    ConcurrentFakeBrokers,
    ControllerProcess,
    ProcessCluster,
    process_cluster,
    wait_until,
)
from quorum.harness import cpu_seconds as harness_cpu_seconds
from quorum.limits import (
    CREATE_TOPICS_REPLICAS_MAX,
    CREATE_TOPICS_TOPICS_MAX,
    RECORDS_PER_BATCH_MAX,
)
from quorum.rpc.v1 import admin_pb2, admin_pb2_grpc

REPO = Path(__file__).resolve().parents[2]

MiB = 1024 * 1024
GiB = 1024 * MiB
REAL_BROKER = 101
FAKE_BROKER_BASE = 1001
AWAY_TOPICS = 10
TARGETS = {"rss": 2 * GiB, "snapshot_s": 10.0, "restart_s": 15.0, "broker_s": 20.0}
PY_SPY = REPO / ".venv" / "bin" / "py-spy"


# ----- small measurements ---------------------------------------------------------------------


def load_avg() -> str:
    one, five, _ = os.getloadavg()
    return f"load {one:.2f}/{five:.2f}"


def proc_status(pid: int) -> dict[str, int]:
    """VmRSS and VmHWM (peak RSS) of a process, in bytes."""
    out: dict[str, int] = {}
    with contextlib.suppress(OSError):
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            key, _, value = line.partition(":")
            if key in ("VmRSS", "VmHWM"):
                out[key] = int(value.split()[0]) * 1024
    return out


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds the process has used so far (0 once it is gone)."""
    try:
        return harness_cpu_seconds(pid)
    except OSError:
        return 0.0


def mib(value: float) -> str:
    return f"{value / MiB:,.1f} MiB"


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


def verdict(value: float, target: float) -> str:
    return "MET" if value <= target else "MISSED"


def pid_of(node: ControllerProcess) -> int:
    assert node.process is not None
    return node.process.pid


def rss_line(node: ControllerProcess) -> str:
    status = proc_status(pid_of(node))
    return f"VmRSS {mib(status.get('VmRSS', 0))}, VmHWM {mib(status.get('VmHWM', 0))}"


def dir_sizes(directory: Path) -> dict[str, int]:
    """Bytes by kind of file in a metadata log directory."""
    sizes: dict[str, int] = collections.Counter()
    if directory.exists():
        for entry in directory.iterdir():
            kind = entry.suffix.lstrip(".") or entry.name
            with contextlib.suppress(OSError):
                sizes[kind] += entry.stat().st_size
    return dict(sizes)


def sizes_line(directory: Path) -> str:
    sizes = dir_sizes(directory)
    checkpoints = sorted(p.name for p in directory.glob("*.checkpoint"))
    parts = [f"{kind} {mib(size)}" for kind, size in sorted(sizes.items()) if size]
    return f"{', '.join(parts)}; snapshots {checkpoints}"


# ----- node logs --------------------------------------------------------------------------------


def parse_ts(value: str) -> float:
    return datetime.datetime.fromisoformat(value).timestamp()


def events_since(node: ControllerProcess, mark: int) -> list[dict[str, Any]]:
    """JSON log events written after byte ``mark`` of the node's log file."""
    try:
        with node.log_path.open("rb") as handle:
            handle.seek(mark)
            data = handle.read()
    except OSError:
        return []
    events = []
    for line in data.decode(errors="replace").splitlines():
        if line.startswith("{"):
            with contextlib.suppress(ValueError):
                events.append(json.loads(line))
    return events


def log_mark(node: ControllerProcess) -> int:
    return node.log_path.stat().st_size if node.log_path.exists() else 0


def find_event(
    node: ControllerProcess, mark: int, name: str, where: Callable[[dict[str, Any]], bool]
) -> dict[str, Any] | None:
    for event in events_since(node, mark):
        if event.get("event") == name and where(event):
            return event
    return None


def timeline(
    node: ControllerProcess, mark: int, wall_start: float, names: tuple[str, ...]
) -> list[str]:
    """The first occurrence of each of ``names`` after ``mark``, as seconds after start."""
    seen: dict[str, float] = {}
    details: dict[str, str] = {}
    for event in events_since(node, mark):
        name = event.get("event", "")
        if name in names and name not in seen and "timestamp" in event:
            seen[name] = parse_ts(event["timestamp"]) - wall_start
            extra = {
                k: v
                for k, v in event.items()
                if k
                in (
                    "end_offset",
                    "topics",
                    "log_batches_after",
                    "size_bytes",
                    "records",
                    "seconds",
                    "created",
                    "moved_aside",
                    "deleted",
                    "partitions",
                    "mode",
                    "applied_offset",
                )
            }
            details[name] = " ".join(f"{k}={v}" for k, v in extra.items())
    return [
        f"      +{at:7.2f} s  {name} {details[name]}"
        for name, at in sorted(seen.items(), key=lambda item: item[1])
    ]


# ----- py-spy ---------------------------------------------------------------------------------


@dataclass
class Profiler:
    """``py-spy record`` of one process into DIR/NAME.txt (raw collapsed stacks)."""

    directory: Path | None
    rate_hz: int = 50
    running: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)

    def start(self, name: str, pid: int, seconds: float | None = None) -> None:
        if self.directory is None:
            return
        command = [str(PY_SPY), "record", "-p", str(pid), "-r", str(self.rate_hz), "-f", "raw"]
        command += ["-o", str(self.directory / f"{name}.txt"), "--nonblocking"]
        if seconds is not None:
            command += ["-d", str(int(seconds))]
        self.running[name] = subprocess.Popen(
            command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )

    def stop(self, name: str, top: int = 14) -> None:
        process = self.running.pop(name, None)
        if process is None or self.directory is None:
            return
        if process.poll() is None:
            process.send_signal(signal.SIGINT)  # py-spy writes its output on Ctrl-C
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(timeout=60)
        path = self.directory / f"{name}.txt"
        if not path.exists():
            print(f"    py-spy {name}: no output")
            return
        for line in summarize_stacks(path, top):
            print(line)


def summarize_stacks(path: Path, top: int) -> list[str]:
    inclusive: collections.Counter[str] = collections.Counter()
    own: collections.Counter[str] = collections.Counter()
    total = 0
    for line in path.read_text(errors="replace").splitlines():
        stack, _, count_text = line.rpartition(" ")
        if not stack or not count_text.isdigit():
            continue
        count = int(count_text)
        total += count
        frames = [shorten(f) for f in stack.split(";")]
        for frame in set(frames):
            inclusive[frame] += count
        own[frames[-1]] += count
    if not total:
        return [f"    py-spy {path.name}: no samples"]
    ours = [
        (frame, n)
        for frame, n in inclusive.most_common()
        if ("quorum/" in frame or "broker/" in frame) and n < total
    ]
    lines = [f"    py-spy {path.name}: {total} samples; inclusive (project code):"]
    lines += [f"      {100 * n / total:5.1f} %  {frame}" for frame, n in ours[:top]]
    lines.append("    self (any code):")
    lines += [f"      {100 * n / total:5.1f} %  {frame}" for frame, n in own.most_common(top)]
    return lines


def shorten(frame: str) -> str:
    """``f (/long/path/quorum/x.py:12)`` -> ``f (quorum/x.py)``: one entry per function."""
    name, _, where = frame.partition(" (")
    where = where.rstrip(")").rsplit(":", 1)[0]
    for anchor in ("/quorum/", "/broker/", "/site-packages/", "/lib/python3"):
        if anchor in where:
            where = anchor.strip("/") + "/" + where.split(anchor, 1)[1]
            break
    return f"{name} ({where})"


# ----- cluster steps --------------------------------------------------------------------------


def bootstrap(cluster: ProcessCluster) -> str:
    return ",".join(cluster.nodes[n].address for n in cluster.controller_ids)


def serving_at(cluster: ProcessCluster, address: str, offset: int, timeout_s: float = 2.0) -> bool:
    """The node answers a read that needs every record up to ``offset`` applied."""
    with cluster.channel(address) as channel:
        stub = admin_pb2_grpc.AdminServiceStub(channel)
        answer = stub.DescribeCluster(
            admin_pb2.DescribeClusterRequest(min_metadata_offset=offset), timeout=timeout_s
        )
    return bool(answer.error_code == 0)


def committed_offset(cluster: ProcessCluster) -> tuple[int, int]:
    """(leader id, last committed offset) as the leader reports it."""
    leader, _, high_watermark = cluster.wait_for_leader(60)
    return leader, high_watermark - 1


def broker_fenced(admin: AdminClient, broker_id: int) -> bool | None:
    for broker in admin.describe_cluster().brokers:
        if broker.broker_id == broker_id:
            return broker.is_fenced
    return None


@dataclass
class CreateStats:
    seconds: float = 0.0
    latencies: list[float] = field(default_factory=list)
    last_offset: int = -1
    already_existed: int = 0
    call_failures: list[str] = field(default_factory=list)
    refused_replication: int = 0


@dataclass
class ChunkOutcome:
    metadata_offset: int
    already_existed: int


def create_chunk(
    admin: AdminClient,
    chunk: list[str],
    args: argparse.Namespace,
    stats: CreateStats,
    lock: threading.Lock,
) -> ChunkOutcome:
    """One CreateTopics, made to succeed: a call that fails as a whole (the AdminClient gave
    up: timeout, or a gRPC status it does not retry, e.g. CANCELLED during a leader change) is
    sent again; topics refused with INVALID_REPLICATION_FACTOR (too few unfenced brokers:
    test brokers were fenced) are sent again after a second. Both are counted and reported.
    Topics a retried call had created come back as TOPIC_ALREADY_EXISTS."""
    remaining = list(chunk)
    offset = -1
    existed = 0
    failed_calls = 0
    for _ in range(120):
        try:
            result = admin.create_topics([NewTopic(n, args.partitions, args.rf) for n in remaining])
        except AdminError as exc:
            with lock:
                stats.call_failures.append(f"{type(exc).__name__}: {str(exc)[:160]}")
            failed_calls += 1
            if failed_calls > 10:
                raise
            time.sleep(1)
            continue
        offset = max(offset, result.metadata_offset)
        again = []
        for name, error in result.errors().items():
            if isinstance(error, TopicExistsError):
                existed += 1
            elif isinstance(error, InvalidReplicationFactorError):
                again.append(name)
            else:
                raise SystemExit(f"creating {name} failed: {error}")
        if not again:
            return ChunkOutcome(offset, existed)
        with lock:
            stats.refused_replication += len(again)
        remaining = again
        time.sleep(1)
    raise SystemExit(f"could not create {remaining[:3]}... in 120 attempts")


def create_all(
    cluster: ProcessCluster, args: argparse.Namespace, batch: int, profiler: Profiler
) -> CreateStats:
    names = [f"scale-{i:07d}" for i in range(args.topics)]
    chunks = iter([names[i : i + batch] for i in range(0, len(names), batch)])
    total_chunks = -(-len(names) // batch)
    lock = threading.Lock()
    stats = CreateStats()
    done = [0]
    started = time.perf_counter()
    leader_id, _ = committed_offset(cluster)
    leader = cluster.nodes[leader_id]
    cpu_before = {n: cpu_seconds(pid_of(cluster.nodes[n])) for n in cluster.controller_ids}
    report_every = max(1, total_chunks // 10)
    profile_at = max(1, total_chunks // 5)

    def worker() -> None:
        with cluster.admin(bootstrap(cluster), timeout_s=300) as admin:
            while True:
                with lock:
                    chunk = next(chunks, None)
                if chunk is None:
                    return
                sent = time.perf_counter()
                outcome = create_chunk(admin, chunk, args, stats, lock)
                took = time.perf_counter() - sent
                with lock:
                    stats.latencies.append(took)
                    stats.last_offset = max(stats.last_offset, outcome.metadata_offset)
                    stats.already_existed += outcome.already_existed
                    done[0] += 1
                    count = done[0]
                if count == profile_at:
                    profiler.start("create-leader", pid_of(leader), args.profile_seconds)
                if count % report_every == 0 or count == total_chunks:
                    elapsed = time.perf_counter() - started
                    topics = min(len(names), count * batch)
                    print(
                        f"    {topics:>9,} topics in {elapsed:7.1f} s "
                        f"({topics / elapsed:,.0f} topics/s), leader {rss_line(leader)}, "
                        f"{load_avg()}",
                        flush=True,
                    )

    with ThreadPoolExecutor(args.inflight) as pool:
        futures = [pool.submit(worker) for _ in range(args.inflight)]
        for future in futures:
            future.result()
    stats.seconds = time.perf_counter() - started
    cpu = {n: cpu_seconds(pid_of(cluster.nodes[n])) - cpu_before[n] for n in cluster.controller_ids}
    print(
        "    controller CPU seconds during creation: "
        + ", ".join(f"{n}{' (leader)' if n == leader_id else ''} {s:.1f} s" for n, s in cpu.items())
        + f" over {stats.seconds:.1f} s of wall time"
    )
    profiler.stop("create-leader")
    return stats


def snapshot_events(node: ControllerProcess) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    """(snapshot_written, snapshot_taken) pairs of a node's whole log."""
    written: dict[int, dict[str, Any]] = {}
    pairs = []
    for event in events_since(node, 0):
        if event.get("event") == "snapshot_written":
            written[event["end_offset"]] = event
        elif event.get("event") == "snapshot_taken" and event["end_offset"] in written:
            pairs.append((written[event["end_offset"]], event))
    return pairs


def log_marks(cluster: ProcessCluster) -> dict[int, int]:
    return {n: log_mark(cluster.nodes[n]) for n in cluster.controller_ids}


def churn_since(cluster: ProcessCluster, marks: dict[int, int]) -> str:
    """Quorum turbulence in the controllers' logs since ``marks``: elections won, check-quorum
    failures, follower fetch timeouts, brokers fenced, uncommitted offsets truncated away."""
    elections = check_quorum = fetch_timeouts = thrown_away = 0
    fenced: list[str] = []
    for node_id, mark in marks.items():
        for event in events_since(cluster.nodes[node_id], mark):
            name = event.get("event")
            if name == "became_leader":
                elections += 1
            elif name == "check_quorum_failed":
                check_quorum += 1
            elif name == "became_prospective" and event.get("reason") == "fetch timeout":
                fetch_timeouts += 1
            elif name == "log_truncated":
                thrown_away += event["log_end_offset_before"] - event["log_end_offset"]
            elif name == "brokers_fenced":
                fenced.append(f"{len(event['broker_ids'])} by {node_id} at {event['timestamp']}")
    return (
        f"elections won {elections}, check-quorum failures {check_quorum}, follower fetch "
        f"timeouts {fetch_timeouts}, uncommitted offsets truncated {thrown_away:,}, "
        f"brokers fenced: {'; '.join(fenced) or 'none'}"
    )


class LoopProbe:
    """How long each controller's event loop goes without answering: a gRPC health Check
    every 0.25 s per controller (the health service runs on the same asyncio loop as the Raft
    driver, so its latency is the longest synchronous stretch of that loop, plus scheduling)."""

    def __init__(self, cluster: ProcessCluster) -> None:
        self.cluster = cluster
        self.samples: dict[int, list[tuple[float, float]]] = {n: [] for n in cluster.controller_ids}
        self._stop = threading.Event()
        self._threads = [
            threading.Thread(target=self._probe, args=(n,), daemon=True)
            for n in cluster.controller_ids
        ]

    def start(self) -> LoopProbe:
        for thread in self._threads:
            thread.start()
        return self

    def _probe(self, node_id: int) -> None:
        from grpc_health.v1 import health_pb2, health_pb2_grpc  # noqa: PLC0415

        node = self.cluster.nodes[node_id]
        channel: grpc.Channel | None = None
        while not self._stop.wait(0.25):
            if not node.alive:
                continue
            if channel is None:
                channel = self.cluster.channel(node.address)
            sent = time.perf_counter()
            try:
                health_pb2_grpc.HealthStub(channel).Check(
                    health_pb2.HealthCheckRequest(), timeout=120
                )
            except grpc.RpcError:
                channel.close()
                channel = None
                continue
            self.samples[node_id].append((sent, time.perf_counter() - sent))

    def summary(self, since: float) -> str:
        parts = []
        for node_id, samples in self.samples.items():
            recent = [took for at, took in list(samples) if at >= since]
            if not recent:
                continue
            parts.append(
                f"{node_id}: max {max(recent):.2f} s, {sum(t > 2 for t in recent)} over 2 s"
            )
        return "; ".join(parts)

    def stop(self) -> None:
        self._stop.set()


def wait_stable(
    cluster: ProcessCluster, fakes: ConcurrentFakeBrokers, quiet_s: float, timeout_s: float
) -> float | None:
    """Wait until one leader has kept its epoch for ``quiet_s`` and every test broker is
    unfenced; returns how long that took, or None if that did not happen within
    ``timeout_s`` (the run goes on, and says so)."""
    started = time.perf_counter()
    since = time.perf_counter()
    last: tuple[int, int] | None = None
    deadline = started + timeout_s
    while time.perf_counter() < deadline:
        leader = cluster.leader()
        current = (leader[0], leader[1]) if leader else None
        if current != last or current is None:
            last, since = current, time.perf_counter()
        elif time.perf_counter() - since >= quiet_s and fakes.heartbeat_all():
            return time.perf_counter() - started
        time.sleep(0.5)
    return None


@dataclass
class Restart:
    node_id: int
    seconds: float
    shutdown_s: float
    target_offset: int
    loaded: dict[str, Any] | None
    cpu_s: float
    lines: list[str]


RESTART_EVENTS = (
    "snapshot_loaded",
    "controller_loaded",
    "listening",
    "became_follower",
    "transition",
    "snapshot_written",
    "snapshot_taken",
)


def restart_controller(
    cluster: ProcessCluster,
    node_id: int,
    profiler: Profiler,
    label: str,
    *extra: str,
) -> Restart:
    """SIGTERM ``node_id``, start it again; time process start -> serving reads at the
    leader's committed offset of the moment it was stopped."""
    node = cluster.nodes[node_id]
    _, target = committed_offset(cluster)
    stopping = time.perf_counter()
    cluster.kill(node_id, signal.SIGTERM, timeout_s=60)
    shutdown_s = time.perf_counter() - stopping
    mark = log_mark(node)
    wall_start = time.time()
    started = time.perf_counter()
    cluster.start(node_id, *extra)
    profiler.start(label, pid_of(node))
    wait_until(lambda: serving_at(cluster, node.address, target), 600, f"{label} serving", 0.05)
    seconds = time.perf_counter() - started
    cpu_s = cpu_seconds(pid_of(node))
    profiler.stop(label)
    loaded = find_event(node, mark, "snapshot_loaded", lambda e: True)
    return Restart(
        node_id,
        seconds,
        shutdown_s,
        target,
        loaded,
        cpu_s,
        timeline(node, mark, wall_start, RESTART_EVENTS),
    )


def print_restart(title: str, restart: Restart, node: ControllerProcess) -> None:
    loaded = restart.loaded or {}
    print(
        f"  {title}: controller {restart.node_id} process start -> serving reads at offset "
        f"{restart.target_offset}: {restart.seconds:.2f} s  (CPU {restart.cpu_s:.1f} s; "
        f"{rss_line(node)}; SIGTERM -> exit took {restart.shutdown_s:.2f} s; {load_avg()})"
    )
    print(
        f"    loaded snapshot end_offset={loaded.get('end_offset')} "
        f"topics={loaded.get('topics')} log batches after it={loaded.get('log_batches_after')}"
    )
    for line in restart.lines:
        print(line)


def full_snapshot_and_restart(
    cluster: ProcessCluster,
    follower: int,
    role: str,
    profiler: Profiler,
    args: argparse.Namespace,
) -> tuple[dict[str, Any], dict[str, Any], Restart, Restart]:
    """(b) then (c) on one controller: restarted with a short snapshot interval it snapshots
    the full image; restarted plainly it loads that snapshot."""
    partitions = args.topics * args.partitions
    node = cluster.nodes[follower]
    print(f"3. (b) full-image snapshot on controller {follower} ({role})", flush=True)
    mark = log_mark(node)
    first = restart_controller(
        cluster,
        follower,
        profiler,
        f"restart-older-snapshot-{follower}",
        "--override",
        f"metadata.log.max.snapshot.interval.ms={args.full_snapshot_after_ms}",
    )
    print_restart("restart from the older snapshot + log", first, node)
    target = first.target_offset
    profiler.start(f"snapshot-write-{follower}", pid_of(node))
    event = wait_until(
        lambda: find_event(node, mark, "snapshot_taken", lambda e: e["end_offset"] > target),
        600,
        f"a full snapshot on {follower}",
        0.1,
    )
    profiler.stop(f"snapshot-write-{follower}")
    end = int(event["end_offset"])
    written = find_event(node, mark, "snapshot_written", lambda e: bool(e["end_offset"] == end))
    assert written is not None
    print(
        f"  snapshot of the full image: end_offset {written['end_offset']}, "
        f"{written['records']:,} records, {mib(written['size_bytes'])} "
        f"({written['size_bytes'] / partitions:.0f} bytes per partition), written "
        f"in {event['seconds']:.2f} s  ({rss_line(node)}; {load_avg()})"
    )
    print(f"4. (c) restart of controller {follower} from its full snapshot")
    restart = restart_controller(cluster, follower, profiler, f"restart-full-snapshot-{follower}")
    print_restart("restart from the full snapshot", restart, node)
    print(f"  metadata dir: {sizes_line(node.metadata_dir)}")
    return written, event, first, restart


# ----- the run --------------------------------------------------------------------------------


def default_batch(partitions: int, rf: int) -> int:
    return min(
        CREATE_TOPICS_TOPICS_MAX,
        RECORDS_PER_BATCH_MAX // (partitions + 1),
        CREATE_TOPICS_REPLICAS_MAX // (partitions * rf),
    )


def set_up_away_broker(cluster: ProcessCluster, admin: AdminClient) -> None:
    """Broker 101 gets the away-* topics, leaves, is fenced; half of them are deleted."""
    broker = cluster.nodes[REAL_BROKER]
    cluster.start(REAL_BROKER)
    wait_until(lambda: broker_fenced(admin, REAL_BROKER) is False, 60, "broker 101 unfenced")
    others = [FAKE_BROKER_BASE, FAKE_BROKER_BASE + 1]
    admin.create_topics(
        [
            NewTopic(f"away-{i}", replica_assignments={0: [REAL_BROKER, *others]})
            for i in range(AWAY_TOPICS)
        ]
    ).all()
    expected = {f"away-{i}-0" for i in range(AWAY_TOPICS)}
    wait_until(
        lambda: expected <= {p.name for p in broker.log_dir.iterdir()},
        60,
        "broker 101 creating its away-* partitions",
    )
    cluster.kill(REAL_BROKER, signal.SIGTERM, timeout_s=60)
    wait_until(lambda: broker_fenced(admin, REAL_BROKER), 60, "broker 101 fenced", 0.2)
    admin.delete_topics(
        TopicCollection.of_topic_names([f"away-{i}" for i in range(AWAY_TOPICS // 2)])
    ).all()


def broker_comes_back(
    cluster: ProcessCluster, args: argparse.Namespace, profiler: Profiler
) -> tuple[float, list[str], dict[str, Any]]:
    broker = cluster.nodes[REAL_BROKER]
    if args.broker_wipe:
        shutil.rmtree(broker.metadata_dir)
    mark = log_mark(broker)
    wall_start = time.time()
    started = time.perf_counter()
    cluster.start(REAL_BROKER)
    profiler.start("broker-return", pid_of(broker))

    def reconciled() -> dict[str, Any] | None:
        return find_event(broker, mark, "reconciled", lambda e: e.get("mode") == "FULL")

    event = wait_until(reconciled, 600, "broker 101 reconciled FULL", 0.05)
    seconds = time.perf_counter() - started
    profiler.stop("broker-return")
    names = (
        "log_dirs_scanned",
        "listening",
        "snapshot_downloaded",
        "snapshot_installed",
        "log_truncated_fully",
        "registered",
        "caught_up",
        "reconciled",
        "unfenced",
    )
    return seconds, timeline(broker, mark, wall_start, names), event


def run(args: argparse.Namespace, root: Path) -> None:
    batch = args.batch or default_batch(args.partitions, args.rf)
    partitions = args.topics * args.partitions
    profiler = Profiler(Path(args.profile) if args.profile else None)
    if profiler.directory is not None:
        profiler.directory.mkdir(parents=True, exist_ok=True)
    settings: dict[str, Any] = {
        "metadata.log.max.record.bytes.between.snapshots": args.snapshot_bytes
    }
    for item in args.controller_config:
        key, _, value = item.partition("=")
        try:
            settings[key] = json.loads(value)
        except ValueError:
            settings[key] = value
    print(
        f"machine: {os.cpu_count()} cores; python {sys.version.split()[0]}; {load_avg()}\n"
        f"run: {args.topics:,} topics x {args.partitions} partitions = {partitions:,} partitions,"
        f" RF {args.rf}, {args.brokers} test brokers, {batch} topics per CreateTopics, "
        f"{args.inflight} in flight; controller settings {settings}; data in {root}",
        flush=True,
    )
    with process_cluster(root, brokers=1, settings=settings) as cluster:
        cluster.format()
        for node_id in cluster.controller_ids:
            cluster.start(node_id)
        cluster.wait_for_leader(60)
        fakes = ConcurrentFakeBrokers(
            cluster, list(range(FAKE_BROKER_BASE, FAKE_BROKER_BASE + args.brokers))
        )
        admin = cluster.admin(bootstrap(cluster), timeout_s=120)
        probe = LoopProbe(cluster).start()
        try:
            fakes.register()
            wait_until(fakes.heartbeat_all, 60, "every test broker unfenced")
            set_up_away_broker(cluster, admin)
            print(f"set-up done: {args.brokers} test brokers, broker 101 away; {load_avg()}")

            # 1. creation -----------------------------------------------------------------
            print("1. creation", flush=True)
            marks = log_marks(cluster)
            phase = time.perf_counter()
            stats = create_all(cluster, args, batch, profiler)
            lat = stats.latencies
            print(
                f"  created {args.topics:,} topics ({partitions:,} partitions) in "
                f"{stats.seconds:.1f} s: {args.topics / stats.seconds:,.0f} topics/s, "
                f"{partitions / stats.seconds:,.0f} partitions/s; per request of {batch}: "
                f"p50 {statistics.median(lat):.2f} s, p99 {percentile(lat, 0.99):.2f} s, "
                f"max {max(lat):.2f} s; last offset {stats.last_offset}"
                + (
                    f"; {stats.already_existed} topics answered TOPIC_ALREADY_EXISTS (a "
                    "retried request had created them)"
                    if stats.already_existed
                    else ""
                )
            )
            if stats.refused_replication:
                print(
                    f"  topics refused INVALID_REPLICATION_FACTOR (test brokers fenced) and "
                    f"sent again: {stats.refused_replication:,}"
                )
            if stats.call_failures:
                print(
                    f"  CreateTopics calls that failed as a whole and were sent again: "
                    f"{len(stats.call_failures)}: {stats.call_failures}"
                )
            print(
                f"  test-broker heartbeats: {fakes.rounds} rounds, slowest "
                f"{fakes.slowest_round_s:.2f} s, {fakes.failed_rounds} failed"
            )
            for node_id in cluster.controller_ids:
                node = cluster.nodes[node_id]
                wait_until(
                    lambda n=node: serving_at(cluster, n.address, stats.last_offset, 10),  # type: ignore[misc]
                    300,
                    f"controller {node_id} applying the last offset",
                    0.2,
                )
            print(f"  quorum during creation: {churn_since(cluster, marks)}")
            print(f"  controller event-loop stalls during creation: {probe.summary(phase)}")

            # 2. (a) RSS ------------------------------------------------------------------
            leader_id, committed = committed_offset(cluster)
            print(f"2. (a) controller memory with the full image ({load_avg()})")
            rss = {}
            for node_id in cluster.controller_ids:
                node = cluster.nodes[node_id]
                rss[node_id] = proc_status(pid_of(node))
                role = "leader" if node_id == leader_id else "follower"
                print(f"  controller {node_id} ({role}): {rss_line(node)}")
            print("  snapshots the controllers took on their own during creation:")
            for node_id in cluster.controller_ids:
                pairs = snapshot_events(cluster.nodes[node_id])
                summary = ", ".join(
                    f"@{w['end_offset']} {mib(w['size_bytes'])} {t['seconds']:.2f} s"
                    for w, t in pairs
                )
                print(f"    controller {node_id}: {len(pairs)}: {summary or '-'}")
            print(f"  leader's metadata dir: {sizes_line(cluster.nodes[leader_id].metadata_dir)}")

            # 3./4. (b) full snapshot, (c) restart from it, on every controller -----------
            # The leader goes last: SIGTERM makes it resign, so afterwards every controller,
            # whichever leads, holds a snapshot of the full image (the one (d) downloads).
            order = [n for n in cluster.controller_ids if n != leader_id] + [leader_id]
            full: list[tuple[dict[str, Any], dict[str, Any]]] = []
            restarts: list[Restart] = []
            older: list[Restart] = []
            marks = log_marks(cluster)
            phase = time.perf_counter()
            for node_id in order[: args.controllers]:
                role = "the leader, which resigns" if node_id == leader_id else "a follower"
                written, event, first, restart = full_snapshot_and_restart(
                    cluster, node_id, role, profiler, args
                )
                full.append((written, event))
                older.append(first)
                restarts.append(restart)
            print(f"  quorum during the restarts: {churn_since(cluster, marks)}")
            print(f"  event-loop stalls meanwhile: {probe.summary(phase)}")
            settle_marks, settle_started = log_marks(cluster), time.perf_counter()
            settled = wait_stable(cluster, fakes, args.settle_s, args.settle_timeout_s)
            leader_now = committed_offset(cluster)[0]
            if settled is None:
                print(
                    f"  WARNING: NOT settled within {args.settle_timeout_s:.0f} s (no leader "
                    f"kept its epoch for {args.settle_s:.0f} s with every test broker unfenced); "
                    f"(d) runs anyway; leader now {leader_now}"
                )
            else:
                print(
                    f"  settled (one leader for {args.settle_s:.0f} s, every test broker "
                    f"unfenced) {settled:.1f} s after the last restart; leader now {leader_now}"
                )
            print(f"  quorum while settling: {churn_since(cluster, settle_marks)}")
            print(f"  event-loop stalls meanwhile: {probe.summary(settle_started)}")

            # 6. (d) the broker that was away ---------------------------------------------
            marks = log_marks(cluster)
            phase = time.perf_counter()
            print(
                "6. (d) broker 101 returns "
                + ("with an empty metadata dir" if args.broker_wipe else "with its old log")
            )
            seconds, lines, event = broker_comes_back(cluster, args, profiler)
            broker = cluster.nodes[REAL_BROKER]
            kept = sorted(p.name for p in broker.log_dir.iterdir() if p.name.startswith("away"))
            print(
                f"  broker 101 process start -> reconciled FULL: {seconds:.2f} s "
                f"({rss_line(broker)}; CPU {cpu_seconds(pid_of(broker)):.1f} s; {load_avg()})"
            )
            for line in lines:
                print(line)
            print(
                f"  its partition dirs afterwards: {kept}; deleting/: "
                f"{sorted(p.name for p in (broker.log_dir / 'deleting').glob('*'))}"
            )
            print(f"  its metadata dir: {sizes_line(broker.metadata_dir)}")
            print(f"  quorum meanwhile: {churn_since(cluster, marks)}")
            print(f"  event-loop stalls meanwhile: {probe.summary(phase)}")
            leader_now, _ = committed_offset(cluster)
            for node_id in cluster.controller_ids:
                print(
                    f"  controller {node_id}"
                    f"{' (leader)' if node_id == leader_now else ''} metadata dir: "
                    f"{sizes_line(cluster.nodes[node_id].metadata_dir)}"
                )

            # summary ---------------------------------------------------------------------
            print_summary(args, stats, rss, full, restarts, older, seconds, committed)
        finally:
            probe.stop()
            admin.close()
            fakes.stop()


def print_summary(
    args: argparse.Namespace,
    stats: CreateStats,
    rss: dict[int, dict[str, int]],
    full: list[tuple[dict[str, Any], dict[str, Any]]],
    restarts: list[Restart],
    older: list[Restart],
    broker_s: float,
    committed: int,
) -> None:
    partitions = args.topics * args.partitions
    peak = max(s.get("VmHWM", 0) for s in rss.values())
    now = max(s.get("VmRSS", 0) for s in rss.values())
    write_s = max(t["seconds"] for _, t in full)
    size = max(w["size_bytes"] for w, _ in full)
    restart_s = max(r.seconds for r in restarts)
    print(
        f"\n== figures: {args.topics:,} topics x {args.partitions} = {partitions:,} partitions, "
        f"RF {args.rf}, {args.brokers} test brokers; metadata log up to offset {committed} "
        f"({load_avg()}) =="
    )
    print(
        f"create: {args.topics / stats.seconds:,.0f} topics/s "
        f"({partitions / stats.seconds:,.0f} partitions/s), {stats.seconds:.1f} s in all"
    )
    print(
        f"(a) controller RSS with the full image: max VmRSS {mib(now)}, max VmHWM "
        f"{mib(peak)}  (target <= 2 GiB: {verdict(peak, TARGETS['rss'])})"
    )
    print(
        f"(b) full-image snapshot: {mib(size)} ({size / partitions:.0f} bytes/partition), "
        f"written in {write_s:.2f} s (slowest of {len(full)})  "
        f"(target <= 10 s: {verdict(write_s, TARGETS['snapshot_s'])})"
    )
    print(
        f"(c) controller restart from the full snapshot to serving: {restart_s:.2f} s "
        f"(slowest of {len(restarts)}; from an older snapshot + up to "
        f"{mib(args.snapshot_bytes)} of log: {', '.join(f'{r.seconds:.2f}' for r in older)} s)"
        f"  (target <= 15 s: "
        f"{verdict(restart_s, TARGETS['restart_s'])})"
    )
    print(
        f"(d) broker away -> FetchSnapshot -> reconciled FULL: {broker_s:.2f} s  "
        f"(target <= 20 s: {verdict(broker_s, TARGETS['broker_s'])})"
    )


@contextlib.contextmanager
def run_dir(path: str | None, keep: bool) -> Iterator[Path]:
    if path:
        root = Path(path)
        root.mkdir(parents=True, exist_ok=True)
        yield root
        return
    root = Path(tempfile.mkdtemp(prefix="mq-scale-"))
    try:
        yield root
    finally:
        if keep:
            print(f"kept {root}")
        else:
            shutil.rmtree(root, ignore_errors=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--topics", type=int, default=100_000)
    parser.add_argument("--partitions", type=int, default=10)
    parser.add_argument("--rf", type=int, default=3)
    parser.add_argument("--brokers", type=int, default=100, help="test brokers for placement")
    parser.add_argument("--batch", type=int, default=0, help="topics per CreateTopics")
    parser.add_argument("--inflight", type=int, default=2, help="CreateTopics at a time")
    parser.add_argument("--snapshot-bytes", type=int, default=20 * MiB)
    parser.add_argument("--full-snapshot-after-ms", type=int, default=5_000)
    parser.add_argument("--settle-s", type=float, default=10, help="quiet time before (d)")
    parser.add_argument("--settle-timeout-s", type=float, default=300)
    parser.add_argument(
        "--controller-config",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="extra controller setting (diagnostics; default: Kafka's defaults)",
    )
    parser.add_argument("--controllers", type=int, default=3, help="(b)/(c) on this many")
    parser.add_argument("--broker-wipe", action="store_true", help="empty metadata dir")
    parser.add_argument("--profile", metavar="DIR", help="py-spy the processes into DIR")
    parser.add_argument("--profile-seconds", type=float, default=30)
    parser.add_argument("--dir", help="data directory (kept); default a temporary one")
    parser.add_argument("--keep", action="store_true", help="keep the temporary directory")
    args = parser.parse_args()
    if args.profile and not PY_SPY.exists():
        parser.error(f"--profile needs {PY_SPY}: .venv/bin/pip install py-spy")
    with run_dir(args.dir, args.keep) as root:
        run(args, root)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
