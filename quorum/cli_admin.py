"""The ``metaquorum`` commands that ask a running cluster, through its admin API: ``quorum``
(kafka-metadata-quorum: describe, add-controller, remove-controller), ``topics`` (kafka-topics),
``acls`` (kafka-acls) and ``leader-election`` (kafka-leader-election); ``groups``
(kafka-consumer-groups) asks the brokers' Kafka listener instead, with confluent-kafka. Each
handler parses its arguments and calls the tool or the ``AdminClient`` that does the work; both
load gRPC (or librdkafka), so they are imported when a handler runs.
"""

# Imported in the handlers: loading gRPC costs every other command about a tenth of a second.
# ruff: noqa: PLC0415

from __future__ import annotations

import argparse
import sys
import time
from typing import Any, Final

from quorum.cli_common import (
    PROG,
    CommandError,
    Subparsers,
    add_command_config_argument,
    add_config_arguments,
    config_from_args,
)
from quorum.ids import RESERVED_UUIDS, InvalidUuidError, Uuid

__all__ = [
    "add_acls_commands",
    "add_configs_commands",
    "add_groups_commands",
    "add_leader_election_commands",
    "add_quorum_commands",
    "add_topics_commands",
]

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
    from quorum import meta_properties
    from quorum.errors import AdminError
    from quorum.meta_properties import META_PROPERTIES_FILE

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


# ----- leader-election ---------------------------------------------------------------------------


def add_leader_election_commands(subparsers: Subparsers) -> None:
    from quorum.tools.leader_election import add_leader_election_arguments

    parser = subparsers.add_parser(
        "leader-election",
        help="elect preferred or unclean leaders (kafka-leader-election)",
        description="Elect partition leaders like kafka-leader-election.sh: PREFERRED moves "
        "leadership back to each partition's first replica when it is in the ISR; UNCLEAN "
        "elects a live replica for a partition without a leader. Needs ALTER on the cluster. "
        "Exits 1 if any partition could not be elected.",
    )
    add_leader_election_arguments(parser)
    add_command_config_argument(parser)
    parser.set_defaults(handler=leader_election_command)


def leader_election_command(args: argparse.Namespace) -> int:
    from quorum.admin import AdminClient
    from quorum.errors import AdminError
    from quorum.security.tls import command_security
    from quorum.tools.leader_election import (
        LeaderElectionError,
        command_from_args,
        run_leader_election,
    )

    try:
        command = command_from_args(args)
    except LeaderElectionError as exc:
        raise CommandError(str(exc)) from exc
    security = command_security(args.command_config)
    try:
        with AdminClient(args.bootstrap, security=security) as admin:
            return run_leader_election(command, admin, sys.stdout, sys.stderr)
    except AdminError as exc:
        sys.stderr.write(f"Error while running the leader election: {exc}\n")
        return 1


# ----- configs -----------------------------------------------------------------------------------


def add_configs_commands(subparsers: Subparsers) -> None:
    from quorum.tools.configs import add_configs_arguments

    parser = subparsers.add_parser(
        "configs",
        help="alter or describe topic, broker and client quota configs (kafka-configs)",
        description="Alter or describe a topic's or a broker's configs, or a user's or "
        "client's quotas, like kafka-configs.sh: --alter with --add-config k=v[,k2=v2] and "
        "--delete-config k[,k2], or --describe [--all]. Altering needs ALTER_CONFIGS on the "
        "topic (on the cluster for brokers and quotas), describing DESCRIBE_CONFIGS. Exits 1 "
        "on a refusal.",
    )
    add_configs_arguments(parser)
    add_command_config_argument(parser)
    parser.set_defaults(handler=configs_command)


def configs_command(args: argparse.Namespace) -> int:
    from quorum.admin import AdminClient
    from quorum.errors import AdminError
    from quorum.security.tls import command_security
    from quorum.tools.configs import ConfigsError, command_from_args, run_configs

    try:
        command = command_from_args(args)
    except ConfigsError as exc:
        raise CommandError(str(exc)) from exc
    security = command_security(args.command_config)
    try:
        with AdminClient(args.bootstrap, security=security) as admin:
            return run_configs(command, admin, sys.stdout, sys.stderr)
    except AdminError as exc:
        sys.stderr.write(f"Error while executing config command: {exc}\n")
        return 1


# ----- groups ------------------------------------------------------------------------------------


def add_groups_commands(subparsers: Subparsers) -> None:
    from quorum.tools.groups import add_groups_arguments

    parser = subparsers.add_parser(
        "groups",
        help="list, describe, delete consumer groups and reset their offsets "
        "(kafka-consumer-groups)",
        description="Consumer groups like kafka-consumer-groups.sh, over Kafka's protocol to a "
        "broker's Kafka listener (--bootstrap-server): --list, --describe (--group G | "
        "--all-groups) [--members [--verbose] | --offsets | --state], --reset-offsets, --delete, "
        "--delete-offsets. Options, messages and output are Kafka's; as in Kafka, a usage error "
        "exits 1 and an error while running prints 'Error: ...' on stdout and exits 0 "
        "(docs/cli.md#metaquorum-groups).",
    )
    add_groups_arguments(parser)
    add_command_config_argument(parser)
    parser.set_defaults(handler=groups_command)


def groups_command(args: argparse.Namespace) -> int:
    from quorum.security.tls import command_security
    from quorum.tools.groups import GroupsError, GroupsUsageError, command_from_args, run_groups

    try:
        command = command_from_args(args, sys.stderr)
    except GroupsUsageError as exc:
        sys.stderr.write(f"{exc}\n")
        sys.stderr.write(f"(see `{PROG} groups --help`)\n")
        return 1
    security = command_security(args.command_config)
    # Loads confluent-kafka (librdkafka): only this command needs it.
    from quorum.tools.groups_admin import ConfluentGroupsAdmin

    admin = ConfluentGroupsAdmin(command.bootstrap, security, command.timeout_ms)
    try:
        return run_groups(command, admin, sys.stdout, sys.stderr)
    except GroupsError as exc:  # pragma: no cover - run_groups prints these itself
        raise CommandError(str(exc)) from exc
