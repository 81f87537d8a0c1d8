"""The voter set of the quorum and its history in the log (KIP-853).

A voter is a replica key: a node id and the ``directory.id`` of its metadata log directory
(``meta.properties``), so a controller whose disk was wiped and formatted again is a different
replica and cannot vote as the old one. ``VoterSet`` is an immutable set of voters with the
endpoints they serve Raft RPCs on; ``VoterSetHistory`` is Kafka's ``VoterSetHistory`` with the
``kraft.version`` beside it (its ``KRaftControlRecordStateMachine``): the voter set in force is
the one of the latest ``VotersRecord`` in the log, committed or not, and a truncation of the log
rolls it back.

Where the voter set comes from, first match wins:

1. the latest ``VotersRecord`` in the log;
2. the one in the snapshot the log starts after;
3. the bootstrap set: ``storage format --standalone`` or ``--initial-controllers`` (kraft.version
   1), or the static ``controller.quorum.voters`` (kraft.version 0, without directory ids).

With kraft.version 0 the set never changes (``AddRaftVoter`` answers UNSUPPORTED_VERSION).
Pure: no I/O (docs/conventions.md#pure-core).
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass

from quorum.ids import ZERO_UUID, Uuid
from quorum.metadata.batch import LogBatch, decode_log_batch, is_control_batch
from quorum.metadata.records import (
    BrokerEndpoint,
    KRaftVersionRecord,
    VoterEntry,
    VotersRecord,
)

__all__ = [
    "KRAFT_VERSION_DYNAMIC",
    "KRAFT_VERSION_MAX",
    "KRAFT_VERSION_STATIC",
    "ReplicaKey",
    "VoterNode",
    "VoterSet",
    "VoterSetHistory",
    "voter_changes_in",
]

# kraft.version 0: the static voter set of controller.quorum.voters; 1: voters in the log.
KRAFT_VERSION_STATIC = 0
KRAFT_VERSION_DYNAMIC = 1
KRAFT_VERSION_MAX = KRAFT_VERSION_DYNAMIC  # the newest this build speaks


@dataclass(frozen=True, slots=True, order=True)
class ReplicaKey:
    """A replica of the metadata log: its node id and its directory id (None: not known, as for
    the static voters of kraft.version 0)."""

    node_id: int
    directory_id: Uuid | None = None

    def matches(self, other: ReplicaKey) -> bool:
        """Same node, and the same directory whenever both are known (Kafka's rule)."""
        return self.node_id == other.node_id and (
            self.directory_id is None
            or other.directory_id is None
            or self.directory_id == other.directory_id
        )

    def __str__(self) -> str:
        if self.directory_id is None:
            return str(self.node_id)
        return f"{self.node_id}:{self.directory_id}"


@dataclass(frozen=True, slots=True)
class VoterNode:
    """One voter: its key, its endpoints (``BrokerEndpoint``: listener name, host, port) and
    the kraft.version range it supports."""

    key: ReplicaKey
    endpoints: tuple[BrokerEndpoint, ...] = ()
    kraft_version_min: int = 0
    kraft_version_max: int = KRAFT_VERSION_MAX

    @property
    def node_id(self) -> int:
        return self.key.node_id

    def to_entry(self) -> VoterEntry:
        return VoterEntry(
            self.key.node_id,
            self.key.directory_id or ZERO_UUID,
            self.endpoints,
            self.kraft_version_min,
            self.kraft_version_max,
        )

    @classmethod
    def from_entry(cls, entry: VoterEntry) -> VoterNode:
        directory = None if entry.directory_id == ZERO_UUID else entry.directory_id
        return cls(
            ReplicaKey(entry.voter_id, directory),
            entry.endpoints,
            entry.kraft_version_min,
            entry.kraft_version_max,
        )


class VoterSet:
    """An immutable set of voters, at most one per node id. ``ids`` is precomputed: the core
    asks for it on every message."""

    __slots__ = ("_nodes", "ids")

    def __init__(self, nodes: Iterable[VoterNode] = ()) -> None:
        by_id: dict[int, VoterNode] = {}
        for node in nodes:
            assert node.node_id not in by_id, ("two voters with one id", node)
            by_id[node.node_id] = node
        self._nodes: Mapping[int, VoterNode] = dict(sorted(by_id.items()))
        self.ids: frozenset[int] = frozenset(by_id)

    @classmethod
    def static(cls, ids: Iterable[int]) -> VoterSet:
        """The voters of ``controller.quorum.voters``: ids only (kraft.version 0)."""
        return cls(VoterNode(ReplicaKey(node_id)) for node_id in ids)

    @classmethod
    def from_record(cls, record: VotersRecord) -> VoterSet:
        return cls(VoterNode.from_entry(entry) for entry in record.voters)

    def to_record(self) -> VotersRecord:
        return VotersRecord(0, tuple(node.to_entry() for node in self._nodes.values()))

    # ----- reads ----------------------------------------------------------------------------

    def __len__(self) -> int:
        return len(self._nodes)

    def __iter__(self) -> Iterator[VoterNode]:
        return iter(self._nodes.values())

    def __bool__(self) -> bool:
        return bool(self._nodes)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, VoterSet) and dict(self._nodes) == dict(other._nodes)

    def __hash__(self) -> int:
        return hash(tuple(self._nodes.values()))

    def __repr__(self) -> str:
        return f"VoterSet({', '.join(str(n.key) for n in self._nodes.values())})"

    def voter(self, node_id: int) -> VoterNode | None:
        return self._nodes.get(node_id)

    def voter_keys(self) -> tuple[ReplicaKey, ...]:
        return tuple(node.key for node in self._nodes.values())

    def is_voter(self, key: ReplicaKey) -> bool:
        """Whether ``key`` is one of the voters (its directory matching when both are known)."""
        node = self._nodes.get(key.node_id)
        return node is not None and node.key.matches(key)

    def directory_id(self, node_id: int) -> Uuid | None:
        node = self._nodes.get(node_id)
        return node.key.directory_id if node is not None else None

    # ----- changes (each returns a new set, or None when the change does not apply) ---------

    def add(self, node: VoterNode) -> VoterSet | None:
        """This set plus ``node``; None when its id is already a voter (DUPLICATE_VOTER)."""
        if node.node_id in self._nodes:
            return None
        return VoterSet((*self._nodes.values(), node))

    def remove(self, key: ReplicaKey) -> VoterSet | None:
        """This set without ``key``; None when ``key`` is not a voter (VOTER_NOT_FOUND) or is
        the last one (a quorum needs a voter)."""
        node = self._nodes.get(key.node_id)
        if node is None or node.key != key or len(self._nodes) == 1:
            return None
        return VoterSet(n for n in self._nodes.values() if n.node_id != key.node_id)

    def update(self, node: VoterNode) -> VoterSet | None:
        """This set with ``node`` replacing the voter of the same key (new endpoints or
        kraft.version range); None when ``node.key`` is not a voter."""
        current = self._nodes.get(node.node_id)
        if current is None or current.key != node.key:
            return None
        return VoterSet(node if n.node_id == node.node_id else n for n in self._nodes.values())

    def differs_by_at_most_one(self, other: VoterSet) -> bool:
        """Whether ``other`` adds or removes at most one voter (any majority of one then meets
        any majority of the other: the rule that keeps one-at-a-time changes safe)."""
        mine = set(self.voter_keys())
        theirs = set(other.voter_keys())
        return len(mine ^ theirs) <= 1


def voter_changes_in(batch: LogBatch) -> tuple[int | None, VoterSet | None]:
    """The kraft.version and the voter set a batch sets, if any (only control batches can):
    the last ``KRaftVersionRecord`` and ``VotersRecord`` in it. Non-control batches are told
    apart without decoding their records (``is_control_batch``)."""
    if not is_control_batch(batch.data):
        return None, None
    kraft_version: int | None = None
    voters: VoterSet | None = None
    for record in decode_log_batch(batch).records:
        if isinstance(record, KRaftVersionRecord):
            kraft_version = record.kraft_version
        elif isinstance(record, VotersRecord):
            voters = VoterSet.from_record(record)
    return kraft_version, voters


class VoterSetHistory:
    """The voter sets and kraft.versions of the log by offset, over a base (the snapshot's or
    the bootstrap's), in offset order. The entry at offset o is in force for the log after o.

    Kept in step with the in-memory log: ``add`` on append, ``truncate_to`` on truncation,
    ``compact_to`` when a snapshot replaces the log before an offset."""

    def __init__(self, base_voters: VoterSet, base_kraft_version: int) -> None:
        self._base_voters = base_voters
        self._base_kraft_version = base_kraft_version
        # Whether the base came from a snapshot or the log (True) or from the bootstrap (False):
        # a leader writes a bootstrap set into the log at its epoch start.
        self.base_from_log = False
        self._offsets: list[int] = []
        self._voters: list[VoterSet] = []
        self._kraft_offsets: list[int] = []
        self._kraft_versions: list[int] = []

    # ----- reads ----------------------------------------------------------------------------

    def latest(self) -> VoterSet:
        return self._voters[-1] if self._voters else self._base_voters

    def latest_offset(self) -> int | None:
        """The offset of the latest VotersRecord in the log (None: the base is in force)."""
        return self._offsets[-1] if self._offsets else None

    def kraft_version(self) -> int:
        return self._kraft_versions[-1] if self._kraft_versions else self._base_kraft_version

    def voters_before(self, offset: int) -> VoterSet:
        """The voter set in force once every record below ``offset`` is applied (what a
        snapshot ending at ``offset`` holds)."""
        index = bisect.bisect_left(self._offsets, offset) - 1
        return self._voters[index] if index >= 0 else self._base_voters

    def kraft_version_before(self, offset: int) -> int:
        index = bisect.bisect_left(self._kraft_offsets, offset) - 1
        return self._kraft_versions[index] if index >= 0 else self._base_kraft_version

    def entries(self) -> tuple[tuple[int, VoterSet], ...]:
        return tuple(zip(self._offsets, self._voters, strict=True))

    def all_sets(self) -> tuple[VoterSet, ...]:
        """The base and every set of the log (the address book of a node comes from them)."""
        return (self._base_voters, *self._voters)

    # ----- changes --------------------------------------------------------------------------

    def add(self, offset: int, kraft_version: int | None, voters: VoterSet | None) -> None:
        assert not self._offsets or offset > self._offsets[-1], (offset, self._offsets)
        if kraft_version is not None:
            self._kraft_offsets.append(offset)
            self._kraft_versions.append(kraft_version)
        if voters is not None:
            self._offsets.append(offset)
            self._voters.append(voters)

    def truncate_to(self, offset: int) -> bool:
        """Forget every entry at or after ``offset``. Returns whether the voter set changed."""
        before = self.latest()
        index = bisect.bisect_left(self._offsets, offset)
        del self._offsets[index:]
        del self._voters[index:]
        index = bisect.bisect_left(self._kraft_offsets, offset)
        del self._kraft_offsets[index:]
        del self._kraft_versions[index:]
        return self.latest() != before

    def compact_to(self, offset: int) -> None:
        """A snapshot holds everything before ``offset``: what was in force there becomes the
        base, older entries go."""
        voters = self.voters_before(offset)
        kraft_version = self.kraft_version_before(offset)
        index = bisect.bisect_left(self._offsets, offset)
        if index > 0:
            self.base_from_log = True
        del self._offsets[:index]
        del self._voters[:index]
        index = bisect.bisect_left(self._kraft_offsets, offset)
        del self._kraft_offsets[:index]
        del self._kraft_versions[:index]
        self._base_voters = voters
        self._base_kraft_version = kraft_version

    def reset(self, base_voters: VoterSet, base_kraft_version: int, *, from_log: bool) -> None:
        """A snapshot replaced the whole log: its voter set is the base."""
        self._base_voters = base_voters
        self._base_kraft_version = base_kraft_version
        self.base_from_log = from_log
        self._offsets.clear()
        self._voters.clear()
        self._kraft_offsets.clear()
        self._kraft_versions.clear()
