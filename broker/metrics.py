"""A broker's own metrics (docs/operating.md#metrics): Kafka's
``kafka_server_brokermetadatametrics_*``, and this project's ``metaquorum_broker_*`` (pending
deletions, caught up, reconciliations) and ``metaquorum_kafka_*`` (the Kafka listeners). The
Raft, snapshot, gRPC and security families every node serves are quorum/server/'s; like them,
these are imported only by a broker that serves metrics (``metrics.listener``)."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any

from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    Metric,
    SummaryMetricFamily,
)
from prometheus_client.samples import Sample

from quorum.metadata.image import MetadataImage
from quorum.server.metric_stats import LATENCY_BUCKETS_S, QUANTILES, gauge, quantile

if TYPE_CHECKING:
    from broker.kafka.data_plane import DataPlane
    from broker.log.manager import CleanerMetrics

__all__ = [
    "broker_families",
    "cleaner_families",
    "data_plane_families",
    "group_families",
    "kafka_listener_families",
    "reconciliation_metrics",
]


def broker_families(data: Mapping[str, Any], now_wall_ms: int) -> Iterator[Metric]:
    """``kafka_server_brokermetadatametrics_*`` and the broker's ``metaquorum_broker_*`` gauges."""
    prefix = "kafka_server_brokermetadatametrics_"
    applied_wall = data["last_applied_wall_ms"]
    yield gauge(
        prefix + "last_applied_record_offset",
        "Offset of the last record applied to the broker's image",
        data["image_offset"],
    )
    yield gauge(
        prefix + "last_applied_record_timestamp",
        "Wall-clock ms when the last applied record reached this broker's log",
        applied_wall,
    )
    yield gauge(
        prefix + "last_applied_record_lag_ms",
        "Now minus last_applied_record_timestamp, in ms",
        max(0, now_wall_ms - applied_wall) if applied_wall else 0,
    )
    yield gauge(
        prefix + "metadata_load_error_count",
        "Errors loading metadata: corrupt snapshots skipped at start-up, snapshot fetches that "
        "failed",
        data["metadata_load_errors"],
    )
    yield gauge(
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
    yield gauge(
        "metaquorum_broker_caught_up",
        "1 once the broker has applied the metadata log up to its registration (it then "
        "serves reads and reports SERVING)",
        1.0 if data["caught_up"] else 0.0,
    )
    yield from kafka_listener_families(data.get("kafka_listeners", {}))
    if data.get("data_plane") is not None:
        yield from data_plane_families(data["data_plane"], data["image"])
    if data.get("group_coordinator") is not None:
        yield from group_families(data["group_coordinator"])


def group_families(coordinator: Any) -> Iterator[Metric]:
    """Kafka's ``GroupMetadataManager`` gauges (docs/groups.md#metrics): the groups of the
    ``__consumer_offsets`` partitions loaded here, by state, and their committed offsets. Read
    from the metrics thread while the listeners' loop changes them: copies, and a scrape that
    meets a change reports what it counted before it."""
    prefix = "kafka_coordinator_group_groupmetadatamanager_"
    counts = {"Empty": 0, "PreparingRebalance": 0, "CompletingRebalance": 0, "Stable": 0, "Dead": 0}
    offsets = 0
    try:
        for loaded in list(coordinator.partitions.values()):
            if not loaded.ready:
                continue
            for group in list(loaded.shard.groups.values()):
                counts[group.state.value] += 1
            offsets += sum(len(stored) for stored in list(loaded.shard.offsets.values()))
    except RuntimeError:  # a dict changed size while it was copied: the next scrape counts
        pass
    yield GaugeMetricFamily(
        prefix + "numgroups", "Consumer groups coordinated here", value=float(sum(counts.values()))
    )
    for state, count in counts.items():
        yield GaugeMetricFamily(
            prefix + "numgroups" + state.lower(),
            f"Consumer groups coordinated here in state {state}",
            value=float(count),
        )
    yield GaugeMetricFamily(
        prefix + "numoffsets",
        "Committed offsets held by the groups coordinated here",
        value=float(offsets),
    )


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


BROKER_TOPIC_METRICS = (
    ("bytesin", "Bytes of record batches appended by Produce (Kafka's BytesInPerSec)"),
    ("messagesin", "Records appended by Produce, from each batch's header (MessagesInPerSec)"),
    ("bytesout", "Bytes of record batches answered to Fetch (Kafka's BytesOutPerSec)"),
)


def data_plane_families(data_plane: DataPlane, image: MetadataImage) -> Iterator[Metric]:
    """The data plane (docs/operating.md#metrics), rendered in the scrape thread: Kafka's
    ``BrokerTopicMetrics`` per topic (``topic`` label) and for all topics (no label), as the
    JMX exporter names them; ``kafka_log_log_size`` per open partition log; ``TotalTimeMs``
    per API as a summary with a ``request`` label."""
    snapshot = data_plane.metrics.snapshot(image.topics_by_name)
    prefix = "kafka_server_brokertopicmetrics_"
    for index, (name, help_text) in enumerate(BROKER_TOPIC_METRICS):
        family = CounterMetricFamily(prefix + name, help_text, labels=("topic",))
        family.samples.append(Sample(f"{prefix}{name}_total", {}, snapshot.all_topics[index]))
        for topic_name, counts in sorted(snapshot.topics.items()):
            family.add_metric((topic_name,), counts[index])
        yield family
    size = GaugeMetricFamily(
        "kafka_log_log_size",
        "Bytes in every segment of a partition's log on this broker (the logs open here: "
        "every partition it leads after the first retention check)",
        labels=("topic", "partition"),
    )
    logs = data_plane.logs.open_logs() if data_plane.logs is not None else []
    sizes: list[tuple[str, int, int]] = []
    for topic_id, partition, log in logs:
        topic = image.topic(topic_id)
        if topic is not None and not log.closed:
            sizes.append((topic.name, partition, log.size_bytes()))
    for name, partition, size_bytes in sorted(sizes):
        size.add_metric((name, str(partition)), size_bytes)
    yield size
    if data_plane.logs is not None:
        yield from cleaner_families(data_plane.logs.cleaner_metrics)
    yield from replica_families(data_plane, image)
    yield from fetch_session_families(data_plane)
    total_time = "kafka_network_requestmetrics_totaltimems"
    times = SummaryMetricFamily(
        total_time,
        "ms from a Kafka request's arrival to its encoded answer, by API (Kafka's TotalTimeMs; "
        "Fetch also as FetchConsumer)",
        labels=("request",),
    )
    for api, (values, count, total_ms) in sorted(snapshot.request_ms.items()):
        ordered = sorted(values)
        for q in QUANTILES:
            at = {"request": api, "quantile": str(q)}
            times.samples.append(Sample(total_time, at, quantile(ordered, q)))
        times.samples.append(Sample(f"{total_time}_count", {"request": api}, float(count)))
        times.samples.append(Sample(f"{total_time}_sum", {"request": api}, total_ms))
    yield times


def cleaner_families(cleaner: CleanerMetrics) -> Iterator[Metric]:
    """Kafka's ``LogCleaner`` gauges as the JMX exporter names them, of the cleaner's last
    run (docs/kafka-listener.md#log-compaction)."""
    prefix = "kafka_log_logcleaner_"
    yield GaugeMetricFamily(
        prefix + "cleaner_recopy_percent",
        "Bytes the last clean wrote as a percentage of the bytes it read (cleaner-recopy-percent)",
        value=cleaner.recopy_percent,
    )
    yield GaugeMetricFamily(
        prefix + "max_clean_time_secs",
        "Seconds the longest clean of the cleaner's last run took (max-clean-time-secs)",
        value=cleaner.max_clean_time_s,
    )


def replica_families(data_plane: DataPlane, image: MetadataImage) -> Iterator[Metric]:
    """Kafka's ``ReplicaManager`` gauges from the committed image (the ISR the controller
    holds, which the leaders change with AlterPartition), and its ISR change counts."""
    broker_id = data_plane.broker_id
    leaders = partitions = under = 0
    for topic in image.topics_by_id.values():
        for state in topic.partitions.values():
            if broker_id in state.replicas:
                partitions += 1
            if state.leader == broker_id:
                leaders += 1
                under += len(state.isr) < len(state.replicas)
    prefix = "kafka_server_replicamanager_"
    for name, help_text, value in (
        ("underreplicatedpartitions", "Partitions led here whose ISR is not every replica", under),
        ("leadercount", "Partitions led by this broker", leaders),
        ("partitioncount", "Partitions with a replica on this broker", partitions),
    ):
        yield GaugeMetricFamily(prefix + name, help_text, value=float(value))
    replicas = data_plane.replicas
    for name, help_text, count in (
        ("isrshrinks", "ISR shrinks this broker's AlterPartitions committed", "isr_shrinks"),
        ("isrexpands", "ISR expansions this broker's AlterPartitions committed", "isr_expands"),
    ):
        value = 0 if replicas is None else getattr(replicas, count)
        yield CounterMetricFamily(prefix + name, help_text, value=float(value))


def fetch_session_families(data_plane: DataPlane) -> Iterator[Metric]:
    """Kafka's ``FetchSessionCache`` metrics as the JMX exporter names them, and the
    incremental fetches answered and the partitions their answers carried
    (docs/kafka-listener.md#fetch-sessions)."""
    cache = data_plane.fetch_sessions
    prefix = "kafka_server_fetchsessioncache_"
    sessions = [] if cache is None else cache.sessions()
    yield GaugeMetricFamily(
        prefix + "numincrementalfetchsessions",
        "Incremental fetch sessions this broker holds",
        value=float(len(sessions)),
    )
    yield GaugeMetricFamily(
        prefix + "numincrementalfetchpartitionscached",
        "Partitions in all the incremental fetch sessions this broker holds",
        value=float(sum(len(session.partitions) for session in sessions)),
    )
    for name, help_text, count in (
        (
            prefix + "incrementalfetchsessionevictions",
            "Sessions evicted to make room for a new one",
            "evictions",
        ),
        (
            "metaquorum_fetch_session_incremental_fetches",
            "Incremental fetches answered (the session's epoch matched)",
            "incremental_fetches",
        ),
        (
            "metaquorum_fetch_session_partitions_requested",
            "Partitions incremental fetches named (added, or their fetch position changed)",
            "partitions_requested",
        ),
        (
            "metaquorum_fetch_session_partitions_answered",
            "Partitions the answers to incremental fetches carried (those that changed)",
            "partitions_answered",
        ),
    ):
        value = 0 if cache is None else getattr(cache, count)
        yield CounterMetricFamily(name, help_text, value=float(value))


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
