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
import os
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, TypeAlias

from quorum import meta_properties
from quorum.config import ConfigError, NodeConfig, load_config
from quorum.ids import RESERVED_UUIDS, InvalidUuidError, Uuid
from quorum.meta_properties import (
    META_PROPERTIES_FILE,
    MetaProperties,
    MetaPropertiesError,
    UnformattedDirectoryError,
)
from quorum.metadata.records import BrokerEndpoint
from quorum.raft.voters import ReplicaKey, VoterNode, VoterSet
from quorum.storage.bootstrap import partition_dir_of, write_bootstrap

if TYPE_CHECKING:
    from quorum.storage.dirlock import DirLock

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
    initial = format_parser.add_mutually_exclusive_group()
    initial.add_argument(
        "--standalone",
        "-s",
        action="store_true",
        help="(a controller with controller.quorum.bootstrap.servers) format a one-controller "
        "quorum whose voter set is in the log: this controller alone, to grow with "
        "`quorum add-controller` (KIP-853). Never format two controllers of one cluster this way",
    )
    initial.add_argument(
        "--initial-controllers",
        "-I",
        metavar="ID@HOST:PORT:DIRID,...",
        help="(a controller with controller.quorum.bootstrap.servers) the first voters, each "
        "as node id, address and directory id (`storage random-uuid`); this controller must be "
        "among them and its directory gets the id given for it",
    )
    initial.add_argument(
        "--no-initial-controllers",
        "-N",
        action="store_true",
        help="(a controller with controller.quorum.bootstrap.servers) no voter set: this "
        "controller starts as an observer and joins an existing quorum with "
        "`quorum add-controller`",
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
    bootstrap = _bootstrap_voters(config, args)
    if config.cluster_id is not None and config.cluster_id != cluster_id:
        raise CommandError(
            f"--cluster-id {cluster_id} differs from cluster.id {config.cluster_id} in "
            f"{config.describe_source()}; use the same id in both, or remove cluster.id from "
            "the config"
        )

    from quorum.storage.dirlock import release_all

    # Lock every existing directory first (quorum/storage/dirlock.py): a running node holds
    # its directories, and format must not touch them. Held until the command ends.
    locks: list[DirLock] = []
    try:
        return _format_locked(config, cluster_id, ignore_formatted, locks, bootstrap)
    finally:
        release_all(locks)


def _bootstrap_voters(
    config: NodeConfig, args: argparse.Namespace
) -> tuple[VoterSet | None, Uuid | None]:
    """KIP-853's format modes: the bootstrap voter set to write (None: none) and the directory
    id the metadata log directory must get (None: a random one). Kafka's rules: a controller of
    a quorum whose voters are in the log (controller.quorum.bootstrap.servers) needs exactly one
    of --standalone, --initial-controllers and --no-initial-controllers; a static quorum
    (controller.quorum.voters) and a broker take none."""
    standalone: bool = args.standalone
    initial: str | None = args.initial_controllers
    none_given: bool = args.no_initial_controllers
    chosen = standalone or initial is not None or none_given
    if chosen and not config.is_controller:
        raise CommandError(
            "--standalone, --initial-controllers and --no-initial-controllers are for "
            "controllers; this node's process.roles has no 'controller'"
        )
    if chosen and not config.dynamic_quorum:
        raise CommandError(
            "--standalone, --initial-controllers and --no-initial-controllers format a quorum "
            "whose voters are in the log; this config has the static controller.quorum.voters. "
            "Replace it with controller.quorum.bootstrap.servers (host:port of controllers), or "
            "drop the option to format a static quorum"
        )
    if config.is_controller and config.dynamic_quorum and not chosen:
        raise CommandError(
            "Because controller.quorum.voters is not set on this controller, give one of "
            "--standalone (a new one-controller quorum), --initial-controllers (the first "
            "voters) or --no-initial-controllers (a controller that will join a quorum)"
        )
    listener = config.advertised(config.listener)
    if standalone:
        directory_id = Uuid.random()
        endpoint = BrokerEndpoint(listener.name, listener.host, listener.port)
        return VoterSet([VoterNode(ReplicaKey(config.node_id, directory_id), (endpoint,))]), (
            directory_id
        )
    if initial is not None:
        voters = parse_initial_controllers(initial, listener.name)
        me = voters.voter(config.node_id)
        if me is None:
            raise CommandError(
                f"--initial-controllers {initial!r} does not name node.id {config.node_id}: "
                "a controller formatted with it must be one of the initial voters (format the "
                "others with --no-initial-controllers and add them later)"
            )
        return voters, me.key.directory_id
    return None, None


def parse_initial_controllers(text: str, listener_name: str) -> VoterSet:
    """``1@host:port:DIRID,2@host:port:DIRID`` (Kafka's --initial-controllers) as a voter set
    whose endpoints are on ``listener_name``."""
    nodes: list[VoterNode] = []
    example = "1@127.0.0.1:19091:pbvuBlaTTwKRxS5NLJwRFQ"
    for entry in (e.strip() for e in text.split(",")):
        node_id_text, at, rest = entry.partition("@")
        address, colon, directory_text = rest.rpartition(":")
        host, colon2, port_text = address.rpartition(":")
        problem = ""
        if not (at and colon and colon2 and host) or not node_id_text.isdigit():
            problem = f"is not of the form id@host:port:directory-id, e.g. {example}"
        elif not port_text.isdigit() or not 0 < int(port_text) <= 65535:
            problem = f"has port {port_text!r}, not a port from 1 to 65535"
        if problem:
            raise CommandError(f"--initial-controllers: {entry!r} {problem}")
        node_id = int(node_id_text)
        try:
            directory_id = Uuid.parse(directory_text)
        except InvalidUuidError:
            raise CommandError(
                f"--initial-controllers: {entry!r}: {directory_text!r} is not a directory id "
                f"(22 characters of URL-safe base64, from `{PROG} storage random-uuid`)"
            ) from None
        if directory_id in RESERVED_UUIDS:
            raise CommandError(f"--initial-controllers: {entry!r}: {directory_id} is reserved")
        if any(n.node_id == node_id for n in nodes):
            raise CommandError(f"--initial-controllers: node id {node_id} appears twice")
        endpoint = BrokerEndpoint(listener_name, host.strip("[]"), int(port_text))
        nodes.append(VoterNode(ReplicaKey(node_id, directory_id), (endpoint,)))
    return VoterSet(nodes)


def _format_locked(
    config: NodeConfig,
    cluster_id: Uuid,
    ignore_formatted: bool,
    locks: list[DirLock],
    bootstrap: tuple[VoterSet | None, Uuid | None] = (None, None),
) -> int:
    from quorum.storage.dirlock import (
        LOCK_FILE_NAME,
        DirectoryLockedError,
        DirectoryLockError,
        lock_directory,
    )

    # Decide for every directory before writing any, so a refusal leaves nothing half done.
    to_format: list[Path] = []
    problems: list[str] = []
    for directory in config.data_dirs:
        if directory.exists() and not directory.is_dir():
            problems.append(f"{directory} exists and is not a directory")
            continue
        if directory.is_dir():
            try:
                locks.append(lock_directory(directory))
            except (DirectoryLockedError, DirectoryLockError) as exc:
                problems.append(str(exc))
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
        if (
            directory.is_dir()
            and any(p.name != LOCK_FILE_NAME for p in directory.iterdir())
            and not ignore_formatted
        ):
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
    voters, metadata_directory_id = bootstrap
    for directory in to_format:
        is_metadata = directory == config.metadata_log_dir
        kind = "metadata" if is_metadata else "data"
        print(f"Formatting {kind} directory {directory} with metadata.version {METADATA_VERSION}.")
        directory_id = Uuid.random()
        if is_metadata and voters is not None:
            # The voter set first, meta.properties last: a crash in between leaves a directory
            # without meta.properties, which format refuses until --ignore-formatted (or
            # emptying it) redoes both.
            assert metadata_directory_id is not None
            directory_id = metadata_directory_id
            path = write_bootstrap(partition_dir_of(directory), voters)
            print(
                f"Wrote the bootstrap voter set {[str(k) for k in voters.voter_keys()]} "
                f"(kraft.version 1) to {path}."
            )
        elif is_metadata and metadata_directory_id is not None:
            directory_id = metadata_directory_id
        meta_properties.write(
            directory,
            MetaProperties(
                cluster_id=cluster_id, node_id=config.node_id, directory_id=directory_id
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


# ----- log ---------------------------------------------------------------------------------------


def add_log_commands(subparsers: Subparsers) -> None:
    log = subparsers.add_parser(
        "log",
        help="inspect metadata log segments (kafka-dump-log)",
        description="Inspect metadata log segments, like kafka-dump-log.sh "
        "--cluster-metadata-decoder.",
    )
    commands = log.add_subparsers(dest="log_command", metavar="COMMAND", required=True)
    dump = commands.add_parser(
        "dump",
        help="print every record as one JSON line",
        description="Print every record of the given segments as one JSON line: "
        '{"offset", "epoch", "type", "version", "data"} ("control": true for control '
        "records), type and data as Kafka's --cluster-metadata-decoder prints them "
        '({"type": "TOPIC_RECORD", "version": 0, "data": {"name": ..., "topicId": ...}}). '
        "Read-only: safe on the log of a running controller, where it stops at the "
        "last whole batch. Exits 1 at a corrupt batch, after printing the records before it.",
    )
    dump.add_argument(
        "paths",
        nargs="+",
        type=Path,
        metavar="PATH",
        help="a segment file (NNNNNNNNNNNNNNNNNNNN.log) or a metadata log directory "
        "(__cluster_metadata-0/, or the metadata.log.dir holding it): all its segments in order",
    )
    dump.add_argument(
        "--max-records",
        type=_non_negative_int,
        metavar="N",
        help="stop after N records",
    )
    dump.add_argument(
        "--summary",
        action="store_true",
        help="print one JSON object of counts (batches, records, offsets, records per type) "
        "instead of the records",
    )
    dump.set_defaults(handler=log_dump)


def _non_negative_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, got {value}")
    return value


def log_dump(args: argparse.Namespace) -> int:
    # Imported here so that other commands do not pay for it (nor quorum describe's gRPC).
    from quorum.tools.log_dump import dump_log

    paths: list[Path] = args.paths
    max_records: int | None = args.max_records
    summary: bool = args.summary
    try:
        return dump_log(paths, sys.stdout, sys.stderr, max_records=max_records, summary=summary)
    except BrokenPipeError:
        # The reader went away (`... | head`): stop quietly, as cat does.
        _silence_stdout()
        return 0


def _silence_stdout() -> None:
    """Point stdout at /dev/null so the interpreter's final flush does not fail again."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)


# ----- quorum ------------------------------------------------------------------------------------


def add_quorum_commands(subparsers: Subparsers) -> None:
    quorum = subparsers.add_parser(
        "quorum",
        help="describe the metadata quorum (kafka-metadata-quorum)",
        description="Describe the metadata quorum, like kafka-metadata-quorum.sh.",
    )
    # Accepted before the subcommand (Kafka's order) and after it; the subcommand's copy sets
    # the value only when given, so it never hides one given before.
    bootstrap_help = "a controller to ask (its listener); a comma-separated list is tried in order"
    server_help = (
        "a broker (or controller) to ask; a broker forwards the request to the controllers, "
        "as Kafka's brokers do; a comma-separated list is tried in order"
    )
    quorum.add_argument(
        "--bootstrap-controller", metavar="HOST:PORT[,HOST:PORT...]", help=bootstrap_help
    )
    quorum.add_argument("--bootstrap-server", metavar="HOST:PORT[,HOST:PORT...]", help=server_help)
    add_command_config_argument(quorum)
    commands = quorum.add_subparsers(dest="quorum_command", metavar="COMMAND", required=True)
    describe = commands.add_parser(
        "describe",
        help="show the quorum's leader, epoch, high watermark and replicas",
        description="Show the state of the metadata quorum as its leader sees it, asking a "
        "controller (--bootstrap-controller) or a broker (--bootstrap-server), which forwards "
        "the request. Says 'no leader' (exit 0) when there is none; exits 1 when no node "
        "answers.",
    )
    mode = describe.add_mutually_exclusive_group(required=True)
    mode.add_argument(
        "--status",
        action="store_true",
        help="a short summary: ClusterId, LeaderId, LeaderEpoch, HighWatermark, MaxFollowerLag, "
        "MaxFollowerLagTimeMs, CurrentVoters, CurrentObservers",
    )
    mode.add_argument(
        "--replication",
        action="store_true",
        help="a table of every replica: log end offset, lag, last fetch and last caught-up time",
    )
    describe.add_argument(
        "--bootstrap-controller",
        default=argparse.SUPPRESS,
        metavar="HOST:PORT[,HOST:PORT...]",
        help=bootstrap_help,
    )
    describe.add_argument(
        "--bootstrap-server",
        default=argparse.SUPPRESS,
        metavar="HOST:PORT[,HOST:PORT...]",
        help=server_help,
    )
    add_command_config_argument(describe, only_when_given=True)
    describe.add_argument(
        "--human-readable",
        action="store_true",
        help="with --replication: print times as 'N ms ago'",
    )
    describe.set_defaults(handler=quorum_describe)

    add = commands.add_parser(
        "add-controller",
        help="add a controller to the voter set (KIP-853)",
        description="Add the controller whose config is given to the voter set, as "
        "kafka-metadata-quorum add-controller does. It must run already, formatted with "
        "--no-initial-controllers: the leader waits for it to catch up as an observer, then "
        "commits the new voter set. Needs ALTER on the cluster.",
    )
    add_config_arguments(add)
    add.add_argument(
        "--bootstrap-controller",
        default=argparse.SUPPRESS,
        metavar="HOST:PORT[,HOST:PORT...]",
        help=bootstrap_help,
    )
    add_command_config_argument(add, only_when_given=True)
    add.add_argument(
        "--timeout-s",
        type=float,
        default=120.0,
        metavar="SECONDS",
        help="how long to wait for the controller to catch up and the change to commit "
        "(default 120)",
    )
    add.set_defaults(handler=quorum_add_controller)

    remove = commands.add_parser(
        "remove-controller",
        help="remove a voter from the voter set (KIP-853)",
        description="Remove the voter with this node id and directory id, as "
        "kafka-metadata-quorum remove-controller does (`quorum describe --status` shows both). "
        "A removed leader hands over once the removal commits. Needs ALTER on the cluster.",
    )
    remove.add_argument(
        "--controller-id", "-i", type=int, required=True, metavar="ID", help="its node id"
    )
    remove.add_argument(
        "--controller-directory-id",
        "-d",
        required=True,
        metavar="DIRID",
        help="its directory id (directoryId in `quorum describe --status`)",
    )
    remove.add_argument(
        "--bootstrap-controller",
        default=argparse.SUPPRESS,
        metavar="HOST:PORT[,HOST:PORT...]",
        help=bootstrap_help,
    )
    add_command_config_argument(remove, only_when_given=True)
    remove.add_argument(
        "--timeout-s",
        type=float,
        default=60.0,
        metavar="SECONDS",
        help="how long to wait for the change to commit (default 60)",
    )
    remove.set_defaults(handler=quorum_remove_controller)


def quorum_describe(args: argparse.Namespace) -> int:
    # Imported here: loading gRPC costs every other command about a tenth of a second.
    from quorum.security.tls import command_security
    from quorum.tools.quorum_describe import QuorumDescribeError, run_describe

    security = command_security(args.command_config)
    replication: bool = args.replication
    human_readable: bool = args.human_readable
    controller: str | None = args.bootstrap_controller
    server: str | None = args.bootstrap_server
    if controller is not None and server is not None:
        raise CommandError(
            "Only one of --bootstrap-server or --bootstrap-controller must be specified"
        )
    bootstrap = controller or server
    if bootstrap is None:
        raise CommandError(
            "One of --bootstrap-server or --bootstrap-controller must be specified (a broker or "
            "a controller, HOST:PORT)"
        )
    if human_readable and not replication:
        raise CommandError("The option --human-readable is only supported along with --replication")
    try:
        return run_describe(
            bootstrap,
            replication=replication,
            human_readable=human_readable,
            out=sys.stdout,
            err=sys.stderr,
            now_ms=lambda: time.time_ns() // 1_000_000,
            security=security,
        )
    except QuorumDescribeError as exc:
        raise CommandError(str(exc)) from exc


def _voter_admin(args: argparse.Namespace) -> Any:
    from quorum.admin import AdminClient
    from quorum.security.tls import command_security

    bootstrap: str | None = args.bootstrap_controller
    if bootstrap is None:
        raise CommandError("--bootstrap-controller HOST:PORT is required")
    timeout_s: float = args.timeout_s
    return AdminClient(
        bootstrap, security=command_security(args.command_config), timeout_s=timeout_s
    )


def quorum_add_controller(args: argparse.Namespace) -> int:
    from quorum.errors import AdminError

    config = config_from_args(args)
    if not config.is_controller:
        raise CommandError(
            f"{config.describe_source()} is not a controller's config (process.roles has no "
            "'controller'); only controllers can be voters"
        )
    properties = meta_properties.read(config.metadata_log_dir)
    if properties.directory_id is None:
        raise CommandError(
            f"{config.metadata_log_dir}/{META_PROPERTIES_FILE} has no directory.id; format the "
            f"controller with `{PROG} storage format --no-initial-controllers` first"
        )
    listener = config.advertised(config.listener)
    endpoints = [(listener.name, listener.host, listener.port)]
    with _voter_admin(args) as admin:
        try:
            admin.add_raft_voter(config.node_id, properties.directory_id, endpoints)
        except AdminError as exc:
            raise CommandError(f"could not add controller {config.node_id}: {exc}") from exc
    print(
        f"Added controller {config.node_id} with directory id {properties.directory_id} and "
        f"endpoints: {listener.name}://{listener.host}:{listener.port}"
    )
    return 0


def quorum_remove_controller(args: argparse.Namespace) -> int:
    from quorum.errors import AdminError

    controller_id: int = args.controller_id
    directory_id = parse_directory_id(args.controller_directory_id)
    with _voter_admin(args) as admin:
        try:
            admin.remove_raft_voter(controller_id, directory_id)
        except AdminError as exc:
            raise CommandError(f"could not remove controller {controller_id}: {exc}") from exc
    print(f"Removed KRaft controller {controller_id} with directory id {directory_id}")
    return 0


def parse_directory_id(text: str) -> Uuid:
    try:
        directory_id = Uuid.parse(text)
    except InvalidUuidError:
        raise CommandError(
            f"--controller-directory-id {text!r} is not a directory id (22 characters of "
            "URL-safe base64, as `quorum describe --status` prints it)"
        ) from None
    if directory_id in RESERVED_UUIDS:
        raise CommandError(f"--controller-directory-id {directory_id} is reserved")
    return directory_id


# ----- topics ------------------------------------------------------------------------------------

TOPIC_ACTIONS: Final = ("create", "alter", "describe", "delete", "list")


def add_topics_commands(subparsers: Subparsers) -> None:
    topics = subparsers.add_parser(
        "topics",
        help="create, alter, describe, delete and list topics (kafka-topics)",
        description="Create, alter (add partitions), describe, delete and list topics, like "
        "kafka-topics.sh, through the admin API of the controllers. The action is a flag "
        "(--create, ...) as in Kafka, or the same word as a subcommand (topics create ...). "
        "Errors print 'Error while executing topic command : <ERROR_NAME>: <message>' and exit 1.",
    )
    topics.add_argument(
        "action",
        nargs="?",
        choices=TOPIC_ACTIONS,
        metavar="ACTION",
        help="create, alter, describe, delete or list (instead of the flag of the same name)",
    )
    bootstrap = topics.add_mutually_exclusive_group()
    bootstrap_help = (
        "a controller's listener; a comma-separated list is tried in turn "
        "(--bootstrap-server and --bootstrap-controller are the same here)"
    )
    bootstrap.add_argument(
        "--bootstrap-server", metavar="HOST:PORT[,HOST:PORT...]", help=bootstrap_help
    )
    bootstrap.add_argument(
        "--bootstrap-controller", metavar="HOST:PORT[,HOST:PORT...]", help=bootstrap_help
    )
    actions = topics.add_mutually_exclusive_group()
    actions.add_argument("--create", dest="do_create", action="store_true", help="create a topic")
    actions.add_argument(
        "--alter",
        dest="do_alter",
        action="store_true",
        help="add partitions to topics: --partitions N is the new total (partitions are never "
        "removed)",
    )
    actions.add_argument(
        "--describe",
        dest="do_describe",
        action="store_true",
        help="describe the given topics, or every topic",
    )
    actions.add_argument(
        "--delete", dest="do_delete", action="store_true", help="delete topics by name or by id"
    )
    actions.add_argument("--list", dest="do_list", action="store_true", help="list topic names")
    topics.add_argument(
        "--topic",
        metavar="TOPIC[,TOPIC...]",
        help="the topic (with --create: exactly one); exact names, not a regular expression",
    )
    topics.add_argument(
        "--topic-id",
        metavar="ID",
        help="the topic id to describe or delete (22-character base64); wins over --topic",
    )
    topics.add_argument(
        "--partitions",
        type=int,
        metavar="N",
        help="the number of partitions (--create: default the cluster's num.partitions; "
        "--alter: the new total)",
    )
    topics.add_argument(
        "--replication-factor",
        type=int,
        metavar="R",
        help="the replication factor (default: the cluster's)",
    )
    topics.add_argument(
        "--config",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a topic config for --create (repeatable), e.g. cleanup.policy=compact",
    )
    topics.add_argument(
        "--replica-assignment",
        metavar="B:B,B:B...",
        help="explicit replicas for --create or --alter: per partition (comma-separated) its "
        "broker ids (colon-separated), the preferred leader first; with --alter the list "
        "covers every partition and the existing ones' entries are skipped, as in Kafka",
    )
    topics.add_argument(
        "--if-exists",
        action="store_true",
        help="with --describe, --alter or --delete: an unknown topic is not an error",
    )
    topics.add_argument(
        "--if-not-exists",
        action="store_true",
        help="with --create: an existing topic is not an error",
    )
    topics.add_argument(
        "--exclude-internal",
        action="store_true",
        help="with --list or --describe: leave internal topics out",
    )
    topics.add_argument(
        "--under-replicated-partitions",
        action="store_true",
        help="with --describe: only the partitions whose ISR is smaller than their replica list "
        "(no topic lines, as in Kafka)",
    )
    topics.add_argument(
        "--unavailable-partitions",
        action="store_true",
        help="with --describe: only the partitions without a leader or whose leader's broker "
        "is fenced or unregistered",
    )
    add_command_config_argument(topics)
    topics.add_argument(
        "--timeout-ms",
        type=int,
        default=30_000,
        metavar="MS",
        help="the deadline of each admin call, retries included (default 30000)",
    )
    topics.set_defaults(handler=topics_command)


def topics_command(args: argparse.Namespace) -> int:
    # Imported here: the admin client loads gRPC.
    from quorum.tools.topics import TopicCommandError, command_from_args, run_topic_command

    try:
        command = command_from_args(args)
    except TopicCommandError as exc:
        raise CommandError(str(exc)) from exc
    return run_topic_command(command, sys.stdout, sys.stderr)


# ----- acls --------------------------------------------------------------------------------------


def add_acls_commands(subparsers: Subparsers) -> None:
    from quorum.tools.acls import add_acl_arguments

    parser = subparsers.add_parser(
        "acls",
        help="add, remove and list ACLs (kafka-acls)",
        description="Add, remove and list ACLs like kafka-acls.sh (docs/authorization.md). "
        "Needs ALTER (add, remove) or DESCRIBE (list) on the cluster, or a super user.",
    )
    add_acl_arguments(parser)
    add_command_config_argument(parser)
    parser.set_defaults(handler=acls_command)


def acls_command(args: argparse.Namespace) -> int:
    from quorum.admin import AdminClient
    from quorum.errors import AdminError
    from quorum.security.tls import command_security
    from quorum.tools.acls import AclCommandError, command_from_args, run_acl_command

    try:
        command = command_from_args(args)
    except AclCommandError as exc:
        raise CommandError(str(exc)) from exc
    security = command_security(args.command_config)
    try:
        with AdminClient(args.bootstrap, security=security) as admin:
            return run_acl_command(command, admin, sys.stdout)
    except AdminError as exc:
        sys.stderr.write(f"Error while executing ACL command: {exc}\n")
        return 1


# ----- entry point -------------------------------------------------------------------------------

# One function per command group; later groups append themselves here.
# ----- controller ----------------------------------------------------------------------------


def add_controller_commands(subparsers: Subparsers) -> None:
    parser = subparsers.add_parser("controller", help="run a controller (a Raft voter)")
    commands = parser.add_subparsers(dest="controller_command", required=True)
    start = commands.add_parser(
        "start",
        help="start a controller process on its config",
        description=(
            "Start a controller: a voter of the __cluster_metadata quorum. The metadata "
            "directory must be formatted first (metaquorum storage format). SIGTERM stops it; "
            "a leader hands over to a successor first."
        ),
    )
    add_config_arguments(start)
    start.set_defaults(handler=controller_start)


def _run_node(args: argparse.Namespace, role: str) -> int:
    """``controller start`` / ``broker start``: check the role, set up logging, run the
    process until it stops. Start-up refusals become a one-line error."""

    from quorum.logs import configure_logging
    from quorum.server.raft_manager import StartupError

    config = config_from_args(args)
    if role not in config.process_roles:
        raise CommandError(
            f"{config.describe_source()} has process.roles {sorted(config.process_roles)}; "
            f"'{role} start' needs the {role} role"
        )
    # gRPC's core says nothing of a failed TLS handshake unless asked: route its lines through
    # a reader that counts and logs those (docs/security.md#what-a-node-logs). Before logging
    # is configured (it takes sys.stderr) and before gRPC's first server (it reads the level).
    from quorum.server.grpc_log import GrpcCoreLog

    GrpcCoreLog.install(config.listener.name)
    configure_logging(role)
    # `kill -USR1 <pid>` prints every thread's stack to stderr (the node's log), like a JVM's
    # thread dump: how to see where a node that stopped answering is stuck.
    import faulthandler
    import signal

    faulthandler.register(signal.SIGUSR1, all_threads=True)
    # Only the role's own modules: a controller needs no Kafka codec, a broker no controller.
    if role == "controller":
        from quorum.server.controller import run_controller as run
    else:
        from broker.server import run_broker as run
    from quorum.server.event_loop import run as run_event_loop

    try:
        return run_event_loop(run(config))
    except StartupError as exc:
        raise CommandError(str(exc)) from exc


def controller_start(args: argparse.Namespace) -> int:
    return _run_node(args, "controller")


# ----- broker ----------------------------------------------------------------------------------


def add_broker_commands(subparsers: Subparsers) -> None:
    parser = subparsers.add_parser("broker", help="run a broker (a Raft observer)")
    commands = parser.add_subparsers(dest="broker_command", required=True)
    start = commands.add_parser(
        "start",
        help="start a broker process on its config",
        description=(
            "Start a broker: it fetches __cluster_metadata as an observer, registers with the "
            "active controller, heartbeats, and keeps its partition directories in line with "
            "the metadata (stale ones go to log.dirs/deleting/ and are deleted after "
            "delete.topic.delay.ms). Format its log dirs first (metaquorum storage format)."
        ),
    )
    add_config_arguments(start)
    start.set_defaults(handler=broker_start)
    pending = commands.add_parser(
        "pending-deletions",
        help="list what reconciliation has moved aside and what it would do now (dry run)",
        description=(
            "Offline and read-only: scans log.dirs and replays the broker's local copy of the "
            "metadata log to show the pending deletions in deleting/ (with their due times) "
            "and the FULL reconciliation the broker would run against that metadata. Safe "
            "while the broker runs. One JSON object per line."
        ),
    )
    add_config_arguments(pending)
    pending.set_defaults(handler=broker_pending_deletions)


def broker_start(args: argparse.Namespace) -> int:
    return _run_node(args, "broker")


def broker_pending_deletions(args: argparse.Namespace) -> int:
    import json

    from broker.pending import pending_deletions_report

    config = config_from_args(args)
    for row in pending_deletions_report(config):
        print(json.dumps(row, sort_keys=True))
    return 0


# ----- replay ----------------------------------------------------------------------------------


def add_replay_commands(subparsers: Subparsers) -> None:
    parser = subparsers.add_parser(
        "replay",
        help="replay a metadata log with Spark into Parquet tables and a report",
        description=(
            "Read a metadata log directory (segments, and snapshots if present) with the "
            "metaquorum PySpark data source and write the analytics tables (topic lifecycle, "
            "name reuse, partitions per broker, leadership timeline, broker events, state as "
            "of an offset) as Parquet plus report.md with plots under --out."
        ),
    )
    parser.add_argument(
        "--log-dir", type=Path, required=True, help="metadata.log.dir or __cluster_metadata-0/"
    )
    parser.add_argument("--out", type=Path, required=True, help="output directory")
    parser.add_argument("--master", default="local[*]", help="Spark master URL (default local[*])")
    parser.add_argument("--as-of-offset", type=int, default=None, help="state as of this offset")
    parser.add_argument(
        "--include-snapshots",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="read the .checkpoint files too (default: when the log does not start at offset 0)",
    )
    parser.add_argument(
        "--verbose",
        action="store_true",
        help="let Spark and the JVM print their own start-up lines and warnings to the terminal "
        "(default: into OUT/spark.log)",
    )
    parser.set_defaults(handler=replay)


def replay(args: argparse.Namespace) -> int:
    from quorum.extras import MissingExtraError, require_extra

    try:
        require_extra("analytics", f"{PROG} replay")
    except MissingExtraError as exc:
        raise CommandError(str(exc)) from None
    from quorum.analytics.replay import run_replay

    return run_replay(
        args.log_dir,
        args.out,
        master=args.master,
        as_of_offset=args.as_of_offset,
        include_snapshots=args.include_snapshots,
        verbose=args.verbose,
    )


def add_spark_commands(subparsers: Subparsers) -> None:
    parser = subparsers.add_parser(
        "spark", help="run the replay on a Spark cluster: pack the executors' environment"
    )
    commands = parser.add_subparsers(dest="spark_command", required=True)
    pack = commands.add_parser(
        "pack-env",
        help="write the Python environment the executors need as one archive",
        description=(
            "Write the environment a Spark cluster's executors need to run the metaquorum "
            "data source (quorum, msgpack, msgspec, crc32c, structlog, pyarrow, numpy and their "
            "requirements, from this installation) as a venv layout in one archive, to ship "
            "with spark-submit --archives FILE#env --conf spark.pyspark.python=./env/bin/python. "
            "Every worker needs this Python version at the same path; in client mode ./env "
            "must also exist where spark-submit runs (quorum/analytics/pack.py)."
        ),
    )
    pack.add_argument(
        "--out",
        type=Path,
        required=True,
        metavar="FILE",
        help="the archive to write: .tar.gz or .tgz (Spark unpacks a plain .tar without "
        "file permissions)",
    )
    pack.set_defaults(handler=spark_pack_env)


def spark_pack_env(args: argparse.Namespace) -> int:
    from quorum.analytics.pack import PackError, pack_env

    try:
        path = pack_env(args.out)
    except PackError as exc:
        raise CommandError(str(exc)) from None
    size_mib = path.stat().st_size / (1 << 20)
    print(f"wrote {path} ({size_mib:.0f} MiB); submit with:")
    print(
        f"  PYSPARK_DRIVER_PYTHON={sys.executable} spark-submit --master spark://HOST:7077 "
        f"--archives {path}#env --conf spark.pyspark.python=./env/bin/python "
        "quorum/analytics/replay.py --log-dir DIR --out DIR"
    )
    return 0


# ----- dev -------------------------------------------------------------------------------------


def add_dev_commands(subparsers: Subparsers) -> None:
    parser = subparsers.add_parser("dev", help="run the local cluster of deploy/local/")
    commands = parser.add_subparsers(dest="dev_command", required=True)
    up = commands.add_parser(
        "up",
        help="format and start the local cluster, show its status, stop it",
        description=(
            "Format every node of deploy/local/ (data under .data/), start them as processes, "
            "wait for a leader, print the quorum's status, then walk the KIP-516 story with "
            "real admin commands. Stops everything on exit or Ctrl-C."
        ),
    )
    up.add_argument("--deploy-dir", type=Path, default=Path("deploy/local"))
    up.add_argument("--data-dir", type=Path, default=Path(".data"))
    up.add_argument("--keep-running", action="store_true", help="keep the cluster up until Ctrl-C")
    up.add_argument("--keep-data", action="store_true", help="reuse the data of a previous run")
    up.add_argument(
        "--verbose",
        action="store_true",
        help="show Spark's and the JVM's own output during the replay step",
    )
    up.add_argument(
        "--no-story",
        action="store_true",
        help="only start the cluster and show its status (skip the KIP-516 walk-through)",
    )
    up.set_defaults(handler=dev_up)
    certs = commands.add_parser(
        "certs",
        help="write a local CA, node certificates and an admin client certificate",
        description=(
            "Write into --out a local CA (ca.pem, ca-key.pem), one certificate per node of "
            "--deploy-dir (node-<id>.pem: key and certificate, CN=node-<id>, a URI SAN per "
            "role, spiffe://metaquorum/<cluster-id>/<role>/<id>, the DNS names its peers "
            "check, localhost and 127.0.0.1), an admin client certificate (admin.pem, "
            "CN=admin) and client.properties for --command-config. Keys are EC P-256, mode "
            "0600. Existing files are kept (a node certificate naming another cluster or other "
            "roles is rewritten) unless --force. The cluster id "
            "is --cluster-id, else the one in DIR/cluster.id, else a new one written there; "
            "format the nodes with it (`dev up` does). docs/security.md#certificates"
        ),
    )
    certs.add_argument("--out", type=Path, required=True, metavar="DIR")
    certs.add_argument("--deploy-dir", type=Path, default=Path("deploy/local"))
    certs.add_argument("--cluster-id", metavar="ID", help="the cluster the node URIs name")
    certs.add_argument("--force", action="store_true", help="rewrite every file, with a new CA")
    certs.set_defaults(handler=dev_certs_command)


def dev_certs_command(args: argparse.Namespace) -> int:
    from quorum.security.certs import dev_certs

    cluster_id_text: str | None = args.cluster_id
    if cluster_id_text is not None:
        parse_cluster_id(cluster_id_text)
    cluster_id, result = dev_certs(
        args.out, deploy_dir=args.deploy_dir, cluster_id=cluster_id_text, force=args.force
    )
    for path in result.written:
        print(f"wrote {path}")
    for path in result.kept:
        print(f"kept {path}")
    print(f"cluster id {cluster_id} (format the nodes with --cluster-id {cluster_id})")
    return 0


def dev_up(args: argparse.Namespace) -> int:
    from quorum.devcluster import dev_up as run

    return run(
        args.deploy_dir,
        args.data_dir,
        keep_running=args.keep_running,
        wipe=not args.keep_data,
        story=not args.no_story,
        verbose=args.verbose,
    )


# ----- metadata ----------------------------------------------------------------------------------


def add_metadata_commands(subparsers: Subparsers) -> None:
    metadata = subparsers.add_parser(
        "metadata",
        help="browse the metadata image of a snapshot and log, offline (kafka-metadata-shell)",
        description="Browse the metadata image as a file tree, like kafka-metadata-shell.sh: "
        "Kafka's paths (/image/topics/byName, /image/topics/byId, /image/cluster/brokers, "
        "/image/configs, /image/acls/byId, /local) and the older ones (/topics, /topicIds, "
        "/brokers, /configs, /deletedTopics, /metadataQuorum). The image is "
        "loaded offline and read-only from a snapshot and/or the log records after it.",
    )
    commands = metadata.add_subparsers(dest="metadata_command", metavar="COMMAND", required=True)
    source = argparse.ArgumentParser(add_help=False)
    source.add_argument(
        "--snapshot",
        type=Path,
        metavar="PATH",
        help="a snapshot file (NNNNNNNNNNNNNNNNNNNN-NNNNNNNNNN.checkpoint), or a metadata log "
        "directory whose newest valid snapshot is used",
    )
    source.add_argument(
        "--log",
        type=Path,
        metavar="DIR",
        help="a metadata log directory (__cluster_metadata-0/, or the metadata.log.dir holding "
        "it) whose records after the snapshot are replayed on top of it (without --snapshot: "
        "the whole log, which must start at offset 0)",
    )
    shell = commands.add_parser(
        "shell",
        parents=[source],
        help="an interactive shell: ls, cd, cat, find, tree, pwd, help, exit",
        description="An interactive shell over the image: ls, cd, cat, find, tree, pwd, help, "
        "exit.",
    )
    shell.set_defaults(handler=metadata_command)
    ls = commands.add_parser(
        "ls",
        parents=[source],
        help="list directories of the image (one entry per line)",
        description="List each PATH (default /): a directory's entries one per line, a file's "
        "own path. Exits 1 if a path does not exist.",
    )
    ls.add_argument("paths", nargs="*", metavar="PATH", help="e.g. /topics or /topics/orders")
    ls.set_defaults(handler=metadata_command)
    cat = commands.add_parser(
        "cat",
        parents=[source],
        help="print files of the image",
        description="Print each PATH, e.g. /topics/orders/0/data (partition JSON) or "
        "/brokers/1/registration. Exits 1 if a path does not exist or is a directory.",
    )
    cat.add_argument("paths", nargs="+", metavar="PATH")
    cat.set_defaults(handler=metadata_command)
    find = commands.add_parser(
        "find",
        parents=[source],
        help="print every path under a path (Kafka's find)",
        description="Print every path under each PATH (default /), itself first, one per line.",
    )
    find.add_argument("paths", nargs="*", metavar="PATH")
    find.set_defaults(handler=metadata_command)
    tree = commands.add_parser(
        "tree",
        parents=[source],
        help="print the tree under a path with the files' contents (Kafka's tree)",
        description="Print the tree under each PATH (default /): a directory as 'name:', a "
        "file as 'name: content', each level indented by two spaces.",
    )
    tree.add_argument("paths", nargs="*", metavar="PATH")
    tree.set_defaults(handler=metadata_command)


def metadata_command(args: argparse.Namespace) -> int:
    # Imported here so that other commands do not pay for it.
    from quorum.logs import configure_logging
    from quorum.tools.metadata_shell import (
        MetadataShellError,
        cat_paths,
        find_paths,
        load_image,
        ls_paths,
        run_shell,
        tree_paths,
    )

    snapshot: Path | None = args.snapshot
    log: Path | None = args.log
    command: str = args.metadata_command
    if snapshot is None and log is None:
        raise CommandError(f"metadata {command} needs --snapshot PATH, --log DIR or both")
    configure_logging("metadata")  # storage's warnings go to stderr, never into the output
    try:
        loaded = load_image(snapshot, log, lambda message: print(message, file=sys.stderr))
    except MetadataShellError as exc:
        raise CommandError(str(exc)) from exc
    try:
        if command == "ls":
            return ls_paths(loaded, args.paths, sys.stdout, sys.stderr)
        if command == "cat":
            return cat_paths(loaded, args.paths, sys.stdout, sys.stderr)
        if command == "find":
            return find_paths(loaded, args.paths, sys.stdout, sys.stderr)
        if command == "tree":
            return tree_paths(loaded, args.paths, sys.stdout, sys.stderr)
        return run_shell(loaded)
    except BrokenPipeError:
        _silence_stdout()
        return 0


COMMAND_GROUPS: Final[list[Callable[[Subparsers], None]]] = [
    add_storage_commands,
    add_controller_commands,
    add_broker_commands,
    add_replay_commands,
    add_spark_commands,
    add_dev_commands,
    add_log_commands,
    add_quorum_commands,
    add_topics_commands,
    add_acls_commands,
    add_metadata_commands,
]


def version_text() -> str:
    """``metaquorum <version>``, as Kafka's tools print theirs for ``--version``."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return f"{PROG} {version(PROG)}"
    except PackageNotFoundError:
        return f"{PROG} (not installed: run from a source tree)"


def _add_version_everywhere(parser: argparse.ArgumentParser, text: str) -> None:
    """``--version`` on the command and on every subcommand (``metaquorum topics --version``),
    as every Kafka tool takes it."""
    parser.add_argument(
        "--version", action="version", version=text, help="print the version and exit"
    )
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for subparser in dict.fromkeys(action.choices.values()):
                _add_version_everywhere(subparser, text)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=PROG,
        description="A KRaft-style Raft metadata quorum with KIP-516 topic IDs.",
    )
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for add_commands in COMMAND_GROUPS:
        add_commands(commands)
    _add_version_everywhere(parser, version_text())
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
