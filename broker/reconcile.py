"""Partition-directory reconciliation as a pure plan (docs/architecture.md#brokers,
docs/invariants.md I11).

``plan_reconciliation`` compares what the committed metadata image assigns to this broker with
what a scan of ``log.dirs`` found, and returns a ``ReconcilePlan``; ``broker/logdirs.py`` scans
and executes it. Nothing here touches the disk or reads a clock: time comes in as ``now_ms``
(wall-clock milliseconds, because due times must survive a restart), so every rule below is
tested as a table without files (``tests/unit/broker/test_reconcile.py``).

Directory layout of one log dir::

    {topic}-{partition}/partition.metadata      a live partition (Kafka's name)
    {topic}-{partition}.tmp-{token}/            a partition being built (crash leftover)
    deleting/{topic_id}_{partition}[.n]/        moved aside, deleted at its due time
    deleting/unknown-{hash}_{partition}[.n]     moved aside, topic id unknown
    deleting/pending.json                       due times of everything in deleting/

The rules, every decision keyed by (topic_id, partition), never by name alone:

* **Never move aside a live copy of an assigned partition** (I11a): a directory whose name is
  ``{topic}-{p}`` and whose ``partition.metadata`` holds an id X with (X, p) assigned here.
  ``check_plan_safety`` asserts it on every plan.
* **Create** every assigned partition that has no live copy, in the log dir holding the fewest
  partitions (Kafka's ``LogManager.nextLogDirs``), ties broken by the order of ``log.dirs``.
* **Only positive evidence moves a directory**: a ``partition.metadata`` naming another topic id,
  a name not assigned here once caught up (FULL), a partition the delta removed. The absence of
  evidence never does. For an entry named like an assigned partition (both modes):

  - **Topic id mismatch**: its ``partition.metadata`` holds another id: the topic was deleted
    and recreated while the broker was away (KIP-516 "Stale state"). It is moved aside, or the
    assigned partition could not be created under its name.
  - **Missing** ``partition.metadata``: the file is written with the image's id
    (``WritePartitionMetadata``), as Kafka writes it for a log that has none; the directory
    becomes the live copy. If the partition already has a live copy (or another directory is
    adopted in the same plan), the entry is left alone and reported as a conflict.
  - **Unparseable** ``partition.metadata`` (corrupt bytes, a symlink, not a regular file): left
    in place and reported as a conflict on every plan; the assigned partition is not created
    over it. Kafka treats such a file as an error too; moving it aside would delete what may
    be the partition's only copy of its data once the delay passed, and stopping the broker
    for one damaged file would take every other partition down. An operator repairs or removes
    it (docs/architecture.md#brokers).
  - A non-directory (a regular file, a symlink) holds no partition data and is moved aside.

  I/O errors never reach the plan: ``broker/logdirs.py`` retries the read and stops the broker
  when it keeps failing.
* **INCREMENTAL** (a delta): also move aside the live copies of partitions in ``removed``.
* **FULL** (the first image after catch-up): also move aside every other stray: partitions not
  assigned here, directories under names not assigned here with a missing or unparseable
  ``partition.metadata`` (KAFKA-16814: stale, never fatal), unparseable directory names
  (including Kafka's ``-delete``/``-stray``/``-future`` dirs), leftover ``.tmp-`` build
  directories, and non-directories (regular files, symlinks) named like a partition.
  Non-directories with other names (``meta.properties``, checkpoint files) are not partitions
  and are ignored.
* Entries that could not be read (permission denied) are left alone and reported as
  conflicts; so is an assigned partition whose directory name is held by such an entry.
* Pending deletions whose due time has passed are deleted; entries found in ``deleting/``
  without a due time (a crash between the rename and the journal write) are scheduled
  ``delete_delay_ms`` from now, never deleted on sight (I11d).
* ``RESERVED_ENTRY_NAMES`` (``deleting``, ``lost+found``, and ``__cluster_metadata-0``, the
  metadata log when ``metadata.log.dir`` is also a log dir) are never touched.

KIP-516's "Migration" step applies to a directory without ``partition.metadata`` under an
assigned name: the file is written with the image's id. This project creates every partition
directory with its file already inside, so such a directory was damaged or made by hand; its
data is kept either way.

Stale names in ``deleting/``: ``{topic_id}_{partition}`` when both are known (KIP-516
"Deletion"); an unknown id becomes ``unknown-{h}`` and an unknown partition ``unknown``, where
``h`` is the first 16 hex digits of the SHA-256 of the original directory name (stable, so a
person can match it; the original name is kept in ``pending.json``). If the name is taken (the
same partition moved aside twice) ``.1``, ``.2``, ... is appended. Every such name is at most 60
bytes, far below the 255-byte limit, which is asserted.
"""

from __future__ import annotations

import enum
import hashlib
import re
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Final

from quorum.ids import Uuid
from quorum.limits import INT32_MAX

# ----- names ---------------------------------------------------------------------------------

# Kafka's Topic.java: MAX_NAME_LENGTH and the legal characters.
TOPIC_NAME_CHARS_MAX: Final = 249
# A partition index is a Kafka int32.
PARTITION_MAX: Final = INT32_MAX
# Linux NAME_MAX; Kafka caps its suffixed names to it (logDirNameWithSuffixCappedLength).
DIR_NAME_BYTES_MAX: Final = 255
DELETING_DIR: Final = "deleting"
METADATA_PARTITION_DIR: Final = "__cluster_metadata-0"
RESERVED_ENTRY_NAMES: Final = frozenset({DELETING_DIR, "lost+found", METADATA_PARTITION_DIR})
BUILD_TOKEN_CHARS: Final = 10
# Pending deletions with the same base name at most; beyond it the log dir is in a state no
# broker produces (ten thousand moves of one partition) and the plan reports a bug.
DELETING_SUFFIX_MAX: Final = 10_000

_TOPIC_NAME_RE: Final = re.compile(rf"[a-zA-Z0-9._-]{{1,{TOPIC_NAME_CHARS_MAX}}}")
_PARTITION_RE: Final = re.compile(r"0|[1-9][0-9]{0,9}")
_BUILD_RE: Final = re.compile(r"(?P<base>.+)\.tmp-(?P<token>[a-z]+)")
_BUILD_TOKEN_RE: Final = re.compile(rf"[a-z]{{{BUILD_TOKEN_CHARS}}}")

# Negative control (docs/invariants.md#negative-controls): when True, the "is (topic_id, partition)
# assigned here" predicate is inverted, as in KAFKA-13127, and ``check_plan_safety`` is skipped, so
# only the I11 checker of the tests stands between the bug and the disk. Never set outside tests.
UNSAFE_STRAY_INVERT = False


def is_legal_topic_name(name: str) -> bool:
    """Kafka's rule: 1..249 characters of ``[a-zA-Z0-9._-]``, and not ``.`` or ``..``."""
    return _TOPIC_NAME_RE.fullmatch(name) is not None and name not in (".", "..")


def format_partition_dir(name: str, partition: int) -> str:
    """``{topic}-{partition}``. Raises ``ValueError`` for an illegal name or partition."""
    if not is_legal_topic_name(name):
        raise ValueError(f"{name!r} is not a legal topic name")
    if not 0 <= partition <= PARTITION_MAX:
        raise ValueError(f"partition {partition} is outside 0..{PARTITION_MAX}")
    return f"{name}-{partition}"


def parse_partition_dir(dir_name: str) -> tuple[str, int] | None:
    """``(topic, partition)`` of a directory name, or None if it is not ``{topic}-{partition}``.

    Splits at the last ``-``: ``foo-1-0`` is ``foo-1`` partition 0, ``foo-10`` is ``foo``
    partition 10. The partition must be canonical (no sign, no leading zero, at most
    2^31 - 1) so that ``format_partition_dir`` gives the same name back.
    """
    name, sep, partition_text = dir_name.rpartition("-")
    if not sep or _PARTITION_RE.fullmatch(partition_text) is None:
        return None
    partition = int(partition_text)
    if partition > PARTITION_MAX or not is_legal_topic_name(name):
        return None
    return name, partition


def name_bytes(name: str) -> int:
    """The length of a directory entry name on disk (``os.fsencode`` on Linux)."""
    return len(name.encode("utf-8", "surrogateescape"))


def build_dir_name(final_name: str, token: str) -> str:
    """The name a partition directory is built under before it is renamed to ``final_name``.

    ``token`` is ``BUILD_TOKEN_CHARS`` lowercase letters: never digits, so a build name never
    parses as a partition directory. A long ``final_name`` is cut so the result fits in 255
    bytes (partition names are ASCII).
    """
    assert _BUILD_TOKEN_RE.fullmatch(token), token
    suffix = f".tmp-{token}"
    name = final_name[: DIR_NAME_BYTES_MAX - len(suffix)] + suffix
    assert name_bytes(name) <= DIR_NAME_BYTES_MAX, name
    return name


def parse_build_dir(dir_name: str) -> str | None:
    """The (possibly cut) final name inside a build directory's name, or None."""
    if parse_partition_dir(dir_name) is not None:
        return None
    match = _BUILD_RE.fullmatch(dir_name)
    return match.group("base") if match else None


def deleting_base_name(topic_id: Uuid | None, partition: int | None, source: str) -> str:
    """``{topic_id}_{partition}``, with ``unknown-{hash}`` / ``unknown`` for missing parts."""
    if topic_id is None:
        digest = hashlib.sha256(source.encode("utf-8", "surrogateescape")).hexdigest()
        id_part = f"unknown-{digest[:16]}"
    else:
        id_part = str(topic_id)
    partition_part = "unknown" if partition is None else str(partition)
    return f"{id_part}_{partition_part}"


def unique_deleting_name(base: str, taken: Collection[str]) -> str:
    """``base``, or ``base.{n}`` with the smallest n >= 1 that is not in ``taken``."""
    name = base
    for n in range(1, DELETING_SUFFIX_MAX + 1):
        if name not in taken:
            break
        name = f"{base}.{n}"
    else:  # pragma: no cover - needs ten thousand entries with one base name
        raise AssertionError(f"deleting/ holds {DELETING_SUFFIX_MAX} entries named {base}.*")
    assert name_bytes(name) <= DIR_NAME_BYTES_MAX, name
    return name


# ----- inputs ---------------------------------------------------------------------------------


class ReconcileMode(enum.Enum):
    """The LeaderAndIsr ``type`` of KIP-516, carried by the metadata log instead of a request."""

    INCREMENTAL = 1  # a delta: may omit partitions assigned here
    FULL = 2  # the whole image after catch-up: everything else on disk is stale


class EntryState(enum.Enum):
    """What a scan found at one entry of a log dir."""

    OK = "ok"  # a directory with a valid partition.metadata
    METADATA_MISSING = "metadata_missing"  # a directory without partition.metadata
    # garbage, oversized, a symlink, not a regular file (never an I/O error: those stop the scan)
    METADATA_UNREADABLE = "metadata_unreadable"
    NOT_A_DIRECTORY = "not_a_directory"  # a regular file, symlink, fifo...
    INACCESSIBLE = "inaccessible"  # permission denied: left alone


@dataclass(frozen=True, slots=True)
class LocalPartition:
    """One entry of a log dir (not its ``deleting/``), as a scan saw it.

    ``log_dir`` is the log dir's path as text (this module does not use pathlib), ``dir_name``
    the entry's name, ``topic_id`` the id in its ``partition.metadata`` (state OK only), and
    ``detail`` why the id is missing, for logs and the dry run.
    """

    log_dir: str
    dir_name: str
    state: EntryState = EntryState.OK
    topic_id: Uuid | None = None
    detail: str = ""

    def __post_init__(self) -> None:
        assert (self.topic_id is not None) == (self.state is EntryState.OK), self

    @property
    def parsed(self) -> tuple[str, int] | None:
        return parse_partition_dir(self.dir_name)

    @property
    def key(self) -> tuple[Uuid, int] | None:
        """(topic_id, partition) when both are known."""
        parsed = self.parsed
        if self.topic_id is None or parsed is None:
            return None
        return self.topic_id, parsed[1]


@dataclass(frozen=True, slots=True)
class PendingDeletion:
    """One entry of a log dir's ``deleting/``. ``delete_at_ms`` is None when ``pending.json``
    does not know it (a crash between the move and the journal write, or a damaged journal)."""

    log_dir: str
    name: str
    delete_at_ms: int | None
    topic_id: Uuid | None = None
    partition: int | None = None
    reason: str = ""
    source: str = ""
    size_bytes: int = field(default=0, compare=False)


# ----- outputs --------------------------------------------------------------------------------


class MoveReason(enum.Enum):
    TOPIC_ID_MISMATCH = "topic_id_mismatch"
    REMOVED = "removed"
    NOT_ASSIGNED = "not_assigned"
    METADATA_MISSING = "metadata_missing"
    METADATA_UNREADABLE = "metadata_unreadable"
    NOT_A_DIRECTORY = "not_a_directory"
    UNPARSEABLE_NAME = "unparseable_name"
    LEFTOVER_BUILD_DIR = "leftover_build_dir"


_REASON_BY_STATE: Final = {
    EntryState.METADATA_MISSING: MoveReason.METADATA_MISSING,
    EntryState.METADATA_UNREADABLE: MoveReason.METADATA_UNREADABLE,
    EntryState.NOT_A_DIRECTORY: MoveReason.NOT_A_DIRECTORY,
    EntryState.OK: MoveReason.TOPIC_ID_MISMATCH,
}


@dataclass(frozen=True, slots=True)
class Create:
    log_dir: str
    topic_name: str
    partition: int
    topic_id: Uuid

    @property
    def dir_name(self) -> str:
        return format_partition_dir(self.topic_name, self.partition)


@dataclass(frozen=True, slots=True)
class WritePartitionMetadata:
    """Write ``log_dir/dir_name/partition.metadata`` (missing) with ``topic_id``: the directory,
    named like assigned partition (topic_id, partition), becomes its live copy."""

    log_dir: str
    dir_name: str
    topic_id: Uuid
    partition: int


@dataclass(frozen=True, slots=True)
class MoveAside:
    """Rename ``log_dir/dir_name`` to ``log_dir/deleting/destination``."""

    log_dir: str
    dir_name: str
    destination: str
    topic_id: Uuid | None
    partition: int | None
    reason: MoveReason
    delete_at_ms: int


@dataclass(frozen=True, slots=True)
class Delete:
    """Remove ``log_dir/deleting/name``, due since ``delete_at_ms``."""

    log_dir: str
    name: str
    delete_at_ms: int


@dataclass(frozen=True, slots=True)
class ScheduleDeletion:
    """Record a due time for ``log_dir/deleting/name``, found there without one."""

    log_dir: str
    name: str
    delete_at_ms: int


@dataclass(frozen=True, slots=True)
class Conflict:
    """Something the plan cannot resolve; the broker logs it at ERROR and carries on."""

    log_dir: str
    dir_name: str
    message: str


@dataclass(frozen=True, slots=True)
class ReconcilePlan:
    """What to do, in this order: ``move_aside`` and ``schedules`` (freeing names an assigned
    partition may need), then ``write_metadata``, then ``creates``, then ``deletes``."""

    mode: ReconcileMode
    now_ms: int
    creates: tuple[Create, ...] = ()
    move_aside: tuple[MoveAside, ...] = ()
    deletes: tuple[Delete, ...] = ()
    schedules: tuple[ScheduleDeletion, ...] = ()
    conflicts: tuple[Conflict, ...] = ()
    write_metadata: tuple[WritePartitionMetadata, ...] = ()

    @property
    def is_empty(self) -> bool:
        """No action (conflicts are reports, not actions)."""
        return not (
            self.creates or self.move_aside or self.deletes or self.schedules or self.write_metadata
        )


# ----- the plan -------------------------------------------------------------------------------


def _is_assigned_here(key: tuple[Uuid, int], assigned: Mapping[tuple[Uuid, int], str]) -> bool:
    # The one predicate the negative control breaks.
    return (key in assigned) != UNSAFE_STRAY_INVERT


def _is_live_copy(entry: LocalPartition, assigned: Mapping[tuple[Uuid, int], str]) -> bool:
    key = entry.key
    return key is not None and _is_assigned_here(key, assigned)


def _stale_reason(
    entry: LocalPartition,
    *,
    assigned: Mapping[tuple[Uuid, int], str],
    assigned_dir_names: Collection[tuple[str, int]],
    mode: ReconcileMode,
    removed: Collection[tuple[Uuid, int]],
) -> MoveReason | None:
    """Why ``entry`` must be moved aside, or None to keep it."""
    if entry.state is EntryState.INACCESSIBLE:
        return None
    if _is_live_copy(entry, assigned):
        return None  # I11a
    parsed = entry.parsed
    if parsed is not None and parsed in assigned_dir_names:
        if entry.state in _NO_ID_STATES:
            return None  # no evidence: its partition.metadata is written or it is reported
        return _REASON_BY_STATE[entry.state]
    if mode is ReconcileMode.INCREMENTAL:
        key = entry.key
        return MoveReason.REMOVED if key is not None and key in removed else None
    if entry.state is EntryState.NOT_A_DIRECTORY:
        return MoveReason.NOT_A_DIRECTORY if parsed is not None else None
    if parsed is None:
        if parse_build_dir(entry.dir_name) is not None:
            return MoveReason.LEFTOVER_BUILD_DIR
        return MoveReason.UNPARSEABLE_NAME
    if entry.state is not EntryState.OK:
        return _REASON_BY_STATE[entry.state]
    return MoveReason.REMOVED if entry.key in removed else MoveReason.NOT_ASSIGNED


# Directories whose topic id is unknown: under an assigned name they are kept (never moved).
_NO_ID_STATES: Final = frozenset({EntryState.METADATA_MISSING, EntryState.METADATA_UNREADABLE})


def _partition_of(entry: LocalPartition) -> int | None:
    parsed = entry.parsed
    if parsed is None:
        base = parse_build_dir(entry.dir_name)
        parsed = parse_partition_dir(base) if base is not None else None
    return parsed[1] if parsed is not None else None


def plan_reconciliation(
    *,
    assigned: Mapping[tuple[Uuid, int], str],
    on_disk: Sequence[LocalPartition],
    pending_deletions: Sequence[PendingDeletion],
    mode: ReconcileMode,
    log_dirs: Sequence[str],
    now_ms: int,
    delete_delay_ms: int,
    removed: Collection[tuple[Uuid, int]] = frozenset(),
    partitions_elsewhere: Mapping[str, int] | None = None,
) -> ReconcilePlan:
    """The plan that brings ``log_dirs`` in line with ``assigned`` (see the module docstring).

    ``assigned``: (topic_id, partition) -> topic name, every partition the committed image
    assigns to this broker (INCREMENTAL: may be only those the delta touched, the scan then
    covering the entries named like them and like ``removed``). ``on_disk`` and
    ``pending_deletions``: what ``LogDirs.scan`` found. ``removed``: (INCREMENTAL) partitions
    the delta took away from this broker. ``log_dirs``: the online log dirs, in configuration
    order, where new partitions may be placed. ``partitions_elsewhere``: partition directories
    of each log dir that a partial scan left out of ``on_disk``, counted for placement.
    """
    assert log_dirs, "a broker needs at least one log dir"
    assert len(set(log_dirs)) == len(log_dirs), log_dirs
    assert delete_delay_ms >= 0, delete_delay_ms
    order = {log_dir: index for index, log_dir in enumerate(log_dirs)}
    seen: set[tuple[str, str]] = set()
    for entry in on_disk:
        assert entry.log_dir in order, f"{entry} is not in an online log dir {list(log_dirs)}"
        assert (entry.log_dir, entry.dir_name) not in seen, f"scanned twice: {entry}"
        seen.add((entry.log_dir, entry.dir_name))
    for pending in pending_deletions:
        assert pending.log_dir in order, f"{pending} is not in an online log dir"

    assigned_dir_names: dict[tuple[str, int], Uuid] = {}
    for (topic_id, partition), name in assigned.items():
        assert (name, partition) not in assigned_dir_names, f"{name}-{partition} assigned twice"
        assigned_dir_names[(name, partition)] = topic_id
    delete_at_ms = now_ms + delete_delay_ms

    kept: list[LocalPartition] = []
    moves: list[MoveAside] = []
    conflicts: list[Conflict] = []
    taken: dict[str, set[str]] = {log_dir: set() for log_dir in log_dirs}
    for pending in pending_deletions:
        taken[pending.log_dir].add(pending.name)
    for entry in sorted(on_disk, key=lambda e: (order[e.log_dir], e.dir_name)):
        if entry.dir_name in RESERVED_ENTRY_NAMES:
            continue
        reason = _stale_reason(
            entry,
            assigned=assigned,
            assigned_dir_names=assigned_dir_names,
            mode=mode,
            removed=removed,
        )
        if reason is None:
            kept.append(entry)
            if entry.state is EntryState.INACCESSIBLE:
                conflicts.append(
                    Conflict(entry.log_dir, entry.dir_name, f"left alone: {entry.detail}")
                )
            continue
        moved_partition = _partition_of(entry)
        destination = unique_deleting_name(
            deleting_base_name(entry.topic_id, moved_partition, entry.dir_name),
            taken[entry.log_dir],
        )
        taken[entry.log_dir].add(destination)
        moves.append(
            MoveAside(
                log_dir=entry.log_dir,
                dir_name=entry.dir_name,
                destination=destination,
                topic_id=entry.topic_id,
                partition=moved_partition,
                reason=reason,
                delete_at_ms=delete_at_ms,
            )
        )

    copies: dict[tuple[Uuid, int], list[LocalPartition]] = {}
    for entry in kept:
        key = entry.key
        if key is not None and entry.state is EntryState.OK:
            copies.setdefault(key, []).append(entry)
    for key, found in copies.items():
        if key in assigned and len(found) > 1:
            places = ", ".join(f"{e.log_dir}/{e.dir_name}" for e in found)
            conflicts.append(
                Conflict(
                    found[0].log_dir,
                    found[0].dir_name,
                    f"partition {key[0]}_{key[1]} has {len(found)} live copies: {places}; "
                    "all are kept (never move aside an assigned partition)",
                )
            )

    # Directories without an id under an assigned name: adopt the first missing one (in log-dir
    # order) when the partition has no live copy; report any other one that has a copy. (One
    # with an unparseable file and no copy is reported below: it holds the name.)
    writes: list[WritePartitionMetadata] = []
    adopted: set[tuple[Uuid, int]] = set()
    without_id: list[tuple[LocalPartition, tuple[Uuid, int]]] = []
    for entry in kept:
        parsed = entry.parsed
        if parsed is None or entry.state not in _NO_ID_STATES:
            continue
        assigned_id = assigned_dir_names.get(parsed)
        if assigned_id is not None:
            without_id.append((entry, (assigned_id, parsed[1])))
    for entry, key in without_id:
        if entry.state is EntryState.METADATA_MISSING and key not in copies and key not in adopted:
            adopted.add(key)
            writes.append(WritePartitionMetadata(entry.log_dir, entry.dir_name, *key))
    written_places = {(w.log_dir, w.dir_name) for w in writes}
    for entry, key in without_id:
        if (entry.log_dir, entry.dir_name) in written_places:
            continue
        if key in copies or key in adopted:
            why = (
                "it has no partition.metadata"
                if entry.state is EntryState.METADATA_MISSING
                else f"its partition.metadata cannot be parsed ({entry.detail})"
            )
            conflicts.append(
                Conflict(
                    entry.log_dir,
                    entry.dir_name,
                    f"left alone: {why} and partition {key[0]}_{key[1]} has another copy; it "
                    "may hold data, so an operator must choose",
                )
            )

    # Every kept entry by its name: one name may be held in several log dirs at once.
    held_names: dict[str, list[LocalPartition]] = {}
    for entry in kept:
        held_names.setdefault(entry.dir_name, []).append(entry)
    partition_counts = dict.fromkeys(log_dirs, 0)
    for log_dir, count in (partitions_elsewhere or {}).items():
        partition_counts[log_dir] += count
    for entry in kept:
        if entry.parsed is not None and entry.state is not EntryState.NOT_A_DIRECTORY:
            partition_counts[entry.log_dir] += 1
    creates: list[Create] = []
    for (topic_id, partition), name in sorted(assigned.items(), key=lambda kv: (kv[1], kv[0][1])):
        if (topic_id, partition) in copies or (topic_id, partition) in adopted:
            continue
        if not is_legal_topic_name(name) or not 0 <= partition <= PARTITION_MAX:
            conflicts.append(
                Conflict(log_dirs[0], repr(name), f"cannot create {name!r} partition {partition}")
            )
            continue
        dir_name = format_partition_dir(name, partition)
        if dir_name in RESERVED_ENTRY_NAMES or name_bytes(dir_name) > DIR_NAME_BYTES_MAX:
            conflicts.append(
                Conflict(
                    log_dirs[0],
                    dir_name,
                    f"cannot create {dir_name}: reserved, or longer than "
                    f"{DIR_NAME_BYTES_MAX} bytes",
                )
            )
            continue
        holders = held_names.get(dir_name, [])
        for holder in holders:
            hint = ""
            if holder.state is EntryState.METADATA_UNREADABLE:
                hint = (
                    "; it is not moved aside with its data: if the data is this partition's, "
                    f"repair partition.metadata ('version: 0', 'topic_id: {topic_id}'), "
                    "otherwise move the directory away"
                )
            conflicts.append(
                Conflict(
                    holder.log_dir,
                    dir_name,
                    f"cannot create {dir_name} for topic id {topic_id}: the name is held by an "
                    f"entry that is kept ({holder.state.value} {holder.detail})".rstrip()
                    + hint,
                )
            )
        if holders:
            continue
        log_dir = min(log_dirs, key=lambda d: (partition_counts[d], order[d]))
        partition_counts[log_dir] += 1
        creates.append(Create(log_dir, name, partition, topic_id))

    schedules = tuple(
        ScheduleDeletion(p.log_dir, p.name, delete_at_ms)
        for p in pending_deletions
        if p.delete_at_ms is None
    )
    deletes = tuple(
        Delete(p.log_dir, p.name, p.delete_at_ms)
        for p in pending_deletions
        if p.delete_at_ms is not None and p.delete_at_ms <= now_ms
    )
    plan = ReconcilePlan(
        mode=mode,
        now_ms=now_ms,
        creates=tuple(creates),
        move_aside=tuple(moves),
        deletes=deletes,
        schedules=schedules,
        conflicts=tuple(conflicts),
        write_metadata=tuple(writes),
    )
    if not UNSAFE_STRAY_INVERT:
        check_plan_safety(plan, assigned=assigned, on_disk=on_disk)
    return plan


def check_plan_safety(
    plan: ReconcilePlan,
    *,
    assigned: Mapping[tuple[Uuid, int], str],
    on_disk: Sequence[LocalPartition],
) -> None:
    """Assert I11a on a plan, independently of how it was made: no entry moved aside is a live
    copy of an assigned partition, nor a directory without a readable id under an assigned
    partition's name (no evidence that it is stale); ``partition.metadata`` is written only into
    such a directory whose partition has no live copy; nothing is created that already has a live
    copy or is adopted; and every move goes to a distinct, short enough name in ``deleting/``."""
    by_place = {(e.log_dir, e.dir_name): e for e in on_disk}
    assigned_names = {(name, partition): tid for (tid, partition), name in assigned.items()}
    for move in plan.move_aside:
        entry = by_place.get((move.log_dir, move.dir_name))
        assert entry is not None, f"plan moves an entry the scan did not see: {move}"
        key = entry.key
        assert key is None or entry.state is not EntryState.OK or key not in assigned, (
            f"I11a: plan moves aside {move.log_dir}/{move.dir_name}, a live copy of assigned "
            f"partition {key}"
        )
        assert entry.state not in _NO_ID_STATES or entry.parsed not in assigned_names, (
            f"I11a: plan moves aside {move.log_dir}/{move.dir_name}, named like an assigned "
            f"partition, without evidence that it is stale ({entry.state.value})"
        )
        assert entry.dir_name not in RESERVED_ENTRY_NAMES, move
        assert name_bytes(move.destination) <= DIR_NAME_BYTES_MAX, move
    destinations = [(m.log_dir, m.destination) for m in plan.move_aside]
    assert len(set(destinations)) == len(destinations), destinations
    live = {e.key for e in on_disk if e.state is EntryState.OK and e.key is not None}
    written: set[tuple[Uuid, int]] = set()
    for write in plan.write_metadata:
        key = (write.topic_id, write.partition)
        entry = by_place.get((write.log_dir, write.dir_name))
        assert entry is not None, f"plan writes into an entry the scan did not see: {write}"
        assert entry.state is EntryState.METADATA_MISSING, f"would overwrite: {write} {entry}"
        parsed = entry.parsed
        assert parsed is not None and assigned_names.get(parsed) == write.topic_id, write
        assert parsed[1] == write.partition, write
        assert key not in live and key not in written, f"second copy of {key}: {write}"
        written.add(key)
    for create in plan.creates:
        key = (create.topic_id, create.partition)
        assert key in assigned, f"plan creates an unassigned partition: {create}"
        assert key not in live, f"plan creates a partition that has a live copy: {create}"
        assert key not in written, f"plan creates a partition it adopts: {create}"


def apply_plan(
    on_disk: Sequence[LocalPartition],
    pending_deletions: Sequence[PendingDeletion],
    plan: ReconcilePlan,
) -> tuple[tuple[LocalPartition, ...], tuple[PendingDeletion, ...]]:
    """The model of ``LogDirs.execute``: what a scan sees after the plan ran without errors."""
    moved = {(m.log_dir, m.dir_name) for m in plan.move_aside}
    written = {(w.log_dir, w.dir_name): w.topic_id for w in plan.write_metadata}
    entries = [
        replace(e, state=EntryState.OK, topic_id=written[(e.log_dir, e.dir_name)], detail="")
        if (e.log_dir, e.dir_name) in written
        else e
        for e in on_disk
        if (e.log_dir, e.dir_name) not in moved
    ]
    entries += [
        LocalPartition(c.log_dir, c.dir_name, EntryState.OK, c.topic_id) for c in plan.creates
    ]
    deleted = {(d.log_dir, d.name) for d in plan.deletes}
    scheduled = {(s.log_dir, s.name): s.delete_at_ms for s in plan.schedules}
    pending = [
        replace(p, delete_at_ms=scheduled.get((p.log_dir, p.name), p.delete_at_ms))
        for p in pending_deletions
        if (p.log_dir, p.name) not in deleted
    ]
    pending += [
        PendingDeletion(
            log_dir=m.log_dir,
            name=m.destination,
            delete_at_ms=m.delete_at_ms,
            topic_id=m.topic_id,
            partition=m.partition,
            reason=m.reason.value,
            source=m.dir_name,
        )
        for m in plan.move_aside
    ]
    return tuple(entries), tuple(pending)


# ----- the I11 checker ------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class LiveCopy:
    """A live partition directory and its identity on disk (st_dev, st_ino)."""

    path: str
    identity: tuple[int, int]


@dataclass(frozen=True, slots=True)
class DiskSnapshot:
    """What the I11 checker sees in a broker's log dirs (``logdirs.snapshot_log_dirs``):
    ``live`` partition directories by (topic_id, partition), and ``strays``, every other entry
    a converged broker must not have (paths)."""

    live: Mapping[tuple[Uuid, int], tuple[LiveCopy, ...]]
    strays: tuple[str, ...]


def i11_violations(
    *,
    assigned: Collection[tuple[Uuid, int]],
    before: DiskSnapshot,
    after: DiskSnapshot,
) -> list[str]:
    """docs/invariants.md I11 after a FULL reconciliation converged; empty when it holds.

    (a) every live copy of an assigned partition before is still the same directory after (same
    inode: not moved aside and recreated); the live set equals the assigned set, one copy each;
    (b) no stray is left in the log dirs.
    """
    violations: list[str] = []
    for key in sorted(assigned):
        still = {copy.identity for copy in after.live.get(key, ())}
        for copy in before.live.get(key, ()):
            if copy.identity not in still:
                violations.append(
                    f"I11a: {copy.path} held assigned partition {key[0]}_{key[1]} and is gone"
                )
    for key in sorted(set(assigned) - set(after.live)):
        violations.append(f"I11: assigned partition {key[0]}_{key[1]} has no directory")
    for key in sorted(set(after.live) - set(assigned)):
        paths = [copy.path for copy in after.live[key]]
        violations.append(f"I11b: {paths} hold {key[0]}_{key[1]}, not assigned here")
    for key, copies in sorted(after.live.items()):
        if len(copies) > 1:
            violations.append(f"I11: {key[0]}_{key[1]} has {len(copies)} live copies")
    violations.extend(f"I11b: stray {path} was not moved aside" for path in after.strays)
    return violations
