"""Leader-only decisions (quorum/raft/leader.py): replica progress, the high watermark rule,
check quorum."""

from __future__ import annotations

from quorum.metadata.batch import encode_batch
from quorum.metadata.records import NoOpRecord
from quorum.raft.config import RaftConfig
from quorum.raft.leader import LeaderState
from quorum.raft.log import RaftLog

CONFIG = RaftConfig()


def log_of(epochs: list[int]) -> RaftLog:
    log = RaftLog()
    for offset, epoch in enumerate(epochs):
        log.append(
            encode_batch(base_offset=offset, epoch=epoch, timestamp_ms=0, records=[NoOpRecord()])
        )
    return log


def leader(
    log: RaftLog, voters: frozenset[int] = frozenset({1, 2, 3}), now_ms: int = 0
) -> LeaderState:
    return LeaderState.elected(
        epoch=2,
        local_id=1,
        voters=voters,
        log_end_offset=log.log_end_offset,
        now_ms=now_ms,
        config=CONFIG,
    )


def test_high_watermark_waits_for_a_majority_past_the_epoch_start() -> None:
    log = log_of([1, 1])  # offsets 0-1 from epoch 1
    state = leader(log)
    log.append(encode_batch(base_offset=2, epoch=2, timestamp_ms=0, records=[NoOpRecord()]))
    state.update_replica_state(2, 2, log.log_end_offset, 10, CONFIG)
    # A majority holds offsets 0-1, but they are of an older epoch: no commit by counting.
    assert not state.maybe_update_high_watermark(log, 3, CONFIG)
    assert log.high_watermark == 0
    state.update_replica_state(2, 3, log.log_end_offset, 20, CONFIG)
    assert state.maybe_update_high_watermark(log, 3, CONFIG)
    assert log.high_watermark == 3


def test_the_leader_counts_only_its_durable_end() -> None:
    """I8: the leader's own entry counts toward a majority only once fsynced."""
    log = log_of([1])
    state = leader(log)
    log.append(encode_batch(base_offset=1, epoch=2, timestamp_ms=0, records=[NoOpRecord()]))
    state.update_replica_state(2, 2, log.log_end_offset, 10, CONFIG)
    assert not state.maybe_update_high_watermark(log, durable_end_offset=1, config=CONFIG)
    assert log.high_watermark == 0
    assert state.maybe_update_high_watermark(log, durable_end_offset=2, config=CONFIG)
    assert log.high_watermark == 2


def test_fetches_acknowledge_and_observers_are_tracked_apart() -> None:
    log = log_of([1])
    state = leader(log)
    state.update_replica_state(3, 1, log.log_end_offset, 10, CONFIG)
    state.update_replica_state(100, 0, log.log_end_offset, 10, CONFIG)
    assert state.nonacknowledging_voters() == [2]
    assert list(state.observers) == [100]
    assert state.observers[100].last_caught_up_ms is None
    assert state.voters[3].last_caught_up_ms == 10
    voters, observers = state.describe_quorum(now_ms=11, log_end_offset=1)
    assert [v.replica_id for v in voters] == [1, 2, 3]
    assert [o.replica_id for o in observers] == [100]
    assert state.preferred_successors() == (3, 2)  # most caught-up first


def test_check_quorum_needs_a_majority_heard_recently() -> None:
    log = log_of([])
    state = leader(log, frozenset({1, 2, 3, 4, 5}), now_ms=0)
    timeout = CONFIG.check_quorum_timeout_ms
    assert state.has_quorum(state.fetched_voters(timeout, timeout))
    assert not state.has_quorum(state.fetched_voters(timeout + 1, timeout))
    state.update_replica_state(2, 0, 0, 100, CONFIG)
    state.update_replica_state(3, 0, 0, 200, CONFIG)
    assert state.fetched_voters(timeout + 150, timeout) == {1, 3}
    # The leader needs two others: the second most recent fetch (at 100) sets the deadline.
    assert state.check_quorum_deadline_ms(300, timeout) == 100 + timeout + 1


def test_a_single_voter_always_has_quorum() -> None:
    state = leader(log_of([]), frozenset({1}))
    assert state.has_quorum(state.fetched_voters(10**9, 1))
    assert state.check_quorum_deadline_ms(50, 10) == 60
