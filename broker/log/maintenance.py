"""The partition logs' periodic work on a broker: the log dirs' checkpoint files every
``LOG_CHECKPOINT_INTERVAL_MS`` and retention every ``log.retention.check.interval.ms`` (Kafka's
defaults: 60 s and 5 minutes), over the partitions the image has this broker lead, each in a
worker thread so the broker's loop (heartbeats, metadata fetching) never waits for a disk.
Each retention check reads the topics' log configs anew (the topic's configs over the broker's
dynamic and static defaults), so a config change applies at the next check. The log cleaner
(``cleaner.py``) runs the same way every ``log.cleaner.backoff.ms`` (Kafka's cleaner thread
sleeps that long when no log needs cleaning) over the compacted partitions this broker holds a
replica of, leader or follower (each replica's log is cleaned on its own, below its own high
watermark, as Kafka's are), unless ``log.cleaner.enable`` is false."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

from broker.log.config import LogConfig
from broker.log.manager import (
    LOG_CHECKPOINT_INTERVAL_MS,
    LOG_CLEANER_BACKOFF_MS,
    RETENTION_CHECK_INTERVAL_MS,
    LogManager,
    LogTarget,
)
from quorum.metadata.image import MetadataImage, TopicImage

__all__ = ["led_partitions", "maintain_logs", "replicated_partitions"]


def led_partitions(
    image: MetadataImage,
    broker_id: int,
    config: Callable[[TopicImage], LogConfig] = lambda topic: LogConfig.of(topic.configs),
) -> list[LogTarget]:
    """Every partition ``image`` has ``broker_id`` lead, with its topic's log config
    (``config``: ``DataPlane.config`` on a broker; by default the topic's configs over Kafka's
    defaults)."""
    return [
        LogTarget(topic.topic_id, topic.name, partition.partition, config(topic))
        for topic in image.topics_by_id.values()
        for partition in topic.partitions.values()
        if partition.leader == broker_id
    ]


def replicated_partitions(
    image: MetadataImage,
    broker_id: int,
    config: Callable[[TopicImage], LogConfig] = lambda topic: LogConfig.of(topic.configs),
) -> list[LogTarget]:
    """Every partition with a replica on ``broker_id`` (leader or follower): what the log
    cleaner looks after (Kafka cleans every replica's log on its own)."""
    return [
        LogTarget(topic.topic_id, topic.name, partition.partition, config(topic))
        for topic in image.topics_by_id.values()
        for partition in topic.partitions.values()
        if broker_id in partition.replicas
    ]


async def maintain_logs(
    logs: LogManager,
    image: Callable[[], MetadataImage],
    broker_id: int,
    caught_up: asyncio.Event,
    *,
    config: Callable[[TopicImage], LogConfig] = lambda topic: LogConfig.of(topic.configs),
    retention_check_interval_ms: int = RETENTION_CHECK_INTERVAL_MS,
    cleaner_backoff_ms: int | None = LOG_CLEANER_BACKOFF_MS,
) -> None:
    """Run until cancelled, once the broker caught up (its image then says what it leads).
    ``cleaner_backoff_ms`` None: the log cleaner is disabled."""
    await caught_up.wait()
    now_s = time.monotonic()
    next_checkpoint_s = now_s + LOG_CHECKPOINT_INTERVAL_MS / 1000
    next_retention_s = now_s + retention_check_interval_ms / 1000
    never = float("inf")
    next_clean_s = never if cleaner_backoff_ms is None else now_s + cleaner_backoff_ms / 1000
    while True:
        # Periods, not waits for a state.
        wake_s = min(next_checkpoint_s, next_retention_s, next_clean_s)
        await asyncio.sleep(max(wake_s - time.monotonic(), 0))
        now_s = time.monotonic()
        if now_s >= next_retention_s:
            next_retention_s = now_s + retention_check_interval_ms / 1000
            await asyncio.to_thread(logs.run_retention, led_partitions(image(), broker_id, config))
        if cleaner_backoff_ms is not None and now_s >= next_clean_s:
            await asyncio.to_thread(
                logs.run_cleaner, replicated_partitions(image(), broker_id, config)
            )
            next_clean_s = time.monotonic() + cleaner_backoff_ms / 1000
        if now_s >= next_checkpoint_s:
            next_checkpoint_s = now_s + LOG_CHECKPOINT_INTERVAL_MS / 1000
            await asyncio.to_thread(logs.write_checkpoints)
