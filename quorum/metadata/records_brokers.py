"""Broker records: a broker's registration (with its listeners) and the records that unregister,
fence and unfence it (KIP-631 types 0, 1, 7, 8), and the producer-id blocks brokers are handed
(Kafka's ``ProducerIdsRecord``, type 15), each with its wire form.

``quorum.metadata.records`` documents the wire form and gathers these with the other families;
``record_codec`` dispatches to the ``*_to_wire`` / ``*_from_wire`` functions here.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from quorum.ids import Uuid
from quorum.limits import INT32_MAX
from quorum.metadata.record_fields import (
    INT64_MAX,
    PORT_MAX,
    InvalidRecordError,
    check_bool,
    check_int,
    check_optional_str,
    check_str,
    check_uuid,
    fail_field,
    tuple_from_wire,
    uuid_from_wire,
)

__all__ = [
    "BrokerEndpoint",
    "FenceBrokerRecord",
    "ProducerIdsRecord",
    "RegisterBrokerRecord",
    "UnfenceBrokerRecord",
    "UnregisterBrokerRecord",
    "broker_epoch_to_wire",
    "endpoint_from_wire",
    "endpoint_to_wire",
    "fence_broker_from_wire",
    "producer_ids_from_wire",
    "producer_ids_to_wire",
    "register_broker_from_wire",
    "register_broker_to_wire",
    "unfence_broker_from_wire",
    "unregister_broker_from_wire",
]


@dataclass(frozen=True, slots=True)
class BrokerEndpoint:
    """One listener of a broker (Kafka's ``BrokerEndpoint`` in ``RegisterBrokerRecord``)."""

    name: str
    host: str
    port: int

    def __post_init__(self) -> None:
        check_str(self, "name", self.name)
        check_str(self, "host", self.host)
        check_int(self, "port", self.port, 0, PORT_MAX)


@dataclass(frozen=True, slots=True)
class RegisterBrokerRecord:
    broker_id: int
    incarnation_id: Uuid
    broker_epoch: int
    endpoints: tuple[BrokerEndpoint, ...]
    rack: str | None = None
    fenced: bool = True

    TYPE: ClassVar[int] = 0
    VERSION: ClassVar[int] = 0

    def __post_init__(self) -> None:
        check_int(self, "broker_id", self.broker_id, 0, INT32_MAX)
        check_uuid(self, "incarnation_id", self.incarnation_id)
        check_int(self, "broker_epoch", self.broker_epoch, 0, INT64_MAX)
        if type(self.endpoints) is not tuple:
            fail_field(self, "endpoints", "a tuple of BrokerEndpoint", self.endpoints)
        for endpoint in self.endpoints:
            if type(endpoint) is not BrokerEndpoint:
                fail_field(self, "endpoints", "a tuple of BrokerEndpoint", self.endpoints)
        check_optional_str(self, "rack", self.rack)
        check_bool(self, "fenced", self.fenced)


@dataclass(frozen=True, slots=True)
class UnregisterBrokerRecord:
    broker_id: int
    broker_epoch: int

    TYPE: ClassVar[int] = 1
    VERSION: ClassVar[int] = 0

    def __post_init__(self) -> None:
        check_int(self, "broker_id", self.broker_id, 0, INT32_MAX)
        check_int(self, "broker_epoch", self.broker_epoch, 0, INT64_MAX)


@dataclass(frozen=True, slots=True)
class FenceBrokerRecord:
    broker_id: int
    broker_epoch: int

    TYPE: ClassVar[int] = 7
    VERSION: ClassVar[int] = 0

    def __post_init__(self) -> None:
        check_int(self, "broker_id", self.broker_id, 0, INT32_MAX)
        check_int(self, "broker_epoch", self.broker_epoch, 0, INT64_MAX)


@dataclass(frozen=True, slots=True)
class UnfenceBrokerRecord:
    broker_id: int
    broker_epoch: int

    TYPE: ClassVar[int] = 8
    VERSION: ClassVar[int] = 0

    def __post_init__(self) -> None:
        check_int(self, "broker_id", self.broker_id, 0, INT32_MAX)
        check_int(self, "broker_epoch", self.broker_epoch, 0, INT64_MAX)


@dataclass(frozen=True, slots=True)
class ProducerIdsRecord:
    """Kafka's ``ProducerIdsRecord``: broker ``broker_id`` (at ``broker_epoch``) was handed the
    block of producer ids below ``next_producer_id``, the first id of the next block. A snapshot
    writes it with broker id and epoch -1 (Kafka's ``ProducerIdsImage``): only the next block
    start is state."""

    broker_id: int
    broker_epoch: int
    next_producer_id: int

    TYPE: ClassVar[int] = 15
    VERSION: ClassVar[int] = 0

    def __post_init__(self) -> None:
        check_int(self, "broker_id", self.broker_id, -1, INT32_MAX)
        check_int(self, "broker_epoch", self.broker_epoch, -1, INT64_MAX)
        check_int(self, "next_producer_id", self.next_producer_id, 0, INT64_MAX)


# ----- wire form --------------------------------------------------------------------------


def endpoint_to_wire(endpoint: BrokerEndpoint) -> list[object]:
    return [endpoint.name, endpoint.host, endpoint.port]


def register_broker_to_wire(r: RegisterBrokerRecord) -> list[object]:
    return [
        r.broker_id,
        r.incarnation_id.bytes,
        r.broker_epoch,
        [endpoint_to_wire(endpoint) for endpoint in r.endpoints],
        r.rack,
        r.fenced,
    ]


def broker_epoch_to_wire(
    r: UnregisterBrokerRecord | FenceBrokerRecord | UnfenceBrokerRecord,
) -> list[object]:
    return [r.broker_id, r.broker_epoch]


def endpoint_from_wire(value: object) -> BrokerEndpoint:
    if (type(value) is not list and type(value) is not tuple) or len(value) != 3:
        raise InvalidRecordError(f"a BrokerEndpoint is the array [name, host, port], got {value!r}")
    return BrokerEndpoint(value[0], value[1], value[2])


def register_broker_from_wire(f: Sequence[Any]) -> RegisterBrokerRecord:
    endpoints = tuple(endpoint_from_wire(endpoint) for endpoint in tuple_from_wire(f[3]))
    return RegisterBrokerRecord(f[0], uuid_from_wire(f[1]), f[2], endpoints, f[4], f[5])


def unregister_broker_from_wire(f: Sequence[Any]) -> UnregisterBrokerRecord:
    return UnregisterBrokerRecord(f[0], f[1])


def fence_broker_from_wire(f: Sequence[Any]) -> FenceBrokerRecord:
    return FenceBrokerRecord(f[0], f[1])


def unfence_broker_from_wire(f: Sequence[Any]) -> UnfenceBrokerRecord:
    return UnfenceBrokerRecord(f[0], f[1])


def producer_ids_to_wire(r: ProducerIdsRecord) -> list[object]:
    return [r.broker_id, r.broker_epoch, r.next_producer_id]


def producer_ids_from_wire(f: Sequence[Any]) -> ProducerIdsRecord:
    return ProducerIdsRecord(f[0], f[1], f[2])
