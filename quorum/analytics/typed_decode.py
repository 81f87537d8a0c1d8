"""Typed decoding of metadata log batches for the ``metaquorum`` data source
(``quorum.analytics.source``): how a chunk of frames (about 16 Ki records) becomes typed records
when ``quorum.analytics.wire_columns``, which reads the fields straight from the bytes, refuses
something in the chunk; ``quorum.analytics.arrow_batches`` turns the typed records into Arrow.

msgspec decodes each batch body straight into typed objects: one ``msgspec.Struct`` per record,
chosen by its type code (a tagged union of array-like structs), whose ``fields`` is a tuple
typed field by field from ``RECORD_COLUMNS`` (``quorum.analytics.schema``: ints with the record
classes' ranges, 16-byte ids, strings, int arrays). Every type and range check of the record
classes thus runs in C while decoding, and the record version, the batch envelope and the
control flag are part of the types too.

Anything the types refuse sends the chunk to the reference decoder (``decode_log_batch``),
which either raises its precise error or (should the types ever be stricter than the record
classes) provides the records; they are then encoded again canonically and take the same typed
path (tests/spark/test_analytics_source.py checks both directions field by field). The cyclic
garbage collector is paused while a chunk is decoded (``arrow_batches.decode_chunk``): decoding
allocates millions of containers and no cycles, and a collection pass over them costs more than
the decoding.
"""

from __future__ import annotations

import dataclasses
import types
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Annotated, Any, Final, Literal, Optional, TypeAlias, TypeVar, Union

import msgspec

from quorum.analytics.log_files import Frame, LogReadError
from quorum.analytics.schema import (
    FAMILIES,
    FAMILY_NAMES,
    RECORD_COLUMNS,
    SLOT_NAMES,
    Field,
    family_of,
)
from quorum.ids import UUID_BYTES
from quorum.metadata.batch import BATCH_KEYS, LogBatch, decode_log_batch, encode_batch
from quorum.metadata.records import (
    CONTROL_RECORD_TYPES,
    INT32_MAX,
    INT64_MAX,
    Record,
    RecordDecodeError,
)

__all__ = [
    "LAYOUT_INDEX",
    "LAYOUT_LIST",
    "LAYOUT_RANKS",
    "Chunk",
    "NotFast",
    "RecordLayout",
    "collect_fast",
    "collect_reference",
]


class NotFast(Exception):  # a control-flow signal, not an error to report
    """The typed decoding refused something; the reference decoder decides."""


_Int32Element: TypeAlias = Annotated[int, msgspec.Meta(ge=0, le=INT32_MAX)]
_EndpointWire: TypeAlias = tuple[str, str, int]  # BrokerEndpoint checks the values
# A VotersRecord voter: id, directory id, endpoints, kraft.version range (VoterEntry checks).
_VoterWire: TypeAlias = tuple[int, bytes, tuple[_EndpointWire, ...], int, int]


def _wire_type(spec: Field) -> Any:
    """The msgspec type of one wire field: what the record class accepts for it (the port of
    an endpoint excepted, which ``arrow_batches`` checks with ``BrokerEndpoint`` itself)."""
    kind = spec.kind
    wire: Any
    if kind in ("int", "int?"):
        wire = Annotated[int, msgspec.Meta(ge=spec.minimum, le=spec.maximum)]
    elif kind == "bool":
        wire = bool
    elif kind in ("str", "str?"):
        wire = str
    elif kind == "uuid":
        wire = Annotated[bytes, msgspec.Meta(min_length=UUID_BYTES, max_length=UUID_BYTES)]
    elif kind in ("ints", "ints?"):
        wire = tuple[_Int32Element, ...]
    elif kind == "voters":
        wire = tuple[_VoterWire, ...]
    elif kind == "float":
        wire = Any  # msgspec would turn an int into a float: arrow_batches checks the type
    elif kind == "entity":
        wire = tuple[tuple[str, Optional[str]], ...]  # noqa: UP045 - a runtime type
    else:
        assert kind == "eps", kind
        wire = tuple[_EndpointWire, ...]
    return Optional[wire] if kind.endswith("?") else wire  # noqa: UP045 - a runtime type


_INT64: Final = Annotated[int, msgspec.Meta(ge=0, le=INT64_MAX)]
_INT32: Final = Annotated[int, msgspec.Meta(ge=0, le=INT32_MAX)]


@dataclass(frozen=True, slots=True)
class RecordLayout:
    """What the decoder needs to know about one record type (at its one decodable version)."""

    type_name: str
    version: int
    control: bool
    fields: tuple[Field, ...]
    slot_indexes: tuple[int, ...]  # where each field goes in SLOT_NAMES
    family: int | None  # the index in FAMILIES of the struct the fields fill
    struct: type[msgspec.Struct]  # [type code (the tag), version, fields] -> .version, .fields


def _layout(cls: type[Record], fields: tuple[Field, ...]) -> RecordLayout:
    family = family_of(fields)
    field_types: Any = tuple.__class_getitem__(tuple(_wire_type(f) for f in fields) or ((),))
    struct = msgspec.defstruct(
        cls.__name__,
        [("version", Literal.__getitem__(cls.VERSION)), ("fields", field_types)],
        array_like=True,
        tag=cls.TYPE,
        forbid_unknown_fields=True,  # an array with extra elements is refused, not cut
        gc=False,  # holds no containers that could form a cycle
    )
    return RecordLayout(
        type_name=cls.__name__,
        version=cls.VERSION,
        control=cls.TYPE in CONTROL_RECORD_TYPES,
        fields=fields,
        slot_indexes=tuple(SLOT_NAMES.index(f.column) for f in fields),
        family=None if family is None else FAMILY_NAMES.index(family),
        struct=struct,
    )


LAYOUT_LIST: Final = tuple(_layout(cls, fields) for cls, fields in RECORD_COLUMNS.items())
LAYOUT_INDEX: Final[Mapping[type, int]] = {
    layout.struct: index for index, layout in enumerate(LAYOUT_LIST)
}
# The rank of each layout when a chunk's rows are grouped: family by family (then the types of
# no family), type by type within a family, so each family's rows are one run.
LAYOUT_RANKS: Final = tuple(
    sorted(
        range(len(LAYOUT_LIST)),
        key=lambda i: (
            len(FAMILIES) if LAYOUT_LIST[i].family is None else LAYOUT_LIST[i].family,
            i,
        ),
    ).index(i)
    for i in range(len(LAYOUT_LIST))
)


def _body_decoder(control: bool) -> msgspec.msgpack.Decoder[Any]:
    """A decoder of the batch bodies ``encode_batch`` writes (``control`` or not): the map
    with exactly the keys ``BATCH_KEYS``, header ranges as ``decode_batch`` checks them, and an
    array of records of the matching kind (``collect_fast`` refuses an empty one)."""
    structs = tuple(layout.struct for layout in LAYOUT_LIST if layout.control == control)
    records = types.GenericAlias(list, (Union.__getitem__(structs),))
    body = msgspec.defstruct(
        "ControlBatch" if control else "Batch",
        [
            ("base_offset", _INT64),
            ("epoch", _INT32),
            ("timestamp_ms", _INT64),
            ("control", Literal.__getitem__(control)),
            ("records", records),  # and not empty (checked with the header)
        ],
        forbid_unknown_fields=True,
    )
    assert set(body.__struct_fields__) == BATCH_KEYS
    return msgspec.msgpack.Decoder(body)


T = TypeVar("T")

_DATA_BODY: Final = _body_decoder(control=False)
_CONTROL_BODY: Final = _body_decoder(control=True)
_DECODE_ERRORS: Final = (msgspec.DecodeError, ValueError)  # ValueError: bad UTF-8


@dataclass(slots=True)
class Chunk:
    """Typed records gathered from consecutive batches, with per-batch header values."""

    records: list[msgspec.Struct] = dataclasses.field(default_factory=list)
    first_offsets: list[int] = dataclasses.field(default_factory=list)
    counts: list[int] = dataclasses.field(default_factory=list)
    epochs: list[int] = dataclasses.field(default_factory=list)
    timestamps_ms: list[int] = dataclasses.field(default_factory=list)

    def add(
        self, records: Sequence[msgspec.Struct], first_offset: int, epoch: int, timestamp_ms: int
    ) -> None:
        self.records.extend(records)
        self.first_offsets.append(first_offset)
        self.counts.append(len(records))
        self.epochs.append(epoch)
        self.timestamps_ms.append(timestamp_ms)


def _decode_body(data: bytes | memoryview) -> Any:
    """The typed body of a batch, or ``NotFast``."""
    try:
        return _DATA_BODY.decode(data)
    except _DECODE_ERRORS:
        pass
    try:
        return _CONTROL_BODY.decode(data)
    except _DECODE_ERRORS as exc:
        raise NotFast(str(exc)) from None


def collect_fast(chunk: Chunk, frame: Frame, start: int, end: int | None, *, path: str) -> None:
    """Decode a batch body with the typed decoders and gather its records in the range."""
    del path  # errors are for the reference decoder to report
    body = _decode_body(frame.data)
    records = body.records
    base_offset = body.base_offset
    header = (frame.base_offset, frame.epoch, frame.record_count)
    if not records or (base_offset, body.epoch, len(records)) != header:
        raise NotFast("batch header")
    cut = records_in_range(records, base_offset, start, end)
    if cut is not None:
        chunk.add(cut[0], cut[1], body.epoch, body.timestamp_ms)


def records_in_range(
    records: Sequence[T], base_offset: int, start: int, end: int | None
) -> tuple[Sequence[T], int] | None:
    """A batch's records at offsets in ``[start, end)`` and the offset of the first, or None
    when none is."""
    if start > base_offset or (end is not None and end < base_offset + len(records)):
        low = max(start - base_offset, 0)
        high = len(records) if end is None else min(end - base_offset, len(records))
        if low >= high:
            return None
        return records[low:high], base_offset + low
    return records, base_offset


def collect_reference(
    chunk: Chunk, frame: Frame, start: int, end: int | None, *, path: str
) -> None:
    """Decode a batch with the reference decoder (exact errors); then gather its records,
    encoded again canonically, through the typed path."""
    batch = LogBatch(frame.base_offset, frame.epoch, frame.record_count, bytes(frame.data))
    try:
        decoded = decode_log_batch(batch)
    except RecordDecodeError as exc:
        raise LogReadError(
            path,
            frame.position,
            f"cannot decode the batch at base offset {frame.base_offset}: {exc}",
        ) from exc
    canonical = encode_batch(
        base_offset=decoded.base_offset,
        epoch=decoded.epoch,
        timestamp_ms=decoded.timestamp_ms,
        records=decoded.records,
        control=decoded.control,
    )
    again = frame._replace(data=canonical.data)
    try:
        collect_fast(chunk, again, start, end, path=path)
    except NotFast as exc:
        raise AssertionError(
            f"{path}: the typed decoding refused records that decode_log_batch accepts "
            f"({exc}); this is a bug in quorum.analytics.typed_decode"
        ) from exc
