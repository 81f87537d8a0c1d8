"""Where a node configuration comes from: a TOML file or a Kafka ``.properties`` file, then
the ``METAQUORUM_*`` environment variables, then ``--override key=value``, in that order, each
replacing the last (the rules are in ``quorum/config.py``'s docstring). Each raw value is
parsed by its key's kind from the table (``quorum/config_keys.py``), and the result is a
``NodeConfig``, which checks itself on construction.
"""

from __future__ import annotations

import os
import re
import socket
import tomllib
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from quorum.config_kafka import NOT_APPLICABLE_KEYS
from quorum.config_keys import KEYS, LITERAL_KEYS, QUORUM_KEYS, REQUIRED_KEYS, SPECS, NodeConfig
from quorum.config_types import ConfigError
from quorum.config_values import INT_TEXT_RE, suggestion
from quorum.limits import INT32_MAX
from quorum.properties import property_entries


@dataclass(frozen=True, slots=True)
class _Setting:
    """One raw value, with where it came from (for messages) and what relative paths mean."""

    value: object
    source: str
    base_dir: Path
    from_override: bool = False


def _build(settings: Mapping[str, _Setting], config_file: Path | None) -> NodeConfig:
    ignored: list[str] = []
    for key, setting in settings.items():
        if key in NOT_APPLICABLE_KEYS:
            ignored.append(key)
        elif key not in KEYS:
            known = [*KEYS, *NOT_APPLICABLE_KEYS]
            raise ConfigError(
                f"unknown config key {key!r} in {setting.source}{suggestion(key, known)}; "
                f"known keys: {', '.join(sorted(KEYS))} (and Kafka keys that are accepted but "
                "mean nothing here: quorum/config_kafka.py)",
                key=key,
            )
    for key in REQUIRED_KEYS:
        if key not in settings:
            raise ConfigError(f"{key} is required but missing; {SPECS[key].missing}", key=key)
    if not any(key in settings for key in QUORUM_KEYS):
        raise ConfigError(
            "controller.quorum.voters is required but missing; "
            f"{SPECS['controller.quorum.voters'].missing} (or give "
            "controller.quorum.bootstrap.servers for a quorum whose voters are in the log)",
            key="controller.quorum.voters",
        )

    parsed: dict[str, object] = {}
    for key, setting in settings.items():
        if key in NOT_APPLICABLE_KEYS:
            continue
        try:
            parsed[KEYS[key]] = SPECS[key].kind.parse(key, setting.value, setting.base_dir)
        except ConfigError as exc:
            if not setting.from_override:
                raise
            raise ConfigError(f"{exc} (from {setting.source})", key=key) from None

    # Kafka's default of metadata.log.dir: the first of log.dirs.
    if "metadata.log.dir" not in settings:
        log_dirs = parsed.get("log_dirs")
        if not isinstance(log_dirs, tuple) or not log_dirs:
            raise ConfigError(
                "metadata.log.dir is required but missing: give the directory of the metadata "
                "log (and its meta.properties), or log.dirs, whose first entry is then used as "
                "Kafka does",
                key="metadata.log.dir",
            )
        parsed["metadata_log_dir"] = log_dirs[0]
    parsed.setdefault("controller_quorum_voters", {})  # given bootstrap servers instead
    return NodeConfig(
        **parsed,  # type: ignore[arg-type]
        config_file=config_file,
        ignored_keys=tuple(sorted(ignored)),
        given_keys=frozenset(key for key in settings if key in KEYS),
    )


def _flatten(table: Mapping[str, object], prefix: str = "") -> Iterator[tuple[str, object]]:
    """Undo TOML's nesting of dotted keys: {"node": {"id": 1}} -> ("node.id", 1)."""
    for name, value in table.items():
        if isinstance(value, dict):
            yield from _flatten(value, f"{prefix}{name}.")
        else:
            yield f"{prefix}{name}", value


def _collect(table: Mapping[str, object], *, source: str, base_dir: Path) -> dict[str, _Setting]:
    settings: dict[str, _Setting] = {}
    for key, value in _flatten(table):
        if key in settings:
            raise ConfigError(
                f"{key} is given twice in {source} (once quoted, once as dotted keys or a "
                "table); keep one",
                key=key,
            )
        settings[key] = _Setting(value, source, base_dir)
    return settings


def _collect_properties(text: str, *, source: str, base_dir: Path) -> dict[str, _Setting]:
    """A Kafka ``.properties`` file: every value is text (lists comma-separated)."""
    settings: dict[str, _Setting] = {}
    for line, key, value in property_entries(text):
        if key in settings:
            raise ConfigError(
                f"{key} is given twice in {source} (again on line {line}); keep one", key=key
            )
        settings[key] = _Setting(value, f"{source} line {line}", base_dir)
    return settings


def parse_override(text: str) -> tuple[str, object]:
    """Split ``key=value``; the value is a TOML value if it parses as one, else a string.

    For keys whose kind is literal (cluster.id, metadata.log.dir, ...) a value that TOML reads as
    something other than a string is kept as the text typed.
    """
    key, sep, raw = text.partition("=")
    key = key.strip()
    if not sep or not key:
        raise ConfigError(
            f"--override {text!r} is not of the form key=value, e.g. --override node.id=2"
        )
    raw = raw.strip()
    try:
        value: object = tomllib.loads(f"v = {raw}")["v"]
    except tomllib.TOMLDecodeError:
        value = raw
    if key in LITERAL_KEYS and not isinstance(value, str):
        value = raw
    return key, value


def config_from_settings(
    settings: Mapping[str, object],
    *,
    base_dir: Path | None = None,
    source: str = "the given settings",
) -> NodeConfig:
    """Build a NodeConfig from Kafka-named settings (relative paths against ``base_dir``)."""
    directory = (base_dir or Path.cwd()).resolve()
    return _build(_collect(settings, source=source, base_dir=directory), config_file=None)


# Environment variables (the rules are in quorum/config.py's docstring).
ENV_PREFIX: Final = "METAQUORUM_"
NODE_ID_FROM_ORDINAL_ENV: Final = "METAQUORUM_NODE_ID_FROM_ORDINAL"
# The project's variables that are not config keys: test-only switches (negative controls,
# slow fsync), read where they act.
_ENV_NOT_KEYS_PREFIXES: Final = ("METAQUORUM_UNSAFE_", "METAQUORUM_TEST_")
_ORDINAL_RE: Final = re.compile(r".*-(?P<ordinal>[0-9]+)")


def env_variable(key: str) -> str:
    """The environment variable of a config key: ``node.id`` -> ``METAQUORUM_NODE_ID``."""
    return ENV_PREFIX + key.replace(".", "_").upper()


def _environment_settings(environ: Mapping[str, str], cwd: Path) -> dict[str, _Setting]:
    """The ``METAQUORUM_*`` variables of ``environ`` as settings (docstring of this module)."""
    by_variable = {env_variable(key): key for key in KEYS}
    settings: dict[str, _Setting] = {}
    for name in sorted(environ):
        if not name.startswith(ENV_PREFIX) or name.startswith(_ENV_NOT_KEYS_PREFIXES):
            continue
        if name == NODE_ID_FROM_ORDINAL_ENV:
            continue
        key = by_variable.get(name)
        if key is None:
            hint = suggestion(name, [*by_variable, NODE_ID_FROM_ORDINAL_ENV])
            raise ConfigError(
                f"environment variable {name} names no config key{hint}; allowed: "
                f"{ENV_PREFIX} followed by a key in upper case with '_' for '.', e.g. "
                f"{env_variable('node.id')} for node.id, or {NODE_ID_FROM_ORDINAL_ENV}",
                key=name,
            )
        _, value = parse_override(f"{key}={environ[name]}")
        settings[key] = _Setting(value, f"environment variable {name}", cwd, from_override=True)
    if NODE_ID_FROM_ORDINAL_ENV in environ:
        settings["node.id"] = _node_id_from_ordinal(environ, settings.get("node.id"), cwd)
    return settings


def _node_id_from_ordinal(
    environ: Mapping[str, str], explicit: _Setting | None, cwd: Path
) -> _Setting:
    """node.id = METAQUORUM_NODE_ID_FROM_ORDINAL + the ordinal ending the host name."""
    name = NODE_ID_FROM_ORDINAL_ENV
    if explicit is not None:
        raise ConfigError(
            f"{name} and {env_variable('node.id')} are both set; give one: the node id itself, "
            "or the id of the pod with ordinal 0",
            key="node.id",
        )
    base_text = environ[name].strip()
    if not INT_TEXT_RE.fullmatch(base_text) or int(base_text) < 0:
        raise ConfigError(
            f"{name}: {environ[name]!r} is not a node id; allowed: an integer from 0 to "
            f"{INT32_MAX}, the node id of the pod with ordinal 0 (e.g. 1 for controllers, 101 "
            "for brokers)",
            key="node.id",
        )
    hostname = environ.get("HOSTNAME") or socket.gethostname()
    match = _ORDINAL_RE.fullmatch(hostname.strip())
    if match is None:
        raise ConfigError(
            f"{name} is set but the host name {hostname!r} does not end in -<ordinal> as a "
            "StatefulSet's pods do (name-0, name-1, ...); set HOSTNAME, or give "
            f"{env_variable('node.id')} instead",
            key="node.id",
        )
    node_id = int(base_text) + int(match.group("ordinal"))
    source = f"{name}={base_text} plus the ordinal of host name {hostname!r}"
    return _Setting(node_id, source, cwd, from_override=True)


def load_config(
    path: str | os.PathLike[str],
    overrides: Sequence[str] = (),
    *,
    environ: Mapping[str, str] | None = None,
) -> NodeConfig:
    """Read the config at ``path`` (TOML, or a Kafka ``.properties`` file), then the
    ``METAQUORUM_*`` variables of ``environ`` (None: none), then ``--override key=value``
    strings in order, each replacing the last."""
    config_file = Path(path).expanduser().resolve()
    try:
        text = config_file.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError(f"config file {path} does not exist") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"cannot read config file {path}: {exc}") from None
    if config_file.suffix == ".properties":
        settings = _collect_properties(text, source=str(path), base_dir=config_file.parent)
    else:
        try:
            document = tomllib.loads(text)
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError(
                f'config file {path} is not valid TOML: {exc}. Write keys as "node.id" = 1 '
                "(or name the file *.properties to write Kafka's key=value lines)"
            ) from None
        settings = _collect(document, source=str(path), base_dir=config_file.parent)
    cwd = Path.cwd().resolve()
    if environ is not None:
        try:
            settings.update(_environment_settings(environ, cwd))
        except ConfigError as exc:
            raise ConfigError(f"invalid config {path}: {exc}", key=exc.key) from None
    for text_override in overrides:
        key, value = parse_override(text_override)
        settings[key] = _Setting(value, f"--override {text_override}", cwd, from_override=True)
    try:
        return _build(settings, config_file=config_file)
    except ConfigError as exc:
        raise ConfigError(f"invalid config {path}: {exc}", key=exc.key) from None
