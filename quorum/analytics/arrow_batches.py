"""Typed records to Arrow batches for the ``metaquorum`` data source
(``quorum.analytics.source``): the rows of one input partition as ``pyarrow.RecordBatch``es of
``arrow_schema()``, one per chunk of about 16 Ki records.

The records of a chunk are grouped by family and type (a stable argsort) and each family's
fields become its struct (``assemble_batch``). A group's columns come first from
``quorum.analytics.wire_columns`` (``raw_chunk_to_batches``: the fields read from the msgpack
bytes for all the group's rows at once, with no Python object per record); if it refuses
anything in the chunk, the chunk is decoded again by ``quorum.analytics.typed_decode``
(``chunk_to_batches``: each group's fields transposed in one ``zip``, each column an Arrow array
with no Python code per value), and that falls back on the reference decoder, which names the
problem.

Rows or Arrow: yielding a tuple per record is several times slower than yielding Arrow batches
(the tuple path pays for a record object per record and for Spark's per-value conversion of every
column to Arrow), so Arrow is kept. One batch per chunk rather than one per record type: the
JVM's cost per row falls by about a fifth. docs/benchmarks.md has how such figures are taken.
"""

from __future__ import annotations

import gc
import json
import math
from collections.abc import Callable, Iterator, Sequence
from itertools import pairwise
from operator import attrgetter, itemgetter
from typing import TYPE_CHECKING, Any, Final, TypeVar

import msgspec
from pyspark.sql.datasource import InputPartition

from quorum.analytics.log_files import Frame, LogFilePartition, iter_frames
from quorum.analytics.schema import (
    FAMILIES,
    SLOT_NAMES,
    SLOTS,
    Field,
    arrow_schema,
    arrow_type,
    struct_sql,
)
from quorum.analytics.typed_decode import (
    LAYOUT_INDEX,
    LAYOUT_LIST,
    LAYOUT_RANKS,
    Chunk,
    NotFast,
    RecordLayout,
    collect_fast,
    collect_reference,
)
from quorum.analytics.wire_columns import (
    RawChunk,
    collect_raw,
    decode_raws,
    layout_columns,
    locate_records,
    reads_layout,
    uuid_texts,
)
from quorum.ids import UUID_BYTES, ZERO_UUID, Uuid
from quorum.metadata.records import BrokerEndpoint, InvalidRecordError, VoterEntry

if TYPE_CHECKING:
    import pyarrow as pa  # type: ignore[import-untyped]

__all__ = [
    "CHUNK_RECORDS_TARGET",
    "chunk_to_batches",
    "client_quota_entity_json",
    "decode_chunk",
    "read_partition",
    "voter_set_json",
]

# Records decoded and converted together into Arrow batches. Larger chunks amortise the
# per-column work. With the typed decoder alone (one object per field) 16 Ki records measured
# fastest, its passes over the objects being memory-bound beyond; the fields read straight
# from the bytes (wire_columns: numpy gathers over one buffer) gain from larger chunks: 64 Ki
# took the Spark workers from 0.80 to 0.69 us per record (scripts/bench/spark_replay.py).
CHUNK_RECORDS_TARGET: Final = 65_536
T = TypeVar("T")
# Distinct replica arrays remembered across chunks by the column converter.
_DISTINCT_VALUES_MAX: Final = 65_536
_FIELDS_OF: Final = attrgetter("fields")


class _Distinct(dict[Any, int]):
    """Distinct values of a kind of column -> their index in ``values``. Columns become
    ``values.take(indexes)``, so the per-value work is one C-level dict lookup (replica sets
    repeat a lot). The values were checked by the typed decoding. Kept across chunks and
    bounded (cleared when full, docs/conventions.md#limits). If ``nullable``, ``None`` maps to
    -1, a null.
    """

    def __init__(self, arrow_type: str, *, nullable: bool) -> None:
        super().__init__()
        self.arrow_type = arrow_type
        self._nullable = nullable
        self._values: list[Any] = []
        self._array: pa.Array | None = None
        self._reset()

    def _reset(self) -> None:
        self.clear()
        if self._nullable:
            self[None] = -1
        self._values = []
        self._array = None

    def __missing__(self, key: Any) -> int:
        index = self[key] = len(self._values)
        self._values.append(key)
        self._array = None
        return index

    def take(self, column: Sequence[Any]) -> pa.Array:
        """``column`` as an Arrow array (nulls for ``None``)."""
        import numpy as np  # noqa: PLC0415
        import pyarrow as pa  # noqa: PLC0415

        if len(self._values) >= _DISTINCT_VALUES_MAX:
            self._reset()
        indexes = np.fromiter(map(self.__getitem__, column), np.int32, len(column))
        if self._array is None:
            self._array = pa.array(self._values, arrow_type(self.arrow_type))
        nulls = indexes < 0
        if self._nullable and nulls.any():
            return self._array.take(pa.array(indexes, mask=nulls))
        return self._array.take(pa.array(indexes))


# Replica/ISR/voter arrays: elements are broker ids in [0, INT32_MAX] in every record type.
_INT_ARRAYS: Final = {
    nullable: _Distinct("ARRAY<INT>", nullable=nullable) for nullable in (False, True)
}


def _uuid_texts(column: Sequence[bytes]) -> pa.Array:
    """16-byte ids -> Kafka's base64 text (``wire_columns.uuid_texts``)."""
    import numpy as np  # noqa: PLC0415

    ids = np.frombuffer(b"".join(column), dtype=np.uint8).reshape(len(column), UUID_BYTES)
    return uuid_texts(ids)


def _endpoints(value: Sequence[tuple[str, str, int]]) -> list[dict[str, object]]:
    result = []
    for name, host, port in value:
        try:
            checked = BrokerEndpoint(name, host, port)
        except InvalidRecordError:
            raise NotFast("endpoint") from None
        result.append({"name": checked.name, "host": checked.host, "port": checked.port})
    return result


def _convert(column: Sequence[Any], spec: Field, sql: str) -> pa.Array:
    """One column of checked wire values -> one Arrow array."""
    import numpy as np  # noqa: PLC0415
    import pyarrow as pa  # noqa: PLC0415

    kind = spec.kind
    if kind == "int":
        dtype = np.int64 if sql == "BIGINT" else np.int32
        return pa.array(np.fromiter(column, dtype, len(column)))
    if kind == "int?":
        return pa.array(column, pa.int64() if sql == "BIGINT" else pa.int32())
    if kind == "bool":
        return pa.array(column, pa.bool_())
    if kind in ("str", "str?"):
        return pa.array(column, pa.string())
    if kind == "uuid":
        return _uuid_texts(column)
    if kind in ("ints", "ints?"):
        return _INT_ARRAYS[kind == "ints?"].take(column)
    if kind == "voters":
        return pa.array([_voter_set_json(value) for value in column], pa.string())
    if kind == "float":
        # msgspec takes an int for a float; the record class takes only a finite float.
        if not all(type(value) is float and math.isfinite(value) for value in column):
            raise NotFast("float")
        return pa.array(column, pa.float64())
    if kind == "entity":
        return pa.array([client_quota_entity_json(value) for value in column], pa.string())
    assert kind == "eps", kind
    return pa.array([_endpoints(value) for value in column], arrow_type(sql))


def client_quota_entity_json(entity: Sequence[Any]) -> str:
    """A ClientQuotaRecord's entity as the ``client_quota.entity`` column's JSON text:
    ``[{"entityType": "user", "entityName": "alice"}]`` (a null name: the type's default)."""
    return json.dumps(
        [{"entityType": kind, "entityName": name} for kind, name in entity],
        separators=(",", ":"),
    )


def _voter_set_json(value: Sequence[Any]) -> str:
    """A VotersRecord's voters as the ``voter_set`` column's JSON text (ids in order)."""
    voters = []
    for wire in value:
        try:
            voter = VoterEntry(
                wire[0],
                Uuid.from_bytes(wire[1]),
                tuple(BrokerEndpoint(*e) for e in wire[2]),
                wire[3],
                wire[4],
            )
        except (InvalidRecordError, ValueError, TypeError):
            raise NotFast("voter") from None
        voters.append(voter)
    return voter_set_json(voters)


def voter_set_json(voters: Sequence[VoterEntry]) -> str:
    """``[{"id": 1, "directoryId": "...", "endpoints": ["CONTROLLER://h:p"]}, ...]`` by id: the
    ``voter_set`` column (``directoryId`` left out when the voter has none)."""
    entries = []
    for voter in sorted(voters, key=lambda v: v.voter_id):
        entry: dict[str, object] = {"id": voter.voter_id}
        if voter.directory_id != ZERO_UUID:
            entry["directoryId"] = str(voter.directory_id)
        entry["endpoints"] = [f"{e.name}://{e.host}:{e.port}" for e in voter.endpoints]
        entries.append(entry)
    return json.dumps(entries, separators=(",", ":"))


_null_arrays: dict[str, pa.Array] = {}


def _nulls(sql: str, count: int) -> pa.Array:
    """``count`` nulls of the column type ``sql`` (a slice of a cached array)."""
    import pyarrow as pa  # noqa: PLC0415

    cached = _null_arrays.get(sql)
    if cached is None or len(cached) < count:
        cached = _null_arrays[sql] = pa.nulls(max(count, CHUNK_RECORDS_TARGET), arrow_type(sql))
    return cached.slice(0, count)


_kind_tables: list[pa.Array] = []


def _by_kind() -> tuple[pa.Array, pa.Array, pa.Array]:
    """control, record_type and version per layout index (taken by the kinds of a chunk)."""
    if not _kind_tables:
        import pyarrow as pa  # noqa: PLC0415

        _kind_tables.extend(
            [
                pa.array([layout.control for layout in LAYOUT_LIST], pa.bool_()),
                pa.array([layout.type_name for layout in LAYOUT_LIST], pa.string()),
                pa.array([layout.version for layout in LAYOUT_LIST], pa.int32()),
            ]
        )
    control, type_name, version = _kind_tables
    return control, type_name, version


_FAMILY_SQL: Final = tuple(struct_sql(fields) for _, fields in FAMILIES)
# Each family's fields as (slot index, SQL type), in struct order.
_FAMILY_SLOTS: Final = tuple(
    tuple((SLOT_NAMES.index(f"{family}.{name}"), sql) for name, sql in fields)
    for family, fields in FAMILIES
)
_family_types: list[pa.DataType] = []


def _family_type(family: int) -> pa.DataType:
    if not _family_types:
        _family_types.extend(arrow_type(sql) for sql in _FAMILY_SQL)
    return _family_types[family]


def chunk_to_batches(chunk: Chunk, snapshot_end_offset: int | None) -> list[pa.RecordBatch]:
    """The chunk of typed records as one Arrow batch (none if it is empty): see
    ``assemble_batch``."""
    import numpy as np  # noqa: PLC0415

    records = chunk.records
    count = len(records)
    if not count:
        return []
    kinds = np.fromiter(map(LAYOUT_INDEX.__getitem__, map(type, records)), np.int8, count)

    def group_columns(layout: RecordLayout, rows: Any) -> list[pa.Array]:
        return struct_columns(layout, _rows_of(records, rows))

    return assemble_batch(
        kinds,
        first_offsets=chunk.first_offsets,
        counts=chunk.counts,
        epochs=chunk.epochs,
        timestamps_ms=chunk.timestamps_ms,
        snapshot_end_offset=snapshot_end_offset,
        group_columns=group_columns,
    )


def raw_chunk_to_batches(chunk: RawChunk, snapshot_end_offset: int | None) -> list[pa.RecordBatch]:
    """The chunk of raw records as one Arrow batch (none if it is empty): the fields read from
    the bytes by ``wire_columns`` where it reads the record type, else decoded record by record;
    ``NotFast`` for anything ``wire_columns`` leaves to the typed decoding."""
    raws = chunk.raws
    if not raws:
        return []
    records = locate_records(chunk)

    def group_columns(layout: RecordLayout, rows: Any) -> list[pa.Array]:
        if reads_layout(layout):
            if rows is None:
                return layout_columns(layout, records.buf, records.field_starts, records.ends)
            return layout_columns(
                layout, records.buf, records.field_starts[rows], records.ends[rows]
            )
        return struct_columns(layout, decode_raws(layout, _rows_of(raws, rows)))

    return assemble_batch(
        records.kinds,
        first_offsets=chunk.first_offsets,
        counts=chunk.counts,
        epochs=chunk.epochs,
        timestamps_ms=chunk.timestamps_ms,
        snapshot_end_offset=snapshot_end_offset,
        group_columns=group_columns,
    )


def _rows_of(items: Sequence[T], rows: Any) -> Sequence[T]:
    """``items`` at the indexes ``rows`` (a numpy array; None: all of them)."""
    if rows is None:
        return items
    if len(rows) == 1:
        return [items[rows[0]]]
    return itemgetter(*rows.tolist())(items)  # type: ignore[no-any-return]


def struct_columns(layout: RecordLayout, group: Sequence[msgspec.Struct]) -> list[pa.Array]:
    """The Arrow arrays of ``layout.fields`` from typed records of that layout."""
    columns = zip(*map(_FIELDS_OF, group), strict=True)  # the group's columns, transposed
    return [
        _convert(column, spec, SLOTS[index][1])
        for spec, index, column in zip(layout.fields, layout.slot_indexes, columns, strict=True)
    ]


def assemble_batch(
    kinds: Any,
    *,
    first_offsets: Sequence[int],
    counts: Sequence[int],
    epochs: Sequence[int],
    timestamps_ms: Sequence[int],
    snapshot_end_offset: int | None,
    group_columns: Callable[[RecordLayout, Any], list[pa.Array]],
) -> list[pa.RecordBatch]:
    """One Arrow batch of the rows whose layouts (indexes into ``LAYOUT_LIST``) are ``kinds``,
    from consecutive log batches (their first offsets, record counts, epochs and timestamps),
    its rows grouped by family and, in a family, by record type. ``group_columns(layout,
    rows)`` gives the arrays of a layout's fields for the rows at the indexes ``rows`` (a
    numpy array, in order; None: every row).

    Grouped so that each family's rows are one run: its struct is built from that run alone
    (each field from its record types' pieces, nulls between them) and padded with NULL
    structs around it. A family with no row in the chunk is one slice of a cached NULL array.
    One batch per chunk rather than one per record type: the JVM pays per batch and per
    column, and a batch of 16 Ki rows costs it about a fifth less per row than the same rows
    in one batch per type (measured with a source that only replays cached batches)."""
    import numpy as np  # noqa: PLC0415
    import pyarrow as pa  # noqa: PLC0415

    count = len(kinds)
    counts_array = np.array(counts, dtype=np.int64)
    starts = np.cumsum(counts_array) - counts_array
    offsets = np.arange(count, dtype=np.int64) + np.repeat(
        np.array(first_offsets, dtype=np.int64) - starts, counts_array
    )
    epochs_array = np.repeat(np.array(epochs, dtype=np.int32), counts_array)
    timestamps_array = np.repeat(np.array(timestamps_ms, dtype=np.int64), counts_array)
    order = None
    bounds = [0, count]
    if not (kinds == kinds[0]).all():
        order = np.argsort(_layout_ranks()[kinds], kind="stable")
        kinds, offsets, epochs_array, timestamps_array = (
            kinds[order],
            offsets[order],
            epochs_array[order],
            timestamps_array[order],
        )
        bounds = [0, *(np.flatnonzero(kinds[1:] != kinds[:-1]) + 1).tolist(), count]
    # Each slot's pieces, (first row, array), from the record types that have the field; and
    # each family's run of rows [low, high).
    pieces: list[list[tuple[int, pa.Array]]] = [[] for _ in SLOTS]
    runs: list[list[int] | None] = [None] * len(FAMILIES)
    for low, high in pairwise(bounds):
        layout = LAYOUT_LIST[kinds[low]]
        if layout.family is not None:
            run = runs[layout.family]
            if run is None:
                runs[layout.family] = [low, high]
            else:
                assert run[1] == low, (run, low)  # the ranks keep a family's rows together
                run[1] = high
        if not layout.fields:
            continue
        arrays = group_columns(layout, None if order is None else order[low:high])
        for index, array in zip(layout.slot_indexes, arrays, strict=True):
            pieces[index].append((low, array))
    control, type_name, version = _by_kind()
    kind_indexes = pa.array(kinds)
    columns = [
        pa.array(offsets),  # numpy arrays of the columns' types: no conversion
        pa.array(epochs_array),
        pa.array(timestamps_array),
        control.take(kind_indexes),
        type_name.take(kind_indexes),
        version.take(kind_indexes),
        _nulls("BIGINT", count)
        if snapshot_end_offset is None
        else pa.repeat(pa.scalar(snapshot_end_offset, pa.int64()), count),
        _assemble(pieces[0], "STRING", 0, count),  # topic_id
    ]
    for family, run in enumerate(runs):
        columns.append(_family_array(family, run, pieces, count))
    return [pa.RecordBatch.from_arrays(columns, schema=arrow_schema())]


_ranks_array: list[Any] = []


def _layout_ranks() -> Any:
    """LAYOUT_RANKS as a numpy array (built once, when numpy is imported)."""
    if not _ranks_array:
        import numpy as np  # noqa: PLC0415

        _ranks_array.append(np.array(LAYOUT_RANKS, dtype=np.int8))
    return _ranks_array[0]


def _family_array(
    family: int, run: list[int] | None, pieces: list[list[tuple[int, pa.Array]]], count: int
) -> pa.Array:
    """The family's struct column of ``count`` rows: its run of rows, NULL elsewhere."""
    import pyarrow as pa  # noqa: PLC0415

    sql = _FAMILY_SQL[family]
    if run is None:
        return _nulls(sql, count)
    low, high = run
    struct_type = _family_type(family)
    children = [
        _assemble(pieces[index], field_sql, low, high - low)
        for index, field_sql in _FAMILY_SLOTS[family]
    ]
    struct = pa.StructArray.from_arrays(children, fields=list(struct_type))
    if low == 0 and high == count:
        return struct
    parts = [_nulls(sql, low)] if low else []
    parts.append(struct)
    if high < count:
        parts.append(_nulls(sql, count - high))
    return pa.concat_arrays(parts)


def _assemble(pieces: list[tuple[int, pa.Array]], sql: str, origin: int, count: int) -> pa.Array:
    """Rows ``origin`` to ``origin + count`` of one column, from its pieces (first row, array),
    nulls in between."""
    import pyarrow as pa  # noqa: PLC0415

    if len(pieces) == 1 and pieces[0][0] == origin and len(pieces[0][1]) == count:
        return pieces[0][1]
    parts = []
    position = origin
    for low, array in pieces:
        if low > position:
            parts.append(_nulls(sql, low - position))
        parts.append(array)
        position = low + len(array)
    end = origin + count
    assert position <= end, (position, end)
    if position < end:
        parts.append(_nulls(sql, end - position))
    return pa.concat_arrays(parts)


def decode_chunk(frames: Sequence[Frame], partition: LogFilePartition) -> list[pa.RecordBatch]:
    """The records of ``frames`` in the partition's offset range, as (at most) one Arrow
    batch.

    The cyclic garbage collector is paused meanwhile (see ``quorum.analytics.typed_decode``)
    and only resumed once the chunk's objects are freed: resumed with them alive, its next pass
    would walk every one of them."""
    gc_was_enabled = gc.isenabled()
    gc.disable()
    try:
        return _decode_chunk_paused(frames, partition)  # its objects are gone on return
    finally:
        if gc_was_enabled:
            gc.enable()


def _decode_chunk_paused(
    frames: Sequence[Frame], partition: LogFilePartition
) -> list[pa.RecordBatch]:
    file = partition.file
    start = 0 if file.is_checkpoint else partition.start_offset
    end = None if file.is_checkpoint else partition.end_offset
    snapshot_end = file.base_offset if file.is_checkpoint else None
    try:
        raw = RawChunk()
        for frame in frames:
            collect_raw(raw, frame, start, end)
        return raw_chunk_to_batches(raw, snapshot_end)
    except NotFast:
        pass
    try:
        chunk = Chunk()
        for frame in frames:
            collect_fast(chunk, frame, start, end, path=file.path)
        return chunk_to_batches(chunk, snapshot_end)
    except NotFast:
        pass
    # Something the types refuse: the reference decoder names the problem exactly.
    chunk = Chunk()
    for frame in frames:
        collect_reference(chunk, frame, start, end, path=file.path)
    try:
        return chunk_to_batches(chunk, snapshot_end)
    except NotFast as exc:
        raise AssertionError(
            f"{file.path}: the column conversion refused records that decode_log_batch "
            f"accepts ({exc}); this is a bug in quorum.analytics.arrow_batches"
        ) from exc


def read_partition(partition: InputPartition) -> Iterator[pa.RecordBatch]:
    """The rows of one partition as Arrow batches of ``arrow_schema()``: what ``read()``
    yields, usable without Spark (tests, benchmarks)."""
    if not isinstance(partition, LogFilePartition):
        return  # Spark's placeholder partition for an empty log
    frames: list[Frame] = []
    records = 0
    for frame in iter_frames(partition):
        frames.append(frame)
        records += frame.record_count
        if records >= CHUNK_RECORDS_TARGET:
            yield from decode_chunk(frames, partition)
            frames, records = [], 0
    if frames:
        yield from decode_chunk(frames, partition)
