"""A segment's two sparse indexes, in Kafka's byte formats (``OffsetIndex``, ``TimeIndex``).

- ``{base_offset:020d}.index``: 8-byte entries, a relative offset (int32, the offset minus
  the segment's base offset) and the byte position of a batch in the ``.log`` (int32);
- ``{base_offset:020d}.timeindex``: 12-byte entries, a timestamp (int64) and a relative
  offset (int32), both non-decreasing: "the batches up to this offset hold no timestamp larger
  than this one".

Entries are added as Kafka adds them (``LogSegment.append``): when more than
``index.interval.bytes`` (4,096) were appended since the last entry, the offset index gets the
appended batch's last offset and start position, the time index the largest timestamp so far
and its batch's last offset if that timestamp grew. Files hold exactly their entries (Kafka
preallocates ``segment.index.bytes`` for the active segment and trims it on roll; Kafka's tools
read both). A segment is rolled before either file would pass ``SEGMENT_INDEX_BYTES_MAX``.

The active segment keeps its entries in memory as well; a sealed segment's are looked up
in the file (a binary search of a few ``pread``s), so memory does not grow with the data kept.
Index files are derived data: a crash may leave them short or long, and the log's recovery
rebuilds the indexes of every segment it validates (``LogSegment.recover``).
"""

from __future__ import annotations

import os
import struct
from array import array
from collections.abc import Callable
from pathlib import Path
from typing import Final

from quorum.limits import SEGMENT_INDEX_BYTES_MAX
from quorum.storage.fsutil import fsync_fd, write_all

__all__ = ["INDEX_INTERVAL_BYTES", "OffsetIndex", "TimeIndex"]

# Kafka's index.interval.bytes default: an index entry at least every 4 KiB of batches.
INDEX_INTERVAL_BYTES: Final = 4096
NO_TIMESTAMP: Final = -1

_OFFSET_ENTRY: Final = struct.Struct(">ii")
_TIME_ENTRY: Final = struct.Struct(">qi")
_OPEN_FLAGS: Final = os.O_RDWR | os.O_CREAT | os.O_CLOEXEC


class _Index:
    """Entries of two ints in a file: kept in memory while the segment is active (``_keys``,
    ``_values``), looked up in the file once it is sealed."""

    entry: struct.Struct
    key_code: str

    def __init__(self, path: Path) -> None:
        self.path = path
        self.entries = 0
        self._keys: array[int] | None = array(self.key_code)
        self._values: array[int] | None = array("i")

    @property
    def full(self) -> bool:
        return self.full_after(0)

    def full_after(self, more: int) -> bool:
        """Whether one entry more than ``more`` added entries would pass the bound."""
        return (self.entries + more + 1) * self.entry.size > SEGMENT_INDEX_BYTES_MAX

    def load(self, *, active: bool) -> str | None:
        """Read the file's entries (all of them for the active segment, only their count for
        a sealed one); why it cannot be trusted (a size that is not a multiple of the entry,
        keys or values that decrease), or None."""
        try:
            data = self.path.read_bytes() if active else b""
            size = len(data) if active else os.stat(self.path).st_size
        except FileNotFoundError:
            return f"{self.path.name} is missing"
        if size % self.entry.size or size > SEGMENT_INDEX_BYTES_MAX:
            return f"{self.path.name} is {size} bytes, not a whole number of entries"
        self.entries = size // self.entry.size
        if not active:
            self._keys = self._values = None
            return None
        keys, values = array(self.key_code), array("i")
        last = (-(2**63), -1)
        for key, value in self.entry.iter_unpack(data):
            if (key, value) < last or value < last[1]:
                return f"{self.path.name} has entries out of order at {len(keys)}"
            last = (key, value)
            keys.append(key)
            values.append(value)
        self._keys, self._values = keys, values
        return None

    def _append(self, key: int, value: int) -> None:
        fd = os.open(self.path, _OPEN_FLAGS, 0o644)
        try:
            write_all(fd, self.entry.pack(key, value), self.entries * self.entry.size)
        finally:
            os.close(fd)
        self.entries += 1
        if self._keys is not None and self._values is not None:
            self._keys.append(key)
            self._values.append(value)

    def _last(self) -> tuple[int, int] | None:
        if not self.entries:
            return None
        return self._entry(self.entries - 1)

    def _entry(self, index: int) -> tuple[int, int]:
        if self._keys is not None and self._values is not None:
            return self._keys[index], self._values[index]
        fd = os.open(self.path, os.O_RDONLY | os.O_CLOEXEC)
        try:
            data = os.pread(fd, self.entry.size, index * self.entry.size)
        finally:
            os.close(fd)
        key, value = self.entry.unpack(data)
        return key, value

    def _floor(self, key: int) -> tuple[int, int] | None:
        """The last entry whose key is <= ``key`` (a binary search), or None."""
        low, high = 0, self.entries - 1
        found = None
        while low <= high:
            middle = (low + high) // 2
            entry = self._entry(middle)
            if entry[0] <= key:
                found = entry
                low = middle + 1
            else:
                high = middle - 1
        return found

    def _kept(self, kept: Callable[[int, int], bool]) -> int:
        """How many entries from the first are ``kept`` (a binary search: what is kept is a
        prefix, keys and values being non-decreasing)."""
        low, high = 0, self.entries
        while low < high:
            middle = (low + high) // 2
            if kept(*self._entry(middle)):
                low = middle + 1
            else:
                high = middle
        return low

    def _truncate_to_entries(self, count: int) -> None:
        """Keep the first ``count`` entries, durably (the log's truncation cuts the indexes
        before the ``.log``, so a crash leaves them a prefix of what the ``.log`` holds)."""
        if count >= self.entries:
            return
        fd = os.open(self.path, _OPEN_FLAGS, 0o644)
        try:
            os.ftruncate(fd, count * self.entry.size)
            fsync_fd(fd)
        finally:
            os.close(fd)
        self.entries = count
        if self._keys is not None and self._values is not None:
            del self._keys[count:]
            del self._values[count:]

    def truncate(self) -> None:
        """Empty the index (before it is rebuilt) and make that durable with the rebuild."""
        fd = os.open(self.path, _OPEN_FLAGS, 0o644)
        try:
            os.ftruncate(fd, 0)
        finally:
            os.close(fd)
        self.entries = 0
        self._keys = array(self.key_code)
        self._values = array("i")

    def seal(self) -> None:
        """The segment is no longer active: flush the file and drop the entries from memory."""
        self.flush()
        self._keys = self._values = None

    def flush(self) -> None:
        fd = os.open(self.path, _OPEN_FLAGS, 0o644)
        try:
            fsync_fd(fd)
        finally:
            os.close(fd)


class OffsetIndex(_Index):
    """Relative offset -> byte position of a batch (8-byte entries)."""

    entry = _OFFSET_ENTRY
    key_code = "i"

    def __init__(self, path: Path, base_offset: int) -> None:
        super().__init__(path)
        self.base_offset = base_offset

    def append(self, offset: int, position: int) -> None:
        self._append(offset - self.base_offset, position)

    def lookup(self, offset: int) -> tuple[int, int]:
        """(offset, position) of the last entry at or below ``offset``; (base, 0) if none."""
        found = self._floor(offset - self.base_offset)
        if found is None:
            return self.base_offset, 0
        return self.base_offset + found[0], found[1]

    def truncate_from_position(self, position: int) -> None:
        """Drop the entries of batches at or past byte ``position`` of the ``.log``."""
        self._truncate_to_entries(self._kept(lambda _, at: at < position))

    def last(self) -> tuple[int, int]:
        found = self._last()
        return (self.base_offset, 0) if found is None else (self.base_offset + found[0], found[1])


class TimeIndex(_Index):
    """Timestamp -> relative offset (12-byte entries), both non-decreasing."""

    entry = _TIME_ENTRY
    key_code = "q"

    def __init__(self, path: Path, base_offset: int) -> None:
        super().__init__(path)
        self.base_offset = base_offset

    def maybe_append(self, timestamp: int, offset: int) -> None:
        """Add (timestamp, offset) when the timestamp is larger than the last entry's (Kafka's
        ``TimeIndex.maybeAppend``)."""
        last = self._last()
        if timestamp > (NO_TIMESTAMP if last is None else last[0]):
            self._append(timestamp, offset - self.base_offset)

    def truncate_from_offset(self, offset: int) -> None:
        """Drop the entries pointing at ``offset`` or later (Kafka's ``TimeIndex.truncateTo``)."""
        self._truncate_to_entries(
            self._kept(lambda _, relative: relative < offset - self.base_offset)
        )

    def lookup(self, timestamp: int) -> int:
        """The offset of the last entry whose timestamp is <= ``timestamp``; the base offset
        if none (a search starts there)."""
        found = self._floor(timestamp)
        return self.base_offset if found is None else self.base_offset + found[1]

    def last_timestamp(self) -> tuple[int, int]:
        """(largest timestamp, its offset) recorded, or (-1, base offset)."""
        found = self._last()
        return (
            (NO_TIMESTAMP, self.base_offset)
            if found is None
            else (found[0], self.base_offset + found[1])
        )
