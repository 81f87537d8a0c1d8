"""Producer-id blocks (Kafka's ``ProducerIdControlManager``, KIP-730), as a pure function.

A broker answering InitProducerId hands out ids from a block the active controller gave it. The
controller hands out ``PRODUCER_ID_BLOCK_SIZE`` ids at a time, from the image's
``next_producer_id`` on, and writes a ``ProducerIdsRecord`` whose ``next_producer_id`` is the
end of the block; the answer is sent once that record is committed. Since the image (and every
snapshot of it) keeps the next block start, a controller elected later never hands out an id
twice. Only a registered broker at its current epoch gets a block (STALE_BROKER_EPOCH
otherwise), as Kafka's ``checkBrokerEpoch``.
"""

from __future__ import annotations

from typing import Final

from quorum.controller.requests import AllocateProducerIdsRequest, AllocateProducerIdsResponse
from quorum.controller.result import ControllerResult
from quorum.errors import ErrorCode
from quorum.metadata.image import MetadataImage
from quorum.metadata.records import INT64_MAX, ProducerIdsRecord

__all__ = ["PRODUCER_ID_BLOCK_SIZE", "allocate_producer_ids"]

# Kafka's ProducerIdsBlock.PRODUCER_ID_BLOCK_SIZE.
PRODUCER_ID_BLOCK_SIZE: Final = 1000


def allocate_producer_ids(
    image: MetadataImage, request: AllocateProducerIdsRequest
) -> ControllerResult[AllocateProducerIdsResponse]:
    """Possible codes: NONE, STALE_BROKER_EPOCH, UNKNOWN_SERVER_ERROR (ids exhausted)."""
    broker = image.brokers.get(request.broker_id)
    if broker is None:
        return _error(
            ErrorCode.STALE_BROKER_EPOCH,
            f"broker {request.broker_id} is not registered: only a registered broker may "
            "allocate producer ids (register, then ask again)",
        )
    if broker.broker_epoch != request.broker_epoch:
        return _error(
            ErrorCode.STALE_BROKER_EPOCH,
            f"expected broker epoch {broker.broker_epoch} for broker {request.broker_id}, got "
            f"{request.broker_epoch}: register again to get the current epoch",
        )
    start = image.next_producer_id
    if start > INT64_MAX - PRODUCER_ID_BLOCK_SIZE:
        return _error(
            ErrorCode.UNKNOWN_SERVER_ERROR,
            f"producer ids are exhausted: the next block would start at {start}, past "
            f"{INT64_MAX - PRODUCER_ID_BLOCK_SIZE}",
        )
    record = ProducerIdsRecord(
        broker_id=request.broker_id,
        broker_epoch=request.broker_epoch,
        next_producer_id=start + PRODUCER_ID_BLOCK_SIZE,
    )
    return ControllerResult(
        (record,),
        AllocateProducerIdsResponse(
            producer_id_start=start, producer_id_len=PRODUCER_ID_BLOCK_SIZE
        ),
    )


def _error(code: ErrorCode, message: str) -> ControllerResult[AllocateProducerIdsResponse]:
    return ControllerResult((), AllocateProducerIdsResponse(error_code=code, error_message=message))
