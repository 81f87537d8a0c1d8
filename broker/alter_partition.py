"""A partition leader's AlterPartition calls to the active controller (Kafka's
``AlterPartitionManager``, one request per change here).

The leader of a partition decides when a follower has caught up (ISR grows) or fallen behind
(ISR shrinks) and asks the controller (``AdminService/AlterPartition``;
``quorum/controller/alter_partition.py``). The change is committed to the metadata log before
the answer comes, so a ``NONE`` result is the partition's new state; any other code is a
refusal that changed nothing, with the partition's current state as the controller sees it.

Every outcome is a result, never an exception: a controller that cannot be reached, or that
does not answer in ``timeout_s``, is REQUEST_TIMED_OUT or NOT_CONTROLLER (retriable: ask again,
at the state the metadata log then shows); the broker not registered yet is
STALE_BROKER_EPOCH. Runs on the broker's event loop (where the controller client lives).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

from broker.controller_client import ControllerClient, ControllerUnavailableError
from quorum.errors import ErrorCode
from quorum.ids import Uuid
from quorum.rpc.v1 import admin_pb2

__all__ = ["ALTER_PARTITION_TIMEOUT_S", "AlterPartitionClient", "AlterPartitionResult"]

# One AlterPartition attempt waits this long for the controller (our choice, like
# broker/producer_ids.py's: well under Kafka's 30 s request.timeout.ms).
ALTER_PARTITION_TIMEOUT_S: Final = 10.0


@dataclass(frozen=True, slots=True)
class AlterPartitionResult:
    """The outcome of one AlterPartition. ``error_code`` NONE: the change is committed and the
    fields are the partition's new state. Otherwise nothing changed; the fields are the
    partition's state as the controller sees it, or -1 and ``()`` when the controller gave
    none (a request-level error, a controller not reached)."""

    error_code: ErrorCode
    error_message: str
    leader: int = -1
    leader_epoch: int = -1
    isr: tuple[int, ...] = ()
    partition_epoch: int = -1

    @property
    def retriable(self) -> bool:
        """True if asking again later (at the state the metadata log then shows) may succeed."""
        return self.error_code.retriable


class AlterPartitionClient:
    def __init__(
        self,
        controllers: ControllerClient,
        broker_id: int,
        broker_epoch: Callable[[], int],
        *,
        timeout_s: float = ALTER_PARTITION_TIMEOUT_S,
    ) -> None:
        """``broker_epoch()``: the epoch of this broker's registration, -1 while it has none."""
        self._controllers = controllers
        self._broker_id = broker_id
        self._broker_epoch = broker_epoch
        self._timeout_s = timeout_s

    async def alter(
        self,
        topic_id: Uuid,
        partition: int,
        leader_epoch: int,
        new_isr: tuple[int, ...],
        partition_epoch: int,
    ) -> AlterPartitionResult:
        """Ask to set the ISR of ``topic_id``-``partition`` to ``new_isr``, as its leader at
        ``leader_epoch`` and ``partition_epoch`` (the state the change was decided on)."""
        epoch = self._broker_epoch()
        if epoch < 0:
            return AlterPartitionResult(
                ErrorCode.STALE_BROKER_EPOCH,
                f"broker {self._broker_id} is not registered with the controller yet, so it "
                "cannot alter partitions; retry once it is",
            )
        request = admin_pb2.AlterPartitionRequest(
            broker_id=self._broker_id,
            broker_epoch=epoch,
            topics=[
                admin_pb2.AlterPartitionTopicData(
                    topic_id=topic_id.bytes,
                    partitions=[
                        admin_pb2.AlterPartitionPartitionData(
                            partition_index=partition,
                            leader_epoch=leader_epoch,
                            new_isr=list(new_isr),
                            partition_epoch=partition_epoch,
                        )
                    ],
                )
            ],
        )
        try:
            answer = await asyncio.wait_for(
                self._controllers.call("AlterPartition", request, timeout_s=self._timeout_s),
                self._timeout_s,
            )
        except ControllerUnavailableError as exc:
            return AlterPartitionResult(
                ErrorCode.NOT_CONTROLLER,
                f"the active controller could not be reached ({exc}); retry shortly",
            )
        except TimeoutError:
            return AlterPartitionResult(
                ErrorCode.REQUEST_TIMED_OUT,
                f"the active controller did not answer within {self._timeout_s:g} s; the "
                "change may or may not be committed: retry at the state the metadata log shows",
            )
        return _result(answer, topic_id, partition)


def _result(
    answer: admin_pb2.AlterPartitionResponse, topic_id: Uuid, partition: int
) -> AlterPartitionResult:
    code = _code(answer.error_code)
    if code is not ErrorCode.NONE:
        return AlterPartitionResult(code, answer.error_message)
    for topic in answer.topics:
        if topic.topic_id != topic_id.bytes:
            continue
        for p in topic.partitions:
            if p.partition_index == partition:
                return AlterPartitionResult(
                    _code(p.error_code),
                    p.error_message,
                    leader=p.leader_id,
                    leader_epoch=p.leader_epoch,
                    isr=tuple(p.isr),
                    partition_epoch=p.partition_epoch,
                )
    return AlterPartitionResult(
        ErrorCode.UNKNOWN_SERVER_ERROR,
        f"the controller's answer has no result for partition {partition} of topic {topic_id}",
    )


def _code(value: int) -> ErrorCode:
    try:
        return ErrorCode(value)
    except ValueError:
        return ErrorCode.UNKNOWN_SERVER_ERROR
