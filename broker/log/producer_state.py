"""Idempotent producers' state in one partition (Kafka's ``ProducerStateManager``), pure but for
its snapshot files (docs/architecture.md#producer-state).

Per producer id the partition keeps the producer epoch and the last ``BATCHES_RETAINED`` (5,
Kafka's ``NUM_BATCHES_TO_RETAIN``: a producer has at most 5 requests in flight per partition)
batches it appended: first and last sequence, first and last offset, largest timestamp. A batch
with a producer id is checked against them before it is appended, in Kafka's order
(``ProducerAppendInfo``):

- a batch whose epoch and sequence range equal one of the retained batches is a retry of a
  batch already in the log: it is not appended again, and the answer is that batch's offsets
  (Kafka's duplicate handling; the producer sees its batch acknowledged once);
- an epoch below the producer's: INVALID_PRODUCER_EPOCH (a fenced, older incarnation);
- a higher epoch (the producer bumped it) must start at sequence 0: OUT_OF_ORDER_SEQUENCE_NUMBER
  otherwise;
- a producer id this partition does not know must start at sequence 0: UNKNOWN_PRODUCER_ID
  otherwise (the producer then asks InitProducerId again);
- the same epoch must continue the last sequence (``last + 1``, wrapping from 2^31-1 to 0):
  OUT_OF_ORDER_SEQUENCE_NUMBER for a gap or an older batch no longer retained.

Restarts. The state is rebuilt from the log when the log is opened: the newest snapshot at or
below the log end offset is loaded, and the batch headers from its offset to the log end
replayed (``PartitionLog``). Snapshots are Kafka's files, ``{offset:020d}.snapshot`` in the
partition directory (version 1: a CRC32C, then per entry producer id, epoch, last sequence,
last offset, offset delta, timestamp, coordinator epoch, transaction start), written when a
segment rolls (at the new segment's base offset) and on a clean close (at the log end), so a
kill -9 replays at most the active segment's headers, and every batch the log holds (so every
acknowledged one) is found again. Kafka writes one entry per producer, its last batch; here
one entry per retained batch, oldest first, so the last 5 survive a restart: Kafka's reader
keeps the last entry of each producer id, which is the same newest batch.

Bounds: a producer whose last batch's timestamp is older than ``producer.id.expiration.ms``
(Kafka's default, one day) is forgotten when retention runs; its next batch at a non-zero
sequence is then UNKNOWN_PRODUCER_ID, as in Kafka. At most ``PRODUCER_STATE_ENTRIES_MAX``
producers are kept (any client may write any producer id): past it the one heard from least
recently is forgotten the same way.

Only producer ids of 0 and above are producers: Kafka's ``hasProducerId`` (any negative id is
"none", as -1 is).
"""

from __future__ import annotations

import os
import struct
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

import crc32c

from broker.log.batch import BatchHeader
from broker.log.errors import RecordBatchError
from quorum.limits import PRODUCER_STATE_ENTRIES_MAX

__all__ = [
    "BATCHES_RETAINED",
    "INVALID_PRODUCER_EPOCH",
    "OUT_OF_ORDER_SEQUENCE_NUMBER",
    "PRODUCER_ID_EXPIRATION_MS",
    "SNAPSHOT_SUFFIX",
    "ActiveProducer",
    "BatchMetadata",
    "ProducerState",
    "ProducerStateError",
    "snapshot_offsets",
]

OUT_OF_ORDER_SEQUENCE_NUMBER: Final = 45
INVALID_PRODUCER_EPOCH: Final = 47
UNKNOWN_PRODUCER_ID: Final = 59
# Kafka's ProducerStateEntry.NUM_BATCHES_TO_RETAIN.
BATCHES_RETAINED: Final = 5
# Kafka's producer.id.expiration.ms default.
PRODUCER_ID_EXPIRATION_MS: Final = 86_400_000
SNAPSHOT_SUFFIX: Final = ".snapshot"
SEQUENCE_MAX: Final = 2**31 - 1
# Kafka's ProducerSnapshot version 1: int16 version, uint32 CRC32C of what follows, int32
# count, then the entries.
SNAPSHOT_VERSION: Final = 1
_HEAD: Final = struct.Struct(">hIi")
_ENTRY: Final = struct.Struct(">qhiqiqiq")
NO_TXN_OFFSET: Final = -1
NO_COORDINATOR_EPOCH: Final = -1


class ProducerStateError(Exception):
    """A snapshot file that cannot be read (torn, wrong CRC, unknown version)."""


@dataclass(frozen=True, slots=True)
class BatchMetadata:
    """One appended batch of a producer: Kafka's ``BatchMetadata``."""

    first_seq: int
    last_seq: int
    first_offset: int
    last_offset: int
    timestamp: int


@dataclass(frozen=True, slots=True)
class ActiveProducer:
    """What DescribeProducers reports of one producer: its epoch, and the last sequence and
    timestamp of its newest batch (-1 when it has none)."""

    producer_id: int
    epoch: int
    last_sequence: int
    last_timestamp: int


@dataclass(slots=True)
class _Producer:
    epoch: int
    batches: deque[BatchMetadata] = field(default_factory=lambda: deque(maxlen=BATCHES_RETAINED))


def last_sequence(header: BatchHeader) -> int:
    """The batch's last sequence (Kafka's ``DefaultRecordBatch.incrementSequence``)."""
    if header.base_sequence > SEQUENCE_MAX - header.last_offset_delta:
        return header.last_offset_delta - (SEQUENCE_MAX - header.base_sequence) - 1
    return header.base_sequence + header.last_offset_delta


def _first_sequence(last_seq: int, delta: int) -> int:
    """Kafka's ``DefaultRecordBatch.decrementSequence``."""
    if last_seq < delta:
        return SEQUENCE_MAX - (delta - last_seq) + 1
    return last_seq - delta


def _in_sequence(last_seq: int, first_seq: int) -> bool:
    return first_seq == last_seq + 1 or (first_seq == 0 and last_seq == SEQUENCE_MAX)


class ProducerState:
    """The producers of one partition. Not thread-safe: the partition log's lock guards it."""

    def __init__(self, entries_max: int = PRODUCER_STATE_ENTRIES_MAX) -> None:
        # Ordered least recently appended to first: ``update`` moves a producer to the end.
        self._producers: dict[int, _Producer] = {}
        self._entries_max = entries_max

    def __len__(self) -> int:
        return len(self._producers)

    def entry(self, producer_id: int) -> tuple[int, tuple[BatchMetadata, ...]] | None:
        """(epoch, retained batches oldest first) of ``producer_id``, or None (tests)."""
        producer = self._producers.get(producer_id)
        return None if producer is None else (producer.epoch, tuple(producer.batches))

    def active(self) -> list[ActiveProducer]:
        """Every producer remembered, least recently appended to first."""
        return [
            ActiveProducer(
                producer_id,
                producer.epoch,
                producer.batches[-1].last_seq if producer.batches else -1,
                producer.batches[-1].timestamp if producer.batches else -1,
            )
            for producer_id, producer in self._producers.items()
        ]

    def last_offsets(self) -> dict[int, int]:
        """Producer id -> the last offset of its newest batch: the batches the log cleaner
        keeps (empty if need be) so that a producer's state survives a clean."""
        return {
            producer_id: producer.batches[-1].last_offset
            for producer_id, producer in self._producers.items()
            if producer.batches
        }

    def check(self, header: BatchHeader) -> BatchMetadata | None:
        """Check a producer's batch before it is appended: the retained batch it repeats (do
        not append; answer with its offsets), or None (append it). Raises
        ``RecordBatchError`` with Kafka's code for a batch the producer's state refuses."""
        producer_id = header.producer_id
        producer = self._producers.get(producer_id)
        epoch, first_seq = header.producer_epoch, header.base_sequence
        if producer is None:
            if first_seq != 0:
                raise RecordBatchError(
                    UNKNOWN_PRODUCER_ID,
                    f"producer id {producer_id} has no state in this partition and its batch "
                    f"starts at sequence {first_seq}; a producer's first batch starts at 0 "
                    "(its earlier batches may have been deleted by retention: ask "
                    "InitProducerId again)",
                )
            return None
        if epoch == producer.epoch:
            last_seq = last_sequence(header)
            for retained in producer.batches:
                if retained.first_seq == first_seq and retained.last_seq == last_seq:
                    return retained
        if epoch < producer.epoch:
            raise RecordBatchError(
                INVALID_PRODUCER_EPOCH,
                f"producer {producer_id} at epoch {epoch} is fenced: this partition has seen "
                f"its epoch {producer.epoch}",
            )
        if epoch > producer.epoch:
            if first_seq != 0:
                raise RecordBatchError(
                    OUT_OF_ORDER_SEQUENCE_NUMBER,
                    f"producer {producer_id} moved to epoch {epoch} (from {producer.epoch}) "
                    f"with a batch at sequence {first_seq}; a new epoch starts at sequence 0",
                )
            return None
        last = producer.batches[-1].last_seq if producer.batches else -1
        if producer.batches and not _in_sequence(last, first_seq):
            raise RecordBatchError(
                OUT_OF_ORDER_SEQUENCE_NUMBER,
                f"out of order sequence number for producer {producer_id} at epoch {epoch}: "
                f"the batch starts at sequence {first_seq}, the last appended sequence is "
                f"{last}; the next batch must start at {0 if last == SEQUENCE_MAX else last + 1}",
            )
        return None

    def update(self, header: BatchHeader) -> None:
        """Record an appended batch (``header`` with its assigned base offset). Batches without
        a producer id are ignored; so replaying a log's headers rebuilds the state."""
        producer_id = header.producer_id
        if producer_id < 0:
            return
        producer = self._producers.pop(producer_id, None)
        if producer is not None and header.producer_epoch < producer.epoch:
            self._producers[producer_id] = producer
            return  # an old epoch's batch found while replaying: the state moved past it
        if producer is None or header.producer_epoch > producer.epoch:
            producer = _Producer(header.producer_epoch)
        self._producers[producer_id] = producer
        if len(self._producers) > self._entries_max:
            del self._producers[next(iter(self._producers))]
        producer.batches.append(
            BatchMetadata(
                first_seq=header.base_sequence,
                last_seq=last_sequence(header),
                first_offset=header.base_offset,
                last_offset=header.last_offset,
                timestamp=header.max_timestamp,
            )
        )

    def replay(self, headers: Iterable[BatchHeader]) -> None:
        for header in headers:
            self.update(header)

    def expire(self, now_ms: int, expiration_ms: int = PRODUCER_ID_EXPIRATION_MS) -> int:
        """Forget producers whose newest batch's timestamp is ``expiration_ms`` old (Kafka's
        ``removeExpiredProducers``); how many."""
        expired = [
            producer_id
            for producer_id, producer in self._producers.items()
            if not producer.batches or now_ms - producer.batches[-1].timestamp >= expiration_ms
        ]
        for producer_id in expired:
            del self._producers[producer_id]
        return len(expired)

    # ----- snapshots (Kafka's ProducerSnapshot, version 1) -------------------------------------

    def encode_snapshot(self) -> bytes:
        entries = bytearray()
        count = 0
        # Least recently appended to first, so loading keeps which producer goes first.
        for producer_id, producer in self._producers.items():
            for batch in producer.batches:
                entries += _ENTRY.pack(
                    producer_id,
                    producer.epoch,
                    batch.last_seq,
                    batch.last_offset,
                    batch.last_offset - batch.first_offset,
                    batch.timestamp,
                    NO_COORDINATOR_EPOCH,
                    NO_TXN_OFFSET,
                )
                count += 1
        body = struct.pack(">i", count) + bytes(entries)
        return struct.pack(">hI", SNAPSHOT_VERSION, crc32c.crc32c(body)) + body

    @classmethod
    def decode_snapshot(
        cls, data: bytes, entries_max: int = PRODUCER_STATE_ENTRIES_MAX
    ) -> ProducerState:
        if len(data) < _HEAD.size:
            raise ProducerStateError(f"{len(data)} bytes: shorter than a snapshot's header")
        version, crc, count = _HEAD.unpack_from(data)
        if version != SNAPSHOT_VERSION:
            raise ProducerStateError(f"snapshot version {version}; this broker reads 1")
        if crc32c.crc32c(data[6:]) != crc:
            raise ProducerStateError("the CRC32C does not match the snapshot's bytes")
        if count < 0 or len(data) != _HEAD.size + count * _ENTRY.size:
            raise ProducerStateError(f"{count} entries do not fill {len(data)} bytes")
        state = cls(entries_max)
        for index in range(count):
            producer_id, epoch, last_seq, last_offset, delta, timestamp, _, _ = _ENTRY.unpack_from(
                data, _HEAD.size + index * _ENTRY.size
            )
            producer = state._producers.get(producer_id)
            if producer is None or producer.epoch != epoch:
                producer = state._producers[producer_id] = _Producer(epoch)
            producer.batches.append(
                BatchMetadata(
                    first_seq=_first_sequence(last_seq, delta),
                    last_seq=last_seq,
                    first_offset=last_offset - delta,
                    last_offset=last_offset,
                    timestamp=timestamp,
                )
            )
        while len(state._producers) > entries_max:
            del state._producers[next(iter(state._producers))]
        return state

    def write_snapshot(self, directory: Path, offset: int) -> Path:
        """Write ``{offset:020d}.snapshot`` durably (a temporary file, fsynced, renamed); the
        caller fsyncs the directory. Raises ``OSError``."""
        path = directory / f"{offset:020d}{SNAPSHOT_SUFFIX}"
        temporary = path.with_name(path.name + ".tmp")
        with open(temporary, "wb") as out:
            out.write(self.encode_snapshot())
            out.flush()
            os.fsync(out.fileno())
        os.replace(temporary, path)
        return path


def snapshot_offsets(directory: Path) -> list[int]:
    """The offsets of the snapshot files in ``directory``, ascending."""
    found = []
    for name in os.listdir(directory):
        stem = name[: -len(SNAPSHOT_SUFFIX)]
        if name.endswith(SNAPSHOT_SUFFIX) and len(stem) == 20 and stem.isdigit():
            found.append(int(stem))
    return sorted(found)
