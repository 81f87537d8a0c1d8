"""Kafka's wire format for the Kafka listener: which APIs and versions are served, and the
decoding of requests and encoding of responses (docs/kafka-listener.md#the-codec).

Every message is read and written by ``kio`` (PyPI, Apache-2.0): typed entities generated from
Kafka's own JSON message schemas, one class per API, version and direction, with the
flexible-version rules (compact strings and arrays, tagged fields, the request header v2 and
the ApiVersions response's v0 header) built in. Nothing here encodes a field by hand: this
module picks the entity classes for a frame, lets kio read and write them, and builds response
entities from plain values (``build``), which is what lets one handler serve every version of
an API.

A frame is untrusted bytes (docs/kafka-listener.md#robustness). kio 0.5 reads in pure Python,
item by item, so a claimed array or string length beyond the frame fails when the bytes run
out, never by allocating what the length claims (kio 0.6's native reader allocates first and
aborts the whole process on a forged length: found by this project's fuzzer, the reason for the
pin). Every way a decoding can fail becomes ``MalformedRequestError``, which closes the
connection. Bytes after a request's end are
ignored, as Kafka's own parser ignores them.

Bounds come before work (docs/kafka-listener.md#robustness): a frame of an API without a
top-level array (ApiVersions, DescribeAcls, DescribeCluster, any API not served) may hold at
most ``SMALL_REQUEST_BYTES_MAX`` (``request_bytes_max``, checked from the first four bytes,
before the rest is read); the count of a request's top-level array (the topics of CreateTopics,
DeleteTopics, Metadata, ..., the creations of CreateAcls) is read from the frame right after
the header and checked against the project's per-request bound before anything is decoded
(``REQUEST_ENTRIES_MAX``); and while a request is decoded, every array's count, nested ones
included, is taken from a budget of ``KAFKA_REQUEST_ITEMS_MAX`` items before its items are
read. Each refusal is an ``OversizedRequestError`` naming the bound.
"""

from __future__ import annotations

import dataclasses
import datetime
import io
import struct
import threading
import types
import uuid
from collections.abc import Generator, Mapping
from dataclasses import dataclass
from enum import IntEnum
from typing import Any, Final, TypeVar, get_args, get_origin

from kio.index import UnknownAPIKey, UnknownEntity, load_request_schema, load_response_schema
from kio.schema.errors import ErrorCode as KioErrorCode
from kio.serial import entity_reader, entity_writer
from kio.serial import readers as _kio_readers
from kio.serial.errors import BufferUnderflow, SerialError
from kio.serial.readers import (
    read_compact_array_length,
    read_int16,
    read_int32,
    read_legacy_array_length,
)

from broker.kafka.schemas import LOCAL_SCHEMAS
from quorum.controller.client_quotas import CLIENT_QUOTA_ENTITIES_MAX
from quorum.errors import ErrorCode
from quorum.ids import ZERO_UUID, Uuid
from quorum.limits import (
    ACL_REQUEST_ENTRIES_MAX,
    ALTER_CONFIGS_RESOURCES_MAX,
    CREATE_PARTITIONS_TOPICS_MAX,
    CREATE_TOPICS_TOPICS_MAX,
    DELETE_TOPICS_TOPICS_MAX,
    GROUPS_PER_REQUEST_MAX,
    KAFKA_DATA_REQUEST_ITEMS_MAX,
    KAFKA_REQUEST_ITEMS_MAX,
    METADATA_TOPICS_MAX,
)
from quorum.rpc.v1 import admin_pb2

__all__ = [
    "API_KEY_NAMES",
    "API_VERSIONS",
    "CREATE_PARTITIONS_FORWARDABLE",
    "DATA_REQUEST_ITEMS_MAX",
    "HEADER_BYTES_MIN",
    "REQUEST_ENTRIES_MAX",
    "SMALL_REQUEST_BYTES_MAX",
    "ApiKey",
    "MalformedRequestError",
    "OversizedRequestError",
    "Request",
    "UnsupportedRequest",
    "build",
    "by_api_key",
    "decode_request",
    "encode_response",
    "kafka_uuid",
    "kio_error",
    "our_uuid",
    "request_bytes_max",
    "with_throttle_time",
]


class ApiKey(IntEnum):
    """The Kafka APIs this listener knows, by their API key (Kafka's ``ApiKeys``)."""

    PRODUCE = 0
    FETCH = 1
    LIST_OFFSETS = 2
    METADATA = 3
    OFFSET_COMMIT = 8
    OFFSET_FETCH = 9
    FIND_COORDINATOR = 10
    JOIN_GROUP = 11
    HEARTBEAT = 12
    LEAVE_GROUP = 13
    SYNC_GROUP = 14
    DESCRIBE_GROUPS = 15
    LIST_GROUPS = 16
    API_VERSIONS = 18
    CREATE_TOPICS = 19
    DELETE_TOPICS = 20
    INIT_PRODUCER_ID = 22
    OFFSET_FOR_LEADER_EPOCH = 23
    DESCRIBE_ACLS = 29
    CREATE_ACLS = 30
    DELETE_ACLS = 31
    DESCRIBE_CONFIGS = 32
    ALTER_CONFIGS = 33
    DESCRIBE_LOG_DIRS = 35
    CREATE_PARTITIONS = 37
    DELETE_GROUPS = 42
    ELECT_LEADERS = 43
    INCREMENTAL_ALTER_CONFIGS = 44
    OFFSET_DELETE = 47
    DESCRIBE_CLIENT_QUOTAS = 48
    ALTER_CLIENT_QUOTAS = 49
    DESCRIBE_QUORUM = 55
    DESCRIBE_CLUSTER = 60
    DESCRIBE_PRODUCERS = 61
    DESCRIBE_TRANSACTIONS = 65
    LIST_TRANSACTIONS = 66
    DESCRIBE_TOPIC_PARTITIONS = 75

    @property
    def api_name(self) -> str:
        """Kafka's name of the API (``ApiKeys.name``): ``CreateTopics``."""
        return "".join(word.capitalize() for word in self.name.split("_"))


V = TypeVar("V")


def by_api_key(table: Mapping[ApiKey, V]) -> dict[int, V]:
    """``table`` keyed by the plain ints a request header carries: a lookup of a header's key
    in it costs no enum comparison (the per-request tables and handlers are built so)."""
    return {int(key): value for key, value in table.items()}


# Kafka's name of each API key this listener knows, for messages and logs.
API_KEY_NAMES: Final[Mapping[int, str]] = by_api_key({key: key.api_name for key in ApiKey})
# CreatePartitions is forwarded to the controllers' AdminService/CreatePartitions: served once
# the admin API this node was built with has it.
CREATE_PARTITIONS_FORWARDABLE: Final = hasattr(admin_pb2, "CreatePartitionsRequest")
# The APIs this listener serves, with the versions it serves (docs/kafka-listener.md): those of
# Kafka 3.9, whose schemas kio 0.5 is generated from, so clients see a plausible broker
# (kafka-python infers the broker's version from the table: DescribeAcls v3 reads as 3.3+).
#
# The data plane (docs/kafka-listener.md#the-data-plane): Produce from v3 (the first with record
# batches of magic 2, which is all the logs store) to kio's newest; Fetch from v4 (the first
# answering magic-2 batches with a last stable offset) to kio's newest, v13 on by topic id;
# ListOffsets from v1 (v0's "old style offsets" are gone from Kafka 4); OffsetForLeaderEpoch
# all of kio's.
API_VERSIONS: Final[Mapping[int, tuple[int, int]]] = by_api_key(
    {
        ApiKey.PRODUCE: (3, 11),
        ApiKey.FETCH: (4, 17),
        ApiKey.LIST_OFFSETS: (1, 9),
        ApiKey.OFFSET_FOR_LEADER_EPOCH: (0, 4),
        ApiKey.METADATA: (0, 12),
        ApiKey.API_VERSIONS: (0, 4),
        ApiKey.CREATE_TOPICS: (0, 7),
        ApiKey.DELETE_TOPICS: (0, 6),
        ApiKey.INIT_PRODUCER_ID: (0, 5),  # idempotent producers only (producer_id.py)
        ApiKey.DESCRIBE_ACLS: (0, 3),
        ApiKey.CREATE_ACLS: (0, 3),
        ApiKey.DELETE_ACLS: (0, 3),
        ApiKey.DESCRIBE_CONFIGS: (0, 4),
        ApiKey.ALTER_CONFIGS: (0, 2),  # forwarded (alter_configs.py)
        **({ApiKey.CREATE_PARTITIONS: (0, 3)} if CREATE_PARTITIONS_FORWARDABLE else {}),
        ApiKey.ELECT_LEADERS: (0, 2),  # forwarded (elect_leaders.py)
        ApiKey.INCREMENTAL_ALTER_CONFIGS: (0, 1),  # forwarded (alter_configs.py)
        ApiKey.DESCRIBE_CLIENT_QUOTAS: (0, 1),  # the image (client_quotas.py)
        ApiKey.ALTER_CLIENT_QUOTAS: (0, 1),  # forwarded (client_quotas.py)
        ApiKey.DESCRIBE_QUORUM: (0, 2),
        ApiKey.DESCRIBE_CLUSTER: (0, 1),
        ApiKey.DESCRIBE_TOPIC_PARTITIONS: (0, 0),
        ApiKey.DESCRIBE_LOG_DIRS: (1, 4),  # v0 is gone from Kafka 4 (KIP-896); log_dirs.py
        ApiKey.DESCRIBE_PRODUCERS: (0, 0),  # producers.py
        ApiKey.DESCRIBE_TRANSACTIONS: (0, 0),  # no transactions here (transactions.py)
        ApiKey.LIST_TRANSACTIONS: (0, 1),
        # The classic consumer group protocol (docs/groups.md), from the oldest versions Kafka 4
        # still serves (KIP-896) to kio's newest; never KIP-848's ConsumerGroupHeartbeat.
        ApiKey.FIND_COORDINATOR: (0, 6),
        ApiKey.JOIN_GROUP: (2, 9),
        ApiKey.SYNC_GROUP: (0, 5),
        ApiKey.HEARTBEAT: (0, 4),
        ApiKey.LEAVE_GROUP: (0, 5),
        ApiKey.OFFSET_COMMIT: (2, 9),
        ApiKey.OFFSET_FETCH: (1, 9),
        ApiKey.LIST_GROUPS: (0, 5),
        ApiKey.DESCRIBE_GROUPS: (0, 6),
        ApiKey.DELETE_GROUPS: (0, 2),
        ApiKey.OFFSET_DELETE: (0, 0),
    }
)

_API_VERSIONS_KEY: Final = int(ApiKey.API_VERSIONS)  # compared with every header's key

# api_key (int16), api_version (int16), correlation_id (int32): every request header starts so.
HEADER_BYTES_MIN: Final = 8

# The bound on the top-level array of each served API that has one (its first field in every
# version: topics, topic names, creations, filters, resources), from quorum/limits.py: the
# admin writes' bounds the controller applies too, and the reads' METADATA_TOPICS_MAX.
REQUEST_ENTRIES_MAX: Final[Mapping[int, int]] = by_api_key(
    {
        ApiKey.METADATA: METADATA_TOPICS_MAX,  # topics
        ApiKey.CREATE_TOPICS: CREATE_TOPICS_TOPICS_MAX,  # topics
        ApiKey.DELETE_TOPICS: DELETE_TOPICS_TOPICS_MAX,  # topic names (v0-5), topics (v6)
        ApiKey.CREATE_ACLS: ACL_REQUEST_ENTRIES_MAX,  # creations
        ApiKey.DELETE_ACLS: ACL_REQUEST_ENTRIES_MAX,  # filters
        ApiKey.DESCRIBE_CONFIGS: METADATA_TOPICS_MAX,  # resources (topics)
        ApiKey.ALTER_CONFIGS: ALTER_CONFIGS_RESOURCES_MAX,  # resources
        ApiKey.INCREMENTAL_ALTER_CONFIGS: ALTER_CONFIGS_RESOURCES_MAX,  # resources
        ApiKey.ALTER_CLIENT_QUOTAS: CLIENT_QUOTA_ENTITIES_MAX,  # entries
        ApiKey.CREATE_PARTITIONS: CREATE_PARTITIONS_TOPICS_MAX,  # topics
        ApiKey.DESCRIBE_TOPIC_PARTITIONS: METADATA_TOPICS_MAX,  # topics
        ApiKey.DESCRIBE_LOG_DIRS: METADATA_TOPICS_MAX,  # topics
        ApiKey.DESCRIBE_PRODUCERS: METADATA_TOPICS_MAX,  # topics
        ApiKey.DESCRIBE_GROUPS: GROUPS_PER_REQUEST_MAX,  # groups
        ApiKey.DELETE_GROUPS: GROUPS_PER_REQUEST_MAX,  # groups names
    }
)
# The data APIs: their first field is not their topics (Produce's transactional id, the
# replica id of the others), so their count is not checked from the frame; every array item
# they claim (topics and partitions) is taken from a smaller decoding budget instead, checked
# before the items are read (KAFKA_DATA_REQUEST_ITEMS_MAX). Their frames may be as large as the
# listener's bound (a Produce carries record batches).
DATA_REQUEST_ITEMS_MAX: Final[Mapping[int, int]] = by_api_key(
    {
        ApiKey.PRODUCE: KAFKA_DATA_REQUEST_ITEMS_MAX,
        ApiKey.FETCH: KAFKA_DATA_REQUEST_ITEMS_MAX,
        ApiKey.LIST_OFFSETS: KAFKA_DATA_REQUEST_ITEMS_MAX,
        ApiKey.OFFSET_FOR_LEADER_EPOCH: KAFKA_DATA_REQUEST_ITEMS_MAX,
        # The group APIs whose first field is no array (a group id, a key type) but whose
        # frames may be large: a consumer's subscription, the leader's assignments, a commit of
        # every partition it consumes. Their items come from the same budget.
        ApiKey.FIND_COORDINATOR: KAFKA_DATA_REQUEST_ITEMS_MAX,
        ApiKey.JOIN_GROUP: KAFKA_DATA_REQUEST_ITEMS_MAX,
        ApiKey.SYNC_GROUP: KAFKA_DATA_REQUEST_ITEMS_MAX,
        ApiKey.LEAVE_GROUP: KAFKA_DATA_REQUEST_ITEMS_MAX,
        ApiKey.OFFSET_COMMIT: KAFKA_DATA_REQUEST_ITEMS_MAX,
        ApiKey.OFFSET_FETCH: KAFKA_DATA_REQUEST_ITEMS_MAX,
        ApiKey.OFFSET_DELETE: KAFKA_DATA_REQUEST_ITEMS_MAX,
    }
)
# The largest frame of an API without a top-level array (ApiVersions, DescribeAcls,
# DescribeCluster) or of an API not served (answered from its header alone): a header and a
# few strings. Our choice: DescribeAcls, the largest, holds three strings of at most 32,767
# bytes (Kafka's int16 string lengths), under 100 KiB.
SMALL_REQUEST_BYTES_MAX: Final = 128 * 1024

# What kio raises on bytes that are not a valid message (found by the fuzzer of
# tests/unit/kafka/test_kafka_protocol.py): its own SerialError family, KeyError for an unknown
# tagged field, ValueError for an invalid boolean or enum value, struct.error for a short
# buffer, UnicodeError for a bad string.
_DECODE_ERRORS: Final = (
    SerialError,
    struct.error,
    KeyError,
    ValueError,
    OverflowError,
    IndexError,
    TypeError,
    UnicodeError,
)


def _exact_bytes(buffer: Any, offset: int, size: int) -> memoryview:
    """kio 0.5's ``_read_exact``, refusing a negative size. kio reads a legacy string or bytes
    field whose length is negative (other than -1, null) as empty and moves the offset
    *back* by that length, so such an item takes zero bytes or fewer; an array of them with a
    forged count of 2^31 - 1 never runs out of frame and grew a broker's fuzz test to 9.7 GB
    (tests/unit/kafka/test_kafka_protocol.py). Kafka's own readers refuse any such length."""
    if size < 0:
        raise BufferUnderflow(f"a length of {size} bytes (only -1, null, may be negative)")
    return _unchecked_exact_bytes(buffer, offset, size)


class MalformedRequestError(Exception):
    """The frame is not a request this listener can read: the connection is closed (Kafka does
    the same with a request it cannot parse). The message says what was wrong."""


class OversizedRequestError(MalformedRequestError):
    """The frame is within the listener's frame bound but beyond one of the request bounds
    (``reason``: ``request_too_large``, ``too_many_entries``, ``too_many_items``); refused
    before the work it would cost, and the connection is closed, as Kafka closes a connection
    whose request it refuses to parse."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


# The items a request being decoded in this thread may still claim (None: no budget, e.g. a
# client-side decoder in the tests). Thread-local: requests are decoded on the listener's loop
# and in its decoding thread at once.
_decoding = threading.local()


def _bounded_array_items(
    item_reader: Any, length: int, buffer: Any, offset: int
) -> Generator[Any, None, int]:
    """kio 0.5's array reader, with the check Kafka's own generated readers make first: an
    array may not claim more items than bytes remain in the frame (with negative lengths
    refused, every item of a served request takes at least one byte), so a forged count is
    refused before any item is built. While a request is decoded, the count is also taken
    from its budget of ``KAFKA_REQUEST_ITEMS_MAX`` items (``KAFKA_DATA_REQUEST_ITEMS_MAX`` for
    the data APIs; nested arrays included)."""
    remaining = len(buffer) - offset
    if length > remaining:
        raise BufferUnderflow(
            f"an array claims {length} items but only {remaining} bytes of the frame remain"
        )
    left: int | None = getattr(_decoding, "items_left", None)
    if left is not None:
        if length > left:
            budget = getattr(_decoding, "items_max", KAFKA_REQUEST_ITEMS_MAX)
            raise OversizedRequestError(
                "too_many_items",
                f"the request's arrays claim more than {budget} items in all "
                f"(an array of {length} with {left} left); allowed: at most "
                f"{budget} per request (split it)",
            )
        _decoding.items_left = left - length
    return (yield from _unbounded_array_items(item_reader, length, buffer, offset))


# kio's readers look both up as module globals at each call, so every reader gets the checks.
_unchecked_exact_bytes = _kio_readers._read_exact
_kio_readers._read_exact = _exact_bytes
_unbounded_array_items = _kio_readers._read_length_items
_kio_readers._read_length_items = _bounded_array_items


@dataclass(frozen=True, slots=True)
class Request:
    """A decoded request of a served API at a served version."""

    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None
    body: Any
    """The kio request entity (e.g. ``kio.schema.metadata.v12.request.MetadataRequest``)."""
    response_type: type[Any]
    """The kio response entity class of the same API and version."""


@dataclass(frozen=True, slots=True)
class UnsupportedRequest:
    """A well-formed header of an API or version this listener does not serve. For ApiVersions
    (KIP-511) the answer is a v0 response with UNSUPPORTED_VERSION and our ranges; for any
    other API kio knows at that version whose response has a top-level error code, that
    response with UNSUPPORTED_VERSION in it (``response_type``)."""

    api_key: int
    api_version: int
    correlation_id: int
    response_type: type[Any] | None


def request_bytes_max(api_key: int, frame_bytes_max: int) -> int:
    """The largest frame an API's request may have: ``frame_bytes_max`` (the listener's bound)
    for the APIs with a top-level array, ``SMALL_REQUEST_BYTES_MAX`` for every other."""
    if api_key in REQUEST_ENTRIES_MAX or api_key in DATA_REQUEST_ITEMS_MAX:
        return frame_bytes_max
    return SMALL_REQUEST_BYTES_MAX


def _check_entries(
    frame: bytes, api_key: int, api_version: int, request_type: type[Any]
) -> tuple[Any, int]:
    """The header of ``frame`` and the offset its body starts at, once the count of the body's
    top-level array (its first field) is within the API's bound: read from the frame, before
    any entry is decoded. Raises ``OversizedRequestError`` or a kio decoding error."""
    header, header_bytes = entity_reader(request_type.__header_schema__)(frame, 0)
    bound = REQUEST_ENTRIES_MAX.get(api_key)
    if bound is not None:
        read_length = (
            read_compact_array_length if request_type.__flexible__ else (read_legacy_array_length)
        )
        count, _ = read_length(frame, header_bytes)
        if count is not None and count > bound:  # None: a null array
            name = API_KEY_NAMES.get(api_key, str(api_key))
            field = dataclasses.fields(request_type)[0].name
            raise OversizedRequestError(
                "too_many_entries",
                f"{name} v{api_version} request has {count} {field}; allowed: at most {bound} "
                "per request (split it)",
            )
    return header, header_bytes


def schema_of(api_key: int, api_version: int) -> tuple[type[Any], type[Any]]:
    """The request and response classes of an API at a version: ours where kio has none
    (``broker/kafka/schemas.py``), else kio's. Raises kio's ``UnknownAPIKey`` or
    ``UnknownEntity``."""
    local = LOCAL_SCHEMAS.get((api_key, api_version))
    if local is not None:
        return local
    return load_request_schema(api_key, api_version), load_response_schema(api_key, api_version)


def request_schema(api_key: int, api_version: int) -> type[Any]:
    return schema_of(api_key, api_version)[0]


def response_schema(api_key: int, api_version: int) -> type[Any]:
    return schema_of(api_key, api_version)[1]


def decode_request(frame: bytes) -> Request | UnsupportedRequest:
    """The request in ``frame`` (one frame without its size prefix). Raises
    ``MalformedRequestError`` (``OversizedRequestError`` for a request beyond a bound)."""
    if len(frame) < HEADER_BYTES_MIN:
        raise MalformedRequestError(
            f"a frame of {len(frame)} bytes is shorter than a request header "
            f"({HEADER_BYTES_MIN} bytes at least)"
        )
    api_key, _ = read_int16(frame, 0)
    api_version, _ = read_int16(frame, 2)
    correlation_id, _ = read_int32(frame, 4)
    served = API_VERSIONS.get(api_key)
    if api_key == _API_VERSIONS_KEY and served is not None:
        low, high = served
        if not low <= api_version <= high:
            # KIP-511: whatever the version, answer v0 with our ranges.
            return UnsupportedRequest(api_key, api_version, correlation_id, None)
    try:
        request_type, response_type = schema_of(api_key, api_version)
    except (UnknownAPIKey, UnknownEntity):
        raise MalformedRequestError(
            f"API key {api_key} version {api_version} is not a Kafka request this listener can "
            "read (ask ApiVersions which versions it serves)"
        ) from None
    if served is None or not served[0] <= api_version <= served[1]:
        if not any(f.name == "error_code" for f in dataclasses.fields(response_type)):
            # Its errors live in per-entry fields an empty answer cannot carry (Produce,
            # FindCoordinator, ...): close, as Kafka does for an API it does not serve.
            raise MalformedRequestError(
                f"API key {api_key} ({API_KEY_NAMES.get(api_key, 'not served')}) version "
                f"{api_version} is not served here (ask ApiVersions which APIs are)"
            )
        return UnsupportedRequest(api_key, api_version, correlation_id, response_type)
    try:
        # A kio reader returns the entity and the number of bytes it consumed.
        header, header_bytes = _check_entries(frame, api_key, api_version, request_type)
        _decoding.items_max = DATA_REQUEST_ITEMS_MAX.get(api_key, KAFKA_REQUEST_ITEMS_MAX)
        _decoding.items_left = _decoding.items_max
        try:
            body, _ = entity_reader(request_type)(frame, header_bytes)
        finally:
            _decoding.items_left = None
    except _DECODE_ERRORS as exc:
        raise MalformedRequestError(
            f"{API_KEY_NAMES.get(api_key, api_key)} v{api_version} request does not decode: "
            f"{type(exc).__name__}: {exc}"
        ) from None
    null = _null_where_forbidden(body)
    if null is not None:
        raise MalformedRequestError(
            f"{API_KEY_NAMES.get(api_key, api_key)} v{api_version} request has a null "
            f"{null}, which its schema does not allow"
        )
    # Bytes after the request's end are ignored, as Kafka's own parser ignores them
    # (librdkafka 2.16 sends three after a Metadata v12 request for every topic).
    return Request(
        api_key=api_key,
        api_version=api_version,
        correlation_id=correlation_id,
        client_id=getattr(header, "client_id", None),
        body=body,
        response_type=response_type,
    )


def _null_where_forbidden(entity: Any, path: str = "") -> str | None:
    """The path of the first field of ``entity`` (recursively) that is null though its schema
    says it is not nullable, or None. kio 0.5 reads an array of length -1 as null whatever the
    schema says; Kafka's parser refuses it."""
    for field, kind in _fields_of(type(entity)):
        value = getattr(entity, field.name)
        where = f"{path}{field.name}"
        if value is None:
            if not kind.nullable:
                return where
            continue
        if kind.entity is None:
            continue
        for item in value if kind.array else (value,):
            found = _null_where_forbidden(item, f"{where}.")
            if found is not None:
                return found
    return None


def encode_response(correlation_id: int, response: Any) -> bytes:
    """The size-prefixed frame of ``response`` (a kio response entity) answering the request
    ``correlation_id``, with the header version its class carries (v0 for ApiVersions)."""
    header_type = type(response).__header_schema__
    buffer = io.BytesIO()
    buffer.write(b"\0\0\0\0")
    entity_writer(header_type)(buffer, header_type(correlation_id=correlation_id))
    entity_writer(type(response))(buffer, response)
    size = buffer.tell() - 4
    buffer.seek(0)
    buffer.write(size.to_bytes(4, "big", signed=True))
    return buffer.getvalue()


def with_throttle_time(response: Any, throttle_ms: int) -> Any:
    """``response`` (a kio response entity) with its ``throttle_time`` set to ``throttle_ms``,
    when its version has the field (Kafka's ``throttle_time_ms``; kio carries a timedelta)."""
    if throttle_ms <= 0 or "throttle_time" not in type(response).__dataclass_fields__:
        return response
    return dataclasses.replace(response, throttle_time=datetime.timedelta(milliseconds=throttle_ms))


# ----- building response entities from plain values -----------------------------------------


def kio_error(code: ErrorCode | int) -> KioErrorCode:
    """kio's error-code enum member for one of Kafka's codes."""
    return KioErrorCode(int(code))


def kafka_uuid(topic_id: Uuid | None) -> uuid.UUID | None:
    """A topic id as kio carries it: None for ZERO_UUID (the wire's all-zero "no id")."""
    if topic_id is None or topic_id == ZERO_UUID:
        return None
    return uuid.UUID(bytes=topic_id.bytes)


def our_uuid(value: uuid.UUID | None) -> Uuid:
    """A topic id from a kio entity: ZERO_UUID for None (all zeros on the wire)."""
    return ZERO_UUID if value is None else Uuid.from_bytes(value.bytes)


@dataclass(frozen=True, slots=True)
class _FieldKind:
    """What a kio entity field holds, read from its annotation: ``entity`` (a nested entity
    class, or None for a primitive), ``array``, ``nullable``, and the Kafka type of a primitive
    (``field.metadata["kafka_type"]``, the schema's type name)."""

    entity: type[Any] | None
    array: bool
    nullable: bool
    kafka_type: str | None


def _unwrap_optional(annotation: Any) -> tuple[Any, bool]:
    if get_origin(annotation) in (types.UnionType,):
        args = [a for a in get_args(annotation) if a is not type(None)]
        if len(args) == 1:
            return args[0], True
    return annotation, False


def _field_kind(field: dataclasses.Field[Any]) -> _FieldKind:
    annotation, nullable = _unwrap_optional(field.type)
    array = get_origin(annotation) is tuple
    if array:
        annotation, _ = _unwrap_optional(get_args(annotation)[0])
    entity = annotation if dataclasses.is_dataclass(annotation) else None
    kafka_type = field.metadata.get("kafka_type")
    return _FieldKind(
        entity=entity if isinstance(entity, type) else None,
        array=array,
        nullable=nullable,
        kafka_type=kafka_type if isinstance(kafka_type, str) else None,
    )


_ZEROS: Final[Mapping[str, Any]] = {
    "string": "",
    "bool": False,
    "bytes": b"",
    "records": b"",
    "float64": 0.0,
    "timedelta_i32": datetime.timedelta(0),
    "timedelta_i64": datetime.timedelta(0),
    "datetime_i64": datetime.datetime.fromtimestamp(0, datetime.UTC),
}


# Entity class -> its fields with what they hold. Bounded: one entry per kio class used.
_FIELDS: Final[dict[type[Any], tuple[tuple[dataclasses.Field[Any], _FieldKind], ...]]] = {}


def _fields_of(entity_type: type[Any]) -> tuple[tuple[dataclasses.Field[Any], _FieldKind], ...]:
    """The fields of a kio entity class with what they hold (read once per class)."""
    cached = _FIELDS.get(entity_type)
    if cached is None:
        cached = tuple((f, _field_kind(f)) for f in dataclasses.fields(entity_type))
        _FIELDS[entity_type] = cached
    return cached


def _has_default(field: dataclasses.Field[Any]) -> bool:
    return (
        field.default is not dataclasses.MISSING or field.default_factory is not dataclasses.MISSING
    )


def _zero(kind: _FieldKind, error_code: ErrorCode) -> Any:
    """The value of a field the caller did not give and the schema has no default for."""
    if kind.array:
        return ()
    if kind.entity is not None:
        return None if kind.nullable else build(kind.entity, {}, error_code=error_code)
    if kind.kafka_type == "error_code":
        return kio_error(error_code)
    if kind.nullable:
        return None
    return _ZEROS.get(kind.kafka_type or "", 0)


def _convert(kind: _FieldKind, value: Any, error_code: ErrorCode) -> Any:
    if value is None:
        return None
    if kind.entity is not None and kind.array:
        return tuple(build(kind.entity, item, error_code=error_code) for item in value)
    if kind.entity is not None:
        return build(kind.entity, value, error_code=error_code)
    if kind.array:
        return tuple(value)
    if kind.kafka_type == "error_code":
        return kio_error(value)
    if (kind.kafka_type or "").startswith("timedelta") and isinstance(value, int):
        return datetime.timedelta(milliseconds=value)
    return value


def build(
    entity_type: type[Any], values: Mapping[str, Any], *, error_code: ErrorCode = ErrorCode.NONE
) -> Any:
    """An instance of the kio entity ``entity_type`` from plain values by field name.

    Nested entities are given as mappings (lists of mappings for arrays) and built with the
    nested classes of the same version; names the version does not have are ignored, so one
    mapping serves every version of a response. A field given no value takes its schema
    default, else an empty value (0, "", (), None where nullable), and every error-code field
    left out takes ``error_code``. Error codes may be ``ErrorCode`` or ints; timedeltas ints of
    milliseconds."""
    kwargs: dict[str, Any] = {}
    for field, kind in _fields_of(entity_type):
        if field.name in values:
            kwargs[field.name] = _convert(kind, values[field.name], error_code)
        elif _has_default(field) and kind.kafka_type != "error_code":
            continue
        else:
            kwargs[field.name] = _zero(kind, error_code)
    return entity_type(**kwargs)
