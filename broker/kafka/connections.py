"""Kafka's connection limits for the broker's Kafka listeners (docs/kafka-listener.md#robustness):
``max.connections`` for the broker, ``max.connections.per.ip`` for each client address, with
``max.connections.per.ip.overrides`` for named hosts, counted across every Kafka listener of
the broker as Kafka counts them. A connection is counted from its acceptance, before its TLS
handshake, so half-open handshakes take their share too.

Beyond a limit the new connection is closed at once (logged, throttled). Kafka refuses a
connection beyond the per-address limit the same way; beyond ``max.connections`` it stops
accepting until one closes, which here would leave clients waiting in the listen backlog with
no answer, so they are closed instead and retry.
"""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Mapping
from typing import Final

__all__ = ["ConnectionLimits", "OverrideUnresolvableError", "client_address"]

# How many addresses one host name of max.connections.per.ip.overrides may resolve to (each gets
# the host's limit, as Kafka resolves every override once, at start). A name with more is
# probably not one client; our choice.
OVERRIDE_ADDRESSES_MAX: Final = 64


class OverrideUnresolvableError(ValueError):
    """A host of ``max.connections.per.ip.overrides`` has no address: the broker does not
    start (Kafka's config validation refuses an unknown host too)."""


def client_address(peer: object) -> str:
    """The client's IP address from a socket's peer name, IPv4-mapped IPv6 addresses as IPv4 (a
    dual-stack listener sees ``::ffff:10.0.0.1`` for ``10.0.0.1``)."""
    host = peer[0] if isinstance(peer, tuple) and peer else str(peer)
    try:
        address = ipaddress.ip_address(str(host).split("%", 1)[0])
    except ValueError:
        return str(host)
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return str(address.ipv4_mapped)
    return str(address)


def _addresses_of(host: str) -> list[str]:
    try:
        return [str(ipaddress.ip_address(host.strip("[]")))]
    except ValueError:
        pass
    try:
        found = socket.getaddrinfo(host, None, type=socket.SOCK_STREAM)
    except OSError as exc:
        raise OverrideUnresolvableError(
            f"max.connections.per.ip.overrides: host {host!r} does not resolve ({exc}); give "
            "an IP address or a name this machine can resolve"
        ) from None
    addresses = list(dict.fromkeys(client_address(entry[4]) for entry in found))
    if len(addresses) > OVERRIDE_ADDRESSES_MAX:
        raise OverrideUnresolvableError(
            f"max.connections.per.ip.overrides: host {host!r} resolves to {len(addresses)} "
            f"addresses; allowed: at most {OVERRIDE_ADDRESSES_MAX} (give the addresses)"
        )
    return addresses


class ConnectionLimits:
    """Open connections of the broker's Kafka listeners, in all and per client address. Used from
    one thread (the Kafka listeners' loop)."""

    def __init__(
        self,
        connections_max: int,
        connections_per_ip_max: int,
        overrides: Mapping[str, int] | None = None,
    ) -> None:
        """``overrides``: host (name or address) -> its limit; names are resolved here, once."""
        self.connections_max = connections_max
        self.connections_per_ip_max = connections_per_ip_max
        self.overrides: dict[str, int] = {}
        for host, limit in (overrides or {}).items():
            for address in _addresses_of(host):
                self.overrides[address] = limit
        self.open = 0
        self._per_address: dict[str, int] = {}
        self.refused_total = 0
        self.refused_per_ip = 0

    def limit_of(self, address: str) -> int:
        return self.overrides.get(address, self.connections_per_ip_max)

    def acquire(self, address: str) -> tuple[str, str] | None:
        """Count a new connection from ``address``; or, when a limit is reached, why not: a
        reason (``too_many_connections``, ``too_many_connections_per_ip``) and what was wrong
        and allowed. A refused connection must be closed, and not released."""
        if self.open >= self.connections_max:
            self.refused_total += 1
            return "too_many_connections", (
                f"the broker's Kafka listeners have {self.open} connections open; allowed: "
                f"{self.connections_max} (max.connections)"
            )
        count = self._per_address.get(address, 0)
        limit = self.limit_of(address)
        if count >= limit:
            self.refused_per_ip += 1
            key = (
                "max.connections.per.ip.overrides"
                if address in self.overrides
                else "max.connections.per.ip"
            )
            return "too_many_connections_per_ip", (
                f"{address} has {count} connections open; allowed: {limit} per address ({key})"
            )
        self.open += 1
        self._per_address[address] = count + 1
        return None

    def release(self, address: str) -> None:
        """A connection ``acquire`` counted has closed."""
        self.open -= 1
        count = self._per_address[address] - 1
        if count:
            self._per_address[address] = count
        else:
            del self._per_address[address]

    def open_from(self, address: str) -> int:
        return self._per_address.get(address, 0)
