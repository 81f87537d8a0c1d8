"""A controller's own metrics (docs/operating.md#metrics): Kafka's
``kafka_controller_controllereventmanager_*`` (how long operations waited for the driver loop and
ran in it, recorded by the loop through ``RaftDriver.on_operation_timed``) and
``kafka_controller_kafkacontroller_*`` (Kafka's ControllerMetadataMetrics of the committed
image, and the controller's counters), rendered in the scrape thread."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from prometheus_client.core import Metric

from quorum.metadata.image import MetadataImage
from quorum.server.metric_stats import Reservoir, gauge, summary_family

__all__ = ["ControllerMetrics", "ImageCounts", "controller_families", "image_counts"]


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


class ControllerMetrics:
    """What a controller measures beyond the Raft metrics: the event manager's queue and
    processing times, and the counts of its committed image, computed once per image (images
    are immutable)."""

    def __init__(self) -> None:
        self.event_queue_ms = Reservoir()
        self.event_processing_ms = Reservoir()
        self._image_cache: tuple[MetadataImage, ImageCounts] | None = None

    def observe_operation(self, queue_ms: float, processing_ms: float) -> None:
        """One controller operation: how long it waited for the loop, how long it ran (Kafka's
        ControllerEventManager EventQueueTimeMs / EventQueueProcessingTimeMs)."""
        self.event_queue_ms.record(queue_ms)
        self.event_processing_ms.record(processing_ms)

    def read(self) -> dict[str, Any]:
        """The event times now (in the loop)."""
        return {
            "event_queue_ms": self.event_queue_ms.snapshot(),
            "event_processing_ms": self.event_processing_ms.snapshot(),
        }

    def image_counts(self, image: MetadataImage) -> ImageCounts:
        """Counts of ``image``, computed once per image."""
        cached = self._image_cache
        if cached is not None and cached[0] is image:
            return cached[1]
        counts = image_counts(image)
        self._image_cache = (image, counts)
        return counts


def controller_families(
    metrics: ControllerMetrics,
    data: Mapping[str, Any],
    now_wall_ms: int,
) -> Iterator[Metric]:
    """The controller's families from its snapshot (``data``: ``ControllerMetrics.read`` and
    the controller's own values)."""
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
    counts = metrics.image_counts(data["committed_image"])
    applied_wall = data["last_applied_wall_ms"]
    prefix = "kafka_controller_kafkacontroller_"
    yield gauge(
        prefix + "activecontrollercount",
        "1 on the active controller (the Raft leader), 0 elsewhere",
        1.0 if data["active"] else 0.0,
    )
    yield gauge(prefix + "activebrokercount", "Unfenced brokers", counts.active_brokers)
    yield gauge(prefix + "fencedbrokercount", "Fenced brokers", counts.fenced_brokers)
    yield gauge(
        prefix + "globaltopiccount",
        "Topics in this controller's committed image (every controller reports it: take it "
        "from the active controller, or max, never sum)",
        counts.topics,
    )
    yield gauge(prefix + "globalpartitioncount", "Partitions of every topic", counts.partitions)
    yield gauge(
        prefix + "offlinepartitionscount", "Partitions without a leader", counts.offline_partitions
    )
    yield gauge(
        prefix + "metadataerrorcount",
        "Metadata errors this controller survived: corrupt snapshots skipped at start-up, "
        "snapshots that could not be written or fetched",
        data["metadata_errors"],
    )
    yield gauge(
        prefix + "lastappliedrecordoffset",
        "Offset of the last record applied to the committed image",
        data["committed_image"].offset,
    )
    yield gauge(
        prefix + "lastcommittedrecordoffset",
        "Offset of the last committed record (the high watermark minus one)",
        data["last_committed_offset"],
    )
    yield gauge(
        prefix + "lastappliedrecordtimestamp",
        "Wall-clock ms when the last applied record reached this node's log",
        applied_wall,
    )
    yield gauge(
        prefix + "lastappliedrecordlagms",
        "Now minus lastappliedrecordtimestamp, in ms",
        max(0, now_wall_ms - applied_wall) if applied_wall else 0,
    )
    yield gauge(
        prefix + "timedoutbrokerheartbeatcount",
        "Brokers this controller fenced because their heartbeats stopped",
        data["timed_out_heartbeats"],
    )
    yield gauge(
        prefix + "newactivecontrollerscount",
        "Times this node became the active controller",
        data["new_active_controllers"],
    )
