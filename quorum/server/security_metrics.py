"""The metric families of what a node refused (quorum/security/events.py), every role:

- ``metaquorum_tls_handshake_failures_total{listener, reason}``: failed TLS handshakes, by the
  node's listener and the TLS library's reason (``WRONG_VERSION_NUMBER``: not TLS;
  ``PEER_DID_NOT_RETURN_A_CERTIFICATE``; ``CERTIFICATE_VERIFY_FAILED``; ``PEER_NAME_MISMATCH``:
  a peer this node reached is not the node it meant);
- ``metaquorum_requests_refused_total{event, error_code}``: requests refused for who sent them
  or what they claimed, by the log event that reports them (docs/security.md#what-a-node-logs).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from prometheus_client.core import CounterMetricFamily, Metric

from quorum.security.events import SECURITY_EVENTS, SecurityEvents

__all__ = ["read_security_events", "security_families"]


def read_security_events(events: SecurityEvents = SECURITY_EVENTS) -> dict[str, Any]:
    """The counts, for a scrape (``NodeMetrics.add_source``; thread-safe, cheap)."""
    return {
        "tls_handshake_failures": events.handshake_failures(),
        "requests_refused": events.refusals(),
    }


def security_families(data: Mapping[str, Any]) -> Iterator[Metric]:
    handshakes = CounterMetricFamily(
        "metaquorum_tls_handshake_failures",
        "Failed TLS handshakes, by listener and the TLS library's reason (gRPC's count "
        "includes this node's own outbound connections)",
        labels=("listener", "reason"),
    )
    for (listener, reason), count in sorted(data["tls_handshake_failures"].items()):
        handshakes.add_metric((listener, reason), count)
    yield handshakes
    refused = CounterMetricFamily(
        "metaquorum_requests_refused",
        "Requests refused for who sent them or what they claimed, by log event and Kafka "
        "error code",
        labels=("event", "error_code"),
    )
    for (event, error), count in sorted(data["requests_refused"].items()):
        refused.add_metric((event, error), count)
    yield refused
