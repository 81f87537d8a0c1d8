"""What every metadata record class shares: the codec's errors, the wire ranges of Kafka's
field types, the field checks that run when a record is built, and the wire conversions of the
field kinds several record types have (ids, arrays).

The record classes are in ``records_brokers``, ``records_topics``, ``records_configs_acls`` and
``records_control``; the codec that dispatches on their type codes in ``record_codec``;
``quorum.metadata.records`` gathers all of it under one name (see its docstring for the wire
form).
"""

from __future__ import annotations

from typing import Any, Final, NoReturn

from quorum.ids import UUID_BYTES, Uuid
from quorum.limits import INT32_MAX

__all__ = [
    "INT8_MAX",
    "INT16_MAX",
    # Re-exported beside INT8_MAX .. INT64_MAX for the readers of the field ranges.
    "INT32_MAX",
    "INT64_MAX",
    "PORT_MAX",
    "InvalidRecordError",
    "RecordDecodeError",
    "UnknownRecordTypeError",
    "UnsupportedRecordVersionError",
    "check_bool",
    "check_int",
    "check_int_tuple",
    "check_optional_int",
    "check_optional_int_tuple",
    "check_optional_str",
    "check_str",
    "check_uuid",
    "fail_field",
    "optional_tuple_from_wire",
    "tuple_from_wire",
    "uuid_from_wire",
]

# Kafka's schema types for these fields (metadata/src/main/resources/common/metadata/*.json).
INT8_MAX: Final = (1 << 7) - 1
INT16_MAX: Final = (1 << 15) - 1
INT64_MAX: Final = (1 << 63) - 1
PORT_MAX: Final = 65535


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


def fail_field(record: object, field: str, expected: str, value: object) -> NoReturn:
    raise InvalidRecordError(f"{type(record).__name__}.{field} must be {expected}, got {value!r}")


def check_int(record: object, field: str, value: object, minimum: int, maximum: int) -> None:
    # ``type(...) is int`` on purpose: it refuses ``True`` (a bool is an int in Python).
    if type(value) is not int or not minimum <= value <= maximum:
        fail_field(record, field, f"an int in [{minimum}, {maximum}]", value)


def check_optional_int(
    record: object, field: str, value: object, minimum: int, maximum: int
) -> None:
    if value is not None:
        check_int(record, field, value, minimum, maximum)


def check_int_tuple(record: object, field: str, value: object, minimum: int, maximum: int) -> None:
    if type(value) is not tuple:
        fail_field(record, field, f"a tuple of ints in [{minimum}, {maximum}]", value)
    for element in value:
        if type(element) is not int or not minimum <= element <= maximum:
            fail_field(record, field, f"a tuple of ints in [{minimum}, {maximum}]", value)


def check_optional_int_tuple(
    record: object, field: str, value: object, minimum: int, maximum: int
) -> None:
    if value is not None:
        check_int_tuple(record, field, value, minimum, maximum)


def check_str(record: object, field: str, value: object) -> None:
    if type(value) is not str:
        fail_field(record, field, "a str", value)
    if not value.isascii():
        # msgpack writes UTF-8; a lone surrogate would only fail later, at encode time.
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            fail_field(record, field, "a str encodable as UTF-8", value)


def check_optional_str(record: object, field: str, value: object) -> None:
    if value is not None:
        check_str(record, field, value)


def check_bool(record: object, field: str, value: object) -> None:
    if type(value) is not bool:
        fail_field(record, field, "a bool", value)


def check_uuid(record: object, field: str, value: object) -> None:
    if type(value) is not Uuid:
        fail_field(record, field, "a Uuid", value)


# ----- wire conversions of shared field kinds ---------------------------------------------
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


def uuid_from_wire(value: object) -> Uuid:
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


def tuple_from_wire(value: object) -> tuple[Any, ...]:
    if type(value) is tuple:
        return value
    if type(value) is list:
        return tuple(value)
    raise InvalidRecordError(f"expected an array, got {value!r}")


def optional_tuple_from_wire(value: object) -> tuple[Any, ...] | None:
    return None if value is None else tuple_from_wire(value)
