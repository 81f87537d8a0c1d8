"""The active controller's index of which partitions each broker replicates (Kafka's
``BrokersToIsrs``, keyed by replica): fencing and unfencing a broker visit its own partitions
instead of every partition of the cluster (with a million partitions over a hundred brokers,
about 30,000 instead of a million).

Mutable and owned by ``ControllerStateMachine``, which keeps it equal to its latest image:
each replayed delta moves only the partitions whose replicas changed
(``MetadataDelta.replica_moves``), and a reset to another image rebuilds it (rare: a lost
leadership with proposals pending, a snapshot installed). Not in ``MetadataImage``: a
persistent copy-on-write index there made every creation's replay more than twice as slow.

Masks: topic id -> int, bit p set when the broker replicates partition p (small masks are
CPython's shared small ints, so millions of entries stay cheap).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping

from quorum.ids import Uuid
from quorum.metadata.image import MetadataImage, PartitionImage, TopicImage

__all__ = ["BrokerPartitionIndex", "partition_numbers"]


def partition_numbers(mask: int) -> Iterator[int]:
    """The partitions a mask holds, ascending."""
    partition = 0
    while mask:
        if mask & 1:
            yield partition
        mask >>= 1
        partition += 1


class BrokerPartitionIndex:
    """broker id -> topic id -> mask of the partitions it replicates."""

    __slots__ = ("_by_broker",)

    def __init__(self, image: MetadataImage = MetadataImage.EMPTY) -> None:
        self._by_broker: dict[int, dict[Uuid, int]] = {}
        self.rebuild(image)

    def rebuild(self, image: MetadataImage) -> None:
        """Index ``image`` from scratch: O(partitions)."""
        index: dict[int, dict[Uuid, int]] = {}
        for topic in image.topics_by_id.values():
            topic_id = topic.topic_id
            for state in topic.partitions.values():
                bit = 1 << state.partition
                for broker_id in state.replicas:
                    topics = index.get(broker_id)
                    if topics is None:
                        topics = index[broker_id] = {}
                    topics[topic_id] = topics.get(topic_id, 0) | bit
        self._by_broker = index

    def move(
        self, added: Mapping[int, Mapping[Uuid, int]], dropped: Mapping[int, Mapping[Uuid, int]]
    ) -> None:
        """Apply ``MetadataDelta.replica_moves()`` of the delta that led to the next image."""
        index = self._by_broker
        for broker_id, topics in dropped.items():
            own = index.get(broker_id)
            if own is None:
                continue
            for topic_id, mask in topics.items():
                left = own.get(topic_id, 0) & ~mask
                if left:
                    own[topic_id] = left
                else:
                    own.pop(topic_id, None)
            if not own:
                del index[broker_id]
        for broker_id, topics in added.items():
            own = index.get(broker_id)
            if own is None:
                index[broker_id] = dict(topics)
                continue
            for topic_id, mask in topics.items():
                old = own.get(topic_id)
                own[topic_id] = mask if old is None else old | mask

    def masks(self, broker_id: int) -> Mapping[Uuid, int]:
        """Topic id -> mask for one broker (empty if it replicates nothing)."""
        return self._by_broker.get(broker_id, {})

    def as_dict(self) -> dict[int, dict[Uuid, frozenset[int]]]:
        """The whole index as plain sets (for tests and debugging)."""
        return {
            broker_id: {t: frozenset(partition_numbers(m)) for t, m in topics.items()}
            for broker_id, topics in self._by_broker.items()
        }

    def partitions_of(
        self, image: MetadataImage, broker_ids: Iterable[int]
    ) -> Iterator[tuple[TopicImage, PartitionImage]]:
        """Every partition of ``image`` any of ``broker_ids`` replicates, once each, by topic
        id then partition (the index must be ``image``'s)."""
        wanted: dict[Uuid, int] = {}
        for broker_id in broker_ids:
            for topic_id, mask in self.masks(broker_id).items():
                wanted[topic_id] = wanted.get(topic_id, 0) | mask
        for topic_id in sorted(wanted, key=lambda t: t.bytes):
            topic = image.topics_by_id[topic_id]
            for partition in partition_numbers(wanted[topic_id]):
                yield topic, topic.partitions[partition]
