"""``metaquorum configs``: Kafka's ``kafka-configs.sh`` (``ConfigCommand``) for topics, over the
AdminClient's ``incremental_alter_configs`` and ``describe_topics``.

``--alter --add-config k=v[,k2=v2] --delete-config k[,k2]`` (a list value in brackets:
``cleanup.policy=[compact,delete]``) prints Kafka's ``Completed updating config for topic T.``;
``--describe`` prints Kafka's lines for the configs set on the topic::

    Dynamic configs for topic orders are:
      retention.ms=1000 sensitive=false synonyms={DYNAMIC_TOPIC_CONFIG:retention.ms=1000}

``--entity-type brokers --entity-default --alter`` changes the cluster-wide default
(``unclean.leader.election.enable``) and prints Kafka's ``Completed updating default config for
brokers in the cluster.``; one broker's configs and describing broker configs are not
supported yet.
"""

from __future__ import annotations

import argparse
import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import IO, Any, Final

from quorum.admin.types import AlterConfigOp, AlterConfigOpType, TopicCollection
from quorum.errors import AdminError

__all__ = [
    "ConfigsCommand",
    "ConfigsError",
    "add_configs_arguments",
    "command_from_args",
    "run_configs",
]

# Kafka's ConfigCommand splits --add-config on commas outside square brackets.
_ENTRY_SPLIT: Final = re.compile(r",(?![^\[]*\])")


class ConfigsError(Exception):
    """Arguments the command cannot run with; the message says what to give instead."""


@dataclass(frozen=True, slots=True)
class ConfigsCommand:
    topic: str | None
    """The topic, or None for the cluster-wide default (brokers, ``--entity-default``)."""
    describe: bool
    changes: tuple[AlterConfigOp, ...] = ()


def add_configs_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--bootstrap-server",
        "--bootstrap-controller",
        dest="bootstrap",
        required=True,
        metavar="HOST:PORT[,HOST:PORT...]",
        help="the controllers' listeners, tried in turn",
    )
    parser.add_argument(
        "--entity-type",
        required=True,
        metavar="topics|brokers",
        help="topics, or brokers with --entity-default (the cluster-wide default)",
    )
    parser.add_argument("--entity-name", metavar="NAME", help="the topic")
    parser.add_argument(
        "--entity-default",
        action="store_true",
        help="with --entity-type brokers: the cluster-wide default "
        "(unclean.leader.election.enable)",
    )
    parser.add_argument("--alter", action="store_true", help="change the topic's configs")
    parser.add_argument("--describe", action="store_true", help="the configs set on the topic")
    parser.add_argument(
        "--add-config",
        action="append",
        default=[],
        metavar="K=V[,K2=V2]",
        help="set configs (a list value in brackets: cleanup.policy=[compact,delete])",
    )
    parser.add_argument(
        "--delete-config",
        action="append",
        default=[],
        metavar="K[,K2]",
        help="remove configs set on the topic (back to their defaults)",
    )


def parse_add_config(entries: Iterable[str]) -> list[tuple[str, str]]:
    """``k=v`` pairs from ``--add-config`` values, as Kafka's ConfigCommand splits them."""
    pairs: list[tuple[str, str]] = []
    for entry in entries:
        for item in _ENTRY_SPLIT.split(entry):
            key, equals, value = item.partition("=")
            if not equals or not key.strip():
                raise ConfigsError(
                    f"Invalid entity config {item!r}: all configs to be added must be in the "
                    "format 'key=val' (a list value in brackets: 'key=[a,b]')"
                )
            value = value.strip()
            if value.startswith("[") and value.endswith("]"):
                value = value[1:-1]
            pairs.append((key.strip(), value))
    return pairs


def command_from_args(args: argparse.Namespace) -> ConfigsCommand:
    if args.alter == args.describe:
        raise ConfigsError("give exactly one of --alter and --describe")
    topic: str | None
    if args.entity_type == "topics":
        if not args.entity_name or args.entity_default:
            raise ConfigsError("--entity-type topics takes --entity-name: the topic")
        topic = args.entity_name
    elif args.entity_type == "brokers":
        if args.entity_name is not None or not args.entity_default:
            raise ConfigsError(
                "--entity-type brokers takes --entity-default (the cluster-wide default); "
                "one broker's configs are not supported yet"
            )
        if args.describe:
            raise ConfigsError("--describe of broker configs is not supported yet")
        topic = None
    else:
        raise ConfigsError(
            f"--entity-type {args.entity_type!r} is not supported: topics or brokers"
        )
    if args.describe:
        if args.add_config or args.delete_config:
            raise ConfigsError("--add-config and --delete-config go with --alter")
        return ConfigsCommand(topic, describe=True)
    sets = parse_add_config(args.add_config)
    deletes = [k.strip() for entry in args.delete_config for k in entry.split(",") if k.strip()]
    if not sets and not deletes:
        raise ConfigsError("--alter needs --add-config or --delete-config")
    changes = [AlterConfigOp(k, v) for k, v in sets]
    changes += [AlterConfigOp(k, None, AlterConfigOpType.DELETE) for k in deletes]
    return ConfigsCommand(topic, describe=False, changes=tuple(changes))


def run_configs(command: ConfigsCommand, admin: Any, out: IO[str], err: IO[str]) -> int:
    """Run through ``admin`` (an ``AdminClient``) and print Kafka's lines; exit 0, or 1 with
    Kafka's error line."""
    try:
        if command.topic is None:
            admin.alter_cluster_configs(list(command.changes))
            out.write("Completed updating default config for brokers in the cluster.\n")
            return 0
        if command.describe:
            described = admin.describe_topics(TopicCollection.of_topic_names([command.topic]))
            configs = described.all_topic_names()[command.topic].configs
            out.write(f"Dynamic configs for topic {command.topic} are:\n")
            for key in sorted(configs):
                entry = f"{key}={configs[key]}"
                out.write(f"  {entry} sensitive=false synonyms={{DYNAMIC_TOPIC_CONFIG:{entry}}}\n")
            return 0
        admin.incremental_alter_configs({command.topic: list(command.changes)}).all()
    except AdminError as exc:
        err.write(f"Error while executing config command: {exc}\n")
        return 1
    out.write(f"Completed updating config for topic {command.topic}.\n")
    return 0
