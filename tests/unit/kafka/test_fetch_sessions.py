"""The leader's fetch session cache (broker/kafka/fetch_sessions.py, KIP-227) driven directly:
epochs, add/update/forget, which partitions an incremental answer carries, eviction, an
unknown id. Session ids come from a seeded ``random.Random``."""

from __future__ import annotations

import random

import pytest

from broker.kafka.fetch_sessions import (
    FETCH_SESSION_ID_NOT_FOUND,
    FINAL_EPOCH,
    INITIAL_EPOCH,
    INVALID_SESSION_ID,
    FetchContext,
    FetchSessionCache,
    PartitionAnswer,
    PartitionKey,
    PartitionRequest,
    next_epoch,
)
from quorum.ids import Uuid

SEED = 227
TOPIC = Uuid.random()
A: PartitionKey = (TOPIC, 0)
B: PartitionKey = (TOPIC, 1)
C: PartitionKey = (TOPIC, 2)


def wanted(offset: int) -> PartitionRequest:
    return PartitionRequest(fetch_offset=offset, partition_max_bytes=1 << 20)


def idle(high_watermark: int = 5) -> PartitionAnswer:
    return PartitionAnswer(0, high_watermark, high_watermark, 0)


def context(
    cache: FetchSessionCache,
    session_id: int,
    epoch: int,
    fetch: list[tuple[PartitionKey, PartitionRequest]],
    *,
    forgotten: list[PartitionKey] | None = None,
    now_ms: int = 0,
    privileged: bool = True,
    uses_topic_ids: bool = True,
) -> FetchContext:
    return FetchContext.of(
        cache,
        now_ms,
        session_id=session_id,
        epoch=epoch,
        fetch=fetch,
        forgotten=forgotten or [],
        uses_topic_ids=uses_topic_ids,
        privileged=privileged,
    )


def open_session(
    cache: FetchSessionCache,
    keys: list[PartitionKey],
    *,
    now_ms: int = 0,
    privileged: bool = True,
) -> int:
    full = context(
        cache, 0, INITIAL_EPOCH, [(k, wanted(5)) for k in keys], now_ms=now_ms,
        privileged=privileged,
    )  # fmt: skip
    error, session_id, chosen = full.respond(cache, now_ms, [(k, idle()) for k in keys])
    assert error == 0 and chosen is None  # a full answer carries every partition
    return session_id


@pytest.fixture
def cache() -> FetchSessionCache:
    print(f"seed {SEED}")
    return FetchSessionCache(10, random.Random(SEED))


def test_next_epoch_wraps_to_one_and_keeps_final() -> None:
    assert next_epoch(INITIAL_EPOCH) == 1
    assert next_epoch(41) == 42
    assert next_epoch(2**31 - 1) == 1
    assert next_epoch(FINAL_EPOCH) == FINAL_EPOCH


def test_a_full_fetch_opens_a_session_expecting_epoch_one(cache: FetchSessionCache) -> None:
    session_id = open_session(cache, [A, B])
    assert session_id != INVALID_SESSION_ID
    session = cache.get(session_id)
    assert session is not None and session.epoch == 1
    assert list(session.partitions) == [A, B]
    assert session.partitions[A].high_watermark == 5  # what the full answer told


def test_epoch_minus_one_is_sessionless_and_closes_the_named_session(
    cache: FetchSessionCache,
) -> None:
    sessionless = context(cache, 0, FINAL_EPOCH, [(A, wanted(0))])
    assert sessionless.respond(cache, 0, [(A, idle())]) == (0, INVALID_SESSION_ID, None)
    assert len(cache) == 0
    session_id = open_session(cache, [A])
    closing = context(cache, session_id, FINAL_EPOCH, [(A, wanted(0))])
    assert cache.get(session_id) is None
    assert closing.respond(cache, 0, [(A, idle())]) == (0, INVALID_SESSION_ID, None)
    assert len(cache) == 0


def test_a_full_fetch_naming_a_session_replaces_it(cache: FetchSessionCache) -> None:
    old = open_session(cache, [A])
    again = context(cache, old, INITIAL_EPOCH, [(B, wanted(0))])
    assert cache.get(old) is None
    _, new, _ = again.respond(cache, 0, [(B, idle())])
    assert new not in (old, INVALID_SESSION_ID)
    session = cache.get(new)
    assert session is not None and list(session.partitions) == [B]


def test_unknown_id_wrong_epoch_and_topic_naming_are_refused(cache: FetchSessionCache) -> None:
    unknown = context(cache, 12345, 1, [])
    assert unknown.error_code == 70 and "12345" in unknown.message  # FETCH_SESSION_ID_NOT_FOUND
    assert unknown.respond(cache, 0, []) == (70, INVALID_SESSION_ID, [])
    session_id = open_session(cache, [A])
    stale = context(cache, session_id, 2, [])
    assert stale.error_code == 71 and "expects epoch 1" in stale.message
    by_name = context(cache, session_id, 1, [], uses_topic_ids=False)
    assert by_name.error_code == 106  # FETCH_SESSION_TOPIC_ID_ERROR
    session = cache.get(session_id)
    assert session is not None and session.epoch == 1  # refusals move nothing


def test_incremental_requests_add_update_and_forget(cache: FetchSessionCache) -> None:
    session_id = open_session(cache, [A, B])
    step = context(cache, session_id, 1, [(B, wanted(9)), (C, wanted(0))], forgotten=[A])
    assert [key for key, _ in step.partitions] == [B, C]  # the whole session is read
    session = cache.get(session_id)
    assert session is not None and session.epoch == 2
    assert session.partitions[B].request.fetch_offset == 9
    step = context(cache, session_id, 2, [])  # nothing named: the session's positions stay
    assert [(key, r.fetch_offset) for key, r in step.partitions] == [(B, 9), (C, 0)]


def test_an_incremental_answer_carries_only_what_changed(cache: FetchSessionCache) -> None:
    session_id = open_session(cache, [A, B, C])
    step = context(cache, session_id, 1, [])
    answers = [(A, idle()), (B, idle(6)), (C, idle())]
    assert step.respond(cache, 0, answers) == (0, session_id, [1])  # B's high watermark moved
    step = context(cache, session_id, 2, [])
    assert step.respond(cache, 0, [(A, idle()), (B, idle(6)), (C, idle())])[2] == []
    changes = [
        PartitionAnswer(0, 5, 5, 0, records_bytes=100),
        PartitionAnswer(0, 5, 5, 3),  # log start offset
        PartitionAnswer(0, 5, 4, 0),  # last stable offset
        PartitionAnswer(0, 5, 5, 0, diverging=True),
        PartitionAnswer(0, 5, 5, 0, preferred_read_replica=2),
        PartitionAnswer(6, -1, -1, -1),  # an error
    ]
    for number, change in enumerate(changes):
        fresh = FetchSessionCache(10, random.Random(SEED + number))
        sid = open_session(fresh, [A])
        assert context(fresh, sid, 1, []).respond(fresh, 0, [(A, change)])[2] == [0], change


def test_an_error_is_followed_by_the_partition_again(cache: FetchSessionCache) -> None:
    session_id = open_session(cache, [A])
    context(cache, session_id, 1, []).respond(cache, 0, [(A, PartitionAnswer(6, 5, 5, 0))])
    # the same offsets as before the error: sent again, so the client sees the error is gone
    assert context(cache, session_id, 2, []).respond(cache, 0, [(A, idle())])[2] == [0]
    assert context(cache, session_id, 3, []).respond(cache, 0, [(A, idle())])[2] == []


def test_a_partition_with_records_moves_to_the_end(cache: FetchSessionCache) -> None:
    session_id = open_session(cache, [A, B, C])
    answers = [(A, PartitionAnswer(0, 5, 5, 0, records_bytes=10)), (B, idle()), (C, idle())]
    context(cache, session_id, 1, []).respond(cache, 0, answers)
    step = context(cache, session_id, 2, [])
    assert [key for key, _ in step.partitions] == [B, C, A]


def test_a_session_used_meanwhile_answers_invalid_epoch(cache: FetchSessionCache) -> None:
    session_id = open_session(cache, [A])
    parked = context(cache, session_id, 1, [])
    context(cache, session_id, 2, [])  # a later request of the session came first
    assert parked.respond(cache, 0, [(A, idle())]) == (71, INVALID_SESSION_ID, [])


def test_eviction_prefers_followers_then_bigger_sessions() -> None:
    print(f"seed {SEED}")
    cache = FetchSessionCache(2, random.Random(SEED))
    consumer = open_session(cache, [A], now_ms=0, privileged=False)
    follower = open_session(cache, [A, B], now_ms=1)
    # a consumer's session of the same size as the smallest finds no room
    assert open_session(cache, [A], now_ms=2, privileged=False) == INVALID_SESSION_ID
    # a follower's evicts the consumer's
    newcomer = open_session(cache, [A], now_ms=3)
    assert newcomer != INVALID_SESSION_ID and cache.get(consumer) is None
    assert cache.evictions == 1
    # among followers, a bigger newcomer evicts the smallest; an equal one does not
    assert open_session(cache, [A], now_ms=4) == INVALID_SESSION_ID
    bigger = open_session(cache, [A, B, C], now_ms=5)
    assert bigger != INVALID_SESSION_ID and cache.get(newcomer) is None
    assert cache.get(follower) is not None


def test_a_session_unused_past_the_eviction_time_goes_first() -> None:
    cache = FetchSessionCache(2, random.Random(SEED), eviction_ms=1_000)
    big = open_session(cache, [A, B, C], now_ms=0)
    other = open_session(cache, [A, B, C], now_ms=500)
    context(cache, other, 1, [], now_ms=900)  # used recently
    small = open_session(cache, [A], now_ms=1_200, privileged=False)
    assert small != INVALID_SESSION_ID
    assert cache.get(big) is None and cache.get(other) is not None


def test_no_slots_means_no_sessions() -> None:
    cache = FetchSessionCache(0, random.Random(SEED))
    assert open_session(cache, [A]) == INVALID_SESSION_ID


def test_session_ids_are_non_zero_and_unique() -> None:
    seed = random.randrange(2**32)
    print(f"seed {seed}")
    cache = FetchSessionCache(500, random.Random(seed))
    ids = {open_session(cache, [A]) for _ in range(500)}
    assert len(ids) == 500 and INVALID_SESSION_ID not in ids
    assert all(-(2**31) <= i < 2**31 for i in ids)


def test_a_session_cannot_outgrow_its_bound_or_the_caches() -> None:
    """A hostile client naming new partitions request after request: its session is closed
    once it would pass the bound, and a full fetch past it gets no session."""
    cache = FetchSessionCache(10, random.Random(SEED), session_partitions_max=3, partitions_max=5)
    session_id = open_session(cache, [A, B])
    grown = context(cache, session_id, 1, [(C, wanted(0))])
    assert grown.error_code == 0 and len(grown.partitions) == 3
    past = context(cache, session_id, 2, [((TOPIC, 3), wanted(0))])
    assert past.error_code == FETCH_SESSION_ID_NOT_FOUND
    assert "at most 3 partitions" in past.message and cache.get(session_id) is None
    too_big = [(TOPIC, p) for p in range(4)]
    full = context(cache, 0, INITIAL_EPOCH, [(k, wanted(0)) for k in too_big])
    assert full.respond(cache, 0, [(k, idle()) for k in too_big])[1] == INVALID_SESSION_ID
    # The cache's total: two sessions of 3 would hold 6 > 5.
    first = open_session(cache, [A, B, C])
    assert first != INVALID_SESSION_ID
    other = [(Uuid.random(), p) for p in range(3)]
    full = context(cache, 0, INITIAL_EPOCH, [(k, wanted(0)) for k in other])
    assert full.respond(cache, 0, [(k, idle()) for k in other])[1] == INVALID_SESSION_ID
    second = open_session(cache, other[:2])
    assert second != INVALID_SESSION_ID
    grown = context(cache, second, 1, [(other[2], wanted(0))])
    assert grown.error_code == FETCH_SESSION_ID_NOT_FOUND and "together" in grown.message
