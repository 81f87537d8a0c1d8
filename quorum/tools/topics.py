"""``metaquorum topics``: ``kafka-topics.sh`` over the ``AdminClient``.

Flags are kafka-topics': ``--bootstrap-server`` or ``--bootstrap-controller`` (either name, a
controller's listener ``HOST:PORT[,HOST:PORT...]``), one of ``--create``, ``--describe``,
``--delete``, ``--list`` (or the same words as a subcommand, ``metaquorum topics create ...``,
as docs/architecture.md#interfaces lists them), ``--topic``, ``--topic-id``, ``--partitions``,
``--replication-factor``, ``--config k=v`` (repeatable), ``--replica-assignment``,
``--if-exists``, ``--if-not-exists``, ``--exclude-internal``. One flag of ours: ``--timeout-ms``,
the deadline of each admin call (Kafka reads it from ``--command-config``).

Behaviour, and where it differs from kafka-topics:

- ``--create`` prints ``Created topic T.``; with ``--if-not-exists`` an existing topic is not an
  error and prints nothing. Omitted ``--partitions`` / ``--replication-factor`` use the
  cluster's defaults.
- ``--describe`` prints Kafka's tab-separated lines, one per topic and one per partition (shown
  here folded, with the tabs as ``|``)::

      Topic: orders|TopicId: ah0vHnqLTD2eDxEiM0RVZg|PartitionCount: 2|ReplicationFactor: 2|
          Configs: cleanup.policy=compact|CreationOffset: 42
      |Topic: orders|Partition: 0|Leader: 1|Replicas: 1,2|Isr: 1,2|Elr: N/A|LastKnownElr: N/A

  ``TopicId`` is left out when it is ZERO_UUID and ``Leader: none`` means no leader, as in
  Kafka. ``CreationOffset`` is ours: the offset of the topic's TopicRecord, which with the id
  is the topic's identity (docs/architecture.md#the-controller); it comes last on the line, where
  Kafka puts ``MarkedForDeletion``, so parsers of Kafka's output keep working; it is left out when
  unknown (-1). Configs are the explicitly set ones, sorted by key. There is no ELR, so
  ``Elr`` / ``LastKnownElr`` are ``N/A``. Without ``--topic`` / ``--topic-id`` every topic is
  described (sorted by name; ``--exclude-internal`` leaves internal ones out): the tool lists
  the topics, then describes them by id at the listing's metadata offset, so a topic deleted
  in between is left out rather than reported.
- ``--delete`` prints nothing on success (as Kafka); ``--if-exists`` makes an unknown topic
  not an error (also with ``--describe``).
- ``--list`` prints topic names, sorted, one per line.
- ``--topic`` is an exact name, or several separated by commas (topic names cannot contain
  commas). Kafka reads it as a regular expression for describe, delete and list; exact names
  keep ``--delete --topic a.b`` from deleting ``aXb``. ``--topic-id`` names one topic by id
  for describe and delete; given both, only the id is used (as Kafka).

Errors go to stderr as ``Error while executing topic command : <ERROR_NAME>: <message>`` (the
Kafka error name, e.g. TOPIC_ALREADY_EXISTS; a gRPC status name for a transport failure), and
the exit code is 1. With several topics, the ones that succeed are still printed. Flags that do
not fit together raise ``TopicCommandError`` (the CLI prints it as a usage error, exit 1).
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final, Literal, TextIO

from quorum.admin import (
    AdminClient,
    AdminError,
    NewPartitions,
    NewTopic,
    TopicCollection,
    TopicDescription,
    TopicExistsError,
    TopicListing,
    TopicOutcome,
    TopicPartitionInfo,
    UnknownTopicIdError,
    UnknownTopicOrPartitionError,
    parse_bootstrap,
)
from quorum.ids import ZERO_UUID, InvalidUuidError, Uuid
from quorum.security.tls import command_security

Action = Literal["create", "alter", "describe", "delete", "list"]
ACTIONS: Final[tuple[Action, ...]] = ("create", "alter", "describe", "delete", "list")
ERROR_PREFIX: Final = "Error while executing topic command : "
TIMEOUT_MS_DEFAULT: Final = 30_000
NO_OFFSET: Final = -1


class TopicCommandError(Exception):
    """The flags given do not make a command; the message says which and why."""


@dataclass(frozen=True, slots=True)
class TopicCommand:
    """One ``metaquorum topics`` invocation, checked."""

    action: Action
    bootstrap: tuple[str, ...]
    topics: tuple[str, ...] = ()
    topic_id: Uuid | None = None
    partitions: int | None = None
    replication_factor: int | None = None
    configs: Mapping[str, str] = field(default_factory=dict)
    replica_assignment: Mapping[int, tuple[int, ...]] | None = None
    if_exists: bool = False
    if_not_exists: bool = False
    exclude_internal: bool = False
    # --describe filters (kafka-topics'): only these partitions, and no topic lines.
    under_replicated_partitions: bool = False
    unavailable_partitions: bool = False
    timeout_s: float = TIMEOUT_MS_DEFAULT / 1000
    # --command-config: Kafka client properties (security.protocol, ssl.*); None: PLAINTEXT.
    command_config: Path | None = None


# ----- parsing -----------------------------------------------------------------------------------


def parse_configs(entries: Iterable[str]) -> dict[str, str]:
    """``--config k=v`` entries (the value may contain ``=``); a later key wins, as in Kafka."""
    configs: dict[str, str] = {}
    for entry in entries:
        key, sep, value = entry.partition("=")
        if not sep or not key.strip():
            raise TopicCommandError(
                f"Invalid topic config {entry!r}: all configs to be added must be in the format "
                '"key=val".'
            )
        configs[key.strip()] = value.strip()
    return configs


def parse_replica_assignment(text: str) -> dict[int, tuple[int, ...]]:
    """Kafka's ``--replica-assignment``: partitions separated by commas, each partition's
    brokers by colons, the preferred leader first: ``1:2,2:3,3:1`` is three partitions."""
    assignment: dict[int, tuple[int, ...]] = {}
    for partition, item in enumerate(text.split(",")):
        try:
            brokers = tuple(int(broker) for broker in item.strip().split(":"))
        except ValueError:
            raise TopicCommandError(
                f"--replica-assignment: {item!r} is not broker ids separated by ':' "
                "(e.g. 1:2,2:3 for two partitions on brokers 1,2 and 2,3)"
            ) from None
        if len(set(brokers)) != len(brokers):
            raise TopicCommandError(
                f"--replica-assignment: partition {partition} lists a broker twice: {item!r}"
            )
        assignment[partition] = brokers
    return assignment


def parse_topic_names(text: str) -> tuple[str, ...]:
    names = tuple(dict.fromkeys(name.strip() for name in text.split(",")))
    if any(not name for name in names):
        raise TopicCommandError(f"--topic {text!r}: a topic name is empty")
    return names


def _only_with(flag: str, allowed: Sequence[Action], action: str) -> None:
    if action not in allowed:
        alternatives = " or ".join(f"--{a}" for a in allowed)
        raise TopicCommandError(f"Option --{flag} can only be used with {alternatives}")


def command_from_args(args: argparse.Namespace) -> TopicCommand:
    """Check the flags as kafka-topics does and build the command.

    ``args`` is what ``metaquorum topics`` parsed: ``action`` (the subcommand word or None),
    ``do_create`` / ``do_describe`` / ``do_delete`` / ``do_list``, ``bootstrap_server``,
    ``bootstrap_controller``, ``topic``, ``topic_id``, ``partitions``, ``replication_factor``,
    ``config``, ``replica_assignment``, ``if_exists``, ``if_not_exists``, ``exclude_internal``,
    ``timeout_ms``.
    """
    flagged: list[Action] = [a for a in ACTIONS if getattr(args, f"do_{a}", False)]
    word: Action | None = args.action
    chosen = set(flagged) | ({word} if word else set())
    if len(chosen) != 1:
        raise TopicCommandError(
            "Command must include exactly one action: --list, --describe, --create or --delete"
        )
    (action,) = chosen

    bootstrap_text: str | None = args.bootstrap_server or args.bootstrap_controller
    if not bootstrap_text:
        raise TopicCommandError(
            "One of --bootstrap-server or --bootstrap-controller must be specified"
        )
    try:
        bootstrap = tuple(parse_bootstrap(bootstrap_text))
    except ValueError as exc:
        raise TopicCommandError(f"--bootstrap-server: {exc}") from None

    topic_text: str | None = args.topic
    topics = parse_topic_names(topic_text) if topic_text is not None else ()
    topic_id: Uuid | None = None
    if args.topic_id is not None:
        _only_with("topic-id", ("describe", "delete"), action)
        try:
            topic_id = Uuid.parse(args.topic_id)
        except InvalidUuidError as exc:
            raise TopicCommandError(f"--topic-id: {exc}") from None
        if topic_id == ZERO_UUID:
            raise TopicCommandError(f"--topic-id: {topic_id} (ZERO_UUID) names no topic")

    partitions: int | None = args.partitions
    replication_factor: int | None = args.replication_factor
    config_entries: list[str] = args.config or []
    assignment_text: str | None = args.replica_assignment
    if partitions is not None:
        _only_with("partitions", ("create", "alter"), action)
    if replication_factor is not None:
        _only_with("replication-factor", ("create",), action)
    if config_entries:
        _only_with("config", ("create",), action)
    replica_assignment = None
    if assignment_text is not None:
        _only_with("replica-assignment", ("create", "alter"), action)
        if action == "create" and (partitions is not None or replication_factor is not None):
            raise TopicCommandError(
                "Option --replica-assignment can't be used with --partitions or "
                "--replication-factor"
            )
        replica_assignment = parse_replica_assignment(assignment_text)
    if args.if_not_exists:
        _only_with("if-not-exists", ("create",), action)
    if args.if_exists:
        _only_with("if-exists", ("describe", "alter", "delete"), action)
    if args.exclude_internal:
        _only_with("exclude-internal", ("describe", "list"), action)
    under_replicated = bool(getattr(args, "under_replicated_partitions", False))
    unavailable = bool(getattr(args, "unavailable_partitions", False))
    if under_replicated:
        _only_with("under-replicated-partitions", ("describe",), action)
    if unavailable:
        _only_with("unavailable-partitions", ("describe",), action)

    if action == "create":
        if len(topics) != 1:
            raise TopicCommandError("--create needs exactly one --topic")
    elif action == "delete" and not topics and topic_id is None:
        raise TopicCommandError("--delete needs --topic or --topic-id")
    elif action == "alter":
        if not topics:
            raise TopicCommandError("--alter needs --topic")
        if partitions is None:
            raise TopicCommandError(
                "--alter needs --partitions N, the new partition count (only adding partitions "
                "is supported: configs change with --config on --create only)"
            )
        if replica_assignment is not None and len(replica_assignment) != partitions:
            raise TopicCommandError(
                f"--replica-assignment lists {len(replica_assignment)} partition(s) but "
                f"--partitions is {partitions}: with --alter, give the replicas of every "
                "partition, existing ones included (their entries are skipped)"
            )

    timeout_ms: int = args.timeout_ms
    if timeout_ms <= 0:
        raise TopicCommandError(f"--timeout-ms must be > 0, got {timeout_ms}")
    return TopicCommand(
        action=action,
        bootstrap=bootstrap,
        topics=topics,
        topic_id=topic_id,
        partitions=partitions,
        replication_factor=replication_factor,
        configs=parse_configs(config_entries),
        replica_assignment=replica_assignment,
        if_exists=bool(args.if_exists),
        if_not_exists=bool(args.if_not_exists),
        exclude_internal=bool(args.exclude_internal),
        under_replicated_partitions=under_replicated,
        unavailable_partitions=unavailable,
        timeout_s=timeout_ms / 1000,
        command_config=getattr(args, "command_config", None),
    )


# ----- pure formatting ---------------------------------------------------------------------------


def format_configs(configs: Mapping[str, str]) -> str:
    """``k=v`` entries sorted by key, joined by commas (kafka-topics' ``Configs:`` value)."""
    return ",".join(f"{key}={configs[key]}" for key in sorted(configs))


def format_topic_line(description: TopicDescription) -> str:
    """The first line of a topic's description (no trailing newline)."""
    fields = [f"Topic: {description.name}"]
    if description.topic_id != ZERO_UUID:
        fields.append(f"TopicId: {description.topic_id}")
    fields.append(f"PartitionCount: {len(description.partitions)}")
    fields.append(f"ReplicationFactor: {description.replication_factor}")
    fields.append(f"Configs: {format_configs(description.configs)}")
    if description.creation_offset >= 0:
        fields.append(f"CreationOffset: {description.creation_offset}")
    return "\t".join(fields)


def format_partition_line(topic: str, partition: TopicPartitionInfo) -> str:
    """One partition's line, starting with a tab (no trailing newline)."""
    leader = "none" if partition.leader is None else str(partition.leader)
    return "\t".join(
        (
            "",
            f"Topic: {topic}",
            f"Partition: {partition.partition}",
            f"Leader: {leader}",
            f"Replicas: {','.join(str(r) for r in partition.replicas)}",
            f"Isr: {','.join(str(r) for r in partition.isr)}",
            "Elr: N/A",
            "LastKnownElr: N/A",
        )
    )


def is_under_replicated(partition: TopicPartitionInfo) -> bool:
    """kafka-topics' rule: fewer in-sync replicas than replicas."""
    return len(partition.isr) < len(partition.replicas)


def is_unavailable(partition: TopicPartitionInfo) -> bool:
    """kafka-topics' rule: no leader, or a leader that is not a live broker (here: fenced or
    unregistered, i.e. among the offline replicas)."""
    return partition.leader is None or partition.leader in partition.offline_replicas


def format_description(
    description: TopicDescription,
    *,
    under_replicated: bool = False,
    unavailable: bool = False,
) -> str:
    """A topic's whole description: its line, then one line per partition by index. With a
    filter (``under_replicated`` / ``unavailable``), only the partitions it selects and no
    topic line, as kafka-topics prints them; "" when none is selected."""
    filtered = under_replicated or unavailable
    lines = [] if filtered else [format_topic_line(description)]
    for partition in sorted(description.partitions, key=lambda p: p.partition):
        if filtered and not (
            (under_replicated and is_under_replicated(partition))
            or (unavailable and is_unavailable(partition))
        ):
            continue
        lines.append(format_partition_line(description.name, partition))
    return "\n".join(lines)


def format_listing(listings: Iterable[TopicListing]) -> str:
    """``--list``: the names, sorted, one per line (no trailing newline)."""
    return "\n".join(sorted(listing.name for listing in listings))


def error_line(error: BaseException) -> str:
    """What kafka-topics prints for a failed command; ``str(KafkaError)`` starts with the
    Kafka error name."""
    return f"{ERROR_PREFIX}{error}"


# ----- running -----------------------------------------------------------------------------------

_UNKNOWN_TOPIC_ERRORS: Final = (UnknownTopicOrPartitionError, UnknownTopicIdError)


def run_topic_command(
    command: TopicCommand,
    out: TextIO,
    err: TextIO,
    *,
    admin_factory: Callable[[TopicCommand], AdminClient] | None = None,
) -> int:
    """Run one command; returns the exit code (0, or 1 after printing errors to ``err``)."""
    factory = admin_factory or _default_admin
    try:
        with factory(command) as admin:
            match command.action:
                case "create":
                    return _create(admin, command, out, err)
                case "alter":
                    return _alter(admin, command, err)
                case "describe":
                    return _describe(admin, command, out, err)
                case "delete":
                    return _delete(admin, command, err)
                case "list":
                    return _list(admin, command, out)
    except AdminError as exc:
        print(error_line(exc), file=err)
        return 1
    raise AssertionError(f"unknown action {command.action!r}")  # pragma: no cover


def _default_admin(command: TopicCommand) -> AdminClient:
    return AdminClient(
        command.bootstrap,
        timeout_s=command.timeout_s,
        security=command_security(command.command_config),
    )


def _create(admin: AdminClient, command: TopicCommand, out: TextIO, err: TextIO) -> int:
    (name,) = command.topics
    new_topic = NewTopic(
        name,
        command.partitions,
        command.replication_factor,
        configs=dict(command.configs),
        replica_assignments=command.replica_assignment,
    )
    outcome = admin.create_topics([new_topic]).values()[name]
    if outcome.error is None:
        print(f"Created topic {name}.", file=out)
        return 0
    if command.if_not_exists and isinstance(outcome.error, TopicExistsError):
        return 0
    print(error_line(outcome.error), file=err)
    return 1


def _alter(admin: AdminClient, command: TopicCommand, err: TextIO) -> int:
    """Kafka's ``alterTopic``: grow each topic to ``--partitions``; prints nothing on success.
    With ``--replica-assignment`` the entries of the partitions a topic already has are
    skipped (kafka-topics describes the topic first for that)."""
    total = command.partitions
    assert total is not None
    growth: dict[str | Uuid, NewPartitions] = {}
    outcomes: list[TopicOutcome[Any]] = []
    if command.replica_assignment is None:
        growth = {name: NewPartitions.increase_to(total) for name in command.topics}
    else:
        described = admin.describe_topics(TopicCollection.of_topic_names(command.topics))
        for name, outcome in (described.topic_name_values() or {}).items():
            if not outcome.ok:
                outcomes.append(outcome)
                continue
            current = len(outcome.result().partitions)
            new = [command.replica_assignment[p] for p in range(current, total)]
            growth[name] = NewPartitions.increase_to(total, new)
    if growth:
        outcomes.extend(admin.create_partitions(growth).values().values())
    return _report(outcomes, command, err)


def _report(outcomes: Iterable[TopicOutcome[Any]], command: TopicCommand, err: TextIO) -> int:
    """Print every failed outcome (unknown topics are fine with --if-exists); the exit code."""
    status = 0
    for outcome in outcomes:
        error = outcome.error
        if error is None:
            continue
        if command.if_exists and isinstance(error, _UNKNOWN_TOPIC_ERRORS):
            continue
        print(error_line(error), file=err)
        status = 1
    return status


def _print_descriptions(
    descriptions: Iterable[TopicDescription], command: TopicCommand, out: TextIO
) -> None:
    for description in descriptions:
        text = format_description(
            description,
            under_replicated=command.under_replicated_partitions,
            unavailable=command.unavailable_partitions,
        )
        if text:
            print(text, file=out)


def _describe(admin: AdminClient, command: TopicCommand, out: TextIO, err: TextIO) -> int:
    if command.topic_id is not None:
        by_id = admin.describe_topics(TopicCollection.of_topic_ids([command.topic_id]))
        outcomes = list((by_id.topic_id_values() or {}).values())
    elif command.topics:
        by_name = admin.describe_topics(TopicCollection.of_topic_names(command.topics))
        outcomes = list((by_name.topic_name_values() or {}).values())
    else:
        listing = admin.list_topics(exclude_internal=command.exclude_internal)
        ids = [topic.topic_id for topic in listing.topics if topic.topic_id != ZERO_UUID]
        every = admin.describe_topics(
            TopicCollection.of_topic_ids(ids), min_metadata_offset=listing.metadata_offset
        )
        # A topic deleted since the listing is simply gone: leave it out.
        outcomes = [
            o
            for o in (every.topic_id_values() or {}).values()
            if not isinstance(o.error, UnknownTopicIdError)
        ]
        _print_descriptions(
            sorted((o.result() for o in outcomes if o.ok), key=lambda d: d.name), command, out
        )
        return _report(outcomes, command, err)
    described = [
        o.result()
        for o in outcomes
        if o.ok and not (command.exclude_internal and o.result().is_internal)
    ]
    _print_descriptions(described, command, out)
    return _report(outcomes, command, err)


def _delete(admin: AdminClient, command: TopicCommand, err: TextIO) -> int:
    if command.topic_id is not None:
        by_id = admin.delete_topics(TopicCollection.of_topic_ids([command.topic_id]))
        outcomes = list((by_id.topic_id_values() or {}).values())
    else:
        by_name = admin.delete_topics(TopicCollection.of_topic_names(command.topics))
        outcomes = list((by_name.topic_name_values() or {}).values())
    return _report(outcomes, command, err)


def _list(admin: AdminClient, command: TopicCommand, out: TextIO) -> int:
    listing = admin.list_topics(exclude_internal=command.exclude_internal)
    topics = listing.topics
    if command.topics:
        wanted = set(command.topics)
        topics = tuple(t for t in topics if t.name in wanted)
    if topics:
        print(format_listing(topics), file=out)
    return 0
