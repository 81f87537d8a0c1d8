"""Topic and cluster identifiers (KIP-516).

A ``Uuid`` is a 128-bit value printed, as Kafka prints it, in URL-safe base64 without padding
(22 characters). Two values are reserved: ``ZERO_UUID`` means "no id / use the name", and
``METADATA_TOPIC_ID`` is the sentinel id of ``__cluster_metadata`` that every Raft RPC may carry
until the metadata topic's own id is known. ``Uuid.random`` never returns either of them, nor an
id whose text starts with ``-`` (it would read like a command-line flag).
"""

from __future__ import annotations

import base64
import binascii
import random as _random
import re
import uuid as _uuid
from dataclasses import dataclass, field
from typing import Final

UUID_BYTES: Final = 16
UUID_BASE64_CHARS: Final = 22

_BASE64_RE: Final = re.compile(r"[A-Za-z0-9_-]{22}")
_DASHED_HEX_RE: Final = re.compile(
    r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}"
)


class InvalidUuidError(ValueError):
    """The text or bytes given are not exactly one 16-byte id."""


@dataclass(frozen=True, slots=True, order=True)
class Uuid:
    """A 128-bit id, stored as its two signed-agnostic 64-bit halves (Kafka's layout)."""

    most_significant_bits: int
    least_significant_bits: int
    # The hash, computed once: images key millions of entries by topic id, and the hash the
    # dataclass would generate builds a tuple on every dict lookup.
    _hash: int = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        for name in ("most_significant_bits", "least_significant_bits"):
            value = getattr(self, name)
            if not isinstance(value, int) or not 0 <= value < 1 << 64:
                raise InvalidUuidError(f"{name} must be an unsigned 64-bit int, got {value!r}")
        most, least = self.most_significant_bits, self.least_significant_bits
        object.__setattr__(self, "_hash", hash((most, least)))

    def __hash__(self) -> int:
        return self._hash

    # ----- construction -------------------------------------------------------------------

    @classmethod
    def from_bytes(cls, data: bytes) -> Uuid:
        if not isinstance(data, bytes | bytearray) or len(data) != UUID_BYTES:
            raise InvalidUuidError(f"a Uuid is exactly 16 bytes, got {data!r}")
        value = int.from_bytes(data, "big")
        return cls(value >> 64, value & ((1 << 64) - 1))

    @classmethod
    def parse(cls, text: str) -> Uuid:
        """Parse Kafka's 22-character base64url form (or the 36-character dashed hex form).

        Strict: no padding, no whitespace, no standard-alphabet ``+``/``/``, and the value must
        decode to exactly 16 bytes with no stray bits in the last character.
        """
        if not isinstance(text, str):
            raise InvalidUuidError(f"a Uuid must be given as text, got {text!r}")
        if _DASHED_HEX_RE.fullmatch(text):
            return cls.from_bytes(_uuid.UUID(text).bytes)
        if not _BASE64_RE.fullmatch(text):
            raise InvalidUuidError(
                f"invalid topic id {text!r}: expected 22 characters of URL-safe base64 "
                "(A-Z a-z 0-9 - _) without padding, e.g. 'AAAAAAAAAAAAAAAAAAAAAQ'"
            )
        try:
            data = base64.urlsafe_b64decode(text + "==")
        except (binascii.Error, ValueError) as exc:  # pragma: no cover - regex rules this out
            raise InvalidUuidError(f"invalid topic id {text!r}: {exc}") from exc
        parsed = cls.from_bytes(data)
        if str(parsed) != text:
            raise InvalidUuidError(
                f"invalid topic id {text!r}: the last character carries bits beyond 128"
            )
        return parsed

    @classmethod
    def random(cls, rng: _random.Random | None = None) -> Uuid:
        """A version-4 id that is never reserved and never prints with a leading ``-``.

        ``rng`` lets the deterministic simulator and tests draw reproducible ids; production
        passes nothing and gets ids from the operating system's CSPRNG.
        """
        while True:
            raw = rng.getrandbits(128).to_bytes(16, "big") if rng else _uuid.uuid4().bytes
            candidate = cls.from_bytes(_uuid.UUID(bytes=raw, version=4).bytes)
            if candidate in RESERVED_UUIDS or str(candidate).startswith("-"):
                continue
            return candidate

    # ----- views --------------------------------------------------------------------------

    @property
    def bytes(self) -> bytes:
        return ((self.most_significant_bits << 64) | self.least_significant_bits).to_bytes(
            16, "big"
        )

    def to_uuid(self) -> _uuid.UUID:
        return _uuid.UUID(bytes=self.bytes)

    def __str__(self) -> str:
        return base64.urlsafe_b64encode(self.bytes).decode("ascii").rstrip("=")

    def __repr__(self) -> str:
        return f"Uuid({str(self)!r})"


ZERO_UUID: Final = Uuid(0, 0)
ONE_UUID: Final = Uuid(0, 1)
METADATA_TOPIC_ID: Final = ONE_UUID
RESERVED_UUIDS: Final = frozenset({ZERO_UUID, ONE_UUID})
