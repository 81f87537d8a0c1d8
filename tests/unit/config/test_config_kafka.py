"""Kafka KRaft configs load as they are (quorum/config.py, quorum/config_kafka.py).

The fixtures in tests/fixtures/kraft/ hold the keys of Kafka 3.x's own example configs
(config/kraft/controller.properties, broker.properties and server.properties) with this
repository's values. Each loads unchanged from its .properties file, and the same keys written
key for key as TOML give the same config. Keys that mean nothing here are accepted and named in
one warning; anything else unknown is still an error that suggests the close match.
"""

from __future__ import annotations

import json
import socket
from collections.abc import Mapping
from pathlib import Path

import pytest
import structlog
from structlog.testing import capture_logs

from quorum.config import (
    ConfigError,
    HostPort,
    Listener,
    NodeConfig,
    config_from_settings,
    load_config,
)
from quorum.config_kafka import NOT_APPLICABLE_KEYS
from quorum.controller.state_machine import ControllerConfig
from quorum.properties import property_entries
from quorum.server.raft_manager import warn_unused_config

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "kraft"
PROPERTIES = ("controller.properties", "broker.properties", "server.properties")


def as_toml(properties: Path, target: Path) -> Path:
    """The properties file converted key for key into TOML (quoted keys, text values)."""
    lines = [
        f'"{key}" = {json.dumps(value)}'
        for _, key, value in property_entries(properties.read_text())
    ]
    target.write_text("\n".join(lines) + "\n")
    return target


def ignored_in(properties: Path) -> tuple[str, ...]:
    keys = [key for _, key, _ in property_entries(properties.read_text())]
    return tuple(sorted(key for key in keys if key in NOT_APPLICABLE_KEYS))


@pytest.mark.parametrize("name", PROPERTIES)
def test_kafkas_example_configs_load_and_equal_their_toml_conversion(
    tmp_path: Path, name: str
) -> None:
    source = FIXTURES / name
    from_properties = load_config(source)
    # The TOML twin sits in the same directory, so relative paths mean the same.
    twin = as_toml(source, FIXTURES / f"{tmp_path.name}-{name}.toml")
    try:
        from_toml = load_config(twin)
    finally:
        twin.unlink()
    assert from_toml == from_properties
    assert from_properties.ignored_keys == from_toml.ignored_keys == ignored_in(source)
    # Kafka's log defaults are the brokers' own keys (quorum/controller/broker_configs.py).
    assert "log.retention.hours" not in from_properties.ignored_keys
    assert "log.retention.hours" in from_properties.given_keys
    assert from_properties.log_retention_hours == 168
    assert "num.network.threads" in from_properties.ignored_keys


def test_the_controller_config() -> None:
    config = load_config(FIXTURES / "controller.properties")
    assert config.process_roles == frozenset({"controller"})
    assert config.controller_quorum_voters == {
        1: HostPort("127.0.0.1", 29093),
        2: HostPort("127.0.0.1", 29094),
        3: HostPort("127.0.0.1", 29095),
    }
    # CONTROLLER://:29093 binds every interface, as in Kafka.
    assert config.listener == Listener("CONTROLLER", "0.0.0.0", 29093)
    assert config.listener_protocol == "PLAINTEXT"
    # metadata.log.dir defaults to the first of log.dirs (Kafka's rule), relative to the file.
    assert config.metadata_log_dir == (FIXTURES / "data" / "controller-1").resolve()
    assert (config.num_partitions, config.default_replication_factor) == (3, 1)
    assert config.unserved_listeners == ()


def test_the_broker_config_registers_its_advertised_listener() -> None:
    config = load_config(FIXTURES / "broker.properties")
    assert config.process_roles == frozenset({"broker"})
    assert config.listener == Listener("PLAINTEXT", "127.0.0.1", 29092)
    assert config.advertised_listener == Listener("PLAINTEXT", "localhost", 29092)
    assert config.controller_quorum_bootstrap_servers == (HostPort("127.0.0.1", 29093),)
    assert config.controller_listener_names == ("CONTROLLER",)
    assert config.inter_broker_listener_name == "PLAINTEXT"
    assert config.auto_create_topics_enable is False
    assert config.log_dirs == ((FIXTURES / "data" / "broker-2").resolve(),)
    assert "share.coordinator.state.topic.min.isr" in config.ignored_keys


def test_the_combined_config_serves_the_controller_listener() -> None:
    config = load_config(FIXTURES / "server.properties")
    assert config.is_controller and config.is_broker
    assert config.listener == Listener("CONTROLLER", "0.0.0.0", 29093)
    assert config.unserved_listeners == (Listener("PLAINTEXT", "0.0.0.0", 29092),)
    # The served listener is on every interface and not advertised: its voter address is.
    assert config.advertised_listener == Listener("CONTROLLER", "127.0.0.1", 29093)
    assert (config.num_partitions, config.default_replication_factor) == (2, 1)


def test_one_warning_names_every_ignored_key_and_unserved_listener() -> None:
    config = load_config(FIXTURES / "server.properties")
    with capture_logs() as logs:
        warn_unused_config(config, structlog.get_logger("test"))
    (event,) = logs
    assert event["event"] == "config_keys_ignored"
    assert event["log_level"] == "warning"
    assert event["keys"] == list(ignored_in(FIXTURES / "server.properties"))
    assert event["listeners_not_served"] == ["PLAINTEXT://0.0.0.0:29092"]
    assert event["serving"] == "CONTROLLER://0.0.0.0:29093"
    assert "network and request threads (gRPC serves every request here)" in event["parts"]
    quiet = config_from_settings(BASE)
    with capture_logs() as logs:
        warn_unused_config(quiet, structlog.get_logger("test"))
    assert logs == []


# ----- rules, one by one ----------------------------------------------------------------------

BASE: Mapping[str, object] = {
    "node.id": 1,
    "process.roles": "controller",
    "controller.quorum.voters": "1@127.0.0.1:9093",
    "listeners": "CONTROLLER://127.0.0.1:9093",
    "metadata.log.dir": "/m",
}


def error(**changes: object) -> ConfigError:
    values = {**BASE, **{k.replace("_", "."): v for k, v in changes.items()}}
    values = {k: v for k, v in values.items() if v is not None}
    with pytest.raises(ConfigError) as info:
        config_from_settings(values)
    return info.value


def build(**changes: object) -> NodeConfig:
    values = {**BASE, **{k.replace("_", "."): v for k, v in changes.items()}}
    return config_from_settings({k: v for k, v in values.items() if v is not None})


@pytest.mark.parametrize(
    ("key", "suggestion"),
    [
        ("num.partition", "num.partitions"),
        ("log.retention.hourz", "log.retention.hours"),
        ("controller.listener.name", "controller.listener.names"),
        ("default.replication.factr", "default.replication.factor"),
    ],
)
def test_unknown_keys_still_fail_with_a_suggestion(key: str, suggestion: str) -> None:
    problem = error(**{key.replace(".", "_"): "1"})
    assert problem.key == key
    assert f"unknown config key {key!r}" in str(problem)
    assert f"did you mean {suggestion!r}?" in str(problem)


def test_topic_defaults_reach_the_controller_and_are_bounded() -> None:
    config = build(num_partitions="6", default_replication_factor=3)
    assert (config.num_partitions, config.default_replication_factor) == (6, 3)
    controller = ControllerConfig(
        default_num_partitions=config.num_partitions,
        default_replication_factor=config.default_replication_factor,
    )
    assert controller.default_num_partitions == 6
    for key, value, allowed in [
        ("num.partitions", 0, "from 1 to 5000"),
        ("num.partitions", 5001, "from 1 to 5000"),
        ("default.replication.factor", 0, "from 1 to 32767"),
        ("default.replication.factor", "two", "is not an integer"),
    ]:
        problem = error(**{key.replace(".", "_"): value})
        assert problem.key == key
        assert allowed in str(problem)


def test_only_the_supported_value_of_kafkas_switches() -> None:
    assert build(auto_create_topics_enable="false").auto_create_topics_enable is False
    problem = error(auto_create_topics_enable="true")
    assert problem.key == "auto.create.topics.enable"
    assert "auto.create.topics.enable=true is not supported" in str(problem)
    assert "set it to false or leave it out" in str(problem)
    assert build(delete_topic_enable=True).delete_topic_enable is True
    assert "delete.topic.enable=false is not supported" in str(error(delete_topic_enable=False))


def test_bootstrap_servers_alone_mean_a_dynamic_quorum() -> None:
    """Kafka's KIP-853 key: alone, the voter set lives in the log; next to
    controller.quorum.voters (Kafka's example configs have both) the static voters rule."""
    dynamic = build(
        controller_quorum_voters=None, controller_quorum_bootstrap_servers="127.0.0.1:9093"
    )
    assert dynamic.dynamic_quorum and dynamic.controller_quorum_voters == {}
    both = build(controller_quorum_bootstrap_servers="127.0.0.1:9093")
    assert not both.dynamic_quorum and set(both.controller_quorum_voters) == {1}
    assert "bootstrap" in str(error(controller_quorum_bootstrap_servers="nohost"))


def test_listener_keys_are_checked_as_kafka_checks_them() -> None:
    two = "PLAINTEXT://127.0.0.1:9092,CONTROLLER://127.0.0.1:9093"
    # Nothing names the served listener: the first entry is the gRPC one; on a controller the
    # others are accepted, not served (named in the start-up warning).
    plain = build(listeners=two)
    assert plain.listener.port == 9092 and plain.unserved_listeners == (
        Listener("CONTROLLER", "127.0.0.1", 9093),
    )
    assert plain.kafka_listeners == ()
    assert build(listeners=two, controller_listener_names="CONTROLLER").listener.port == 9093
    problem = error(controller_listener_names="CTRL")
    assert "names none of the listeners" in str(problem)
    broker = {
        "node_id": 5,
        "process_roles": "broker",
        "log_dirs": "/l",
        "listeners": "BROKER://127.0.0.1:9092,CONTROLLER://127.0.0.1:9093",
        "controller_listener_names": "CONTROLLER",
    }
    assert "must not listen on a controller listener" in str(error(**broker))
    broker["listeners"] = "BROKER://127.0.0.1:9092,OTHER://127.0.0.1:9096"
    # On a broker-only node the first entry is the gRPC listener, the others Kafka listeners.
    served = build(**broker)
    assert served.listener.port == 9092
    assert served.kafka_listeners == (Listener("OTHER", "127.0.0.1", 9096),)
    assert "is not a listener of this node" in str(
        error(**broker, inter_broker_listener_name="INTERNAL")
    )
    assert build(**broker, inter_broker_listener_name="OTHER").listener.port == 9096
    # A broker on 0.0.0.0 needs an advertised address; NAME://:port advertises the host name.
    wildcard = {**broker, "listeners": "BROKER://0.0.0.0:9092"}
    problem = error(**wildcard)
    assert problem.key == "advertised.listeners"
    assert "add BROKER://<host>:9092 to advertised.listeners" in str(problem)
    assert build(
        **wildcard, advertised_listeners="BROKER://b1.example:9092"
    ).advertised_listener == (Listener("BROKER", "b1.example", 9092))
    named = build(**{**broker, "listeners": "BROKER://:9092"}).advertised_listener
    assert named == Listener("BROKER", socket.getfqdn(), 9092)
    assert "not an address others can reach" in str(
        error(**wildcard, advertised_listeners="BROKER://0.0.0.0:9092")
    )


def test_sasl_in_the_protocol_map_only_for_listeners_not_served() -> None:
    kafka_map = "CONTROLLER:SSL,PLAINTEXT:PLAINTEXT,SASL_SSL:SASL_SSL"
    assert build(listener_security_protocol_map=kafka_map).listener_protocol == "SSL"
    problem = error(listener_security_protocol_map="CONTROLLER:SASL_SSL")
    assert "CONTROLLER:SASL_SSL is not supported for the listener this node serves" in str(problem)
    assert "SASL is not supported" in str(error(listener_security_protocol_map="X:KERBEROS"))


def test_a_properties_file_with_a_key_twice_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "dup.properties"
    path.write_text(
        "node.id=1\nprocess.roles=controller\ncontroller.quorum.voters=1@127.0.0.1:9093\n"
        "listeners=CONTROLLER://127.0.0.1:9093\nlog.dirs=/d\nnode.id=2\n"
    )
    with pytest.raises(
        ConfigError, match=r"node.id is given twice in .*dup.properties \(again on line 6\)"
    ):
        load_config(path)
    # An override still applies on top of a properties file.
    path.write_text(path.read_text().rsplit("node.id=2\n", 1)[0])
    assert load_config(path, ["num.partitions=4"]).num_partitions == 4
