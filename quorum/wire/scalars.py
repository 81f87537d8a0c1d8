"""The scalar conventions every codec of ``quorum.wire`` shares (docs/conventions.md#wire).

- Ids that mean "none" are ``None`` in the core and ``NO_ID`` (-1) on the wire (leader ids).
  Any other negative id from a peer is malformed.
- A ``Uuid`` travels as its 16 raw bytes; a KIP-853 directory id as empty bytes for none.
- Error codes travel as Kafka's numbers; one this build does not know is malformed.

A value that cannot be expressed in the core's types raises ``MalformedMessageError`` naming
the message type and the field.
"""

from __future__ import annotations

from typing import Final

from quorum.errors import ErrorCode
from quorum.ids import UUID_BYTES, Uuid

__all__ = [
    "NO_ID",
    "MalformedMessageError",
    "directory_id_from_wire",
    "directory_id_to_wire",
    "error_from_wire",
    "id_from_wire",
    "id_to_wire",
    "timestamp_from_wire",
    "uuid_from_wire",
]

NO_ID: Final = -1
"""The wire's "none / unknown" for ids and timestamps."""


class MalformedMessageError(ValueError):
    """A message from a peer that cannot be expressed as a core message
    (docs/conventions.md#errors: a protocol error of the peer). ``message_type`` and ``field`` name
    what was wrong."""

    def __init__(self, message_type: str, field: str, problem: str) -> None:
        self.message_type = message_type
        self.field = field
        self.problem = problem
        super().__init__(f"malformed {message_type}: {field}: {problem}")


def id_to_wire(value: int | None) -> int:
    return NO_ID if value is None else value


def id_from_wire(message_type: str, field: str, value: int) -> int | None:
    if value == NO_ID:
        return None
    if value < 0:
        raise MalformedMessageError(message_type, field, f"{value} is neither an id nor -1")
    return value


def uuid_from_wire(message_type: str, field: str, data: bytes) -> Uuid:
    if len(data) != UUID_BYTES:
        raise MalformedMessageError(
            message_type, field, f"a Uuid is {UUID_BYTES} bytes, got {len(data)}"
        )
    return Uuid.from_bytes(data)


def error_from_wire(message_type: str, value: int) -> ErrorCode:
    try:
        return ErrorCode(value)
    except ValueError:
        raise MalformedMessageError(
            message_type, "error_code", f"{value} is not an error code this build knows"
        ) from None


def timestamp_from_wire(message_type: str, field: str, value: int) -> int | None:
    if value == NO_ID:
        return None
    if value < 0:
        raise MalformedMessageError(message_type, field, f"{value} is neither a time nor -1")
    return value


def directory_id_to_wire(value: Uuid | None) -> bytes:
    return b"" if value is None else value.bytes


def directory_id_from_wire(message_type: str, field: str, data: bytes) -> Uuid | None:
    """KIP-853 directory ids: empty bytes for none."""
    return uuid_from_wire(message_type, field, data) if data else None
