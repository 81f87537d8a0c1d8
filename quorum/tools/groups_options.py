"""``metaquorum groups``' options: kafka-consumer-groups' own, checked in Kafka 4.4's order with
its messages (``ConsumerGroupCommandOptions.checkArgs``, then ``main``'s one-action check). A
usage error is ``GroupsUsageError``: its message on stderr, exit 1, as Kafka's
``printUsageAndExit`` (which also prints the whole option table; this prints a pointer to
``--help``)."""

from __future__ import annotations

import argparse
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import IO, Final

__all__ = [
    "CONSUMER_STATES",
    "SCENARIOS",
    "STATE_NAMES",
    "GroupsCommand",
    "GroupsUsageError",
    "add_groups_arguments",
    "command_from_args",
]

ACTIONS: Final = "--list, --describe, --delete, --reset-offsets, --delete-offsets, --validate-regex"
# The order Kafka 4.4 prints these sets in (Java HashSets: measured, not alphabetical).
SCENARIOS: Final = (
    "[[to-datetime], [from-file], [shift-by], [to-offset], [to-earliest], [to-current], "
    "[to-latest], [by-duration]]"
)
# Kafka's checks of the reset scenarios: each one against every other, in this order.
SCENARIO_OPTIONS: Final = (
    "to-offset",
    "to-datetime",
    "by-duration",
    "to-earliest",
    "to-latest",
    "to-current",
    "shift-by",
    "from-file",
)
# GroupState.toString() in Kafka's clients.
STATE_NAMES: Final = {
    "UNKNOWN": "Unknown",
    "PREPARING_REBALANCE": "PreparingRebalance",
    "COMPLETING_REBALANCE": "CompletingRebalance",
    "STABLE": "Stable",
    "DEAD": "Dead",
    "EMPTY": "Empty",
    "ASSIGNING": "Assigning",
    "RECONCILING": "Reconciling",
}
# The consumer groups' states, in the order Kafka 4.4 lists them in its message.
CONSUMER_STATES: Final = (
    "Stable",
    "PreparingRebalance",
    "CompletingRebalance",
    "Reconciling",
    "Empty",
    "Assigning",
    "Dead",
)
TYPE_NAMES: Final = ("Classic", "Consumer")
NO_DRY_RUN_WARNING: Final = (
    "WARN: No action will be performed as the --execute option is missing. In version 5.0, this "
    "command will require either --dry-run or --execute to be specified. You should add the "
    "--dry-run option explicitly if you are scripting this command and want to keep the current "
    "default behavior without prompting."
)


class GroupsUsageError(Exception):
    """A usage error, as Kafka's ``printUsageAndExit``: the message on stderr, exit 1."""


# ----- options ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class GroupsCommand:
    action: str  # list, describe, delete, reset-offsets, delete-offsets
    bootstrap: str
    groups: tuple[str, ...] = ()
    all_groups: bool = False
    topics: tuple[str, ...] = ()
    all_topics: bool = False
    describe_what: str = "offsets"  # offsets, members, state
    verbose: bool = False
    list_states: tuple[str, ...] | None = None  # --list --state [S,...]: None when not given
    list_types: tuple[str, ...] | None = None
    scenario: str | None = None  # to-earliest, to-latest, to-offset, shift-by, ...
    scenario_value: str | None = None
    execute: bool = False
    export: bool = False
    timeout_ms: int = 5000
    options: frozenset[str] = field(default_factory=frozenset)
    bad_argument: str | None = None
    """A value Kafka fails to convert once running (``--to-offset x``): its message."""


def add_groups_arguments(parser: argparse.ArgumentParser) -> None:
    """kafka-consumer-groups' options. Combinations are checked by ``command_from_args`` in
    Kafka's order, with Kafka's messages, not by argparse."""
    add = parser.add_argument
    add("--bootstrap-server", metavar="HOST:PORT", help="REQUIRED: the brokers' Kafka listener")
    add("--group", action="append", default=[], metavar="GROUP", help="the consumer group id")
    add(
        "--topic",
        action="append",
        default=[],
        metavar="TOPIC[:P,P...]",
        help="--delete-offsets, --reset-offsets: a topic, or some of its partitions",
    )
    add("--all-topics", action="store_true", help="--reset-offsets: every topic of the group")
    add("--list", action="store_true", help="list all consumer groups")
    add("--describe", action="store_true", help="describe groups: offsets and lag (default)")
    add("--all-groups", action="store_true", help="apply to all consumer groups")
    add("--delete", action="store_true", help="delete consumer groups (offsets included)")
    add(
        "--timeout",
        default="5000",
        metavar="MS",
        help="the deadline of each admin request in ms (default 5000)",
    )
    add("--reset-offsets", action="store_true", help="reset the offsets of inactive groups")
    add("--delete-offsets", action="store_true", help="delete a group's offsets of topics")
    add("--dry-run", action="store_true", help="--reset-offsets: only print (the default)")
    add("--execute", action="store_true", help="--reset-offsets: commit the new offsets")
    add("--export", action="store_true", help="--reset-offsets: print CSV (topic,partition,offset)")
    add("--to-offset", metavar="OFFSET", help="reset to this offset")
    add(
        "--from-file",
        metavar="CSV",
        help="reset to the offsets of this CSV (what --export prints)",
    )
    add("--to-datetime", metavar="YYYY-MM-DDThh:mm:ss.sss", help="reset to the first offset at "
        "or after this time (UTC unless a zone is given)")  # fmt: skip
    add("--by-duration", metavar="PnDTnHnMnS", help="reset to this long ago")
    add("--to-earliest", action="store_true", help="reset to the log start")
    add("--to-latest", action="store_true", help="reset to the log end")
    add("--to-current", action="store_true", help="reset to the committed offset (or log end)")
    add("--shift-by", metavar="N", help="move the committed offset by N (may be negative)")
    add("--members", action="store_true", help="--describe: the members")
    add("--verbose", action="store_true", help="--describe: more columns")
    add("--offsets", action="store_true", help="--describe: offsets and lag (the default)")
    add(
        "--state",
        nargs="?",
        const="",
        default=None,
        metavar="STATES",
        help="--describe: the group's state; --list: with states, or only those (stable,empty)",
    )
    add(
        "--type",
        nargs="?",
        const="",
        default=None,
        metavar="TYPES",
        help="--list: with types, or only those (classic,consumer)",
    )
    add("--validate-regex", metavar="REGEX", help="(not supported)")


def _given(args: argparse.Namespace) -> set[str]:
    """The options given, by Kafka's names."""
    given = set()
    for name, value in vars(args).items():
        option = name.replace("_", "-")
        if option == "timeout":
            continue  # a default, not a choice
        if value is True or (value not in (None, False, []) and not callable(value)):
            given.add(option)
    return given


def command_from_args(args: argparse.Namespace, err: IO[str]) -> GroupsCommand:
    """Kafka's checks in Kafka's order (``ConsumerGroupCommandOptions.checkArgs`` then the
    one-action check of ``main``); the reset warning goes to ``err``."""
    given = _given(args) & {
        "bootstrap-server", "group", "topic", "all-topics", "list", "describe", "all-groups",
        "delete", "reset-offsets", "delete-offsets", "dry-run", "execute", "export", "to-offset",
        "from-file", "to-datetime", "by-duration", "to-earliest", "to-latest", "to-current",
        "shift-by", "members", "verbose", "offsets", "state", "type", "validate-regex",
    }  # fmt: skip
    has = given.__contains__
    for option, needs in (
        ("members", ("describe",)),
        ("verbose", ("describe",)),
        ("offsets", ("describe",)),
        ("state", ("describe", "list")),
        ("type", ("list",)),
    ):
        if has(option) and not any(map(has, needs)):
            raise GroupsUsageError(
                f"Option(s) [{option}] are unavailable given other options on the command line"
            )
    if not has("bootstrap-server") and not has("validate-regex"):
        raise GroupsUsageError('Missing required argument "[bootstrap-server]"')
    if has("describe"):
        if not has("group") and not has("all-groups"):
            raise GroupsUsageError(
                "Option [describe] takes one of these options: [group], [all-groups]"
            )
        if sum(map(has, ("members", "offsets", "state"))) > 1:
            raise GroupsUsageError(
                "Option [describe] takes at most one of these options: "
                "[members], [offsets], [state]"
            )
        if has("state") and args.state:
            raise GroupsUsageError("Option [describe] does not take a value for [state]")
    if has("delete"):
        if not has("group") and not has("all-groups"):
            raise GroupsUsageError(
                "Option [delete] takes one of these options: [all-groups], [group]"
            )
        if has("topic"):
            raise GroupsUsageError(
                "The consumer does not support topic-specific offset deletion from a consumer "
                "group."
            )
    if has("delete-offsets") and (not has("group") or not has("topic")):
        raise GroupsUsageError(
            "Option [delete-offsets] takes the following options: [topic], [group]"
        )
    if has("reset-offsets"):
        if has("dry-run") and has("execute"):
            raise GroupsUsageError(
                "Option [reset-offsets] only accepts one of [execute] and [dry-run]"
            )
        if not has("dry-run") and not has("execute"):
            err.write(NO_DRY_RUN_WARNING + "\n")
        if not has("group") and not has("all-groups"):
            raise GroupsUsageError(
                "Option [reset-offsets] takes one of these options: [all-groups], [group]"
            )
        for used in SCENARIO_OPTIONS:
            if has(used):
                for other in SCENARIO_OPTIONS:
                    if other != used and has(other):
                        raise _cannot_combine(used, other)
    if has("group") and has("all-groups"):
        raise _cannot_combine("group", "all-groups")
    if has("group") and has("list"):
        raise _cannot_combine("group", "list")
    for action in ("list", "describe"):
        if has("topic") and has(action):
            raise _cannot_combine("topic", action)
    actions = [
        a
        for a in ("list", "describe", "delete", "reset-offsets", "delete-offsets", "validate-regex")
        if has(a)
    ]
    if len(actions) != 1:
        raise GroupsUsageError(f"Command must include exactly one action: {ACTIONS}")
    if has("validate-regex"):
        raise GroupsUsageError("--validate-regex is not supported by metaquorum groups")
    scenario = next((s for s in SCENARIO_OPTIONS if has(s)), None)
    scenario_value: str | None = None
    if scenario is not None and scenario not in ("to-earliest", "to-latest", "to-current"):
        scenario_value = getattr(args, scenario.replace("-", "_"))
    # Kafka converts these values once the command runs (jopt's valueOf), in this order: a bad
    # one is an error while running ("Error: ...", exit 0), not a usage error.
    bad_argument = None
    for option, text in (("to-offset", args.to_offset), ("shift-by", args.shift_by),
                         ("timeout", args.timeout)):  # fmt: skip
        if text is not None and not _is_long(text):
            bad_argument = bad_argument or f"Cannot parse argument '{text}' of option {option}"
    describe_what = "members" if has("members") else "state" if has("state") else "offsets"
    return GroupsCommand(
        action=actions[0],
        bootstrap=args.bootstrap_server,
        groups=tuple(args.group),
        all_groups=args.all_groups,
        topics=tuple(args.topic),
        all_topics=args.all_topics,
        describe_what=describe_what,
        verbose=args.verbose,
        list_states=_list_values(args.state, CONSUMER_STATES, "state")
        if has("list") and has("state")
        else None,
        list_types=_list_values(args.type, TYPE_NAMES, "types") if has("type") else None,
        scenario=scenario,
        scenario_value=scenario_value,
        execute=args.execute,
        export=args.export,
        timeout_ms=int(args.timeout) if _is_long(args.timeout) else 5000,
        options=frozenset(given),
        bad_argument=bad_argument,
    )


def _cannot_combine(used: str, other: str) -> GroupsUsageError:
    return GroupsUsageError(f'Option "[{used}]" can\'t be used with option "[{other}]"')


def _is_long(text: str) -> bool:
    """A Java long, as jopt converts it (``Long.valueOf``)."""
    return re.fullmatch(r"[+-]?[0-9]+", text) is not None and -(2**63) <= int(text) < 2**63


def _list_values(text: str | None, valid: Sequence[str], what: str) -> tuple[str, ...]:
    """``--state stable,empty`` / ``--type classic``: Kafka's names, matched without case."""
    if not text:
        return ()
    by_key = {name.lower(): name for name in valid}
    values = [part.strip() for part in text.split(",")]
    if any(v.lower() not in by_key for v in values):
        label = "state" if what == "state" else "types"
        raise GroupsUsageError(
            f"Invalid {label} list '{text}'. Valid {'states' if what == 'state' else 'types'} "
            f"are: {', '.join(valid)}"
        )
    return tuple(by_key[v.lower()] for v in values)
