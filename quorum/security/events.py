"""What a node refused, counted and logged boundedly (docs/security.md#what-a-node-logs).

A flood of forged or hostile traffic must be visible without becoming a flood of log lines:
each refusal is counted here (the node's metrics render the counts, docs/operating.md#metrics)
and logged through a ``LogThrottle`` (the first of each kind in full, then one line per 1,000).

- ``handshake_failed``: a TLS handshake on one of the node's listeners failed (no certificate,
  one our trust store does not accept, not TLS at all, a peer that is not whom we meant to
  reach), by listener and the TLS library's reason;
- ``refused``: a request refused for who sent it or what it claimed (``request_refused``,
  ``forwarded_principal_refused``, the Raft core's ``request_rejected``, ...), by event and
  Kafka error code.

One ``SecurityEvents`` per process (``SECURITY_EVENTS``): the counts are the process's, as a
node is one process. Keys are bounded (``SECURITY_EVENT_KEYS_MAX``): a caller who makes up
reasons cannot grow the map.
"""

from __future__ import annotations

import threading
from typing import Final

__all__ = ["SECURITY_EVENTS", "SECURITY_EVENT_KEYS_MAX", "SecurityEvents"]

# Distinct (listener, reason) or (event, error) keys kept; beyond it new keys count under
# "other" (TLS reasons and Kafka error codes are a few dozen; our choice, with room).
SECURITY_EVENT_KEYS_MAX: Final = 256
OTHER: Final = "other"


class SecurityEvents:
    """Counts of refused handshakes and requests. Safe to call from any thread (the gRPC core's
    log reader runs in one of its own)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._handshakes: dict[tuple[str, str], int] = {}
        self._refusals: dict[tuple[str, str], int] = {}

    @staticmethod
    def _bump(counts: dict[tuple[str, str], int], key: tuple[str, str]) -> None:
        if key not in counts and len(counts) >= SECURITY_EVENT_KEYS_MAX:
            key = (key[0], OTHER)
        counts[key] = counts.get(key, 0) + 1

    def handshake_failed(self, listener: str, reason: str) -> None:
        with self._lock:
            self._bump(self._handshakes, (listener, reason))

    def refused(self, event: str, error: str) -> None:
        with self._lock:
            self._bump(self._refusals, (event, error))

    def handshake_failures(self) -> dict[tuple[str, str], int]:
        """(listener, reason) -> failed handshakes so far."""
        with self._lock:
            return dict(self._handshakes)

    def refusals(self) -> dict[tuple[str, str], int]:
        """(event, error code name) -> refused requests so far."""
        with self._lock:
            return dict(self._refusals)


SECURITY_EVENTS: Final = SecurityEvents()
