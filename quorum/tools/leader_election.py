"""``metaquorum leader-election``: Kafka's ``kafka-leader-election.sh`` (``LeaderElectionCommand``)
over the AdminClient's ``elect_leaders``.

The partitions are all of them (``--all-topic-partitions``), one (``--topic T --partition P``),
or those of Kafka's JSON file (``--path-to-json-file``: ``{"partitions": [{"topic": "orders",
"partition": 0}, ...]}``). The output is Kafka's, line for line::

    Successfully completed leader election (PREFERRED) for partitions orders-0, orders-1
    Valid replica already elected for partitions orders-2
    Error completing leader election (PREFERRED) for partition: orders-3: PREFERRED_LEADER_...

and the command exits 1 (with "N replica(s) could not be elected" on stderr) when any partition
failed; a partition whose leader is already the one asked for is not a failure.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from quorum.admin.types import TopicPartition
from quorum.controller.requests import ElectionType
from quorum.errors import ElectionNotNeededError

__all__ = [
    "LeaderElectionCommand",
    "LeaderElectionError",
    "add_leader_election_arguments",
    "command_from_args",
    "run_leader_election",
]


class LeaderElectionError(Exception):
    """Arguments the command cannot run with; the message says what to give instead."""


@dataclass(frozen=True, slots=True)
class LeaderElectionCommand:
    election_type: ElectionType
    partitions: tuple[TopicPartition, ...] | None  # None: all partitions


def add_leader_election_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--bootstrap-server",
        "--bootstrap-controller",
        dest="bootstrap",
        required=True,
        metavar="HOST:PORT[,HOST:PORT...]",
        help="the controllers' listeners, tried in turn",
    )
    parser.add_argument(
        "--election-type",
        required=True,
        metavar="PREFERRED|UNCLEAN",
        help="PREFERRED: the first replica leads again if it is in the ISR; UNCLEAN: a "
        "partition without a leader elects any live replica (what only the old ISR held may "
        "be lost)",
    )
    parser.add_argument(
        "--all-topic-partitions",
        action="store_true",
        help="every partition of every topic (only those that need an election are listed)",
    )
    parser.add_argument("--topic", metavar="NAME", help="the topic of --partition")
    parser.add_argument("--partition", type=int, metavar="N", help="the partition of --topic")
    parser.add_argument(
        "--path-to-json-file",
        type=Path,
        metavar="FILE",
        help='Kafka\'s JSON list: {"partitions": [{"topic": "T", "partition": 0}, ...]}',
    )


def command_from_args(args: argparse.Namespace) -> LeaderElectionCommand:
    try:
        election_type = ElectionType[args.election_type.strip().upper()]
    except KeyError:
        raise LeaderElectionError(
            f"--election-type {args.election_type!r} is not PREFERRED or UNCLEAN"
        ) from None
    named = args.topic is not None or args.partition is not None
    given = sum((args.all_topic_partitions, named, args.path_to_json_file is not None))
    if given != 1:
        raise LeaderElectionError(
            "give exactly one of --all-topic-partitions, --topic with --partition, or "
            "--path-to-json-file"
        )
    if args.all_topic_partitions:
        return LeaderElectionCommand(election_type, None)
    if named:
        if args.topic is None or args.partition is None:
            raise LeaderElectionError("--topic and --partition go together: give both")
        if args.partition < 0:
            raise LeaderElectionError(f"--partition must be >= 0, got {args.partition}")
        return LeaderElectionCommand(election_type, (TopicPartition(args.topic, args.partition),))
    return LeaderElectionCommand(election_type, _partitions_from_file(args.path_to_json_file))


def _partitions_from_file(path: Path) -> tuple[TopicPartition, ...]:
    try:
        data: Any = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise LeaderElectionError(f"cannot read {path}: {exc}") from None
    entries = data.get("partitions") if isinstance(data, dict) else None
    if not isinstance(entries, list) or not entries:
        raise LeaderElectionError(
            f'{path} must hold {{"partitions": [{{"topic": "T", "partition": 0}}, ...]}} with '
            "at least one partition"
        )
    partitions: list[TopicPartition] = []
    for entry in entries:
        topic = entry.get("topic") if isinstance(entry, dict) else None
        partition = entry.get("partition") if isinstance(entry, dict) else None
        if not isinstance(topic, str) or type(partition) is not int or partition < 0:
            raise LeaderElectionError(
                f"{path}: {entry!r} is not {{'topic': NAME, 'partition': N >= 0}}"
            )
        partitions.append(TopicPartition(topic, partition))
    if len(set(partitions)) != len(partitions):
        raise LeaderElectionError(f"{path} names a partition more than once")
    return tuple(partitions)


def run_leader_election(
    command: LeaderElectionCommand, admin: Any, out: IO[str], err: IO[str]
) -> int:
    """Run the election through ``admin`` (an ``AdminClient``), print Kafka's lines; the exit
    code: 0, or 1 if any partition could not be elected."""
    result = admin.elect_leaders(command.election_type, command.partitions)
    kind = command.election_type.name
    succeeded: list[TopicPartition] = []
    noop: list[TopicPartition] = []
    failed: list[tuple[TopicPartition, Exception]] = []
    for partition, error in result.partitions().items():
        if error is None:
            succeeded.append(partition)
        elif isinstance(error, ElectionNotNeededError):
            noop.append(partition)
        else:
            failed.append((partition, error))
    if succeeded:
        out.write(
            f"Successfully completed leader election ({kind}) for partitions {_join(succeeded)}\n"
        )
    if noop:
        out.write(f"Valid replica already elected for partitions {_join(noop)}\n")
    for partition, error in failed:
        out.write(
            f"Error completing leader election ({kind}) for partition: {partition}: {error}\n"
        )
    if failed:
        err.write(f"{len(failed)} replica(s) could not be elected\n")
        return 1
    return 0


def _join(partitions: Sequence[TopicPartition]) -> str:
    return ", ".join(str(p) for p in partitions)
