"""Fetch (API key 1, v4-v17) from the partition leader (docs/kafka-listener.md#fetch).

Topics are named by name before v13 and by topic id from v13 (KIP-516). Every topic of a
request is resolved once, against one image, when the request arrives: a name becomes the id
it has then and is never looked up again, so a long poll never switches to another incarnation
of the name; the log is then opened by that id and only when its directory's
``partition.metadata`` holds it (INCONSISTENT_TOPIC_ID by id, NOT_LEADER_OR_FOLLOWER by name).
An id no topic has is UNKNOWN_TOPIC_ID; a deleted topic's id stays unknown after its name is
reused, and its old directory, moved to ``deleting/``, is never read.

Per partition, in Kafka's order: READ on the topic (TOPIC_AUTHORIZATION_FAILED), the partition
(UNKNOWN_TOPIC_OR_PARTITION), ``current_leader_epoch`` (FENCED_LEADER_EPOCH,
UNKNOWN_LEADER_EPOCH), this broker its leader (NOT_LEADER_OR_FOLLOWER with the current leader,
KIP-951), ``last_fetched_epoch`` against the leader-epoch cache (``diverging_epoch``), the
offset (OFFSET_OUT_OF_RANGE outside [log start offset, log end offset]). Each answer carries
the high watermark, the last stable offset (the same: no transactions, so read_committed reads
what read_uncommitted reads) and the log start offset. Consumers read only below the high
watermark (a fetch offset between it and the log end offset answers no records).

Followers (docs/replication.md#the-leader): a Fetch naming a replica (``replica_id`` before v15,
``replica_state`` from v15, KIP-903) is a follower's. Trust follows role: on an authenticated
listener only a broker certificate naming that very broker may send it
(CLUSTER_AUTHORIZATION_FAILED for the whole request otherwise; topic ACLs do not apply to a
broker replicating), and the broker must be one of the partition's replicas
(NOT_LEADER_OR_FOLLOWER). A follower reads up to the log end offset; its fetch offset is its
log end offset, which the replica manager takes to move the high watermark and the ISR.

Bytes: whole batches only, at most ``partition_max_bytes`` per partition and ``max_bytes`` in
all (bounded by ``KAFKA_FETCH_RESPONSE_BYTES_MAX``), except that the first batch of the first
partition with data is sent whole whatever its size (KIP-74), so a consumer always progresses.

Long polls: with fewer than ``min_bytes`` and no error, the request parks until a Produce
appends to one of its partitions or ``max_wait_ms`` passes (at most ``KAFKA_FETCH_WAIT_MS_MAX``),
then reads again.

Fetch sessions (KIP-227, from v7; docs/kafka-listener.md#fetch-sessions): the broker's
session cache (``fetch_sessions.py``, ``max.incremental.fetch.session.cache.slots``) decides
what a request reads and which partitions its answer carries. A full fetch (epoch 0) is read
and answered in full and opens a session when the cache has room (session id 0 otherwise);
epoch -1 is answered in full with session id 0 (no session: librdkafka's); an incremental
fetch reads every partition of its session (its fetch offsets as last sent), parks on all of
them, and answers only those that changed since the session last told the client. A
follower's incremental fetch moves the high watermark and the ISR for every partition of its
session, not only those it named.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Final

from kio.schema.errors import ErrorCode as KioErrorCode

from broker.kafka.data_plane import DataPlane, PartitionError, log_error, node_endpoints
from broker.kafka.fetch_sessions import (
    FetchContext,
    FetchSessionCache,
    PartitionAnswer,
    PartitionKey,
    PartitionRequest,
)
from broker.kafka.protocol import Request, kafka_uuid, our_uuid
from broker.kafka.quota import awaited_elsewhere
from broker.log.errors import LogClosedError, LogStorageError, RecordBatchError
from broker.log.manager import InconsistentTopicIdError, LogNotHereError
from broker.log.partition_log import PartitionLog
from quorum.ids import ZERO_UUID, Uuid
from quorum.limits import KAFKA_FETCH_RESPONSE_BYTES_MAX, KAFKA_FETCH_WAIT_MS_MAX
from quorum.metadata.image import MetadataImage, TopicImage
from quorum.security.acls import AclOperation
from quorum.security.authorization import RequestAuthorization
from quorum.security.node_identity import BROKER_ONLY, Claim, refuse_claim

__all__ = ["FetchHandler"]

TOPIC_IDS_VERSION_MIN: Final = 13
REPLICA_STATE_VERSION_MIN: Final = 15
SESSIONS_VERSION_MIN: Final = 7
# Kafka's max.incremental.fetch.session.cache.slots default.
SESSION_SLOTS_DEFAULT: Final = 1000
READ_COMMITTED: Final = 1
NO_EPOCH: Final = -1
LEADER_ERRORS: Final = (KioErrorCode.not_leader_or_follower, KioErrorCode.fenced_leader_epoch)


@dataclass(slots=True)
class _Partition:
    """One partition of the request, resolved once."""

    topic: TopicImage | None
    index: int
    session_key: PartitionKey
    fetch_offset: int
    partition_max_bytes: int
    current_leader_epoch: int
    last_fetched_epoch: int
    by_id: bool
    error: PartitionError | None = None
    records: bytes = b""
    high_watermark: int = -1
    log_start_offset: int = -1
    diverging: tuple[int, int] | None = None
    log: PartitionLog | None = None
    send: bool = True  # in the answer (an incremental answer leaves unchanged ones out)

    @property
    def key(self) -> tuple[Uuid, int] | None:
        return None if self.topic is None else (self.topic.topic_id, self.index)


@dataclass(slots=True)
class _Topic:
    name: str | None
    topic_id: Uuid
    image: TopicImage | None
    partitions: list[_Partition] = field(default_factory=list)


def _now_ms() -> int:
    return time.monotonic_ns() // 1_000_000


def _requested(body: Any, version: int) -> list[tuple[PartitionKey, PartitionRequest]]:
    """The request's partitions in its order, each topic named by id (v13 on) or name."""
    requested: list[tuple[PartitionKey, PartitionRequest]] = []
    for entry in body.topics:
        topic_key: Uuid | str = (
            our_uuid(entry.topic_id) if version >= TOPIC_IDS_VERSION_MIN else str(entry.topic)
        )
        for partition in entry.partitions:
            requested.append(
                (
                    (topic_key, int(partition.partition)),
                    PartitionRequest(
                        fetch_offset=int(partition.fetch_offset),
                        partition_max_bytes=int(partition.partition_max_bytes),
                        current_leader_epoch=int(
                            getattr(partition, "current_leader_epoch", NO_EPOCH)
                        ),
                        last_fetched_epoch=int(getattr(partition, "last_fetched_epoch", NO_EPOCH)),
                        log_start_offset=int(getattr(partition, "log_start_offset", -1)),
                    ),
                )
            )
    return requested


def _forgotten(body: Any, version: int) -> list[PartitionKey]:
    """An incremental request's ``forgotten_topics_data``."""
    forgotten: list[PartitionKey] = []
    for entry in getattr(body, "forgotten_topics_data", ()) or ():
        topic_key: Uuid | str = (
            our_uuid(entry.topic_id) if version >= TOPIC_IDS_VERSION_MIN else str(entry.topic)
        )
        forgotten.extend((topic_key, int(index)) for index in entry.partitions)
    return forgotten


class FetchHandler:
    def __init__(
        self,
        data: DataPlane,
        authorization: RequestAuthorization,
        read_image: Callable[[Any], Awaitable[MetadataImage]],
        *,
        cluster_id: str = "",
        session_slots: int = SESSION_SLOTS_DEFAULT,
    ) -> None:
        """``session_slots``: ``max.incremental.fetch.session.cache.slots``, for the broker's
        one session cache (``data.fetch_sessions``), made by the first handler."""
        self._data = data
        self._authorization = authorization
        self._read_image = read_image
        self._cluster_id = cluster_id
        if data.fetch_sessions is None:
            data.fetch_sessions = FetchSessionCache(session_slots, random.Random())
        self._sessions: FetchSessionCache = data.fetch_sessions

    async def handle(self, request: Request, session: Any) -> dict[str, Any]:
        body = request.body
        version = request.api_version
        replica_id = int(
            body.replica_state.replica_id
            if version >= REPLICA_STATE_VERSION_MIN
            else getattr(body, "replica_id", -1)
        )
        if replica_id >= 0:
            refusal = refuse_claim(
                session.caller, self._cluster_id, Claim("replica_id", replica_id, BROKER_ONLY)
            )
            if refusal is not None:
                return {
                    "error_code": KioErrorCode.cluster_authorization_failed,
                    "session_id": 0,
                    "responses": [],
                }
        requested = _requested(body, version)
        if version >= SESSIONS_VERSION_MIN:
            context = FetchContext.of(
                self._sessions,
                _now_ms(),
                session_id=int(body.session_id),
                epoch=int(body.session_epoch),
                fetch=requested,
                forgotten=_forgotten(body, version),
                uses_topic_ids=version >= TOPIC_IDS_VERSION_MIN,
                privileged=replica_id >= 0,
            )
            if context.error_code:
                return {"error_code": context.error_code, "session_id": 0, "responses": []}
        else:
            context = FetchContext(requested)
        image = await self._read_image(session)
        if self._data.replicas is not None:
            self._data.replicas.observe(image)
        topics = self._resolve(context.partitions, version, image, session.caller, replica_id)
        served = [p for t in topics for p in t.partitions if p.error is None]
        keys = [key for p in served if (key := p.key) is not None]
        max_bytes = min(max(body.max_bytes, 0), KAFKA_FETCH_RESPONSE_BYTES_MAX)
        wait_ms = min(max(int(body.max_wait.total_seconds() * 1000), 0), KAFKA_FETCH_WAIT_MS_MAX)
        deadline = time.monotonic() + wait_ms / 1000
        parked = self._data.park(keys) if served and wait_ms > 0 else None
        everything = [p for t in topics for p in t.partitions]
        follower = replica_id >= 0
        first = True
        try:
            while True:
                total = await self._data.in_reader(lambda: self._read(served, max_bytes, follower))
                if follower and first:
                    self._followed(served, replica_id)
                    first = False
                # Kafka answers at once when a partition failed or diverged.
                done = any(p.error is not None or p.diverging for p in everything)
                left_s = deadline - time.monotonic()
                if parked is None or done or total >= body.min_bytes or left_s <= 0:
                    break
                parked.clear()
                with contextlib.suppress(TimeoutError):
                    # Other connections run meanwhile: not this request's thread time.
                    await awaited_elsewhere(asyncio.wait_for(parked.wait(), left_s))
        finally:
            if parked is not None:
                self._data.unpark(keys, parked)
        if follower:
            for fetch in served:  # the high watermark the follower's fetch may have moved
                if fetch.log is not None and fetch.error is None:
                    fetch.high_watermark = fetch.log.high_watermark
        else:
            self._data.metrics.fetched((p.topic.name, len(p.records)) for p in served if p.topic)
        error_code, session_id = self._select(context, everything)
        if error_code:
            return {"error_code": error_code, "session_id": 0, "responses": []}
        answer = self._answer(topics, version, body, image, session.listener_name)
        answer["session_id"] = session_id
        return answer

    def _select(self, context: FetchContext, everything: list[_Partition]) -> tuple[int, int]:
        """The session's say on the answer: (error code, session id); marks the partitions an
        incremental answer leaves out."""
        answers = [
            (
                fetch.session_key,
                PartitionAnswer(
                    0 if fetch.error is None else int(fetch.error.code),
                    fetch.high_watermark,
                    fetch.high_watermark,
                    fetch.log_start_offset,
                    len(fetch.records),
                    fetch.diverging is not None,
                ),
            )
            for fetch in everything
        ]
        error_code, session_id, chosen = context.respond(self._sessions, _now_ms(), answers)
        if chosen is not None:
            for fetch in everything:
                fetch.send = False
            for index in chosen:
                everything[index].send = True
        return error_code, session_id

    def _followed(self, served: list[_Partition], replica_id: int) -> None:
        """A follower's fetch offsets are its log end offsets: tell the replica manager."""
        replicas = self._data.replicas
        if replicas is None:
            return
        for fetch in served:
            key = fetch.key
            if fetch.error is None and fetch.diverging is None and fetch.log and key:
                replicas.follower_fetched(key, replica_id, fetch.fetch_offset, fetch.log)

    # ----- resolving, once per request ---------------------------------------------------------

    def _resolve(
        self,
        requested: list[tuple[PartitionKey, PartitionRequest]],
        version: int,
        image: MetadataImage,
        caller: Any,
        replica_id: int,
    ) -> list[_Topic]:
        by_topic: dict[Uuid | str, _Topic] = {}
        readable: dict[str, bool] = {}
        unknown: dict[Uuid | str, PartitionError | None] = {}
        by_id = version >= TOPIC_IDS_VERSION_MIN
        for key, wanted in requested:
            topic_key, index = key
            resolved = by_topic.get(topic_key)
            if resolved is None:
                if isinstance(topic_key, Uuid):
                    topic = image.topic(topic_key) if topic_key != ZERO_UUID else None
                    name = None if topic is None else topic.name
                    unknown[topic_key] = (
                        None
                        if topic is not None
                        else PartitionError(
                            KioErrorCode.unknown_topic_id,
                            f"no topic has id {topic_key} (deleted, or never created)",
                        )
                    )
                    resolved = _Topic(name, topic_key, topic)
                else:
                    topic = image.topic_by_name(topic_key)
                    unknown[topic_key] = None
                    resolved = _Topic(
                        topic_key, ZERO_UUID if topic is None else topic.topic_id, topic
                    )
                by_topic[topic_key] = resolved
                name = resolved.name
                if name is not None and replica_id < 0 and name not in readable:
                    readable[name] = self._authorization.allows_topic(
                        caller, image, AclOperation.READ, name
                    )
            name = resolved.name
            allowed = readable.get(name, True) if name is not None else True
            fetch = _Partition(
                topic=resolved.image,
                index=index,
                session_key=key,
                fetch_offset=wanted.fetch_offset,
                partition_max_bytes=max(wanted.partition_max_bytes, 0),
                current_leader_epoch=wanted.current_leader_epoch,
                last_fetched_epoch=wanted.last_fetched_epoch,
                by_id=by_id,
            )
            fetch.error = unknown[topic_key] or self._check(fetch, name, allowed, replica_id)
            resolved.partitions.append(fetch)
        return list(by_topic.values())

    def _check(
        self, fetch: _Partition, name: str | None, allowed: bool, replica_id: int
    ) -> PartitionError | None:
        if not allowed:
            return PartitionError(
                KioErrorCode.topic_authorization_failed,
                f"this principal may not READ topic {name!r}: the ACLs do not allow it",
            )
        if fetch.topic is None:
            return PartitionError(
                KioErrorCode.unknown_topic_or_partition, f"topic {name!r} does not exist"
            )
        state, error = self._data.leader_check(fetch.topic, fetch.index, fetch.current_leader_epoch)
        if (
            error is None
            and state is not None
            and replica_id >= 0
            and (replica_id not in state.replicas or replica_id == self._data.broker_id)
        ):
            return PartitionError(
                KioErrorCode.not_leader_or_follower,
                f"broker {replica_id} is not a follower of {fetch.topic.name}-{fetch.index} "
                f"(its replicas are {list(state.replicas)}, led by {state.leader})",
                state.leader,
                state.leader_epoch,
            )
        return error

    # ----- reading (in the reader thread) ------------------------------------------------------

    def _read(self, served: list[_Partition], max_bytes: int, follower: bool) -> int:
        """Read every partition still without error; the bytes read in all. Consumers read
        below the high watermark, followers up to the log end offset."""
        total = 0
        for fetch in served:
            if fetch.error is not None or fetch.topic is None:
                continue
            room = min(fetch.partition_max_bytes, max_bytes - total)
            try:
                log = self._data.log(fetch.topic, fetch.index)
                fetch.log = log
                if fetch.last_fetched_epoch >= 0 and fetch.fetch_offset > 0:
                    epoch, end = log.end_offset_for_epoch(fetch.last_fetched_epoch)
                    if epoch < fetch.last_fetched_epoch or end < fetch.fetch_offset:
                        fetch.diverging = (epoch, end)
                result = log.read(
                    fetch.fetch_offset,
                    max(room, 0),
                    min_one=total == 0,
                    max_offset=None if follower else log.high_watermark,
                )
            except (
                RecordBatchError,
                LogStorageError,
                LogClosedError,
                LogNotHereError,
                InconsistentTopicIdError,
            ) as exc:
                fetch.error = log_error(exc, by_id=fetch.by_id)
                self._positions(fetch)
                continue
            fetch.high_watermark = result.high_watermark
            fetch.log_start_offset = result.log_start_offset
            fetch.records = b"" if fetch.diverging is not None else result.records
            total += len(fetch.records)
        return total

    def _positions(self, fetch: _Partition) -> None:
        """OFFSET_OUT_OF_RANGE answers carry the log's offsets (Kafka's do)."""
        if fetch.error is None or fetch.error.code != KioErrorCode.offset_out_of_range:
            return
        assert fetch.topic is not None
        log = self._data.log(fetch.topic, fetch.index)
        latest, earliest = log.latest(), log.earliest()
        fetch.high_watermark, fetch.log_start_offset = latest.offset, earliest.offset

    # ----- the answer ---------------------------------------------------------------------------

    def _answer(
        self, topics: list[_Topic], version: int, body: Any, image: MetadataImage, listener: str
    ) -> dict[str, Any]:
        committed = getattr(body, "isolation_level", 0) == READ_COMMITTED
        leaders: set[int] = set()
        responses = []
        for topic in topics:
            partitions = []
            for fetch in topic.partitions:
                if not fetch.send:
                    continue
                error = fetch.error
                answer: dict[str, Any] = {
                    "partition_index": fetch.index,
                    "error_code": 0 if error is None else error.code,
                    "high_watermark": fetch.high_watermark,
                    "last_stable_offset": fetch.high_watermark,
                    "log_start_offset": fetch.log_start_offset,
                    "aborted_transactions": [] if committed else None,
                    "preferred_read_replica": -1,
                    "records": fetch.records,
                }
                if fetch.diverging is not None:
                    epoch, end = fetch.diverging
                    answer["diverging_epoch"] = {"epoch": epoch, "end_offset": end}
                if error is not None and error.code in LEADER_ERRORS:
                    # KIP-951: where the partition is led now (v12 on), and that leader's
                    # endpoint (v16 on).
                    answer["current_leader"] = {
                        "leader_id": error.leader_id,
                        "leader_epoch": error.leader_epoch,
                    }
                    leaders.add(error.leader_id)
                partitions.append(answer)
            if not partitions and topic.partitions:
                continue  # nothing of this topic changed
            responses.append(
                {
                    "topic": topic.name or "",
                    "topic_id": kafka_uuid(topic.topic_id),
                    "partitions": partitions,
                }
            )
        return {
            "error_code": 0,
            "session_id": 0,
            "responses": responses,
            "node_endpoints": node_endpoints(image, leaders, listener),
        }
