"""The frame format of the metadata log, and the one read-only reader of framed files.

Frame of one batch (big-endian), in segments (``NNNN.log``) and snapshots (``.checkpoint``)::

    magic u8 (0x4D) | frame_length u32 | crc32c u32 | base_offset i64 | epoch i32
    | record_count i32 | data

``frame_length`` counts the bytes after itself; the CRC32C covers everything after the CRC
field. ``data`` is the batch as the record codec encoded it; storage never decodes it.

Index entry of a segment's ``NNNN.index`` (big-endian, 12 bytes, ``INDEX_ENTRY``):
``offset i64 | position u32``, the base offset of a batch and the byte position of its frame.

A frame is *valid* when it is whole, its CRC32C matches and its fields are ones our writer can
produce (``base_offset >= 0``, ``epoch >= 0``, ``record_count >= 1``, as ``LogBatch`` requires).

The torn-tail rule. Every reader of a segment (recovery in ``SegmentedLog.open``, ``log
dump``, ``broker pending-deletions``, the Spark source) walks it with ``read_segment`` or
``read_frames``, which decide at the first damaged frame (bad magic, impossible length,
incomplete, CRC mismatch) whether it is the tail:

    The damage is a torn tail if and only if no valid frame exists anywhere after the damaged
    position: neither later in the same segment (scanning for the magic byte) nor in any
    later segment.

A torn write (power loss mid-write, a partly written sector, zero-filled blocks the file system
allocated but never wrote) leaves only damaged bytes after the last good frame, because the log
is append-only and truncation shortens the file before anything is written again. Bytes written
*after* the damaged frame that still carry a valid CRC prove that the damaged frame was complete
once, so it was corrupted later. The reader then raises ``CorruptFrameError`` naming the file
and the byte offset of the damage; so it does for a CRC-valid frame with impossible fields,
wherever it is (a torn write cannot produce a valid CRC). Otherwise it ends with a ``Tail``
that says where the whole frames end and why. Recovery truncates that tail; the read-only tools
stop there (on a live log it is usually a write in progress).

The scan for a later valid frame is bounded (``limits.FRAME_SCAN_CANDIDATES_MAX`` candidate
positions and ``limits.FRAME_SCAN_CRC_BYTES_MAX`` checksummed bytes per scan), so hostile bytes
(megabytes of magic bytes and plausible lengths) cannot make a reader quadratic. A scan that
reaches a bound has not ruled a valid frame out; the damage is then corruption, the answer that
never drops data.

A snapshot is written whole before it is renamed into place, so any damage in one is corruption,
never a tail: ``read_segment(..., complete=True)`` and ``read_stream_frames`` read such files.
"""

from __future__ import annotations

import re
import struct
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, Final, NamedTuple

import crc32c

from quorum import limits
from quorum.metadata.batch import LogBatch
from quorum.storage.errors import StorageError

__all__ = [
    "FRAME_HEADER",
    "FRAME_HEADER_BYTES",
    "FRAME_LENGTH_MAX",
    "FRAME_LENGTH_MIN",
    "FRAME_MAGIC",
    "FRAME_PREFIX",
    "INDEX_ENTRY",
    "CorruptFrameError",
    "Frame",
    "FrameHeader",
    "FrameScanLimitError",
    "FrameView",
    "Tail",
    "check_frame",
    "encode_frame",
    "find_valid_frame",
    "may_hold_valid_frame",
    "read_frames",
    "read_segment",
    "read_stream_frames",
    "segment_files",
]

FRAME_MAGIC: Final = 0x4D
FRAME_HEADER: Final = struct.Struct(
    ">BIIqii"
)  # magic, frame_length, crc, base_offset, epoch, count
FRAME_PREFIX: Final = struct.Struct(">BI")  # magic, frame_length
FRAME_HEADER_BYTES: Final = FRAME_HEADER.size  # 25
FRAME_LENGTH_MIN: Final = FRAME_HEADER_BYTES - FRAME_PREFIX.size  # a frame with empty data
# Bound on frame_length (the bytes of one frame after its length field). Checked before the
# length is used for anything, so a corrupted length such as 0xFFFFFFFF never allocates.
# RaftNode.propose caps the encoded records of one batch at limits.BATCH_BYTES_MAX (8 MiB, Kafka's
# MAX_BATCH_SIZE_BYTES); encode_batch wraps them in an envelope of well under 100 bytes and the
# frame adds 20. 64 KiB of headroom keeps every legal batch while still refusing a length bomb.
FRAME_LENGTH_MAX: Final = limits.BATCH_BYTES_MAX + 64 * 1024
INDEX_ENTRY: Final = struct.Struct(">qI")  # base offset, byte position of its frame

_CRC_COVERED: Final = struct.Struct(">qii")  # base_offset, epoch, record_count (then data)
_CRC_START: Final = FRAME_PREFIX.size + 4  # the CRC covers frame[_CRC_START:]
_SEGMENT_FILE_NAME: Final = re.compile(r"^\d{20}\.log$")
_NOT_TORN: Final = "the log was corrupted after it was written (this is not a torn write)"

assert FRAME_LENGTH_MIN == 20
assert FRAME_LENGTH_MAX < 1 << 24

# A position can start a valid frame only if these bytes allow it: the magic, a frame_length
# whose top byte is 0 and second byte at most FRAME_LENGTH_MAX's, and non-negative base_offset,
# epoch and record_count (their top bytes below 0x80), with a whole header. A regular
# expression that starts with a literal finds such positions in C, so bytes that cannot start a
# frame (a file of magic bytes, zeros, random data) cost no Python code per byte.
_CANDIDATE: Final = re.compile(
    b"%s\\x00[\\x00-%s].{6}[\\x00-\\x7f].{7}[\\x00-\\x7f].{3}[\\x00-\\x7f].{3}"
    % (re.escape(bytes((FRAME_MAGIC,))), re.escape(bytes((FRAME_LENGTH_MAX >> 16,)))),
    re.DOTALL,
)


class CorruptFrameError(StorageError):
    """Damage in a framed file that is not a torn tail (Kafka's ``CorruptRecordException``).

    ``path`` names the file and ``byte_offset`` the position of the damaged frame; ``problem``
    says what is wrong. Raised by the readers of this module; each tool reports it its own way
    (recovery as ``CorruptLogError``, ``log dump`` as ``LogDumpError``, Spark as
    ``LogReadError``, snapshots as ``CorruptSnapshotError``).
    """

    def __init__(self, path: Path, byte_offset: int, problem: str) -> None:
        self.path = path
        self.byte_offset = byte_offset
        self.problem = problem
        super().__init__(f"{path} at byte {byte_offset}: {problem}")

    def __reduce__(self) -> tuple[Any, ...]:  # crosses process boundaries inside Spark
        return (type(self), (self.path, self.byte_offset, self.problem))


class FrameScanLimitError(Exception):
    """``find_valid_frame`` reached a bound of ``quorum.limits`` before it could decide."""

    def __init__(self, position: int, limit: str) -> None:
        self.position = position
        self.limit = limit
        super().__init__(f"the scan stopped at byte {position}: {limit} reached")


@dataclass(frozen=True, slots=True)
class FrameHeader:
    frame_bytes: int  # the whole frame on disk, prefix included
    base_offset: int
    epoch: int
    record_count: int


class FrameView(NamedTuple):  # a tuple: one per batch, built fast
    """A valid frame of ``read_segment``: its fields and its data, a view into the contents."""

    position: int  # in the file
    base_offset: int
    epoch: int
    record_count: int
    frame_bytes: int
    data: memoryview


@dataclass(frozen=True, slots=True)
class Frame:
    """One valid batch frame at byte ``position`` of segment ``path``."""

    path: Path
    position: int
    batch: LogBatch


@dataclass(frozen=True, slots=True)
class Tail:
    """Where a segment's whole frames end: ``bytes_left`` bytes that are not a whole valid frame
    and are followed by none (a write in progress, or a torn tail)."""

    path: Path
    position: int
    bytes_left: int
    problem: str


def encode_frame(batch: LogBatch) -> bytes:
    """The bytes of ``batch`` as one frame on disk."""
    covered_header = _CRC_COVERED.pack(batch.base_offset, batch.epoch, batch.record_count)
    crc = crc32c.crc32c(batch.data, crc32c.crc32c(covered_header))
    frame_length = 4 + len(covered_header) + len(batch.data)
    prefix = FRAME_PREFIX.pack(FRAME_MAGIC, frame_length)
    return b"".join((prefix, crc.to_bytes(4, "big"), covered_header, batch.data))


def check_frame(buf: bytes, pos: int) -> FrameHeader | str:
    """The header of the frame at ``buf[pos:]`` if it is whole with a matching CRC, else why not.

    Only checks what a torn write can break; ``_implausible`` judges the fields of a CRC-valid
    frame.
    """
    available = len(buf) - pos
    if available < FRAME_PREFIX.size:
        return f"incomplete frame header ({available} bytes)"
    magic, frame_length = FRAME_PREFIX.unpack_from(buf, pos)
    if magic != FRAME_MAGIC:
        return f"bad magic byte 0x{magic:02x}"
    if frame_length < FRAME_LENGTH_MIN or frame_length > FRAME_LENGTH_MAX:
        return f"impossible frame length {frame_length}"
    frame_bytes = FRAME_PREFIX.size + frame_length
    if frame_bytes > available:
        return f"incomplete frame ({available} of {frame_bytes} bytes present)"
    _, _, crc_stored, base_offset, epoch, record_count = FRAME_HEADER.unpack_from(buf, pos)
    crc_computed = crc32c.crc32c(memoryview(buf)[pos + _CRC_START : pos + frame_bytes])
    if crc_computed != crc_stored:
        return f"CRC32C mismatch (stored 0x{crc_stored:08x}, computed 0x{crc_computed:08x})"
    return FrameHeader(frame_bytes, base_offset, epoch, record_count)


def _implausible(header: FrameHeader) -> str | None:
    """Why a CRC-valid frame holds fields our writer never produces, or None."""
    if header.record_count < 1 or header.base_offset < 0 or header.epoch < 0:
        return (
            f"a batch frame with base offset {header.base_offset}, epoch {header.epoch} and "
            f"record count {header.record_count} (corrupt)"
        )
    return None


def find_valid_frame(buf: bytes, start: int) -> int | None:
    """The position of the first valid frame at or after ``start``, or None if there is none.

    Raises ``FrameScanLimitError`` when the scan reaches ``limits.FRAME_SCAN_CANDIDATES_MAX``
    candidate positions or ``limits.FRAME_SCAN_CRC_BYTES_MAX`` checksummed bytes first: it then
    has not ruled a valid frame out. Candidates are found by ``_CANDIDATE`` and checked for
    length and record count before their CRC is computed.
    """
    candidates = 0
    crc_bytes = 0
    search_from = start
    # Each pass moves past one candidate (the search runs in C); the next search starts one byte
    # after it, as candidates may overlap.
    while (match := _CANDIDATE.search(buf, search_from)) is not None:
        pos = match.start()
        search_from = pos + 1
        candidates += 1
        if candidates > limits.FRAME_SCAN_CANDIDATES_MAX:
            raise FrameScanLimitError(
                pos, f"FRAME_SCAN_CANDIDATES_MAX={limits.FRAME_SCAN_CANDIDATES_MAX}"
            )
        _, frame_length, _, _, _, record_count = FRAME_HEADER.unpack_from(buf, pos)
        fits = pos + FRAME_PREFIX.size + frame_length <= len(buf)
        if not (FRAME_LENGTH_MIN <= frame_length <= FRAME_LENGTH_MAX and fits and record_count):
            continue  # check_frame would refuse it without a CRC
        crc_bytes += frame_length - 4
        if crc_bytes > limits.FRAME_SCAN_CRC_BYTES_MAX:
            raise FrameScanLimitError(
                pos, f"FRAME_SCAN_CRC_BYTES_MAX={limits.FRAME_SCAN_CRC_BYTES_MAX}"
            )
        if isinstance(check_frame(buf, pos), FrameHeader):
            return pos
    return None


def may_hold_valid_frame(buf: bytes) -> bool:
    """Whether ``buf`` may hold a valid frame: one was found, or a bounded scan could not rule
    one out (see ``find_valid_frame``)."""
    try:
        return find_valid_frame(buf, 0) is not None
    except FrameScanLimitError:
        return True


def segment_files(directory: Path) -> list[Path]:
    """The segment files (20-digit base offset + ``.log``) of ``directory`` in offset order."""
    return sorted(
        p for p in directory.iterdir() if _SEGMENT_FILE_NAME.match(p.name) and p.is_file()
    )


def read_segment(
    path: Path,
    contents: bytes,
    later_segments: Iterable[tuple[Path, bytes]] = (),
    *,
    origin: int = 0,
    stop: int | None = None,
    read_rest: Callable[[], bytes | None] | None = None,
    complete: bool = False,
) -> Iterator[FrameView | Tail]:
    """Every valid frame of segment ``path`` from byte ``origin``, then a ``Tail`` if the walk
    ends in damage that no valid frame follows (the torn-tail rule of the module docstring).

    ``contents`` are the file's bytes from ``origin`` (a frame boundary). ``later_segments``
    are the ``(path, contents)`` of the segments after it in the log, taken from the iterable
    only when damage must be judged (it may read them lazily). The byte-range variant: with
    ``stop``, the walk ends before a frame that starts at or after ``stop``; with
    ``read_rest``, ``contents`` may be a prefix of the file, and ``read_rest()`` returns the
    contents from ``origin`` to the file's end (None: there is no more) when the walk needs
    bytes past the prefix. With ``complete`` (a snapshot), damage is never a tail.

    The walk ends quietly when the contents end at a frame boundary. Raises
    ``CorruptFrameError`` for damage that is not a torn tail and for a CRC-valid frame with
    impossible fields.
    """
    view = memoryview(contents)
    position = origin  # in the file; contents[0] is at origin
    # Each pass yields one frame (>= FRAME_HEADER_BYTES) and moves past it, reads the rest of
    # the file (at most once), or ends the walk.
    while stop is None or position < stop:
        local = position - origin
        header = check_frame(contents, local) if local < len(contents) else None
        if not isinstance(header, FrameHeader):
            rest = read_rest() if read_rest is not None else None
            read_rest = None
            if rest is not None:
                contents, view = rest, memoryview(rest)
                continue  # the frame (or what follows the damage) was beyond the prefix
            if header is None:
                return
            yield _tail(
                path,
                contents,
                local,
                origin=origin,
                problem=header,
                later_segments=later_segments,
                complete=complete,
            )
            return
        problem = _implausible(header)
        if problem is not None:
            raise CorruptFrameError(path, position, problem)
        data = view[local + FRAME_HEADER_BYTES : local + header.frame_bytes]
        yield FrameView(
            position,
            header.base_offset,
            header.epoch,
            header.record_count,
            header.frame_bytes,
            data,
        )
        position += header.frame_bytes


def _tail(
    path: Path,
    contents: bytes,
    local: int,
    *,
    origin: int,
    problem: str,
    later_segments: Iterable[tuple[Path, bytes]],
    complete: bool,
) -> Tail:
    """The ``Tail`` at ``contents[local]`` (file position ``origin + local``) if the damage
    there is a torn tail, else ``CorruptFrameError``."""
    position = origin + local
    if complete:
        raise CorruptFrameError(
            path,
            position,
            f"{problem}: a checkpoint is written whole before it is renamed into place, so "
            "this is corruption",
        )
    try:
        later_local = find_valid_frame(contents, local + 1)
    except FrameScanLimitError as exc:
        raise CorruptFrameError(path, position, _undecided(problem, path, exc)) from None
    if later_local is not None:
        raise CorruptFrameError(
            path,
            position,
            f"{problem}, yet a valid batch follows at byte {origin + later_local}: {_NOT_TORN}",
        )
    for later_path, later_contents in later_segments:
        try:
            later_position = find_valid_frame(later_contents, 0)
        except FrameScanLimitError as exc:
            raise CorruptFrameError(path, position, _undecided(problem, later_path, exc)) from None
        if later_position is not None:
            raise CorruptFrameError(
                path,
                position,
                f"{problem}, yet the later segment {later_path} holds a valid batch at byte "
                f"{later_position}: {_NOT_TORN}",
            )
    return Tail(path, position, len(contents) - local, problem)


def _undecided(problem: str, scanned: Path, exc: FrameScanLimitError) -> str:
    return (
        f"{problem}, and the search of {scanned} for a valid batch after it stopped at byte "
        f"{exc.position} ({exc.limit} reached) without ruling one out: taken as corruption, "
        "not a torn write"
    )


def read_frames(segments: Sequence[Path]) -> Iterator[Frame | Tail]:
    """Every valid frame of ``segments`` (one log, in offset order, e.g. ``segment_files``),
    then a ``Tail`` if the walk ends in damage that no valid frame follows. Raises
    ``CorruptFrameError`` for any other damage. Read-only; each segment is read once, as it is
    at that moment."""
    for index, path in enumerate(segments):
        later = ((p, p.read_bytes()) for p in segments[index + 1 :])
        for item in read_segment(path, path.read_bytes(), later):
            if isinstance(item, Tail):
                yield item
                return
            batch = LogBatch(item.base_offset, item.epoch, item.record_count, bytes(item.data))
            yield Frame(path, item.position, batch)


def read_stream_frames(path: Path, file: IO[bytes]) -> Iterator[tuple[int, LogBatch]]:
    """``(byte position, batch)`` of every frame of the complete file ``path`` open as ``file``
    (a snapshot), reading one frame at a time. Any damage raises ``CorruptFrameError``."""
    position = 0
    # Each pass consumes one whole frame (at least FRAME_HEADER_BYTES) or ends the file.
    while True:
        prefix = file.read(FRAME_PREFIX.size)
        if not prefix:
            return
        frame = prefix
        if len(prefix) == FRAME_PREFIX.size:
            magic, frame_length = FRAME_PREFIX.unpack(prefix)
            # A length is used to read only once check_frame would accept it.
            if magic == FRAME_MAGIC and FRAME_LENGTH_MIN <= frame_length <= FRAME_LENGTH_MAX:
                frame = prefix + file.read(frame_length)
        header = check_frame(frame, 0)
        if isinstance(header, str):
            raise CorruptFrameError(path, position, header)
        problem = _implausible(header)
        if problem is not None:
            raise CorruptFrameError(path, position, problem)
        batch = LogBatch(
            header.base_offset, header.epoch, header.record_count, frame[FRAME_HEADER_BYTES:]
        )
        yield position, batch
        position += header.frame_bytes
