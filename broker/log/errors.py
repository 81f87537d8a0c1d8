"""What the partition logs refuse, with Kafka's error codes (``Errors.java``), pure.

The data plane answers with codes the admin side never uses (CORRUPT_MESSAGE,
OFFSET_OUT_OF_RANGE, KAFKA_STORAGE_ERROR, ...), so they are kept here, beside the log that
raises them, as plain ints with Kafka's names; the Kafka listener puts them in its answers as
they are. Two exceptions carry them: ``RecordBatchError`` (the peer's fault: a batch or an
offset the log refuses, answered per partition) and ``LogStorageError`` (an operating error:
the disk failed; the partition answers KAFKA_STORAGE_ERROR until the broker restarts).
"""

from __future__ import annotations

from typing import Final

__all__ = [
    "CORRUPT_MESSAGE",
    "INVALID_RECORD",
    "INVALID_TIMESTAMP",
    "INVALID_TXN_STATE",
    "KAFKA_STORAGE_ERROR",
    "MESSAGE_TOO_LARGE",
    "OFFSET_OUT_OF_RANGE",
    "RECORD_LIST_TOO_LARGE",
    "UNKNOWN_PRODUCER_ID",
    "UNKNOWN_SERVER_ERROR",
    "UNSUPPORTED_COMPRESSION_TYPE",
    "LogClosedError",
    "LogStorageError",
    "RecordBatchError",
]

UNKNOWN_SERVER_ERROR: Final = -1
OFFSET_OUT_OF_RANGE: Final = 1
CORRUPT_MESSAGE: Final = 2
MESSAGE_TOO_LARGE: Final = 10
RECORD_LIST_TOO_LARGE: Final = 18
INVALID_TIMESTAMP: Final = 32
INVALID_TXN_STATE: Final = 48
KAFKA_STORAGE_ERROR: Final = 56
UNKNOWN_PRODUCER_ID: Final = 59
UNSUPPORTED_COMPRESSION_TYPE: Final = 76
INVALID_RECORD: Final = 87


class RecordBatchError(Exception):
    """A batch (or an offset) the log refuses: ``error_code`` is Kafka's, the message says what
    was wrong and what is allowed."""

    def __init__(self, error_code: int, message: str) -> None:
        super().__init__(message)
        self.error_code = error_code


class LogClosedError(Exception):
    """The partition's log was closed (its directory is being moved to ``deleting/``, or the
    broker is stopping): the partition is no longer served here."""


class LogStorageError(Exception):
    """A partition log's disk failed (EIO, ENOSPC, ...): answered KAFKA_STORAGE_ERROR. The
    message names the file and the errno."""

    error_code: Final = KAFKA_STORAGE_ERROR
