"""The leader's view of its followers (broker/replica/leader.py): the high watermark over the
maximal ISR, the caught-up rule, ISR expansion and shrink (docs/replication.md#the-leader)."""

from __future__ import annotations

from typing import Any

from broker.replica.leader import PartitionLeader
from broker.replica.without_data import IsrExpansion, expansions
from quorum.ids import Uuid
from quorum.metadata.delta import replay_records
from quorum.metadata.image import MetadataImage
from quorum.metadata.records import (
    BrokerEndpoint,
    FenceBrokerRecord,
    PartitionRecord,
    RegisterBrokerRecord,
    TopicRecord,
)

TOPIC = Uuid.random()
LAG_MS = 1_000


def leader(isr: tuple[int, ...] = (1, 2, 3), *, end: int = 0, now_ms: int = 0) -> PartitionLeader:
    return PartitionLeader.start(
        TOPIC,
        0,
        leader_id=1,
        leader_epoch=5,
        partition_epoch=7,
        replicas=(1, 2, 3),
        isr=isr,
        log_end_offset=end,
        now_ms=now_ms,
    )


def test_the_high_watermark_waits_for_every_isr_member_to_fetch() -> None:
    state = leader()
    assert state.high_watermark(10) == -1  # nobody fetched in this epoch yet
    state.follower_fetched(2, 10, 10, now_ms=1)
    assert state.high_watermark(10) == -1
    state.follower_fetched(3, 6, 10, now_ms=1)
    assert state.high_watermark(10) == 6
    state.follower_fetched(3, 10, 10, now_ms=2)
    assert state.high_watermark(12) == 10


def test_an_isr_of_the_leader_alone_commits_at_its_log_end_offset() -> None:
    state = leader(isr=(1,))
    assert state.high_watermark(42) == 42


def test_a_replica_being_added_counts_for_the_high_watermark_at_once() -> None:
    state = leader(isr=(1, 2))
    state.follower_fetched(2, 9, 9, now_ms=1)
    state.follower_fetched(3, 4, 9, now_ms=1)
    assert state.high_watermark(9) == 9
    state.pending_isr = (1, 2, 3)  # KIP-841: the maximal ISR
    assert state.high_watermark(9) == 4


def test_a_follower_that_fetches_everything_there_was_at_its_last_fetch_is_caught_up() -> None:
    state = leader(now_ms=0)
    follower = state.followers[2]
    state.follower_fetched(2, 5, 10, now_ms=100)  # behind: not caught up
    assert follower.last_caught_up_ms == 0
    state.follower_fetched(2, 10, 20, now_ms=200)  # reached the end as of its last fetch
    assert follower.last_caught_up_ms == 100
    state.follower_fetched(2, 20, 20, now_ms=300)
    assert follower.last_caught_up_ms == 300


def test_a_caught_up_eligible_follower_joins_and_a_fenced_one_does_not() -> None:
    state = leader(isr=(1,), end=4)
    state.follower_fetched(2, 3, 10, now_ms=1)
    assert state.expansion(high_watermark=10, eligible={1, 2, 3}) is None  # behind the HW
    state.follower_fetched(2, 10, 10, now_ms=2)
    state.follower_fetched(3, 10, 10, now_ms=2)
    assert state.expansion(high_watermark=10, eligible={1, 2}) == (1, 2)
    assert state.expansion(high_watermark=10, eligible={1, 2, 3}) == (1, 2, 3)
    state.pending_isr = (1, 2)
    assert state.expansion(high_watermark=10, eligible={1, 2, 3}) is None  # one at a time


def test_a_follower_must_reach_the_start_of_the_leaders_epoch_to_join() -> None:
    state = leader(isr=(1,), end=50)
    state.follower_fetched(2, 40, 40, now_ms=1)
    assert state.expansion(high_watermark=40, eligible={2}) is None
    state.follower_fetched(2, 50, 50, now_ms=2)
    assert state.expansion(high_watermark=50, eligible={2}) == (1, 2)


def test_a_member_lagging_longer_than_the_lag_time_leaves_and_the_leader_stays() -> None:
    state = leader(now_ms=0)
    state.follower_fetched(2, 0, 0, now_ms=900)
    assert state.shrink(now_ms=LAG_MS, lag_time_max_ms=LAG_MS) is None
    # Broker 3 never fetched; broker 2 keeps up.
    state.follower_fetched(2, 0, 0, now_ms=1_500)
    assert state.shrink(now_ms=LAG_MS + 1, lag_time_max_ms=LAG_MS) == (1, 2)
    state.pending_isr = (1, 2)
    assert state.shrink(now_ms=LAG_MS * 5, lag_time_max_ms=LAG_MS) is None


def test_images_and_answers_with_older_partition_epochs_change_nothing() -> None:
    state = leader()
    state.pending_isr = (1, 2)
    state.committed(8, (1, 2))
    assert (state.partition_epoch, state.isr, state.pending_isr) == (8, (1, 2), None)
    state.update(7, (1, 2, 3), (1, 2, 3), now_ms=5)  # an image older than the answer
    assert (state.partition_epoch, state.isr) == (8, (1, 2))
    state.update(9, (1, 2, 3), (1, 2, 3), now_ms=5)
    assert (state.partition_epoch, state.isr) == (9, (1, 2, 3))


def test_a_leader_without_data_adds_back_live_replicas_only() -> None:
    """broker/replica/without_data.py: registered and unfenced replicas rejoin; a fenced one and
    partitions led elsewhere are left alone."""
    records: list[Any] = [
        RegisterBrokerRecord(b, Uuid.random(), b - 1, (BrokerEndpoint("B", "h", b),), None, False)
        for b in (1, 2, 3)
    ]
    records.append(FenceBrokerRecord(3, 2))
    records.append(TopicRecord("t", TOPIC))
    records.append(PartitionRecord(TOPIC, 0, (1, 2, 3), (1,), 1, 4, 6))
    records.append(PartitionRecord(TOPIC, 1, (2, 1), (2,), 2, 0, 0))
    image = replay_records(MetadataImage.EMPTY, enumerate(records))
    assert expansions(image, 1) == [IsrExpansion(TOPIC, 0, 4, (1, 2), 6)]
    assert expansions(image, 2) == [IsrExpansion(TOPIC, 1, 0, (2, 1), 0)]
    assert expansions(image, 3) == []
