"""Records as JSON: the names of record types, each record's fields as JSON values for ``log
dump``, and Kafka's JSON form of records (``kafka-dump-log --cluster-metadata-decoder``,
``kafka-metadata-shell``) for ``log dump`` and the ``metadata`` shell."""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping
from types import MappingProxyType
from typing import Final

from quorum.ids import Uuid
from quorum.metadata.record_codec import ALL_RECORD_CLASSES, Record, unknown_type_error
from quorum.metadata.records_brokers import BrokerEndpoint
from quorum.metadata.records_control import LeaderChangeMessage, VoterEntry
from quorum.metadata.records_quotas import ClientQuotaEntityData

__all__ = [
    "KAFKA_TYPE_NAMES",
    "record_kafka_json",
    "record_kafka_type",
    "record_to_json_dict",
    "record_type_name",
]

# The record classes, to refuse anything else.
_RECORD_TYPES: Final[frozenset[type]] = frozenset(ALL_RECORD_CLASSES.values())


def record_type_name(record_or_type_code: Record | int) -> str:
    """The class name of a record or a type code, e.g. ``"TopicRecord"`` for ``2``."""
    if isinstance(record_or_type_code, int) and not isinstance(record_or_type_code, bool):
        cls = ALL_RECORD_CLASSES.get(record_or_type_code)
        if cls is None:
            raise unknown_type_error(record_or_type_code, None)
        return cls.__name__
    if type(record_or_type_code) not in _RECORD_TYPES:
        raise TypeError(f"not a metadata record or type code: {record_or_type_code!r}")
    return type(record_or_type_code).__name__


def _json_value(value: object) -> object:
    if isinstance(value, Uuid):
        return str(value)
    if isinstance(value, tuple):
        return [_json_value(element) for element in value]
    if isinstance(value, BrokerEndpoint):
        return {"name": value.name, "host": value.host, "port": value.port}
    if isinstance(value, VoterEntry | ClientQuotaEntityData):
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
    if type(record) not in _RECORD_TYPES:
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
    {cls.__name__: _kafka_type_name(cls) for cls in ALL_RECORD_CLASSES.values()}
)


def record_kafka_type(record: Record) -> str:
    """Kafka's name of the record's type, as ``kafka-dump-log --cluster-metadata-decoder``
    prints it: ``TOPIC_RECORD``, ``PARTITION_RECORD``, ``LEADER_CHANGE``, ... Records of this
    project's own (``TOPIC_IDENTITY_RECORD``, ``DELETED_TOPIC_RECORD``) follow the same rule."""
    cls = type(record)
    if cls not in _RECORD_TYPES:
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
    if isinstance(value, ClientQuotaEntityData):  # Kafka's ClientQuotaRecord.EntityData
        return {"entityType": value.entity_type, "entityName": value.entity_name}
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
    if type(record) not in _RECORD_TYPES:
        raise TypeError(f"not a metadata record: {record!r}")
    data = {
        _camel(field.name): _kafka_value(getattr(record, field.name))
        for field in dataclasses.fields(record)
    }
    if isinstance(record, LeaderChangeMessage):
        data["voters"] = [{"voterId": voter} for voter in record.voters]
    return data
