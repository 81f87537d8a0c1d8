"""A partition log's configuration: the topic's configs from the metadata image, each with
the broker's default when the topic does not set it: the dynamic broker configs and the
broker's file resolved by ``quorum/controller/broker_configs.py`` (``topic_defaults``), else
Kafka's (``quorum/controller/configs.py`` validates topic configs and holds those). Pure.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from broker.log.batch import TimestampRules
from quorum.controller.configs import TOPIC_CONFIG_DEFAULTS

__all__ = ["LogConfig"]


@dataclass(frozen=True, slots=True)
class LogConfig:
    segment_bytes: int = int(TOPIC_CONFIG_DEFAULTS["segment.bytes"])
    segment_ms: int = int(TOPIC_CONFIG_DEFAULTS["segment.ms"])
    retention_ms: int = int(TOPIC_CONFIG_DEFAULTS["retention.ms"])
    retention_bytes: int = int(TOPIC_CONFIG_DEFAULTS["retention.bytes"])
    max_message_bytes: int = int(TOPIC_CONFIG_DEFAULTS["max.message.bytes"])
    min_insync_replicas: int = int(TOPIC_CONFIG_DEFAULTS["min.insync.replicas"])
    timestamps: TimestampRules = TimestampRules()
    compact: bool = False
    """``cleanup.policy`` holds ``compact``: the log cleaner keeps the last record per key
    (``cleaner.py``) and produce refuses records without a key."""
    delete_retention_ms: int = int(TOPIC_CONFIG_DEFAULTS["delete.retention.ms"])
    min_cleanable_dirty_ratio: float = float(TOPIC_CONFIG_DEFAULTS["min.cleanable.dirty.ratio"])
    min_compaction_lag_ms: int = int(TOPIC_CONFIG_DEFAULTS["min.compaction.lag.ms"])

    @classmethod
    def of(cls, configs: Mapping[str, str], defaults: Mapping[str, str] | None = None) -> LogConfig:
        """The config of a topic whose configs (validated and normalised) are ``configs``, on a
        broker whose defaults for topic configs are ``defaults`` (None: Kafka's)."""

        def value(name: str) -> str:
            found = configs.get(name)
            if found is None and defaults is not None:
                found = defaults.get(name)
            return TOPIC_CONFIG_DEFAULTS[name] if found is None else found

        # A compacted topic without "delete" keeps its segments whatever their age or size
        # (Kafka deletes only under the "delete" policy); the log cleaner compacts it.
        policies = value("cleanup.policy").split(",")
        deletes = "delete" in policies
        return cls(
            segment_bytes=int(value("segment.bytes")),
            segment_ms=int(value("segment.ms")),
            retention_ms=int(value("retention.ms")) if deletes else -1,
            retention_bytes=int(value("retention.bytes")) if deletes else -1,
            max_message_bytes=int(value("max.message.bytes")),
            min_insync_replicas=int(value("min.insync.replicas")),
            timestamps=TimestampRules(
                log_append_time=value("message.timestamp.type") == "LogAppendTime",
                before_max_ms=int(value("message.timestamp.before.max.ms")),
                after_max_ms=int(value("message.timestamp.after.max.ms")),
            ),
            compact="compact" in policies,
            delete_retention_ms=int(value("delete.retention.ms")),
            min_cleanable_dirty_ratio=float(value("min.cleanable.dirty.ratio")),
            min_compaction_lag_ms=int(value("min.compaction.lag.ms")),
        )
