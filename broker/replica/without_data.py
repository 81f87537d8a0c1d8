"""The ISR of a broker that serves no partition data (no Kafka listener: a metadata-only
deployment, docs/replication.md#brokers-without-a-kafka-listener).

Such a broker holds no records, so there is nothing a follower could lag behind: as the leader
of a partition it adds back to the ISR every replica that is registered and unfenced (with
AlterPartition, as a replicating leader does once a follower caught up). Without it a broker
that was fenced once would stay out of every ISR for good, since the controller no longer puts
an unfenced broker back by itself.
"""

from __future__ import annotations

from dataclasses import dataclass

from quorum.ids import Uuid
from quorum.metadata.image import MetadataImage

__all__ = ["IsrExpansion", "expansions"]


@dataclass(frozen=True, slots=True)
class IsrExpansion:
    topic_id: Uuid
    partition: int
    leader_epoch: int
    new_isr: tuple[int, ...]
    partition_epoch: int


def expansions(image: MetadataImage, broker_id: int) -> list[IsrExpansion]:
    """The partitions ``broker_id`` leads whose ISR lacks a registered, unfenced replica."""
    live = {b.broker_id for b in image.brokers.values() if not b.fenced}
    found = []
    for topic in image.topics_by_id.values():
        for index, state in topic.partitions.items():
            if state.leader != broker_id:
                continue
            new_isr = tuple(r for r in state.replicas if r in state.isr or r in live)
            if new_isr != state.isr:
                found.append(
                    IsrExpansion(
                        topic.topic_id, index, state.leader_epoch, new_isr, state.partition_epoch
                    )
                )
    return found
