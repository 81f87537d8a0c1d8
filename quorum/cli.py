"""The ``metaquorum`` command.

Commands are grouped as Kafka's tools are (``kafka-storage.sh`` -> ``metaquorum storage``,
``kafka-metadata-quorum.sh`` -> ``metaquorum quorum``, ...). Each group is one function
``add_<group>_commands(subparsers)`` listed in ``COMMAND_GROUPS``; it adds its parser and, per
subcommand, a handler ``(args) -> exit code`` with ``parser.set_defaults(handler=...)``. To add
a group (``controller start``, ``broker start``, ``quorum describe``, ``topics``, ``log dump``,
``replay``, ``dev up``), write its ``add_..._commands`` and append it to ``COMMAND_GROUPS``;
commands that read a node config use ``add_config_arguments`` and ``config_from_args``.

Errors that a person can fix (a bad config, an unformatted directory, a bad id) are raised as
``CommandError``, ``ConfigError``, ``MetaPropertiesError`` or ``InvalidUuidError``; ``main``
prints them to stderr and returns 1. Usage errors exit 2, as argparse does.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Final, TypeAlias

from quorum import meta_properties
from quorum.config import ConfigError, NodeConfig, load_config
from quorum.ids import RESERVED_UUIDS, InvalidUuidError, Uuid
from quorum.meta_properties import (
    META_PROPERTIES_FILE,
    MetaProperties,
    MetaPropertiesError,
    UnformattedDirectoryError,
)

PROG: Final = "metaquorum"
# The metadata feature level a freshly formatted cluster starts at (Kafka prints e.g.
# "3.9-IV0"). There is one level so far; it will move to the metadata package when records
# gain feature levels.
METADATA_VERSION: Final = "1"

# What add_subparsers() returns; a string because argparse is not generic at run time.
Subparsers: TypeAlias = "argparse._SubParsersAction[argparse.ArgumentParser]"
Handler = Callable[[argparse.Namespace], int]


class CommandError(Exception):
    """A command cannot do what was asked; the message says why and what to do."""


# ----- shared arguments ------------------------------------------------------------------------


def add_config_arguments(parser: argparse.ArgumentParser) -> None:
    """``--config F`` (required) and repeatable ``--override key=value``."""
    parser.add_argument(
        "--config",
        "-c",
        required=True,
        type=Path,
        metavar="FILE",
        help="the node's TOML config (Kafka key names, e.g. deploy/local/controller-1.toml)",
    )
    parser.add_argument(
        "--override",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="replace a config key after reading the file (repeatable); the value is read as "
        "a TOML value when it is one, else as a string",
    )


def config_from_args(args: argparse.Namespace) -> NodeConfig:
    config_path: Path = args.config
    overrides: list[str] = args.override
    return load_config(config_path, overrides)


def parse_cluster_id(text: str) -> Uuid:
    """A cluster id from the command line: a Uuid that is not reserved."""
    try:
        cluster_id = Uuid.parse(text)
    except InvalidUuidError:
        raise CommandError(
            f"Cluster ID string {text!r} does not appear to be a valid UUID: expected 22 "
            "characters of URL-safe base64 without padding, e.g. the output of "
            f"`{PROG} storage random-uuid`"
        ) from None
    if cluster_id in RESERVED_UUIDS:
        raise CommandError(
            f"Cluster ID string {text!r} is reserved (it is the null id or the metadata topic's "
            f"sentinel id); use the output of `{PROG} storage random-uuid`"
        )
    return cluster_id


# ----- storage -----------------------------------------------------------------------------------


def add_storage_commands(subparsers: Subparsers) -> None:
    storage = subparsers.add_parser(
        "storage",
        help="format and inspect the data directories of a node (kafka-storage)",
        description="Format and inspect the data directories of a node, like kafka-storage.sh.",
    )
    commands = storage.add_subparsers(dest="storage_command", metavar="COMMAND", required=True)

    random_uuid = commands.add_parser(
        "random-uuid", help="print a new random cluster id", description="Print a new random Uuid."
    )
    random_uuid.set_defaults(handler=storage_random_uuid)

    format_parser = commands.add_parser(
        "format",
        help="write meta.properties into the node's directories",
        description="Write meta.properties (cluster.id, node.id, a new directory.id) into "
        "metadata.log.dir and every log.dirs entry. Refuses directories that are already "
        "formatted or not empty, unless --ignore-formatted.",
    )
    add_config_arguments(format_parser)
    format_parser.add_argument(
        "--cluster-id",
        "-t",
        required=True,
        metavar="ID",
        help=f"the cluster id (e.g. from `{PROG} storage random-uuid`); the same for every node",
    )
    format_parser.add_argument(
        "--ignore-formatted",
        "-g",
        action="store_true",
        help="skip directories that are already formatted and format the others; also format "
        "non-empty directories that have no meta.properties",
    )
    format_parser.set_defaults(handler=storage_format)

    info = commands.add_parser(
        "info",
        help="show the meta.properties of the node's directories and check them",
        description="Show each data directory's meta.properties and check them as a node does "
        "at startup. Exits 1 if the node would refuse to start.",
    )
    add_config_arguments(info)
    info.set_defaults(handler=storage_info)


def storage_random_uuid(args: argparse.Namespace) -> int:
    del args
    print(Uuid.random())
    return 0


def storage_format(args: argparse.Namespace) -> int:
    cluster_id = parse_cluster_id(args.cluster_id)
    ignore_formatted: bool = args.ignore_formatted
    config = config_from_args(args)
    if config.cluster_id is not None and config.cluster_id != cluster_id:
        raise CommandError(
            f"--cluster-id {cluster_id} differs from cluster.id {config.cluster_id} in "
            f"{config.describe_source()}; use the same id in both, or remove cluster.id from "
            "the config"
        )

    # Decide for every directory before writing any, so a refusal leaves nothing half done.
    to_format: list[Path] = []
    problems: list[str] = []
    for directory in config.data_dirs:
        if directory.exists() and not directory.is_dir():
            problems.append(f"{directory} exists and is not a directory")
            continue
        try:
            existing: MetaProperties | None = meta_properties.read(directory)
        except UnformattedDirectoryError:
            existing = None
        except MetaPropertiesError as exc:
            if not ignore_formatted:
                problems.append(
                    f"Log directory {directory} holds an unreadable {META_PROPERTIES_FILE} "
                    f"({exc}). Use --ignore-formatted to ignore this directory and format "
                    "the others."
                )
            else:
                print(f"Skipping directory {directory}: its {META_PROPERTIES_FILE} is unreadable.")
            continue
        if existing is not None:
            if not ignore_formatted:
                problems.append(
                    f"Log directory {directory} is already formatted. Use --ignore-formatted "
                    "to ignore this directory and format the others."
                )
                continue
            print(f"Skipping directory {directory}: it is already formatted.")
            if existing.cluster_id != cluster_id or existing.node_id != config.node_id:
                print(
                    f"Warning: {directory} is formatted for cluster.id={existing.cluster_id} "
                    f"node.id={existing.node_id}, not cluster.id={cluster_id} "
                    f"node.id={config.node_id}; the node will refuse to start on it. Empty it "
                    "and format again to reuse it.",
                    file=sys.stderr,
                )
            continue
        if directory.is_dir() and any(directory.iterdir()) and not ignore_formatted:
            problems.append(
                f"Log directory {directory} is not empty but has no {META_PROPERTIES_FILE}; it "
                "may hold data of unknown origin. Empty it, or use --ignore-formatted to format "
                "it anyway."
            )
            continue
        to_format.append(directory)

    if problems:
        raise CommandError("\n".join(problems))
    if not to_format:
        print("All of the log directories are already formatted.")
        return 0
    for directory in to_format:
        kind = "metadata" if directory == config.metadata_log_dir else "data"
        print(f"Formatting {kind} directory {directory} with metadata.version {METADATA_VERSION}.")
        meta_properties.write(
            directory,
            MetaProperties(
                cluster_id=cluster_id, node_id=config.node_id, directory_id=Uuid.random()
            ),
        )
    return 0


def storage_info(args: argparse.Namespace) -> int:
    config = config_from_args(args)
    for directory in config.data_dirs:
        kind = "metadata" if directory == config.metadata_log_dir else "data"
        try:
            properties = meta_properties.read(directory)
        except MetaPropertiesError as exc:
            print(f"{kind} directory {directory}: {exc}")
            continue
        print(
            f"{kind} directory {directory}: version={properties.version} "
            f"cluster.id={properties.cluster_id} node.id={properties.node_id} "
            f"directory.id={properties.directory_id or 'none'}"
        )
    meta_properties.check(config)
    print(f"OK: node {config.node_id} can start on these directories.")
    return 0


# ----- entry point -------------------------------------------------------------------------------

# One function per command group; later groups append themselves here.
COMMAND_GROUPS: Final[list[Callable[[Subparsers], None]]] = [add_storage_commands]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=PROG,
        description="A KRaft-style Raft metadata quorum with KIP-516 topic IDs.",
    )
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for add_commands in COMMAND_GROUPS:
        add_commands(commands)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # --help (0) or a usage error (2): argparse already printed
        return exc.code if isinstance(exc.code, int) else 2
    handler: Handler = args.handler
    try:
        return handler(args)
    except (CommandError, ConfigError, MetaPropertiesError, InvalidUuidError) as exc:
        print(f"Error: {exc}", file=sys.stderr)
        return 1
    except OSError as exc:
        print(f"Error: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    raise SystemExit(main())
