"""The broker's producer ids for InitProducerId (Kafka's ``RPCProducerIdManager``, KIP-730).

Ids come in blocks of 1,000 the active controller hands out through the metadata log
(``AllocateProducerIds``; ``quorum/controller/producer_ids.py``): the block is committed as a
``ProducerIdsRecord`` before the controller answers, so no id is ever handed out twice, across
controller failover, snapshots and broker restarts (a restarted broker asks for a new block; the
rest of its old one is never used). Ids of one block are handed out in order; the next block is
asked for when the current one is used up (as Kafka does once 90 % is used, ahead of need, so
one InitProducerId in a thousand waits for the controller; here that one waits for the round
trip instead, which keeps the broker from holding two blocks).

Runs on the broker's event loop (where the controller client lives); the Kafka listener reaches
it through ``BrokerLoop.run``. A failure (no active controller, the broker not registered yet,
a controller's refusal) is ``ProducerIdsUnavailableError``: InitProducerId answers it with a
retriable code, and the client asks again.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Final

from broker.controller_client import ControllerClient, ControllerUnavailableError
from quorum.errors import ErrorCode
from quorum.rpc.v1 import admin_pb2

__all__ = ["ALLOCATE_TIMEOUT_S", "ProducerIdManager", "ProducerIdsUnavailableError"]

# One AllocateProducerIds attempt waits this long for the controller (our choice: well under
# the 30 s request.timeout.ms of Kafka's clients, so the client hears our retriable answer).
ALLOCATE_TIMEOUT_S: Final = 10.0


class ProducerIdsUnavailableError(Exception):
    """No producer id can be handed out right now (retriable); the message says why."""


class ProducerIdManager:
    def __init__(
        self,
        controllers: ControllerClient,
        broker_id: int,
        broker_epoch: Callable[[], int],
        *,
        timeout_s: float = ALLOCATE_TIMEOUT_S,
    ) -> None:
        """``broker_epoch()``: the epoch of this broker's registration, -1 while it has none."""
        self._controllers = controllers
        self._broker_id = broker_id
        self._broker_epoch = broker_epoch
        self._timeout_s = timeout_s
        self._next = 0
        self._end = 0  # the block is [_next, _end); empty until the first allocation
        self._lock = asyncio.Lock()
        self.blocks_allocated = 0

    async def next_id(self) -> int:
        """A producer id never handed out before. Raises ``ProducerIdsUnavailableError``."""
        async with self._lock:
            if self._next >= self._end:
                self._next, self._end = await self._allocate()
                self.blocks_allocated += 1
            producer_id = self._next
            self._next += 1
            return producer_id

    async def _allocate(self) -> tuple[int, int]:
        epoch = self._broker_epoch()
        if epoch < 0:
            raise ProducerIdsUnavailableError(
                f"broker {self._broker_id} is not registered with the controller yet, so it "
                "has no producer ids to hand out; retry shortly"
            )
        request = admin_pb2.AllocateProducerIdsRequest(
            broker_id=self._broker_id, broker_epoch=epoch
        )
        try:
            answer = await asyncio.wait_for(
                self._controllers.call("AllocateProducerIds", request, timeout_s=self._timeout_s),
                self._timeout_s,
            )
        except ControllerUnavailableError as exc:
            raise ProducerIdsUnavailableError(
                f"no producer id block: the active controller could not be reached ({exc}); "
                "retry shortly"
            ) from None
        except TimeoutError:
            raise ProducerIdsUnavailableError(
                f"no producer id block: the active controller did not answer within "
                f"{self._timeout_s:g} s; retry shortly"
            ) from None
        if answer.error_code != ErrorCode.NONE or answer.producer_id_len <= 0:
            raise ProducerIdsUnavailableError(
                f"no producer id block: the controller answered "
                f"error code {answer.error_code}: {answer.error_message}"
            )
        start = int(answer.producer_id_start)
        return start, start + int(answer.producer_id_len)
