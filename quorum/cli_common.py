"""What the ``metaquorum`` command groups share: the error a handler raises, the config
arguments and the small argument parsers (``quorum/cli.py`` lists the groups)."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Final, TypeAlias

from quorum.config import NodeConfig, load_config
from quorum.ids import RESERVED_UUIDS, InvalidUuidError, Uuid

PROG: Final = "metaquorum"

# What add_subparsers() returns; a string because argparse is not generic at run time.
Subparsers: TypeAlias = "argparse._SubParsersAction[argparse.ArgumentParser]"
Handler = Callable[[argparse.Namespace], int]


class CommandError(Exception):
    """A command cannot do what was asked; the message says why and what to do."""


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


def add_command_config_argument(
    parser: argparse.ArgumentParser, *, only_when_given: bool = False
) -> None:
    """``--command-config FILE``: Kafka client properties for commands that connect.
    ``only_when_given``: a subcommand's copy of a flag its group also takes sets the value
    only when given, so it never hides one given before the subcommand."""
    parser.add_argument(
        "--command-config",
        type=Path,
        metavar="FILE",
        default=argparse.SUPPRESS if only_when_given else None,
        help="a Java-style properties file of Kafka client keys (security.protocol=SSL, "
        "ssl.keystore.location, ssl.truststore.location, ...), as Kafka's tools take it; "
        "without it the command speaks PLAINTEXT. `metaquorum dev certs` writes one "
        "(docs/security.md#clients)",
    )


def config_from_args(args: argparse.Namespace) -> NodeConfig:
    config_path: Path = args.config
    overrides: list[str] = args.override
    return load_config(config_path, overrides, environ=os.environ)


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


def non_negative_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, got {value}")
    return value


def silence_stdout() -> None:
    """Point stdout at /dev/null so the interpreter's final flush does not fail again."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)
