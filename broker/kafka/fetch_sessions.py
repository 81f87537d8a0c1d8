"""The leader's cache of incremental fetch sessions (KIP-227, Kafka's ``FetchSession``), pure:
no I/O, time as ``now_ms``, randomness a ``random.Random`` passed in
(docs/kafka-listener.md#fetch-sessions).

A Fetch names a session by ``session_id`` and ``session_epoch``:

- epoch 0 (a full fetch) closes the session it names, if any, and opens a new one holding the
  request's partitions, if the cache has room (else it is answered with session id 0, and the
  client keeps sending full fetches);
- epoch -1 (also full) closes the session it names and opens none: answered in full with
  session id 0 ("no session", what librdkafka always sends);
- any other epoch is incremental: the session must exist (FETCH_SESSION_ID_NOT_FOUND), expect
  exactly this epoch (INVALID_FETCH_SESSION_EPOCH) and name topics the way the request does, by
  id from v13 or by name before (FETCH_SESSION_TOPIC_ID_ERROR). The request's partitions are
  added to the session or replace what it held for them, ``forgotten_topics_data`` leaves it,
  and the fetch reads every partition of the session. The session then expects the next epoch
  (after 2**31 - 1 comes 1).

An incremental answer carries only the partitions that changed since the session last told the
client about them (Kafka's rule): records, a new high watermark, last stable offset or log start
offset, an error (which also forgets the high watermark told, so the partition is sent again
after it), a diverging epoch, or a preferred read replica. A partition that answered records
moves to the end of the session, so the others come first in the next answer's byte budget.

Room (``max.incremental.fetch.session.cache.slots`` sessions), Kafka's eviction in this form: a
new session evicts the least recently used one when that one has not been used for
``EVICTION_MS``; otherwise the least valuable session, ranked by (privileged, number of
partitions, least recently used) with followers' sessions privileged over consumers', when the
newcomer ranks above it (a follower over any consumer; among equals, a bigger session over a
smaller one). Sessions are keyed by id alone, not by connection: a client may carry its session
over a new connection.

Bounds (``quorum/limits.py``): a session holds at most ``FETCH_SESSION_PARTITIONS_MAX``
partitions and all sessions together ``FETCH_SESSION_CACHE_PARTITIONS_MAX``. An incremental
request that would grow its session past either closes it (FETCH_SESSION_ID_NOT_FOUND: the
client sends a full fetch); a full fetch past them is answered without a session.
"""

from __future__ import annotations

import random
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Final

from quorum.ids import Uuid
from quorum.limits import FETCH_SESSION_CACHE_PARTITIONS_MAX, FETCH_SESSION_PARTITIONS_MAX

__all__ = [
    "EVICTION_MS",
    "FINAL_EPOCH",
    "INITIAL_EPOCH",
    "INVALID_SESSION_ID",
    "CachedPartition",
    "FetchContext",
    "FetchSession",
    "FetchSessionCache",
    "PartitionAnswer",
    "PartitionKey",
    "PartitionRequest",
    "next_epoch",
]

INVALID_SESSION_ID: Final = 0
INITIAL_EPOCH: Final = 0
FINAL_EPOCH: Final = -1
INT32_MAX: Final = 2**31 - 1
# Kafka's MIN_INCREMENTAL_FETCH_SESSION_EVICTION_MS: an unused session older than this goes
# first.
EVICTION_MS: Final = 120_000
NO_OFFSET: Final = -1

ERROR_NONE: Final = 0
FETCH_SESSION_ID_NOT_FOUND: Final = 70
INVALID_FETCH_SESSION_EPOCH: Final = 71
FETCH_SESSION_TOPIC_ID_ERROR: Final = 106

# (the topic: its id from v13, its name before; the partition index)
PartitionKey = tuple[Uuid | str, int]


def next_epoch(epoch: int) -> int:
    """The epoch a session expects after ``epoch`` (Kafka's FetchMetadata.nextEpoch)."""
    if epoch < 0:
        return FINAL_EPOCH
    return 1 if epoch == INT32_MAX else epoch + 1


@dataclass(frozen=True, slots=True)
class PartitionRequest:
    """What a Fetch asks of one partition."""

    fetch_offset: int
    partition_max_bytes: int
    current_leader_epoch: int = -1
    last_fetched_epoch: int = -1
    log_start_offset: int = -1


@dataclass(frozen=True, slots=True)
class PartitionAnswer:
    """What the leader answers for one partition, as far as the session cares."""

    error_code: int
    high_watermark: int
    last_stable_offset: int
    log_start_offset: int
    records_bytes: int = 0
    diverging: bool = False
    preferred_read_replica: int = -1


@dataclass(slots=True)
class CachedPartition:
    """One partition of a session: the client's last request for it and what the session last
    told the client (-1: nothing yet, so the first answer always carries it)."""

    request: PartitionRequest
    high_watermark: int = NO_OFFSET
    last_stable_offset: int = NO_OFFSET
    log_start_offset: int = NO_OFFSET

    def must_respond(self, answer: PartitionAnswer, *, update: bool) -> bool:
        """Whether an incremental answer carries this partition (Kafka's rule); ``update``
        records what it tells the client."""
        respond = answer.records_bytes > 0
        if answer.high_watermark != self.high_watermark:
            respond = True
            if update:
                self.high_watermark = answer.high_watermark
        if answer.last_stable_offset != self.last_stable_offset:
            respond = True
            if update:
                self.last_stable_offset = answer.last_stable_offset
        if answer.log_start_offset != self.log_start_offset:
            respond = True
            if update:
                self.log_start_offset = answer.log_start_offset
        if answer.preferred_read_replica >= 0 or answer.diverging:
            respond = True
        if answer.error_code != ERROR_NONE:
            respond = True
            if update:  # told again once the error is gone
                self.high_watermark = NO_OFFSET
        return respond


@dataclass(slots=True)
class FetchSession:
    id: int
    privileged: bool
    uses_topic_ids: bool
    created_ms: int
    last_used_ms: int
    epoch: int
    # insertion-ordered: the order in which the fetch reads and answers them
    partitions: dict[PartitionKey, CachedPartition] = field(default_factory=dict)

    def update(
        self,
        fetch: Iterable[tuple[PartitionKey, PartitionRequest]],
        forgotten: Iterable[PartitionKey],
    ) -> tuple[int, int, int]:
        """An incremental request's partitions and forgotten partitions applied: how many were
        (added, updated, removed)."""
        added = updated = removed = 0
        for key, request in fetch:
            cached = self.partitions.get(key)
            if cached is None:
                self.partitions[key] = CachedPartition(request)
                added += 1
            else:
                cached.request = request
                updated += 1
        for key in forgotten:
            if self.partitions.pop(key, None) is not None:
                removed += 1
        return added, updated, removed

    def rank(self) -> tuple[bool, int, int]:
        """Lowest first for eviction: consumers before followers, smaller before bigger, older
        before newer."""
        return (self.privileged, len(self.partitions), self.last_used_ms)


class FetchSessionCache:
    def __init__(
        self,
        max_entries: int,
        rng: random.Random,
        *,
        eviction_ms: int = EVICTION_MS,
        session_partitions_max: int = FETCH_SESSION_PARTITIONS_MAX,
        partitions_max: int = FETCH_SESSION_CACHE_PARTITIONS_MAX,
    ) -> None:
        self.max_entries = max_entries
        self.session_partitions_max = session_partitions_max
        self.partitions_max = partitions_max
        self._rng = rng
        self._eviction_ms = eviction_ms
        self._sessions: dict[int, FetchSession] = {}
        # counts for metrics (read by the scrape thread)
        self.evictions = 0
        self.incremental_fetches = 0
        self.partitions_requested = 0
        self.partitions_answered = 0

    def __len__(self) -> int:
        return len(self._sessions)

    def sessions(self) -> list[FetchSession]:
        """The sessions now (a copy: safe from another thread)."""
        return list(self._sessions.values())

    def get(self, session_id: int) -> FetchSession | None:
        return self._sessions.get(session_id)

    def remove(self, session_id: int) -> FetchSession | None:
        return self._sessions.pop(session_id, None)

    def partitions_cached(self) -> int:
        """Partitions held by all sessions (O(sessions): asked only when one grows)."""
        return sum(len(session.partitions) for session in self._sessions.values())

    def over_bounds(self, session: FetchSession) -> str | None:
        """Why ``session`` (just grown) may not be kept, or None."""
        if len(session.partitions) > self.session_partitions_max:
            return (
                f"a fetch session holds at most {self.session_partitions_max} partitions "
                f"(this one would hold {len(session.partitions)})"
            )
        if (total := self.partitions_cached()) > self.partitions_max:
            return (
                f"this broker's fetch sessions hold at most {self.partitions_max} partitions "
                f"together ({total} with this request)"
            )
        return None

    def touch(self, session: FetchSession, now_ms: int) -> None:
        session.last_used_ms = now_ms

    def maybe_create(
        self,
        now_ms: int,
        *,
        privileged: bool,
        uses_topic_ids: bool,
        partitions: dict[PartitionKey, CachedPartition],
    ) -> int:
        """A new session holding ``partitions`` (its id), or INVALID_SESSION_ID when there is no
        room and no session may be evicted for it."""
        if self.max_entries <= 0 or len(partitions) > self.session_partitions_max:
            return INVALID_SESSION_ID
        if self.partitions_cached() + len(partitions) > self.partitions_max:
            return INVALID_SESSION_ID  # answered without a session, as when no slot is free
        if len(self._sessions) >= self.max_entries and not self._evict_for(
            privileged, len(partitions), now_ms
        ):
            return INVALID_SESSION_ID
        session_id = INVALID_SESSION_ID
        while session_id == INVALID_SESSION_ID or session_id in self._sessions:
            session_id = self._rng.randint(-(2**31), INT32_MAX)
        self._sessions[session_id] = FetchSession(
            session_id,
            privileged,
            uses_topic_ids,
            now_ms,
            now_ms,
            next_epoch(INITIAL_EPOCH),
            partitions,
        )
        return session_id

    def _evict_for(self, privileged: bool, size: int, now_ms: int) -> bool:
        oldest = min(self._sessions.values(), key=lambda s: s.last_used_ms)
        if now_ms - oldest.last_used_ms > self._eviction_ms:
            victim = oldest
        else:
            victim = min(self._sessions.values(), key=FetchSession.rank)
            if (privileged, size) <= (victim.privileged, len(victim.partitions)):
                return False
        del self._sessions[victim.id]
        self.evictions += 1
        return True


@dataclass(slots=True)
class FetchContext:
    """How one Fetch is read and answered, decided when it arrives (Kafka's FetchContext).

    ``partitions``: what to read, in order. ``error_code`` non-zero: the whole request is
    refused (no partitions). ``session``: the incremental fetch's session, whose epoch has
    moved on to ``expected_epoch``. ``create``: a full fetch that opens a session when
    answered."""

    partitions: list[tuple[PartitionKey, PartitionRequest]]
    error_code: int = ERROR_NONE
    message: str = ""
    session: FetchSession | None = None
    expected_epoch: int = 0
    create: bool = False
    privileged: bool = False
    uses_topic_ids: bool = False

    @classmethod
    def of(
        cls,
        cache: FetchSessionCache,
        now_ms: int,
        *,
        session_id: int,
        epoch: int,
        fetch: list[tuple[PartitionKey, PartitionRequest]],
        forgotten: list[PartitionKey],
        uses_topic_ids: bool,
        privileged: bool,
    ) -> FetchContext:
        if epoch in (INITIAL_EPOCH, FINAL_EPOCH):
            if session_id != INVALID_SESSION_ID:
                cache.remove(session_id)  # a full fetch closes the session it names
            return cls(
                fetch,
                create=epoch == INITIAL_EPOCH,
                privileged=privileged,
                uses_topic_ids=uses_topic_ids,
            )
        session = cache.get(session_id)
        if session is None:
            return cls(
                [],
                FETCH_SESSION_ID_NOT_FOUND,
                f"this broker has no fetch session {session_id} (closed, evicted, or never "
                "opened): send a full fetch (session epoch 0)",
            )
        if session.epoch != epoch:
            return cls(
                [],
                INVALID_FETCH_SESSION_EPOCH,
                f"fetch session {session_id} expects epoch {session.epoch}, not {epoch}",
            )
        if session.uses_topic_ids != uses_topic_ids:
            return cls(
                [],
                FETCH_SESSION_TOPIC_ID_ERROR,
                f"fetch session {session_id} names topics "
                f"{'by id (v13 on)' if session.uses_topic_ids else 'by name (before v13)'}; "
                "this request names them the other way",
            )
        added, _, _ = session.update(fetch, forgotten)
        if added and (why := cache.over_bounds(session)) is not None:
            cache.remove(session_id)
            return cls(
                [],
                FETCH_SESSION_ID_NOT_FOUND,
                f"fetch session {session_id} closed: {why}; send a full fetch (session epoch 0)",
            )
        cache.partitions_requested += len(fetch)
        cache.touch(session, now_ms)
        session.epoch = next_epoch(session.epoch)
        return cls(
            [(key, cached.request) for key, cached in session.partitions.items()],
            session=session,
            expected_epoch=session.epoch,
        )

    def respond(
        self,
        cache: FetchSessionCache,
        now_ms: int,
        answers: list[tuple[PartitionKey, PartitionAnswer]],
    ) -> tuple[int, int, list[int] | None]:
        """(error code, session id, indexes of ``answers`` to send; None: all of them), once the
        partitions are read. ``answers`` are in ``partitions``' order."""
        if self.error_code != ERROR_NONE:
            return self.error_code, INVALID_SESSION_ID, []
        session = self.session
        if session is None:
            if not self.create:
                return ERROR_NONE, INVALID_SESSION_ID, None
            cached: dict[PartitionKey, CachedPartition] = {}
            requests = dict(self.partitions)
            for key, answer in answers:
                new = cached[key] = CachedPartition(requests[key])
                new.must_respond(answer, update=True)
            session_id = cache.maybe_create(
                now_ms,
                privileged=self.privileged,
                uses_topic_ids=self.uses_topic_ids,
                partitions=cached,
            )
            return ERROR_NONE, session_id, None
        if session.epoch != self.expected_epoch:  # another request of this session came first
            return INVALID_FETCH_SESSION_EPOCH, INVALID_SESSION_ID, []
        chosen = []
        for index, (key, answer) in enumerate(answers):
            held = session.partitions.get(key)
            if held is None:
                continue
            if held.must_respond(answer, update=True):
                chosen.append(index)
                if answer.records_bytes > 0:  # the others first next time
                    del session.partitions[key]
                    session.partitions[key] = held
        cache.incremental_fetches += 1
        cache.partitions_answered += len(chosen)
        return ERROR_NONE, session.id, chosen
