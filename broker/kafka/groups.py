"""The group coordinator's shell on the Kafka listeners' loop (docs/groups.md#the-coordinator):
which ``__consumer_offsets`` partitions this broker coordinates, loading them from their logs,
writing their records through the partition log with acks=all, the timers of their groups, and
the answers of requests that wait (Kafka's ``GroupCoordinatorService`` and its runtime).

- The coordinator of group G is the leader of partition ``partition_for(G, partitions)`` of
  ``__consumer_offsets`` (``broker/groups/partitioning.py``), the topic's partition count if it
  exists, else ``offsets.topic.num.partitions``. A broker that does not lead it answers
  NOT_COORDINATOR; one that just became its leader loads it first (every record from the log
  start to the log end, in the reader thread) and answers COORDINATOR_LOAD_IN_PROGRESS
  meanwhile; one that stopped leading it drops its state (its waiting requests are answered
  NOT_COORDINATOR). Leadership is read from the image at every request and every timer tick.
- Every change is appended as one batch in the writer thread, and answered once the high
  watermark passed it (the ISR holds it: ``ReplicaManager.wait_replicated``), at most
  ``offsets.commit.timeout.ms``; Kafka's mapping of the write's errors follows.
- The state machine is ``broker/groups/``; this module feeds it the time and drains its outbox.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Final

import structlog
from kio.schema.errors import ErrorCode as E

from broker.groups.group import Completion, GroupSettings, Persist
from broker.groups.partitioning import partition_for
from broker.groups.records import (
    RecordFormatError,
    build_batch,
    decode_key,
    decode_value,
    iter_records,
)
from broker.groups.shard import GroupShard, Record, group_record
from broker.kafka.data_plane import DataPlane
from broker.log.batch import ProducedBatch, read_header
from broker.log.errors import LogClosedError, LogStorageError, RecordBatchError
from broker.log.manager import InconsistentTopicIdError, LogNotHereError
from quorum.metadata.image import MetadataImage, TopicImage

__all__ = ["OFFSETS_TOPIC", "CoordinatorSettings", "GroupCoordinator"]

OFFSETS_TOPIC: Final = "__consumer_offsets"
# A load reads the log in chunks of this much (our choice: a segment's index interval order).
LOAD_CHUNK_BYTES: Final = 1024 * 1024
# The timer task wakes at least this often while partitions are loaded, to see leadership
# changes (our choice: short against Kafka's clients' retry backoffs of 100 ms and more).
TICK_MS_MAX: Final = 200
# A FindCoordinator asks for the topic again at most this often while it does not exist.
CREATE_RETRY_MS: Final = 2_000


def _monotonic_ms() -> int:
    return time.monotonic_ns() // 1_000_000


def _wall_ms() -> int:
    return time.time_ns() // 1_000_000


@dataclass(frozen=True, slots=True)
class CoordinatorSettings:
    """The broker's ``offsets.*`` and ``group.*`` configs."""

    groups: GroupSettings = GroupSettings()
    num_partitions: int = 50  # offsets.topic.num.partitions
    replication_factor: int = 3  # offsets.topic.replication.factor
    segment_bytes: int = 104_857_600  # offsets.topic.segment.bytes
    commit_timeout_ms: int = 5_000  # offsets.commit.timeout.ms
    metadata_max_bytes: int = 4_096  # offset.metadata.max.bytes
    retention_ms: int = 7 * 24 * 60 * 60 * 1000  # offsets.retention.minutes, in ms
    retention_check_interval_ms: int = 600_000  # offsets.retention.check.interval.ms


@dataclass
class _Partition:
    index: int
    leader_epoch: int
    shard: GroupShard
    ready: bool = False
    failed: bool = False


@dataclass
class _Waiter:
    future: asyncio.Future[dict[str, Any]] = field(
        default_factory=lambda: asyncio.get_running_loop().create_future()
    )


class GroupCoordinator:
    def __init__(
        self,
        data: DataPlane,
        image: Callable[[], MetadataImage],
        *,
        broker_id: int,
        settings: CoordinatorSettings = CoordinatorSettings(),
        create_topic: Callable[[int, int, dict[str, str]], Awaitable[None]] | None = None,
        clock_ms: Callable[[], int] = _monotonic_ms,
        wall_ms: Callable[[], int] = _wall_ms,
    ) -> None:
        """``create_topic(partitions, replication_factor, configs)``: asks the active controller
        to create ``__consumer_offsets`` as this broker (None: never created here)."""
        self._data = data
        self._image = image
        self.broker_id = broker_id
        self.settings = settings
        self._create_topic = create_topic
        self._clock_ms = clock_ms
        self._wall_ms = wall_ms
        self._log = structlog.get_logger("broker.groups").bind(node_id=broker_id)
        self.partitions: dict[int, _Partition] = {}
        self._tasks: set[asyncio.Task[Any]] = set()
        self._timer: asyncio.Task[None] | None = None
        self._wake = asyncio.Event()
        self._create_asked_ms: int | None = None
        self._seen_topics: object = None
        self._next_expiry_ms: int | None = None

    # ----- the topic and the partition of a group ---------------------------------------------

    def offsets_topic(self, image: MetadataImage) -> TopicImage | None:
        return image.topic_by_name(OFFSETS_TOPIC)

    def partition_of(self, group_id: str, image: MetadataImage) -> int:
        topic = self.offsets_topic(image)
        count = len(topic.partitions) if topic is not None and topic.partitions else None
        return partition_for(group_id, count or self.settings.num_partitions)

    def ensure_topic(self) -> None:
        """Ask the controller to create ``__consumer_offsets`` (once per CREATE_RETRY_MS)."""
        if self._create_topic is None:
            return
        now = self._clock_ms()
        if self._create_asked_ms is not None and now - self._create_asked_ms < CREATE_RETRY_MS:
            return
        self._create_asked_ms = now
        configs = {
            "cleanup.policy": "compact",
            "segment.bytes": str(self.settings.segment_bytes),
        }
        self._spawn(
            self._create_topic(
                self.settings.num_partitions, self.settings.replication_factor, configs
            ),
            "offsets_topic_create",
        )

    def coordinator_of(self, group_id: str, image: MetadataImage) -> tuple[int, int, E]:
        """(partition, leader, error) for FindCoordinator: the partition's leader, or
        COORDINATOR_NOT_AVAILABLE (no topic yet: its creation is asked for; no leader)."""
        topic = self.offsets_topic(image)
        if topic is None:
            self.ensure_topic()
            return -1, -1, E.coordinator_not_available
        index = self.partition_of(group_id, image)
        state = topic.partitions.get(index)
        if state is None or state.leader < 0:
            return index, -1, E.coordinator_not_available
        return index, state.leader, E.none

    def shard(self, group_id: str, image: MetadataImage) -> tuple[GroupShard | None, E]:
        """The loaded shard of the group's partition, or why not: NOT_COORDINATOR (another
        broker leads it, or no topic), COORDINATOR_LOAD_IN_PROGRESS (loading it now)."""
        self.follow(image)
        topic = self.offsets_topic(image)
        if topic is None:
            return None, E.not_coordinator
        index = self.partition_of(group_id, image)
        state = topic.partitions.get(index)
        if state is None or state.leader != self.broker_id:
            return None, E.not_coordinator
        loaded = self.partitions.get(index)
        if loaded is None or loaded.failed:
            self._start_load(topic, index, state.leader_epoch)
            return None, E.coordinator_load_in_progress
        if not loaded.ready:
            return None, E.coordinator_load_in_progress
        return loaded.shard, E.none

    def loaded_shards(self, image: MetadataImage) -> list[GroupShard]:
        """Every shard loaded here (ListGroups), after following the image."""
        self.follow(image)
        return [p.shard for p in self.partitions.values() if p.ready]

    # ----- leadership ----------------------------------------------------------------------------

    def loading(self, image: MetadataImage) -> bool:
        """Whether a partition this broker leads is still loading (ListGroups says so)."""
        self.follow(image)
        return any(not p.ready for p in self.partitions.values())

    def follow(self, image: MetadataImage) -> None:
        """Unload the partitions this broker no longer leads in the epoch it loaded; load those
        it leads (Kafka loads at the leadership change, not at the first request)."""
        topic = self.offsets_topic(image)
        for index, loaded in list(self.partitions.items()):
            state = None if topic is None else topic.partitions.get(index)
            if (
                state is None
                or state.leader != self.broker_id
                or state.leader_epoch != loaded.leader_epoch
            ):
                del self.partitions[index]
                self._dispatch(loaded, loaded.shard.unload())
                self._log.info("group_partition_unloaded", partition=index)
        if topic is None:
            return
        for index, state in topic.partitions.items():
            if state.leader == self.broker_id:
                current = self.partitions.get(index)
                if current is None or current.failed:
                    self._start_load(topic, index, state.leader_epoch)

    def _start_load(self, topic: TopicImage, index: int, leader_epoch: int) -> None:
        shard = GroupShard(index, self.settings.groups, self._new_member_id)
        loaded = _Partition(index, leader_epoch, shard)
        self.partitions[index] = loaded
        self._spawn(self._load(topic, loaded), "group_partition_load")
        self._start_timer()  # its ticks retry a deferred load (the log's directory is new)

    async def _load(self, topic: TopicImage, loaded: _Partition) -> None:
        started = self._clock_ms()
        try:
            count = await self._data.in_reader(lambda: self._read_all(topic, loaded))
        except (LogNotHereError, InconsistentTopicIdError, LogStorageError, LogClosedError) as exc:
            loaded.failed = True  # the next request tries again
            self._log.info("group_partition_load_deferred", partition=loaded.index, reason=str(exc))
            return
        if self.partitions.get(loaded.index) is not loaded:
            return
        loaded.shard.loaded()
        loaded.ready = True
        self._log.info(
            "group_partition_loaded",
            partition=loaded.index,
            records=count,
            groups=len(loaded.shard.groups),
            took_ms=self._clock_ms() - started,
        )
        self._start_timer()

    def _read_all(self, topic: TopicImage, loaded: _Partition) -> int:
        """Every record of the partition's log, replayed (in the reader thread)."""
        log = self._data.log(topic, loaded.index)
        offset = log.log_start_offset
        count = 0
        now = self._clock_ms()
        while offset < log.log_end_offset:
            data = log.read(offset, LOAD_CHUNK_BYTES, True).records
            if not data:
                break
            next_offset = offset
            for at, key_bytes, value_bytes in _records(data):
                next_offset = at + 1
                if key_bytes is None:
                    continue
                try:
                    key = decode_key(key_bytes)
                    if key is None:
                        continue
                    value = None if value_bytes is None else decode_value(key, value_bytes)
                except RecordFormatError as exc:
                    self._log.warning("group_record_unreadable", offset=at, reason=str(exc))
                    continue
                loaded.shard.replay(key, value, now)
                count += 1
            batch_end = _batches_end(data)
            offset = max(next_offset, batch_end) if batch_end > offset else log.log_end_offset
        return count

    # ----- writes --------------------------------------------------------------------------------

    async def write(self, index: int, records: list[Record]) -> E:
        """Append ``records`` to the partition as its leader and wait until the ISR holds them:
        NONE, or Kafka's coordinator error for a failed write."""
        if not records:
            return E.none
        loaded = self.partitions.get(index)
        image = self._image()
        topic = self.offsets_topic(image)
        if loaded is None or topic is None:
            return E.not_coordinator
        data = build_batch(records, self._wall_ms())
        batch = ProducedBatch(data, read_header(data))
        key = (topic.topic_id, index)
        config = self._data.config(topic)
        epoch = loaded.leader_epoch

        def append() -> Any:
            log = self._data.log(topic, index)
            return log, log.append(batch, epoch, config, self._wall_ms())

        try:
            log, result = await self._data.in_writer(append)
        except RecordBatchError:
            return E.invalid_commit_offset_size
        except (LogNotHereError, InconsistentTopicIdError, LogClosedError):
            return E.not_coordinator
        except LogStorageError:
            return E.coordinator_not_available
        self._data.appended([key])
        replicas = self._data.replicas
        if replicas is None:
            log.update_high_watermark(log.log_end_offset)
            return E.none
        replicas.appended(key, log)
        code = await replicas.wait_replicated(
            key, result.last_offset + 1, self.settings.commit_timeout_ms / 1000
        )
        if code == E.none:
            return E.none
        if code == E.not_leader_or_follower:
            return E.not_coordinator
        return E.coordinator_not_available  # timed out or the ISR shrank: Kafka's mapping

    # ----- effects of the state machine ----------------------------------------------------------

    def dispatch(self, shard: GroupShard, *, wake: bool = True) -> None:
        """Answer what the shard's groups completed and write what they must persist; with
        ``wake``, the timer looks at the new deadlines (a request changed a group)."""
        loaded = self.partitions.get(shard.partition)
        current = loaded if loaded is not None and loaded.shard is shard else None
        self._dispatch(current, shard.drain())
        if wake:
            self._wake.set()

    def _dispatch(self, loaded: _Partition | None, items: list[Completion | Persist]) -> None:
        for item in items:
            if isinstance(item, Completion):
                waiter = item.waiter
                if isinstance(waiter, _Waiter) and not waiter.future.done():
                    waiter.future.set_result(item.values)
            elif loaded is not None:
                self._spawn(self._persist(loaded, item), "group_persist")

    async def _persist(self, loaded: _Partition, item: Persist) -> None:
        value = item.value
        if value is not None:
            value = type(value)(
                value.protocol_type,
                value.generation,
                value.protocol,
                value.leader,
                self._wall_ms(),
                value.members,
            )
        code = await self.write(loaded.index, [group_record(item.group_id, value)])
        group = loaded.shard.group(item.group_id)
        if group is not None and item.generation >= 0:
            group.persisted(item.generation, None if code == E.none else code, self._clock_ms())
            self.dispatch(loaded.shard)

    @staticmethod
    def new_waiter() -> _Waiter:
        return _Waiter()

    async def wait(self, waiter: _Waiter) -> dict[str, Any]:
        return await waiter.future

    def _new_member_id(self, client_id: str) -> str:
        return f"{client_id}-{uuid.uuid4()}"

    def now_ms(self) -> int:
        return self._clock_ms()

    def wall_ms(self) -> int:
        return self._wall_ms()

    # ----- the timer -----------------------------------------------------------------------------

    def _start_timer(self) -> None:
        if self._timer is None or self._timer.done():
            self._timer = asyncio.get_running_loop().create_task(self._tick_forever())

    async def _tick_forever(self) -> None:
        while self.partitions:
            self._wake.clear()
            self.follow(self._image())
            now = self._clock_ms()
            next_ms = now + TICK_MS_MAX
            for loaded in list(self.partitions.values()):
                if not loaded.ready:
                    continue
                deadline = loaded.shard.poll(now)
                self.dispatch(loaded.shard, wake=False)
                if deadline is not None:
                    next_ms = min(next_ms, deadline)
            self._drop_deleted_topics()
            next_ms = min(next_ms, self._expire_offsets(now))
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), max(next_ms - now, 1) / 1000)

    def _expire_offsets(self, now_ms: int) -> int:
        """Every ``offsets.retention.check.interval.ms``: the expired offsets and the Empty
        groups left without any, written as tombstones (``GroupShard.expire_offsets``; the log
        cleaner then removes them, docs/groups.md#offsets-retention). When to look next."""
        interval = self.settings.retention_check_interval_ms
        if self._next_expiry_ms is None:
            self._next_expiry_ms = now_ms + interval
        if now_ms < self._next_expiry_ms:
            return self._next_expiry_ms
        self._next_expiry_ms = now_ms + interval
        wall = self._wall_ms()
        for loaded in self.partitions.values():
            if not loaded.ready:
                continue
            records = loaded.shard.expire_offsets(now_ms, wall, self.settings.retention_ms)
            if records:
                self._log.info(
                    "group_offsets_expired", partition=loaded.index, tombstones=len(records)
                )
                self._spawn(self.write(loaded.index, records), "offsets_expired")
        return self._next_expiry_ms

    def _drop_deleted_topics(self) -> None:
        """Kafka removes the committed offsets of a deleted topic: tombstones for them."""
        image = self._image()
        if image.topics_by_name is self._seen_topics:
            return
        self._seen_topics = image.topics_by_name
        for loaded in self.partitions.values():
            if not loaded.ready:
                continue
            named = {t for offsets in loaded.shard.offsets.values() for t, _ in offsets}
            gone = {t for t in named if image.topic_by_name(t) is None}
            if gone:
                records = loaded.shard.delete_topic_offsets(gone)
                self._spawn(self.write(loaded.index, records), "offsets_of_deleted_topics")

    def _spawn(self, work: Awaitable[Any], what: str) -> None:
        async def run() -> None:
            try:
                await work
            except Exception as exc:  # a failed background write is logged; clients retry
                self._log.warning("group_task_failed", task=what, error=repr(exc))

        task = asyncio.get_running_loop().create_task(run())
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def close(self) -> None:
        # The timer ends at its next look at the partitions even if a cancellation is lost
        # (Python 3.11's wait_for drops one that comes as its wait ends).
        self.partitions.clear()
        self._wake.set()
        tasks = [*self._tasks, *([self._timer] if self._timer is not None else [])]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


def _records(data: bytes) -> list[tuple[int, bytes | None, bytes | None]]:
    try:
        return list(iter_records(data))
    except RecordFormatError:
        return []


def _batches_end(data: bytes) -> int:
    """The offset after the last whole batch of ``data`` (0: none)."""
    end = 0
    at = 0
    while at + 61 <= len(data):
        header = read_header(data, at)
        if at + header.size > len(data):
            break
        end = header.next_offset
        at += header.size
    return end
