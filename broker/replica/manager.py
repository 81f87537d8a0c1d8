"""The replica manager: from each metadata image, which partitions this broker leads and which
it follows and where; the leaders' follower states, high watermarks and ISR changes; the
fetchers; the produce requests waiting for acks=all (Kafka's ``ReplicaManager`` and its
produce purgatory), on the Kafka listeners' loop (docs/replication.md).

- Roles come from the image only (KRaft's brokers apply ``PartitionRecord`` /
  ``PartitionChangeRecord`` from the metadata log): the leader named there leads in the leader
  epoch named there; every other replica fetches from it. A partition this broker no longer
  replicates, or whose topic is gone, has neither role (its directory is reconciliation's).
- High watermark: the leader's moves after its own appends and after followers' fetches
  (``leader.py``); each move wakes the Fetches parked on the partition (consumers read only
  below it) and the acks=all produce requests waiting for it.
- ISR: expansion is asked for at the fetch that made a follower eligible; shrinking is checked
  every ``replica.lag.time.max.ms`` / 2. Each goes to the active controller as an
  AlterPartition, on the broker's own loop; its answer, or the next image, ends it.
"""

from __future__ import annotations

import asyncio
import ssl
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Final, Protocol

from kio.schema.errors import ErrorCode as KioErrorCode

from broker.kafka.data_plane import DataPlane
from broker.log.errors import LogClosedError, LogStorageError
from broker.log.manager import InconsistentTopicIdError, LogNotHereError
from broker.log.partition_log import PartitionLog
from broker.replica.fetcher import FetchSettings, ReplicaFetcher
from broker.replica.leader import PartitionLeader
from quorum.ids import Uuid
from quorum.metadata.image import NO_LEADER, MetadataImage, PersistentMap, TopicImage

__all__ = ["AlterOutcome", "ReplicaManager", "ReplicationSettings"]

Key = tuple[Uuid, int]
# AlterPartition answers after which the leader simply waits for the next image.
RETRY_LATER: Final = frozenset(
    {
        KioErrorCode.invalid_update_version,
        KioErrorCode.fenced_leader_epoch,
        KioErrorCode.not_leader_or_follower,
    }
)


class AlterOutcome(Protocol):
    """An AlterPartition's answer (``broker/alter_partition.py``'s result)."""

    @property
    def error_code(self) -> int: ...
    @property
    def error_message(self) -> str: ...
    @property
    def isr(self) -> tuple[int, ...]: ...
    @property
    def partition_epoch(self) -> int: ...


AlterPartition = Callable[[Uuid, int, int, tuple[int, ...], int], Awaitable[AlterOutcome]]


@dataclass(frozen=True, slots=True)
class ReplicationSettings:
    lag_time_max_ms: int = 30_000
    fetch: FetchSettings = FetchSettings()


def _now_ms() -> int:
    return time.monotonic_ns() // 1_000_000


class ReplicaManager:
    def __init__(
        self,
        data: DataPlane,
        broker_id: int,
        *,
        broker_epoch: Callable[[], int],
        alter_partition: AlterPartition,
        listener_name: str,
        tls: ssl.SSLContext | None,
        settings: ReplicationSettings,
        logger: Any,
        clock_ms: Callable[[], int] = _now_ms,
    ) -> None:
        self._data = data
        self.broker_id = broker_id
        self._broker_epoch = broker_epoch
        self._alter_partition = alter_partition
        self._listener_name = listener_name
        self._tls = tls
        self.settings = settings
        self._log = logger
        self._clock_ms = clock_ms
        self.image: MetadataImage | None = None
        self.leaders: dict[Key, PartitionLeader] = {}
        self._leader_logs: dict[Key, PartitionLog] = {}
        self.fetchers: dict[int, ReplicaFetcher] = {}
        self._followed: dict[Key, int] = {}  # partition -> the leader it is fetched from
        self._waiting: dict[Key, list[tuple[int, asyncio.Future[int]]]] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        self._shrinker: asyncio.Task[None] | None = None
        self._seen: tuple[object, object] | None = None
        self._unfenced_of: tuple[object, list[int]] | None = None
        self.isr_shrinks = 0
        self.isr_expands = 0

    # ----- lifecycle (on the listeners' loop) ----------------------------------------------------

    def start(self) -> None:
        self._shrinker = asyncio.create_task(self._shrink_forever(), name="isr-shrinker")

    async def stop(self) -> None:
        tasks = [t for t in (self._shrinker, *self._tasks) if t is not None]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await asyncio.gather(*(f.stop() for f in self.fetchers.values()))
        self.fetchers.clear()
        for key in list(self._waiting):
            self._fail_waiters(key, KioErrorCode.not_leader_or_follower)

    # ----- roles from the image ----------------------------------------------------------------

    def observe(self, image: MetadataImage) -> None:
        """A request handler's image: applied first if newer than the last one applied, so a
        request never meets a role its image does not show yet."""
        if self.image is None or image.offset > self.image.offset:
            self.on_image(image)

    def on_image(self, image: MetadataImage) -> None:
        """Apply a new image's partition states (on the listeners' loop): only the topics that
        changed since the last image applied, unless the brokers changed (then every one)."""
        if self.image is not None and image.offset < self.image.offset:
            return  # an older image published after a handler applied a newer one
        self.image = image
        seen = (image.topics_by_id, image.brokers)
        previous, self._seen = self._seen, seen
        if previous is not None and previous[0] is seen[0] and previous[1] is seen[1]:
            return
        older = previous[0] if previous is not None else None
        topics = image.topics_by_id
        if (
            previous is not None
            and previous[1] is image.brokers
            and isinstance(topics, PersistentMap)
            and isinstance(older, PersistentMap)
        ):
            keys: set[Key] = set()
            for topic_id in topics.changed_keys(older):
                for source in (older.get(topic_id), topics.get(topic_id)):
                    if source is not None:
                        keys.update((topic_id, index) for index in source.partitions)
        else:
            keys = set(self.leaders) | set(self._followed)
            for topic in topics.values():
                keys.update(
                    (topic.topic_id, index)
                    for index, state in topic.partitions.items()
                    if self.broker_id in state.replicas
                )
        now_ms = self._clock_ms()
        for key in keys:
            self._apply_role(image, key, now_ms)

    def _apply_role(self, image: MetadataImage, key: Key, now_ms: int) -> None:
        """Lead, follow or drop one partition as ``image`` says."""
        topic = image.topics_by_id.get(key[0])
        state = None if topic is None else topic.partitions.get(key[1])
        if topic is None or state is None or self.broker_id not in state.replicas:
            leader_id = NO_LEADER
        else:
            leader_id = state.leader
        if leader_id == self.broker_id and topic is not None and state is not None:
            current = self.leaders.get(key)
            if current is not None and current.leader_epoch == state.leader_epoch:
                current.update(state.partition_epoch, state.replicas, state.isr, now_ms)
            else:
                if current is not None:
                    self._fail_waiters(key, KioErrorCode.not_leader_or_follower)
                log = self._leader_logs.get(key)
                self.leaders[key] = PartitionLeader.start(
                    topic.topic_id,
                    key[1],
                    leader_id=self.broker_id,
                    leader_epoch=state.leader_epoch,
                    partition_epoch=state.partition_epoch,
                    replicas=state.replicas,
                    isr=state.isr,
                    log_end_offset=0 if log is None else log.log_end_offset,
                    now_ms=now_ms,
                )
                if log is None:
                    self._open_leader_log(key, topic, key[1])
                self._log.info(
                    "partition_leader",
                    topic=topic.name,
                    partition=key[1],
                    leader_epoch=state.leader_epoch,
                    isr=list(state.isr),
                )
            self._maybe_advance(key)
        elif key in self.leaders:
            del self.leaders[key]
            self._leader_logs.pop(key, None)
            self._fail_waiters(key, KioErrorCode.not_leader_or_follower)
        followed = self._followed.get(key)
        if leader_id not in (NO_LEADER, self.broker_id) and topic is not None:
            assert state is not None
            if followed is not None and followed != leader_id:
                self._unfollow(followed, key)
            self._followed[key] = leader_id
            self._fetcher(leader_id).follow(topic, key[1], state.leader_epoch)
        elif followed is not None:
            del self._followed[key]
            self._unfollow(followed, key)

    def _unfollow(self, leader_id: int, key: Key) -> None:
        if (fetcher := self.fetchers.get(leader_id)) is not None:
            fetcher.forget(key)

    def _open_leader_log(self, key: Key, topic: TopicImage, index: int) -> None:
        """A new leader's log, opened in the reader thread: its high watermark may move at
        once (an ISR of the leader alone) and its epoch start offset is its log end offset."""

        async def open_log() -> None:
            try:
                log = await self._data.in_reader(lambda: self._data.log(topic, index))
            except (LogNotHereError, InconsistentTopicIdError, LogStorageError, LogClosedError):
                return  # not made yet: its first append or follower fetch brings it
            leader = self.leaders.get(key)
            if leader is None:
                return
            self._leader_logs[key] = log
            leader.epoch_start_offset = max(leader.epoch_start_offset, log.log_end_offset)
            self._maybe_advance(key)

        task = asyncio.create_task(open_log())
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def _fetcher(self, leader_id: int) -> ReplicaFetcher:
        fetcher = self.fetchers.get(leader_id)
        if fetcher is None:
            fetcher = ReplicaFetcher(
                leader_id,
                data=self._data,
                broker_id=self.broker_id,
                broker_epoch=self._broker_epoch,
                image=self._current_image,
                listener_name=self._listener_name,
                tls=self._tls,
                settings=self.settings.fetch,
                logger=self._log,
            )
            fetcher.start()
            self.fetchers[leader_id] = fetcher
        return fetcher

    def _current_image(self) -> MetadataImage:
        assert self.image is not None
        return self.image

    # ----- the leader's side -------------------------------------------------------------------

    def isr_of(self, key: Key) -> tuple[int, ...] | None:
        """The committed ISR of a partition led here (None: not led here)."""
        leader = self.leaders.get(key)
        return None if leader is None else leader.isr

    def appended(self, key: Key, log: PartitionLog) -> None:
        """The leader appended to ``log``: its high watermark may move."""
        self._leader_logs[key] = log
        self._maybe_advance(key)

    def follower_fetched(
        self, key: Key, replica_id: int, fetch_offset: int, log: PartitionLog
    ) -> None:
        leader = self.leaders.get(key)
        if leader is None:
            return
        self._leader_logs[key] = log
        leader.follower_fetched(replica_id, fetch_offset, log.log_end_offset, self._clock_ms())
        self._maybe_advance(key)
        image = self.image
        if image is None:
            return
        new_isr = leader.expansion(log.high_watermark, self._unfenced(image))
        if new_isr is not None:
            self._alter(leader, new_isr, "expand")

    def _unfenced(self, image: MetadataImage) -> list[int]:
        """The unfenced brokers (may join an ISR), computed once per brokers map."""
        cached = self._unfenced_of
        if cached is None or cached[0] is not image.brokers:
            ids = [b.broker_id for b in image.brokers.values() if not b.fenced]
            cached = self._unfenced_of = (image.brokers, ids)
        return cached[1]

    def _maybe_advance(self, key: Key) -> None:
        leader, log = self.leaders.get(key), self._leader_logs.get(key)
        if leader is None or log is None:
            return
        if log.update_high_watermark(leader.high_watermark(log.log_end_offset)):
            self._data.appended([key])  # parked consumer Fetches read below it
            self._release(key, log.high_watermark)

    async def wait_replicated(self, key: Key, required_offset: int, timeout_s: float) -> int:
        """Wait until the high watermark reaches ``required_offset`` (acks=all): Kafka's error
        code, NONE once it did."""
        log = self._leader_logs.get(key)
        if key not in self.leaders:
            return KioErrorCode.not_leader_or_follower
        if log is not None and log.high_watermark >= required_offset:
            return KioErrorCode.none
        future: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        self._waiting.setdefault(key, []).append((required_offset, future))
        try:
            return await asyncio.wait_for(future, timeout_s)
        except TimeoutError:
            return KioErrorCode.request_timed_out
        finally:
            waiting = self._waiting.get(key)
            if waiting is not None:
                waiting[:] = [w for w in waiting if w[1] is not future]
                if not waiting:
                    del self._waiting[key]

    def _release(self, key: Key, high_watermark: int) -> None:
        for required, future in self._waiting.get(key, ()):
            if required <= high_watermark and not future.done():
                future.set_result(KioErrorCode.none)

    def _fail_waiters(self, key: Key, code: int) -> None:
        for _, future in self._waiting.pop(key, ()):
            if not future.done():
                future.set_result(code)

    # ----- ISR changes -------------------------------------------------------------------------

    def _alter(self, leader: PartitionLeader, new_isr: tuple[int, ...], why: str) -> None:
        leader.pending_isr = new_isr
        task = asyncio.create_task(self._send_alter(leader, new_isr, why))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _send_alter(
        self, leader: PartitionLeader, new_isr: tuple[int, ...], why: str
    ) -> None:
        key = (leader.topic_id, leader.partition)
        try:
            outcome = await self._alter_partition(
                leader.topic_id,
                leader.partition,
                leader.leader_epoch,
                new_isr,
                leader.partition_epoch,
            )
        except Exception as exc:  # any failure: the next check asks again
            self._log.warning("alter_partition_failed", reason=str(exc) or type(exc).__name__)
            if self.leaders.get(key) is leader:
                leader.pending_isr = None
            return
        if self.leaders.get(key) is not leader:
            return
        if outcome.error_code == 0:
            leader.committed(outcome.partition_epoch, tuple(outcome.isr))
            if why == "expand":
                self.isr_expands += 1
            else:
                self.isr_shrinks += 1
            self._log.info(
                "isr_changed",
                topic_id=str(leader.topic_id),
                partition=leader.partition,
                change=why,
                isr=list(outcome.isr),
                partition_epoch=outcome.partition_epoch,
            )
            self._maybe_advance(key)
            return
        self._log.info(
            "alter_partition_refused",
            topic_id=str(leader.topic_id),
            partition=leader.partition,
            change=why,
            error_code=outcome.error_code,
            message=outcome.error_message,
        )
        if outcome.error_code not in RETRY_LATER:
            leader.pending_isr = None
        # Otherwise the image (a newer partition epoch) ends the pending change.

    async def _shrink_forever(self) -> None:
        interval_s = max(self.settings.lag_time_max_ms / 2, 10) / 1000
        while True:
            await asyncio.sleep(interval_s)
            now_ms = self._clock_ms()
            for leader in list(self.leaders.values()):
                new_isr = leader.shrink(now_ms, self.settings.lag_time_max_ms)
                if new_isr is not None:
                    self._alter(leader, new_isr, "shrink")

    # ----- reads ---------------------------------------------------------------------------------

    def under_replicated(self) -> int:
        """Partitions led here whose ISR is smaller than their replica set (Kafka's
        ``UnderReplicatedPartitions``)."""
        return sum(1 for leader in self.leaders.values() if len(leader.isr) < len(leader.replicas))
