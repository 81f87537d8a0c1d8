"""How a configuration value is read: the kinds of value a key can hold, and the parsers that
turn a raw value into a typed one, checked.

A raw value is what TOML gave (an integer, a string, an array), or text: every value of a Kafka
``.properties`` file, of an ``--override`` that TOML does not read and of an environment
variable. Each key of the table (``quorum/config_keys.py``) names its ``Kind``, as a key of
Kafka's ``ConfigDef`` names its type and validator. Every error is a ``ConfigError`` that names
the key, the bad value and what is allowed.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from quorum.config_types import (
    AUTHORIZERS,
    PORT_MAX,
    ROLES,
    STANDARD_AUTHORIZER,
    ConfigError,
    HostPort,
    Listener,
)
from quorum.ids import InvalidUuidError, Uuid
from quorum.limits import INT32_MAX

# Java's Long.MAX_VALUE: the largest value of Kafka's long keys (sizes, long intervals).
INT64_MAX: Final = 2**63 - 1

LISTENER_NAME_RE: Final = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
INT_TEXT_RE: Final = re.compile(r"[+-]?[0-9]+")
_VOTER_RE: Final = re.compile(r"(?P<id>[^@]*)@(?P<address>.*)")
_LISTENER_RE: Final = re.compile(r"(?P<name>[^:/]*)://(?P<address>.*)")
_HOST_PORT_RE: Final = re.compile(r"(?:\[(?P<ipv6>[^\]]+)\]|(?P<host>[^:\[\]]+)):(?P<port>[0-9]+)")


# ----- kinds of value ----------------------------------------------------------------------------

Parse = Callable[[str, object, Path], object]


@dataclass(frozen=True, slots=True)
class Kind:
    """What a key holds, as a type and a validator of Kafka's ``ConfigDef``: ``parse(key, raw
    value, base directory)`` returns the typed value or raises ``ConfigError``; ``shape`` says
    what is allowed, for the table in docs/operating.md. Made by the functions below.

    ``literal``: an ``--override`` or environment value of the key is kept as the text typed,
    never read as TOML (``cluster.id=1234567890123456789012`` stays a string).
    ``bounds``: an integer's range, checked by ``check`` on every ``NodeConfig`` constructed,
    so a config built directly is checked too."""

    parse: Parse
    shape: str
    literal: bool = False
    bounds: tuple[int, int] | None = None

    def check(self, key: str, value: object) -> None:
        """A typed value's own bounds; what depends on other keys is config_rules.py's."""
        if self.bounds is not None and value is not None:  # None: an optional key not given
            check_int(key, value, minimum=self.bounds[0], maximum=self.bounds[1])


def integer(minimum: int, maximum: int = INT32_MAX) -> Kind:
    """An integer from ``minimum`` to ``maximum``: a TOML integer or a string of digits."""
    allowed = f"an integer from {minimum} to {maximum}"

    def parse(key: str, value: object, base_dir: Path) -> int:
        if isinstance(value, str) and INT_TEXT_RE.fullmatch(value.strip()):
            return int(value.strip())
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(f"{key}: {value!r} is not an integer; allowed: {allowed}", key=key)
        return value

    return Kind(parse, allowed, bounds=(minimum, maximum))


def boolean(*, only: bool | None = None, why: str = "") -> Kind:
    """true or false (TOML booleans, or the words). ``only``: the one value supported here, for
    a switch of Kafka's whose other value means nothing here; ``why`` says why."""

    def parse(key: str, value: object, base_dir: Path) -> bool:
        parsed = parse_bool(key, value)
        if only is not None and parsed != only:
            raise ConfigError(
                f"{key}={str(parsed).lower()} is not supported: {why}; set it to "
                f"{str(only).lower()} or leave it out",
                key=key,
            )
        return parsed

    return Kind(parse, "`true` or `false`" if only is None else f"only `{str(only).lower()}`")


def text(*, case: str | None = None, shape: str = "a string", literal: bool = True) -> Kind:
    """A non-empty string, stripped; ``case`` "upper" or "lower" normalises it (the values
    allowed, if only some are, are checked in config_rules.py)."""

    def parse(key: str, value: object, base_dir: Path) -> str:
        stripped = parse_text(key, value)
        if case == "upper":
            return stripped.upper()
        return stripped.lower() if case == "lower" else stripped

    return Kind(parse, shape, literal=literal)


def path() -> Kind:
    """A path, relative to the directory of the file that gave it (the current directory for
    overrides and the environment); ``~`` is expanded."""
    return Kind(parse_path, "a path", literal=True)


def paths() -> Kind:
    """Paths (a TOML array or a comma-separated string), each as ``path()`` reads it."""

    def parse(key: str, value: object, base_dir: Path) -> tuple[Path, ...]:
        entries = parse_str_list(key, value, "['/var/lib/metaquorum/data']")
        return tuple(parse_path(key, entry, base_dir) for entry in entries)

    return Kind(parse, "a list of paths")


def parsed(function: Callable[[str, object], object], shape: str, *, literal: bool = False) -> Kind:
    """A value with a syntax of its own, read by ``function(key, raw value)``."""

    def parse(key: str, value: object, base_dir: Path) -> object:
        return function(key, value)

    return Kind(parse, shape, literal=literal)


# ----- rows of the table ------------------------------------------------------------------------

# The entry of a dataclass field's ``metadata`` that makes the field a configuration key.
KEY_METADATA: Final = "metaquorum.config.key"


@dataclass(frozen=True, slots=True)
class KeySpec:
    """What a field of the table says with ``key(...)`` (quorum/config_keys.py)."""

    kind: Kind
    # One line: what the key means, for the table in docs/operating.md.
    doc: str
    # A config must give the key; ``missing`` then says how, in the error.
    required: bool = False
    missing: str = ""
    # The table's default, where the field's own says too little (a default of another key).
    default_doc: str = ""


def key(
    kind: Kind, doc: str, *, required: bool = False, missing: str = "", default_doc: str = ""
) -> Mapping[str, KeySpec]:
    """The ``metadata`` of a field of the table: the field is a configuration key."""
    return {KEY_METADATA: KeySpec(kind, doc, required, missing, default_doc)}


def key_name(attribute: str) -> str:
    """The Kafka name of a field of the table: ``node_id`` -> ``node.id``."""
    return attribute.replace("_", ".")


# ----- checks of typed values ----------------------------------------------------------------


def check_int(key: str, value: object, *, minimum: int, maximum: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConfigError(
            f"{key}: {value!r} is not an integer; allowed: an integer from {minimum} to {maximum}",
            key=key,
        )
    if not minimum <= value <= maximum:
        raise ConfigError(
            f"{key}: {value} is out of range; allowed: an integer from {minimum} to {maximum}",
            key=key,
        )


def check_port(key: str, port: int, *, minimum: int) -> None:
    if not minimum <= port <= PORT_MAX:
        raise ConfigError(
            f"{key}: port {port} is out of range; allowed: {minimum} to {PORT_MAX}", key=key
        )


def is_wildcard(host: str) -> bool:
    return host in ("", "0.0.0.0", "::")


def suggestion(word: str, choices: Iterable[str]) -> str:
    """`` (did you mean 'x'?)`` for the closest of ``choices``, or nothing."""
    # Imported only for an error message: every command that reads a config pays for imports.
    import difflib  # noqa: PLC0415

    close = difflib.get_close_matches(word, list(choices), n=1, cutoff=0.6)
    return f" (did you mean {close[0]!r}?)" if close else ""


# ----- parsers of raw values ---------------------------------------------------------------------


def parse_bool(key: str, value: object) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in ("true", "false"):
        return value.strip().lower() == "true"
    raise ConfigError(f"{key}: {value!r} is not a boolean; allowed: true or false", key=key)


def parse_text(key: str, value: object) -> str:
    if not isinstance(value, str) or not value.strip():
        raise ConfigError(f"{key}: {value!r} is not a non-empty string", key=key)
    return value.strip()


def parse_path(key: str, value: object, base_dir: Path) -> Path:
    if not isinstance(value, str) or not value.strip():
        raise ConfigError(
            f"{key}: {value!r} is not a path; allowed: a non-empty string, relative to the "
            "config file's directory or absolute",
            key=key,
        )
    path = Path(value).expanduser()
    return (path if path.is_absolute() else base_dir / path).resolve()


def parse_str_list(key: str, value: object, example: str) -> tuple[str, ...]:
    if isinstance(value, str):
        items: list[object] = list(value.split(",")) if value.strip() else []
    elif isinstance(value, list):
        items = list(value)
    else:
        raise ConfigError(
            f"{key}: {value!r} is not a list; allowed: a TOML array of strings or a "
            f"comma-separated string, e.g. {example}",
            key=key,
        )
    result: list[str] = []
    for item in items:
        if not isinstance(item, str):
            raise ConfigError(
                f"{key}: entry {item!r} is not a string; allowed: strings, e.g. {example}",
                key=key,
            )
        if not item.strip():
            raise ConfigError(
                f"{key}: {value!r} has an empty entry; allowed: non-empty strings, e.g. {example}",
                key=key,
            )
        result.append(item.strip())
    return tuple(result)


def parse_host_port(key: str, entry: str, text: str, example: str) -> HostPort:
    match = _HOST_PORT_RE.fullmatch(text)
    if match is None:
        raise ConfigError(
            f"{key}: {entry!r} has no valid host:port; allowed: host:port with a port number "
            f"(IPv6 in brackets, [::1]:9093), e.g. {example}",
            key=key,
        )
    host = match.group("ipv6") or match.group("host")
    if any(c.isspace() for c in host):
        raise ConfigError(f"{key}: host {host!r} in {entry!r} contains whitespace", key=key)
    return HostPort(host, int(match.group("port")))


def parse_roles(key: str, value: object) -> frozenset[str]:
    roles = parse_str_list(key, value, "['controller'] or 'broker,controller'")
    for role in roles:
        if role not in ROLES:
            hint = suggestion(role, ROLES)
            raise ConfigError(
                f"{key}: {role!r} is not a role{hint}; allowed: 'controller', 'broker', or both",
                key=key,
            )
    if len(set(roles)) != len(roles):
        raise ConfigError(f"{key}: {value!r} lists a role twice; give each role once", key=key)
    return frozenset(roles)


def parse_voters(key: str, value: object) -> dict[int, HostPort]:
    example = "'1@127.0.0.1:9093'"
    voters: dict[int, HostPort] = {}
    for entry in parse_str_list(key, value, f"[{example}, '2@127.0.0.1:9094']"):
        match = _VOTER_RE.fullmatch(entry)
        if match is None or not INT_TEXT_RE.fullmatch(match.group("id")):
            raise ConfigError(
                f"{key}: {entry!r} is not of the form id@host:port; allowed: a node id, '@', "
                f"then the voter's address, e.g. {example}",
                key=key,
            )
        voter_id = int(match.group("id"))
        if voter_id in voters:
            raise ConfigError(
                f"{key}: voter id {voter_id} appears twice; each voter id may appear once",
                key=key,
            )
        voters[voter_id] = parse_host_port(key, entry, match.group("address"), example)
    return voters


def parse_bootstrap_servers(key: str, value: object) -> tuple[HostPort, ...]:
    example = "'127.0.0.1:9093'"
    return tuple(
        parse_host_port(key, entry, entry, example)
        for entry in parse_str_list(key, value, f"[{example}] or 'host1:9093,host2:9093'")
    )


def parse_listeners(key: str, value: object) -> tuple[Listener, ...]:
    """``NAME://host:port`` entries; in ``listeners`` (not ``advertised.listeners``) an empty
    host is Kafka's every-interface form."""
    example = "'CONTROLLER://127.0.0.1:9093'"
    listeners: list[Listener] = []
    for entry in parse_str_list(key, value, f"[{example}]"):
        match = _LISTENER_RE.fullmatch(entry)
        if match is None or not match.group("name"):
            raise ConfigError(
                f"{key}: {entry!r} is not of the form NAME://host:port, e.g. {example}", key=key
            )
        text = match.group("address")
        omitted = text.startswith(":") and key == "listeners"
        if omitted:
            text = "0.0.0.0" + text  # Kafka's NAME://:port: every interface
        address = parse_host_port(key, entry, text, example)
        listeners.append(Listener(match.group("name"), address.host, address.port, omitted))
    return tuple(listeners)


def parse_names(key: str, value: object) -> tuple[str, ...]:
    names = parse_str_list(key, value, "['CONTROLLER'] or 'CONTROLLER'")
    for name in names:
        if not LISTENER_NAME_RE.fullmatch(name):
            raise ConfigError(
                f"{key}: {name!r} is not a listener name; allowed: letters, digits and '_', "
                "not starting with a digit, e.g. 'CONTROLLER'",
                key=key,
            )
    return names


def parse_listener_name(key: str, value: object) -> str:
    return parse_names(key, [value])[0] if isinstance(value, str) else parse_text(key, value)


def parse_metrics_listener(key: str, value: object) -> HostPort:
    example = "'http://0.0.0.0:9404'"
    if not isinstance(value, str) or not value.strip():
        raise ConfigError(
            f"{key}: {value!r} is not an address; allowed: http://host:port, e.g. {example}",
            key=key,
        )
    text = value.strip()
    scheme, sep, rest = text.partition("://")
    if not sep:
        raise ConfigError(
            f"{key}: {text!r} has no scheme; allowed: http://host:port, e.g. {example}", key=key
        )
    if scheme.lower() != "http":
        raise ConfigError(
            f"{key}: scheme {scheme!r} is not supported; allowed: 'http' (metrics carry no "
            "secrets; scrape them over a network only Prometheus reaches), e.g. "
            f"{example}",
            key=key,
        )
    if rest.rstrip("/").endswith("/metrics"):
        rest = rest.rstrip("/")[: -len("/metrics")]
    return parse_host_port(key, text, rest.rstrip("/"), example)


def parse_health_listener(key: str, value: object) -> HostPort:
    example = "'0.0.0.0:9405'"
    if not isinstance(value, str) or not value.strip():
        raise ConfigError(
            f"{key}: {value!r} is not an address; allowed: host:port, e.g. {example}", key=key
        )
    text = value.strip()
    if "://" in text:
        raise ConfigError(
            f"{key}: {text!r} has a scheme; allowed: host:port (the health listener speaks "
            f"plaintext gRPC only), e.g. {example}",
            key=key,
        )
    return parse_host_port(key, text, text, example)


def parse_connection_overrides(key: str, value: object) -> dict[str, int]:
    """Kafka's ``host:count,host:count`` (or a TOML array of ``host:count``); the count after
    the last colon, so an IPv6 address may be written bare or in brackets."""
    example = "'10.0.0.1:200,gateway.example:100'"
    overrides: dict[str, int] = {}
    for entry in parse_str_list(key, value, example):
        host, sep, count = entry.rpartition(":")
        host = host.strip().removeprefix("[").removesuffix("]")
        if not sep or not host or not INT_TEXT_RE.fullmatch(count.strip()):
            raise ConfigError(
                f"{key}: {entry!r} is not of the form host:count; allowed: a host name or IP "
                f"address, ':', then its connection limit, e.g. {example}",
                key=key,
            )
        if any(c.isspace() for c in host):
            raise ConfigError(f"{key}: host {host!r} in {entry!r} contains whitespace", key=key)
        if host in overrides:
            raise ConfigError(
                f"{key}: host {host!r} is given twice; each host may appear once", key=key
            )
        overrides[host] = int(count.strip())
    return overrides


def parse_cluster_id(key: str, value: object) -> Uuid:
    if not isinstance(value, str):
        raise ConfigError(f"{key}: {value!r} is not a string; allowed: a Uuid string", key=key)
    try:
        return Uuid.parse(value.strip())
    except InvalidUuidError:
        raise ConfigError(
            f"{key}: {value!r} is not a Uuid; allowed: 22 characters of URL-safe base64 "
            "without padding (or the 36-character dashed hex form), e.g. the output of "
            "`metaquorum storage random-uuid`",
            key=key,
        ) from None


def parse_protocol_map(key: str, value: object) -> dict[str, str]:
    example = "['CONTROLLER:SSL', 'BROKER:SSL']"
    result: dict[str, str] = {}
    for entry in parse_str_list(key, value, example):
        name, sep, protocol = entry.partition(":")
        if not sep or not name.strip() or not protocol.strip():
            raise ConfigError(
                f"{key}: {entry!r} is not of the form NAME:PROTOCOL, e.g. {example}", key=key
            )
        if name.strip() in result:
            raise ConfigError(f"{key}: listener {name.strip()!r} is mapped twice", key=key)
        result[name.strip()] = protocol.strip().upper()
    return result


def parse_mapping_rules(key: str, value: object) -> tuple[str, ...]:
    from quorum.security.identity import MappingRuleError, parse_mapping_rules  # noqa: PLC0415

    text = (
        ",".join(value)
        if isinstance(value, list) and all(isinstance(v, str) for v in value)
        else value
    )
    if not isinstance(text, str):
        raise ConfigError(
            f"{key}: {value!r} is not a string of rules, e.g. 'RULE:^CN=(.*?),.*$/$1/,DEFAULT'",
            key=key,
        )
    try:
        return parse_mapping_rules(text)
    except MappingRuleError as exc:
        raise ConfigError(f"{key}: {exc}", key=key) from None


def parse_authorizer(key: str, value: object) -> str:
    if not isinstance(value, str) or value.strip() not in AUTHORIZERS:
        raise ConfigError(
            f"{key}: {value!r} is not an authorizer this node has; allowed: "
            f"{STANDARD_AUTHORIZER!r} (ACLs in the metadata log) or '' (none: every call "
            "allowed)",
            key=key,
        )
    return AUTHORIZERS[value.strip()]


def parse_super_users(key: str, value: object) -> tuple[str, ...]:
    if isinstance(value, str):  # Kafka's form: User:a;User:b
        value = [v for v in value.split(";") if v.strip()]
    users = parse_str_list(key, value, "['User:CN=admin'] or 'User:CN=admin;User:CN=ops'")
    for user in users:
        kind, _, name = user.partition(":")
        if kind != "User" or not name:
            raise ConfigError(
                f"{key}: {user!r} is not a principal; allowed: 'User:<name>', e.g. 'User:CN=admin'",
                key=key,
            )
    return users
