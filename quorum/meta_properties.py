"""``meta.properties``: which cluster and node a data directory belongs to (Kafka's format).

``metaquorum storage format`` writes one into the metadata log directory and into every
``log.dirs`` entry; a node checks them all at startup (``check``) and refuses to run on a
directory of another cluster or another node, so a mistyped path or a copied disk cannot mix
two logs. The file is Kafka's version 1 (KRaft) layout, plain ``key=value`` lines::

    #
    # Written by metaquorum storage format. Do not edit: nodes check it at startup.
    version=1
    cluster.id=3Db5QLSqSZieL3rJBUUegA
    node.id=1
    directory.id=7KEuLSSWSCqFOvZeJQpRbg

``#`` and ``!`` start comment lines, as in Java properties files. ``directory.id`` (KIP-858)
names the directory itself; each formatted directory gets its own random one.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from quorum.config import NodeConfig
from quorum.ids import RESERVED_UUIDS, InvalidUuidError, Uuid
from quorum.limits import INT32_MAX
from quorum.storage.fsutil import ensure_directory, write_file_atomically

META_PROPERTIES_FILE: Final = "meta.properties"
META_PROPERTIES_VERSION: Final = 1
META_PROPERTIES_BYTES_MAX: Final = 64 * 1024  # a real file is ~150 bytes; refuse junk early

_KNOWN_KEYS: Final = ("version", "cluster.id", "node.id", "directory.id")


class MetaPropertiesError(Exception):
    """A directory's meta.properties is missing, unreadable, or belongs elsewhere."""

    def __init__(self, message: str, *, directory: Path) -> None:
        super().__init__(message)
        self.directory = directory


class UnformattedDirectoryError(MetaPropertiesError):
    """The directory has no meta.properties: it was never formatted."""


@dataclass(frozen=True, slots=True)
class MetaProperties:
    """The contents of one meta.properties file (version 1)."""

    cluster_id: Uuid
    node_id: int
    directory_id: Uuid | None = None
    version: int = META_PROPERTIES_VERSION

    def __post_init__(self) -> None:
        assert self.version == META_PROPERTIES_VERSION, self
        assert 0 <= self.node_id <= INT32_MAX, self
        assert self.cluster_id not in RESERVED_UUIDS, self

    def render(self) -> str:
        """The file's text, in Kafka's key order, ending with a newline."""
        lines = [
            "#",
            "# Written by metaquorum storage format. Do not edit: nodes check it at startup.",
            f"version={self.version}",
            f"cluster.id={self.cluster_id}",
            f"node.id={self.node_id}",
        ]
        if self.directory_id is not None:
            lines.append(f"directory.id={self.directory_id}")
        return "\n".join(lines) + "\n"


def meta_properties_path(directory: Path) -> Path:
    return directory / META_PROPERTIES_FILE


def parse(text: str, *, source: Path) -> MetaProperties:
    """Parse a meta.properties text; ``source`` is the file, for messages."""
    directory = source.parent
    values: dict[str, str] = {}
    for line_number, raw_line in enumerate(text.splitlines(), start=1):
        line = raw_line.strip()
        if not line or line.startswith(("#", "!")):
            continue
        key, sep, value = line.partition("=")
        key, value = key.strip(), value.strip()
        if not sep or not key:
            raise MetaPropertiesError(
                f"{source} line {line_number}: {raw_line!r} is not a key=value line",
                directory=directory,
            )
        if key in values:
            raise MetaPropertiesError(
                f"{source} line {line_number}: {key} is given twice", directory=directory
            )
        values[key] = value

    version_text = values.get("version")
    if version_text is None:
        raise MetaPropertiesError(f"{source} has no version line", directory=directory)
    if version_text != str(META_PROPERTIES_VERSION):
        raise MetaPropertiesError(
            f"{source} has version={version_text}; metaquorum reads only version="
            f"{META_PROPERTIES_VERSION} (KRaft). Version 0 is ZooKeeper-mode Kafka's layout.",
            directory=directory,
        )
    unknown = sorted(set(values) - set(_KNOWN_KEYS))
    if unknown:
        raise MetaPropertiesError(
            f"{source} has unknown keys {unknown}; version {META_PROPERTIES_VERSION} allows "
            f"{', '.join(_KNOWN_KEYS)}",
            directory=directory,
        )
    for required in ("cluster.id", "node.id"):
        if required not in values:
            raise MetaPropertiesError(f"{source} has no {required} line", directory=directory)

    cluster_id = _parse_uuid(values["cluster.id"], "cluster.id", source)
    if cluster_id in RESERVED_UUIDS:
        raise MetaPropertiesError(
            f"{source}: cluster.id {cluster_id} is reserved and cannot name a cluster",
            directory=directory,
        )
    node_id_text = values["node.id"]
    if not node_id_text.isdigit() or int(node_id_text) > INT32_MAX:
        raise MetaPropertiesError(
            f"{source}: node.id {node_id_text!r} is not an integer from 0 to {INT32_MAX}",
            directory=directory,
        )
    directory_id = (
        _parse_uuid(values["directory.id"], "directory.id", source)
        if "directory.id" in values
        else None
    )
    return MetaProperties(
        cluster_id=cluster_id, node_id=int(node_id_text), directory_id=directory_id
    )


def _parse_uuid(text: str, key: str, source: Path) -> Uuid:
    try:
        return Uuid.parse(text)
    except InvalidUuidError:
        raise MetaPropertiesError(
            f"{source}: {key} {text!r} is not a Uuid (22 characters of URL-safe base64)",
            directory=source.parent,
        ) from None


def read(directory: Path) -> MetaProperties:
    """Read ``directory/meta.properties``; ``UnformattedDirectoryError`` if there is none."""
    path = meta_properties_path(directory)
    try:
        with path.open("rb") as file:
            data = file.read(META_PROPERTIES_BYTES_MAX + 1)
    except FileNotFoundError:
        raise UnformattedDirectoryError(
            f"No {META_PROPERTIES_FILE} found in {directory}", directory=directory
        ) from None
    except OSError as exc:
        raise MetaPropertiesError(f"cannot read {path}: {exc}", directory=directory) from None
    if len(data) > META_PROPERTIES_BYTES_MAX:
        raise MetaPropertiesError(
            f"{path} is larger than {META_PROPERTIES_BYTES_MAX} bytes; it is not a "
            "meta.properties file",
            directory=directory,
        )
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise MetaPropertiesError(f"{path} is not UTF-8 text: {exc}", directory=directory) from None
    return parse(text, source=path)


def write(directory: Path, properties: MetaProperties) -> None:
    """Write ``directory/meta.properties`` durably, creating the directory if needed.

    Written to a temporary file, fsynced, renamed over the target, then the directory is
    fsynced (and its parent, when the directory was just created), so a crash leaves either the
    old file or the new one, never a torn one.
    """
    ensure_directory(directory)
    write_file_atomically(meta_properties_path(directory), properties.render().encode("utf-8"))


def _format_command(config: NodeConfig, cluster_id: str) -> str:
    config_arg = str(config.config_file) if config.config_file else "<config file>"
    return f"`metaquorum storage format --config {config_arg} --cluster-id {cluster_id}`"


def check(config: NodeConfig) -> Mapping[Path, MetaProperties]:
    """Check every data directory of ``config`` before a node starts on it.

    Each of ``config.data_dirs`` must hold a meta.properties with this node's ``node.id``, all
    of them the same ``cluster.id`` (and ``config.cluster_id``'s, when it is set), and no two the
    same ``directory.id``. Returns the contents by directory, or raises
    ``MetaPropertiesError`` (``UnformattedDirectoryError`` for a missing file) saying which
    directory is wrong and how to fix it.
    """
    source = config.describe_source()
    found: dict[Path, MetaProperties] = {}
    for directory in config.data_dirs:
        try:
            found[directory] = read(directory)
        except UnformattedDirectoryError as exc:
            known = next(iter(found.values()), None)
            cluster = (
                str(known.cluster_id)
                if known is not None
                else str(config.cluster_id)
                if config.cluster_id is not None
                else "<cluster id>"
            )
            hint = (
                "use the cluster's id to format the missing directories only, "
                "adding --ignore-formatted to skip the formatted ones"
                if known is not None
                else "get a new id with `metaquorum storage random-uuid`, or use the id of the "
                "cluster this node joins"
            )
            raise UnformattedDirectoryError(
                f"{exc} (have you formatted it?). Run {_format_command(config, cluster)}: {hint}",
                directory=directory,
            ) from None

    for directory, properties in found.items():
        path = meta_properties_path(directory)
        if properties.node_id != config.node_id:
            raise MetaPropertiesError(
                f"{path} says node.id={properties.node_id} but {source} has node.id="
                f"{config.node_id}. If this directory belongs to node {properties.node_id} "
                f"(moved data), fix node.id in {source}; if node {config.node_id} should start "
                f"fresh here, empty {directory} and run "
                f"{_format_command(config, str(properties.cluster_id))}",
                directory=directory,
            )
        if config.cluster_id is not None and properties.cluster_id != config.cluster_id:
            raise MetaPropertiesError(
                f"{path} says cluster.id={properties.cluster_id} but {source} has cluster.id="
                f"{config.cluster_id}. This directory belongs to another cluster: fix "
                f"cluster.id in {source} (or remove it), or empty {directory} and run "
                f"{_format_command(config, str(config.cluster_id))}",
                directory=directory,
            )

    directories = list(found)
    first = directories[0]
    for directory in directories[1:]:
        if found[directory].cluster_id != found[first].cluster_id:
            raise MetaPropertiesError(
                f"{meta_properties_path(first)} says cluster.id={found[first].cluster_id} but "
                f"{meta_properties_path(directory)} says cluster.id="
                f"{found[directory].cluster_id}; all directories of one node belong to one "
                f"cluster. Empty the directory that is wrong and format it with "
                f"{_format_command(config, str(found[first].cluster_id))} --ignore-formatted",
                directory=directory,
            )
    seen: dict[Uuid, Path] = {}
    for directory, properties in found.items():
        if properties.directory_id is None:
            continue
        if properties.directory_id in seen:
            raise MetaPropertiesError(
                f"{meta_properties_path(seen[properties.directory_id])} and "
                f"{meta_properties_path(directory)} have the same directory.id "
                f"{properties.directory_id}; was one directory copied from the other? Empty the "
                "copy and format it again with --ignore-formatted",
                directory=directory,
            )
        seen[properties.directory_id] = directory
    return found
