"""Record columns read straight from the msgpack bytes of a chunk, for the ``metaquorum`` data
source (``quorum.analytics.arrow_batches`` uses them first, before the typed decoding of
``quorum.analytics.typed_decode``).

msgspec decodes each batch body with its records left as ``msgspec.Raw`` (the well-formed
bytes of each record, one object per record, no object per field); the records of a chunk are
joined into one byte array, and each record type's fields are then read for all its rows at
once with numpy: positions advance field by field, each field's value is read by its msgpack
marker, and Arrow arrays are built from the values. Per record this costs a fraction of the
typed decoding and of the column conversion after it (docs/benchmarks.md has the figures).

It reads only what the canonical encoders write for the fields it knows (positive and negative
fixints and the int/uint markers, nil where the field is optional, bool, bin 8 of 16 bytes,
fixstr/str 8/16/32 in valid UTF-8, fixarray of ints) and checks the ranges of
``quorum.analytics.schema.RECORD_COLUMNS``. Anything else raises ``NotFast``, and the chunk takes
the typed decoding, which accepts or refuses what it finds exactly as the record classes do: so
what this module accepts, it reads as the typed path would (tests/spark/test_analytics_source.py
checks both against the reference decoder, value by value). Record types with fields it does not
read (broker endpoints, voters, quotas) are decoded record by record with their typed struct.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated, Any, Final, TypeAlias

import msgspec

from quorum.analytics.log_files import Frame
from quorum.analytics.schema import SLOTS, Field, arrow_type
from quorum.analytics.typed_decode import LAYOUT_LIST, NotFast, RecordLayout, records_in_range
from quorum.ids import UUID_BASE64_CHARS, UUID_BYTES
from quorum.metadata.batch import BATCH_KEYS
from quorum.metadata.records import INT32_MAX, INT64_MAX

if TYPE_CHECKING:
    import pyarrow as pa  # type: ignore[import-untyped]

__all__ = [
    "RawChunk",
    "WireRecords",
    "collect_raw",
    "decode_raws",
    "layout_columns",
    "locate_records",
    "reads_layout",
    "uuid_texts",
]


_Int64: TypeAlias = Annotated[int, msgspec.Meta(ge=0, le=INT64_MAX)]
_Int32: TypeAlias = Annotated[int, msgspec.Meta(ge=0, le=INT32_MAX)]


class _RawBody(msgspec.Struct, forbid_unknown_fields=True):
    """A batch body with its records left as raw msgpack (``encode_batch``'s keys, the header
    ranges of ``typed_decode``'s body decoders)."""

    base_offset: _Int64
    epoch: _Int32
    timestamp_ms: _Int64
    control: bool
    records: list[msgspec.Raw]


assert set(_RawBody.__struct_fields__) == BATCH_KEYS
_RAW_BODY: Final = msgspec.msgpack.Decoder(_RawBody)
_DECODE_ERRORS: Final = (msgspec.DecodeError, ValueError)


@dataclass(slots=True)
class RawChunk:
    """Raw records gathered from consecutive batches, with per-batch header values."""

    raws: list[msgspec.Raw] = dataclasses.field(default_factory=list)
    first_offsets: list[int] = dataclasses.field(default_factory=list)
    counts: list[int] = dataclasses.field(default_factory=list)
    epochs: list[int] = dataclasses.field(default_factory=list)
    timestamps_ms: list[int] = dataclasses.field(default_factory=list)
    controls: list[bool] = dataclasses.field(default_factory=list)


def collect_raw(chunk: RawChunk, frame: Frame, start: int, end: int | None) -> None:
    """Gather a batch's raw records in ``[start, end)``; ``NotFast`` for anything the typed
    decoding should judge (its header checks are those of ``typed_decode.collect_fast``)."""
    try:
        body = _RAW_BODY.decode(frame.data)
    except _DECODE_ERRORS:
        raise NotFast("batch body") from None
    records = body.records
    base_offset, epoch, timestamp_ms = body.base_offset, body.epoch, body.timestamp_ms
    if not records or (base_offset, epoch, len(records)) != (
        frame.base_offset,
        frame.epoch,
        frame.record_count,
    ):
        raise NotFast("batch header")
    cut = records_in_range(records, base_offset, start, end)
    if cut is None:
        return
    kept, base_offset = cut
    chunk.raws.extend(kept)
    chunk.first_offsets.append(base_offset)
    chunk.counts.append(len(kept))
    chunk.epochs.append(epoch)
    chunk.timestamps_ms.append(timestamp_ms)
    chunk.controls.append(body.control)


# ----- the records of a chunk ---------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class WireRecords:
    """A chunk's records joined: ``buf`` (uint8, padded), and per record its layout index
    (``kinds``), where its fields start (after the fields' array header) and where it ends."""

    buf: Any
    kinds: Any
    field_starts: Any
    ends: Any


_PADDING: Final = bytes(32)  # reads of fixed-size values near the end stay inside the array
_tables: list[Any] = []


def _kind_tables() -> tuple[Any, Any, Any, Any]:
    """Per type code the layout index (-1: none); per layout the version, the byte of its
    fields' array header (a fixarray of its field count) and whether it is a control record."""
    if not _tables:
        import numpy as np  # noqa: PLC0415

        by_tag = np.full(65_536, -1, dtype=np.int16)
        for index, layout in enumerate(LAYOUT_LIST):
            tag = layout.struct.__struct_config__.tag
            assert isinstance(tag, int) and 0 <= tag < 65_536, tag
            assert layout.version < 0x80 and len(layout.fields) < 16, layout
            by_tag[tag] = index
        _tables.extend(
            [
                by_tag,
                np.array([layout.version for layout in LAYOUT_LIST], dtype=np.uint8),
                np.array([0x90 | len(layout.fields) for layout in LAYOUT_LIST], dtype=np.uint8),
                np.array([layout.control for layout in LAYOUT_LIST], dtype=np.bool_),
            ]
        )
    by_tag, versions, headers, controls = _tables
    return by_tag, versions, headers, controls


def locate_records(chunk: RawChunk) -> WireRecords:
    """Check each record's envelope, ``[type, version, [fields...]]`` with a known type at its
    version, a fields array of its field count, and a control type exactly in control batches;
    ``NotFast`` otherwise."""
    import numpy as np  # noqa: PLC0415

    raws = chunk.raws
    count = len(raws)
    lengths = np.fromiter(map(len, raws), np.int64, count)
    buf = np.frombuffer(b"".join(raws) + _PADDING, dtype=np.uint8)
    ends = np.cumsum(lengths)
    starts = ends - lengths
    if not (lengths >= 4).all() or not (buf[starts] == 0x93).all():
        raise NotFast("record envelope")
    marker = buf[starts + 1]
    tags = marker.astype(np.int64)
    tag_bytes = np.ones(count, dtype=np.int64)
    if not (marker < 0x80).all():  # uint8 (0xcc) and uint16 (0xcd) codes
        wide = np.flatnonzero(marker >= 0x80)
        codes = marker[wide]
        if not np.isin(codes, (0xCC, 0xCD)).all():
            raise NotFast("record type code")
        at = starts[wide] + 2
        tags[wide] = np.where(
            codes == 0xCC,
            buf[at].astype(np.int64),
            buf[at].astype(np.int64) << 8 | buf[at + 1],
        )
        tag_bytes[wide] = np.where(codes == 0xCC, 2, 3)
    by_tag, versions, headers, controls = _kind_tables()
    kinds = by_tag[tags]
    if (kinds < 0).any():
        raise NotFast("record type code")
    version_at = starts + 1 + tag_bytes
    if not (buf[version_at] == versions[kinds]).all():
        raise NotFast("record version")
    if not (buf[version_at + 1] == headers[kinds]).all():
        raise NotFast("record fields")
    row_controls = np.repeat(np.array(chunk.controls, dtype=np.bool_), chunk.counts)
    if not (row_controls == controls[kinds]).all():
        raise NotFast("control record")
    return WireRecords(buf, kinds.astype(np.int8), version_at + 2, ends)


# ----- fields -------------------------------------------------------------------------------

# Record types whose every field this module reads (the others: record by record, typed).
_READ_KINDS: Final = frozenset({"int", "int?", "bool", "str", "str?", "uuid", "ints", "ints?"})


def reads_layout(layout: RecordLayout) -> bool:
    return all(spec.kind in _READ_KINDS for spec in layout.fields)


def _big_endian(buf: Any, at: Any, size: int, *, signed: bool) -> Any:
    """The ``size``-byte big-endian integers at positions ``at`` (int64; an unsigned 8-byte
    value above INT64_MAX is refused: no field allows one)."""
    import numpy as np  # noqa: PLC0415

    value = np.zeros(len(at), dtype=np.uint64)
    for k in range(size):
        value = (value << np.uint64(8)) | buf[at + k].astype(np.uint64)
    if size == 8:
        if not signed and (value > INT64_MAX).any():
            raise NotFast("int")
        return value.view(np.int64)
    result = value.astype(np.int64)
    if signed:
        result -= (result >= 1 << (8 * size - 1)) * (1 << (8 * size))
    return result


# msgpack's int markers after the fixints: (marker, payload bytes, signed).
_INT_MARKERS: Final = (
    (0xCC, 1, False),
    (0xCD, 2, False),
    (0xCE, 4, False),
    (0xCF, 8, False),
    (0xD0, 1, True),
    (0xD1, 2, True),
    (0xD2, 4, True),
    (0xD3, 8, True),
)


def _ints_at(
    buf: Any, pos: Any, minimum: int, maximum: int, *, nullable: bool
) -> tuple[Any, Any, Any]:
    """(values int64, nulls or None, positions after them) of the ints at ``pos``."""
    import numpy as np  # noqa: PLC0415

    marker = buf[pos]
    nulls = None
    if (marker < 0x80).all():  # positive fixints: the common case
        values = marker.astype(np.int64)
        after = pos + 1
    else:
        values = marker.astype(np.int64)
        width = np.zeros(len(pos), dtype=np.int64)
        width[marker < 0x80] = 1
        negative = marker >= 0xE0
        values[negative] -= 256
        width[negative] = 1
        if nullable:
            nulls = marker == 0xC0
            values[nulls] = 0
            width[nulls] = 1
        for code, size, signed in _INT_MARKERS:
            rows = np.flatnonzero(marker == code)
            if len(rows):
                values[rows] = _big_endian(buf, pos[rows] + 1, size, signed=signed)
                width[rows] = 1 + size
        if not width.all():
            raise NotFast("int")
        after = pos + width
    bad = (values < minimum) | (values > maximum)
    if nulls is not None:
        bad &= ~nulls
        if not nulls.any():
            nulls = None
    if bad.any():
        raise NotFast("int range")
    return values, nulls, after


def _int_column(buf: Any, pos: Any, spec: Field, sql: str) -> tuple[pa.Array, Any]:
    import numpy as np  # noqa: PLC0415
    import pyarrow as pa  # noqa: PLC0415

    values, nulls, after = _ints_at(
        buf, pos, spec.minimum, spec.maximum, nullable=spec.kind == "int?"
    )
    wide = sql == "BIGINT"
    typed = values if wide else values.astype(np.int32)
    if nulls is None:
        return pa.array(typed), after
    return pa.array(typed, pa.int64() if wide else pa.int32(), mask=nulls), after


def _bool_column(buf: Any, pos: Any) -> tuple[pa.Array, Any]:
    import pyarrow as pa  # noqa: PLC0415

    marker = buf[pos]
    true = marker == 0xC3
    if not (true | (marker == 0xC2)).all():
        raise NotFast("bool")
    return pa.array(true), pos + 1


def uuid_texts(ids: Any) -> pa.Array:
    """16-byte ids (a ``(count, 16)`` uint8 array) -> Kafka's base64 text: see
    ``_base64_texts``."""
    import numpy as np  # noqa: PLC0415

    padded = np.zeros((len(ids), UUID_BYTES + 2), dtype=np.uint8)
    padded[:, :UUID_BYTES] = ids
    return _base64_texts(padded)


def _base64_texts(padded: Any) -> pa.Array:
    """Ids padded to 18 bytes (a ``(count, 18)`` uint8 array, two zero bytes after each id) ->
    Kafka's base64 text, all at once: each encodes to 24 characters whose first 22 are its
    text."""
    import binascii  # noqa: PLC0415

    import numpy as np  # noqa: PLC0415
    import pyarrow as pa  # noqa: PLC0415

    count = len(padded)
    encoded = binascii.b2a_base64(np.ascontiguousarray(padded).data, newline=False)
    urlsafe = np.frombuffer(encoded.translate(_URLSAFE), dtype=np.uint8)
    texts = np.ascontiguousarray(urlsafe.reshape(count, 24)[:, :UUID_BASE64_CHARS])
    offsets = np.arange(0, (count + 1) * UUID_BASE64_CHARS, UUID_BASE64_CHARS, dtype=np.int32)
    return pa.StringArray.from_buffers(count, pa.py_buffer(offsets), pa.py_buffer(texts))


_URLSAFE: Final = bytes.maketrans(b"+/", b"-_")


def _uuid_column(buf: Any, pos: Any) -> tuple[pa.Array, Any]:
    import numpy as np  # noqa: PLC0415

    if not ((buf[pos] == 0xC4) & (buf[pos + 1] == UUID_BYTES)).all():
        raise NotFast("uuid")
    # The 16 bytes of each id and then twice the buffer's last byte (padding: zero).
    gather = np.empty((len(pos), UUID_BYTES + 2), dtype=np.int64)
    gather[:, :UUID_BYTES] = (pos + 2)[:, None] + np.arange(UUID_BYTES)
    gather[:, UUID_BYTES:] = len(buf) - 1
    return _base64_texts(buf[gather]), pos + 2 + UUID_BYTES


def _str_column(buf: Any, pos: Any, ends: Any, *, nullable: bool) -> tuple[pa.Array, Any]:
    import numpy as np  # noqa: PLC0415
    import pyarrow as pa  # noqa: PLC0415

    count = len(pos)
    marker = buf[pos]
    fixstr = (marker & 0xE0) == 0xA0
    lengths = (marker & 0x1F).astype(np.int64)
    header = np.ones(count, dtype=np.int64)
    nulls = None
    if not fixstr.all():
        known = fixstr.copy()
        lengths[~fixstr] = 0
        for code, size in ((0xD9, 1), (0xDA, 2), (0xDB, 4)):
            rows = np.flatnonzero(marker == code)
            if len(rows):
                lengths[rows] = _big_endian(buf, pos[rows] + 1, size, signed=False)
                header[rows] = 1 + size
                known[rows] = True
        if nullable:
            nulls = marker == 0xC0
            known |= nulls
            if not nulls.any():
                nulls = None
        if not known.all():
            raise NotFast("str")
    data_at = pos + header
    after = data_at + lengths
    if (after > ends).any():
        raise NotFast("str length")
    offsets = np.zeros(count + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    total = int(offsets[-1])
    if total > INT32_MAX:
        raise NotFast("str size")
    data = buf[np.repeat(data_at - offsets[:-1], lengths) + np.arange(total)]
    validity = None
    if nulls is not None:
        validity = pa.py_buffer(np.packbits(~nulls, bitorder="little"))
    array = pa.StringArray.from_buffers(
        count,
        pa.py_buffer(offsets.astype(np.int32)),
        pa.py_buffer(data),
        validity,
        0 if nulls is None else int(nulls.sum()),
    )
    try:
        array.validate(full=True)  # UTF-8
    except pa.ArrowInvalid:
        raise NotFast("str UTF-8") from None
    return array, after


def _int_lists_column(buf: Any, pos: Any, sql: str, *, nullable: bool) -> tuple[pa.Array, Any]:
    import numpy as np  # noqa: PLC0415
    import pyarrow as pa  # noqa: PLC0415

    count = len(pos)
    marker = buf[pos]
    fixarray = (marker & 0xF0) == 0x90
    nulls = None
    if not fixarray.all():
        nulls = marker == 0xC0
        if not nullable or not (fixarray | nulls).all():
            raise NotFast("int array")
    sizes = np.where(fixarray, marker & 0x0F, 0).astype(np.int64)
    offsets = np.zeros(count + 1, dtype=np.int64)
    np.cumsum(sizes, out=offsets[1:])
    total = int(offsets[-1])
    # The common case, every element a positive fixint: one byte each, read in one gather.
    values = buf[np.repeat(pos + 1 - offsets[:-1], sizes) + np.arange(total)]
    if (values < 0x80).all():
        values = values.astype(np.int32)
        after = pos + 1 + sizes
    else:
        after = pos + 1
        longest = int(sizes.max())
        matrix = np.zeros((count, longest), dtype=np.int32)
        for k in range(longest):
            rows = np.flatnonzero(sizes > k)
            element, _, after[rows] = _ints_at(buf, after[rows], 0, INT32_MAX, nullable=False)
            matrix[rows, k] = element
        values = matrix[np.arange(longest) < sizes[:, None]]
    array = pa.ListArray.from_arrays(
        pa.array(offsets.astype(np.int32)),
        pa.array(values),
        type=arrow_type(sql),
        mask=None if nulls is None else pa.array(nulls),
    )
    return array, after


def layout_columns(layout: RecordLayout, buf: Any, pos: Any, ends: Any) -> list[pa.Array]:
    """The Arrow arrays of ``layout.fields`` for the records whose fields start at ``pos`` and
    end at ``ends`` (``reads_layout(layout)`` must hold); ``NotFast`` for anything else."""
    import numpy as np  # noqa: PLC0415

    arrays = []
    for spec, index in zip(layout.fields, layout.slot_indexes, strict=True):
        kind, sql = spec.kind, SLOTS[index][1]
        if kind in ("int", "int?"):
            array, pos = _int_column(buf, pos, spec, sql)
        elif kind == "bool":
            array, pos = _bool_column(buf, pos)
        elif kind == "uuid":
            array, pos = _uuid_column(buf, pos)
        elif kind in ("str", "str?"):
            array, pos = _str_column(buf, pos, ends, nullable=kind == "str?")
        else:
            assert kind in ("ints", "ints?"), kind
            array, pos = _int_lists_column(buf, pos, sql, nullable=kind == "ints?")
        arrays.append(array)
    if not np.array_equal(pos, ends):
        raise NotFast("record length")
    return arrays


def decode_raws(layout: RecordLayout, raws: Sequence[msgspec.Raw]) -> list[msgspec.Struct]:
    """Records of ``layout`` decoded one by one into its typed struct (``NotFast`` if one
    does not decode)."""
    decoder = _struct_decoders.get(layout.type_name)
    if decoder is None:
        decoder = _struct_decoders[layout.type_name] = msgspec.msgpack.Decoder(layout.struct)
    try:
        return [decoder.decode(raw) for raw in raws]
    except _DECODE_ERRORS:
        raise NotFast("record") from None


_struct_decoders: dict[str, msgspec.msgpack.Decoder[Any]] = {}
