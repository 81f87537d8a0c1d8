"""``ControllerResult``: what every controller operation returns (Kafka's ``ControllerResult``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Generic, TypeVar

from quorum.limits import RECORDS_PER_BATCH_MAX
from quorum.metadata.records import MetadataRecord

__all__ = ["ControllerResult"]

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class ControllerResult(Generic[T]):
    """Records to append and the response to send once they are committed.

    The records of one result get consecutive offsets starting at the ``next_offset`` the
    operation was given (the driver appends them back to back, nothing in between): offsets
    computed at proposal time (broker epochs, topic creation offsets) depend on it.

    ``is_atomic``: the records must go in one batch (Kafka's atomic results). A non-atomic
    result may be split into several batches of at most ``RECORDS_PER_BATCH_MAX`` records;
    its records are ordered so that any prefix is a safe state. No records: nothing to append,
    answer at once (nothing to wait for but the operation's reads).
    """

    records: tuple[MetadataRecord, ...]
    response: T
    is_atomic: bool = True

    def __post_init__(self) -> None:
        assert not self.is_atomic or len(self.records) <= RECORDS_PER_BATCH_MAX, (
            f"an atomic result holds {len(self.records)} records, more than one batch "
            f"({RECORDS_PER_BATCH_MAX})"
        )
