"""The record codec: which record classes exist (by type code, and which are control or
snapshot-only records), and the dispatch between a record and its wire array ``[type, version,
fields]`` and standalone msgpack bytes.

The wire form and the versioning rules are in ``quorum.metadata.records``'s docstring; the
classes and the per-type ``*_to_wire`` / ``*_from_wire`` functions in the family modules
(``records_brokers``, ``records_topics``, ``records_configs_acls``, ``records_quotas``,
``records_control``).
Adding a record type means a class and its two functions in its family module, an entry in
``RECORD_CLASSES`` (or ``SNAPSHOT_RECORD_CLASSES``), ``_ENCODERS`` and ``_DECODERS`` here, and
its columns in ``quorum.analytics.schema``; the import-time checks below and there fail until
every table has it.

Decoding is on the hot path of brokers, controllers and the Spark replay, so it dispatches on a
dict from type code to a small hand-written decoder per class instead of reflecting over fields.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from types import MappingProxyType
from typing import Any, Final, TypeAlias

import msgpack

from quorum.metadata.record_fields import (
    InvalidRecordError,
    RecordDecodeError,
    UnknownRecordTypeError,
    UnsupportedRecordVersionError,
)
from quorum.metadata.records_brokers import (
    FenceBrokerRecord,
    ProducerIdsRecord,
    RegisterBrokerRecord,
    UnfenceBrokerRecord,
    UnregisterBrokerRecord,
    broker_epoch_to_wire,
    fence_broker_from_wire,
    producer_ids_from_wire,
    producer_ids_to_wire,
    register_broker_from_wire,
    register_broker_to_wire,
    unfence_broker_from_wire,
    unregister_broker_from_wire,
)
from quorum.metadata.records_configs_acls import (
    AccessControlEntryRecord,
    ConfigRecord,
    RemoveAccessControlEntryRecord,
    acl_from_wire,
    acl_to_wire,
    config_from_wire,
    config_to_wire,
    remove_acl_from_wire,
    remove_acl_to_wire,
)
from quorum.metadata.records_control import (
    KRaftVersionRecord,
    LeaderChangeMessage,
    NoOpRecord,
    SnapshotFooter,
    SnapshotHeader,
    VotersRecord,
    kraft_version_from_wire,
    kraft_version_to_wire,
    leader_change_from_wire,
    leader_change_to_wire,
    no_op_from_wire,
    no_op_to_wire,
    snapshot_footer_from_wire,
    snapshot_footer_to_wire,
    snapshot_header_from_wire,
    snapshot_header_to_wire,
    voters_from_wire,
    voters_to_wire,
)
from quorum.metadata.records_quotas import (
    ClientQuotaRecord,
    client_quota_from_wire,
    client_quota_to_wire,
)
from quorum.metadata.records_topics import (
    DeletedTopicRecord,
    PartitionChangeRecord,
    PartitionRecord,
    RemoveTopicRecord,
    TopicIdentityRecord,
    TopicRecord,
    deleted_topic_from_wire,
    deleted_topic_to_wire,
    partition_change_from_wire,
    partition_change_to_wire,
    partition_from_wire,
    partition_to_wire,
    remove_topic_from_wire,
    remove_topic_to_wire,
    topic_from_wire,
    topic_identity_from_wire,
    topic_identity_to_wire,
    topic_to_wire,
)

__all__ = [
    "ALL_RECORD_CLASSES",
    "CONTROL_RECORD_TYPES",
    "RECORD_CLASSES",
    "SNAPSHOT_RECORD_CLASSES",
    "ControlRecord",
    "MetadataRecord",
    "Record",
    "SnapshotOnlyRecord",
    "decode_record",
    "encode_record",
    "is_control_record",
    "is_snapshot_only_record",
    "pack_msgpack",
    "record_from_wire",
    "record_to_wire",
    "supported_versions",
    "unknown_type_error",
    "unpack_msgpack",
]

SnapshotOnlyRecord: TypeAlias = TopicIdentityRecord | DeletedTopicRecord
"""The records only snapshots carry (see ``quorum.metadata.records``)."""

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
    | ProducerIdsRecord
    | ClientQuotaRecord
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
            ProducerIdsRecord,
            ClientQuotaRecord,
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
ALL_RECORD_CLASSES: Final[Mapping[int, type[Record]]] = MappingProxyType(
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


_ENCODERS: Final[dict[type[Record], Callable[[Any], list[object]]]] = {
    RegisterBrokerRecord: register_broker_to_wire,
    UnregisterBrokerRecord: broker_epoch_to_wire,
    TopicRecord: topic_to_wire,
    PartitionRecord: partition_to_wire,
    ConfigRecord: config_to_wire,
    PartitionChangeRecord: partition_change_to_wire,
    FenceBrokerRecord: broker_epoch_to_wire,
    UnfenceBrokerRecord: broker_epoch_to_wire,
    RemoveTopicRecord: remove_topic_to_wire,
    NoOpRecord: no_op_to_wire,
    AccessControlEntryRecord: acl_to_wire,
    RemoveAccessControlEntryRecord: remove_acl_to_wire,
    ProducerIdsRecord: producer_ids_to_wire,
    ClientQuotaRecord: client_quota_to_wire,
    LeaderChangeMessage: leader_change_to_wire,
    SnapshotHeader: snapshot_header_to_wire,
    SnapshotFooter: snapshot_footer_to_wire,
    KRaftVersionRecord: kraft_version_to_wire,
    VotersRecord: voters_to_wire,
    TopicIdentityRecord: topic_identity_to_wire,
    DeletedTopicRecord: deleted_topic_to_wire,
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


_Decoder: TypeAlias = Callable[[Sequence[Any]], Record]

# type code -> version -> (number of fields, decoder). Adding a version means adding an entry
# here (and bumping the class's VERSION once every reader in the cluster has it).
_DECODERS: Final[dict[int, dict[int, tuple[int, _Decoder]]]] = {
    RegisterBrokerRecord.TYPE: {0: (6, register_broker_from_wire)},
    UnregisterBrokerRecord.TYPE: {0: (2, unregister_broker_from_wire)},
    TopicRecord.TYPE: {0: (3, topic_from_wire)},
    PartitionRecord.TYPE: {0: (7, partition_from_wire)},
    ConfigRecord.TYPE: {0: (4, config_from_wire)},
    PartitionChangeRecord.TYPE: {0: (7, partition_change_from_wire)},
    FenceBrokerRecord.TYPE: {0: (2, fence_broker_from_wire)},
    UnfenceBrokerRecord.TYPE: {0: (2, unfence_broker_from_wire)},
    RemoveTopicRecord.TYPE: {0: (1, remove_topic_from_wire)},
    NoOpRecord.TYPE: {0: (0, no_op_from_wire)},
    AccessControlEntryRecord.TYPE: {0: (8, acl_from_wire)},
    RemoveAccessControlEntryRecord.TYPE: {0: (1, remove_acl_from_wire)},
    ProducerIdsRecord.TYPE: {0: (3, producer_ids_from_wire)},
    ClientQuotaRecord.TYPE: {0: (4, client_quota_from_wire)},
    LeaderChangeMessage.TYPE: {0: (3, leader_change_from_wire)},
    SnapshotHeader.TYPE: {0: (2, snapshot_header_from_wire)},
    SnapshotFooter.TYPE: {0: (1, snapshot_footer_from_wire)},
    KRaftVersionRecord.TYPE: {0: (2, kraft_version_from_wire)},
    VotersRecord.TYPE: {0: (2, voters_from_wire)},
    TopicIdentityRecord.TYPE: {0: (2, topic_identity_from_wire)},
    DeletedTopicRecord.TYPE: {0: (4, deleted_topic_from_wire)},
}

assert _DECODERS.keys() == ALL_RECORD_CLASSES.keys()
assert _ENCODERS.keys() == set(ALL_RECORD_CLASSES.values())
assert all(cls.VERSION in _DECODERS[code] for code, cls in ALL_RECORD_CLASSES.items())
assert all(
    len(dataclasses.fields(cls)) == _DECODERS[code][cls.VERSION][0]
    for code, cls in ALL_RECORD_CLASSES.items()
)


def supported_versions(type_code: int) -> frozenset[int]:
    """The versions of ``type_code`` this build reads (empty for an unknown type)."""
    return frozenset(_DECODERS.get(type_code, ()))


def _supported_types_text() -> str:
    return ", ".join(f"{code} ({cls.__name__})" for code, cls in sorted(ALL_RECORD_CLASSES.items()))


def unknown_type_error(type_code: object, version: object) -> UnknownRecordTypeError:
    """The error for a type code this build does not read (``record_type_name``'s too)."""
    return UnknownRecordTypeError(
        f"unknown metadata record type {type_code!r} (version {version!r}); this build reads "
        f"types {_supported_types_text()}. The log was written by a newer metaquorum or is "
        "corrupt: upgrade this reader rather than skip the record",
        type_code=type_code if type(type_code) is int else None,
        version=version if type(version) is int else None,
    )


def _unsupported_version(type_code: int, version: object) -> UnsupportedRecordVersionError:
    name = ALL_RECORD_CLASSES[type_code].__name__
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
        raise unknown_type_error(type_code, version)
    entry = by_version.get(version) if type(version) is int else None
    if entry is None:
        raise _unsupported_version(type_code, version)
    arity, decode = entry
    if (type(fields) is not list and type(fields) is not tuple) or len(fields) != arity:
        raise RecordDecodeError(
            f"{ALL_RECORD_CLASSES[type_code].__name__} v{version} has {arity} fields, "
            f"got {fields!r}",
            type_code=type_code,
            version=version,
        )
    try:
        return decode(fields)
    except InvalidRecordError as exc:
        raise RecordDecodeError(
            f"malformed {ALL_RECORD_CLASSES[type_code].__name__} v{version}: {exc}",
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
