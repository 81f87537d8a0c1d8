"""quorum.config: Kafka-named TOML config, defaults, validation messages, overrides, paths."""

from __future__ import annotations

import re
import textwrap
from collections.abc import Mapping
from pathlib import Path

import pytest

from quorum.config import (
    KEYS,
    REQUIRED_KEYS,
    ConfigError,
    HostPort,
    Listener,
    NodeConfig,
    config_from_settings,
    load_config,
    parse_override,
)
from quorum.ids import METADATA_TOPIC_ID, ZERO_UUID, Uuid

REPO_ROOT = Path(__file__).resolve().parents[3]

CONTROLLER: Mapping[str, object] = {
    "node.id": 1,
    "process.roles": ["controller"],
    "controller.quorum.voters": ["1@127.0.0.1:9093", "2@127.0.0.1:9094", "3@127.0.0.1:9095"],
    "listeners": ["CONTROLLER://127.0.0.1:9093"],
    "metadata.log.dir": "/var/lib/mq/meta",
}


def settings(**changes: object) -> dict[str, object]:
    """CONTROLLER with changes; keyword names use '_' for '.', a value of None drops the key."""
    result = dict(CONTROLLER)
    for name, value in changes.items():
        key = name.replace("_", ".")
        if value is None:
            result.pop(key, None)
        else:
            result[key] = value
    return result


def config_error(values: Mapping[str, object]) -> ConfigError:
    with pytest.raises(ConfigError) as info:
        config_from_settings(values, base_dir=Path("/base"))
    return info.value


def write_config(directory: Path, body: str, name: str = "node.toml") -> Path:
    path = directory / name
    path.write_text(textwrap.dedent(body))
    return path


# ----- defaults ----------------------------------------------------------------------------------


def test_minimal_controller_gets_kafka_defaults() -> None:
    config = config_from_settings(CONTROLLER)
    assert config.node_id == 1
    assert config.process_roles == frozenset({"controller"})
    assert config.is_controller
    assert not config.is_broker
    assert config.controller_quorum_voters == {
        1: HostPort("127.0.0.1", 9093),
        2: HostPort("127.0.0.1", 9094),
        3: HostPort("127.0.0.1", 9095),
    }
    assert config.voter_ids == frozenset({1, 2, 3})
    assert config.listener == Listener("CONTROLLER", "127.0.0.1", 9093)
    assert str(config.listener) == "CONTROLLER://127.0.0.1:9093"
    assert config.metadata_log_dir == Path("/var/lib/mq/meta")
    assert config.log_dirs == ()
    assert config.cluster_id is None
    assert config.controller_quorum_election_timeout_ms == 1000
    assert config.controller_quorum_fetch_timeout_ms == 2000
    assert config.controller_quorum_election_backoff_max_ms == 1000
    assert config.controller_quorum_append_linger_ms == 25
    assert config.controller_quorum_request_timeout_ms == 2000
    assert config.metadata_max_idle_interval_ms == 500
    assert config.metadata_log_segment_bytes == 1024 * 1024 * 1024
    assert config.metadata_log_max_record_bytes_between_snapshots == 20 * 1024 * 1024
    assert config.broker_heartbeat_interval_ms == 2000
    assert config.broker_session_timeout_ms == 9000
    assert config.delete_topic_delay_ms == 4 * 60 * 60 * 1000
    assert config.data_dirs == (Path("/var/lib/mq/meta"),)


def test_every_field_has_a_kafka_key() -> None:
    assert KEYS["node.id"] == "node_id"
    assert KEYS["controller.quorum.election.backoff.max.ms"] == (
        "controller_quorum_election_backoff_max_ms"
    )
    assert "config.file" not in KEYS
    assert set(REQUIRED_KEYS) <= set(KEYS)


def test_every_optional_key_can_be_set() -> None:
    config = config_from_settings(
        settings(
            **{
                "controller.quorum.election.timeout.ms": 150,
                "controller.quorum.fetch.timeout.ms": 300,
                "controller.quorum.election.backoff.max.ms": 50,
                "controller.quorum.append.linger.ms": 0,
                "controller.quorum.request.timeout.ms": 100,
                "metadata.max.idle.interval.ms": 0,
                "metadata.log.segment.bytes": 4096,
                "metadata.log.max.record.bytes.between.snapshots": 8192,
                "broker.heartbeat.interval.ms": 10,
                "broker.session.timeout.ms": 40,
                "delete.topic.delay.ms": 0,
                "cluster.id": "AAAAAAAAAAAAAAAAAAAAAg",
            }
        )
    )
    assert config.controller_quorum_election_timeout_ms == 150
    assert config.controller_quorum_fetch_timeout_ms == 300
    assert config.controller_quorum_election_backoff_max_ms == 50
    assert config.controller_quorum_append_linger_ms == 0
    assert config.controller_quorum_request_timeout_ms == 100
    assert config.metadata_max_idle_interval_ms == 0
    assert config.metadata_log_segment_bytes == 4096
    assert config.metadata_log_max_record_bytes_between_snapshots == 8192
    assert config.broker_heartbeat_interval_ms == 10
    assert config.broker_session_timeout_ms == 40
    assert config.delete_topic_delay_ms == 0
    assert config.cluster_id == Uuid(0, 2)


def test_broker_and_combined_roles() -> None:
    broker = config_from_settings(
        settings(
            node_id=4,
            process_roles="broker",
            listeners="BROKER://127.0.0.1:9092",
            log_dirs=["/d1", "/d2"],
            metadata_log_dir=None,
        )
    )
    assert broker.is_broker
    assert not broker.is_controller
    assert broker.log_dirs == (Path("/d1"), Path("/d2"))
    # Kafka: metadata.log.dir defaults to the first log.dirs entry.
    assert broker.metadata_log_dir == Path("/d1")
    assert broker.data_dirs == (Path("/d1"), Path("/d2"))

    combined = config_from_settings(settings(process_roles="broker, controller", log_dirs="/d1"))
    assert combined.process_roles == frozenset({"broker", "controller"})
    assert combined.data_dirs == (Path("/var/lib/mq/meta"), Path("/d1"))


def test_data_dirs_lists_a_shared_directory_once() -> None:
    config = config_from_settings(
        settings(process_roles="broker,controller", log_dirs=["/var/lib/mq/meta", "/d2"])
    )
    assert config.data_dirs == (Path("/var/lib/mq/meta"), Path("/d2"))


def test_comma_separated_strings_and_ipv6() -> None:
    config = config_from_settings(
        settings(
            controller_quorum_voters="1@[::1]:9093, 2@host-b:9094,3@10.0.0.3:9095",
            listeners="CONTROLLER://[::1]:9093",
        )
    )
    assert config.controller_quorum_voters[1] == HostPort("::1", 9093)
    assert str(config.controller_quorum_voters[1]) == "[::1]:9093"
    assert config.controller_quorum_voters[2] == HostPort("host-b", 9094)
    assert config.listener.address == HostPort("::1", 9093)


def test_integers_may_be_given_as_digit_strings() -> None:
    config = config_from_settings(settings(node_id="2", broker_session_timeout_ms="12000"))
    assert config.node_id == 2
    assert config.broker_session_timeout_ms == 12000


def test_cluster_id_accepts_the_dashed_hex_form() -> None:
    config = config_from_settings(settings(cluster_id="00000000-0000-0000-0000-000000000002"))
    assert config.cluster_id == Uuid(0, 2)


# ----- validation errors -------------------------------------------------------------------------


@pytest.mark.parametrize("key", REQUIRED_KEYS)
def test_missing_required_key(key: str) -> None:
    values = dict(CONTROLLER)
    del values[key]
    error = config_error(values)
    assert error.key == key
    assert f"{key} is required" in str(error)


def test_missing_metadata_log_dir_and_log_dirs() -> None:
    error = config_error(settings(metadata_log_dir=None))
    assert error.key == "metadata.log.dir"
    assert "log.dirs" in str(error)


def test_unknown_key_suggests_the_closest_name() -> None:
    error = config_error(settings(**{"controller.quorum.election.timeout": 5}))
    assert error.key == "controller.quorum.election.timeout"
    assert "did you mean 'controller.quorum.election.timeout.ms'?" in str(error)


def test_unknown_key_without_close_match_lists_known_keys() -> None:
    error = config_error(settings(zzz=1))
    assert "unknown config key 'zzz'" in str(error)
    assert "did you mean" not in str(error)
    assert "node.id" in str(error)


@pytest.mark.parametrize(
    ("value", "fragment"),
    [
        ("one", "'one' is not an integer"),
        (True, "True is not an integer"),
        (1.5, "1.5 is not an integer"),
        (-1, "-1 is out of range"),
        (2**31, "2147483648 is out of range"),
    ],
)
def test_bad_node_id(value: object, fragment: str) -> None:
    error = config_error(settings(node_id=value))
    assert error.key == "node.id"
    assert fragment in str(error)
    assert "0 to 2147483647" in str(error)


@pytest.mark.parametrize(
    ("value", "fragment"),
    [
        ("contoller", "'contoller' is not a role (did you mean 'controller'?)"),
        (["controller", "observer"], "'observer' is not a role"),
        ([], "process.roles is empty"),
        ("", "process.roles is empty"),
        ("controller,controller", "lists a role twice"),
        (7, "7 is not a list"),
        (["controller", 3], "entry 3 is not a string"),
        ("controller,,broker", "has an empty entry"),
    ],
)
def test_bad_process_roles(value: object, fragment: str) -> None:
    error = config_error(settings(process_roles=value))
    assert error.key == "process.roles"
    assert fragment in str(error)


@pytest.mark.parametrize(
    ("value", "fragment"),
    [
        (["1-127.0.0.1:9093"], "'1-127.0.0.1:9093' is not of the form id@host:port"),
        (["x@127.0.0.1:9093"], "'x@127.0.0.1:9093' is not of the form id@host:port"),
        (["1@127.0.0.1"], "'1@127.0.0.1' has no valid host:port"),
        (["1@127.0.0.1:port"], "has no valid host:port"),
        (["1@:9093"], "has no valid host:port"),
        (["1@::1:9093"], "has no valid host:port"),
        (["1@127.0.0.1:0"], "port 0 is out of range; allowed: 1 to 65535"),
        (["1@127.0.0.1:70000"], "port 70000 is out of range"),
        (["-1@127.0.0.1:9093"], "-1 is out of range"),
        (["1@a:1", "1@b:2"], "voter id 1 appears twice"),
        (["1@a:1", "2@a:1"], "two voters share the address a:1"),
        ([], "controller.quorum.voters is empty"),
        (5, "5 is not a list"),
    ],
)
def test_bad_voters(value: object, fragment: str) -> None:
    error = config_error(settings(controller_quorum_voters=value))
    assert error.key == "controller.quorum.voters"
    assert fragment in str(error)


def test_controller_must_be_a_voter() -> None:
    error = config_error(settings(node_id=9))
    assert error.key == "node.id"
    assert "node.id 9 is not among controller.quorum.voters" in str(error)
    assert "1@127.0.0.1:9093, 2@127.0.0.1:9094, 3@127.0.0.1:9095" in str(error)


def test_broker_only_node_must_not_be_a_voter() -> None:
    error = config_error(settings(process_roles="broker", log_dirs="/d"))
    assert error.key == "node.id"
    assert "broker-only node must not be a voter" in str(error)


@pytest.mark.parametrize(
    ("value", "fragment"),
    [
        ([], "listeners is empty"),
        (
            ["CONTROLLER://127.0.0.1:9093", "CONTROLLER://127.0.0.1:9094"],
            "the listener name CONTROLLER is used twice",
        ),
        (["127.0.0.1:9093"], "is not of the form NAME://host:port"),
        (["://127.0.0.1:9093"], "is not of the form NAME://host:port"),
        (["CONTROLLER://127.0.0.1"], "has no valid host:port"),
        (["9X://127.0.0.1:9093"], "'9X' is not a listener name"),
        (["CONTROLLER://127.0.0.1:65536"], "port 65536 is out of range; allowed: 0 to 65535"),
    ],
)
def test_bad_listeners(value: object, fragment: str) -> None:
    error = config_error(settings(listeners=value))
    assert error.key == "listeners"
    assert fragment in str(error)


def broker_settings(**overrides: object) -> dict[str, object]:
    return settings(node_id=4, process_roles="broker", log_dirs="/d", **overrides)


def test_broker_may_add_kafka_listeners_after_its_grpc_listener() -> None:
    config = config_from_settings(
        broker_settings(
            listeners=["BROKER://127.0.0.1:9192", "KAFKA://127.0.0.1:9092"],
            advertised_listeners=["KAFKA://kafka.example:19092"],
        )
    )
    assert config.listener.name == "BROKER"
    assert [str(listener) for listener in config.kafka_listeners] == ["KAFKA://127.0.0.1:9092"]
    assert str(config.advertised(config.kafka_listeners[0])) == "KAFKA://kafka.example:19092"
    assert config.advertised(config.listener) == config.listener
    assert config.protocol_of(config.kafka_listeners[0]) == "SSL"  # secure by default


@pytest.mark.parametrize(
    ("overrides", "key", "fragment"),
    [
        (
            {"listeners": ["BROKER://127.0.0.1:9192", "BROKER://127.0.0.1:9092"]},
            "listeners",
            "the listener name BROKER is used twice",
        ),
        (
            {"listeners": ["BROKER://127.0.0.1:9192", "KAFKA://127.0.0.1:9192"]},
            "listeners",
            "two listeners share a port",
        ),
        (
            {
                "listeners": ["BROKER://127.0.0.1:9192", "KAFKA://127.0.0.1:9092"],
                "advertised_listeners": ["OTHER://h:1"],
            },
            "advertised.listeners",
            "'OTHER' is not one of this node's listeners",
        ),
        (
            {
                "listeners": ["BROKER://127.0.0.1:9192", "KAFKA://127.0.0.1:9092"],
                "advertised_listeners": ["KAFKA://h:0"],
            },
            "advertised.listeners",
            "port 0 is out of range; allowed: 1 to 65535",
        ),
    ],
)
def test_bad_kafka_listeners(overrides: dict[str, object], key: str, fragment: str) -> None:
    error = config_error(broker_settings(**overrides))
    assert error.key == key
    assert fragment in str(error)


def test_broker_needs_log_dirs() -> None:
    error = config_error(settings(node_id=4, process_roles="broker"))
    assert error.key == "log.dirs"
    assert "required when process.roles includes 'broker'" in str(error)


def test_duplicate_log_dirs() -> None:
    error = config_error(settings(log_dirs=["/d", "/x/../d"]))
    assert error.key == "log.dirs"
    assert "/d is listed more than once" in str(error)


@pytest.mark.parametrize(("key", "value"), [("metadata.log.dir", ""), ("metadata.log.dir", 3)])
def test_bad_paths(key: str, value: object) -> None:
    error = config_error(settings(**{key: value}))
    assert error.key == key
    assert f"{value!r} is not a path" in str(error)


@pytest.mark.parametrize(
    ("value", "fragment"),
    [
        ("not-a-uuid", "'not-a-uuid' is not a Uuid"),
        (12, "12 is not a string"),
        (str(ZERO_UUID), "is reserved"),
        (str(METADATA_TOPIC_ID), "is reserved"),
    ],
)
def test_bad_cluster_id(value: object, fragment: str) -> None:
    error = config_error(settings(cluster_id=value))
    assert error.key == "cluster.id"
    assert fragment in str(error)


@pytest.mark.parametrize(
    ("key", "too_small"),
    [
        ("controller.quorum.election.timeout.ms", 0),
        ("controller.quorum.fetch.timeout.ms", 0),
        ("controller.quorum.election.backoff.max.ms", 0),
        ("controller.quorum.append.linger.ms", -1),
        ("controller.quorum.request.timeout.ms", 0),
        ("metadata.max.idle.interval.ms", -1),
        ("metadata.log.segment.bytes", 0),
        ("metadata.log.max.record.bytes.between.snapshots", 0),
        ("broker.heartbeat.interval.ms", 0),
        ("broker.session.timeout.ms", 0),
        ("delete.topic.delay.ms", -1),
    ],
)
def test_integer_keys_below_their_minimum(key: str, too_small: int) -> None:
    error = config_error(settings(**{key: too_small}))
    assert error.key == key
    assert f"{key}: {too_small} is out of range; allowed: an integer from {too_small + 1}" in str(
        error
    )


def test_integer_key_of_the_wrong_type() -> None:
    error = config_error(settings(**{"controller.quorum.fetch.timeout.ms": "2s"}))
    assert error.key == "controller.quorum.fetch.timeout.ms"
    assert "'2s' is not an integer; allowed: an integer from 1 to 2147483647" in str(error)


def test_session_timeout_must_exceed_heartbeat_interval() -> None:
    error = config_error(
        settings(**{"broker.heartbeat.interval.ms": 3000, "broker.session.timeout.ms": 3000})
    )
    assert error.key == "broker.session.timeout.ms"
    assert "(3000) must be greater than broker.heartbeat.interval.ms (3000)" in str(error)


def test_direct_construction_is_validated_too() -> None:
    with pytest.raises(ConfigError, match=re.escape("node.id 5 is not among")):
        NodeConfig(
            node_id=5,
            process_roles=frozenset({"controller"}),
            controller_quorum_voters={1: HostPort("h", 1)},
            listeners=(Listener("CONTROLLER", "h", 1),),
            metadata_log_dir=Path("/m"),
        )
    with pytest.raises(ConfigError, match=re.escape("process.roles: 'observer' is not a role")):
        NodeConfig(
            node_id=1,
            process_roles=frozenset({"observer"}),
            controller_quorum_voters={1: HostPort("h", 1)},
            listeners=(Listener("CONTROLLER", "h", 1),),
            metadata_log_dir=Path("/m"),
        )


def test_voters_mapping_is_copied() -> None:
    voters = {1: HostPort("h", 1)}
    config = NodeConfig(
        node_id=1,
        process_roles=frozenset({"controller"}),
        controller_quorum_voters=voters,
        listeners=(Listener("CONTROLLER", "h", 1),),
        metadata_log_dir=Path("/m"),
    )
    voters[2] = HostPort("h", 2)
    assert config.voter_ids == frozenset({1})


# ----- files ---------------------------------------------------------------------------------


QUOTED = """\
    "node.id" = 1
    "process.roles" = ["controller"]
    "controller.quorum.voters" = ["1@127.0.0.1:9093"]
    "listeners" = ["CONTROLLER://127.0.0.1:9093"]
    "metadata.log.dir" = "data/meta"
    "controller.quorum.fetch.timeout.ms" = 3000
"""


def test_load_quoted_keys_resolves_relative_paths_against_the_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "conf").mkdir()
    path = write_config(tmp_path / "conf", QUOTED)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    config = load_config(path)
    assert config.metadata_log_dir == tmp_path / "conf" / "data" / "meta"
    assert config.controller_quorum_fetch_timeout_ms == 3000
    assert config.config_file == path


def test_dotted_keys_and_tables_mean_the_same(tmp_path: Path) -> None:
    dotted = write_config(
        tmp_path,
        """\
        node.id = 1
        process.roles = ["controller"]
        controller.quorum.voters = ["1@127.0.0.1:9093"]
        listeners = ["CONTROLLER://127.0.0.1:9093"]
        metadata.log.dir = "data/meta"
        controller.quorum.fetch.timeout.ms = 3000
        """,
        name="dotted.toml",
    )
    tables = write_config(
        tmp_path,
        """\
        listeners = ["CONTROLLER://127.0.0.1:9093"]
        [node]
        id = 1
        [process]
        roles = ["controller"]
        [controller.quorum]
        voters = ["1@127.0.0.1:9093"]
        fetch.timeout.ms = 3000
        [metadata.log]
        dir = "data/meta"
        """,
        name="tables.toml",
    )
    quoted = write_config(tmp_path, QUOTED, name="quoted.toml")
    assert load_config(dotted) == load_config(quoted) == load_config(tables)


def test_a_key_given_quoted_and_dotted_is_an_error(tmp_path: Path) -> None:
    path = write_config(tmp_path, QUOTED + "node.id = 2\n")
    with pytest.raises(ConfigError, match=re.escape("node.id is given twice")) as info:
        load_config(path)
    assert info.value.key == "node.id"


def test_errors_from_a_file_name_the_file(tmp_path: Path) -> None:
    path = write_config(tmp_path, QUOTED + '"node.idd" = 2\n')
    with pytest.raises(ConfigError) as info:
        load_config(path)
    message = str(info.value)
    assert message.startswith(f"invalid config {path}:")
    assert "unknown config key 'node.idd'" in message
    assert "did you mean 'node.id'?" in message


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"config file .*nope\.toml does not exist"):
        load_config(tmp_path / "nope.toml")


def test_invalid_toml(tmp_path: Path) -> None:
    path = write_config(tmp_path, "node.id = = 1\n")
    with pytest.raises(ConfigError, match="is not valid TOML"):
        load_config(path)


def test_home_is_expanded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    path = write_config(tmp_path, QUOTED.replace('"data/meta"', '"~/meta"'))
    assert load_config(path).metadata_log_dir == tmp_path / "home" / "meta"


def test_absolute_paths_are_kept(tmp_path: Path) -> None:
    path = write_config(tmp_path, QUOTED.replace('"data/meta"', f'"{tmp_path / "abs"}"'))
    assert load_config(path).metadata_log_dir == tmp_path / "abs"


@pytest.mark.parametrize("node_id", [1, 2, 3])
def test_local_deploy_configs(node_id: int) -> None:
    path = REPO_ROOT / "deploy" / "local" / f"controller-{node_id}.toml"
    config = load_config(path)
    assert config.node_id == node_id
    assert config.is_controller
    assert config.voter_ids == frozenset({1, 2, 3})
    # Each controller listens where the others expect it.
    assert config.listener.address == config.controller_quorum_voters[node_id]
    assert config.listener.host == "127.0.0.1"
    assert config.metadata_log_dir == REPO_ROOT / ".data" / f"controller-{node_id}"


def test_local_deploy_configs_agree_on_the_voters() -> None:
    configs = [
        load_config(REPO_ROOT / "deploy" / "local" / f"controller-{n}.toml") for n in (1, 2, 3)
    ]
    assert len({tuple(sorted(c.controller_quorum_voters.items())) for c in configs}) == 1
    assert len({c.listener.port for c in configs}) == 3


# ----- overrides ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("node.id=2", ("node.id", 2)),
        ("node.id = 2", ("node.id", 2)),
        ("process.roles=broker", ("process.roles", "broker")),
        ('log.dirs=["a", "b"]', ("log.dirs", ["a", "b"])),
        ('metadata.log.dir="x y"', ("metadata.log.dir", "x y")),
        ("controller.quorum.voters=1@h:1,2@h:2", ("controller.quorum.voters", "1@h:1,2@h:2")),
        ("listeners=CONTROLLER://h:1", ("listeners", "CONTROLLER://h:1")),
        ("key=a=b", ("key", "a=b")),
        # Text-only keys keep what was typed even when TOML would read a number or a date.
        ("cluster.id=1234567890123456789012", ("cluster.id", "1234567890123456789012")),
        ("metadata.log.dir=2024-01-01", ("metadata.log.dir", "2024-01-01")),
    ],
)
def test_parse_override(text: str, expected: tuple[str, object]) -> None:
    assert parse_override(text) == expected


@pytest.mark.parametrize("text", ["node.id", "=1", ""])
def test_malformed_override(text: str) -> None:
    with pytest.raises(ConfigError, match="is not of the form key=value"):
        parse_override(text)


def test_overrides_replace_file_values_in_order(tmp_path: Path) -> None:
    path = write_config(tmp_path, QUOTED)
    config = load_config(
        path,
        [
            "controller.quorum.fetch.timeout.ms=100",
            "controller.quorum.fetch.timeout.ms=200",
            "controller.quorum.election.timeout.ms=50",
            "controller.quorum.voters=1@127.0.0.1:9093,2@127.0.0.1:9094",
        ],
    )
    assert config.controller_quorum_fetch_timeout_ms == 200
    assert config.controller_quorum_election_timeout_ms == 50
    assert config.voter_ids == frozenset({1, 2})
    assert load_config(path).controller_quorum_fetch_timeout_ms == 3000


def test_override_paths_resolve_against_the_current_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "conf").mkdir()
    path = write_config(tmp_path / "conf", QUOTED)
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    monkeypatch.chdir(cwd)
    config = load_config(path, ["metadata.log.dir=here/meta"])
    assert config.metadata_log_dir == cwd / "here" / "meta"


def test_unknown_override_key_is_an_error(tmp_path: Path) -> None:
    path = write_config(tmp_path, QUOTED)
    with pytest.raises(ConfigError) as info:
        load_config(path, ["node.idd=3"])
    assert info.value.key == "node.idd"
    assert "--override node.idd=3" in str(info.value)
    assert "did you mean 'node.id'?" in str(info.value)


def test_bad_override_value_names_the_override(tmp_path: Path) -> None:
    path = write_config(tmp_path, QUOTED)
    with pytest.raises(ConfigError) as info:
        load_config(path, ["node.id=one"])
    assert info.value.key == "node.id"
    assert "'one' is not an integer" in str(info.value)
    assert "(from --override node.id=one)" in str(info.value)
