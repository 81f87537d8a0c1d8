"""The partition logs' periodic work on a broker: the log dirs' checkpoint files every
``LOG_CHECKPOINT_INTERVAL_MS`` and retention every ``RETENTION_CHECK_INTERVAL_MS`` (Kafka's
defaults), over the partitions the image has this broker lead, each in a worker thread so the
broker's loop (heartbeats, metadata fetching) never waits for a disk."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from broker.log.config import LogConfig
from broker.log.manager import (
    LOG_CHECKPOINT_INTERVAL_MS,
    RETENTION_CHECK_INTERVAL_MS,
    LogManager,
    LogTarget,
)
from quorum.metadata.image import MetadataImage

__all__ = ["led_partitions", "maintain_logs"]


def led_partitions(image: MetadataImage, broker_id: int) -> list[LogTarget]:
    """Every partition ``image`` has ``broker_id`` lead, with its topic's log config."""
    return [
        LogTarget(topic.topic_id, topic.name, partition.partition, LogConfig.of(topic.configs))
        for topic in image.topics_by_id.values()
        for partition in topic.partitions.values()
        if partition.leader == broker_id
    ]


async def maintain_logs(
    logs: LogManager,
    image: Callable[[], MetadataImage],
    broker_id: int,
    caught_up: asyncio.Event,
) -> None:
    """Run until cancelled, once the broker caught up (its image then says what it leads)."""
    await caught_up.wait()
    retention_every = max(RETENTION_CHECK_INTERVAL_MS // LOG_CHECKPOINT_INTERVAL_MS, 1)
    turn = 0
    while True:
        await asyncio.sleep(LOG_CHECKPOINT_INTERVAL_MS / 1000)  # a period, not a wait for state
        turn += 1
        if turn % retention_every == 0:
            await asyncio.to_thread(logs.run_retention, led_partitions(image(), broker_id))
        await asyncio.to_thread(logs.write_checkpoints)
