"""``metaquorum metadata shell|ls|cat``: the metadata image as a file tree (kafka-metadata-shell).

The image is built offline and read-only from a snapshot (``--snapshot``: a ``.checkpoint`` file,
or a metadata log directory whose newest valid snapshot is taken) and/or the segments of a log
directory (``--log``), whose records after the snapshot's end offset are replayed on top of it
(to the last complete batch: a log being written is read as ``log dump`` reads it, and what is
replayed may include records not yet committed, since the high watermark is not on disk).
Nothing is modified. Kafka's current shell (3.5 and later) puts the image under ``/image`` and
this shell has the same paths::

    /image/topics/byName/<name>/name, id, creationOffset
    /image/topics/byName/<name>/<partition>   JSON of the partition (as below)
    /image/topics/byId/<topic id>/...         the same
    /image/cluster/brokers/<id>               JSON of the broker's registration
    /image/configs/BROKER                     the cluster-wide broker configs (Kafka's default
                                              resource), BROKER:<id>, TOPIC:<name>: one file per
                                              config key
    /image/acls/byId/<acl id>                 JSON of the ACL
    /image/clientQuotas/<entity>/<key>        a client quota's value; the entity as Kafka's
                                              shell names it, clientId(app)_user(CN=alice),
                                              with <default> for a default name
    /image/provenance/offset, snapshot        what the image was loaded from
    /local/version                            this tool's version

The JSON of a partition, a registration or an ACL is the ``data`` that ``log dump`` prints for
the record that would create it (``record_kafka_json``: Kafka's camelCase field names), so the
two tools agree. The older tree, from Kafka's first metadata shell, stays::

    /brokers/<id>/registration          JSON: brokerId, incarnationId, brokerEpoch, endPoints,
                                        rack, fenced
    /brokers/<id>/isFenced              true | false
    /configs/broker/<id>/<name>         per-broker configs; /configs/broker/default/<name>: the
                                        cluster-wide default (Kafka's empty resource name)
    /deletedTopics/<topic id>           JSON: name, topicId, creationOffset, deletionOffset
                                        (ids of removed topics are never reused)
    /metadataQuorum/offset              the offset of the last record in the image
    /metadataQuorum/metadataTopicId     __cluster_metadata's own topic id (KIP-516), or none
    /metadataQuorum/snapshot            the snapshot loaded, or none
    /topicIds/<topic id>/...            the same as /topics/<name>/...
    /topics/<name>/id, name, internal, creationOffset
    /topics/<name>/configs/<name>
    /topics/<name>/<partition>/data     JSON: partitionId, topicId, replicas, isr, leader,
                                        leaderEpoch, partitionEpoch

``ls`` lists a directory (numbers in numeric order first, then names) or names a file; ``cat``
prints a file; ``find`` prints every path under a path, one per line; ``tree`` prints the tree
under a path, a directory as ``name:`` and a file as ``name: content`` (JSON on one line), each
level indented by two spaces, as Kafka's ``tree`` does. The interactive ``shell`` (``cmd.Cmd``)
has ``ls``, ``cd``, ``cat``, ``find``, ``tree``, ``pwd``, ``help`` and ``exit``, with tab
completion of paths.
"""

from __future__ import annotations

import cmd
import json
import posixpath
import shlex
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final, TextIO

from quorum.ids import InvalidUuidError, Uuid
from quorum.metadata.batch import decode_log_batch
from quorum.metadata.delta import MetadataDelta, MetadataReplayError
from quorum.metadata.image import BrokerImage, MetadataImage, TopicImage
from quorum.metadata.records import (
    AccessControlEntryRecord,
    PartitionRecord,
    RecordDecodeError,
    RegisterBrokerRecord,
    record_kafka_json,
)
from quorum.raft.messages import SnapshotId
from quorum.storage.snapshots import (
    CorruptSnapshotError,
    SnapshotNotFoundError,
    list_snapshots,
    load_snapshot_image,
    newest_valid_snapshot,
    parse_snapshot_file_name,
)
from quorum.tools.log_dump import LogDumpError, Tail, iter_frames, segment_files

__all__ = [
    "DEFAULT_CONFIG_RESOURCE",
    "LoadedImage",
    "MetadataShell",
    "MetadataShellError",
    "cat_paths",
    "find_paths",
    "load_image",
    "ls_paths",
    "resolve",
    "run_shell",
    "tree_paths",
]

DEFAULT_CONFIG_RESOURCE: Final = "default"
"""How ``/configs/broker/`` names the cluster-wide default (Kafka's empty resource name)."""


class MetadataShellError(Exception):
    """The image cannot be loaded, or a path does not name what a command needs."""


# ----- loading ----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class LoadedImage:
    image: MetadataImage
    snapshot: Path | None
    """The snapshot file the image starts from (None: the log from offset 0)."""
    log: Path | None
    """The log directory replayed after the snapshot, if any."""
    log_records: int
    """How many log records were replayed on top of the snapshot."""


def _find_snapshot(path: Path, warn: Callable[[str], None]) -> tuple[Path, SnapshotId]:
    if path.is_dir():
        newest = newest_valid_snapshot(path)
        if newest is None:
            problem = "its snapshots are all corrupt" if list_snapshots(path) else "it has none"
            raise MetadataShellError(
                f"{path}: no valid snapshot ({{end_offset:020d}}-{{epoch:010d}}.checkpoint) in "
                f"this directory: {problem}"
            )
        for skipped in newest.skipped:
            warn(f"Warning: skipped a corrupt snapshot: {skipped}")
        return newest.path, newest.snapshot_id
    snapshot_id = parse_snapshot_file_name(path.name)
    if snapshot_id is None:
        raise MetadataShellError(
            f"{path}: not a snapshot file name ({{end_offset:020d}}-{{epoch:010d}}.checkpoint)"
        )
    return path, snapshot_id


def load_image(snapshot: Path | None, log: Path | None, warn: Callable[[str], None]) -> LoadedImage:
    """The image of a snapshot (file or directory) plus the log records after it (read-only).

    Raises ``MetadataShellError`` naming what is wrong: a corrupt snapshot or log, a log that
    does not continue the snapshot, records that cannot be replayed."""
    if snapshot is None and log is None:
        raise MetadataShellError("give --snapshot, --log or both")
    image = MetadataImage.EMPTY
    snapshot_path: Path | None = None
    if (
        snapshot is not None
        and log is not None
        and snapshot.is_dir()
        and not list_snapshots(snapshot)
    ):
        warn(f"Note: {snapshot} holds no snapshot; replaying the log from offset 0")
        snapshot = None
    if snapshot is not None:
        if not snapshot.exists():
            raise MetadataShellError(f"{snapshot}: no such file or directory")
        snapshot_path, snapshot_id = _find_snapshot(snapshot, warn)
        try:
            image = load_snapshot_image(snapshot_path.parent, snapshot_id)
        except (CorruptSnapshotError, SnapshotNotFoundError, MetadataReplayError) as exc:
            raise MetadataShellError(str(exc)) from exc
    replayed = 0
    if log is not None:
        image, replayed = _replay_log(image, log, warn)
    return LoadedImage(image, snapshot_path, log, replayed)


def _replay_log(
    image: MetadataImage, log: Path, warn: Callable[[str], None]
) -> tuple[MetadataImage, int]:
    start = image.offset + 1  # the first offset the image lacks
    delta = MetadataDelta(image)
    replayed = 0
    first = True
    try:
        for item in iter_frames(segment_files(log)):
            if isinstance(item, Tail):
                warn(
                    f"Note: {item.path}: stopped at byte {item.position} ({item.problem}): a "
                    "write in progress, or a torn tail that recovery will cut"
                )
                continue
            batch = item.batch
            if first and batch.base_offset > start:
                raise MetadataShellError(
                    f"{item.path}: the log starts at offset {batch.base_offset} but the image "
                    f"ends before offset {start}: the records in between are missing (give the "
                    "snapshot that the log continues with --snapshot)"
                )
            first = False
            if batch.end_offset <= start:
                continue  # in the snapshot already
            decoded = decode_log_batch(batch)
            if decoded.base_offset >= start:
                delta.replay_batch(decoded)
                replayed += decoded.record_count
            else:  # a batch across the snapshot's end: only its records after it
                for offset, record in enumerate(decoded.records, start=decoded.base_offset):
                    if offset >= start:
                        delta.replay(record, offset)
                        replayed += 1
    except (LogDumpError, RecordDecodeError, MetadataReplayError) as exc:
        raise MetadataShellError(f"{log}: {exc}") from exc
    return delta.apply(), replayed


# ----- the tree ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class DirNode:
    names: Callable[[], Iterable[str]]
    child: Callable[[str], Node | None]


@dataclass(frozen=True, slots=True)
class FileNode:
    read: Callable[[], str]


Node = DirNode | FileNode


def _sort_names(names: Iterable[str]) -> list[str]:
    def key(name: str) -> tuple[int, int, str]:
        if name.isascii() and name.isdigit():
            return (0, int(name), "")
        return (1, 0, name)

    return sorted(names, key=key)


def _fixed(children: dict[str, Callable[[], Node]]) -> DirNode:
    return DirNode(
        names=children.keys,
        child=lambda name: children[name]() if name in children else None,
    )


def _text(value: object) -> FileNode:
    return FileNode(lambda: str(value))


def _json_text(value: dict[str, object]) -> str:
    """One key per line, each value compact (``"replicas": [1, 2, 3]``)."""
    lines = [f"  {json.dumps(key)}: {json.dumps(item)}" for key, item in value.items()]
    return "{\n" + ",\n".join(lines) + "\n}"


def _json(value: Callable[[], dict[str, object]]) -> FileNode:
    return FileNode(lambda: _json_text(value()))


def _int_name(name: str) -> int | None:
    """``name`` as a non-negative int if it is the canonical decimal form of one."""
    if not (name.isascii() and name.isdigit()) or (len(name) > 1 and name[0] == "0"):
        return None
    return int(name)


def _uuid_name(name: str) -> Uuid | None:
    try:
        return Uuid.parse(name)
    except InvalidUuidError:
        return None


def _partition_json(topic: TopicImage, partition: int) -> dict[str, object]:
    """The ``data`` of the PARTITION_RECORD that would create this partition's state."""
    state = topic.partitions[partition]
    return record_kafka_json(
        PartitionRecord(
            topic_id=topic.topic_id,
            partition=state.partition,
            replicas=state.replicas,
            isr=state.isr,
            leader=state.leader,
            leader_epoch=state.leader_epoch,
            partition_epoch=state.partition_epoch,
        )
    )


def _topic_node(topic: TopicImage) -> DirNode:
    configs = topic.configs
    fixed: dict[str, Callable[[], Node]] = {
        "id": lambda: _text(topic.topic_id),
        "name": lambda: _text(topic.name),
        "internal": lambda: _text("true" if topic.internal else "false"),
        "creationOffset": lambda: _text(topic.creation_offset),
        "configs": lambda: DirNode(
            names=configs.keys,
            child=lambda name: _text(configs[name]) if name in configs else None,
        ),
    }

    def child(name: str) -> Node | None:
        if name in fixed:
            return fixed[name]()
        partition = _int_name(name)
        if partition is None or partition not in topic.partitions:
            return None
        return _fixed({"data": lambda: _json(lambda: _partition_json(topic, partition))})

    return DirNode(
        names=lambda: [*map(str, topic.partitions), *fixed],
        child=child,
    )


def _broker_json(broker: BrokerImage) -> dict[str, object]:
    """The ``data`` of the REGISTER_BROKER_RECORD of this registration (fencing as now)."""
    return record_kafka_json(
        RegisterBrokerRecord(
            broker_id=broker.broker_id,
            incarnation_id=broker.incarnation_id,
            broker_epoch=broker.broker_epoch,
            endpoints=broker.endpoints,
            rack=broker.rack,
            fenced=broker.fenced,
        )
    )


def _broker_node(broker: BrokerImage) -> DirNode:
    return _fixed(
        {
            "registration": lambda: _json(lambda: _broker_json(broker)),
            "isFenced": lambda: _text("true" if broker.fenced else "false"),
        }
    )


def _kafka_topic_node(topic: TopicImage) -> DirNode:
    """Kafka's ``TopicImageNode``: name, id and one file per partition (plus the creation
    offset, which with the id is the topic's identity here)."""
    fixed: dict[str, Callable[[], Node]] = {
        "name": lambda: _text(topic.name),
        "id": lambda: _text(topic.topic_id),
        "creationOffset": lambda: _text(topic.creation_offset),
    }

    def child(name: str) -> Node | None:
        if name in fixed:
            return fixed[name]()
        partition = _int_name(name)
        if partition is None or partition not in topic.partitions:
            return None
        return _json(lambda: _partition_json(topic, partition))

    return DirNode(names=lambda: [*fixed, *map(str, topic.partitions)], child=child)


def _config_resources(image: MetadataImage) -> dict[str, Mapping[str, str]]:
    """Kafka's ``ConfigurationsImageNode`` names: ``BROKER`` (the default resource),
    ``BROKER:<id>``, ``TOPIC:<name>``."""
    resources: dict[str, Mapping[str, str]] = {}
    for name, configs in image.broker_configs.items():
        resources[f"BROKER:{name}" if name else "BROKER"] = configs
    for topic in image.topics_by_id.values():
        if topic.configs:
            resources[f"TOPIC:{topic.name}"] = topic.configs
    return resources


def _acl_json(image: MetadataImage, acl_id: Uuid) -> dict[str, object]:
    """The ``data`` of the ACCESS_CONTROL_ENTRY_RECORD of this ACL."""
    acl = image.acls[acl_id]
    return record_kafka_json(
        AccessControlEntryRecord(
            id=acl_id,
            resource_type=int(acl.resource_type),
            resource_name=acl.resource_name,
            pattern_type=int(acl.pattern_type),
            principal=acl.principal,
            host=acl.host,
            operation=int(acl.operation),
            permission_type=int(acl.permission_type),
        )
    )


def _quota_entity_name(entity: tuple[tuple[str, str | None], ...]) -> str:
    """Kafka's shell's name of a client quota entity: ``clientId(app)_user(CN=alice)``, ``(``,
    ``)`` and ``\\`` escaped with ``\\``; ``<default>`` for a default name."""

    def escape(text: str) -> str:
        return text.replace("\\", "\\\\").replace("(", "\\(").replace(")", "\\)")

    kinds = {"client-id": "clientId", "user": "user"}
    return "_".join(
        f"{kinds.get(kind, kind)}({'<default>' if name is None else escape(name)})"
        for kind, name in entity
    )


def _quotas_node(image: MetadataImage) -> DirNode:
    by_name = {_quota_entity_name(entity): entity for entity in image.client_quotas}

    def entity(name: str) -> Node | None:
        found = by_name.get(name)
        if found is None:
            return None
        values = image.client_quotas[found]
        return DirNode(
            names=values.keys, child=lambda key: _text(values[key]) if key in values else None
        )

    return DirNode(lambda: sorted(by_name), entity)


def _image_node(loaded: LoadedImage) -> DirNode:
    """Kafka's ``MetadataImageNode`` (``/image``), with the parts this image has."""
    image = loaded.image

    def by_name(name: str) -> Node | None:
        topic = image.topic_by_name(name)
        return None if topic is None else _kafka_topic_node(topic)

    def by_id(name: str) -> Node | None:
        topic_id = _uuid_name(name)
        topic = None if topic_id is None else image.topic(topic_id)
        return None if topic is None else _kafka_topic_node(topic)

    def broker(name: str) -> Node | None:
        broker_id = _int_name(name)
        found = None if broker_id is None else image.brokers.get(broker_id)
        return None if found is None else _json(lambda: _broker_json(found))

    def configs(name: str) -> Node | None:
        found = _config_resources(image).get(name)
        if found is None:
            return None
        return DirNode(
            names=found.keys, child=lambda key: _text(found[key]) if key in found else None
        )

    def acl(name: str) -> Node | None:
        acl_id = _uuid_name(name)
        if acl_id is None or acl_id not in image.acls:
            return None
        return _json(lambda: _acl_json(image, acl_id))

    return _fixed(
        {
            "acls": lambda: _fixed({"byId": lambda: DirNode(lambda: map(str, image.acls), acl)}),
            "clientQuotas": lambda: _quotas_node(image),
            "cluster": lambda: _fixed(
                {"brokers": lambda: DirNode(lambda: map(str, image.brokers), broker)}
            ),
            "configs": lambda: DirNode(lambda: _config_resources(image).keys(), configs),
            "provenance": lambda: _fixed(
                {
                    "offset": lambda: _text(image.offset),
                    "snapshot": lambda: _text(loaded.snapshot.name if loaded.snapshot else "none"),
                }
            ),
            "topics": lambda: _fixed(
                {
                    "byId": lambda: DirNode(lambda: map(str, image.topics_by_id), by_id),
                    "byName": lambda: DirNode(image.topics_by_name.keys, by_name),
                }
            ),
        }
    )


def _tool_version() -> str:
    from importlib.metadata import PackageNotFoundError, version  # noqa: PLC0415

    try:
        return version("metaquorum")
    except PackageNotFoundError:
        return "unknown (not installed)"


def _root(loaded: LoadedImage) -> DirNode:
    image = loaded.image

    def topic_by_name(name: str) -> Node | None:
        topic = image.topic_by_name(name)
        return None if topic is None else _topic_node(topic)

    def topic_by_id(name: str) -> Node | None:
        topic_id = _uuid_name(name)
        topic = None if topic_id is None else image.topic(topic_id)
        return None if topic is None else _topic_node(topic)

    def deleted(name: str) -> Node | None:
        topic_id = _uuid_name(name)
        gone = None if topic_id is None else image.deleted_topics.get(topic_id)
        if gone is None:
            return None
        return _json(
            lambda: {
                "name": gone.name,
                "topicId": str(gone.topic_id),
                "creationOffset": gone.creation_offset,
                "deletionOffset": gone.deletion_offset,
            }
        )

    def broker(name: str) -> Node | None:
        broker_id = _int_name(name)
        found = None if broker_id is None else image.brokers.get(broker_id)
        return None if found is None else _broker_node(found)

    def broker_config_names() -> list[str]:
        return [name or DEFAULT_CONFIG_RESOURCE for name in image.broker_configs]

    def broker_configs(name: str) -> Node | None:
        resource = "" if name == DEFAULT_CONFIG_RESOURCE else name
        configs = image.broker_configs.get(resource) if name else None
        if configs is None:
            return None
        return DirNode(
            names=configs.keys,
            child=lambda key: _text(configs[key]) if key in configs else None,
        )

    metadata_topic_id = image.metadata_topic_id
    quorum: dict[str, Callable[[], Node]] = {
        "offset": lambda: _text(image.offset),
        "metadataTopicId": lambda: _text(metadata_topic_id or "none"),
        "snapshot": lambda: _text(loaded.snapshot.name if loaded.snapshot else "none"),
    }
    return _fixed(
        {
            "brokers": lambda: DirNode(lambda: map(str, image.brokers), broker),
            "configs": lambda: _fixed(
                {"broker": lambda: DirNode(broker_config_names, broker_configs)}
            ),
            "deletedTopics": lambda: DirNode(lambda: map(str, image.deleted_topics), deleted),
            "image": lambda: _image_node(loaded),
            "local": lambda: _fixed({"version": lambda: _text(_tool_version())}),
            "metadataQuorum": lambda: _fixed(quorum),
            "topicIds": lambda: DirNode(lambda: map(str, image.topics_by_id), topic_by_id),
            "topics": lambda: DirNode(image.topics_by_name.keys, topic_by_name),
        }
    )


def normalize(path: str, cwd: str = "/") -> str:
    """``path`` (absolute, or relative to ``cwd``) as an absolute path without ``.``/``..``."""
    joined = posixpath.join(cwd, path) if path else cwd
    normalized = posixpath.normpath(joined)
    return "/" if normalized in ("/", "//") else normalized


def resolve(root: DirNode, path: str) -> Node | None:
    """The node at the absolute, normalised ``path``, or None."""
    node: Node = root
    for part in path.split("/"):
        if not part:
            continue
        if not isinstance(node, DirNode):
            return None
        found = node.child(part)
        if found is None:
            return None
        node = found
    return node


# ----- ls / cat for scripts ---------------------------------------------------------------


def ls_paths(loaded: LoadedImage, paths: Sequence[str], out: TextIO, err: TextIO) -> int:
    """``ls`` each path: a directory's entries one per line, a file's own path. With several
    paths each listing starts with ``<path>:``. Returns 0, or 1 if a path does not exist."""
    root = _root(loaded)
    status = 0
    targets = list(paths) or ["/"]
    for index, raw in enumerate(targets):
        path = normalize(raw)
        node = resolve(root, path)
        if node is None:
            print(f"ls: {raw}: No such file or directory", file=err)
            status = 1
            continue
        if isinstance(node, FileNode):
            print(path, file=out)
            continue
        if len(targets) > 1:
            if index > 0:
                print(file=out)
            print(f"{path}:", file=out)
        for name in _sort_names(node.names()):
            print(name, file=out)
    return status


def cat_paths(loaded: LoadedImage, paths: Sequence[str], out: TextIO, err: TextIO) -> int:
    """Print each file. Returns 0, or 1 if a path does not exist or is a directory."""
    root = _root(loaded)
    status = 0
    for raw in paths:
        node = resolve(root, normalize(raw))
        if node is None:
            print(f"cat: {raw}: No such file or directory", file=err)
            status = 1
        elif isinstance(node, DirNode):
            print(f"cat: {raw}: Is a directory", file=err)
            status = 1
        else:
            print(node.read(), file=out)
    return status


def _walk(node: Node, path: str) -> Iterator[tuple[str, Node]]:
    """``(path, node)`` for ``node`` and everything under it, depth first, sorted as ``ls``."""
    yield path, node
    if isinstance(node, DirNode):
        for name in _sort_names(node.names()):
            child = node.child(name)
            if child is not None:
                yield from _walk(child, posixpath.join(path, name))


def _one_line(text: str) -> str:
    try:
        return json.dumps(json.loads(text))
    except ValueError:
        return " ".join(text.splitlines())


def _find_lines(root: DirNode, raw: str, cwd: str) -> list[str] | None:
    path = normalize(raw, cwd)
    node = resolve(root, path)
    return None if node is None else [found for found, _ in _walk(node, path)]


def _tree_lines(root: DirNode, raw: str, cwd: str) -> list[str] | None:
    path = normalize(raw, cwd)
    node = resolve(root, path)
    if node is None:
        return None
    lines: list[str] = []
    for found, child in _walk(node, path):
        relative = posixpath.relpath(found, path)
        depth = 0 if relative == "." else relative.count("/") + 1
        name = posixpath.basename(found) or "/"
        indent = "  " * depth
        if isinstance(child, DirNode):
            lines.append(f"{indent}{name}:")
        else:
            lines.append(f"{indent}{name}: {_one_line(child.read())}")
    return lines


def find_paths(loaded: LoadedImage, paths: Sequence[str], out: TextIO, err: TextIO) -> int:
    """``find``: every path under each PATH (default /), itself first. Returns 0, or 1 if a
    path does not exist."""
    return _print_each(loaded, paths, out, err, command="find", lines_of=_find_lines)


def tree_paths(loaded: LoadedImage, paths: Sequence[str], out: TextIO, err: TextIO) -> int:
    """``tree``: the tree under each PATH (default /), directories as ``name:``, files as
    ``name: content``. Returns 0, or 1 if a path does not exist."""
    return _print_each(loaded, paths, out, err, command="tree", lines_of=_tree_lines)


def _print_each(
    loaded: LoadedImage,
    paths: Sequence[str],
    out: TextIO,
    err: TextIO,
    *,
    command: str,
    lines_of: Callable[[DirNode, str, str], list[str] | None],
) -> int:
    root = _root(loaded)
    status = 0
    for raw in list(paths) or ["/"]:
        lines = lines_of(root, raw, "/")
        if lines is None:
            print(f"{command}: {raw}: No such file or directory", file=err)
            status = 1
            continue
        for line in lines:
            print(line, file=out)
    return status


# ----- the interactive shell ----------------------------------------------------------------


class MetadataShell(cmd.Cmd):
    """The interactive metadata shell. ``stdin``/``stdout`` may be given for scripted use."""

    prompt = "metadata> "

    def __init__(
        self,
        loaded: LoadedImage,
        *,
        stdin: TextIO | None = None,
        stdout: TextIO | None = None,
    ) -> None:
        super().__init__(stdin=stdin, stdout=stdout)
        if stdin is not None:
            self.use_rawinput = False
            self.prompt = ""
        self._loaded = loaded
        self._root = _root(loaded)
        self.cwd = "/"
        source = loaded.snapshot.name if loaded.snapshot else "no snapshot"
        log = f" + {loaded.log_records} records of {loaded.log}" if loaded.log else ""
        self.intro = (
            f"Loaded the metadata image at offset {loaded.image.offset} ({source}{log}). "
            "Type help for the commands, exit to leave."
        )

    # ----- helpers ----------------------------------------------------------------------------

    def _say(self, text: str) -> None:
        self.stdout.write(text + "\n")

    def _args(self, arg: str) -> list[str] | None:
        try:
            return shlex.split(arg)
        except ValueError as exc:
            self._say(f"error: {exc}")
            return None

    # ----- commands ---------------------------------------------------------------------------

    def do_ls(self, arg: str) -> None:
        """ls [PATH...]: list a directory (the current one by default), or name a file."""
        args = self._args(arg)
        if args is None:
            return
        targets = args or [self.cwd]
        for index, raw in enumerate(targets):
            path = normalize(raw, self.cwd)
            node = resolve(self._root, path)
            if node is None:
                self._say(f"ls: {raw}: No such file or directory")
            elif isinstance(node, FileNode):
                self._say(path)
            else:
                if len(targets) > 1:
                    self._say(("\n" if index else "") + f"{path}:")
                names = _sort_names(node.names())
                if names:
                    self.columnize(names, displaywidth=100)

    def do_cd(self, arg: str) -> None:
        """cd [PATH]: change the current directory (to / by default)."""
        args = self._args(arg)
        if args is None:
            return
        if len(args) > 1:
            self._say("cd: too many arguments")
            return
        path = normalize(args[0] if args else "/", self.cwd)
        node = resolve(self._root, path)
        if node is None:
            self._say(f"cd: {args[0]}: No such file or directory")
        elif isinstance(node, FileNode):
            self._say(f"cd: {args[0]}: Not a directory")
        else:
            self.cwd = path

    def do_cat(self, arg: str) -> None:
        """cat PATH...: print files."""
        args = self._args(arg)
        if args is None:
            return
        if not args:
            self._say("cat: give a file, e.g. cat /image/topics/byName/<name>/0")
        for raw in args:
            node = resolve(self._root, normalize(raw, self.cwd))
            if node is None:
                self._say(f"cat: {raw}: No such file or directory")
            elif isinstance(node, DirNode):
                self._say(f"cat: {raw}: Is a directory")
            else:
                self._say(node.read())

    def _each(
        self, arg: str, command: str, lines_of: Callable[[DirNode, str, str], list[str] | None]
    ) -> None:
        args = self._args(arg)
        if args is None:
            return
        for raw in args or [self.cwd]:
            lines = lines_of(self._root, raw, self.cwd)
            if lines is None:
                self._say(f"{command}: {raw}: No such file or directory")
                continue
            for line in lines:
                self._say(line)

    def do_find(self, arg: str) -> None:
        """find [PATH...]: print every path under PATH (the current directory by default)."""
        self._each(arg, "find", _find_lines)

    def do_tree(self, arg: str) -> None:
        """tree [PATH...]: print the tree under PATH, files with their content."""
        self._each(arg, "tree", _tree_lines)

    def do_pwd(self, arg: str) -> None:
        """pwd: print the current directory."""
        del arg
        self._say(self.cwd)

    def do_exit(self, arg: str) -> bool:
        """exit: leave the shell (also quit, or end of input)."""
        del arg
        return True

    do_quit = do_exit

    def do_EOF(self, arg: str) -> bool:
        """Leave the shell at the end of input."""
        del arg
        if self.use_rawinput:
            self._say("")
        return True

    def emptyline(self) -> bool:
        return False  # cmd.Cmd would repeat the last command

    def default(self, line: str) -> None:
        self._say(f"unknown command: {line.split(maxsplit=1)[0]!r}; type help for the commands")

    # ----- completion -------------------------------------------------------------------------

    def _complete_path(self, text: str, line: str, endidx: int) -> list[str]:
        typed = line[:endidx].rsplit(" ", maxsplit=1)[-1]
        directory, _, prefix = typed.rpartition("/")
        base = normalize(directory or ("/" if typed.startswith("/") else "."), self.cwd)
        node = resolve(self._root, base)
        if not isinstance(node, DirNode):
            return []
        head = typed[: len(typed) - len(text)]
        matches = []
        for name in _sort_names(node.names()):
            if name.startswith(prefix):
                full = f"{directory}/{name}" if typed.count("/") else name
                child = node.child(name)
                suffix = "/" if isinstance(child, DirNode) else ""
                matches.append((full + suffix)[len(head) :])
        return matches

    def complete_ls(self, text: str, line: str, begidx: int, endidx: int) -> list[str]:
        del begidx
        return self._complete_path(text, line, endidx)

    complete_cd = complete_ls
    complete_cat = complete_ls
    complete_find = complete_ls
    complete_tree = complete_ls


def run_shell(loaded: LoadedImage) -> int:
    """Run the interactive shell on the terminal until exit."""
    MetadataShell(loaded).cmdloop()
    return 0
