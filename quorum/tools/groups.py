"""``metaquorum groups``: Kafka 4.4's ``kafka-consumer-groups.sh`` (``ConsumerGroupCommand``) over
Kafka's protocol, through the brokers' Kafka listener (``quorum/tools/groups_admin.py`` speaks
it with confluent-kafka's AdminClient).

Options, validation messages, exit codes and output are Kafka's, checked side by side with
Kafka's own tool (tests/process/test_groups_tool_process.py)::

    metaquorum groups --bootstrap-server H:P --command-config client.properties --list
    metaquorum groups ... --describe --group orders-app [--members [--verbose] | --state]

    GROUP           TOPIC           PARTITION  CURRENT-OFFSET  LOG-END-OFFSET  LAG  ...
    orders-app      orders          0          10              10              0    ...

Kafka's habits kept on purpose, so that scripts written for its tool work unchanged:

* a usage error prints its message on stderr and exits 1 (this module's ``GroupsUsageError``);
* an error while running (a group that does not exist, a refused request) prints
  ``Error: ...`` on **stdout** and exits **0**, as Kafka's tool does;
* ``--reset-offsets`` without ``--execute`` is a dry run, with Kafka's warning on stderr;
* where Kafka prints a Java ``HashMap`` (the reset table, the deleted groups), rows come in the
  same order: ``java_hash_order`` reproduces the map's iteration order.

Not Kafka's: ``--list`` is sorted by group id (Kafka's order is its coordinator's, out of a
client's reach). Not supported (an error that says so): ``--validate-regex``.
"""

from __future__ import annotations

import csv
import re
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path
from typing import IO, Final, Protocol, TypeAlias, TypeVar

from quorum.tools.groups_options import (
    SCENARIOS,
    GroupsCommand,
    GroupsUsageError,
    add_groups_arguments,
    command_from_args,
)

__all__ = [
    "GroupDescription",
    "GroupListing",
    "GroupsAdmin",
    "GroupsCommand",
    "GroupsError",
    "GroupsUsageError",
    "Member",
    "add_groups_arguments",
    "command_from_args",
    "java_hash_order",
    "run_groups",
]

TP: TypeAlias = tuple[str, int]
"""A topic partition: (topic, partition)."""

MISSING: Final = "-"
ERRORS_PACKAGE: Final = "org.apache.kafka.common.errors."
_DURATION: Final = re.compile(
    r"([-+]?)P(?:([-+]?[0-9]+)D)?"
    r"(T(?:([-+]?[0-9]+)H)?(?:([-+]?[0-9]+)M)?(?:([-+]?[0-9]+)(?:[.,]([0-9]{0,9}))?S)?)?",
    re.IGNORECASE,
)
_DATETIME: Final = re.compile(
    r"(\d{4})-(\d{2})-(\d{2})T(\d{2}):(\d{2}):(\d{2})\.(\d{3})"
    r"(Z|[+-]\d{2}(?::?\d{2})?)?"
)


class GroupsError(Exception):
    """A failure while running, named as Kafka's Java client names it: ``java_class`` (e.g.
    ``org.apache.kafka.common.errors.GroupIdNotFoundException``) and its message."""

    def __init__(self, java_class: str, message: str, name: str | None = None) -> None:
        super().__init__(f"{java_class}: {message}" if java_class else message)
        self.java_class = java_class
        self.message = message
        self.name = name
        """Kafka's error name (``GROUP_ID_NOT_FOUND``) when the error came with one."""


def kafka_error(name: str, message: str) -> GroupsError:
    """The Java exception Kafka's client raises for error ``name`` (``GROUP_ID_NOT_FOUND``)."""
    java_class = JAVA_EXCEPTIONS.get(name)
    if java_class is None:
        java_class = "".join(part.title() for part in name.strip("_").split("_")) + "Exception"
    return GroupsError(ERRORS_PACKAGE + java_class, message, name)


# Kafka's error names whose exception class is not the name in CamelCase + "Exception".
JAVA_EXCEPTIONS: Final = {
    "NON_EMPTY_GROUP": "GroupNotEmptyException",
    "GROUP_AUTHORIZATION_FAILED": "GroupAuthorizationException",
    "TOPIC_AUTHORIZATION_FAILED": "TopicAuthorizationException",
    "CLUSTER_AUTHORIZATION_FAILED": "ClusterAuthorizationException",
    "REQUEST_TIMED_OUT": "TimeoutException",
    "_TIMED_OUT": "TimeoutException",
    "_TRANSPORT": "DisconnectException",
    "_UNSUPPORTED_FEATURE": "UnsupportedVersionException",
    "_SSL": "SslAuthenticationException",
    "_AUTHENTICATION": "SslAuthenticationException",
}
# Kafka's own message of an error (``Errors.message()``), printed where Kafka prints it.
KAFKA_MESSAGES: Final = {
    "GROUP_ID_NOT_FOUND": "The group id does not exist.",
    "NON_EMPTY_GROUP": "The group is not empty.",
    "GROUP_SUBSCRIBED_TO_TOPIC": "Deleting offsets of a topic is forbidden while the consumer "
    "group is actively subscribed to it.",
    "UNKNOWN_TOPIC_OR_PARTITION": "This server does not host this topic-partition.",
    "GROUP_AUTHORIZATION_FAILED": "Group authorization failed.",
    "TOPIC_AUTHORIZATION_FAILED": "Topic authorization failed.",
    "CLUSTER_AUTHORIZATION_FAILED": "Cluster authorization failed.",
    "INVALID_GROUP_ID": "The configured groupId is invalid.",
    "COORDINATOR_NOT_AVAILABLE": "The coordinator is not available.",
    "NOT_COORDINATOR": "This is not the correct coordinator.",
    "COORDINATOR_LOAD_IN_PROGRESS": "The coordinator is loading and hence can't process requests.",
}


# ----- what the admin client answers ----------------------------------------------------------


@dataclass(frozen=True, slots=True)
class GroupListing:
    group_id: str
    state: str  # Kafka's GroupState name: "Stable", "Empty", ...
    type: str  # "Classic", "Consumer", ...


@dataclass(frozen=True, slots=True)
class Member:
    consumer_id: str
    host: str
    client_id: str
    assignment: tuple[TP, ...]
    group_instance_id: str = ""
    target_assignment: tuple[TP, ...] = ()
    member_epoch: int | None = None


@dataclass(frozen=True, slots=True)
class GroupDescription:
    group_id: str
    state: str
    coordinator_host: str
    coordinator_port: int
    coordinator_id: int
    partition_assignor: str = ""
    members: tuple[Member, ...] = ()
    group_epoch: int | None = None
    target_assignment_epoch: int | None = None


Committed: TypeAlias = Mapping[TP, tuple[int, int | None]]
"""Committed offsets: (topic, partition) -> (offset, leader epoch or None)."""


class GroupsAdmin(Protocol):
    """The calls of Kafka's Admin that the command makes (``groups_admin.py`` implements them
    with confluent-kafka). Failures raise ``GroupsError``."""

    def list_groups(
        self, states: Sequence[str] = (), types: Sequence[str] = ()
    ) -> list[GroupListing]: ...

    def describe_groups(self, group_ids: Sequence[str]) -> dict[str, GroupDescription]: ...

    def committed_offsets(self, group_id: str) -> dict[TP, tuple[int, int | None]]: ...

    def topic_partitions(
        self, topics: Sequence[str]
    ) -> dict[str, list[tuple[int, bool]] | GroupsError]:
        """Per topic its partitions as (partition, has a leader), or its error."""
        ...

    def list_offsets(self, partitions: Sequence[TP], spec: str | int) -> dict[TP, int]:
        """``spec``: "earliest", "latest" or a timestamp (ms); -1 where none matches."""
        ...

    def alter_offsets(self, group_id: str, offsets: Mapping[TP, int]) -> None: ...

    def delete_groups(self, group_ids: Sequence[str]) -> dict[str, GroupsError | None]: ...

    def delete_offsets(
        self, group_id: str, partitions: Sequence[TP]
    ) -> tuple[str | None, dict[TP, GroupsError | None]]:
        """(the top-level error's name or None, each partition's error or None)."""
        ...


# ----- Java's HashMap order -------------------------------------------------------------------


def java_string_hash(text: str) -> int:
    """``String.hashCode()``: over UTF-16 code units, in 32-bit arithmetic."""
    value = 0
    data = text.encode("utf-16-be")
    for i in range(0, len(data), 2):
        value = (31 * value + ((data[i] << 8) | data[i + 1])) & 0xFFFFFFFF
    return value


def java_tp_hash(tp: TP) -> int:
    """``TopicPartition.hashCode()``."""
    return (31 * (31 + tp[1]) + java_string_hash(tp[0])) & 0xFFFFFFFF


K = TypeVar("K")


def java_hash_order(keys: Iterable[K], hash_of: Callable[[K], int]) -> list[K]:
    """The iteration order of a ``java.util.HashMap`` holding ``keys`` put in this order: by
    bucket (the spread hash masked by the table size, 16 doubled past 3/4 full), ties in
    insertion order."""
    ordered = list(dict.fromkeys(keys))
    capacity = 16
    while len(ordered) > capacity * 3 // 4:
        capacity *= 2

    def bucket(key: K) -> int:
        h = hash_of(key)
        return (h ^ (h >> 16)) & (capacity - 1)

    return sorted(ordered, key=bucket)


def _tp_text(tp: TP) -> str:
    return f"{tp[0]}-{tp[1]}"


# ----- running -------------------------------------------------------------------------------


@dataclass
class _Run:
    command: GroupsCommand
    admin: GroupsAdmin
    out: IO[str]
    err: IO[str]
    now_ms: Callable[[], int]

    def error(self, message: str) -> None:
        """Kafka's ``printError``: on stdout."""
        self.out.write(f"\nError: {message}\n")


def run_groups(
    command: GroupsCommand,
    admin: GroupsAdmin,
    out: IO[str],
    err: IO[str],
    *,
    now_ms: Callable[[], int] = lambda: time.time_ns() // 1_000_000,
) -> int:
    """Run ``command``; 0 (errors while running included, as Kafka), or 1 on a usage error
    found while running (its message on ``err``)."""
    run = _Run(command, admin, out, err, now_ms)
    if command.bad_argument is not None:
        run.error(f"Executing consumer group command failed due to {command.bad_argument}")
        return 0
    try:
        if command.action == "list":
            _list(run)
        elif command.action == "describe":
            _describe(run)
        elif command.action == "delete":
            _delete(run)
        elif command.action == "reset-offsets":
            _reset(run)
        else:
            _delete_offsets(run)
    except GroupsUsageError as exc:
        err.write(f"{exc}\n")
        return 1
    except GroupsError as exc:
        run.error(f"Executing consumer group command failed due to {exc}")
    return 0


def _group_ids(run: _Run) -> list[str]:
    if run.command.all_groups:
        return [g.group_id for g in run.admin.list_groups()]
    return list(run.command.groups)


def _list(run: _Run) -> None:
    """By group id: Kafka's tool prints its coordinator's internal order, which a client
    cannot reproduce."""
    states, types = run.command.list_states, run.command.list_types
    if states is None and types is None:
        for listing in sorted(run.admin.list_groups(), key=lambda g: g.group_id):
            run.out.write(f"{listing.group_id}\n")
        return
    listings = sorted(run.admin.list_groups(states or (), types or ()), key=lambda g: g.group_id)
    run.out.write(format_listings(listings, types is not None, states is not None))


def format_listings(listings: Sequence[GroupListing], with_type: bool, with_state: bool) -> str:
    width = max((max(15, len(g.group_id)) for g in listings), default=15) + 10
    columns: list[tuple[str, Callable[[GroupListing], str], int]] = [
        ("GROUP", lambda g: g.group_id, width)
    ]
    if with_type:
        columns.append(("TYPE", lambda g: g.type, 20))
    if with_state:
        columns.append(("STATE", lambda g: g.state, 20))

    def line(cells: Sequence[str]) -> str:
        return " ".join(cell.ljust(w) for cell, (_, _, w) in zip(cells, columns, strict=True))

    lines = [line([name for name, _, _ in columns])]
    lines += [line([get(g) for _, get, _ in columns]) for g in listings]
    return "".join(f"{text}\n" for text in lines)


# ----- describe ------------------------------------------------------------------------------


def _describe_all(run: _Run, group_ids: Sequence[str]) -> dict[str, GroupDescription]:
    """Kafka's Admin fails a group that does not exist (GroupIdNotFoundException), and the
    command stops at the first such group it reads (its futures' map order)."""
    described = run.admin.describe_groups(group_ids)
    for group_id in java_hash_order(described, java_string_hash):
        if described[group_id].state == "Dead":
            raise GroupsError(
                ERRORS_PACKAGE + "GroupIdNotFoundException", f"Group {group_id} not found."
            )
    return described


def _member_state_ok(run: _Run, group_id: str, state: str, rows: int | None) -> bool:
    """Kafka's ``shouldPrintMemberState``."""
    if rows is None:
        run.error(f"The consumer group '{group_id}' does not exist.")
        return False
    if state == "Dead":
        run.error(f"Consumer group '{group_id}' does not exist.")
    elif state == "Empty":
        run.err.write(f"\nConsumer group '{group_id}' has no active members.\n")
    elif state in ("PreparingRebalance", "CompletingRebalance", "Assigning", "Reconciling"):
        run.err.write(f"\nWarning: Consumer group '{group_id}' is rebalancing.\n")
    elif state != "Stable":
        raise GroupsError(
            "org.apache.kafka.common.KafkaException",
            f"Expected a valid consumer group state, but found '{state}'.",
        )
    return state != "Dead" and rows > 0


def _describe(run: _Run) -> None:
    described = _describe_all(run, _group_ids(run))
    for group_id in sorted(described):
        group = described[group_id]
        if run.command.describe_what == "members":
            ok = _member_state_ok(run, group_id, group.state, len(group.members))
            run.out.write(format_members(group, run.command.verbose, widths_from_members=ok))
        elif run.command.describe_what == "state":
            if _member_state_ok(run, group_id, group.state, 1):
                run.out.write(format_state(group, run.command.verbose))
        else:
            rows = _offset_rows(run, group)
            if _member_state_ok(run, group_id, group.state, len(rows)):
                run.out.write(format_offsets(rows, run.command.verbose))


@dataclass(frozen=True, slots=True)
class OffsetRow:
    """Kafka's ``PartitionAssignmentState``; None prints as "-"."""

    group: str
    topic: str | None
    partition: int | None
    offset: int | None
    log_end_offset: int | None
    consumer_id: str
    host: str
    client_id: str
    leader_epoch: int | None = None

    @property
    def lag(self) -> int | None:
        if self.offset is None or self.offset == -1 or self.log_end_offset is None:
            return None
        return self.log_end_offset - self.offset


def _offset_rows(run: _Run, group: GroupDescription) -> list[OffsetRow]:
    """Kafka's ``collectGroupsOffsets``: the members' partitions (members with more partitions
    first), then the committed partitions no member holds."""
    committed = run.admin.committed_offsets(group.group_id)
    rows: list[OffsetRow] = []
    assigned: set[TP] = set()
    members = sorted(
        (m for m in group.members if m.assignment), key=lambda m: len(m.assignment), reverse=True
    )
    for member in members:
        assigned.update(member.assignment)
        rows += _partition_rows(
            run, group.group_id, member.assignment, committed, consumer_id=member.consumer_id,
            host=member.host, client_id=member.client_id,
        )  # fmt: skip
    unassigned = [tp for tp in committed if tp not in assigned]
    if unassigned:
        rows += _partition_rows(
            run, group.group_id, unassigned, committed, consumer_id=MISSING, host=MISSING,
            client_id=MISSING,
        )  # fmt: skip
    return rows


def _partition_rows(
    run: _Run,
    group_id: str,
    partitions: Iterable[TP],
    committed: Committed,
    *,
    consumer_id: str,
    host: str,
    client_id: str,
) -> list[OffsetRow]:
    partitions = list(dict.fromkeys(partitions))
    without_leader = set(_partitions_without_leader(run, partitions))
    with_leader = [tp for tp in partitions if tp not in without_leader]
    ends = run.admin.list_offsets(with_leader, "latest") if with_leader else {}
    rows = []
    for tp in partitions:
        offset, epoch = committed.get(tp, (None, None))
        rows.append(
            OffsetRow(group_id, tp[0], tp[1], offset, ends.get(tp), consumer_id, host, client_id,
                      epoch)
        )  # fmt: skip
    return sorted(rows, key=lambda r: (r.topic or "", -1 if r.partition is None else r.partition))


def _partitions_without_leader(run: _Run, partitions: Sequence[TP]) -> list[TP]:
    """Kafka's ``filterNoneLeaderPartitions``: a topic that cannot be described fails the
    command."""
    described = run.admin.topic_partitions(sorted({tp[0] for tp in partitions}))
    wanted = set(partitions)
    found = []
    for topic, answer in described.items():
        if isinstance(answer, GroupsError):
            raise GroupsError(f"java.util.concurrent.ExecutionException: {answer.java_class}",
                              answer.message)  # fmt: skip
        found += [(topic, p) for p, has_leader in answer if not has_leader and (topic, p) in wanted]
    return found


def _text(value: int | str | None) -> str:
    return MISSING if value is None else str(value)


def format_offsets(rows: Sequence[OffsetRow], verbose: bool) -> str:
    """Kafka's ``printOffsets`` for one group: each line starts with a newline (printf "\\n%s"),
    and one newline ends the table."""
    group_w = max([15, *(len(r.group) for r in rows)])
    topic_w = max([15, *(len(_text(r.topic)) for r in rows)])
    consumer_w = max([15, *(len(r.consumer_id) for r in rows)])
    host_w = max([15, *(len(r.host) for r in rows)])

    def line(cells: Sequence[str]) -> str:
        fixed = cells[2:-3]
        middle = " ".join(c.ljust(15 if i else 10) for i, c in enumerate(fixed))
        return (
            f"\n{cells[0].ljust(group_w)} {cells[1].ljust(topic_w)} {middle} "
            f"{cells[-3].ljust(consumer_w)} {cells[-2].ljust(host_w)} {cells[-1]}"
        )

    epoch = ["LEADER-EPOCH"] if verbose else []
    text = line(["GROUP", "TOPIC", "PARTITION", *epoch, "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG",
                 "CONSUMER-ID", "HOST", "CLIENT-ID"])  # fmt: skip
    for r in rows:
        epoch = [_text(r.leader_epoch)] if verbose else []
        text += line([
            r.group, _text(r.topic), _text(r.partition), *epoch, _text(r.offset),
            _text(r.log_end_offset), _text(r.lag), r.consumer_id, r.host, r.client_id,
        ])  # fmt: skip
    return text + "\n"


def assignment_text(partitions: Sequence[TP]) -> str:
    """Kafka's ``getAssignmentString``: ``topic:0,1,2`` per topic, topics joined by ``;``."""
    if not partitions:
        return MISSING
    by_topic: dict[str, list[int]] = {}
    for topic, partition in partitions:
        by_topic.setdefault(topic, []).append(partition)
    return ";".join(
        sorted(f"{t}:{','.join(str(p) for p in sorted(ps))}" for t, ps in by_topic.items())
    )


def format_members(group: GroupDescription, verbose: bool, *, widths_from_members: bool) -> str:
    """Kafka's ``printMembers`` for one group: the header always, widths from the members only
    when their state is printable (as Kafka computes them)."""
    members = group.members
    sized = members if widths_from_members else ()
    group_w = max([15, *(len(group.group_id) for _ in sized)])
    consumer_w = max([15, *(len(m.consumer_id) for m in sized)])
    instance_w = max([17, *(len(m.group_instance_id) for m in sized)])
    host_w = max([15, *(len(m.host) for m in sized)])
    client_w = max([15, *(len(m.client_id) for m in sized)])
    current_w = max([20, *(len(assignment_text(m.assignment)) for m in sized)])
    target_w = max([20, *(len(assignment_text(m.target_assignment)) for m in sized)])
    with_instance = any(m.group_instance_id for m in sized)

    def head(cells: Sequence[str]) -> str:
        widths = [group_w, consumer_w, *([instance_w] if with_instance else []), host_w,
                  client_w, 15]  # fmt: skip
        return "".join(f"{c.ljust(w)} " for c, w in zip(cells, widths, strict=True))

    def tail(cells: Sequence[str]) -> str:
        widths = [15, current_w, 15]
        padded = "".join(f"{c.ljust(w)} " for c, w in zip(cells[:3], widths, strict=True))
        return padded + cells[3].ljust(target_w)

    instance = ["GROUP-INSTANCE-ID"] if with_instance else []
    text = "\n" + head(["GROUP", "CONSUMER-ID", *instance, "HOST", "CLIENT-ID", "#PARTITIONS"])
    if verbose:
        text += tail(["CURRENT-EPOCH", "CURRENT-ASSIGNMENT", "TARGET-EPOCH", "TARGET-ASSIGNMENT"])
    text += "\n"
    for m in members:
        instance = [m.group_instance_id] if with_instance else []
        text += head([group.group_id, m.consumer_id, *instance, m.host, m.client_id,
                      str(len(m.assignment))])  # fmt: skip
        if verbose:
            text += tail([
                _text(m.member_epoch), assignment_text(m.assignment),
                _text(group.target_assignment_epoch), assignment_text(m.target_assignment),
            ])  # fmt: skip
        text += "\n"
    return text


def format_state(group: GroupDescription, verbose: bool) -> str:
    """Kafka's ``printStates`` for one group."""
    coordinator = f"{group.coordinator_host}:{group.coordinator_port}  ({group.coordinator_id})"
    coordinator_w = max(25, len(coordinator))
    group_w = max(15, len(group.group_id))
    strategy = group.partition_assignor or MISSING

    def line(cells: Sequence[str]) -> str:
        widths = [group_w, coordinator_w, 20, 20, *([15, 25] if verbose else [])]
        return (
            "\n"
            + "".join(f"{c.ljust(w)} " for c, w in zip(cells, widths, strict=False))
            + (cells[-1])
        )

    if verbose:
        return (
            line(["GROUP", "COORDINATOR (ID)", "ASSIGNMENT-STRATEGY", "STATE", "GROUP-EPOCH",
                  "TARGET-ASSIGNMENT-EPOCH", "#MEMBERS"])
            + line([group.group_id, coordinator, strategy, group.state, _text(group.group_epoch),
                    _text(group.target_assignment_epoch), str(len(group.members))])
            + "\n"
        )  # fmt: skip
    return (
        line(["GROUP", "COORDINATOR (ID)", "ASSIGNMENT-STRATEGY", "STATE", "#MEMBERS"])
        + line([group.group_id, coordinator, strategy, group.state, str(len(group.members))])
        + "\n"
    )


# ----- delete --------------------------------------------------------------------------------


def _delete(run: _Run) -> None:
    results = run.admin.delete_groups(_group_ids(run))
    succeeded = java_hash_order([g for g, e in results.items() if e is None], java_string_hash)
    failed = java_hash_order([g for g, e in results.items() if e is not None], java_string_hash)
    run.out.write(format_deletion(succeeded, [(g, results[g]) for g in failed]))


def format_deletion(succeeded: Sequence[str], failed: Sequence[tuple[str, object]]) -> str:
    quoted = ", ".join(f"'{g}'" for g in succeeded)
    if not failed:
        return f"Deletion of requested consumer groups ({quoted}) was successful.\n"
    text = "\nError: Deletion of some consumer groups failed:\n"
    text += "".join(f"* Group '{g}' could not be deleted due to: {e}\n" for g, e in failed)
    if succeeded:
        text += f"\nThese consumer groups were deleted successfully: {quoted}\n"
    return text


def _delete_offsets(run: _Run) -> None:
    group_id = run.command.groups[0]
    named: list[TP] = []
    whole: list[str] = []
    for topic in run.command.topics:
        if ":" in topic:
            named += parse_topic_partitions(topic)
        else:
            whole.append(topic)
    results: dict[TP, GroupsError | None] = {}
    partitions = list(dict.fromkeys(named))
    if whole:
        for topic, answer in run.admin.topic_partitions(sorted(set(whole))).items():
            if isinstance(answer, GroupsError):
                results[(topic, -1)] = answer
            else:
                partitions += [(topic, p) for p, _ in answer]
    top_level, per_partition = run.admin.delete_offsets(group_id, partitions)
    results.update(per_partition)
    if top_level is None:
        run.out.write(f"Request succeeded for deleting offsets from group {group_id}.\n")
    elif top_level in (
        "INVALID_GROUP_ID",
        "GROUP_ID_NOT_FOUND",
        "GROUP_AUTHORIZATION_FAILED",
        "NON_EMPTY_GROUP",
    ):
        run.error(KAFKA_MESSAGES[top_level])
    elif top_level in (
        "GROUP_SUBSCRIBED_TO_TOPIC",
        "TOPIC_AUTHORIZATION_FAILED",
        "UNKNOWN_TOPIC_OR_PARTITION",
    ):
        run.error("Encountered some partition-level error, see the follow-up details.")
    else:
        run.error(f"Encountered some unknown error: {top_level}")
    run.out.write(format_delete_offsets(results))


def format_delete_offsets(results: Mapping[TP, GroupsError | None]) -> str:
    """Kafka's table: sorted by topic name and partition number as one string."""
    topic_w = max([15, *(len(t) for t, _ in results)])
    text = f"\n{'TOPIC'.ljust(topic_w)} {'PARTITION'.ljust(10)} {'STATUS'.ljust(15)}"
    for tp in sorted(results, key=lambda tp: f"{tp[0]}{tp[1]}"):
        error = results[tp]
        status = "Successful" if error is None else f"Error: {error}"
        partition = str(tp[1]) if tp[1] >= 0 else MISSING
        text += f"\n{tp[0].ljust(topic_w)} {partition.ljust(10)} {status.ljust(15)}"
    return text + "\n"


# ----- reset-offsets -------------------------------------------------------------------------


def parse_topic_partitions(arg: str) -> list[TP]:
    """``topic:0,1,2`` (Kafka's ``parseTopicsWithPartitions``)."""
    parts = arg.split(":")
    while parts and parts[-1] == "":  # Java's split drops trailing empty strings
        parts.pop()
    if len(parts) != 2:
        raise GroupsUsageError(f"Invalid topic arg '{arg}', expected topic name and partitions")
    topic, partitions = parts
    result = []
    for text in partitions.split(","):
        try:
            result.append((topic, int(text)))
        except ValueError:
            raise GroupsUsageError(
                f"Invalid partition '{text}' specified in topic arg '{arg}''"
            ) from None
    return result


def _reset(run: _Run) -> None:
    group_ids = _group_ids(run)
    described = run.admin.describe_groups(group_ids)
    plans: dict[str, dict[TP, int]] = {}
    for group_id in java_hash_order(described, java_string_hash):
        state = described[group_id].state
        if state in ("Empty", "Dead"):
            plans[group_id] = _reset_inactive(run, group_id)
        else:
            run.error(
                f"Assignments can only be reset if the group '{group_id}' is inactive, but the "
                f"current state is {state}."
            )
            plans[group_id] = {}
    if run.command.export:
        run.out.write(format_reset_csv(plans, single_group=len(run.command.groups) == 1) + "\n")
    else:
        run.out.write(format_reset(plans))


def _reset_inactive(run: _Run, group_id: str) -> dict[TP, int]:
    command = run.command
    if command.all_topics:
        partitions = list(run.admin.committed_offsets(group_id))
    elif command.topics:
        partitions = _partitions_to_reset(run, command.topics)
    elif command.scenario == "from-file":
        partitions = []  # the file's partitions
    else:
        raise GroupsUsageError("One of the reset scopes should be defined: --all-topics, --topic.")
    _check_partitions_valid(run, partitions)
    plan = _prepare(run, group_id, partitions)
    if command.execute:
        run.admin.alter_offsets(group_id, plan)
    return plan


def _partitions_to_reset(run: _Run, topics: Sequence[str]) -> list[TP]:
    named: list[TP] = []
    whole = []
    for topic in topics:
        if ":" in topic:
            named += parse_topic_partitions(topic)
        else:
            whole.append(topic)
    if whole:
        described = run.admin.topic_partitions(list(dict.fromkeys(whole)))
        for topic in java_hash_order(described, java_string_hash):
            answer = described[topic]
            if isinstance(answer, GroupsError):
                raise GroupsError("", answer.message)  # Kafka prints this one's message alone
            named += [(topic, p) for p, _ in answer]
    return named


def _check_partitions_valid(run: _Run, partitions: Sequence[TP]) -> None:
    """Kafka's ``checkAllTopicPartitionsValid``."""
    described = run.admin.topic_partitions(sorted({tp[0] for tp in partitions}))
    existing: dict[TP, bool] = {}
    for topic, answer in described.items():
        if isinstance(answer, GroupsError):
            raise GroupsError(f"java.util.concurrent.ExecutionException: {answer.java_class}",
                              answer.message)  # fmt: skip
        existing.update({(topic, p): leader for p, leader in answer})
    missing = [tp for tp in partitions if tp not in existing]
    if missing:
        listed = ",".join(_tp_text(tp) for tp in missing)
        raise GroupsError("", f'The partitions "{listed}" do not exist')
    leaderless = [tp for tp in partitions if not existing[tp]]
    if leaderless:
        listed = ",".join(_tp_text(tp) for tp in leaderless)
        raise GroupsError("", f'The partitions "{listed}" have no leader')


def _in_order(partitions: Iterable[TP]) -> list[TP]:
    return java_hash_order(partitions, java_tp_hash)


def _prepare(run: _Run, group_id: str, partitions: Sequence[TP]) -> dict[TP, int]:
    scenario, value = run.command.scenario, run.command.scenario_value
    if scenario == "to-offset":
        return _clamp(run, dict.fromkeys(partitions, int(value or 0)))
    if scenario in ("to-earliest", "to-latest"):
        spec = "earliest" if scenario == "to-earliest" else "latest"
        offsets = run.admin.list_offsets(partitions, spec)
        return {tp: offsets[tp] for tp in _in_order(partitions)}
    if scenario in ("shift-by", "to-current"):
        committed = run.admin.committed_offsets(group_id)
        if scenario == "to-current":
            without = [tp for tp in partitions if tp not in committed]
            ends = run.admin.list_offsets(without, "latest") if without else {}
            plan = {tp: committed[tp][0] for tp in partitions if tp in committed}
            return {tp: plan.get(tp, ends.get(tp, -1)) for tp in _in_order(partitions)}
        shift = int(value or 0)
        wanted: dict[TP, int] = {}
        for tp in partitions:
            if tp not in committed:
                raise GroupsUsageError(
                    f"Cannot shift offset for partition {_tp_text(tp)} since there is no "
                    "current committed offset"
                )
            wanted[tp] = committed[tp][0] + shift
        return _clamp(run, wanted)
    if scenario == "from-file":
        from_file = read_reset_plan(value or "", run.command.groups).get(group_id)
        if from_file is None:
            run.error(f"No reset plan for group {group_id} found.")
            return {}
        return _clamp(run, from_file)
    if scenario == "to-datetime":
        return _by_timestamp(run, partitions, parse_datetime_ms(value or ""))
    if scenario == "by-duration":
        return _by_timestamp(run, partitions, run.now_ms() - parse_duration_ms(value or ""))
    raise GroupsUsageError(
        f"Option '[reset-offsets]' requires one of the following scenarios: {SCENARIOS}"
    )


def _clamp(run: _Run, wanted: Mapping[TP, int]) -> dict[TP, int]:
    """Kafka's ``checkOffsetsRange``: into [log start, log end], with its warnings."""
    order = _in_order(wanted)
    starts = run.admin.list_offsets(order, "earliest")
    ends = run.admin.list_offsets(order, "latest")
    result = {}
    for tp in order:
        offset = wanted[tp]
        if offset > ends[tp]:
            run.err.write(
                f"WARN New offset ({offset}) is higher than latest offset for topic partition "
                f"{_tp_text(tp)}. Value will be set to {ends[tp]}.\n"
            )
            offset = ends[tp]
        elif offset < starts[tp]:
            run.err.write(
                f"WARN New offset ({offset}) is lower than earliest offset for topic partition "
                f"{_tp_text(tp)}. Value will be set to {starts[tp]}.\n"
            )
            offset = starts[tp]
        result[tp] = offset
    return result


def _by_timestamp(run: _Run, partitions: Sequence[TP], timestamp_ms: int) -> dict[TP, int]:
    found = run.admin.list_offsets(partitions, timestamp_ms)
    empty = [tp for tp in _in_order(partitions) if found.get(tp, -1) == -1]
    for tp in empty:
        run.out.write(
            f"\nWarn: Partition {tp[1]} from topic {tp[0]} is empty. Falling back to latest "
            "known offset.\n"
        )
    ends = run.admin.list_offsets(empty, "latest") if empty else {}
    return {tp: ends[tp] if tp in ends else found[tp] for tp in _in_order(partitions)}


def read_reset_plan(path: str, groups: Sequence[str]) -> dict[str, dict[TP, int]]:
    """``--from-file``: Kafka's CSV, ``topic,partition,offset`` lines for one group (``--group``
    given once) or ``group,topic,partition,offset`` lines (what ``--export`` prints)."""
    try:
        text = Path(path).read_text()
    except OSError:
        raise GroupsError("java.io.IOException", f"Unable to read file {path}") from None
    lines = text.split("\n")
    while lines and lines[-1] == "":  # Java's split drops trailing empty strings
        lines.pop()
    rows = [next(csv.reader([line])) for line in lines]

    def number(cell: str) -> int:
        if re.fullmatch(r"[+-]?[0-9]+", cell.strip()) is None:
            raise GroupsError(
                "java.lang.RuntimeException", f"not a number in the reset plan: {cell!r}"
            )
        return int(cell)

    old_format = bool(rows) and len(rows[0]) == 3
    plans: dict[str, dict[TP, int]] = {}
    for row in rows:
        if len(groups) == 1 and old_format and len(row) == 3:
            group, (topic, partition, offset) = groups[0], row
        elif len(row) == 4:
            group, topic, partition, offset = row
        else:
            raise GroupsError(
                "java.lang.RuntimeException", f"a reset plan line of {len(row)} values: {row}"
            )
        plans.setdefault(group, {})[(topic, number(partition))] = number(offset)
    return plans


def parse_datetime_ms(text: str) -> int:
    """Kafka's ``Utils.getDateTime``: ``YYYY-MM-DDThh:mm:ss.sss``, UTC unless a zone
    (``Z``, ``+hh:mm``, ``+hhmm``, ``+hh``) follows."""
    match = _DATETIME.fullmatch(text)
    if match is None:
        raise GroupsError("java.text.ParseException", f'Unparseable date: "{text}"')
    year, month, day, hour, minute, second, millis = (int(g) for g in match.groups()[:7])
    zone = match.group(8)
    tz = UTC
    if zone and zone != "Z":
        sign = -1 if zone[0] == "-" else 1
        digits = zone[1:].replace(":", "")
        offset = timedelta(hours=int(digits[:2]), minutes=int(digits[2:4] or 0))
        tz = timezone(sign * offset)
    try:
        moment = datetime(year, month, day, hour, minute, second, millis * 1000, tzinfo=tz)
    except ValueError:
        raise GroupsError("java.text.ParseException", f'Unparseable date: "{text}"') from None
    return int(moment.timestamp() * 1000)


def parse_duration_ms(text: str) -> int:
    """Java's ``Duration.parse`` (``PnDTnHnMn.nS``), in milliseconds."""
    match = _DURATION.fullmatch(text)
    if match is None or (match.group(2) is None and match.group(3) in (None, "T")):
        raise GroupsError(
            "java.time.format.DateTimeParseException", "Text cannot be parsed to a Duration"
        )
    negate, days, _, hours, minutes, seconds, fraction = match.groups()
    total = timedelta(
        days=int(days or 0),
        hours=int(hours or 0),
        minutes=int(minutes or 0),
        seconds=int(seconds or 0),
    )
    millis = int(total.total_seconds() * 1000)
    if fraction:
        frac_ms = int((fraction + "000")[:3])
        millis += -frac_ms if (seconds or "").startswith("-") else frac_ms
    return -millis if negate == "-" else millis


def format_reset(plans: Mapping[str, Mapping[TP, int]]) -> str:
    """Kafka's ``printOffsetsToReset``: the header when any group was asked, then each row."""
    group_w = max([15, *(len(g) for g in plans)])
    topic_w = max([15, *(len(tp[0]) for plan in plans.values() for tp in plan)])

    def line(cells: Sequence[str]) -> str:
        return (
            f"\n{cells[0].ljust(group_w)} {cells[1].ljust(topic_w)} {cells[2].ljust(10)} {cells[3]}"
        )

    text = line(["GROUP", "TOPIC", "PARTITION", "NEW-OFFSET"]) if plans else ""
    for group_id, plan in plans.items():
        for tp in _in_order(plan):
            text += line([group_id, tp[0], str(tp[1]), str(plan[tp])])
    return text + "\n"


def _csv_cell(value: str) -> str:
    """Jackson's CSV quoting, as Kafka's export writes a name: quoted when longer than 24
    characters (Jackson quotes those without looking) or when a character sorts below '-'
    (space, '"', ',', ...); measured: ``payments-with-a-long-name`` is quoted, ``csv-2`` and
    ``a.b_c`` are not."""
    if len(value) > 24 or any(ord(c) < ord("-") for c in value):
        return '"' + value.replace('"', '""') + '"'
    return value


def format_reset_csv(plans: Mapping[str, Mapping[TP, int]], *, single_group: bool) -> str:
    """``--export``: ``topic,partition,offset`` per line (``group,`` first with several
    groups), as Kafka's CsvUtils writes them."""
    lines = []
    for group_id, plan in plans.items():
        for tp in _in_order(plan):
            cells = [tp[0], str(tp[1]), str(plan[tp])]
            if not single_group:
                cells.insert(0, group_id)
            lines.append(",".join(_csv_cell(c) if not c.isdigit() else c for c in cells) + "\n")
    return "".join(lines)
