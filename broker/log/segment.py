"""One segment of a partition log: ``{base_offset:020d}.log`` and its two indexes, in Kafka's
layout (docs/architecture.md#partition-logs).

The ``.log`` is record batches back to back, exactly as they are served: a batch is written
with one ``pwrite`` at the segment's end and becomes visible to readers only once it is
complete (``size`` and ``next_offset`` move after the write), so a reader never sees a torn
batch. The active segment keeps its ``.log`` open; a sealed one is opened for each read, so a
partition holds one descriptor however many segments it keeps.

``recover`` is Kafka's ``LogSegment.recover``: every batch from the start is checked (its
framing, magic 2, a base offset past the previous batch's last offset (a cleaned segment has
gaps: ``cleaner.py``), the CRC32C over the
batch), the indexes are rebuilt on the way, and the file is
cut after the last valid batch: a torn tail left by a crash is never served.
"""

from __future__ import annotations

import errno
import os
import struct
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Final

import crc32c

from broker.log.batch import (
    ATTRIBUTES_AT,
    BATCH_HEADER_BYTES,
    BATCH_LENGTH_MIN,
    LENGTH_AT,
    LOG_OVERHEAD_BYTES,
    MAGIC_V2,
    BatchHeader,
    batch_crc,
    iter_headers,
    read_header,
)
from broker.log.index import INDEX_INTERVAL_BYTES, NO_TIMESTAMP, OffsetIndex, TimeIndex
from quorum.limits import INT32_MAX, LOG_READ_CHUNK_BYTES_MAX
from quorum.storage.fsutil import fsync_fd, write_all

__all__ = ["LogSegment", "segment_name"]

LOG_SUFFIX: Final = ".log"
INDEX_SUFFIX: Final = ".index"
TIME_INDEX_SUFFIX: Final = ".timeindex"
# Kafka's file names: the base offset in 20 digits.
OFFSET_DIGITS: Final = 20
_OFFSET_AND_LENGTH: Final = struct.Struct(">qi")
_OFFSET: Final = struct.Struct(">q")
_LAST_OFFSET_DELTA: Final = struct.Struct(">i")
LAST_OFFSET_DELTA_AT: Final = 23
_LENGTH: Final = struct.Struct(">i")
_PRODUCER_ID: Final = struct.Struct(">q")
PRODUCER_ID_AT: Final = 43
# Bytes of a header needed to know a batch's offsets: up to and including lastOffsetDelta.
OFFSETS_HEADER_BYTES: Final = 27
# One read of batch headers while looking for an offset from its index entry: the index has
# an entry at least every 4 KiB, so this usually covers the whole walk in one read.
SCAN_READ_BYTES: Final = 16 * 1024


def segment_name(base_offset: int, suffix: str = LOG_SUFFIX) -> str:
    return f"{base_offset:0{OFFSET_DIGITS}d}{suffix}"


class LogSegment:
    """A segment's files and what is known of them: ``size`` and ``next_offset`` (the offset
    after its last batch), the largest timestamp and the offset of its batch, and what the
    time-based roll counts from (``rolling_timestamp_ms``: the first append's largest
    timestamp, Kafka's ``rollingBasedTimestamp``; ``created_ms`` without one)."""

    def __init__(self, directory: Path, base_offset: int, created_ms: int) -> None:
        self.directory = directory
        self.base_offset = base_offset
        self.path = directory / segment_name(base_offset)
        self.offset_index = OffsetIndex(
            directory / segment_name(base_offset, INDEX_SUFFIX), base_offset
        )
        self.time_index = TimeIndex(
            directory / segment_name(base_offset, TIME_INDEX_SUFFIX), base_offset
        )
        self.size = 0
        self.next_offset = base_offset
        self.max_timestamp = NO_TIMESTAMP
        self.max_timestamp_offset = base_offset
        self.rolling_timestamp_ms: int | None = None
        self.created_ms = created_ms
        self.bytes_since_index_entry = 0
        self._fd: int | None = None

    # ----- the active segment -------------------------------------------------------------

    def open_active(self) -> None:
        """Open the ``.log`` for appends, creating it and both (empty) index files as Kafka
        does with a new segment."""
        if self._fd is None:
            for index in (self.offset_index.path, self.time_index.path):
                os.close(os.open(index, os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC, 0o644))
            self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)

    @property
    def active(self) -> bool:
        return self._fd is not None

    def fits(self, last_offset: int) -> bool:
        """Whether an offset can be stored relative to this segment (an int32 in the index)."""
        return last_offset - self.base_offset <= INT32_MAX

    def append(self, batch: bytes | bytearray | memoryview, header: BatchHeader) -> None:
        """Write one stamped batch at the end, then index it as Kafka does. Raises ``OSError``
        (the caller undoes what was written, ``truncate_to_size``)."""
        self.append_batches(batch, (header,))

    def append_batches(
        self, batches: bytes | bytearray | memoryview, headers: Sequence[BatchHeader]
    ) -> None:
        """Write ``batches`` (whole batches back to back, whose headers are ``headers``) at the
        end with one write, then index each as ``append`` does: a follower's appends. Raises
        ``OSError`` (the caller undoes what was written)."""
        assert self._fd is not None, f"{self.path} is not the active segment"
        position = self.size
        write_all(self._fd, batches, position)
        for header in headers:
            self._indexed(position, header)
            position += header.size

    def _indexed(self, position: int, header: BatchHeader) -> None:
        """Account for the batch just written at ``position``, Kafka's ``LogSegment.append``."""
        if position == 0:
            self.rolling_timestamp_ms = header.max_timestamp
        if header.max_timestamp > self.max_timestamp:
            self.max_timestamp = header.max_timestamp
            self.max_timestamp_offset = header.last_offset
        if self.bytes_since_index_entry > INDEX_INTERVAL_BYTES:
            self.offset_index.append(header.last_offset, position)
            self.time_index.maybe_append(self.max_timestamp, self.max_timestamp_offset)
            self.bytes_since_index_entry = 0
        self.bytes_since_index_entry += header.size
        self.size = position + header.size
        self.next_offset = header.next_offset

    def truncate_to_size(self, size: int, index_entries: tuple[int, int]) -> None:
        """Undo a failed append: the ``.log`` and both indexes back to what they held."""
        assert self._fd is not None
        os.ftruncate(self._fd, size)
        for index, entries in zip((self.offset_index, self.time_index), index_entries, strict=True):
            if index.entries != entries:
                fd = os.open(index.path, os.O_RDWR | os.O_CLOEXEC)
                try:
                    os.ftruncate(fd, entries * index.entry.size)
                finally:
                    os.close(fd)
                index.entries = entries
                index.load(active=True)

    def truncate_to(self, offset: int) -> int:
        """Kafka's ``LogSegment.truncateTo``: remove every batch holding ``offset`` or a later
        one (a batch holding it and earlier ones goes whole). The indexes are cut first and
        the ``.log`` then (fsynced, all three), so a crash between leaves indexes that are a
        prefix of the ``.log``. The largest timestamp is found again as Kafka's
        ``loadLargestTimestamp`` does: the time index's last entry, then the batches after
        it. The bytes removed. Raises ``OSError``."""
        found = self.find(offset)
        if found is None:
            return 0
        position = found[0]
        (new_end,) = _OFFSET.unpack(self._pread(_OFFSET.size, position))
        self.offset_index.truncate_from_position(position)
        self.time_index.truncate_from_offset(new_end)
        fd = self._fd if self._fd is not None else os.open(self.path, os.O_RDWR | os.O_CLOEXEC)
        try:
            os.ftruncate(fd, position)
            fsync_fd(fd)
        finally:
            if fd != self._fd:
                os.close(fd)
        removed = self.size - position
        self.size = position
        self.next_offset = new_end
        self.max_timestamp, self.max_timestamp_offset = self.time_index.last_timestamp()
        _, start = self.offset_index.lookup(self.max_timestamp_offset)
        for _, header in self.batches_from(start):
            if header.max_timestamp > self.max_timestamp:
                self.max_timestamp, self.max_timestamp_offset = (
                    header.max_timestamp,
                    header.last_offset,
                )
        self.rolling_timestamp_ms = (
            None if position == 0 else read_header(self._pread(BATCH_HEADER_BYTES, 0)).max_timestamp
        )
        self.bytes_since_index_entry = position - self.offset_index.last()[1]
        return removed

    def seal(self) -> None:
        """No more appends: the time index gets the largest timestamp (Kafka's
        ``onBecomeInactiveSegment``), every file is flushed, and the ``.log`` is closed."""
        self.time_index.maybe_append(self.max_timestamp, self.max_timestamp_offset)
        self.flush()
        self.offset_index.seal()
        self.time_index.seal()
        self.close()

    def flush(self) -> None:
        """fsync the ``.log`` (the indexes are flushed when sealed: they are rebuilt anyway)."""
        if self._fd is not None:
            fsync_fd(self._fd)
        else:
            fd = os.open(self.path, os.O_RDONLY | os.O_CLOEXEC)
            try:
                fsync_fd(fd)
            finally:
                os.close(fd)

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    # ----- reads ----------------------------------------------------------------------------

    def _pread(self, size: int, position: int) -> bytes:
        if self._fd is not None:
            return os.pread(self._fd, size, position)
        fd = os.open(self.path, os.O_RDONLY | os.O_CLOEXEC)
        try:
            return os.pread(fd, size, position)
        finally:
            os.close(fd)

    def find(self, offset: int) -> tuple[int, int] | None:
        """(position, size) of the batch holding ``offset`` (the first whose last offset is at
        or past it), from the offset index's floor entry forward; None past the end."""
        if offset >= self.next_offset:
            return None
        _, position = self.offset_index.lookup(offset)
        while position < self.size:
            chunk = self._pread(min(SCAN_READ_BYTES, self.size - position), position)
            at = 0
            while at + OFFSETS_HEADER_BYTES <= len(chunk):
                base, length = _OFFSET_AND_LENGTH.unpack_from(chunk, at)
                (delta,) = _LAST_OFFSET_DELTA.unpack_from(chunk, at + LAST_OFFSET_DELTA_AT)
                size = LOG_OVERHEAD_BYTES + length
                if base + delta >= offset:
                    return position + at, size
                at += size
            if at == 0:
                raise AssertionError(f"{self.path}: no batch header at {position}")
            position += at
        return None

    def read(self, position: int, max_bytes: int, min_one: bool) -> bytes:
        """Whole batches from ``position`` (a batch's start), at most ``max_bytes`` of them, or
        the first batch alone when it is larger and ``min_one`` (KIP-74)."""
        available = self.size - position
        data = self._pread(min(max_bytes, available), position)
        end = 0
        for at, _, size in iter_headers(data):
            end = at + size
        if end == 0 and min_one and available >= LOG_OVERHEAD_BYTES:
            (length,) = struct.unpack_from(">i", self._pread(LOG_OVERHEAD_BYTES, position), 8)
            return self._pread(min(LOG_OVERHEAD_BYTES + length, available), position)
        return data if end == len(data) else data[:end]

    def batches_from(self, position: int) -> list[tuple[int, BatchHeader]]:
        """(position, header) of every batch from ``position`` to the end (headers only)."""
        found = []
        while position + BATCH_HEADER_BYTES <= self.size:
            header = read_header(self._pread(BATCH_HEADER_BYTES, position))
            found.append((position, header))
            position += header.size
        return found

    def producer_headers_from(self, position: int) -> Iterator[BatchHeader]:
        """The header of every batch with a producer id (0 and above) from ``position`` (a
        batch's start) to the end, read in chunks of ``SCAN_READ_BYTES`` through one
        descriptor: rebuilding producer state walks every header of a segment, which may hold
        millions of small batches, most often without a producer id (those cost two field
        reads each)."""
        fd = self._fd if self._fd is not None else os.open(self.path, os.O_RDONLY | os.O_CLOEXEC)
        try:
            end = self.size
            while position + BATCH_HEADER_BYTES <= end:
                chunk = os.pread(fd, min(SCAN_READ_BYTES, end - position), position)
                at = 0
                while at + BATCH_HEADER_BYTES <= len(chunk):
                    (length,) = _LENGTH.unpack_from(chunk, at + LENGTH_AT)
                    (producer_id,) = _PRODUCER_ID.unpack_from(chunk, at + PRODUCER_ID_AT)
                    if producer_id >= 0:
                        yield read_header(chunk, at)
                    at += LOG_OVERHEAD_BYTES + length
                if at == 0:  # a short read: the file is shorter than its recorded size
                    return
                position += at
        finally:
            if fd != self._fd:
                os.close(fd)

    def read_batch(self, position: int, size: int) -> bytes:
        return self._pread(size, position)

    # ----- opening and recovery --------------------------------------------------------------

    def load_sealed(self, next_segment_base: int | None) -> str | None:
        """Trust a segment below the recovery point: its size from the file, its indexes from
        theirs, its end from the next segment (or, for the last, by walking the batch headers
        from the last index entry). Why it cannot be trusted, or None."""
        self.size = os.stat(self.path).st_size
        for index in (self.offset_index, self.time_index):
            problem = index.load(active=False)
            if problem is not None:
                return problem
        last_offset, last_position = self.offset_index.last()
        if last_position > self.size or last_offset < self.base_offset:
            return f"{self.offset_index.path.name} points past {self.path.name}"
        self.max_timestamp, self.max_timestamp_offset = self.time_index.last_timestamp()
        if next_segment_base is not None:
            self.next_offset = next_segment_base
            return None
        position = last_position
        self.next_offset = self.base_offset
        while position < self.size:
            header = self._pread(OFFSETS_HEADER_BYTES, position)
            if len(header) < OFFSETS_HEADER_BYTES:
                return f"{self.path.name} ends inside a batch header at {position}"
            base, length = _OFFSET_AND_LENGTH.unpack_from(header, 0)
            (delta,) = _LAST_OFFSET_DELTA.unpack_from(header, LAST_OFFSET_DELTA_AT)
            self.next_offset = base + delta + 1
            position += LOG_OVERHEAD_BYTES + length
        return None if position == self.size else f"{self.path.name} ends inside a batch"

    def recover(self, on_epoch: Callable[[int, int], None], last_epoch: int) -> int:
        """Check every batch from the start, rebuild both indexes, cut the file after the last
        valid batch; the bytes cut. ``on_epoch(epoch, start offset)`` is called for each batch
        whose leader epoch is larger than the last one seen (from ``last_epoch``), as Kafka
        rebuilds its leader-epoch cache."""
        self.offset_index.truncate()
        self.time_index.truncate()
        file_size = os.stat(self.path).st_size
        fd = os.open(self.path, os.O_RDWR | os.O_CLOEXEC) if self._fd is None else self._fd
        try:
            valid = self._recover_batches(fd, file_size, on_epoch, last_epoch)
            if valid < file_size:
                os.ftruncate(fd, valid)
                fsync_fd(fd)
        finally:
            if fd != self._fd:
                os.close(fd)
        self.size = valid
        self.time_index.maybe_append(self.max_timestamp, self.max_timestamp_offset)
        return file_size - valid

    def _recover_batches(
        self, fd: int, file_size: int, on_epoch: Callable[[int, int], None], last_epoch: int
    ) -> int:
        valid = 0
        last_entry = 0
        expected = self.base_offset
        self.max_timestamp, self.max_timestamp_offset = NO_TIMESTAMP, self.base_offset
        while valid + BATCH_HEADER_BYTES <= file_size:
            header = read_header(os.pread(fd, BATCH_HEADER_BYTES, valid))
            size = header.size
            if (
                header.batch_length < BATCH_LENGTH_MIN
                or header.magic != MAGIC_V2
                or header.base_offset < expected
                or header.last_offset_delta < 0
                or not self.fits(header.last_offset)
                or valid + size > file_size
            ):
                break
            if size <= LOG_READ_CHUNK_BYTES_MAX:
                crc = batch_crc(os.pread(fd, size, valid), 0, size)
            else:
                crc = _chunked_crc(fd, valid, size)
            if crc != header.crc:
                break
            if header.max_timestamp > self.max_timestamp:
                self.max_timestamp, self.max_timestamp_offset = (
                    header.max_timestamp,
                    header.last_offset,
                )
            if valid - last_entry > INDEX_INTERVAL_BYTES:
                self.offset_index.append(header.last_offset, valid)
                self.time_index.maybe_append(self.max_timestamp, self.max_timestamp_offset)
                last_entry = valid
            if header.partition_leader_epoch > last_epoch:
                last_epoch = header.partition_leader_epoch
                on_epoch(last_epoch, header.base_offset)
            if valid == 0:
                self.rolling_timestamp_ms = header.max_timestamp
            valid += size
            expected = header.next_offset
        self.next_offset = expected
        self.bytes_since_index_entry = valid - last_entry
        return valid

    def delete_files(self) -> None:
        """Remove the segment's three files (missing ones are fine)."""
        self.close()
        for path in (self.path, self.offset_index.path, self.time_index.path):
            try:
                os.unlink(path)
            except OSError as exc:
                if exc.errno != errno.ENOENT:
                    raise


def _chunked_crc(fd: int, position: int, size: int) -> int:
    """The CRC32C of a batch larger than one read, in bounded reads."""
    value = 0
    start = position + ATTRIBUTES_AT
    end = position + size
    while start < end:
        chunk = os.pread(fd, min(LOG_READ_CHUNK_BYTES_MAX, end - start), start)
        if not chunk:
            return -1
        value = crc32c.crc32c(chunk, value)
        start += len(chunk)
    return value
