"""ListOffsets (API key 2, v1-v9) and OffsetForLeaderEpoch (API key 23, v0-v4) on the partition
leader (docs/kafka-listener.md#listoffsets-and-offsetforleaderepoch).

Both need DESCRIBE on the topic (Kafka's rule for consumers; READ implies it), then the
partition (UNKNOWN_TOPIC_OR_PARTITION), ``current_leader_epoch`` (FENCED_LEADER_EPOCH,
UNKNOWN_LEADER_EPOCH) and this broker its leader (NOT_LEADER_OR_FOLLOWER), as Fetch.

ListOffsets by timestamp: -2 the log start offset (EARLIEST), -1 the high watermark (LATEST:
what a consumer can read; it is also the last stable offset here, so read_committed changes
nothing), -3 the record with the largest timestamp (MAX_TIMESTAMP, v7 on), -4 the log start
offset (EARLIEST_LOCAL, v8 on: everything is local), -5 offset -1 with epoch -1 (LATEST_TIERED,
v9 on: nothing is tiered), any other value the first record whose timestamp is at least it,
through the time index (offset -1 and timestamp -1 when there is none). A timestamp the
version does not know is UNSUPPORTED_VERSION; a partition named twice INVALID_REQUEST.

OffsetForLeaderEpoch answers from the leader-epoch cache (Kafka's ``endOffsetFor``): the
largest epoch at or below the one asked for and where the next epoch starts (the log end
offset for the latest), or -1 / -1 for an epoch past every known one.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, Final

from kio.schema.errors import ErrorCode as KioErrorCode

from broker.kafka.data_plane import DataPlane, PartitionError, log_error
from broker.kafka.protocol import Request
from broker.log.errors import LogClosedError, LogStorageError, RecordBatchError
from broker.log.manager import InconsistentTopicIdError, LogNotHereError
from broker.log.partition_log import PartitionLog, TimestampOffset
from quorum.metadata.image import MetadataImage, TopicImage
from quorum.security.acls import AclOperation
from quorum.security.authorization import RequestAuthorization

__all__ = ["OffsetsHandler"]

LATEST: Final = -1
EARLIEST: Final = -2
MAX_TIMESTAMP: Final = -3
EARLIEST_LOCAL: Final = -4
LATEST_TIERED: Final = -5
# The first ListOffsets version that knows each special timestamp (Kafka's
# ListOffsetsRequest: KIP-734, KIP-1005).
TIMESTAMP_VERSION_MIN: Final = {MAX_TIMESTAMP: 7, EARLIEST_LOCAL: 8, LATEST_TIERED: 9}
_LOG_ERRORS: Final = (
    RecordBatchError,
    LogStorageError,
    LogClosedError,
    LogNotHereError,
    InconsistentTopicIdError,
)


class OffsetsHandler:
    def __init__(
        self,
        data: DataPlane,
        authorization: RequestAuthorization,
        read_image: Callable[[Any], Awaitable[MetadataImage]],
    ) -> None:
        self._data = data
        self._authorization = authorization
        self._read_image = read_image

    def _checked(
        self,
        image: MetadataImage,
        *,
        caller: Any,
        name: str,
        index: int,
        current_leader_epoch: int,
        describable: dict[str, bool],
    ) -> tuple[TopicImage | None, PartitionError | None]:
        if name not in describable:
            describable[name] = self._authorization.allows_topic(
                caller, image, AclOperation.DESCRIBE, name
            )
        if not describable[name]:
            return None, PartitionError(
                KioErrorCode.topic_authorization_failed,
                f"this principal may not DESCRIBE topic {name!r}: the ACLs do not allow it",
            )
        topic = image.topic_by_name(name)
        if topic is None:
            return None, PartitionError(
                KioErrorCode.unknown_topic_or_partition, f"topic {name!r} does not exist"
            )
        _, error = self._data.leader_check(topic, index, current_leader_epoch)
        return (topic, None) if error is None else (None, error)

    # ----- ListOffsets --------------------------------------------------------------------------

    async def list_offsets(self, request: Request, session: Any) -> dict[str, Any]:
        body = request.body
        version = request.api_version
        image = await self._read_image(session)
        describable: dict[str, bool] = {}
        seen: set[tuple[str, int]] = set()
        work: list[tuple[dict[str, Any], TopicImage, int]] = []
        topics = []
        for entry in body.topics:
            partitions = []
            for partition in entry.partitions:
                index = partition.partition_index
                answer: dict[str, Any] = {"partition_index": index, "error_code": 0}
                timestamp = partition.timestamp
                topic, error = self._checked(
                    image,
                    caller=session.caller,
                    name=entry.name,
                    index=index,
                    current_leader_epoch=getattr(partition, "current_leader_epoch", -1),
                    describable=describable,
                )
                if (entry.name, index) in seen:
                    error = PartitionError(
                        KioErrorCode.invalid_request,
                        f"{entry.name}-{index} is named more than once in the request",
                    )
                elif version < TIMESTAMP_VERSION_MIN.get(timestamp, 0):
                    error = PartitionError(
                        KioErrorCode.unsupported_version,
                        f"timestamp {timestamp} needs ListOffsets "
                        f"v{TIMESTAMP_VERSION_MIN[timestamp]} (this request is v{version})",
                    )
                seen.add((entry.name, index))
                if error is not None or topic is None:
                    assert error is not None
                    answer.update(error_code=error.code, offset=-1, timestamp=-1, leader_epoch=-1)
                else:
                    work.append((answer, topic, timestamp))
                partitions.append(answer)
            topics.append({"name": entry.name, "partitions": partitions})
        if work:
            await self._data.in_reader(lambda: self._look_up(work))
        return {"topics": topics}

    def _look_up(self, work: list[tuple[dict[str, Any], TopicImage, int]]) -> None:
        for answer, topic, timestamp in work:
            try:
                found = self._offset(self._data.log(topic, answer["partition_index"]), timestamp)
            except _LOG_ERRORS as exc:
                error = log_error(exc, by_id=False)
                answer.update(error_code=error.code, offset=-1, timestamp=-1, leader_epoch=-1)
                continue
            if found is None:
                answer.update(offset=-1, timestamp=-1, leader_epoch=-1)
            else:
                answer.update(
                    offset=found.offset, timestamp=found.timestamp, leader_epoch=found.leader_epoch
                )

    @staticmethod
    def _offset(log: PartitionLog, timestamp: int) -> TimestampOffset | None:
        if timestamp in (EARLIEST, EARLIEST_LOCAL):
            return log.earliest()
        if timestamp == LATEST:  # a consumer's latest: the high watermark
            latest = log.latest()
            return TimestampOffset(latest.timestamp, log.high_watermark, latest.leader_epoch)
        if timestamp == LATEST_TIERED:
            return TimestampOffset(-1, -1, -1)
        if timestamp == MAX_TIMESTAMP:
            return log.max_timestamp()
        return log.offset_for_timestamp(timestamp)

    # ----- OffsetForLeaderEpoch ------------------------------------------------------------------

    async def offset_for_leader_epoch(self, request: Request, session: Any) -> dict[str, Any]:
        body = request.body
        image = await self._read_image(session)
        describable: dict[str, bool] = {}
        work: list[tuple[dict[str, Any], TopicImage, int]] = []
        topics = []
        for entry in body.topics:
            partitions = []
            for partition in entry.partitions:
                answer: dict[str, Any] = {
                    "partition": partition.partition,
                    "error_code": 0,
                    "leader_epoch": -1,
                    "end_offset": -1,
                }
                topic, error = self._checked(
                    image,
                    caller=session.caller,
                    name=entry.topic,
                    index=partition.partition,
                    current_leader_epoch=getattr(partition, "current_leader_epoch", -1),
                    describable=describable,
                )
                if error is not None or topic is None:
                    assert error is not None
                    answer["error_code"] = error.code
                else:
                    work.append((answer, topic, partition.leader_epoch))
                partitions.append(answer)
            topics.append({"topic": entry.topic, "partitions": partitions})
        if work:
            await self._data.in_reader(lambda: self._epochs(work))
        return {"topics": topics}

    def _epochs(self, work: list[tuple[dict[str, Any], TopicImage, int]]) -> None:
        for answer, topic, epoch in work:
            try:
                log = self._data.log(topic, answer["partition"])
                answer["leader_epoch"], answer["end_offset"] = log.end_offset_for_epoch(epoch)
            except _LOG_ERRORS as exc:
                answer["error_code"] = log_error(exc, by_id=False).code
