"""DescribeProducers (API key 61, v0) on the Kafka listener: what ``kafka-transactions.sh
describe-producers`` and ``Admin.describeProducers`` send (KIP-664, docs/kafka-listener.md).

Answered from the producer state of the partition's log on this broker
(``broker/log/producer_state.py``), as Kafka's ``Partition.activeProducerState`` answers from
its local log: on the leader, and on a follower too (Kafka's Admin asks the leader unless told
a broker). Each producer: its id, epoch, last sequence and the timestamp of its newest batch;
coordinator epoch -1 and transaction start offset -1 (idempotent producers only: this project
has no transactions).

Refusals, in Kafka's order (``KafkaApis.handleDescribeProducersRequest``), for every partition
of a topic: INVALID_TOPIC_EXCEPTION (an illegal name), TOPIC_AUTHORIZATION_FAILED (no READ on
the topic), UNKNOWN_TOPIC_OR_PARTITION (no such topic); then per partition:
UNKNOWN_TOPIC_OR_PARTITION (no such partition), NOT_LEADER_OR_FOLLOWER (this broker holds no
replica of it, or its log is not here yet), KAFKA_STORAGE_ERROR (its log failed).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from kio.schema.errors import ErrorCode as KioErrorCode

from broker.kafka.data_plane import DataPlane, PartitionError, log_error
from broker.kafka.protocol import Request
from broker.log.producer_state import NO_COORDINATOR_EPOCH, NO_TXN_OFFSET, ActiveProducer
from quorum.controller.names import legal_name_error
from quorum.errors import ErrorCode
from quorum.metadata.image import MetadataImage, TopicImage
from quorum.security.acls import AclOperation
from quorum.security.authorization import RequestAuthorization

__all__ = ["DescribeProducersHandler"]


class DescribeProducersHandler:
    def __init__(
        self,
        data: DataPlane,
        authorization: RequestAuthorization,
        read_image: Callable[[Any], Awaitable[MetadataImage]],
    ) -> None:
        self._data = data
        self._authorization = authorization
        self._read_image = read_image

    async def handle(self, request: Request, session: Any) -> dict[str, Any]:
        image = await self._read_image(session)
        caller = session.caller
        # (topic, partition) -> the producers, or why not; the logs are read in one job.
        local: list[tuple[TopicImage, int]] = []
        answers: list[tuple[str, list[tuple[int, PartitionError | None]]]] = []
        for entry in request.body.topics:
            name = entry.name
            error = self._topic_error(caller, image, name)
            topic = image.topic_by_name(name) if error is None else None
            partitions: list[tuple[int, PartitionError | None]] = []
            for index in entry.partition_indexes:
                partition_error = error
                if topic is not None:
                    partition_error = self._partition_error(topic, index)
                    if partition_error is None:
                        local.append((topic, index))
                partitions.append((index, partition_error))
            answers.append((name, partitions))
        producers = await self._data.in_reader(lambda: [self._read(t, i) for t, i in local])
        found = {(t.name, i): result for (t, i), result in zip(local, producers, strict=True)}
        return {
            "topics": [
                {
                    "name": name,
                    "partitions": [
                        _partition(index, error, found.get((name, index)))
                        for index, error in partitions
                    ],
                }
                for name, partitions in answers
            ]
        }

    def _topic_error(self, caller: Any, image: MetadataImage, name: str) -> PartitionError | None:
        illegal = legal_name_error(name)
        if illegal is not None:
            return PartitionError(ErrorCode.INVALID_TOPIC_EXCEPTION, illegal)
        if not self._authorization.allows_topic(caller, image, AclOperation.READ, name):
            return PartitionError(
                ErrorCode.TOPIC_AUTHORIZATION_FAILED,
                f"{caller.principal} may not describe the producers of topic {name!r}: that "
                "needs READ on the topic",
            )
        if image.topic_by_name(name) is None:
            return PartitionError(
                KioErrorCode.unknown_topic_or_partition,
                f"this broker's metadata has no topic {name!r}",
            )
        return None

    def _partition_error(self, topic: TopicImage, index: int) -> PartitionError | None:
        state = topic.partitions.get(index)
        if state is None:
            return PartitionError(
                KioErrorCode.unknown_topic_or_partition,
                f"topic {topic.name!r} has no partition {index} (it has {len(topic.partitions)})",
            )
        if self._data.broker_id not in state.replicas:
            return PartitionError(
                KioErrorCode.not_leader_or_follower,
                f"broker {self._data.broker_id} holds no replica of {topic.name}-{index} (its "
                f"replicas: {list(state.replicas)}; its leader: broker {state.leader})",
                state.leader,
                state.leader_epoch,
            )
        return None

    def _read(self, topic: TopicImage, index: int) -> list[ActiveProducer] | PartitionError:
        """In the reader thread: the producers of the partition's log here, or why not."""
        try:
            return self._data.log(topic, index).active_producers()
        except Exception as exc:  # log_error re-raises what it does not know
            return log_error(exc, by_id=False)


def _partition(
    index: int, error: PartitionError | None, found: list[ActiveProducer] | PartitionError | None
) -> dict[str, Any]:
    if isinstance(found, PartitionError):
        error = found
    if error is not None or not isinstance(found, list):
        assert error is not None
        return {
            "partition_index": index,
            "error_code": error.code,
            "error_message": error.message,
            "active_producers": [],
        }
    return {
        "partition_index": index,
        "error_code": ErrorCode.NONE,
        "error_message": None,
        "active_producers": [
            {
                "producer_id": p.producer_id,
                "producer_epoch": p.epoch,
                "last_sequence": p.last_sequence,
                "last_timestamp": p.last_timestamp,
                "coordinator_epoch": NO_COORDINATOR_EPOCH,
                "current_txn_start_offset": NO_TXN_OFFSET,
            }
            for p in found
        ],
    }
