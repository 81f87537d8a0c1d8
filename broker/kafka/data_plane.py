"""What Produce, Fetch, ListOffsets and OffsetForLeaderEpoch share
(docs/kafka-listener.md#the-data-plane): the broker's partition logs, the threads their disk
work runs in, the wake-ups of parked Fetches, and the questions every partition of a data
request is asked first (does it exist, is this broker its leader, in the epoch the client
names?).

Threads. The logs block (a write, a read, the recovery of a log opened for the first time), so
nothing of theirs runs on the listeners' event loop and nothing ever runs on the broker's own
loop (docs/kafka-listener.md#the-brokers-own-work-first). Appends run in one writer thread:
every Produce request is one job there, whatever the number of its partitions, with one write
per partition; the order of appends to a partition is the order of the jobs. Reads run in one
reader thread, one job per Fetch round, ListOffsets or OffsetForLeaderEpoch. The thread time a
job takes is charged to the request's principal (``RequestCost.worker_s``), as decoding in the
decoding thread is; the wait for it is not.

Wake-ups. A Fetch that has fewer than ``min_bytes`` parks (``wait_for_appends``) on the
partitions it reads; a Produce that appended to one of them wakes it (``appended``), on the
listeners' loop, after the append's job finished (the data is readable by then). A parked
Fetch registers before it reads, so an append between its read and its wait still wakes it.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextvars
import time
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final, TypeVar

from kio.schema.errors import ErrorCode as KioErrorCode

from broker.kafka.data_metrics import DataPlaneMetrics
from broker.kafka.quota import CURRENT_COST, awaited_elsewhere
from broker.log.config import LogConfig
from broker.log.errors import LogClosedError, LogStorageError, RecordBatchError
from broker.log.manager import InconsistentTopicIdError, LogManager, LogNotHereError
from broker.log.partition_log import PartitionLog
from quorum.controller.broker_configs import merged_broker_configs, topic_defaults
from quorum.ids import Uuid
from quorum.metadata.image import MetadataImage, PartitionImage, TopicImage

if TYPE_CHECKING:
    from broker.kafka.fetch_sessions import FetchSessionCache
    from broker.replica.manager import ReplicaManager

__all__ = ["DataPlane", "PartitionError", "log_error", "node_endpoints"]

T = TypeVar("T")

# A topic's LogConfig is built once per configs mapping (images share an unchanged one); past
# this many topics the cache is cleared (our choice: METADATA_TOPICS_MAX's order).
CONFIG_CACHE_TOPICS_MAX: Final = 10_000
NO_LEADER_EPOCH: Final = -1
EMPTY_BROKER_CONFIGS: Final[Mapping[str, Mapping[str, str]]] = {}


@dataclass(frozen=True, slots=True)
class PartitionError:
    """Why a partition of a data request is not served: Kafka's code and a message, and the
    current leader when it is another broker (KIP-951's ``current_leader``)."""

    code: int
    message: str
    leader_id: int = -1
    leader_epoch: int = -1


def log_error(exc: Exception, *, by_id: bool) -> PartitionError:
    """The answer for a log that could not serve (``LogManager.get`` or a log method)."""
    if isinstance(exc, RecordBatchError):
        return PartitionError(exc.error_code, str(exc))
    if isinstance(exc, LogStorageError):
        return PartitionError(KioErrorCode.kafka_storage_error, str(exc))
    if isinstance(exc, InconsistentTopicIdError):
        code = KioErrorCode.inconsistent_topic_id if by_id else KioErrorCode.not_leader_or_follower
        return PartitionError(code, str(exc))
    if isinstance(exc, LogNotHereError | LogClosedError):
        return PartitionError(
            KioErrorCode.not_leader_or_follower,
            f"{exc}; the partition's log is not ready here yet or no longer: retry shortly",
        )
    raise exc


class DataPlane:
    def __init__(
        self,
        logs: LogManager | None,
        *,
        broker_id: int,
        image: Callable[[], MetadataImage] | None = None,
        static_configs: Mapping[str, str] | None = None,
    ) -> None:
        """``logs`` None: a broker without partition logs (tests of the admin APIs), whose data
        requests are answered NOT_LEADER_OR_FOLLOWER. ``image``: the broker's current image,
        whose dynamic broker configs (this broker's, then the cluster-wide default) come before
        ``static_configs`` (the broker configs its file gave, Kafka's names) as the defaults of
        topic configs (``quorum/controller/broker_configs.py``; None: no dynamic configs)."""
        self.logs = logs
        self.broker_id = broker_id
        self._image = image
        self._static_configs = dict(static_configs or {})
        # (the image's broker_configs mapping, the topic defaults resolved from it)
        self._defaults: tuple[Any, Mapping[str, str]] | None = None
        self._writer = concurrent.futures.ThreadPoolExecutor(1, "kafka-log-writer")
        self._reader = concurrent.futures.ThreadPoolExecutor(1, "kafka-log-reader")
        self._configs: dict[Uuid, tuple[Any, Any, LogConfig]] = {}
        self._parked: dict[tuple[Uuid, int], set[asyncio.Event]] = {}
        self.metrics = DataPlaneMetrics()  # bytes in and out, request times (metrics.py)
        # Replication (broker/replica/): set by the broker once its listeners' loop runs; None
        # in the listener's unit tests, where the leader alone holds each partition.
        self.replicas: ReplicaManager | None = None
        # The leader's incremental fetch sessions (broker/kafka/fetch_sessions.py), one cache
        # for all the broker's listeners: made by the first Fetch handler, read by metrics.py.
        self.fetch_sessions: FetchSessionCache | None = None

    def close(self) -> None:
        self._writer.shutdown(wait=True, cancel_futures=True)
        self._reader.shutdown(wait=True, cancel_futures=True)

    # ----- threads ------------------------------------------------------------------------

    async def in_writer(self, job: Callable[[], T]) -> T:
        return await self._run(self._writer, job)

    async def in_reader(self, job: Callable[[], T]) -> T:
        return await self._run(self._reader, job)

    @staticmethod
    async def _run(executor: concurrent.futures.Executor, job: Callable[[], T]) -> T:
        def timed() -> tuple[T, float]:
            started_s = time.thread_time()
            return job(), time.thread_time() - started_s

        loop = asyncio.get_running_loop()
        # With the caller's context: the node's log fields (contextvars) follow the job.
        context = contextvars.copy_context()
        result, used_s = await awaited_elsewhere(loop.run_in_executor(executor, context.run, timed))
        cost = CURRENT_COST.get()
        if cost is not None:
            cost.worker_s += used_s
        return result

    # ----- Fetch wake-ups (on the listeners' loop) ------------------------------------------

    def park(self, keys: Collection[tuple[Uuid, int]]) -> asyncio.Event:
        event = asyncio.Event()
        for key in keys:
            self._parked.setdefault(key, set()).add(event)
        return event

    def unpark(self, keys: Collection[tuple[Uuid, int]], event: asyncio.Event) -> None:
        for key in keys:
            waiting = self._parked.get(key)
            if waiting is not None:
                waiting.discard(event)
                if not waiting:
                    del self._parked[key]

    def appended(self, keys: Collection[tuple[Uuid, int]]) -> None:
        for key in keys:
            for event in self._parked.get(key, ()):
                event.set()

    # ----- what every partition is asked first ---------------------------------------------------

    def topic_defaults(self) -> Mapping[str, str]:
        """What a topic config that the topic does not set is here: the dynamic broker configs
        of the current image (this broker's, then the cluster-wide default), then the file's,
        then Kafka's defaults; resolved again only when the image's broker configs change."""
        broker_configs = (
            self._image().broker_configs if self._image is not None else EMPTY_BROKER_CONFIGS
        )
        cached = self._defaults
        if cached is not None and cached[0] is broker_configs:
            return cached[1]
        defaults = topic_defaults(
            merged_broker_configs(broker_configs, self.broker_id, self._static_configs)
        )
        self._defaults = (broker_configs, defaults)
        return defaults

    def config(self, topic: TopicImage) -> LogConfig:
        """The log config of ``topic`` now: its own configs over ``topic_defaults``. A change of
        either reaches the next append, fetch and retention check (nothing else holds it)."""
        defaults = self.topic_defaults()
        cached = self._configs.get(topic.topic_id)
        if cached is not None and cached[0] is topic.configs and cached[1] is defaults:
            return cached[2]
        if len(self._configs) >= CONFIG_CACHE_TOPICS_MAX:
            self._configs.clear()
        config = LogConfig.of(topic.configs, defaults)
        self._configs[topic.topic_id] = (topic.configs, defaults, config)
        return config

    def leader_check(
        self,
        topic: TopicImage,
        index: int,
        current_leader_epoch: int = NO_LEADER_EPOCH,
    ) -> tuple[PartitionImage | None, PartitionError | None]:
        """The partition if this broker leads it in the epoch the client names (-1: any), else
        why not: UNKNOWN_TOPIC_OR_PARTITION (no such partition), FENCED_LEADER_EPOCH (the
        client's epoch is older), UNKNOWN_LEADER_EPOCH (newer than this broker knows),
        NOT_LEADER_OR_FOLLOWER (another broker leads, named), in Kafka's order."""
        state = topic.partitions.get(index)
        if state is None:
            return None, PartitionError(
                KioErrorCode.unknown_topic_or_partition,
                f"topic {topic.name!r} has no partition {index} (it has {len(topic.partitions)})",
            )
        if current_leader_epoch != NO_LEADER_EPOCH:
            if current_leader_epoch < state.leader_epoch:
                return None, PartitionError(
                    KioErrorCode.fenced_leader_epoch,
                    f"leader epoch {current_leader_epoch} is older than the partition's "
                    f"{state.leader_epoch}: refresh the metadata",
                    state.leader,
                    state.leader_epoch,
                )
            if current_leader_epoch > state.leader_epoch:
                return None, PartitionError(
                    KioErrorCode.unknown_leader_epoch,
                    f"leader epoch {current_leader_epoch} is newer than this broker knows "
                    f"({state.leader_epoch}): retry shortly",
                    state.leader,
                    state.leader_epoch,
                )
        if state.leader != self.broker_id:
            leader = "no broker" if state.leader < 0 else f"broker {state.leader}"
            return None, PartitionError(
                KioErrorCode.not_leader_or_follower,
                f"broker {self.broker_id} does not lead {topic.name}-{index}: {leader} does "
                f"(leader epoch {state.leader_epoch})",
                state.leader,
                state.leader_epoch,
            )
        return state, None

    def log(self, topic: TopicImage, index: int) -> PartitionLog:
        """The partition's log (blocking: call it in a job). Raises what ``LogManager.get``
        raises, or ``LogNotHereError`` without partition logs."""
        if self.logs is None:
            raise LogNotHereError(f"broker {self.broker_id} keeps no partition logs")
        return self.logs.get(topic.topic_id, topic.name, index)


def node_endpoints(
    image: MetadataImage, leader_ids: Collection[int], listener_name: str
) -> list[dict[str, Any]]:
    """KIP-951: the endpoints, on this listener, of the leaders named in NOT_LEADER_OR_FOLLOWER
    answers, so a client goes there without asking for metadata first."""
    endpoints = []
    for broker_id in sorted(set(leader_ids)):
        broker = image.brokers.get(broker_id)
        if broker is None or broker_id < 0:
            continue
        endpoint = next((e for e in broker.endpoints if e.name == listener_name), None)
        if endpoint is not None:
            endpoints.append(
                {
                    "node_id": broker_id,
                    "host": endpoint.host,
                    "port": endpoint.port,
                    "rack": broker.rack,
                }
            )
    return endpoints
