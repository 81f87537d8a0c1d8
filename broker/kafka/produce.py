"""Produce (API key 0, v3-v11) on the partition leader (docs/kafka-listener.md#produce).

Each partition of a request is answered on its own, in Kafka's order of checks: WRITE on the
topic (TOPIC_AUTHORIZATION_FAILED, whether or not it exists), the topic and partition in the
image (UNKNOWN_TOPIC_OR_PARTITION), acks -1, 0 or 1 (INVALID_REQUIRED_ACKS), not an internal
topic (INVALID_TOPIC_EXCEPTION: ``__consumer_offsets``, ``__transaction_state``,
``__share_group_state`` as Kafka's ``Topic.isInternal``, and ``__cluster_metadata``, unless the
client id is Kafka's ``__admin_client``), this broker its leader (NOT_LEADER_OR_FOLLOWER with
the current leader and, from v10, its endpoint: KIP-951), for acks=-1 enough in-sync replicas
(NOT_ENOUGH_REPLICAS), then the batch (``broker/log/batch.py``: INVALID_RECORD,
CORRUPT_MESSAGE, MESSAGE_TOO_LARGE, INVALID_TIMESTAMP, ...) and the write (KAFKA_STORAGE_ERROR,
with nothing appended).

In-sync replicas: partition data is not replicated yet, so the leader is the only replica that
holds a partition's records, whatever the image's ISR lists: acks=-1 ("all") waits for that
ISR, the leader alone, which is acks=1; a topic whose ``min.insync.replicas`` is above 1 refuses
acks=-1 with NOT_ENOUGH_REPLICAS, as Kafka does when its ISR has shrunk below it. The high
watermark is the log end offset once the batch is in the page cache (docs/invariants.md I22).

acks=0: no answer is sent, as Kafka; if any partition failed, the connection is closed instead
(Kafka's way of telling such a producer to refresh its metadata).

Idempotent producers (ids from InitProducerId, ``producer_id.py``) are checked and
deduplicated by the partition log, under its lock (``broker/log/producer_state.py``): a retry of
one of a producer's last 5 batches is answered with its first offsets, sequence and epoch
errors with Kafka's codes. Transactional batches are INVALID_TXN_STATE (no transactions).
"""

from __future__ import annotations

import datetime
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Final

from kio.schema.errors import ErrorCode as KioErrorCode

from broker.kafka.data_plane import DataPlane, PartitionError, log_error, node_endpoints
from broker.kafka.protocol import Request
from broker.log.batch import check_produced
from broker.log.config import LogConfig
from broker.log.errors import LogClosedError, LogStorageError, RecordBatchError
from broker.log.manager import InconsistentTopicIdError, LogNotHereError
from broker.log.partition_log import AppendResult
from quorum.metadata.image import CLUSTER_METADATA_TOPIC_NAME, MetadataImage, TopicImage
from quorum.security.acls import AclOperation
from quorum.security.authorization import RequestAuthorization
from quorum.security.identity import Caller

__all__ = ["CLOSE_CONNECTION", "NO_RESPONSE", "ProduceHandler"]

# Kafka's Topic.isInternal, and the metadata log: no client appends to these.
INTERNAL_TOPICS: Final = frozenset(
    {
        "__consumer_offsets",
        "__transaction_state",
        "__share_group_state",
        CLUSTER_METADATA_TOPIC_NAME,
    }
)
# Kafka's AdminUtils.ADMIN_CLIENT_ID: the one client id allowed to append to internal topics.
ADMIN_CLIENT_ID: Final = "__admin_client"
ACKS_VALUES: Final = (-1, 0, 1)


class _Marker:
    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return self.name


# What a handler returns instead of an answer: send nothing (acks=0), or close the connection
# (acks=0 and a partition failed).
NO_RESPONSE: Final = _Marker("NO_RESPONSE")
CLOSE_CONNECTION: Final = _Marker("CLOSE_CONNECTION")


def wall_ms() -> int:
    return time.time_ns() // 1_000_000


@dataclass(slots=True)
class _Entry:
    """One partition of the request: what the writer appends, or why it is refused."""

    topic: TopicImage | None
    index: int
    records: bytes | None
    leader_epoch: int = -1
    config: LogConfig | None = None
    error: PartitionError | None = None
    result: AppendResult | None = None


def _refuse(code: int, message: str) -> PartitionError:
    return PartitionError(code, message)


class ProduceHandler:
    def __init__(
        self,
        data: DataPlane,
        authorization: RequestAuthorization,
        read_image: Callable[[Any], Awaitable[MetadataImage]],
        *,
        clock: Callable[[], int] = wall_ms,
    ) -> None:
        self._data = data
        self._authorization = authorization
        self._read_image = read_image
        self._clock = clock

    async def handle(self, request: Request, session: Any) -> dict[str, Any] | _Marker:
        body = request.body
        image = await self._read_image(session)
        caller: Caller = session.caller
        acks = int(body.acks)
        entries: list[tuple[str, list[_Entry]]] = []
        writable: dict[str, bool] = {}
        for topic_data in body.topic_data:
            name = topic_data.name
            if name not in writable:
                writable[name] = self._authorization.allows_topic(
                    caller, image, AclOperation.WRITE, name
                )
            topic = image.topic_by_name(name)
            listed = []
            for partition in topic_data.partition_data:
                entry = _Entry(topic, partition.index, partition.records)
                entry.error = self._precheck(entry, name, writable[name], acks, request.client_id)
                listed.append(entry)
            entries.append((name, listed))
        pending = [e for _, listed in entries for e in listed if e.error is None]
        if pending:
            await self._data.in_writer(lambda: self._append(pending, request.api_version))
            self._data.appended(
                [(e.topic.topic_id, e.index) for e in pending if e.result and e.topic]
            )
        failed = any(e.error is not None for _, listed in entries for e in listed)
        if acks == 0:
            return CLOSE_CONNECTION if failed else NO_RESPONSE
        return self._answer(entries, image, session.listener_name)

    def _precheck(
        self, entry: _Entry, name: str, authorized: bool, acks: int, client_id: str | None
    ) -> PartitionError | None:
        """Everything decided from the request and the image, in Kafka's order."""
        if not authorized:
            return _refuse(
                KioErrorCode.topic_authorization_failed,
                f"this principal may not WRITE topic {name!r}: the ACLs do not allow it",
            )
        topic = entry.topic
        if topic is None or entry.index not in topic.partitions:
            return _refuse(
                KioErrorCode.unknown_topic_or_partition,
                f"topic {name!r} has no partition {entry.index}"
                if topic is not None
                else f"topic {name!r} does not exist",
            )
        if acks not in ACKS_VALUES:
            return _refuse(
                KioErrorCode.invalid_required_acks,
                f"acks {acks} is not one of -1 (all), 0 or 1",
            )
        if name in INTERNAL_TOPICS and client_id != ADMIN_CLIENT_ID:
            return _refuse(
                KioErrorCode.invalid_topic_exception, f"Cannot append to internal topic {name}"
            )
        state, error = self._data.leader_check(topic, entry.index)
        if error is not None or state is None:
            return error
        entry.leader_epoch = state.leader_epoch
        entry.config = self._data.config(topic)
        if acks == -1 and entry.config.min_insync_replicas > 1:
            return _refuse(
                KioErrorCode.not_enough_replicas,
                f"acks=all needs {entry.config.min_insync_replicas} in-sync replicas "
                f"(min.insync.replicas) but {name}-{entry.index} has 1: partition data is not "
                "replicated yet, so its leader is its only in-sync replica",
            )
        return None

    def _append(self, pending: list[_Entry], version: int) -> None:
        """The writer thread's job: check and append every partition's batch, one write each."""
        for entry in pending:
            topic, config = entry.topic, entry.config
            assert topic is not None and config is not None
            now_ms = self._clock()
            try:
                batch = check_produced(
                    entry.records,
                    produce_version=version,
                    max_message_bytes=config.max_message_bytes,
                    timestamps=config.timestamps,
                    now_ms=now_ms,
                )
                log = self._data.log(topic, entry.index)
                entry.result = log.append(batch, entry.leader_epoch, config, now_ms)
                # The leader is the partition's only in-sync replica (no replication yet): an
                # appended batch is committed at once.
                log.update_high_watermark(log.log_end_offset)
                self._data.metrics.produced(topic.name, len(batch.data), batch.header.record_count)
            except (
                RecordBatchError,
                LogStorageError,
                LogClosedError,
                LogNotHereError,
                InconsistentTopicIdError,
            ) as exc:
                entry.error = log_error(exc, by_id=False)

    def _answer(
        self, entries: list[tuple[str, list[_Entry]]], image: MetadataImage, listener: str
    ) -> dict[str, Any]:
        leaders: set[int] = set()
        responses = []
        for name, listed in entries:
            partitions = []
            for entry in listed:
                partitions.append(self._partition(entry))
                error = entry.error
                if error is not None and error.code == KioErrorCode.not_leader_or_follower:
                    leaders.add(error.leader_id)
            responses.append({"name": name, "partition_responses": partitions})
        return {
            "responses": responses,
            "node_endpoints": node_endpoints(image, leaders, listener),
        }

    @staticmethod
    def _partition(entry: _Entry) -> dict[str, Any]:
        result, error = entry.result, entry.error
        if error is not None or result is None:
            assert error is not None
            answer: dict[str, Any] = {
                "index": entry.index,
                "error_code": error.code,
                "error_message": error.message,
                "base_offset": -1,
                "log_append_time": None,
                "log_start_offset": -1,
                "record_errors": [],
            }
            if error.code == KioErrorCode.not_leader_or_follower:
                answer["current_leader"] = {
                    "leader_id": error.leader_id,
                    "leader_epoch": error.leader_epoch,
                }
            return answer
        append_time = result.log_append_time_ms
        return {
            "index": entry.index,
            "error_code": 0,
            "error_message": None,
            "base_offset": result.base_offset,
            "log_append_time": None
            if append_time < 0
            else datetime.datetime.fromtimestamp(append_time / 1000, datetime.UTC),
            "log_start_offset": result.log_start_offset,
            "record_errors": [],
        }
