"""Replica placement for new partitions: round-robin over unfenced brokers, rack-aware.

Brokers are first put in a rack-alternated order (Kafka's ``getRackAlternatedBrokerList``):
racks sorted by name (brokers without a rack form one more "rack", last), brokers within a rack
by id, then one broker from each rack in turn. Partition ``p`` starts at position
``start + p`` of that order, so leaders (the first replica) go round-robin over all brokers
from a random start; followers are the next brokers in the order, skipping a broker whose rack
the partition already uses as long as some unused rack remains. So every partition's replicas
sit on distinct racks whenever the replication factor is at most the number of racks, and are
spread as evenly as possible otherwise.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence

from quorum.metadata.image import BrokerImage

__all__ = ["place_replicas", "rack_alternated_order"]


def rack_alternated_order(brokers: Sequence[BrokerImage]) -> tuple[BrokerImage, ...]:
    by_rack: dict[str | None, list[BrokerImage]] = {}
    for broker in sorted(brokers, key=lambda b: b.broker_id):
        by_rack.setdefault(broker.rack, []).append(broker)
    racks = sorted(by_rack, key=lambda rack: (rack is None, rack or ""))
    queues = [deque(by_rack[rack]) for rack in racks]
    order: list[BrokerImage] = []
    while len(order) < len(brokers):
        for queue in queues:
            if queue:
                order.append(queue.popleft())
    return tuple(order)


def place_replicas(
    brokers: Sequence[BrokerImage],
    *,
    num_partitions: int,
    replication_factor: int,
    start: int,
) -> tuple[tuple[int, ...], ...]:
    """Replica lists (leader first) for partitions ``0..num_partitions-1``.

    ``brokers`` are the unfenced brokers; ``1 <= replication_factor <= len(brokers)``.
    ``start`` (any int, reduced modulo the broker count) is the caller's random draw.
    """
    assert 1 <= replication_factor <= len(brokers), (replication_factor, len(brokers))
    assert num_partitions >= 1, num_partitions
    order = rack_alternated_order(brokers)
    count = len(order)
    rack_count = len({broker.rack for broker in order})
    placements: list[tuple[int, ...]] = []
    for partition in range(num_partitions):
        first = (start + partition) % count
        chosen: list[int] = []
        used_racks: set[str | None] = set()
        skipped: deque[BrokerImage] = deque()
        scanned = 0
        while len(chosen) < replication_factor:
            if len(used_racks) == rack_count and skipped:
                # Every rack is used: brokers passed over earlier come first.
                chosen.append(skipped.popleft().broker_id)
                continue
            assert scanned < count, "replication factor above the broker count"
            broker = order[(first + scanned) % count]
            scanned += 1
            if broker.rack in used_racks and len(used_racks) < rack_count:
                skipped.append(broker)
                continue
            chosen.append(broker.broker_id)
            used_racks.add(broker.rack)
        placements.append(tuple(chosen))
    return tuple(placements)
