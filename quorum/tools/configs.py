"""``metaquorum configs``: Kafka's ``kafka-configs.sh`` (``ConfigCommand``) for topics and
brokers, over the AdminClient's ``incremental_alter_configs``, ``alter_cluster_configs`` and
``describe_configs``; for the client quotas of users and clients see
``quorum.tools.configs_quotas``.

``--alter --add-config k=v[,k2=v2] --delete-config k[,k2]`` (a list value in brackets:
``cleanup.policy=[compact,delete]``) prints Kafka's ``Completed updating config for topic T.``,
``... for broker B.`` or ``Completed updating default config for brokers in the cluster.``;
``--describe`` prints Kafka 4.4's lines for the configs set on the entity (``--all``: every
config), with their synonyms::

    Dynamic configs for topic orders are:
      retention.ms=1000 sensitive=false synonyms={DYNAMIC_TOPIC_CONFIG:retention.ms=1000}
    Dynamic configs for broker 101 are:
      log.retention.ms=1000 sensitive=false synonyms={DYNAMIC_BROKER_CONFIG:log.retention.ms=1000,
      DEFAULT_CONFIG:log.retention.hours=168}
    Default configs for brokers in the cluster are:
      min.insync.replicas=2 sensitive=false synonyms={DYNAMIC_DEFAULT_BROKER_CONFIG:min.insync.
      replicas=2}

(one line each, wrapped here).
A broker's configs are asked of that broker (its gRPC listener, as Kafka's AdminClient asks the
broker itself), so its file's values show as ``STATIC_BROKER_CONFIG``; if it cannot be reached,
a controller answers from its image: the dynamic configs only, no ``STATIC_BROKER_CONFIG``.
Topics and the cluster-wide default are described by a controller of ``--bootstrap-server``.
"""

from __future__ import annotations

import argparse
import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import IO, Any, Final

from quorum.admin.types import AlterConfigOp, AlterConfigOpType
from quorum.controller.describe_configs import (
    CONFIG_SOURCE_DEFAULT,
    CONFIG_SOURCE_DYNAMIC_BROKER,
    CONFIG_SOURCE_DYNAMIC_DEFAULT_BROKER,
    CONFIG_SOURCE_DYNAMIC_TOPIC,
    CONFIG_SOURCE_STATIC_BROKER,
    DescribedConfig,
)
from quorum.errors import AdminError, ErrorCode, error_for
from quorum.metadata.records import ConfigResourceType
from quorum.tools.configs_quotas import (
    QUOTA_ENTITY_TYPES,
    QuotaTarget,
    parse_quota_value,
    run_quota_configs,
)

__all__ = [
    "ConfigsCommand",
    "ConfigsError",
    "add_configs_arguments",
    "command_from_args",
    "run_configs",
]

# Kafka's ConfigCommand splits --add-config on commas outside square brackets.
_ENTRY_SPLIT: Final = re.compile(r",(?![^\[]*\])")
# Kafka's ConfigEntry.ConfigSource names, as ConfigCommand prints them.
SOURCE_NAMES: Final = {
    CONFIG_SOURCE_DYNAMIC_TOPIC: "DYNAMIC_TOPIC_CONFIG",
    CONFIG_SOURCE_DYNAMIC_BROKER: "DYNAMIC_BROKER_CONFIG",
    CONFIG_SOURCE_DYNAMIC_DEFAULT_BROKER: "DYNAMIC_DEFAULT_BROKER_CONFIG",
    CONFIG_SOURCE_STATIC_BROKER: "STATIC_BROKER_CONFIG",
    CONFIG_SOURCE_DEFAULT: "DEFAULT_CONFIG",
}


class ConfigsError(Exception):
    """Arguments the command cannot run with; the message says what to give instead."""


@dataclass(frozen=True, slots=True)
class ConfigsCommand:
    topic: str | None
    """The topic, or None for a broker entity (``broker_id``)."""
    describe: bool
    changes: tuple[AlterConfigOp, ...] = ()
    broker_id: int | None = None
    """With ``topic`` None: the broker, or None for the cluster-wide default."""
    describe_all: bool = False
    quota: QuotaTarget | None = None
    """A client quota entity (``--entity-type users|clients``): then ``topic`` and
    ``broker_id`` are None."""


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
        metavar="topics|brokers|users|clients",
        help="topics, brokers (--entity-name ID, or --entity-default: the cluster-wide "
        "default), or the client quotas of users or clients (--entity-name NAME, or "
        "--entity-default: the default user or client)",
    )
    parser.add_argument(
        "--entity-name",
        metavar="NAME",
        help="the topic, the broker's id, the user (principal name, CN=alice) or the client id",
    )
    parser.add_argument(
        "--entity-default",
        action="store_true",
        help="with --entity-type brokers|users|clients: the cluster-wide default",
    )
    parser.add_argument("--alter", action="store_true", help="change the entity's configs")
    parser.add_argument("--describe", action="store_true", help="the configs set on the entity")
    parser.add_argument(
        "--all", action="store_true", help="with --describe: every config, not only those set"
    )
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
        help="remove configs set on the entity (back to their defaults)",
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
    if args.entity_type in QUOTA_ENTITY_TYPES:
        return _quota_command(args)
    topic: str | None = None
    broker_id: int | None = None
    if args.entity_type == "topics":
        if not args.entity_name or args.entity_default:
            raise ConfigsError("--entity-type topics takes --entity-name: the topic")
        topic = args.entity_name
    elif args.entity_type == "brokers":
        if (args.entity_name is None) == (not args.entity_default):
            raise ConfigsError(
                "--entity-type brokers takes --entity-name ID (one broker) or --entity-default "
                "(the cluster-wide default)"
            )
        if args.entity_name is not None:
            name = args.entity_name.strip()
            if not (name.isascii() and name.isdigit()):
                raise ConfigsError(
                    f"--entity-name {args.entity_name!r} is not a broker id (an integer)"
                )
            broker_id = int(name)
    else:
        raise ConfigsError(
            f"--entity-type {args.entity_type!r} is not supported: topics, brokers, users or "
            "clients"
        )
    if args.all and not args.describe:
        raise ConfigsError("--all goes with --describe")
    if args.describe:
        if args.add_config or args.delete_config:
            raise ConfigsError("--add-config and --delete-config go with --alter")
        return ConfigsCommand(topic, True, broker_id=broker_id, describe_all=args.all)
    sets = parse_add_config(args.add_config)
    deletes = [k.strip() for entry in args.delete_config for k in entry.split(",") if k.strip()]
    if not sets and not deletes:
        raise ConfigsError("--alter needs --add-config or --delete-config")
    changes = [AlterConfigOp(k, v) for k, v in sets]
    changes += [AlterConfigOp(k, None, AlterConfigOpType.DELETE) for k in deletes]
    return ConfigsCommand(topic, describe=False, changes=tuple(changes), broker_id=broker_id)


def _quota_command(args: argparse.Namespace) -> ConfigsCommand:
    """``--entity-type users|clients``: one client quota entity (Kafka's ConfigCommand)."""
    entity_type = QUOTA_ENTITY_TYPES[args.entity_type]
    if args.all:
        raise ConfigsError("--all is not supported with --entity-type users|clients")
    if args.entity_name is not None and args.entity_default:
        raise ConfigsError("give --entity-name NAME or --entity-default, not both")
    if args.entity_name is not None and not args.entity_name:
        raise ConfigsError(f"--entity-name is empty: name the {entity_type}")
    if args.describe:
        if args.add_config or args.delete_config:
            raise ConfigsError("--add-config and --delete-config go with --alter")
        every = args.entity_name is None and not args.entity_default
        target = QuotaTarget(entity_type, args.entity_name, every=every)
        return ConfigsCommand(None, True, quota=target)
    if args.entity_name is None and not args.entity_default:
        raise ConfigsError(
            f"--entity-type {args.entity_type} --alter takes --entity-name NAME or --entity-default"
        )
    changes: list[AlterConfigOp] = []
    for key, text in parse_add_config(args.add_config):
        try:
            parse_quota_value(text)
        except ValueError:
            raise ConfigsError(
                f"Invalid value {text!r} for quota {key}: a number (producer_byte_rate=1024)"
            ) from None
        changes.append(AlterConfigOp(key, text))
    deletes = [k.strip() for entry in args.delete_config for k in entry.split(",") if k.strip()]
    changes += [AlterConfigOp(k, None, AlterConfigOpType.DELETE) for k in deletes]
    if not changes:
        raise ConfigsError("--alter needs --add-config or --delete-config")
    target = QuotaTarget(entity_type, args.entity_name)
    return ConfigsCommand(None, describe=False, changes=tuple(changes), quota=target)


def _line(config: DescribedConfig) -> str:
    """Kafka's ConfigCommand line (Java prints a null value as ``null``)."""
    synonyms = ", ".join(
        f"{SOURCE_NAMES.get(s.source, 'UNKNOWN')}:{s.name}={_text(s.value)}"
        for s in config.synonyms
    )
    sensitive = "true" if config.sensitive else "false"
    return f"  {config.name}={_text(config.value)} sensitive={sensitive} synonyms={{{synonyms}}}\n"


def _text(value: str | None) -> str:
    return "null" if value is None else value


def _describe(command: ConfigsCommand, admin: Any, out: IO[str]) -> None:
    if command.topic is not None:
        resource = (ConfigResourceType.TOPIC, command.topic)
        header = f"configs for topic {command.topic} are:"
        wanted = CONFIG_SOURCE_DYNAMIC_TOPIC
    elif command.broker_id is not None:
        resource = (ConfigResourceType.BROKER, str(command.broker_id))
        header = f"configs for broker {command.broker_id} are:"
        wanted = CONFIG_SOURCE_DYNAMIC_BROKER
    else:
        resource = (ConfigResourceType.BROKER, "")
        header = ""
        wanted = CONFIG_SOURCE_DYNAMIC_DEFAULT_BROKER
    if command.broker_id is not None:
        outcome = admin.describe_broker_configs(command.broker_id, include_synonyms=True)
    else:
        (outcome,) = admin.describe_configs([resource], include_synonyms=True)
    if outcome.error_code != ErrorCode.NONE:
        raise error_for(outcome.error_code, outcome.error_message or "")
    if not header:
        out.write("Default configs for brokers in the cluster are:\n")
    else:
        out.write(("All " if command.describe_all else "Dynamic ") + header + "\n")
    for config in sorted(outcome.configs, key=lambda c: c.name):
        if command.describe_all or config.source == wanted:
            out.write(_line(config))


def run_configs(command: ConfigsCommand, admin: Any, out: IO[str], err: IO[str]) -> int:
    """Run through ``admin`` (an ``AdminClient``) and print Kafka's lines; exit 0, or 1 with
    Kafka's error line."""
    if command.quota is not None:
        return run_quota_configs(command.quota, command.changes, admin, out, err)
    try:
        if command.describe:
            _describe(command, admin, out)
            return 0
        if command.topic is None:
            admin.alter_cluster_configs(list(command.changes), broker_id=command.broker_id)
            if command.broker_id is None:
                out.write("Completed updating default config for brokers in the cluster.\n")
            else:
                out.write(f"Completed updating config for broker {command.broker_id}.\n")
            return 0
        admin.incremental_alter_configs({command.topic: list(command.changes)}).all()
    except AdminError as exc:
        err.write(f"Error while executing config command: {exc}\n")
        return 1
    out.write(f"Completed updating config for topic {command.topic}.\n")
    return 0
