"""Prometheus metrics of a node (``metrics.listener``), named as Kafka's come out of the
Prometheus JMX exporter, so dashboards and alerts written for KRaft work unchanged
(docs/operating.md#metrics).

- ``kafka_server_raftmetrics_*``: Kafka's ``raft-metrics`` (every node).
- ``kafka_controller_kafkacontroller_*`` and ``kafka_controller_controllereventmanager_*``
  (controllers), ``kafka_server_brokermetadatametrics_*`` (brokers),
  ``kafka_server_snapshotemitter_*`` (every node).
- ``metaquorum_*``: this project's own, in Prometheus' conventions (base units, ``_total``).

Threads: the metrics listener (``MetricsHttpServer``) serves HTTP from a thread of its own, with
an event loop of its own; it answers ``GET /metrics`` (and ``HEAD``) and 404 to everything else,
gives each request ``METRICS_REQUEST_READ_MS_MAX`` to arrive and keeps at most
``METRICS_CONNECTIONS_MAX`` connections (docs/operating.md#the-metrics-listener). The
exposition is rendered in one more thread. A scrape never touches the Raft core from there: it
asks the event loop for one snapshot of plain values and immutable images (``LoopReader``: one
``call_soon_threadsafe`` callback of a few microseconds), then renders it, and counts
partitions from the immutable image, in the scrape thread. If the loop does not answer within
``SNAPSHOT_WAIT_S`` (it is busy), the scrape serves the previous snapshot and counts
``metaquorum_metrics_stale_snapshots_total``. The loop itself only updates a few numbers per
``Ready`` (``RaftMetrics.observe_ready``); counters and histograms of ``prometheus_client`` are
thread-safe.

Kafka's windowed statistics (``commit-latency-avg``, ``fetch-records-rate``, ...) are computed
as Kafka computes them: over ``metrics.num.samples`` (2) samples of ``metrics.sample.window.ms``
(30 s); with no sample in the window the value is NaN, as Kafka reports it.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import math
import threading
import time
from collections import deque
from collections.abc import Awaitable, Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

import grpc
from prometheus_client import CollectorRegistry, Counter, Histogram, disable_created_metrics
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    Metric,
    SummaryMetricFamily,
)
from prometheus_client.samples import Sample

from quorum.config import HostPort, NodeConfig
from quorum.errors import ErrorCode
from quorum.metadata.image import MetadataImage
from quorum.raft.node import RaftNode, Ready
from quorum.raft.state import election_state_of
from quorum.server.metrics_http import MetricsHttpServer
from quorum.server.raft_manager import RaftManager, StartupError
from quorum.server.security_metrics import read_security_events, security_families

# Kafka's metrics.sample.window.ms and metrics.num.samples defaults.
SAMPLE_WINDOW_MS: Final = 30_000
SAMPLES: Final = 2
# How long a scrape waits for the event loop's snapshot before serving the previous one.
SNAPSHOT_WAIT_S: Final = 1.0
# Batches appended but not committed yet, kept for commit-latency (the oldest are dropped).
APPENDED_BATCHES_MAX: Final = 10_000
# Samples an event-queue summary keeps (Yammer's histogram reservoir holds 1028).
RESERVOIR_SAMPLES_MAX: Final = 1028
# The quantiles Kafka's Yammer histograms publish (50thPercentile ... 999thPercentile).
QUANTILES: Final = (0.5, 0.75, 0.95, 0.98, 0.99, 0.999)
# Kafka's current-state values (KafkaRaftMetrics), one series each.
RAFT_STATES: Final = (
    "leader",
    "resigned",
    "candidate",
    "prospective",
    "voted",
    "unattached",
    "follower",
    "observer",
)
# Seconds: gRPC calls range from sub-millisecond reads to long-poll Fetches (500 ms).
LATENCY_BUCKETS_S: Final = (
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
)  # fmt: skip

ADMIN_SERVICE_PREFIX: Final = "/quorum.rpc.v1.AdminService/"


def wall_ms() -> int:
    return time.time_ns() // 1_000_000


# ----- Kafka's windowed statistics ----------------------------------------------------------


class WindowedStat:
    """Kafka's ``SampledStat``: values recorded into ``samples`` windows of ``window_ms``;
    ``avg``/``max`` over the live windows and ``rate_per_s`` (Kafka's ``Rate``: the total over
    the elapsed time, at least ``samples - 1`` full windows)."""

    def __init__(self, window_ms: int = SAMPLE_WINDOW_MS, samples: int = SAMPLES) -> None:
        assert window_ms > 0
        assert samples >= 2
        self.window_ms = window_ms
        self.samples = samples
        # [window start ms, count, total, max], oldest first
        self._windows: deque[list[float]] = deque()

    def _live(self, now_ms: int) -> list[list[float]]:
        horizon = now_ms - self.window_ms * self.samples
        while self._windows and self._windows[0][0] <= horizon:
            self._windows.popleft()
        return list(self._windows)

    def record(self, value: float, now_ms: int) -> None:
        windows = self._windows
        if not windows or now_ms - windows[-1][0] >= self.window_ms:
            windows.append([float(now_ms), 0.0, 0.0, -math.inf])
            if len(windows) > self.samples:
                windows.popleft()
        window = windows[-1]
        window[1] += 1
        window[2] += value
        window[3] = max(window[3], value)

    def avg(self, now_ms: int) -> float:
        windows = self._live(now_ms)
        count = sum(w[1] for w in windows)
        return sum(w[2] for w in windows) / count if count else math.nan

    def max(self, now_ms: int) -> float:
        windows = [w for w in self._live(now_ms) if w[1]]
        return max(w[3] for w in windows) if windows else math.nan

    def rate_per_s(self, now_ms: int) -> float:
        windows = self._live(now_ms)
        if not windows:
            return 0.0
        elapsed_ms = now_ms - windows[0][0]
        full_windows = int(elapsed_ms // self.window_ms)
        if full_windows < self.samples - 1:
            elapsed_ms += (self.samples - 1 - full_windows) * self.window_ms
        return sum(w[2] for w in windows) / (elapsed_ms / 1000)


@dataclass
class Reservoir:
    """The last ``RESERVOIR_SAMPLES_MAX`` values of a Kafka (Yammer) histogram, with the count
    and sum of every value ever recorded."""

    values: deque[float] = field(default_factory=lambda: deque(maxlen=RESERVOIR_SAMPLES_MAX))
    count: int = 0
    total: float = 0.0

    def record(self, value: float) -> None:
        self.values.append(value)
        self.count += 1
        self.total += value

    def snapshot(self) -> tuple[tuple[float, ...], int, float]:
        return tuple(self.values), self.count, self.total


def quantile(sorted_values: Sequence[float], q: float) -> float:
    """Yammer's ``Snapshot.getValue``: linear interpolation between the closest ranks."""
    if not sorted_values:
        return math.nan
    position = q * (len(sorted_values) + 1)
    if position < 1:
        return sorted_values[0]
    if position >= len(sorted_values):
        return sorted_values[-1]
    lower = sorted_values[int(position) - 1]
    upper = sorted_values[int(position)]
    return lower + (position - math.floor(position)) * (upper - lower)


def summary_family(
    name: str, documentation: str, sample: tuple[tuple[float, ...], int, float]
) -> SummaryMetricFamily:
    """A Kafka histogram as the JMX exporter shows it: ``name{quantile="0.99"}`` over the
    reservoir, ``name_count`` and ``name_sum`` over every value."""
    values, count, total = sample
    ordered = sorted(values)
    family = SummaryMetricFamily(name, documentation, labels=())
    for q in QUANTILES:
        family.samples.append(Sample(name, {"quantile": str(q)}, quantile(ordered, q)))
    family.samples.append(Sample(f"{name}_count", {}, float(count)))
    family.samples.append(Sample(f"{name}_sum", {}, total))
    return family


# ----- Raft: measured in the driver loop -----------------------------------------------------


def kafka_state(node: RaftNode) -> str:
    """Kafka's ``current-state`` of ``node``."""
    name: str = node.state.name
    if name == "follower":
        return "follower" if node.is_voter else "observer"
    if name == "unattached":
        if not node.is_voter:
            return "observer"
        voted = election_state_of(node.state, node.voters, node.node_id).voted_id
        return "voted" if voted is not None else "unattached"
    return name


class RaftMetrics:
    """Kafka's ``raft-metrics``, measured in the driver loop: ``observe_ready`` after every
    ``Ready`` (a few comparisons and appends), ``read`` when a scrape asks.

    - commit-latency: the leader's time from appending a batch to the high watermark passing it;
    - election-latency: from becoming prospective or candidate to knowing a leader;
    - append-records-rate (leader) and fetch-records-rate (followers and observers): records
      appended to the local log per second;
    - poll-idle-ratio-avg: the share of each loop turn spent waiting for work;
    - the last applied record's timestamp: when its batch reached this node's log. Kafka uses
      the batch's own timestamp (the leader's wall-clock append time, as batches here carry
      too); the local arrival time is read without decoding the batch and differs from it
      by the replication delay (the lag still grows when the node stops receiving the
      leader's NoOps, as Kafka's does).
    """

    def __init__(
        self,
        node: RaftNode,
        idle_s: Callable[[], float],
        unknown_voters: Callable[[], int] = lambda: 0,
    ) -> None:
        """``unknown_voters``: how many voters of the set in force this node has no address
        for (the shell's address book knows)."""
        self.node = node
        self._idle_s = idle_s
        self._unknown_voters = unknown_voters
        self.commit_latency_ms = WindowedStat()
        self.election_latency_ms = WindowedStat()
        self.append_records = WindowedStat()
        self.fetch_records = WindowedStat()
        self.poll_idle_ratio = WindowedStat()
        # (last offset, monotonic ms, wall ms, appended as leader) per uncommitted batch
        self._appended: deque[tuple[int, int, int, bool]] = deque(maxlen=APPENDED_BATCHES_MAX)
        self._election_started_ms: int | None = None
        self._last_turn_s = time.perf_counter()
        self._last_idle_s = idle_s()
        self.last_applied_offset = -1
        self.last_applied_wall_ms = 0

    def observe_ready(self, ready: Ready, now_ms: int) -> None:
        node = self.node
        leader = node.is_leader()
        for event in ready.events:  # transitions since the last Ready, in order
            if event.name in ("became_prospective", "became_candidate"):
                if self._election_started_ms is None:
                    self._election_started_ms = now_ms
            elif (
                event.name in ("became_leader", "became_follower")
                and self._election_started_ms is not None
            ):
                self.election_latency_ms.record(now_ms - self._election_started_ms, now_ms)
                self._election_started_ms = None

        wall = wall_ms()
        appended = self._appended
        if ready.truncate_to is not None:
            while appended and appended[-1][0] >= ready.truncate_to:
                appended.pop()
        records = 0
        for batch in ready.entries_to_append:
            appended.append((batch.last_offset, now_ms, wall, leader))
            records += batch.record_count
        if records:
            (self.append_records if leader else self.fetch_records).record(records, now_ms)

        arrived_wall: int | None = None
        high_watermark = ready.high_watermark
        while appended and appended[0][0] < high_watermark:
            _, appended_ms, arrived_wall, as_leader = appended.popleft()
            if as_leader and leader:
                self.commit_latency_ms.record(now_ms - appended_ms, now_ms)
        if ready.committed_batches:
            self.last_applied_offset = ready.committed_batches[-1].last_offset
            # Batches read from disk at start-up arrived now, as far as this process knows.
            self.last_applied_wall_ms = arrived_wall if arrived_wall is not None else wall

        turn_s = time.perf_counter()
        idle_s = self._idle_s()
        elapsed_s = turn_s - self._last_turn_s
        if elapsed_s > 0:
            ratio = min(1.0, max(0.0, (idle_s - self._last_idle_s) / elapsed_s))
            self.poll_idle_ratio.record(ratio, now_ms)
        self._last_turn_s, self._last_idle_s = turn_s, idle_s

    def read(self, now_ms: int) -> dict[str, float]:
        """Kafka's raft-metrics now (in the loop)."""
        node = self.node
        voted = election_state_of(node.state, node.voters, node.node_id).voted_id
        leader = node.leader_id
        leader_state = node.maybe_leader_state()
        latest_change = node.voter_history.latest_offset()
        return {
            "current_leader": -1 if leader is None else leader,
            "current_vote": -1 if voted is None or not node.is_voter else voted,
            "current_epoch": node.epoch,
            "high_watermark": node.high_watermark,
            "log_end_offset": node.log_end_offset,
            "log_end_epoch": node.log.last_fetched_epoch,
            "number_unknown_voter_connections": self._unknown_voters(),
            # KIP-853's: the voter set in force, the observers the leader tracks, and whether
            # a voter change is under way (the leader's pending AddRaftVoter or RemoveRaftVoter,
            # or a VotersRecord in this log not yet below the high watermark).
            "number_of_voters": len(node.voters),
            "number_of_observers": 0 if leader_state is None else len(leader_state.observers),
            "uncommitted_voter_change": int(
                (leader_state is not None and leader_state.voter_change is not None)
                or (latest_change is not None and latest_change >= node.high_watermark)
            ),
            "commit_latency_avg": self.commit_latency_ms.avg(now_ms),
            "commit_latency_max": self.commit_latency_ms.max(now_ms),
            "election_latency_avg": self.election_latency_ms.avg(now_ms),
            "election_latency_max": self.election_latency_ms.max(now_ms),
            "fetch_records_rate": self.fetch_records.rate_per_s(now_ms),
            "append_records_rate": self.append_records.rate_per_s(now_ms),
            "poll_idle_ratio_avg": self.poll_idle_ratio.avg(now_ms),
        }


RAFT_HELP: Final[Mapping[str, str]] = {
    "current_leader": "The current quorum leader's id; -1 indicates unknown",
    "current_vote": "The current voted leader's id; -1 indicates not voted for anyone",
    "current_epoch": "The current quorum epoch",
    "high_watermark": "The high watermark maintained on this member; -1 if it is unknown",
    "log_end_offset": "The current raft log end offset",
    "log_end_epoch": "The current raft log end epoch",
    "number_unknown_voter_connections": "Number of unknown voters whose connection "
    "information is not cached",
    "number_of_voters": "Number of voters for a KRaft topic partition",
    "number_of_observers": "Number of observers being tracked by the KRaft topic partition leader",
    "uncommitted_voter_change": "1 if there is a voter change that has not been committed, "
    "0 otherwise",
    "commit_latency_avg": "The average time in milliseconds to commit an entry in the raft log",
    "commit_latency_max": "The maximum time in milliseconds to commit an entry in the raft log",
    "election_latency_avg": "The average time in milliseconds spent on electing a new leader",
    "election_latency_max": "The maximum time in milliseconds spent on electing a new leader",
    "fetch_records_rate": "The average number of records fetched from the leader per second",
    "append_records_rate": "The average number of records appended per second by the leader",
    "poll_idle_ratio_avg": "The ratio of time the Raft loop is idle as opposed to doing work",
}


def raft_families(state: str, values: Mapping[str, float]) -> Iterator[Metric]:
    family = GaugeMetricFamily(
        "kafka_server_raftmetrics_current_state",
        "The current state of this member (Kafka's current-state): 1 for the state it is in",
        labels=("state",),
    )
    for name in RAFT_STATES:
        family.add_metric((name,), 1.0 if name == state else 0.0)
    yield family
    for key, help_text in RAFT_HELP.items():
        yield GaugeMetricFamily(f"kafka_server_raftmetrics_{key}", help_text, value=values[key])


# ----- controllers, brokers, snapshots: rendered in the scrape thread ------------------------


@dataclass(frozen=True)
class ImageCounts:
    topics: int
    partitions: int
    offline_partitions: int
    active_brokers: int
    fenced_brokers: int


def image_counts(image: MetadataImage) -> ImageCounts:
    """Kafka's ControllerMetadataMetrics of an (immutable) image. The metadata topic itself is
    not counted, as Kafka's image does not hold it."""
    topics = partitions = offline = 0
    for topic in image.topics_by_id.values():
        if topic.topic_id == image.metadata_topic_id:
            continue
        topics += 1
        partitions += len(topic.partitions)
        offline += sum(1 for p in topic.partitions.values() if p.leader < 0)
    fenced = sum(1 for broker in image.brokers.values() if broker.fenced)
    return ImageCounts(topics, partitions, offline, len(image.brokers) - fenced, fenced)


def _gauge(name: str, help_text: str, value: float) -> GaugeMetricFamily:
    return GaugeMetricFamily(name, help_text, value=value)


def _counter(name: str, help_text: str, value: float) -> CounterMetricFamily:
    return CounterMetricFamily(name, help_text, value=value)


# ----- the loop's snapshot -------------------------------------------------------------------


class LoopReader:
    """Runs ``read`` in the event loop on behalf of another thread, waiting at most
    ``SNAPSHOT_WAIT_S``; when the loop is busy (or gone) the previous result is returned and
    counted as stale."""

    def __init__(self, read: Callable[[], dict[str, Any]]) -> None:
        self._read = read
        self._loop: asyncio.AbstractEventLoop | None = None
        self._last: dict[str, Any] | None = None
        self.stale = 0
        self.wait_s = SNAPSHOT_WAIT_S
        self._lock = threading.Lock()

    def attach(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop

    def read(self) -> dict[str, Any] | None:
        with self._lock:  # one scrape at a time asks the loop
            loop = self._loop
            future: concurrent.futures.Future[dict[str, Any]] = concurrent.futures.Future()

            def fill() -> None:
                if future.set_running_or_notify_cancel():
                    try:
                        future.set_result(self._read())
                    except Exception as exc:  # reported to the scrape, never to the loop
                        future.set_exception(exc)

            try:
                if loop is None or loop.is_closed():
                    raise RuntimeError("no event loop")
                loop.call_soon_threadsafe(fill)
                self._last = future.result(timeout=self.wait_s)
            except (concurrent.futures.TimeoutError, RuntimeError):
                future.cancel()
                self.stale += 1
            return self._last


# ----- the node's collector ------------------------------------------------------------------


class NodeMetrics:
    """Every metric one node serves. The node wires it up: ``raft`` after each Ready,
    ``controller``/``broker`` readers, the gRPC interceptor and the admin counters. ``serve``
    starts the HTTP listener (a thread of prometheus_client)."""

    def __init__(
        self,
        *,
        node: RaftNode,
        idle_s: Callable[[], float],
        role: str,
        registry: CollectorRegistry | None = None,
        unknown_voters: Callable[[], int] = lambda: 0,
    ) -> None:
        # Counters without their _created series (Kafka's have none; dashboards never use
        # them). A process-wide switch of prometheus_client: a node has one registry.
        disable_created_metrics()  # type: ignore[no-untyped-call]
        self.role = role
        self.node = node
        self.raft = RaftMetrics(node, idle_s, unknown_voters)
        self.registry = registry if registry is not None else CollectorRegistry()
        self.event_queue_ms = Reservoir()
        self.event_processing_ms = Reservoir()
        # Readers run in the loop: plain values and immutable objects for the scrape thread.
        self._readers: list[Callable[[], dict[str, Any]]] = []
        self._renderers: list[Callable[[dict[str, Any]], Iterable[Metric]]] = []
        self._image_cache: tuple[MetadataImage, ImageCounts] | None = None
        self.loop_reader = LoopReader(self._read_in_loop)
        self.grpc_latency = Histogram(
            "metaquorum_grpc_server_handling_seconds",
            "Time this node took to answer a gRPC call, by service, method and status",
            ("grpc_service", "grpc_method", "grpc_code"),
            buckets=LATENCY_BUCKETS_S,
            registry=self.registry,
        )
        self.admin_requests = Counter(
            "metaquorum_admin_requests",
            "Admin requests answered, by RPC and the request's Kafka error code (a call that "
            "ended without an answer: its gRPC status, e.g. UNAVAILABLE)",
            ("rpc", "error_code"),
            registry=self.registry,
        )
        self.admin_results = Counter(
            "metaquorum_admin_results",
            "Per-entry outcomes of admin requests (one per topic or ACL), by RPC and Kafka "
            "error code, as Kafka's RequestMetrics ErrorsPerSec counts them",
            ("rpc", "error_code"),
            registry=self.registry,
        )
        self.registry.register(self)
        self._server: MetricsHttpServer | None = None

    # ----- wiring ---------------------------------------------------------------------------

    def add_source(
        self,
        read: Callable[[], dict[str, Any]],
        render: Callable[[dict[str, Any]], Iterable[Metric]],
    ) -> None:
        """``read`` runs in the event loop at each scrape; ``render`` turns what it returned
        into metric families in the scrape thread."""
        self._readers.append(read)
        self._renderers.append(render)

    def observe_operation(self, queue_ms: float, processing_ms: float) -> None:
        """One controller operation: how long it waited for the loop, how long it ran."""
        self.event_queue_ms.record(queue_ms)
        self.event_processing_ms.record(processing_ms)

    def image_counts(self, image: MetadataImage) -> ImageCounts:
        """Counts of ``image``, computed once per image (images are immutable)."""
        cached = self._image_cache
        if cached is not None and cached[0] is image:
            return cached[1]
        counts = image_counts(image)
        self._image_cache = (image, counts)
        return counts

    # ----- collection -----------------------------------------------------------------------

    def _read_in_loop(self) -> dict[str, Any]:
        now_ms = int(time.monotonic_ns() // 1_000_000)
        data: dict[str, Any] = {
            "raft_state": kafka_state(self.node),
            "raft": self.raft.read(now_ms),
            "last_applied_offset": self.raft.last_applied_offset,
            "last_applied_wall_ms": self.raft.last_applied_wall_ms,
        }
        if self.role == "controller":
            data["event_queue_ms"] = self.event_queue_ms.snapshot()
            data["event_processing_ms"] = self.event_processing_ms.snapshot()
        for read in self._readers:
            data.update(read())
        return data

    def collect(self) -> Iterator[Metric]:
        """Called by prometheus_client in the scrape thread."""
        data = self.loop_reader.read()
        yield _counter(
            "metaquorum_metrics_stale_snapshots",
            "Scrapes answered with an older snapshot because the event loop did not answer "
            f"within {SNAPSHOT_WAIT_S} s (a loop this busy is a problem of its own)",
            self.loop_reader.stale,
        )
        if data is None:
            return
        yield from raft_families(data["raft_state"], data["raft"])
        if self.role == "controller":
            yield summary_family(
                "kafka_controller_controllereventmanager_eventqueuetimems",
                "Time in milliseconds an operation waited in the controller's queue",
                data["event_queue_ms"],
            )
            yield summary_family(
                "kafka_controller_controllereventmanager_eventqueueprocessingtimems",
                "Time in milliseconds the controller took to run an operation",
                data["event_processing_ms"],
            )
        for render in self._renderers:
            yield from render(data)

    # ----- the HTTP listener ----------------------------------------------------------------

    def serve(
        self, host: str, port: int, loop: asyncio.AbstractEventLoop, logger: Any = None
    ) -> int:
        """Start serving ``/metrics`` on ``host:port`` (0: any free port); returns the port.
        Raises ``OSError`` when the address cannot be bound."""
        self.loop_reader.attach(loop)
        server = MetricsHttpServer(self.registry, host, port, logger=logger)
        server.start()
        self._server = server
        return server.port

    def stop(self) -> None:
        """Stop the HTTP listener (blocks until its thread ended: call it off the loop)."""
        server, self._server = self._server, None
        if server is not None:
            server.stop()


# ----- per-role sources ----------------------------------------------------------------------


def controller_families(
    metrics: NodeMetrics,
    data: Mapping[str, Any],
    now_wall_ms: int,
) -> Iterator[Metric]:
    """``kafka_controller_kafkacontroller_*`` from a controller's snapshot."""
    counts = metrics.image_counts(data["committed_image"])
    applied_wall = data["last_applied_wall_ms"]
    prefix = "kafka_controller_kafkacontroller_"
    yield _gauge(
        prefix + "activecontrollercount",
        "1 on the active controller (the Raft leader), 0 elsewhere",
        1.0 if data["active"] else 0.0,
    )
    yield _gauge(prefix + "activebrokercount", "Unfenced brokers", counts.active_brokers)
    yield _gauge(prefix + "fencedbrokercount", "Fenced brokers", counts.fenced_brokers)
    yield _gauge(
        prefix + "globaltopiccount",
        "Topics in this controller's committed image (every controller reports it: take it "
        "from the active controller, or max, never sum)",
        counts.topics,
    )
    yield _gauge(prefix + "globalpartitioncount", "Partitions of every topic", counts.partitions)
    yield _gauge(
        prefix + "offlinepartitionscount", "Partitions without a leader", counts.offline_partitions
    )
    yield _gauge(
        prefix + "metadataerrorcount",
        "Metadata errors this controller survived: corrupt snapshots skipped at start-up, "
        "snapshots that could not be written or fetched",
        data["metadata_errors"],
    )
    yield _gauge(
        prefix + "lastappliedrecordoffset",
        "Offset of the last record applied to the committed image",
        data["committed_image"].offset,
    )
    yield _gauge(
        prefix + "lastcommittedrecordoffset",
        "Offset of the last committed record (the high watermark minus one)",
        data["last_committed_offset"],
    )
    yield _gauge(
        prefix + "lastappliedrecordtimestamp",
        "Wall-clock ms when the last applied record reached this node's log",
        applied_wall,
    )
    yield _gauge(
        prefix + "lastappliedrecordlagms",
        "Now minus lastappliedrecordtimestamp, in ms",
        max(0, now_wall_ms - applied_wall) if applied_wall else 0,
    )
    yield _gauge(
        prefix + "timedoutbrokerheartbeatcount",
        "Brokers this controller fenced because their heartbeats stopped",
        data["timed_out_heartbeats"],
    )
    yield _gauge(
        prefix + "newactivecontrollerscount",
        "Times this node became the active controller",
        data["new_active_controllers"],
    )


def broker_families(data: Mapping[str, Any], now_wall_ms: int) -> Iterator[Metric]:
    """``kafka_server_brokermetadatametrics_*`` and the broker's ``metaquorum_broker_*`` gauges."""
    prefix = "kafka_server_brokermetadatametrics_"
    applied_wall = data["last_applied_wall_ms"]
    yield _gauge(
        prefix + "last_applied_record_offset",
        "Offset of the last record applied to the broker's image",
        data["image_offset"],
    )
    yield _gauge(
        prefix + "last_applied_record_timestamp",
        "Wall-clock ms when the last applied record reached this broker's log",
        applied_wall,
    )
    yield _gauge(
        prefix + "last_applied_record_lag_ms",
        "Now minus last_applied_record_timestamp, in ms",
        max(0, now_wall_ms - applied_wall) if applied_wall else 0,
    )
    yield _gauge(
        prefix + "metadata_load_error_count",
        "Errors loading metadata: corrupt snapshots skipped at start-up, snapshot fetches that "
        "failed",
        data["metadata_load_errors"],
    )
    yield _gauge(
        prefix + "metadata_apply_error_count",
        "Errors applying the image to the log dirs: reconciliation actions that failed",
        data["metadata_apply_errors"],
    )
    dirs = GaugeMetricFamily(
        "metaquorum_broker_pending_deletion_directories",
        "Partition directories in deleting/, waiting for delete.topic.delay.ms",
        labels=("broker_id", "log_dir"),
    )
    size = GaugeMetricFamily(
        "metaquorum_broker_pending_deletion_bytes",
        "Bytes in deleting/, waiting for delete.topic.delay.ms",
        labels=("broker_id", "log_dir"),
    )
    broker_id = str(data["broker_id"])
    for log_dir, (count, size_bytes) in sorted(data["pending_deletions"].items()):
        dirs.add_metric((broker_id, log_dir), count)
        size.add_metric((broker_id, log_dir), size_bytes)
    yield dirs
    yield size
    yield _gauge(
        "metaquorum_broker_caught_up",
        "1 once the broker has applied the metadata log up to its registration (it then "
        "serves reads and reports SERVING)",
        1.0 if data["caught_up"] else 0.0,
    )
    yield from kafka_listener_families(data.get("kafka_listeners", {}))


def kafka_listener_families(listeners: Mapping[str, Mapping[str, int]]) -> Iterator[Metric]:
    """``metaquorum_kafka_*``: the broker's Kafka listeners (docs/kafka-listener.md), by
    listener name."""
    if not listeners:
        return
    families: dict[str, GaugeMetricFamily | CounterMetricFamily] = {
        "connections": GaugeMetricFamily(
            "metaquorum_kafka_connections",
            "Connections open on a Kafka listener",
            labels=("listener",),
        ),
        "connections_refused": CounterMetricFamily(
            "metaquorum_kafka_connections_refused",
            "Connections closed at once: max.connections or max.connections.per.ip reached",
            labels=("listener",),
        ),
        "requests": CounterMetricFamily(
            "metaquorum_kafka_requests",
            "Kafka requests answered",
            labels=("listener",),
        ),
        "requests_throttled": CounterMetricFamily(
            "metaquorum_kafka_requests_throttled",
            "Kafka requests answered with a throttle time: the principal exceeded its request "
            "quota (quota.request.percentage.default)",
            labels=("listener",),
        ),
        "closed_for_cause": CounterMetricFamily(
            "metaquorum_kafka_connections_closed_for_cause",
            "Connections closed for a malformed, oversized or slow request (logged as "
            "kafka_request_malformed)",
            labels=("listener",),
        ),
    }
    for name, stats in sorted(listeners.items()):
        for key, family in families.items():
            family.add_metric((name,), stats[key])
    yield from families.values()


def snapshot_families(data: Mapping[str, Any], now_wall_ms: int) -> Iterator[Metric]:
    """``kafka_server_snapshotemitter_*``: the latest snapshot this process wrote."""
    generated_wall = data["snapshot_generated_wall_ms"]
    yield _gauge(
        "kafka_server_snapshotemitter_latestsnapshotgeneratedbytes",
        "Size in bytes of the latest snapshot this node generated (0: none yet)",
        data["snapshot_generated_bytes"],
    )
    yield _gauge(
        "kafka_server_snapshotemitter_latestsnapshotgeneratedagems",
        "Age in ms of the latest snapshot this node generated (since start-up when none)",
        max(0, now_wall_ms - generated_wall),
    )


def reconciliation_metrics(registry: CollectorRegistry) -> tuple[Counter, Histogram]:
    """The broker's reconciliation runs (by mode) and their durations."""
    runs = Counter(
        "metaquorum_broker_reconciliations",
        "Reconciliations of the log dirs against the image, by mode (FULL, INCREMENTAL)",
        ("mode",),
        registry=registry,
    )
    duration = Histogram(
        "metaquorum_broker_reconciliation_duration_seconds",
        "Time one reconciliation took (scan, plan, execute)",
        buckets=LATENCY_BUCKETS_S,
        registry=registry,
    )
    return runs, duration


# ----- gRPC -----------------------------------------------------------------------------------


class GrpcMetricsInterceptor(grpc.aio.ServerInterceptor):  # type: ignore[misc]
    """Times every unary call (``metaquorum_grpc_server_handling_seconds``) and counts admin
    requests and their per-entry outcomes by Kafka error code."""

    def __init__(self, metrics: NodeMetrics) -> None:
        self._metrics = metrics
        self._handlers: dict[str, grpc.RpcMethodHandler] = {}

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler]],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler:
        method: str = handler_call_details.method
        cached = self._handlers.get(method)
        if cached is not None:
            return cached
        handler = await continuation(handler_call_details)
        if handler is None:
            return handler
        if handler.unary_unary is not None:
            wrapped = self._timed(method, handler)
        elif handler.stream_stream is not None:
            wrapped = self._timed_stream(method, handler)
        else:
            return handler
        self._handlers[method] = wrapped  # bounded by the methods the server serves
        return wrapped

    def _timed(self, method: str, handler: grpc.RpcMethodHandler) -> grpc.RpcMethodHandler:
        service, _, rpc = method.lstrip("/").rpartition("/")
        behaviour = handler.unary_unary
        metrics = self._metrics
        is_admin = method.startswith(ADMIN_SERVICE_PREFIX)

        async def unary_unary(request: Any, context: grpc.aio.ServicerContext) -> Any:
            started = time.perf_counter()
            code = "OK"
            try:
                response = behaviour(request, context)
                if asyncio.iscoroutine(response):
                    response = await response
            except BaseException:
                code = _failure_code(context)
                if is_admin:
                    metrics.admin_requests.labels(rpc, code).inc()
                raise
            finally:
                metrics.grpc_latency.labels(service, rpc, code).observe(
                    time.perf_counter() - started
                )
            if is_admin:
                count_admin_response(metrics, rpc, response)
            return response

        return grpc.unary_unary_rpc_method_handler(
            unary_unary,
            request_deserializer=handler.request_deserializer,
            response_serializer=handler.response_serializer,
        )

    def _timed_stream(self, method: str, handler: grpc.RpcMethodHandler) -> grpc.RpcMethodHandler:
        """A bidirectional stream (FetchStream) is timed per message: from a request's arrival
        to its answer (answers come in order), the status for the one in flight if it ends."""
        service, _, rpc = method.lstrip("/").rpartition("/")
        behaviour = handler.stream_stream
        latency = self._metrics.grpc_latency

        async def stream_stream(requests: Any, context: grpc.aio.ServicerContext) -> Any:
            arrived: deque[float] = deque()

            async def timed() -> Any:
                async for request in requests:
                    arrived.append(time.perf_counter())
                    yield request

            try:
                async for response in behaviour(timed(), context):
                    if arrived:
                        latency.labels(service, rpc, "OK").observe(
                            time.perf_counter() - arrived.popleft()
                        )
                    yield response
            except BaseException:
                if arrived:
                    latency.labels(service, rpc, _failure_code(context)).observe(
                        time.perf_counter() - arrived.popleft()
                    )
                raise

        return grpc.stream_stream_rpc_method_handler(
            stream_stream,
            request_deserializer=handler.request_deserializer,
            response_serializer=handler.response_serializer,
        )


def _failure_code(context: grpc.aio.ServicerContext) -> str:
    """The status name of a call whose handler raised (UNKNOWN when none, or OK, was set)."""
    status = context.code()
    code = status.name if isinstance(status, grpc.StatusCode) else "UNKNOWN"
    return "UNKNOWN" if code == "OK" else code


def error_name(code: int) -> str:
    try:
        return ErrorCode(code).name
    except ValueError:
        return str(code)


def count_admin_response(metrics: NodeMetrics, rpc: str, response: Any) -> None:
    """The request's error code, and every entry's (repeated fields with an error_code)."""
    code = getattr(response, "error_code", None)
    if not isinstance(code, int):
        return
    metrics.admin_requests.labels(rpc, error_name(code)).inc()
    for descriptor, value in response.ListFields():
        if descriptor.message_type is None or not _is_repeated(descriptor):
            continue
        if "error_code" not in descriptor.message_type.fields_by_name:
            continue
        for entry in value:
            metrics.admin_results.labels(rpc, error_name(entry.error_code)).inc()


def _is_repeated(descriptor: Any) -> bool:
    repeated = getattr(descriptor, "is_repeated", None)
    if isinstance(repeated, bool):
        return repeated
    return bool(descriptor.label == descriptor.LABEL_REPEATED)


# ----- wiring for a node ---------------------------------------------------------------------


def node_metrics(config: NodeConfig, raft: RaftManager, role: str) -> NodeMetrics | None:
    """The node's metrics when ``metrics.listener`` is set (None otherwise): Raft, snapshot
    emitter and gRPC; the node adds its role's source. Hooks the driver's idle time."""
    if config.metrics_listener is None:
        return None
    driver = raft.driver
    node, peers = raft.node, raft.peers

    def unknown_voters() -> int:
        return sum(1 for v in node.voters if v != node.node_id and peers.address_of(v) is None)

    metrics = NodeMetrics(
        node=node,
        idle_s=lambda: driver.idle_s_total,
        role=role,
        unknown_voters=unknown_voters,
    )
    snapshotter = raft.snapshotter

    def read_snapshots() -> dict[str, Any]:
        return {
            "snapshot_generated_bytes": snapshotter.latest_generated_bytes,
            "snapshot_generated_wall_ms": snapshotter.latest_generated_wall_ms,
        }

    metrics.add_source(read_snapshots, lambda data: snapshot_families(data, wall_ms()))
    # What the node refused: failed TLS handshakes, refused requests (every role).
    metrics.add_source(read_security_events, security_families)
    return metrics


def serve_metrics(metrics: NodeMetrics, config: NodeConfig, logger: Any) -> int:
    """Start the node's ``metrics.listener`` (in the running loop); returns its port. A port
    that cannot be bound is a ``StartupError``."""
    address = config.metrics_listener
    assert address is not None
    try:
        port = metrics.serve(address.host, address.port, asyncio.get_running_loop(), logger)
    except OSError as exc:
        raise StartupError(f"metrics.listener: cannot listen on {address}: {exc}") from exc
    logger.info("metrics_listening", address=f"http://{HostPort(address.host, port)}/metrics")
    return port


__all__ = [
    "GrpcMetricsInterceptor",
    "MetricsHttpServer",
    "NodeMetrics",
    "RaftMetrics",
    "WindowedStat",
    "broker_families",
    "controller_families",
    "image_counts",
    "kafka_listener_families",
    "node_metrics",
    "reconciliation_metrics",
    "serve_metrics",
    "snapshot_families",
]
