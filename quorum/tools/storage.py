"""``metaquorum storage``: format a node's directories and check them, as Kafka's
``kafka-storage.sh format`` and ``info`` do. ``quorum/cli.py`` parses the arguments and loads
the config; this module decides and writes.

``format`` writes ``meta.properties`` (cluster.id, node.id, a new directory.id) into
``metadata.log.dir`` and every ``log.dirs`` entry. It locks every existing directory first
(``quorum/storage/dirlock.py``: a running node holds its own), and decides for every directory
before it writes any, so a refusal leaves nothing half done. A controller of a quorum whose
voter set lives in the log (KIP-853, ``controller.quorum.bootstrap.servers``) is formatted with
one of Kafka's modes: ``--standalone`` (a one-voter quorum of itself), ``--initial-controllers``
(the first voters, each with its directory id) or ``--no-initial-controllers`` (an observer
that will join); the first two write the bootstrap voter set (``bootstrap.checkpoint``) before
``meta.properties``.

Errors a person can fix are ``StorageCommandError``, whose message says what to do.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Final, TextIO

from quorum import meta_properties
from quorum.config import NodeConfig
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
from quorum.storage.dirlock import (
    LOCK_FILE_NAME,
    DirectoryLockedError,
    DirectoryLockError,
    DirLock,
    lock_directory,
    release_all,
)

__all__ = [
    "METADATA_VERSION",
    "InitialVoters",
    "StorageCommandError",
    "bootstrap_voters",
    "format_storage",
    "parse_initial_controllers",
    "storage_info",
]

# The metadata feature level a freshly formatted cluster starts at (Kafka prints e.g.
# "3.9-IV0"). There is one level so far; it will move to the metadata package when records
# gain feature levels.
METADATA_VERSION: Final = "1"


class StorageCommandError(Exception):
    """``storage format`` cannot do what was asked; the message says why and what to do."""


@dataclass(frozen=True, slots=True)
class InitialVoters:
    """KIP-853's format options, as given: at most one of them is set (argparse's group)."""

    standalone: bool = False
    initial_controllers: str | None = None
    no_initial_controllers: bool = False


def format_storage(
    config: NodeConfig,
    cluster_id: Uuid,
    *,
    ignore_formatted: bool,
    initial_voters: InitialVoters,
    out: TextIO,
    err: TextIO,
) -> int:
    """``storage format``: prints what it does to ``out`` and warnings to ``err``; 0 once every
    directory is formatted (skipped ones included)."""
    bootstrap = bootstrap_voters(config, initial_voters)
    if config.cluster_id is not None and config.cluster_id != cluster_id:
        raise StorageCommandError(
            f"--cluster-id {cluster_id} differs from cluster.id {config.cluster_id} in "
            f"{config.describe_source()}; use the same id in both, or remove cluster.id from "
            "the config"
        )
    # Lock every existing directory first (quorum/storage/dirlock.py): a running node holds
    # its directories, and format must not touch them. Held until the command ends.
    locks: list[DirLock] = []
    try:
        return _format_locked(
            config,
            cluster_id,
            ignore_formatted=ignore_formatted,
            locks=locks,
            bootstrap=bootstrap,
            out=out,
            err=err,
        )
    finally:
        release_all(locks)


def bootstrap_voters(
    config: NodeConfig, mode: InitialVoters
) -> tuple[VoterSet | None, Uuid | None]:
    """KIP-853's format modes: the bootstrap voter set to write (None: none) and the directory
    id the metadata log directory must get (None: a random one). Kafka's rules: a controller of
    a quorum whose voters are in the log (controller.quorum.bootstrap.servers) needs exactly one
    of --standalone, --initial-controllers and --no-initial-controllers; a static quorum
    (controller.quorum.voters) and a broker take none."""
    standalone = mode.standalone
    initial = mode.initial_controllers
    none_given = mode.no_initial_controllers
    chosen = standalone or initial is not None or none_given
    if chosen and not config.is_controller:
        raise StorageCommandError(
            "--standalone, --initial-controllers and --no-initial-controllers are for "
            "controllers; this node's process.roles has no 'controller'"
        )
    if chosen and not config.dynamic_quorum:
        raise StorageCommandError(
            "--standalone, --initial-controllers and --no-initial-controllers format a quorum "
            "whose voters are in the log; this config has the static controller.quorum.voters. "
            "Replace it with controller.quorum.bootstrap.servers (host:port of controllers), or "
            "drop the option to format a static quorum"
        )
    if config.is_controller and config.dynamic_quorum and not chosen:
        raise StorageCommandError(
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
            raise StorageCommandError(
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
            raise StorageCommandError(f"--initial-controllers: {entry!r} {problem}")
        node_id = int(node_id_text)
        try:
            directory_id = Uuid.parse(directory_text)
        except InvalidUuidError:
            raise StorageCommandError(
                f"--initial-controllers: {entry!r}: {directory_text!r} is not a directory id "
                f"(22 characters of URL-safe base64, from `metaquorum storage random-uuid`)"
            ) from None
        if directory_id in RESERVED_UUIDS:
            raise StorageCommandError(
                f"--initial-controllers: {entry!r}: {directory_id} is reserved"
            )
        if any(n.node_id == node_id for n in nodes):
            raise StorageCommandError(f"--initial-controllers: node id {node_id} appears twice")
        endpoint = BrokerEndpoint(listener_name, host.strip("[]"), int(port_text))
        nodes.append(VoterNode(ReplicaKey(node_id, directory_id), (endpoint,)))
    return VoterSet(nodes)


def _format_locked(
    config: NodeConfig,
    cluster_id: Uuid,
    *,
    ignore_formatted: bool,
    locks: list[DirLock],
    bootstrap: tuple[VoterSet | None, Uuid | None],
    out: TextIO,
    err: TextIO,
) -> int:
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
                print(
                    f"Skipping directory {directory}: its {META_PROPERTIES_FILE} is unreadable.",
                    file=out,
                )
            continue
        if existing is not None:
            if not ignore_formatted:
                problems.append(
                    f"Log directory {directory} is already formatted. Use --ignore-formatted "
                    "to ignore this directory and format the others."
                )
                continue
            print(f"Skipping directory {directory}: it is already formatted.", file=out)
            if existing.cluster_id != cluster_id or existing.node_id != config.node_id:
                print(
                    f"Warning: {directory} is formatted for cluster.id={existing.cluster_id} "
                    f"node.id={existing.node_id}, not cluster.id={cluster_id} "
                    f"node.id={config.node_id}; the node will refuse to start on it. Empty it "
                    "and format again to reuse it.",
                    file=err,
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
        raise StorageCommandError("\n".join(problems))
    if not to_format:
        print("All of the log directories are already formatted.", file=out)
        return 0
    voters, metadata_directory_id = bootstrap
    for directory in to_format:
        is_metadata = directory == config.metadata_log_dir
        kind = "metadata" if is_metadata else "data"
        print(
            f"Formatting {kind} directory {directory} with metadata.version {METADATA_VERSION}.",
            file=out,
        )
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
                f"(kraft.version 1) to {path}.",
                file=out,
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


def storage_info(config: NodeConfig, out: TextIO) -> int:
    """``storage info``: each directory's meta.properties, then the check a node runs at
    start-up (``MetaPropertiesError`` when it would refuse to start)."""
    for directory in config.data_dirs:
        kind = "metadata" if directory == config.metadata_log_dir else "data"
        try:
            properties = meta_properties.read(directory)
        except MetaPropertiesError as exc:
            print(f"{kind} directory {directory}: {exc}", file=out)
            continue
        print(
            f"{kind} directory {directory}: version={properties.version} "
            f"cluster.id={properties.cluster_id} node.id={properties.node_id} "
            f"directory.id={properties.directory_id or 'none'}",
            file=out,
        )
    meta_properties.check(config)
    print(f"OK: node {config.node_id} can start on these directories.", file=out)
    return 0
