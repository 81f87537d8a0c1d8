"""Writes a Kafka client sends to a broker go to the active controller (Kafka's KIP-590).

The broker calls the controller's admin gRPC (quorum/rpc/v1/admin.proto) with its own node
certificate, as it does for RegisterBroker, and names the client's principal in the call's
metadata (``quorum.security.identity.forwarding_metadata``); the controller authorizes the
request as that client (docs/security.md#forwarded-requests). The answer carries the offset
that committed the change, which the listener waits for before its next read on the same
connection (read-your-writes).
"""

from __future__ import annotations

import asyncio
import time
from typing import Any, Final

from broker.controller_client import ControllerClient, ControllerUnavailableError
from quorum.errors import ErrorCode
from quorum.security.identity import Caller, forwarding_metadata

__all__ = ["Forwarder", "ForwardingError"]

# A forwarded write waits for the controller at most this long, whatever the client's own
# timeout says (our choice: under the 30 s request.timeout.ms of Kafka's clients, so the client
# hears our answer rather than its own timeout), and at least the shorter bound (a timeout of 0
# in CreateTopics means "do not wait for the brokers", never "give up at once").
FORWARD_TIMEOUT_MS_MAX: Final = 25_000
FORWARD_TIMEOUT_MS_MIN: Final = 5_000


class ForwardingError(Exception):
    """The write could not be handed to an active controller within its deadline: every entry of
    the request is answered with ``error_code`` (NOT_CONTROLLER or REQUEST_TIMED_OUT, both
    retriable)."""

    def __init__(self, error_code: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.error_code = error_code


class Forwarder:
    def __init__(self, controllers: ControllerClient) -> None:
        self._controllers = controllers

    async def call(self, method: str, request: Any, caller: Caller, timeout_ms: int) -> Any:
        """The active controller's answer to admin RPC ``method`` made as ``caller``. Raises
        ``ForwardingError``."""
        timeout_s = min(max(timeout_ms, FORWARD_TIMEOUT_MS_MIN), FORWARD_TIMEOUT_MS_MAX) / 1000
        try:
            # While no controller leads (an election), the write waits for the next one within
            # its deadline, as Kafka's forwarding does, instead of being refused at once.
            return await asyncio.wait_for(
                self._controllers.call(
                    method,
                    request,
                    metadata=forwarding_metadata(caller),
                    timeout_s=timeout_s,
                    retry_until_s=time.monotonic() + timeout_s,
                ),
                timeout_s,
            )
        except ControllerUnavailableError as exc:
            raise ForwardingError(
                ErrorCode.NOT_CONTROLLER,
                f"the broker found no active controller within {timeout_s:g} s ({exc}); "
                "retry shortly",
            ) from None
        except TimeoutError:
            raise ForwardingError(
                ErrorCode.REQUEST_TIMED_OUT,
                f"outcome unknown: the active controller did not answer within {timeout_s:g} s "
                "(describe the topics to find out)",
            ) from None
