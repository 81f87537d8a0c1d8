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

Where each part lives (this module gathers them under the one name the rest of the project
imports; ``from quorum.metadata.records import ...`` is the way in):

- ``record_fields``: the errors, the wire ranges of Kafka's field types (``INT8_MAX`` ..
  ``INT64_MAX``), the field checks every record class runs when built, and the wire conversions
  of shared field kinds (ids, arrays);
- the record classes by family, each beside its ``*_to_wire`` / ``*_from_wire`` functions:
  ``records_brokers`` (broker registration, fencing, producer-id blocks), ``records_topics``
  (topics, partitions and the snapshot-only topic identity records), ``records_configs_acls``
  (configs, ACLs), ``records_quotas`` (client quotas) and ``records_control`` (the control
  records and ``NoOpRecord``);
- ``record_codec``: the record unions and type-code tables (``RECORD_CLASSES``,
  ``CONTROL_RECORD_TYPES``, ...) and the dispatch between records, wire arrays and msgpack
  bytes, the hot path;
- ``record_json``: type names and the JSON forms of records (``log dump``, the ``metadata``
  shell).
"""

from __future__ import annotations

from quorum.metadata.record_codec import (
    CONTROL_RECORD_TYPES,
    RECORD_CLASSES,
    SNAPSHOT_RECORD_CLASSES,
    ControlRecord,
    MetadataRecord,
    Record,
    SnapshotOnlyRecord,
    decode_record,
    encode_record,
    is_control_record,
    is_snapshot_only_record,
    pack_msgpack,
    record_from_wire,
    record_to_wire,
    supported_versions,
    unpack_msgpack,
)
from quorum.metadata.record_fields import (
    INT8_MAX,
    INT16_MAX,
    INT32_MAX,
    INT64_MAX,
    PORT_MAX,
    InvalidRecordError,
    RecordDecodeError,
    UnknownRecordTypeError,
    UnsupportedRecordVersionError,
)
from quorum.metadata.record_json import (
    KAFKA_TYPE_NAMES,
    record_kafka_json,
    record_kafka_type,
    record_to_json_dict,
    record_type_name,
)
from quorum.metadata.records_brokers import (
    BrokerEndpoint,
    FenceBrokerRecord,
    ProducerIdsRecord,
    RegisterBrokerRecord,
    UnfenceBrokerRecord,
    UnregisterBrokerRecord,
)
from quorum.metadata.records_configs_acls import (
    AccessControlEntryRecord,
    ConfigRecord,
    ConfigResourceType,
    RemoveAccessControlEntryRecord,
)
from quorum.metadata.records_control import (
    KRaftVersionRecord,
    LeaderChangeMessage,
    NoOpRecord,
    SnapshotFooter,
    SnapshotHeader,
    VoterEntry,
    VotersRecord,
)
from quorum.metadata.records_quotas import ClientQuotaEntityData, ClientQuotaRecord
from quorum.metadata.records_topics import (
    NO_LEADER,
    DeletedTopicRecord,
    PartitionChangeRecord,
    PartitionRecord,
    RemoveTopicRecord,
    TopicIdentityRecord,
    TopicRecord,
)

__all__ = [
    "CONTROL_RECORD_TYPES",
    "INT8_MAX",
    "INT16_MAX",
    "INT32_MAX",
    "INT64_MAX",
    "KAFKA_TYPE_NAMES",
    "NO_LEADER",
    "PORT_MAX",
    "RECORD_CLASSES",
    "SNAPSHOT_RECORD_CLASSES",
    "AccessControlEntryRecord",
    "BrokerEndpoint",
    "ClientQuotaEntityData",
    "ClientQuotaRecord",
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
    "ProducerIdsRecord",
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
