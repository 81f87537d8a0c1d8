"""The core's in-memory log (quorum/raft/log.py): Kafka's validateOffsetAndEpoch, and the
follower-side fetch bookkeeping (quorum/raft/fetcher.py)."""

from __future__ import annotations

from quorum.metadata.batch import encode_batch
from quorum.metadata.records import NoOpRecord
from quorum.raft.fetcher import Fetcher
from quorum.raft.log import FetchPosition, RaftLog, ValidOffsetAndEpoch
from quorum.raft.messages import SnapshotId


def log_of(epochs: list[int], start: int = 0, snapshot_epoch: int = 0) -> RaftLog:
    log = RaftLog(log_start_offset=start, snapshot_epoch=snapshot_epoch)
    for i, epoch in enumerate(epochs):
        batch = encode_batch(
            base_offset=start + i, epoch=epoch, timestamp_ms=0, records=[NoOpRecord()]
        )
        log.append(batch)
    return log


def test_a_prefix_is_valid() -> None:
    log = log_of([1, 1, 2, 3])
    assert log.validate_offset_and_epoch(0, 0).position is FetchPosition.VALID
    assert log.validate_offset_and_epoch(3, 2).position is FetchPosition.VALID
    assert log.validate_offset_and_epoch(4, 3).position is FetchPosition.VALID


def test_divergence_names_the_end_of_the_shared_epoch() -> None:
    log = log_of([1, 1, 3])
    # The fetcher has epoch 2 entries this log never had: truncate to the end of epoch 1.
    assert log.validate_offset_and_epoch(3, 2) == ValidOffsetAndEpoch(FetchPosition.DIVERGING, 1, 2)
    # The fetcher claims more of epoch 1 than this log holds.
    assert log.validate_offset_and_epoch(5, 1) == ValidOffsetAndEpoch(FetchPosition.DIVERGING, 1, 2)


def test_behind_the_log_start_or_diverging_inside_the_snapshot_means_snapshot() -> None:
    log = log_of([3, 3], start=10, snapshot_epoch=2)
    snapshot = ValidOffsetAndEpoch(FetchPosition.SNAPSHOT, 2, 10)
    assert log.validate_offset_and_epoch(5, 1) == snapshot
    assert log.validate_offset_and_epoch(10, 1) == snapshot  # epoch 1 ended inside the snapshot
    assert log.validate_offset_and_epoch(10, 2).position is FetchPosition.VALID
    assert log.validate_offset_and_epoch(12, 3).position is FetchPosition.VALID


def test_fetcher_backoff_snapshot_and_observer_round_robin() -> None:
    fetcher = Fetcher()
    assert fetcher.may_fetch(0)
    fetcher.retry_after(100, 20)
    assert not fetcher.may_fetch(119) and fetcher.may_fetch(120)
    fetcher.fetching_snapshot = SnapshotId(10, 2)
    assert not fetcher.may_fetch(1_000)
    fetcher.fetching_snapshot = None
    fetcher.retry_now(5)
    assert fetcher.may_fetch(5)
    voters = frozenset({3, 1, 2})
    assert [fetcher.next_observer_target(voters) for _ in range(4)] == [1, 2, 3, 1]
