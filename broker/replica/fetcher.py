"""A follower's replica fetcher: one connection to one leader broker carrying every partition
this broker follows there (Kafka's ``ReplicaFetcherThread``, one per leader with
``num.replica.fetchers`` = 1), on the Kafka listeners' loop (docs/replication.md#followers).

Each round is one Fetch (v15: by topic id, KIP-516; the follower named in ``replica_state``
with its broker epoch, KIP-903) of the partitions that are ready, long-polled for
``replica.fetch.wait.max.ms``, in an incremental fetch session (KIP-227, Kafka's
``FetchSessionHandler``; docs/replication.md#fetch-sessions): the first round is a full fetch
(session epoch 0) of every ready partition, which opens a session at the leader; each later
round names only the partitions added or whose fetch position (fetch offset, last fetched
epoch, log start offset) or leader epoch changed since the last round, and forgets
(``forgotten_topics_data``) those no longer ready (backing off after an error) or no longer
followed. The leader answers only partitions that changed, so a partition the answer leaves
out simply had nothing new. FETCH_SESSION_ID_NOT_FOUND, INVALID_FETCH_SESSION_EPOCH,
FETCH_SESSION_TOPIC_ID_ERROR, a session id 0 in an incremental answer, or a lost connection
start over with a full fetch (the session id kept after an error, so the leader closes the old
session). Per partition answer:

- records: appended as the leader wrote them (``PartitionLog.append_as_follower``), then the
  follower's high watermark is the leader's, bounded by what it holds;
- ``diverging_epoch`` (KIP-595's rule, as the metadata quorum's own followers do): the log is cut
  at the smaller of the leader's end offset for that epoch and its own, and the next fetch
  starts there; an old leader that rejoins loses exactly its unacknowledged tail this way;
- OFFSET_OUT_OF_RANGE: below the leader's log start offset, the log starts over empty at it;
  beyond the leader's log end offset, it is cut back to it;
- a leadership error (NOT_LEADER_OR_FOLLOWER, FENCED_LEADER_EPOCH, UNKNOWN_LEADER_EPOCH), an id
  the leader does not know (UNKNOWN_TOPIC_ID, INCONSISTENT_TOPIC_ID) or a storage error: the
  partition waits ``replica.fetch.backoff.ms`` (the next image usually moves it first).

A partition whose directory reconciliation has not made yet (or that still holds an older
incarnation of the topic: INCONSISTENT_TOPIC_ID locally) waits and is tried again: the fetcher
never opens a log of another topic id, and never one under ``deleting/``. All disk work runs in
the data plane's writer thread (appends and truncations) or reader thread (opening), as a
Produce's does.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import ssl
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final

from kio.index import load_response_schema
from kio.schema.errors import ErrorCode as KioErrorCode
from kio.schema.fetch.v15.request import (
    FetchPartition,
    FetchRequest,
    FetchTopic,
    ForgottenTopic,
    ReplicaState,
)
from kio.schema.types import BrokerId
from kio.serial import entity_reader
from kio.static.primitive import i32, i32Timedelta, i64

from broker.kafka.data_plane import DataPlane
from broker.kafka.fetch_sessions import INITIAL_EPOCH, INVALID_SESSION_ID, next_epoch
from broker.kafka.protocol import kafka_uuid
from broker.log.errors import LogClosedError, LogStorageError, RecordBatchError
from broker.log.manager import InconsistentTopicIdError, LogNotHereError
from broker.log.partition_log import PartitionLog
from quorum.ids import Uuid
from quorum.kafka_wire import FRAME_BYTES_MAX, request_frame
from quorum.metadata.image import MetadataImage, TopicImage

__all__ = ["FetchSettings", "FollowedPartition", "ReplicaFetcher"]

FETCH_VERSION: Final = 15
# How soon a partition whose local directory is not there yet is tried again (reconciliation
# runs on every image; this is shorter than replica.fetch.backoff.ms so a new follower starts
# at once).
LOCAL_RETRY_MS: Final = 100
LEADERSHIP_ERRORS: Final = frozenset(
    {
        KioErrorCode.not_leader_or_follower,
        KioErrorCode.fenced_leader_epoch,
        KioErrorCode.unknown_leader_epoch,
        KioErrorCode.unknown_topic_id,
        KioErrorCode.inconsistent_topic_id,
        KioErrorCode.unknown_topic_or_partition,
        KioErrorCode.kafka_storage_error,
        KioErrorCode.cluster_authorization_failed,
        KioErrorCode.topic_authorization_failed,
    }
)
# The leader lost or refused our session: the next round is a full fetch.
SESSION_ERRORS: Final = frozenset(
    {
        KioErrorCode.fetch_session_id_not_found,
        KioErrorCode.invalid_fetch_session_epoch,
        KioErrorCode.fetch_session_topic_id_error,
    }
)


@dataclass(frozen=True, slots=True)
class FetchSettings:
    """Kafka's ``replica.fetch.*`` broker settings."""

    wait_max_ms: int = 500
    max_bytes: int = 1_048_576
    response_max_bytes: int = 10_485_760
    backoff_ms: int = 1_000
    socket_timeout_ms: int = 30_000


@dataclass(slots=True)
class FollowedPartition:
    topic: TopicImage
    partition: int
    leader_epoch: int
    log: PartitionLog | None = None
    retry_at_ms: int = 0

    @property
    def key(self) -> tuple[Uuid, int]:
        return (self.topic.topic_id, self.partition)


def _now_ms() -> int:
    return time.monotonic_ns() // 1_000_000


class ReplicaFetcher:
    def __init__(
        self,
        leader_id: int,
        *,
        data: DataPlane,
        broker_id: int,
        broker_epoch: Callable[[], int],
        image: Callable[[], MetadataImage],
        listener_name: str,
        tls: ssl.SSLContext | None,
        settings: FetchSettings,
        logger: Any,
        on_progress: Callable[[tuple[Uuid, int]], None] | None = None,
    ) -> None:
        self.leader_id = leader_id
        self._data = data
        self._broker_id = broker_id
        self._broker_epoch = broker_epoch
        self._image = image
        self._listener_name = listener_name
        self._tls = tls
        self._settings = settings
        self._log = logger.bind(leader_id=leader_id)
        self._on_progress = on_progress
        self.partitions: dict[tuple[Uuid, int], FollowedPartition] = {}
        self._changed = asyncio.Event()
        self._streams: tuple[asyncio.StreamReader, asyncio.StreamWriter] | None = None
        self._correlation_id = 0
        self._task: asyncio.Task[None] | None = None
        self.rounds = 0
        # The fetch session (KIP-227): its id and the epoch of our next request (0: full), and
        # what the leader's session holds for each partition: (leader epoch, fetch offset, last
        # fetched epoch, log start offset) as last sent.
        self.session_id = INVALID_SESSION_ID
        self.session_epoch = INITIAL_EPOCH
        self._sent: dict[tuple[Uuid, int], tuple[int, int, int, int]] = {}
        # Partitions named in the last request (all of them in a full fetch), for tests and logs.
        self.last_sent = 0

    # ----- partitions (from the replica manager) --------------------------------------------

    def follow(self, topic: TopicImage, partition: int, leader_epoch: int) -> None:
        key = (topic.topic_id, partition)
        current = self.partitions.get(key)
        if current is not None and current.leader_epoch == leader_epoch:
            current.topic = topic
            return
        self.partitions[key] = FollowedPartition(topic, partition, leader_epoch)
        self._changed.set()

    def forget(self, key: tuple[Uuid, int]) -> None:
        if self.partitions.pop(key, None) is not None:
            self._changed.set()

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name=f"replica-fetcher-{self.leader_id}")

    async def stop(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
        await self._disconnect()

    # ----- the loop ----------------------------------------------------------------------------

    async def _run(self) -> None:
        while True:
            now_ms = _now_ms()
            ready = [p for p in self.partitions.values() if p.retry_at_ms <= now_ms]
            if not ready:
                due = min((p.retry_at_ms for p in self.partitions.values()), default=None)
                self._changed.clear()
                timeout_s = None if due is None else max(due - now_ms, 1) / 1000
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._changed.wait(), timeout_s)
                continue
            try:
                await self._round(ready)
            except (OSError, ConnectionError, TimeoutError, ValueError, EOFError) as exc:
                # The leader went away (or answered something that does not decode): back off;
                # the next image usually names another leader first.
                self._log.info("replica_fetch_failed", error=str(exc) or type(exc).__name__)
                await self._disconnect()
                for partition in ready:
                    partition.retry_at_ms = _now_ms() + self._settings.backoff_ms

    async def _round(self, ready: list[FollowedPartition]) -> None:
        # Only logs not open yet (or closed since: reopened) go to the reader thread.
        unopened = [p for p in ready if p.log is None or p.log.closed]
        if unopened:
            await self._data.in_reader(lambda: self._open_logs(unopened))
        opened = [p for p in ready if p.log is not None and not p.log.closed]
        if not opened:
            return
        request, wanted = self._request(opened)
        response = await self._ask(request)
        code = int(response.error_code)
        if code in SESSION_ERRORS:
            self._log.info(
                "replica_fetch_session_reset",
                session_id=self.session_id,
                session_epoch=self.session_epoch,
                error_code=code,
            )
            if code == KioErrorCode.fetch_session_id_not_found:
                self.session_id = INVALID_SESSION_ID
            self._restart_session()
            return
        if code != 0:
            raise ConnectionError(
                f"broker {self.leader_id} refused the replica fetch: error code {code}"
            )
        self._session_answered(int(response.session_id), wanted)
        by_key = {p.key: p for p in opened}
        jobs = []
        for topic in response.responses:
            for answer in topic.partitions:
                key = (Uuid.from_bytes(topic.topic_id.bytes), int(answer.partition_index))
                partition = by_key.get(key)
                if partition is not None and self.partitions.get(key) is partition:
                    jobs.append((partition, answer))
        self.rounds += 1
        if jobs:
            progressed = await self._data.in_writer(lambda: self._apply(jobs))
            if self._on_progress is not None:
                for key in progressed:
                    self._on_progress(key)

    def _open_logs(self, unopened: list[FollowedPartition]) -> None:
        """The reader thread's job: the log of each partition not open yet (recovered if need
        be)."""
        for partition in unopened:
            try:
                partition.log = self._data.log(partition.topic, partition.partition)
            except (LogNotHereError, InconsistentTopicIdError, LogStorageError) as exc:
                partition.log = None
                partition.retry_at_ms = _now_ms() + LOCAL_RETRY_MS
                self._log.debug(
                    "replica_log_not_ready",
                    topic=partition.topic.name,
                    partition=partition.partition,
                    reason=str(exc),
                )

    # ----- the fetch session ---------------------------------------------------------------------

    def _restart_session(self) -> None:
        """The next round is a full fetch (with the session id kept, if any: the leader closes
        that session and opens a new one, Kafka's ``nextCloseExisting``)."""
        self.session_epoch = INITIAL_EPOCH
        self._sent = {}

    def _session_answered(
        self, session_id: int, wanted: dict[tuple[Uuid, int], tuple[int, int, int, int]]
    ) -> None:
        if self.session_epoch == INITIAL_EPOCH:
            self.session_id = session_id
            # session id 0: the leader keeps no session for us; every round stays full
            self.session_epoch = next_epoch(INITIAL_EPOCH) if session_id else INITIAL_EPOCH
        elif session_id == INVALID_SESSION_ID:  # the leader closed the session
            self.session_id = INVALID_SESSION_ID
            self.session_epoch = INITIAL_EPOCH
        else:
            self.session_epoch = next_epoch(self.session_epoch)
        self._sent = wanted if self.session_epoch != INITIAL_EPOCH else {}

    def _request(
        self, opened: list[FollowedPartition]
    ) -> tuple[FetchRequest, dict[tuple[Uuid, int], tuple[int, int, int, int]]]:
        """The next Fetch, and each partition's position it leaves the session holding."""
        full = self.session_epoch == INITIAL_EPOCH
        sent = self._sent
        wanted: dict[tuple[Uuid, int], tuple[int, int, int, int]] = {}
        topics: dict[Uuid, list[FetchPartition]] = {}
        for partition in opened:
            log = partition.log
            assert log is not None
            key = partition.key
            position = (
                partition.leader_epoch,
                log.log_end_offset,
                max(log.latest_epoch(), -1),
                log.log_start_offset,
            )
            wanted[key] = position
            if not full and sent.get(key) == position:
                continue  # the leader's session holds it as it is
            topics.setdefault(partition.topic.topic_id, []).append(
                FetchPartition(
                    partition=i32(partition.partition),
                    current_leader_epoch=i32(position[0]),
                    fetch_offset=i64(position[1]),
                    last_fetched_epoch=i32(position[2]),
                    log_start_offset=i64(position[3]),
                    partition_max_bytes=i32(self._settings.max_bytes),
                )
            )
        forgotten: dict[Uuid, list[i32]] = {}
        if not full:
            for topic_id, index in sent:
                if (topic_id, index) not in wanted:
                    forgotten.setdefault(topic_id, []).append(i32(index))
        self.last_sent = sum(len(partitions) for partitions in topics.values())
        request = FetchRequest(
            replica_state=ReplicaState(
                replica_id=BrokerId(self._broker_id), replica_epoch=i64(self._broker_epoch())
            ),
            max_wait=i32Timedelta.parse(
                datetime.timedelta(milliseconds=self._settings.wait_max_ms)
            ),
            min_bytes=i32(1),
            max_bytes=i32(self._settings.response_max_bytes),
            session_id=i32(self.session_id),
            session_epoch=i32(self.session_epoch),
            topics=tuple(
                FetchTopic(topic_id=kafka_uuid(topic_id), partitions=tuple(partitions))
                for topic_id, partitions in topics.items()
            ),
            forgotten_topics_data=tuple(
                ForgottenTopic(topic_id=kafka_uuid(topic_id), partitions=tuple(indexes))
                for topic_id, indexes in forgotten.items()
            ),
        )
        return request, wanted

    def _apply(self, jobs: list[tuple[FollowedPartition, Any]]) -> list[tuple[Uuid, int]]:
        """The writer thread's job: apply each partition's answer to its log."""
        progressed = []
        for partition, answer in jobs:
            log = partition.log
            assert log is not None
            if self.partitions.get(partition.key) is not partition:
                continue  # no longer followed here (this broker leads it now, or it is gone)
            try:
                if self._apply_one(partition, log, answer):
                    progressed.append(partition.key)
            except (LogStorageError, LogClosedError, RecordBatchError) as exc:
                partition.retry_at_ms = _now_ms() + self._settings.backoff_ms
                self._log.warning(
                    "replica_append_failed",
                    topic=partition.topic.name,
                    partition=partition.partition,
                    error=str(exc),
                )
        return progressed

    def _apply_one(self, partition: FollowedPartition, log: PartitionLog, answer: Any) -> bool:
        code = int(answer.error_code)
        if code == KioErrorCode.offset_out_of_range:
            leader_start, leader_end = int(answer.log_start_offset), int(answer.high_watermark)
            if log.log_end_offset < leader_start:
                log.truncate_fully_and_start_at(leader_start)
            elif 0 <= leader_end < log.log_end_offset:
                log.truncate_to(leader_end)
            self._log.info(
                "replica_offset_out_of_range",
                topic=partition.topic.name,
                partition=partition.partition,
                leader_log_start_offset=leader_start,
                log_end_offset=log.log_end_offset,
            )
            return True
        if code != 0:
            partition.retry_at_ms = _now_ms() + self._settings.backoff_ms
            self._log.info(
                "replica_fetch_refused",
                topic=partition.topic.name,
                partition=partition.partition,
                error_code=code,
                message=getattr(answer, "error_message", None),
            )
            return False
        diverging = answer.diverging_epoch
        if diverging is not None and int(diverging.epoch) >= 0:
            _, local_end = log.end_offset_for_epoch(int(diverging.epoch))
            target = max(min(int(diverging.end_offset), local_end), 0)
            before = log.log_end_offset
            log.truncate_to(target)
            self._log.info(
                "replica_truncated",
                topic=partition.topic.name,
                partition=partition.partition,
                diverging_epoch=int(diverging.epoch),
                from_offset=before,
                to_offset=log.log_end_offset,
            )
            return True
        records = answer.records
        config = self._data.config(partition.topic)
        if records:
            log.append_as_follower(bytes(records), config, int(time.time() * 1000))
        log.set_follower_high_watermark(int(answer.high_watermark))
        return bool(records)

    # ----- the connection ----------------------------------------------------------------------

    def _address(self) -> tuple[str, int]:
        broker = self._image().brokers.get(self.leader_id)
        if broker is None:
            raise ConnectionError(f"broker {self.leader_id} is not registered")
        for endpoint in broker.endpoints:
            if endpoint.name == self._listener_name:
                return endpoint.host, endpoint.port
        raise ConnectionError(
            f"broker {self.leader_id} has no {self._listener_name} listener to fetch from"
        )

    async def _connect(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        if self._streams is None:
            host, port = self._address()
            self._streams = await asyncio.wait_for(
                asyncio.open_connection(
                    host,
                    port,
                    ssl=self._tls,
                    server_hostname=host if self._tls is not None else None,
                ),
                self._settings.socket_timeout_ms / 1000,
            )
        return self._streams

    async def _disconnect(self) -> None:
        self._restart_session()
        streams, self._streams = self._streams, None
        if streams is not None:
            streams[1].close()
            with contextlib.suppress(OSError, ConnectionError, TimeoutError):
                await asyncio.wait_for(streams[1].wait_closed(), 1.0)

    async def _ask(self, request: FetchRequest) -> Any:
        reader, writer = await self._connect()
        self._correlation_id += 1
        frame = request_frame(request, self._correlation_id, f"replica-fetcher-{self._broker_id}")
        writer.write(len(frame).to_bytes(4, "big") + frame)
        timeout_s = (self._settings.socket_timeout_ms + self._settings.wait_max_ms) / 1000
        await asyncio.wait_for(writer.drain(), timeout_s)
        size = int.from_bytes(await asyncio.wait_for(reader.readexactly(4), timeout_s), "big")
        if not 0 < size <= FRAME_BYTES_MAX:
            raise ValueError(f"an answer of {size} bytes from broker {self.leader_id}")
        data = await asyncio.wait_for(reader.readexactly(size), timeout_s)
        response_type = load_response_schema(FetchRequest.__api_key__, FETCH_VERSION)
        _, header_bytes = entity_reader(response_type.__header_schema__)(data, 0)
        response: Any = entity_reader(response_type)(data, header_bytes)[0]
        return response
