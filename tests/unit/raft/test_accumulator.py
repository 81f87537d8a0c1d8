"""The leader's open batch (quorum/raft/accumulator.py) and fetch purgatory
(quorum/raft/purgatory.py)."""

from __future__ import annotations

from dataclasses import replace

from quorum.ids import METADATA_TOPIC_ID
from quorum.metadata.batch import decode_batch
from quorum.metadata.records import ConfigRecord, ConfigResourceType, Record
from quorum.raft.accumulator import BatchAccumulator
from quorum.raft.config import RaftConfig
from quorum.raft.messages import Envelope, FetchRequest, RequestHeader
from quorum.raft.purgatory import FetchPurgatory


def records(n: int, name: str = "t") -> list[Record]:
    return [ConfigRecord(ConfigResourceType.TOPIC, name, "k", str(i)) for i in range(n)]


def test_drain_encodes_one_batch_in_the_accumulator_epoch_and_empties_it() -> None:
    accumulator = BatchAccumulator(7, RaftConfig())
    assert accumulator.is_empty() and accumulator.drain(0, 0) is None
    accumulator.append(records(2, "a"), 10, now_ms=5)
    accumulator.append(records(3, "b"), 10, now_ms=9)
    assert accumulator.record_count == 5
    batch = accumulator.drain(40, now_ms=12)
    assert batch is not None
    assert (batch.base_offset, batch.epoch, batch.record_count) == (40, 7, 5)
    assert decode_batch(batch.data).records == tuple(records(2, "a") + records(3, "b"))
    assert accumulator.is_empty() and accumulator.drain_deadline_ms() is None


def test_fits_respects_both_limits() -> None:
    accumulator = BatchAccumulator(1, RaftConfig(records_per_batch_max=4, batch_bytes_max=100))
    accumulator.append(records(3), 60, now_ms=0)
    assert accumulator.fits(1, 40)
    assert not accumulator.fits(2, 1)  # records
    assert not accumulator.fits(1, 41)  # bytes


def test_linger_runs_from_the_first_record() -> None:
    config = RaftConfig(append_linger_ms=25, seal_batches_on_poll=False)
    accumulator = BatchAccumulator(1, config)
    assert not accumulator.needs_drain(1_000)
    accumulator.append(records(1), 1, now_ms=100)
    accumulator.append(records(1), 1, now_ms=120)
    assert accumulator.drain_deadline_ms() == 125
    assert not accumulator.needs_drain(124)
    assert accumulator.needs_drain(125)


def test_seal_on_poll_drains_at_once() -> None:
    accumulator = BatchAccumulator(1, RaftConfig(seal_batches_on_poll=True))
    accumulator.append(records(1), 1, now_ms=100)
    assert accumulator.needs_drain(100)


def test_a_held_batch_asks_to_be_polled_at_its_minimum_age_then_at_its_linger() -> None:
    """Under load (the batch waited for an earlier one), the hold ends at
    adaptive_batch_age_min_ms; without seal-on-poll the batch then waits for its linger, and
    the deadline it reports moves there (never a deadline already past: no busy polling)."""
    config = RaftConfig(append_linger_ms=25, adaptive_batch_age_min_ms=10)
    accumulator = BatchAccumulator(1, config)
    accumulator.append(records(1), 1, now_ms=100)
    assert not accumulator.needs_drain(102, in_flight=True)
    assert accumulator.drain_deadline_ms() == 125  # in flight: the linger bounds it
    assert not accumulator.needs_drain(104)  # the earlier batch committed: held ...
    assert accumulator.drain_deadline_ms() == 110  # ... until its minimum age
    assert accumulator.needs_drain(110)
    lingering = BatchAccumulator(1, replace(config, seal_batches_on_poll=False))
    lingering.append(records(1), 1, now_ms=100)
    assert not lingering.needs_drain(102, in_flight=True)
    assert not lingering.needs_drain(104)
    assert lingering.drain_deadline_ms() == 110
    assert not lingering.needs_drain(110)  # past its minimum age: waits for the linger
    assert lingering.drain_deadline_ms() == 125
    assert lingering.needs_drain(125)


def test_a_waiting_batch_says_until_when_proposals_still_join_it() -> None:
    """What a driver may gather operations for (``waits_until_ms``): only while the open
    batch waits anyway, never past its deadline, and without changing what ``needs_drain``
    decides."""
    config = RaftConfig(
        append_linger_ms=25, adaptive_batch_age_min_ms=10, adaptive_batch_records_min=8
    )
    accumulator = BatchAccumulator(1, config)
    assert accumulator.waits_until_ms(100, in_flight=True) is None  # nothing to join
    accumulator.append(records(2), 10, now_ms=100)
    assert accumulator.waits_until_ms(101, in_flight=False) is None  # sealed at the next poll
    assert accumulator.waits_until_ms(101, in_flight=True) == 125  # in flight: the linger
    assert accumulator.waits_until_ms(101, in_flight=True, queued=5) == 125
    assert accumulator.waits_until_ms(101, in_flight=True, queued=6) is None  # 8 records: full
    assert accumulator.waits_until_ms(125, in_flight=True) is None  # the linger is over
    assert not accumulator.needs_drain(102, in_flight=True)
    assert not accumulator.needs_drain(104)  # the earlier batch committed: held ...
    assert accumulator.waits_until_ms(104, in_flight=False) == 110  # ... to its minimum age
    assert accumulator.waits_until_ms(104, in_flight=False) == 110  # asking changed nothing
    assert accumulator.needs_drain(110)
    assert accumulator.drain(0, now_ms=110) is not None
    assert accumulator.waits_until_ms(110, in_flight=True) is None
    plain = BatchAccumulator(1, replace(config, adaptive_batching=False))
    plain.append(records(1), 1, now_ms=100)
    assert plain.waits_until_ms(101, in_flight=True) is None  # drained at each poll


def fetch(replica: int, offset: int, high_watermark: int = 0) -> Envelope:
    request = FetchRequest(
        RequestHeader("c", METADATA_TOPIC_ID, 0), replica, 1, offset, 1, 500, 1, high_watermark
    )
    return Envelope(replica, 1, replica * 10, request)


def test_purgatory_completes_on_news_or_deadline() -> None:
    purgatory = FetchPurgatory()
    purgatory.park(2, fetch(2, 5), deadline_ms=100)
    purgatory.park(3, fetch(3, 7), deadline_ms=50)
    purgatory.park(4, fetch(4, 7), deadline_ms=200)
    assert sorted(purgatory.deadlines_ms()) == [50, 100, 200]
    # The log now ends at 6: replica 2 has news; replica 3's wait is over at 50.
    done = purgatory.pop_completable(now_ms=50, log_end_offset=6)
    assert [e.source for e in done] == [2, 3]
    assert 4 in purgatory and len(purgatory) == 1
    assert purgatory.pop(4) is not None and purgatory.pop(4) is None
    purgatory.park(2, fetch(2, 5), deadline_ms=100)
    assert [e.source for e in purgatory.pop_all()] == [2]
    assert len(purgatory) == 0


def test_purgatory_keeps_when_each_fetcher_learned_of_a_newer_high_watermark() -> None:
    purgatory = FetchPurgatory()
    purgatory.park(2, fetch(2, 7, high_watermark=5), deadline_ms=500, news_since_ms=10)
    purgatory.park(3, fetch(3, 7, high_watermark=6), deadline_ms=500)
    purgatory.park(4, fetch(4, 7, high_watermark=7), deadline_ms=500)
    assert purgatory.oldest_news_ms() == 10
    # The high watermark moves to 7 at 12: news for 3 from then on; 2 had news already, 4
    # knows 7.
    purgatory.high_watermark_moved(7, now_ms=12)
    assert purgatory.oldest_news_ms() == 10
    assert purgatory.pop_completable(now_ms=14, log_end_offset=7, news_before_ms=9) == []
    assert [e.source for e in purgatory.pop_completable(14, 7, news_before_ms=10)] == [2]
    assert purgatory.oldest_news_ms() == 12
    assert purgatory.pop_completable(now_ms=16, log_end_offset=7, news_before_ms=11) == []
    assert [e.source for e in purgatory.pop_completable(17, 7, news_before_ms=12)] == [3]
    assert purgatory.oldest_news_ms() is None and 4 in purgatory
