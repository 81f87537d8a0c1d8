"""The values a node configuration is made of: its error, addresses and listeners, and the
constants its keys allow (roles, security protocols, authorizers).

Imported by every other ``quorum/config_*`` module and re-exported by ``quorum.config``, which
is where the rest of the project imports them from.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Final

ROLE_CONTROLLER: Final = "controller"
ROLE_BROKER: Final = "broker"
ROLES: Final = frozenset({ROLE_CONTROLLER, ROLE_BROKER})

PORT_MAX: Final = 65_535
# The windows a request quota keeps per principal (quota.window.num): each is a few numbers per
# principal in memory. Our choice; Kafka's default is 11 and its users rarely exceed 60.
QUOTA_WINDOWS_MAX: Final = 1_000

# Kafka's security protocols this project speaks (SASL is not supported).
PLAINTEXT: Final = "PLAINTEXT"
SSL: Final = "SSL"
SECURITY_PROTOCOLS: Final = (PLAINTEXT, SSL)
# Kafka's example configs map every protocol name to itself, SASL ones included: accepted in the
# map for listeners this node does not serve.
SASL_PROTOCOLS: Final = ("SASL_PLAINTEXT", "SASL_SSL")
CLIENT_AUTH_VALUES: Final = ("required", "requested", "none")
# authorizer.class.name: Kafka's KRaft authorizer, deciding from ACLs in the metadata log.
STANDARD_AUTHORIZER: Final = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"
AUTHORIZERS: Final[Mapping[str, str]] = {
    STANDARD_AUTHORIZER: STANDARD_AUTHORIZER,
    "StandardAuthorizer": STANDARD_AUTHORIZER,
    "": "",
}


class ConfigError(ValueError):
    """The configuration is not usable. ``key`` names the offending key when there is one."""

    def __init__(self, message: str, *, key: str | None = None) -> None:
        super().__init__(message)
        self.key = key


@dataclass(frozen=True, slots=True)
class HostPort:
    """A network address. ``host`` is a name or an IP address (IPv6 without brackets)."""

    host: str
    port: int

    def __str__(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{host}:{self.port}"


@dataclass(frozen=True, slots=True)
class Listener:
    """One ``NAME://host:port`` entry of ``listeners``: where this node's gRPC server binds."""

    name: str
    host: str
    port: int
    # Written NAME://:port (Kafka's every-interface form): bound on 0.0.0.0 and advertised
    # under this machine's host name when advertised.listeners does not name it.
    host_omitted: bool = field(default=False, compare=False)

    @property
    def address(self) -> HostPort:
        return HostPort(self.host, self.port)

    def __str__(self) -> str:
        return f"{self.name}://{self.address}"
