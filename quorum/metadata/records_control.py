"""The records of the Raft layer: the control records (``LeaderChangeMessage``, KIP-630's
``SnapshotHeader`` and ``SnapshotFooter``, KIP-853's ``KRaftVersionRecord`` and
``VotersRecord``, type codes from 1000 up, in control batches only) and ``NoOpRecord`` (KIP-631
type 20), which an idle leader writes in an ordinary batch, each with its wire form.

``quorum.metadata.records`` documents the wire form and gathers these with the other families;
``record_codec`` dispatches to the ``*_to_wire`` / ``*_from_wire`` functions here.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Final

from quorum.ids import Uuid
from quorum.limits import INT32_MAX
from quorum.metadata.record_fields import (
    INT16_MAX,
    INT64_MAX,
    InvalidRecordError,
    check_int,
    check_int_tuple,
    check_uuid,
    fail_field,
    tuple_from_wire,
    uuid_from_wire,
)
from quorum.metadata.records_brokers import BrokerEndpoint, endpoint_from_wire, endpoint_to_wire

__all__ = [
    "KRaftVersionRecord",
    "LeaderChangeMessage",
    "NoOpRecord",
    "SnapshotFooter",
    "SnapshotHeader",
    "VoterEntry",
    "VotersRecord",
    "kraft_version_from_wire",
    "kraft_version_to_wire",
    "leader_change_from_wire",
    "leader_change_to_wire",
    "no_op_from_wire",
    "no_op_to_wire",
    "snapshot_footer_from_wire",
    "snapshot_footer_to_wire",
    "snapshot_header_from_wire",
    "snapshot_header_to_wire",
    "voter_from_wire",
    "voters_from_wire",
    "voters_to_wire",
]


@dataclass(frozen=True, slots=True)
class NoOpRecord:
    """Written by an idle leader so observers can prove how fresh their image is."""

    TYPE: ClassVar[int] = 20
    VERSION: ClassVar[int] = 0


@dataclass(frozen=True, slots=True)
class LeaderChangeMessage:
    """Control record written by a new leader; committing it commits its epoch (KIP-595)."""

    leader_id: int
    epoch: int
    voters: tuple[int, ...]

    TYPE: ClassVar[int] = 1002
    VERSION: ClassVar[int] = 0

    def __post_init__(self) -> None:
        check_int(self, "leader_id", self.leader_id, 0, INT32_MAX)
        check_int(self, "epoch", self.epoch, 0, INT32_MAX)
        check_int_tuple(self, "voters", self.voters, 0, INT32_MAX)


@dataclass(frozen=True, slots=True)
class SnapshotHeader:
    """Control record opening a snapshot (KIP-630 ``SnapshotHeaderRecord``)."""

    version: int
    last_contained_log_timestamp_ms: int

    TYPE: ClassVar[int] = 1003
    VERSION: ClassVar[int] = 0

    def __post_init__(self) -> None:
        check_int(self, "version", self.version, 0, INT16_MAX)
        check_int(
            self,
            "last_contained_log_timestamp_ms",
            self.last_contained_log_timestamp_ms,
            0,
            INT64_MAX,
        )


@dataclass(frozen=True, slots=True)
class SnapshotFooter:
    """Control record closing a snapshot (KIP-630 ``SnapshotFooterRecord``)."""

    version: int

    TYPE: ClassVar[int] = 1004
    VERSION: ClassVar[int] = 0

    def __post_init__(self) -> None:
        check_int(self, "version", self.version, 0, INT16_MAX)


@dataclass(frozen=True, slots=True)
class KRaftVersionRecord:
    """Control record (KIP-853): the ``kraft.version`` in force from its offset on. 0: the voter
    set is static (``controller.quorum.voters``); 1: it is in the log (``VotersRecord``) and
    AddRaftVoter / RemoveRaftVoter may change it."""

    version: int
    kraft_version: int

    TYPE: ClassVar[int] = 1005
    VERSION: ClassVar[int] = 0

    def __post_init__(self) -> None:
        check_int(self, "version", self.version, 0, INT16_MAX)
        check_int(self, "kraft_version", self.kraft_version, 0, INT16_MAX)


@dataclass(frozen=True, slots=True)
class VoterEntry:
    """One voter of a ``VotersRecord`` (Kafka's ``VotersRecord.Voter``): its node id, the
    ``directory.id`` of its metadata log directory (``ZERO_UUID`` for none), the endpoints it
    serves Raft RPCs on (``BrokerEndpoint``: listener name, host, port) and the kraft.version
    range it supports."""

    voter_id: int
    directory_id: Uuid
    endpoints: tuple[BrokerEndpoint, ...]
    kraft_version_min: int
    kraft_version_max: int

    def __post_init__(self) -> None:
        check_int(self, "voter_id", self.voter_id, 0, INT32_MAX)
        check_uuid(self, "directory_id", self.directory_id)
        if type(self.endpoints) is not tuple or any(
            type(e) is not BrokerEndpoint for e in self.endpoints
        ):
            fail_field(self, "endpoints", "a tuple of BrokerEndpoint", self.endpoints)
        check_int(self, "kraft_version_min", self.kraft_version_min, 0, INT16_MAX)
        check_int(self, "kraft_version_max", self.kraft_version_max, 0, INT16_MAX)
        if self.kraft_version_min > self.kraft_version_max:
            fail_field(
                self, "kraft_version_max", f">= {self.kraft_version_min}", self.kraft_version_max
            )


@dataclass(frozen=True, slots=True)
class VotersRecord:
    """Control record (KIP-853): the whole voter set in force from its offset on, even before it
    is committed (rolled back if the log is truncated before it). Voter ids are distinct."""

    version: int
    voters: tuple[VoterEntry, ...]

    TYPE: ClassVar[int] = 1006
    VERSION: ClassVar[int] = 0

    def __post_init__(self) -> None:
        check_int(self, "version", self.version, 0, INT16_MAX)
        if type(self.voters) is not tuple or any(type(v) is not VoterEntry for v in self.voters):
            fail_field(self, "voters", "a tuple of VoterEntry", self.voters)
        ids = [v.voter_id for v in self.voters]
        if len(set(ids)) != len(ids):
            fail_field(self, "voters", "distinct voter ids", ids)


# ----- wire form --------------------------------------------------------------------------


def no_op_to_wire(r: NoOpRecord) -> list[object]:
    return []


def leader_change_to_wire(r: LeaderChangeMessage) -> list[object]:
    return [r.leader_id, r.epoch, list(r.voters)]


def snapshot_header_to_wire(r: SnapshotHeader) -> list[object]:
    return [r.version, r.last_contained_log_timestamp_ms]


def snapshot_footer_to_wire(r: SnapshotFooter) -> list[object]:
    return [r.version]


def kraft_version_to_wire(r: KRaftVersionRecord) -> list[object]:
    return [r.version, r.kraft_version]


def voters_to_wire(r: VotersRecord) -> list[object]:
    return [
        r.version,
        [
            [
                v.voter_id,
                v.directory_id.bytes,
                [endpoint_to_wire(endpoint) for endpoint in v.endpoints],
                v.kraft_version_min,
                v.kraft_version_max,
            ]
            for v in r.voters
        ],
    ]


_NO_OP: Final = NoOpRecord()


def no_op_from_wire(f: Sequence[Any]) -> NoOpRecord:
    return _NO_OP


def leader_change_from_wire(f: Sequence[Any]) -> LeaderChangeMessage:
    return LeaderChangeMessage(f[0], f[1], tuple_from_wire(f[2]))


def snapshot_header_from_wire(f: Sequence[Any]) -> SnapshotHeader:
    return SnapshotHeader(f[0], f[1])


def snapshot_footer_from_wire(f: Sequence[Any]) -> SnapshotFooter:
    return SnapshotFooter(f[0])


def kraft_version_from_wire(f: Sequence[Any]) -> KRaftVersionRecord:
    return KRaftVersionRecord(f[0], f[1])


def voter_from_wire(value: object) -> VoterEntry:
    if (type(value) is not list and type(value) is not tuple) or len(value) != 5:
        raise InvalidRecordError(
            "a VotersRecord voter is the array [voter_id, directory_id, endpoints, "
            f"kraft_version_min, kraft_version_max], got {value!r}"
        )
    endpoints = tuple(endpoint_from_wire(endpoint) for endpoint in tuple_from_wire(value[2]))
    return VoterEntry(value[0], uuid_from_wire(value[1]), endpoints, value[3], value[4])


def voters_from_wire(f: Sequence[Any]) -> VotersRecord:
    return VotersRecord(f[0], tuple(voter_from_wire(v) for v in tuple_from_wire(f[1])))
