"""The ``metaquorum`` command.

Commands are grouped as Kafka's tools are (``kafka-storage.sh`` -> ``metaquorum storage``,
``kafka-metadata-quorum.sh`` -> ``metaquorum quorum``, ...). Each group is one function
``add_<group>_commands(subparsers)`` listed in ``COMMAND_GROUPS``; it adds its parser and, per
subcommand, a handler ``(args) -> exit code`` with ``parser.set_defaults(handler=...)``. A
handler only parses its arguments and calls the module that does the work (``quorum/tools/``,
``quorum/server/``, ``broker/``), imported when the handler runs so that each command loads only
what it needs. To add a group, write its ``add_..._commands`` and append it to
``COMMAND_GROUPS``; commands that read a node config use ``add_config_arguments`` and
``config_from_args`` (``quorum/cli_common.py``).

The groups: here, a node's own (``storage``, ``controller``, ``broker``) and the local cluster
(``dev``); in ``quorum/cli_admin.py`` those that ask a running cluster (``quorum``, ``topics``,
``acls``, ``leader-election``); in ``quorum/cli_offline.py`` those that read a metadata log's
files (``log``, ``metadata``, ``replay``, ``spark``).

Errors that a person can fix (a bad config, an unformatted directory, a bad id) are raised as
``CommandError``, ``ConfigError``, ``MetaPropertiesError`` or ``InvalidUuidError``; ``main``
prints them to stderr and returns 1. Usage errors exit 2, as argparse does.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Final

from quorum.cli_admin import (
    add_acls_commands,
    add_configs_commands,
    add_groups_commands,
    add_leader_election_commands,
    add_quorum_commands,
    add_topics_commands,
)
from quorum.cli_common import (
    PROG,
    CommandError,
    Handler,
    Subparsers,
    add_command_config_argument,
    add_config_arguments,
    config_from_args,
    parse_cluster_id,
)
from quorum.cli_offline import (
    add_log_commands,
    add_metadata_commands,
    add_replay_commands,
    add_spark_commands,
)
from quorum.config import ConfigError
from quorum.ids import InvalidUuidError, Uuid

__all__ = [
    "COMMAND_GROUPS",
    "PROG",
    "CommandError",
    "add_command_config_argument",
    "add_config_arguments",
    "build_parser",
    "config_from_args",
    "main",
    "parse_cluster_id",
    "version_text",
]

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
    from quorum.tools.storage import InitialVoters, StorageCommandError, format_storage

    cluster_id = parse_cluster_id(args.cluster_id)
    config = config_from_args(args)
    initial_voters = InitialVoters(
        standalone=args.standalone,
        initial_controllers=args.initial_controllers,
        no_initial_controllers=args.no_initial_controllers,
    )
    try:
        return format_storage(
            config,
            cluster_id,
            ignore_formatted=args.ignore_formatted,
            initial_voters=initial_voters,
            out=sys.stdout,
            err=sys.stderr,
        )
    except StorageCommandError as exc:
        raise CommandError(str(exc)) from exc


def storage_info(args: argparse.Namespace) -> int:
    from quorum.tools.storage import storage_info as show

    return show(config_from_args(args), sys.stdout)


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


# ----- entry point -------------------------------------------------------------------------------

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
    add_leader_election_commands,
    add_configs_commands,
    add_groups_commands,
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
    except (CommandError, ConfigError, InvalidUuidError, OSError) as exc:
        print(f"Error: {exc}", file=sys.stderr)
        return 1
    except Exception as exc:
        # Imported only now: the storage modules it pulls in cost the commands that never
        # read a data directory (topics, quorum describe) a few hundredths of a second.
        from quorum.meta_properties import MetaPropertiesError

        if not isinstance(exc, MetaPropertiesError):
            raise
        print(f"Error: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    raise SystemExit(main())
