"""InitProducerId (API key 22, v0-v5) for idempotent producers (docs/kafka-listener.md#produce).

A producer with ``enable.idempotence`` asks for a producer id once, then numbers its batches
per partition from sequence 0; the partition's leader keeps the sequences it has seen
(``broker/log/producer_state.py``) and so appends a retried batch once. The ids come from the
blocks the active controller hands this broker through the metadata log
(``broker/producer_ids.py``), so no two producers ever get the same id, whichever broker they
ask. A new id starts at producer epoch 0. A producer that asks again with its id and epoch
(KIP-360, after an UNKNOWN_PRODUCER_ID or OUT_OF_ORDER_SEQUENCE_NUMBER) gets a new id at epoch
0, as Kafka answers a producer without a transactional id.

In Kafka's order: a transactional id is refused (transactions are not served:
UNSUPPORTED_VERSION, a code every client treats as fatal, so a transactional producer stops at
once instead of retrying), then IDEMPOTENT_WRITE on the cluster or WRITE on some topic
(CLUSTER_AUTHORIZATION_FAILED), then the id (COORDINATOR_LOAD_IN_PROGRESS, which clients retry,
while no block can be had from the controller).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, Final

import structlog
from kio.schema.errors import ErrorCode as KioErrorCode

from broker.kafka.protocol import Request
from broker.producer_ids import ProducerIdsUnavailableError
from quorum.metadata.image import MetadataImage
from quorum.security.acls import AclOperation, ResourceType
from quorum.security.authorization import RequestAuthorization
from quorum.security.identity import Caller

__all__ = ["NEW_PRODUCER_EPOCH", "InitProducerIdHandler"]

# The epoch of a producer id just handed out.
NEW_PRODUCER_EPOCH: Final = 0


class InitProducerIdHandler:
    def __init__(
        self,
        authorization: RequestAuthorization,
        read_image: Callable[[Any], Awaitable[MetadataImage]],
        next_producer_id: Callable[[], Awaitable[int]] | None,
        *,
        broker_id: int,
    ) -> None:
        """``next_producer_id()``: a new id (raises ``ProducerIdsUnavailableError``); None on
        a listener without a controller link (tests), whose answers are retriable errors."""
        self._authorization = authorization
        self._read_image = read_image
        self._next_producer_id = next_producer_id
        self._log = structlog.get_logger("broker.kafka").bind(node_id=broker_id)

    async def handle(self, request: Request, session: Any) -> dict[str, Any]:
        body = request.body
        caller: Caller = session.caller
        if body.transactional_id is not None:
            self._log.info(
                "init_producer_id_refused",
                transactional_id=body.transactional_id,
                peer=caller.peer,
                reason="transactions are not served: produce without a transactional.id",
            )
            return _error(KioErrorCode.unsupported_version)
        image = await self._read_image(session)
        if not (
            self._authorization.allows(
                caller, image, AclOperation.IDEMPOTENT_WRITE, ResourceType.CLUSTER
            )
            or self._authorization.allows_any(caller, image, AclOperation.WRITE, ResourceType.TOPIC)
        ):
            return _error(KioErrorCode.cluster_authorization_failed)
        if self._next_producer_id is None:
            return _error(KioErrorCode.coordinator_load_in_progress)
        try:
            producer_id = await self._next_producer_id()
        except ProducerIdsUnavailableError as exc:
            self._log.warning("init_producer_id_unavailable", reason=str(exc), peer=caller.peer)
            return _error(KioErrorCode.coordinator_load_in_progress)
        return {
            "error_code": KioErrorCode.none,
            "producer_id": producer_id,
            "producer_epoch": NEW_PRODUCER_EPOCH,
        }


def _error(code: KioErrorCode) -> dict[str, Any]:
    return {"error_code": code, "producer_id": -1, "producer_epoch": -1}
