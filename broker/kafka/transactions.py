"""ListTransactions (API key 66, v0-v1) and DescribeTransactions (65, v0) on the Kafka listener:
what ``kafka-transactions.sh list`` / ``describe`` and ``Admin.listTransactions`` /
``describeTransactions`` send (KIP-664, docs/kafka-listener.md).

This project has no transactions (InitProducerId serves idempotent producers only), so each
broker answers as a Kafka transaction coordinator that owns no transaction:

* ListTransactions: NONE and no transactions; a state filter that is not one of Kafka's
  transaction state names is echoed in ``unknown_state_filters``, as Kafka's coordinator does
  (``TransactionStateManager.listTransactionStates``).
* DescribeTransactions: per transactional id, INVALID_REQUEST for an empty one,
  TRANSACTIONAL_ID_AUTHORIZATION_FAILED without DESCRIBE on it, else TRANSACTIONAL_ID_NOT_FOUND
  (``TransactionCoordinator.handleDescribeTransactions`` for an id it has no state for). This
  project's ACLs have no TRANSACTIONAL_ID resources, so with an authorizer on DESCRIBE is
  granted as Kafka grants it when no ACL matches: to super users, or to everyone with
  ``allow.everyone.if.no.acl.found``.
"""

from __future__ import annotations

from typing import Any, Final

from broker.kafka.protocol import Request
from quorum.errors import ErrorCode
from quorum.security.authorization import RequestAuthorization

__all__ = ["TransactionsHandler"]

# Kafka's TransactionState names (org.apache.kafka.coordinator.transaction.TransactionState).
TRANSACTION_STATES: Final = frozenset(
    {
        "Empty",
        "Ongoing",
        "PrepareCommit",
        "PrepareAbort",
        "CompleteCommit",
        "CompleteAbort",
        "Dead",
        "PrepareEpochFence",
    }
)
# Kafka's TRANSACTIONAL_ID_AUTHORIZATION_FAILED (53) and TRANSACTIONAL_ID_NOT_FOUND (105).
TRANSACTIONAL_ID_AUTHORIZATION_FAILED: Final = 53
TRANSACTIONAL_ID_NOT_FOUND: Final = 105


class TransactionsHandler:
    def __init__(self, authorization: RequestAuthorization) -> None:
        self._authorization = authorization

    async def list_transactions(self, request: Request, session: Any) -> dict[str, Any]:
        unknown = [s for s in request.body.state_filters if s not in TRANSACTION_STATES]
        return {
            "error_code": ErrorCode.NONE,
            "unknown_state_filters": unknown,
            "transaction_states": [],
        }

    async def describe_transactions(self, request: Request, session: Any) -> dict[str, Any]:
        return {
            "transaction_states": [
                self._describe(session.caller.principal, transactional_id)
                for transactional_id in request.body.transactional_ids
            ]
        }

    def _may_describe(self, principal: str) -> bool:
        authorization = self._authorization
        return (
            not authorization.enabled
            or principal in authorization.super_users
            or authorization.allow_everyone_if_no_acl_found
        )

    def _describe(self, principal: str, transactional_id: str) -> dict[str, Any]:
        if not self._may_describe(principal):
            code = TRANSACTIONAL_ID_AUTHORIZATION_FAILED
        elif not transactional_id:
            code = ErrorCode.INVALID_REQUEST
        else:
            code = TRANSACTIONAL_ID_NOT_FOUND
        return {
            "error_code": code,
            "transactional_id": transactional_id,
            "transaction_state": "",
            "transaction_timeout": 0,
            "producer_id": -1,
            "producer_epoch": -1,
            "topics": [],
        }
