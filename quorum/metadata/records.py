"""The metadata records of the ``__cluster_metadata`` log and their msgpack codec.

Names and type codes follow Kafka's KIP-631 metadata records (``TopicRecord`` is type 2 there and
here). Each record class is a frozen, slotted dataclass that checks its field types and wire
ranges when it is built, so a record that exists can always be encoded.

Wire form (docs/architecture.md#records-and-batches): every record is the msgpack array ``[type,
version, fields]``, where ``fields`` lists the field values in declaration order. A ``Uuid`` is a
16-byte bin, a tuple is an array, a ``BrokerEndpoint`` is ``[name, host, port]`` and ``None`` is
nil. Batches (``quorum.metadata.batch``) carry the array form; ``encode_record`` / ``decode_record``
give the standalone bytes of one record.

Versioning follows Kafka's ``ApiMessageAndVersion``: each class writes ``VERSION`` and the
decoder keeps, per type code, the versions it can read. A type or version this build cannot read
is reported (``UnknownRecordTypeError``, ``UnsupportedRecordVersionError``), never skipped: a
reader that skipped records would build a different image from the controller's.

Control records (``LeaderChangeMessage``, ``SnapshotHeader``, ``SnapshotFooter``, and KIP-853's
``KRaftVersionRecord`` and ``VotersRecord``) use type codes from 1000 up, apart from Kafka's
metadata record codes; they appear only in control batches. The Raft layer reads the last two
(the voter set in force is the latest ``VotersRecord`` in the log, ``quorum.raft.voters``); the
metadata image ignores every control record.

Snapshot-only records (``TopicIdentityRecord`` 200, ``DeletedTopicRecord`` 201) are metaquorum's
own, numbered far from Kafka's metadata codes (which stay below 100) and from the control codes.
A snapshot is a state, not a history, yet topic identity (docs/architecture.md#the-controller) is
historical: a topic's creation offset and the ids of removed topics (never reused) cannot be said
with Kafka's records, so a snapshot says them with these two. They travel in ordinary (non-control)
batches of ``.checkpoint`` files only; ``RECORD_CLASSES`` lists the records of the log and
``SNAPSHOT_RECORD_CLASSES`` these, and replay refuses them outside a snapshot
(``quorum.metadata.delta``). The codec reads both families everywhere, so a reader reports one
found out of place instead of calling it unknown.

Decoding is on the hot path of brokers, controllers and the Spark replay, so it dispatches on a
dict from type code to a small hand-written decoder per class instead of reflecting over fields.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, ClassVar, Final, NoReturn, TypeAlias

import msgpack

from quorum.ids import UUID_BYTES, Uuid
from quorum.limits import INT32_MAX

__all__ = [
    "CONTROL_RECORD_TYPES",
    # Re-exported beside INT8_MAX .. INT64_MAX for the readers of the field ranges.
    "INT32_MAX",
    "KAFKA_TYPE_NAMES",
    "RECORD_CLASSES",
    "SNAPSHOT_RECORD_CLASSES",
    "AccessControlEntryRecord",
    "BrokerEndpoint",
    "ConfigRecord",
    "ConfigResourceType",
    "ControlRecord",
    "DeletedTopicRecord",
    "FenceBrokerRecord",
    "InvalidRecordError",
    "KRaftVersionRecord",
    "LeaderChangeMessage",
    "MetadataRecord",
    "NoOpRecord",
    "PartitionChangeRecord",
    "PartitionRecord",
    "Record",
    "RecordDecodeError",
    "RegisterBrokerRecord",
    "RemoveAccessControlEntryRecord",
    "RemoveTopicRecord",
    "SnapshotFooter",
    "SnapshotHeader",
    "SnapshotOnlyRecord",
    "TopicIdentityRecord",
    "TopicRecord",
    "UnfenceBrokerRecord",
    "UnknownRecordTypeError",
    "UnregisterBrokerRecord",
    "UnsupportedRecordVersionError",
    "VoterEntry",
    "VotersRecord",
    "decode_record",
    "encode_record",
    "is_control_record",
    "is_snapshot_only_record",
    "pack_msgpack",
    "record_from_wire",
    "record_kafka_json",
    "record_kafka_type",
    "record_to_json_dict",
    "record_to_wire",
    "record_type_name",
    "supported_versions",
    "unpack_msgpack",
]

# Kafka's schema types for these fields (metadata/src/main/resources/common/metadata/*.json).
INT8_MAX: Final = (1 << 7) - 1
INT16_MAX: Final = (1 << 15) - 1
INT64_MAX: Final = (1 << 63) - 1
PORT_MAX: Final = 65535

NO_LEADER: Final = -1
"""``PartitionRecord.leader`` / ``PartitionChangeRecord.leader`` when no replica leads."""


class ConfigResourceType:
    """``ConfigRecord.resource_type`` values, numbered as Kafka's ``ConfigResource.Type``."""

    TOPIC: Final = 2
    BROKER: Final = 4


# ----- errors -----------------------------------------------------------------------------


class InvalidRecordError(ValueError):
    """A record was built with a field of the wrong type or outside its wire range."""


class RecordDecodeError(ValueError):
    """Bytes or a wire array that are not a record this build can read.

    ``type_code`` and ``version`` are set when the record got far enough to show them.
    """

    def __init__(
        self, message: str, *, type_code: int | None = None, version: int | None = None
    ) -> None:
        super().__init__(message)
        self.type_code = type_code
        self.version = version

    def with_context(self, context: str) -> RecordDecodeError:
        """The same error, of the same class, with ``context`` (e.g. the offset) in front."""
        return type(self)(f"{context}: {self}", type_code=self.type_code, version=self.version)


class UnknownRecordTypeError(RecordDecodeError):
    """The type code is not one this build knows (a newer writer, or corruption)."""


class UnsupportedRecordVersionError(RecordDecodeError):
    """The type is known but this version of it is not readable by this build."""


# ----- field validation -------------------------------------------------------------------
#
# One helper per field kind. They take the record only to name it in the message, so the
# happy path is a type check and a range check per field.


def _fail(record: object, field: str, expected: str, value: object) -> NoReturn:
    raise InvalidRecordError(f"{type(record).__name__}.{field} must be {expected}, got {value!r}")


def _check_int(record: object, field: str, value: object, minimum: int, maximum: int) -> None:
    # ``type(...) is int`` on purpose: it refuses ``True`` (a bool is an int in Python).
    if type(value) is not int or not minimum <= value <= maximum:
        _fail(record, field, f"an int in [{minimum}, {maximum}]", value)


def _check_optional_int(
    record: object, field: str, value: object, minimum: int, maximum: int
) -> None:
    if value is not None:
        _check_int(record, field, value, minimum, maximum)


def _check_int_tuple(record: object, field: str, value: object, minimum: int, maximum: int) -> None:
    if type(value) is not tuple:
        _fail(record, field, f"a tuple of ints in [{minimum}, {maximum}]", value)
    for element in value:
        if type(element) is not int or not minimum <= element <= maximum:
            _fail(record, field, f"a tuple of ints in [{minimum}, {maximum}]", value)


def _check_optional_int_tuple(
    record: object, field: str, value: object, minimum: int, maximum: int
) -> None:
    if value is not None:
        _check_int_tuple(record, field, value, minimum, maximum)


def _check_str(record: object, field: str, value: object) -> None:
    if type(value) is not str:
        _fail(record, field, "a str", value)
    if not value.isascii():
        # msgpack writes UTF-8; a lone surrogate would only fail later, at encode time.
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            _fail(record, field, "a str encodable as UTF-8", value)


def _check_optional_str(record: object, field: str, value: object) -> None:
    if value is not None:
        _check_str(record, field, value)


def _check_bool(record: object, field: str, value: object) -> None:
    if type(value) is not bool:
        _fail(record, field, "a bool", value)


def _check_uuid(record: object, field: str, value: object) -> None:
    if type(value) is not Uuid:
        _fail(record, field, "a Uuid", value)


# ----- records ----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class BrokerEndpoint:
    """One listener of a broker (Kafka's ``BrokerEndpoint`` in ``RegisterBrokerRecord``)."""

    name: str
    host: str
    port: int

    def __post_init__(self) -> None:
        _check_str(self, "name", self.name)
        _check_str(self, "host", self.host)
        _check_int(self, "port", self.port, 0, PORT_MAX)


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
        _check_int(self, "broker_id", self.broker_id, 0, INT32_MAX)
        _check_uuid(self, "incarnation_id", self.incarnation_id)
        _check_int(self, "broker_epoch", self.broker_epoch, 0, INT64_MAX)
        if type(self.endpoints) is not tuple:
            _fail(self, "endpoints", "a tuple of BrokerEndpoint", self.endpoints)
        for endpoint in self.endpoints:
            if type(endpoint) is not BrokerEndpoint:
                _fail(self, "endpoints", "a tuple of BrokerEndpoint", self.endpoints)
        _check_optional_str(self, "rack", self.rack)
        _check_bool(self, "fenced", self.fenced)


@dataclass(frozen=True, slots=True)
class UnregisterBrokerRecord:
    broker_id: int
    broker_epoch: int

    TYPE: ClassVar[int] = 1
    VERSION: ClassVar[int] = 0

    def __post_init__(self) -> None:
        _check_int(self, "broker_id", self.broker_id, 0, INT32_MAX)
        _check_int(self, "broker_epoch", self.broker_epoch, 0, INT64_MAX)


@dataclass(frozen=True, slots=True)
class TopicRecord:
    name: str
    topic_id: Uuid
    internal: bool = False

    TYPE: ClassVar[int] = 2
    VERSION: ClassVar[int] = 0

    def __post_init__(self) -> None:
        _check_str(self, "name", self.name)
        _check_uuid(self, "topic_id", self.topic_id)
        _check_bool(self, "internal", self.internal)


@dataclass(frozen=True, slots=True)
class PartitionRecord:
    topic_id: Uuid
    partition: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    leader: int
    leader_epoch: int = 0
    partition_epoch: int = 0

    TYPE: ClassVar[int] = 3
    VERSION: ClassVar[int] = 0

    def __post_init__(self) -> None:
        _check_uuid(self, "topic_id", self.topic_id)
        _check_int(self, "partition", self.partition, 0, INT32_MAX)
        _check_int_tuple(self, "replicas", self.replicas, 0, INT32_MAX)
        _check_int_tuple(self, "isr", self.isr, 0, INT32_MAX)
        _check_int(self, "leader", self.leader, NO_LEADER, INT32_MAX)
        _check_int(self, "leader_epoch", self.leader_epoch, 0, INT32_MAX)
        _check_int(self, "partition_epoch", self.partition_epoch, 0, INT32_MAX)


@dataclass(frozen=True, slots=True)
class ConfigRecord:
    resource_type: int
    resource_name: str
    name: str
    value: str | None

    TYPE: ClassVar[int] = 4
    VERSION: ClassVar[int] = 0

    def __post_init__(self) -> None:
        _check_int(self, "resource_type", self.resource_type, 0, INT8_MAX)
        _check_str(self, "resource_name", self.resource_name)
        _check_str(self, "name", self.name)
        _check_optional_str(self, "value", self.value)


@dataclass(frozen=True, slots=True)
class PartitionChangeRecord:
    """A change to one partition; every ``None`` field means "unchanged"."""

    topic_id: Uuid
    partition: int
    isr: tuple[int, ...] | None = None
    leader: int | None = None
    replicas: tuple[int, ...] | None = None
    leader_epoch: int | None = None
    partition_epoch: int | None = None

    TYPE: ClassVar[int] = 5
    VERSION: ClassVar[int] = 0

    def __post_init__(self) -> None:
        _check_uuid(self, "topic_id", self.topic_id)
        _check_int(self, "partition", self.partition, 0, INT32_MAX)
        _check_optional_int_tuple(self, "isr", self.isr, 0, INT32_MAX)
        _check_optional_int(self, "leader", self.leader, NO_LEADER, INT32_MAX)
        _check_optional_int_tuple(self, "replicas", self.replicas, 0, INT32_MAX)
        _check_optional_int(self, "leader_epoch", self.leader_epoch, 0, INT32_MAX)
        _check_optional_int(self, "partition_epoch", self.partition_epoch, 0, INT32_MAX)


@dataclass(frozen=True, slots=True)
class FenceBrokerRecord:
    broker_id: int
    broker_epoch: int

    TYPE: ClassVar[int] = 7
    VERSION: ClassVar[int] = 0

    def __post_init__(self) -> None:
        _check_int(self, "broker_id", self.broker_id, 0, INT32_MAX)
        _check_int(self, "broker_epoch", self.broker_epoch, 0, INT64_MAX)


@dataclass(frozen=True, slots=True)
class UnfenceBrokerRecord:
    broker_id: int
    broker_epoch: int

    TYPE: ClassVar[int] = 8
    VERSION: ClassVar[int] = 0

    def __post_init__(self) -> None:
        _check_int(self, "broker_id", self.broker_id, 0, INT32_MAX)
        _check_int(self, "broker_epoch", self.broker_epoch, 0, INT64_MAX)


@dataclass(frozen=True, slots=True)
class RemoveTopicRecord:
    topic_id: Uuid

    TYPE: ClassVar[int] = 9
    VERSION: ClassVar[int] = 0

    def __post_init__(self) -> None:
        _check_uuid(self, "topic_id", self.topic_id)


@dataclass(frozen=True, slots=True)
class NoOpRecord:
    """Written by an idle leader so observers can prove how fresh their image is."""

    TYPE: ClassVar[int] = 20
    VERSION: ClassVar[int] = 0


@dataclass(frozen=True, slots=True)
class LeaderChangeMessage:
    """Control record written by a new leader; committing it commits its epoch (KIP-595)."""

    leader_id: int
    epoch: int
    voters: tuple[int, ...]

    TYPE: ClassVar[int] = 1002
    VERSION: ClassVar[int] = 0

    def __post_init__(self) -> None:
        _check_int(self, "leader_id", self.leader_id, 0, INT32_MAX)
        _check_int(self, "epoch", self.epoch, 0, INT32_MAX)
        _check_int_tuple(self, "voters", self.voters, 0, INT32_MAX)


@dataclass(frozen=True, slots=True)
class SnapshotHeader:
    """Control record opening a snapshot (KIP-630 ``SnapshotHeaderRecord``)."""

    version: int
    last_contained_log_timestamp_ms: int

    TYPE: ClassVar[int] = 1003
    VERSION: ClassVar[int] = 0

    def __post_init__(self) -> None:
        _check_int(self, "version", self.version, 0, INT16_MAX)
        _check_int(
            self,
            "last_contained_log_timestamp_ms",
            self.last_contained_log_timestamp_ms,
            0,
            INT64_MAX,
        )


@dataclass(frozen=True, slots=True)
class SnapshotFooter:
    """Control record closing a snapshot (KIP-630 ``SnapshotFooterRecord``)."""

    version: int

    TYPE: ClassVar[int] = 1004
    VERSION: ClassVar[int] = 0

    def __post_init__(self) -> None:
        _check_int(self, "version", self.version, 0, INT16_MAX)


@dataclass(frozen=True, slots=True)
class KRaftVersionRecord:
    """Control record (KIP-853): the ``kraft.version`` in force from its offset on. 0: the voter
    set is static (``controller.quorum.voters``); 1: it is in the log (``VotersRecord``) and
    AddRaftVoter / RemoveRaftVoter may change it."""

    version: int
    kraft_version: int

    TYPE: ClassVar[int] = 1005
    VERSION: ClassVar[int] = 0

    def __post_init__(self) -> None:
        _check_int(self, "version", self.version, 0, INT16_MAX)
        _check_int(self, "kraft_version", self.kraft_version, 0, INT16_MAX)


@dataclass(frozen=True, slots=True)
class VoterEntry:
    """One voter of a ``VotersRecord`` (Kafka's ``VotersRecord.Voter``): its node id, the
    ``directory.id`` of its metadata log directory (``ZERO_UUID`` for none), the endpoints it
    serves Raft RPCs on (``BrokerEndpoint``: listener name, host, port) and the kraft.version
    range it supports."""

    voter_id: int
    directory_id: Uuid
    endpoints: tuple[BrokerEndpoint, ...]
    kraft_version_min: int
    kraft_version_max: int

    def __post_init__(self) -> None:
        _check_int(self, "voter_id", self.voter_id, 0, INT32_MAX)
        _check_uuid(self, "directory_id", self.directory_id)
        if type(self.endpoints) is not tuple or any(
            type(e) is not BrokerEndpoint for e in self.endpoints
        ):
            _fail(self, "endpoints", "a tuple of BrokerEndpoint", self.endpoints)
        _check_int(self, "kraft_version_min", self.kraft_version_min, 0, INT16_MAX)
        _check_int(self, "kraft_version_max", self.kraft_version_max, 0, INT16_MAX)
        if self.kraft_version_min > self.kraft_version_max:
            _fail(self, "kraft_version_max", f">= {self.kraft_version_min}", self.kraft_version_max)


@dataclass(frozen=True, slots=True)
class VotersRecord:
    """Control record (KIP-853): the whole voter set in force from its offset on, even before it
    is committed (rolled back if the log is truncated before it). Voter ids are distinct."""

    version: int
    voters: tuple[VoterEntry, ...]

    TYPE: ClassVar[int] = 1006
    VERSION: ClassVar[int] = 0

    def __post_init__(self) -> None:
        _check_int(self, "version", self.version, 0, INT16_MAX)
        if type(self.voters) is not tuple or any(type(v) is not VoterEntry for v in self.voters):
            _fail(self, "voters", "a tuple of VoterEntry", self.voters)
        ids = [v.voter_id for v in self.voters]
        if len(set(ids)) != len(ids):
            _fail(self, "voters", "distinct voter ids", ids)


@dataclass(frozen=True, slots=True)
class AccessControlEntryRecord:
    """An ACL (docs/authorization.md), as KRaft stores it: a resource pattern and an access
    control entry under an id. The enum fields hold Kafka's codes (``quorum.security.acls``)."""

    id: Uuid
    resource_type: int
    resource_name: str
    pattern_type: int
    principal: str
    host: str
    operation: int
    permission_type: int

    TYPE: ClassVar[int] = 6
    VERSION: ClassVar[int] = 0

    def __post_init__(self) -> None:
        _check_uuid(self, "id", self.id)
        for name in ("resource_type", "pattern_type", "operation", "permission_type"):
            _check_int(self, name, getattr(self, name), 0, INT8_MAX)
        for name in ("resource_name", "principal", "host"):
            _check_str(self, name, getattr(self, name))


@dataclass(frozen=True, slots=True)
class RemoveAccessControlEntryRecord:
    """Removes the ACL with this id."""

    id: Uuid

    TYPE: ClassVar[int] = 16
    VERSION: ClassVar[int] = 0

    def __post_init__(self) -> None:
        _check_uuid(self, "id", self.id)


@dataclass(frozen=True, slots=True)
class TopicIdentityRecord:
    """Snapshot only: the creation offset of a live topic (metaquorum; Kafka has none).

    In a snapshot it immediately follows the ``TopicRecord`` of ``topic_id``: the pair restores
    the topic's identity (``topic_id``, ``creation_offset``), where replaying the ``TopicRecord``
    alone could only give the snapshot's own offset.
    """

    topic_id: Uuid
    creation_offset: int

    TYPE: ClassVar[int] = 200
    VERSION: ClassVar[int] = 0

    def __post_init__(self) -> None:
        _check_uuid(self, "topic_id", self.topic_id)
        _check_int(self, "creation_offset", self.creation_offset, 0, INT64_MAX)


@dataclass(frozen=True, slots=True)
class DeletedTopicRecord:
    """Snapshot only: a removed topic (metaquorum; Kafka has none).

    Ids are never reused (docs/architecture.md#the-controller), so an image remembers every removed
    topic; a snapshot carries one of these per removed topic, with the offsets of its
    ``TopicRecord`` and of its ``RemoveTopicRecord``.
    """

    name: str
    topic_id: Uuid
    creation_offset: int
    deletion_offset: int

    TYPE: ClassVar[int] = 201
    VERSION: ClassVar[int] = 0

    def __post_init__(self) -> None:
        _check_str(self, "name", self.name)
        _check_uuid(self, "topic_id", self.topic_id)
        _check_int(self, "creation_offset", self.creation_offset, 0, INT64_MAX)
        _check_int(self, "deletion_offset", self.deletion_offset, 0, INT64_MAX)
        if self.deletion_offset <= self.creation_offset:
            _fail(
                self,
                "deletion_offset",
                f"greater than creation_offset {self.creation_offset}",
                self.deletion_offset,
            )


SnapshotOnlyRecord: TypeAlias = TopicIdentityRecord | DeletedTopicRecord
"""The records only snapshots carry (see the module docstring)."""

MetadataRecord: TypeAlias = (
    RegisterBrokerRecord
    | UnregisterBrokerRecord
    | TopicRecord
    | PartitionRecord
    | ConfigRecord
    | PartitionChangeRecord
    | FenceBrokerRecord
    | UnfenceBrokerRecord
    | RemoveTopicRecord
    | NoOpRecord
    | AccessControlEntryRecord
    | RemoveAccessControlEntryRecord
    | TopicIdentityRecord
    | DeletedTopicRecord
)
"""The records that change the metadata image; they go only in non-control batches (the last
two, ``SnapshotOnlyRecord``, only in snapshots)."""

ControlRecord: TypeAlias = (
    LeaderChangeMessage | SnapshotHeader | SnapshotFooter | KRaftVersionRecord | VotersRecord
)
"""The records of the Raft layer and snapshots; they go only in control batches."""

Record: TypeAlias = MetadataRecord | ControlRecord

RECORD_CLASSES: Final[Mapping[int, type[Record]]] = MappingProxyType(
    {
        cls.TYPE: cls
        for cls in (
            RegisterBrokerRecord,
            UnregisterBrokerRecord,
            TopicRecord,
            PartitionRecord,
            ConfigRecord,
            PartitionChangeRecord,
            FenceBrokerRecord,
            UnfenceBrokerRecord,
            RemoveTopicRecord,
            NoOpRecord,
            AccessControlEntryRecord,
            RemoveAccessControlEntryRecord,
            LeaderChangeMessage,
            SnapshotHeader,
            SnapshotFooter,
            KRaftVersionRecord,
            VotersRecord,
        )
    }
)
"""Every record class of the metadata log by its type code (``SNAPSHOT_RECORD_CLASSES``: those
only snapshots carry)."""

SNAPSHOT_RECORD_CLASSES: Final[Mapping[int, type[Record]]] = MappingProxyType(
    {cls.TYPE: cls for cls in (TopicIdentityRecord, DeletedTopicRecord)}
)
"""The snapshot-only record classes by type code; the codec reads them like any other."""

assert not RECORD_CLASSES.keys() & SNAPSHOT_RECORD_CLASSES.keys()

# Every class the codec reads, log and snapshot records alike.
_ALL_RECORD_CLASSES: Final[Mapping[int, type[Record]]] = MappingProxyType(
    {**RECORD_CLASSES, **SNAPSHOT_RECORD_CLASSES}
)

CONTROL_RECORD_TYPES: Final[frozenset[int]] = frozenset(
    {
        LeaderChangeMessage.TYPE,
        SnapshotHeader.TYPE,
        SnapshotFooter.TYPE,
        KRaftVersionRecord.TYPE,
        VotersRecord.TYPE,
    }
)


def is_control_record(record: Record) -> bool:
    return record.TYPE in CONTROL_RECORD_TYPES


def is_snapshot_only_record(record: Record) -> bool:
    """True for the records that belong in snapshots only (``SNAPSHOT_RECORD_CLASSES``)."""
    return record.TYPE in SNAPSHOT_RECORD_CLASSES


# ----- encoding ---------------------------------------------------------------------------


def _endpoint_to_wire(endpoint: BrokerEndpoint) -> list[object]:
    return [endpoint.name, endpoint.host, endpoint.port]


def _register_broker_to_wire(r: RegisterBrokerRecord) -> list[object]:
    return [
        r.broker_id,
        r.incarnation_id.bytes,
        r.broker_epoch,
        [_endpoint_to_wire(endpoint) for endpoint in r.endpoints],
        r.rack,
        r.fenced,
    ]


def _broker_epoch_to_wire(
    r: UnregisterBrokerRecord | FenceBrokerRecord | UnfenceBrokerRecord,
) -> list[object]:
    return [r.broker_id, r.broker_epoch]


def _topic_to_wire(r: TopicRecord) -> list[object]:
    return [r.name, r.topic_id.bytes, r.internal]


def _partition_to_wire(r: PartitionRecord) -> list[object]:
    return [
        r.topic_id.bytes,
        r.partition,
        list(r.replicas),
        list(r.isr),
        r.leader,
        r.leader_epoch,
        r.partition_epoch,
    ]


def _config_to_wire(r: ConfigRecord) -> list[object]:
    return [r.resource_type, r.resource_name, r.name, r.value]


def _partition_change_to_wire(r: PartitionChangeRecord) -> list[object]:
    return [
        r.topic_id.bytes,
        r.partition,
        None if r.isr is None else list(r.isr),
        r.leader,
        None if r.replicas is None else list(r.replicas),
        r.leader_epoch,
        r.partition_epoch,
    ]


def _remove_topic_to_wire(r: RemoveTopicRecord) -> list[object]:
    return [r.topic_id.bytes]


def _no_op_to_wire(r: NoOpRecord) -> list[object]:
    return []


def _leader_change_to_wire(r: LeaderChangeMessage) -> list[object]:
    return [r.leader_id, r.epoch, list(r.voters)]


def _snapshot_header_to_wire(r: SnapshotHeader) -> list[object]:
    return [r.version, r.last_contained_log_timestamp_ms]


def _snapshot_footer_to_wire(r: SnapshotFooter) -> list[object]:
    return [r.version]


def _kraft_version_to_wire(r: KRaftVersionRecord) -> list[object]:
    return [r.version, r.kraft_version]


def _voters_to_wire(r: VotersRecord) -> list[object]:
    return [
        r.version,
        [
            [
                v.voter_id,
                v.directory_id.bytes,
                [_endpoint_to_wire(endpoint) for endpoint in v.endpoints],
                v.kraft_version_min,
                v.kraft_version_max,
            ]
            for v in r.voters
        ],
    ]


def _acl_to_wire(r: AccessControlEntryRecord) -> list[object]:
    return [
        r.id.bytes,
        r.resource_type,
        r.resource_name,
        r.pattern_type,
        r.principal,
        r.host,
        r.operation,
        r.permission_type,
    ]


def _remove_acl_to_wire(r: RemoveAccessControlEntryRecord) -> list[object]:
    return [r.id.bytes]


def _topic_identity_to_wire(r: TopicIdentityRecord) -> list[object]:
    return [r.topic_id.bytes, r.creation_offset]


def _deleted_topic_to_wire(r: DeletedTopicRecord) -> list[object]:
    return [r.name, r.topic_id.bytes, r.creation_offset, r.deletion_offset]


_ENCODERS: Final[dict[type[Record], Callable[[Any], list[object]]]] = {
    RegisterBrokerRecord: _register_broker_to_wire,
    UnregisterBrokerRecord: _broker_epoch_to_wire,
    TopicRecord: _topic_to_wire,
    PartitionRecord: _partition_to_wire,
    ConfigRecord: _config_to_wire,
    PartitionChangeRecord: _partition_change_to_wire,
    FenceBrokerRecord: _broker_epoch_to_wire,
    UnfenceBrokerRecord: _broker_epoch_to_wire,
    RemoveTopicRecord: _remove_topic_to_wire,
    NoOpRecord: _no_op_to_wire,
    AccessControlEntryRecord: _acl_to_wire,
    RemoveAccessControlEntryRecord: _remove_acl_to_wire,
    LeaderChangeMessage: _leader_change_to_wire,
    SnapshotHeader: _snapshot_header_to_wire,
    SnapshotFooter: _snapshot_footer_to_wire,
    KRaftVersionRecord: _kraft_version_to_wire,
    VotersRecord: _voters_to_wire,
    TopicIdentityRecord: _topic_identity_to_wire,
    DeletedTopicRecord: _deleted_topic_to_wire,
}


def record_to_wire(record: Record) -> list[object]:
    """The array ``[type, version, fields]`` that batches carry."""
    encoder = _ENCODERS.get(type(record))
    if encoder is None:
        raise TypeError(f"not a metadata record: {record!r}")
    return [record.TYPE, record.VERSION, encoder(record)]


def pack_msgpack(obj: object) -> bytes:
    """msgpack-encode ``obj`` with this log's options (bin for bytes, str for text)."""
    data: bytes = msgpack.packb(obj, use_bin_type=True)
    return data


def encode_record(record: Record) -> bytes:
    """The standalone msgpack bytes of one record."""
    return pack_msgpack(record_to_wire(record))


# ----- decoding ---------------------------------------------------------------------------
#
# Decoders turn wire values into field values and let the record's own ``__post_init__`` check
# types and ranges. The helpers below refuse anything a blind conversion would misread (for
# example ``tuple(b"ab")`` is ``(97, 98)``), and raise only ``InvalidRecordError``, which
# ``record_from_wire`` turns into a ``RecordDecodeError``.

# Topic ids repeat across a topic's PartitionRecords and PartitionChangeRecords; caching their
# decoded ``Uuid`` halves the cost of decoding those records. Bounded
# (docs/conventions.md#limits): cleared when full.
_UUID_CACHE_ENTRIES_MAX: Final = 16_384
_uuid_cache: dict[bytes, Uuid] = {}


def _uuid_from_wire(value: object) -> Uuid:
    if type(value) is bytes:
        cached = _uuid_cache.get(value)
        if cached is not None:
            return cached
        if len(value) == UUID_BYTES:
            if len(_uuid_cache) >= _UUID_CACHE_ENTRIES_MAX:
                _uuid_cache.clear()
            decoded = _uuid_cache[value] = Uuid.from_bytes(value)
            return decoded
    raise InvalidRecordError(f"a Uuid is a 16-byte bin, got {value!r}")


def _tuple_from_wire(value: object) -> tuple[Any, ...]:
    if type(value) is tuple:
        return value
    if type(value) is list:
        return tuple(value)
    raise InvalidRecordError(f"expected an array, got {value!r}")


def _optional_tuple_from_wire(value: object) -> tuple[Any, ...] | None:
    return None if value is None else _tuple_from_wire(value)


def _endpoint_from_wire(value: object) -> BrokerEndpoint:
    if (type(value) is not list and type(value) is not tuple) or len(value) != 3:
        raise InvalidRecordError(f"a BrokerEndpoint is the array [name, host, port], got {value!r}")
    return BrokerEndpoint(value[0], value[1], value[2])


def _register_broker_from_wire(f: Sequence[Any]) -> RegisterBrokerRecord:
    endpoints = tuple(_endpoint_from_wire(endpoint) for endpoint in _tuple_from_wire(f[3]))
    return RegisterBrokerRecord(f[0], _uuid_from_wire(f[1]), f[2], endpoints, f[4], f[5])


def _unregister_broker_from_wire(f: Sequence[Any]) -> UnregisterBrokerRecord:
    return UnregisterBrokerRecord(f[0], f[1])


def _topic_from_wire(f: Sequence[Any]) -> TopicRecord:
    return TopicRecord(f[0], _uuid_from_wire(f[1]), f[2])


def _partition_from_wire(f: Sequence[Any]) -> PartitionRecord:
    return PartitionRecord(
        _uuid_from_wire(f[0]),
        f[1],
        _tuple_from_wire(f[2]),
        _tuple_from_wire(f[3]),
        f[4],
        f[5],
        f[6],
    )


def _config_from_wire(f: Sequence[Any]) -> ConfigRecord:
    return ConfigRecord(f[0], f[1], f[2], f[3])


def _partition_change_from_wire(f: Sequence[Any]) -> PartitionChangeRecord:
    return PartitionChangeRecord(
        _uuid_from_wire(f[0]),
        f[1],
        _optional_tuple_from_wire(f[2]),
        f[3],
        _optional_tuple_from_wire(f[4]),
        f[5],
        f[6],
    )


def _fence_broker_from_wire(f: Sequence[Any]) -> FenceBrokerRecord:
    return FenceBrokerRecord(f[0], f[1])


def _unfence_broker_from_wire(f: Sequence[Any]) -> UnfenceBrokerRecord:
    return UnfenceBrokerRecord(f[0], f[1])


def _remove_topic_from_wire(f: Sequence[Any]) -> RemoveTopicRecord:
    return RemoveTopicRecord(_uuid_from_wire(f[0]))


_NO_OP: Final = NoOpRecord()


def _no_op_from_wire(f: Sequence[Any]) -> NoOpRecord:
    return _NO_OP


def _leader_change_from_wire(f: Sequence[Any]) -> LeaderChangeMessage:
    return LeaderChangeMessage(f[0], f[1], _tuple_from_wire(f[2]))


def _snapshot_header_from_wire(f: Sequence[Any]) -> SnapshotHeader:
    return SnapshotHeader(f[0], f[1])


def _snapshot_footer_from_wire(f: Sequence[Any]) -> SnapshotFooter:
    return SnapshotFooter(f[0])


def _kraft_version_from_wire(f: Sequence[Any]) -> KRaftVersionRecord:
    return KRaftVersionRecord(f[0], f[1])


def _voter_from_wire(value: object) -> VoterEntry:
    if (type(value) is not list and type(value) is not tuple) or len(value) != 5:
        raise InvalidRecordError(
            "a VotersRecord voter is the array [voter_id, directory_id, endpoints, "
            f"kraft_version_min, kraft_version_max], got {value!r}"
        )
    endpoints = tuple(_endpoint_from_wire(endpoint) for endpoint in _tuple_from_wire(value[2]))
    return VoterEntry(value[0], _uuid_from_wire(value[1]), endpoints, value[3], value[4])


def _voters_from_wire(f: Sequence[Any]) -> VotersRecord:
    return VotersRecord(f[0], tuple(_voter_from_wire(v) for v in _tuple_from_wire(f[1])))


def _acl_from_wire(f: Sequence[Any]) -> AccessControlEntryRecord:
    return AccessControlEntryRecord(_uuid_from_wire(f[0]), f[1], f[2], f[3], f[4], f[5], f[6], f[7])


def _remove_acl_from_wire(f: Sequence[Any]) -> RemoveAccessControlEntryRecord:
    return RemoveAccessControlEntryRecord(_uuid_from_wire(f[0]))


def _topic_identity_from_wire(f: Sequence[Any]) -> TopicIdentityRecord:
    return TopicIdentityRecord(_uuid_from_wire(f[0]), f[1])


def _deleted_topic_from_wire(f: Sequence[Any]) -> DeletedTopicRecord:
    return DeletedTopicRecord(f[0], _uuid_from_wire(f[1]), f[2], f[3])


_Decoder: TypeAlias = Callable[[Sequence[Any]], Record]

# type code -> version -> (number of fields, decoder). Adding a version means adding an entry
# here (and bumping the class's VERSION once every reader in the cluster has it).
_DECODERS: Final[dict[int, dict[int, tuple[int, _Decoder]]]] = {
    RegisterBrokerRecord.TYPE: {0: (6, _register_broker_from_wire)},
    UnregisterBrokerRecord.TYPE: {0: (2, _unregister_broker_from_wire)},
    TopicRecord.TYPE: {0: (3, _topic_from_wire)},
    PartitionRecord.TYPE: {0: (7, _partition_from_wire)},
    ConfigRecord.TYPE: {0: (4, _config_from_wire)},
    PartitionChangeRecord.TYPE: {0: (7, _partition_change_from_wire)},
    FenceBrokerRecord.TYPE: {0: (2, _fence_broker_from_wire)},
    UnfenceBrokerRecord.TYPE: {0: (2, _unfence_broker_from_wire)},
    RemoveTopicRecord.TYPE: {0: (1, _remove_topic_from_wire)},
    NoOpRecord.TYPE: {0: (0, _no_op_from_wire)},
    AccessControlEntryRecord.TYPE: {0: (8, _acl_from_wire)},
    RemoveAccessControlEntryRecord.TYPE: {0: (1, _remove_acl_from_wire)},
    LeaderChangeMessage.TYPE: {0: (3, _leader_change_from_wire)},
    SnapshotHeader.TYPE: {0: (2, _snapshot_header_from_wire)},
    SnapshotFooter.TYPE: {0: (1, _snapshot_footer_from_wire)},
    KRaftVersionRecord.TYPE: {0: (2, _kraft_version_from_wire)},
    VotersRecord.TYPE: {0: (2, _voters_from_wire)},
    TopicIdentityRecord.TYPE: {0: (2, _topic_identity_from_wire)},
    DeletedTopicRecord.TYPE: {0: (4, _deleted_topic_from_wire)},
}

assert _DECODERS.keys() == _ALL_RECORD_CLASSES.keys()
assert _ENCODERS.keys() == set(_ALL_RECORD_CLASSES.values())
assert all(cls.VERSION in _DECODERS[code] for code, cls in _ALL_RECORD_CLASSES.items())
assert all(
    len(dataclasses.fields(cls)) == _DECODERS[code][cls.VERSION][0]
    for code, cls in _ALL_RECORD_CLASSES.items()
)


def supported_versions(type_code: int) -> frozenset[int]:
    """The versions of ``type_code`` this build reads (empty for an unknown type)."""
    return frozenset(_DECODERS.get(type_code, ()))


def _supported_types_text() -> str:
    return ", ".join(
        f"{code} ({cls.__name__})" for code, cls in sorted(_ALL_RECORD_CLASSES.items())
    )


def _unknown_type(type_code: object, version: object) -> UnknownRecordTypeError:
    return UnknownRecordTypeError(
        f"unknown metadata record type {type_code!r} (version {version!r}); this build reads "
        f"types {_supported_types_text()}. The log was written by a newer metaquorum or is "
        "corrupt: upgrade this reader rather than skip the record",
        type_code=type_code if type(type_code) is int else None,
        version=version if type(version) is int else None,
    )


def _unsupported_version(type_code: int, version: object) -> UnsupportedRecordVersionError:
    name = _ALL_RECORD_CLASSES[type_code].__name__
    return UnsupportedRecordVersionError(
        f"unsupported version {version!r} of {name} (type {type_code}); this build reads "
        f"versions {sorted(_DECODERS[type_code])}. The log was written by a newer metaquorum "
        "or is corrupt: upgrade this reader rather than skip the record",
        type_code=type_code,
        version=version if type(version) is int else None,
    )


def record_from_wire(obj: object) -> Record:
    """Decode the array ``[type, version, fields]`` (lists or tuples) into a record.

    Raises ``UnknownRecordTypeError``, ``UnsupportedRecordVersionError`` or, for anything else
    malformed, ``RecordDecodeError``.
    """
    if (type(obj) is not list and type(obj) is not tuple) or len(obj) != 3:
        raise RecordDecodeError(
            f"a metadata record is the array [type, version, fields], got {obj!r}"
        )
    type_code, version, fields = obj
    by_version = _DECODERS.get(type_code) if type(type_code) is int else None
    if by_version is None:
        raise _unknown_type(type_code, version)
    entry = by_version.get(version) if type(version) is int else None
    if entry is None:
        raise _unsupported_version(type_code, version)
    arity, decode = entry
    if (type(fields) is not list and type(fields) is not tuple) or len(fields) != arity:
        raise RecordDecodeError(
            f"{_ALL_RECORD_CLASSES[type_code].__name__} v{version} has {arity} fields, "
            f"got {fields!r}",
            type_code=type_code,
            version=version,
        )
    try:
        return decode(fields)
    except InvalidRecordError as exc:
        raise RecordDecodeError(
            f"malformed {_ALL_RECORD_CLASSES[type_code].__name__} v{version}: {exc}",
            type_code=type_code,
            version=version,
        ) from exc


def unpack_msgpack(data: bytes) -> Any:
    """msgpack-decode ``data`` with this log's options, as a ``RecordDecodeError`` on failure.

    Arrays come back as tuples (``use_list=False``), which record fields can keep as they are.
    """
    try:
        return msgpack.unpackb(data, raw=False, strict_map_key=True, use_list=False)
    except (ValueError, msgpack.UnpackException) as exc:
        raise RecordDecodeError(
            f"not valid msgpack ({type(exc).__name__}: {exc or 'malformed'}) "
            f"in {len(data)} bytes starting {bytes(data[:16]).hex()}"
        ) from exc


def decode_record(data: bytes) -> Record:
    """Decode the standalone msgpack bytes of one record (see ``encode_record``)."""
    return record_from_wire(unpack_msgpack(data))


# ----- presentation -----------------------------------------------------------------------


def record_type_name(record_or_type_code: Record | int) -> str:
    """The class name of a record or a type code, e.g. ``"TopicRecord"`` for ``2``."""
    if isinstance(record_or_type_code, int) and not isinstance(record_or_type_code, bool):
        cls = _ALL_RECORD_CLASSES.get(record_or_type_code)
        if cls is None:
            raise _unknown_type(record_or_type_code, None)
        return cls.__name__
    if type(record_or_type_code) not in _ENCODERS:
        raise TypeError(f"not a metadata record or type code: {record_or_type_code!r}")
    return type(record_or_type_code).__name__


def _json_value(value: object) -> object:
    if isinstance(value, Uuid):
        return str(value)
    if isinstance(value, tuple):
        return [_json_value(element) for element in value]
    if isinstance(value, BrokerEndpoint):
        return {"name": value.name, "host": value.host, "port": value.port}
    if isinstance(value, VoterEntry):
        return {
            field.name: _json_value(getattr(value, field.name))
            for field in dataclasses.fields(value)
        }
    return value


def record_to_json_dict(record: Record) -> dict[str, object]:
    """The record's fields as JSON values, for ``log dump``.

    Keys are the field names; a ``Uuid`` becomes its base64 text, tuples become lists, endpoints
    become objects, and ``None`` stays (as JSON null: "unchanged" / "removed" / "no rack").
    """
    if type(record) not in _ENCODERS:
        raise TypeError(f"not a metadata record: {record!r}")
    return {
        field.name: _json_value(getattr(record, field.name)) for field in dataclasses.fields(record)
    }


# ----- Kafka's JSON (kafka-dump-log --cluster-metadata-decoder, kafka-metadata-shell) ----------

# Kafka's names where the mechanical conversion (class name -> UPPER_SNAKE, field -> camelCase)
# differs from Kafka's schemas: control records are named by Kafka's ControlRecordType, and a
# few fields have other names in Kafka's JSON schemas.
_KAFKA_TYPE_NAMES: Final[Mapping[type, str]] = {LeaderChangeMessage: "LEADER_CHANGE"}
_KAFKA_FIELD_NAMES: Final[Mapping[str, str]] = {
    "partition": "partitionId",
    "endpoints": "endPoints",
    "last_contained_log_timestamp_ms": "lastContainedLogTimestamp",
}


def _kafka_type_name(cls: type) -> str:
    named = _KAFKA_TYPE_NAMES.get(cls)
    if named is not None:
        return named
    return re.sub(r"(?<!^)(?=[A-Z])", "_", cls.__name__).upper()


# Class name (``record_type_name``, the Spark source's ``record_type``) -> Kafka's type name.
KAFKA_TYPE_NAMES: Final[Mapping[str, str]] = MappingProxyType(
    {cls.__name__: _kafka_type_name(cls) for cls in _ALL_RECORD_CLASSES.values()}
)


def record_kafka_type(record: Record) -> str:
    """Kafka's name of the record's type, as ``kafka-dump-log --cluster-metadata-decoder``
    prints it: ``TOPIC_RECORD``, ``PARTITION_RECORD``, ``LEADER_CHANGE``, ... Records of this
    project's own (``TOPIC_IDENTITY_RECORD``, ``DELETED_TOPIC_RECORD``) follow the same rule."""
    cls = type(record)
    if cls not in _ENCODERS:
        raise TypeError(f"not a metadata record: {record!r}")
    return _kafka_type_name(cls)


def _camel(name: str) -> str:
    renamed = _KAFKA_FIELD_NAMES.get(name)
    if renamed is not None:
        return renamed
    head, *rest = name.split("_")
    return head + "".join(part.title() for part in rest)


def _kafka_value(value: object) -> object:
    if isinstance(value, Uuid):
        return str(value)
    if isinstance(value, tuple):
        return [_kafka_value(element) for element in value]
    if isinstance(value, BrokerEndpoint):
        return {"name": value.name, "host": value.host, "port": value.port}
    if isinstance(value, VoterEntry):  # Kafka's VotersRecord.Voter
        return {
            "voterId": value.voter_id,
            "voterDirectoryId": str(value.directory_id),
            "endpoints": [_kafka_value(endpoint) for endpoint in value.endpoints],
            "kRaftVersionFeature": {
                "minSupportedVersion": value.kraft_version_min,
                "maxSupportedVersion": value.kraft_version_max,
            },
        }
    return value


def record_kafka_json(record: Record) -> dict[str, object]:
    """The record's ``data`` as Kafka's metadata JSON converters write it: camelCase field
    names from Kafka's schemas (``topicId``, ``partitionId``, ``leaderEpoch``, ``endPoints``),
    a ``Uuid`` as its base64 text, ``None`` as null. A ``LeaderChangeMessage``'s voters are
    ``[{"voterId": n}]`` as in Kafka. The one JSON form of records for ``log dump`` and the
    ``metadata`` shell, so the two agree."""
    if type(record) not in _ENCODERS:
        raise TypeError(f"not a metadata record: {record!r}")
    data = {
        _camel(field.name): _kafka_value(getattr(record, field.name))
        for field in dataclasses.fields(record)
    }
    if isinstance(record, LeaderChangeMessage):
        data["voters"] = [{"voterId": voter} for voter in record.voters]
    return data
