"""The topic configs CreateTopics accepts, and their validation (INVALID_CONFIG).

A small, documented set of Kafka's topic configs, validated as Kafka's ``LogConfig`` does:

=======================  ==========================================================  ==========
name                     accepted values                                              default
=======================  ==========================================================  ==========
``internal``             ``true`` / ``false`` (any case): a user-defined internal     false
                         topic (KIP-619). Stored in the ``TopicRecord``, not as a
                         ``ConfigRecord``.
``cleanup.policy``       comma-separated list of ``delete`` and ``compact``          delete
``delete.retention.ms``  long >= 0: how long the cleaner keeps a tombstone after it   86400000
                         first cleaned its batch (KIP-534's delete horizon)
``min.cleanable.``       double in [0, 1]: the share of a compacted log's cleanable   0.5
``dirty.ratio``          bytes not yet cleaned above which the cleaner cleans it
``min.compaction.``      long >= 0: records younger than this are not compacted       0
``lag.ms``
``compression.type``     ``uncompressed``, ``zstd``, ``lz4``, ``snappy``, ``gzip``,   producer
                         ``producer``
``max.message.bytes``    int >= 0                                                     1048588
``min.insync.replicas``  int >= 1, at most the replication factor                     1
``retention.bytes``      long >= -1 (-1: unlimited)                                   -1
``retention.ms``         long >= -1 (-1: unlimited)                                   604800000
``segment.bytes``        int >= 14 (Kafka's ``LegacyRecord.RECORD_OVERHEAD_V0``)      1073741824
``segment.ms``           long >= 1                                                    604800000
``message.timestamp.``   ``CreateTime`` / ``LogAppendTime`` (any case; stored in      CreateTime
``type``                 Kafka's spelling)
``message.timestamp.``   long >= 0: how far before the broker's clock a CreateTime    2^63 - 1
``before.max.ms``        timestamp may be
``message.timestamp.``   long >= 0: how far after the broker's clock a CreateTime     2^63 - 1
``after.max.ms``         timestamp may be
``unclean.leader.``      ``true`` / ``false`` (any case): when no ISR member is        the
``election.enable``      available, elect another replica and accept the loss of      controller's
                         what only the ISR had (``unclean_leader_election_enabled``)  (false)
=======================  ==========================================================  ==========

The last four are read by the brokers' partition logs (``broker/log/config.py``), as are
``cleanup.policy``, ``delete.retention.ms``, ``min.cleanable.dirty.ratio``,
``min.compaction.lag.ms`` (the log cleaner), ``max.message.bytes``, ``min.insync.replicas``,
``retention.*`` and ``segment.bytes``.

Refused with INVALID_CONFIG: an unknown or empty name, a name given twice, a null value (Kafka:
"Null value not supported for topic configs"), a value longer than
``TOPIC_CONFIG_VALUE_CHARS_MAX``, a value the config does not accept, and
``min.insync.replicas`` above the replication factor (writes with acks=all could never succeed;
Kafka accepts this, we refuse it as certainly a mistake). Values are stored normalised
(booleans and enums lower case, numbers without sign or leading zeros).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Final

from quorum.controller.names import quote
from quorum.limits import (
    INT32_MAX,
    TOPIC_CONFIG_NAME_CHARS_MAX,
    TOPIC_CONFIG_VALUE_CHARS_MAX,
    TOPIC_CONFIGS_MAX,
)

__all__ = [
    "CONFIG_INTERNAL",
    "CONFIG_MIN_INSYNC_REPLICAS",
    "CONFIG_UNCLEAN_LEADER_ELECTION_ENABLE",
    "INT64_MAX",
    "SUPPORTED_TOPIC_CONFIGS",
    "TOPIC_CONFIG_DEFAULTS",
    "ValidatedConfigs",
    "config_boolean",
    "config_integer",
    "unclean_leader_election_enabled",
    "validate_topic_configs",
]

CONFIG_INTERNAL: Final = "internal"
CONFIG_MIN_INSYNC_REPLICAS: Final = "min.insync.replicas"
CONFIG_UNCLEAN_LEADER_ELECTION_ENABLE: Final = "unclean.leader.election.enable"

INT64_MAX: Final = (1 << 63) - 1


class _BadValue(ValueError):
    """The value is not one the config accepts; the text says what is."""


def config_integer(text: str, minimum: int, maximum: int, kind: str) -> str:
    # Kafka parses with Long.parseLong / Integer.parseInt after trimming: optional sign,
    # decimal digits only. Python's int() would also take "1_000" and Unicode digits.
    body = text.strip()
    digits = body[1:] if body[:1] in ("+", "-") else body
    if not digits or not digits.isascii() or not digits.isdigit():
        raise _BadValue(f"must be {kind} in [{minimum}, {maximum}]")
    value = int(body)
    if not minimum <= value <= maximum:
        raise _BadValue(f"must be {kind} in [{minimum}, {maximum}]")
    return str(value)


def config_boolean(text: str) -> str:
    lowered = text.strip().lower()
    if lowered not in ("true", "false"):
        raise _BadValue("must be true or false")
    return lowered


def _one_of(choices: Sequence[str]) -> Callable[[str], str]:
    def parse(text: str) -> str:
        lowered = text.strip().lower()
        if lowered not in choices:
            raise _BadValue(f"must be one of {', '.join(choices)}")
        return lowered

    return parse


def _timestamp_type(text: str) -> str:
    spelled = {"createtime": "CreateTime", "logappendtime": "LogAppendTime"}
    value = spelled.get(text.strip().lower())
    if value is None:
        raise _BadValue("must be CreateTime or LogAppendTime")
    return value


def _cleanup_policy(text: str) -> str:
    parts = [part.strip().lower() for part in text.split(",")]
    if not parts or any(part not in ("delete", "compact") for part in parts):
        raise _BadValue("must be a comma-separated list of delete and compact")
    if len(set(parts)) != len(parts):
        raise _BadValue("must not repeat a policy")
    return ",".join(parts)


def _ratio(text: str) -> str:
    """Kafka's ``ConfigDef.Type.DOUBLE`` with ``between(0, 1)``: a decimal number."""
    body = text.strip()
    try:
        value = float(body)
    except ValueError:
        raise _BadValue("must be a double in [0, 1]") from None
    if not body.replace(".", "", 1).isdigit() or not 0.0 <= value <= 1.0:
        raise _BadValue("must be a double in [0, 1]")
    return repr(value)


SUPPORTED_TOPIC_CONFIGS: Final[dict[str, Callable[[str], str]]] = {
    CONFIG_INTERNAL: config_boolean,
    "cleanup.policy": _cleanup_policy,
    "delete.retention.ms": lambda v: config_integer(v, 0, INT64_MAX, "a long"),
    "min.cleanable.dirty.ratio": _ratio,
    "min.compaction.lag.ms": lambda v: config_integer(v, 0, INT64_MAX, "a long"),
    "compression.type": _one_of(("uncompressed", "zstd", "lz4", "snappy", "gzip", "producer")),
    "max.message.bytes": lambda v: config_integer(v, 0, INT32_MAX, "an int"),
    CONFIG_MIN_INSYNC_REPLICAS: lambda v: config_integer(v, 1, INT32_MAX, "an int"),
    "retention.bytes": lambda v: config_integer(v, -1, INT64_MAX, "a long"),
    "retention.ms": lambda v: config_integer(v, -1, INT64_MAX, "a long"),
    "segment.bytes": lambda v: config_integer(v, 14, INT32_MAX, "an int"),
    "segment.ms": lambda v: config_integer(v, 1, INT64_MAX, "a long"),
    "message.timestamp.type": _timestamp_type,
    "message.timestamp.before.max.ms": lambda v: config_integer(v, 0, INT64_MAX, "a long"),
    "message.timestamp.after.max.ms": lambda v: config_integer(v, 0, INT64_MAX, "a long"),
    CONFIG_UNCLEAN_LEADER_ELECTION_ENABLE: config_boolean,
}
"""Config name -> parser returning the normalised value or raising ``_BadValue``."""

assert all(len(name) <= TOPIC_CONFIG_NAME_CHARS_MAX for name in SUPPORTED_TOPIC_CONFIGS)

TOPIC_CONFIG_DEFAULTS: Final[dict[str, str]] = {
    "cleanup.policy": "delete",
    "delete.retention.ms": "86400000",
    "min.cleanable.dirty.ratio": "0.5",
    "min.compaction.lag.ms": "0",
    "compression.type": "producer",
    "max.message.bytes": "1048588",
    CONFIG_MIN_INSYNC_REPLICAS: "1",
    "retention.bytes": "-1",
    "retention.ms": "604800000",
    "segment.bytes": "1073741824",
    "segment.ms": "604800000",
    "message.timestamp.type": "CreateTime",
    "message.timestamp.before.max.ms": str(INT64_MAX),
    "message.timestamp.after.max.ms": str(INT64_MAX),
    CONFIG_UNCLEAN_LEADER_ELECTION_ENABLE: "false",
}
"""The value of each config (the table above) for a topic that does not set it: what Kafka's
DescribeConfigs reports with source DEFAULT_CONFIG (``internal`` is a topic flag, not listed).
``unclean.leader.election.enable`` is Kafka's default; a controller configured otherwise
(``unclean.leader.election.enable`` in its node config) decides for topics that do not set it."""
assert set(TOPIC_CONFIG_DEFAULTS) == set(SUPPORTED_TOPIC_CONFIGS) - {CONFIG_INTERNAL}


@dataclass(frozen=True, slots=True)
class ValidatedConfigs:
    """Configs that passed validation: ``internal`` apart, the rest sorted by name."""

    internal: bool | None
    """The ``internal`` config if given (KIP-619), else None."""
    configs: tuple[tuple[str, str], ...]


def _supported_names() -> str:
    return ", ".join(sorted(SUPPORTED_TOPIC_CONFIGS))


def validate_topic_configs(
    configs: Sequence[tuple[str, str | None]],
) -> ValidatedConfigs | str:
    """The validated configs, or the INVALID_CONFIG message for the first problem."""
    if len(configs) > TOPIC_CONFIGS_MAX:
        return (
            f"{len(configs)} configs were given; at most {TOPIC_CONFIGS_MAX} are allowed "
            f"(supported: {_supported_names()})"
        )
    seen: dict[str, str] = {}
    internal: bool | None = None
    for name, value in configs:
        if not name:
            return f"A topic config name may not be empty (supported: {_supported_names()})"
        parse = SUPPORTED_TOPIC_CONFIGS.get(name)
        if parse is None:
            return f"Unknown topic config name: {quote(name)} (supported: {_supported_names()})"
        if name in seen or (name == CONFIG_INTERNAL and internal is not None):
            return f"Config {name!r} is given more than once; give each config at most once"
        if value is None:
            return f"Null value not supported for topic configs: {name}"
        if len(value) > TOPIC_CONFIG_VALUE_CHARS_MAX:
            return (
                f"Value of config {name!r} has {len(value)} characters; at most "
                f"{TOPIC_CONFIG_VALUE_CHARS_MAX} are allowed"
            )
        try:
            normalised = parse(value)
        except _BadValue as exc:
            return f"Invalid value {quote(value)} for configuration {name}: {exc}"
        if name == CONFIG_INTERNAL:
            internal = normalised == "true"
        else:
            seen[name] = normalised
    return ValidatedConfigs(internal=internal, configs=tuple(sorted(seen.items())))


def unclean_leader_election_enabled(
    topic_configs: Mapping[str, str], cluster_configs: Mapping[str, str], default: bool
) -> bool:
    """Whether a topic may elect a leader outside its ISR: the topic's config, else the
    cluster-wide default (a BROKER ``ConfigRecord`` with an empty name), else ``default``, the
    controller's ``unclean.leader.election.enable`` (Kafka's precedence)."""
    value = topic_configs.get(CONFIG_UNCLEAN_LEADER_ELECTION_ENABLE)
    if value is None:
        value = cluster_configs.get(CONFIG_UNCLEAN_LEADER_ELECTION_ENABLE)
    return default if value is None else value.strip().lower() == "true"
