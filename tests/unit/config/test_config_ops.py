"""quorum.config for operators: metrics.listener, health.listener, METAQUORUM_* environment
variables and the node id from a StatefulSet pod's ordinal (docs/operating.md)."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from quorum.config import (
    KEYS,
    NODE_ID_FROM_ORDINAL_ENV,
    ConfigError,
    HostPort,
    config_from_settings,
    env_variable,
    load_config,
)

CONTROLLER = {
    "node.id": 1,
    "process.roles": ["controller"],
    "controller.quorum.voters": ["1@127.0.0.1:9093", "2@127.0.0.1:9094", "3@127.0.0.1:9095"],
    "listeners": ["CONTROLLER://127.0.0.1:9093"],
    "metadata.log.dir": "/var/lib/mq/meta",
}

# One file for every pod: what deploy/kubernetes/ mounts from a ConfigMap (no node.id).
SHARED_FILE = """\
"process.roles" = ["controller"]
"controller.quorum.voters" = ["1@c-0.c:9093", "2@c-1.c:9093", "3@c-2.c:9093"]
"listeners" = ["CONTROLLER://0.0.0.0:9093"]
"metadata.log.dir" = "/var/lib/metaquorum/metadata"
"""


def error_of(**changes: object) -> ConfigError:
    with pytest.raises(ConfigError) as info:
        config_from_settings({**CONTROLLER, **changes})
    return info.value


def shared_file(tmp_path: Path, body: str = SHARED_FILE) -> Path:
    path = tmp_path / "controller.toml"
    path.write_text(textwrap.dedent(body))
    return path


# ----- metrics.listener and health.listener ------------------------------------------------------


def test_side_listeners_are_off_by_default() -> None:
    config = config_from_settings(CONTROLLER)
    assert config.metrics_listener is None
    assert config.health_listener is None


def test_side_listeners_parse() -> None:
    config = config_from_settings(
        {
            **CONTROLLER,
            "metrics.listener": "http://0.0.0.0:9404",
            "health.listener": "[::1]:9405",
        }
    )
    assert config.metrics_listener == HostPort("0.0.0.0", 9404)
    assert config.health_listener == HostPort("::1", 9405)
    # A path of /metrics is what Prometheus scrapes anyway; port 0 picks a free port.
    config = config_from_settings({**CONTROLLER, "metrics.listener": "http://127.0.0.1:0/metrics"})
    assert config.metrics_listener == HostPort("127.0.0.1", 0)


@pytest.mark.parametrize(
    ("key", "value", "expected"),
    [
        ("metrics.listener", "127.0.0.1:9404", "has no scheme; allowed: http://host:port"),
        ("metrics.listener", "https://127.0.0.1:9404", "scheme 'https' is not supported"),
        ("metrics.listener", "http://127.0.0.1", "has no valid host:port"),
        ("metrics.listener", "http://127.0.0.1:70000", "port 70000 is out of range"),
        ("metrics.listener", 9404, "is not an address; allowed: http://host:port"),
        ("health.listener", "grpc://0.0.0.0:9405", "has a scheme; allowed: host:port"),
        ("health.listener", "", "is not an address"),
        ("health.listener", "0.0.0.0:9093", "port 9093 is already listeners's on 127.0.0.1"),
    ],
)
def test_side_listener_errors_say_what_is_allowed(key: str, value: object, expected: str) -> None:
    error = error_of(**{key: value})
    assert error.key == key
    assert expected in str(error)


def test_metrics_and_health_cannot_share_a_port() -> None:
    error = error_of(**{"metrics.listener": "http://0.0.0.0:9404", "health.listener": "h:9404"})
    assert error.key == "health.listener"
    assert "already metrics.listener's" in str(error)
    # Different hosts, or port 0 (the system picks), are fine.
    config_from_settings(
        {**CONTROLLER, "metrics.listener": "http://10.0.0.1:9404", "health.listener": "h:9404"}
    )
    config_from_settings({**CONTROLLER, "metrics.listener": "http://h:0", "health.listener": "h:0"})


# ----- environment variables ---------------------------------------------------------------------


def test_env_variable_names_follow_the_keys() -> None:
    assert env_variable("node.id") == "METAQUORUM_NODE_ID"
    assert env_variable("controller.quorum.voters") == "METAQUORUM_CONTROLLER_QUORUM_VOTERS"
    # Every key has a variable of its own (no two keys collapse onto one name).
    assert len({env_variable(key) for key in KEYS}) == len(KEYS)


def test_environment_fills_in_and_overrides_the_file(tmp_path: Path) -> None:
    path = shared_file(tmp_path, SHARED_FILE + '"delete.topic.delay.ms" = 5\n')
    environ = {
        "METAQUORUM_NODE_ID": "2",
        "METAQUORUM_DELETE_TOPIC_DELAY_MS": "60000",
        "METAQUORUM_METRICS_LISTENER": "http://0.0.0.0:9404",
        # Lists as Kafka writes them in properties: comma-separated.
        "METAQUORUM_SUPER_USERS": "User:CN=admin;User:CN=ops",
        "METAQUORUM_SSL_KEYSTORE_LOCATION": "/etc/metaquorum/tls/c-1.pem",
        # Not config keys: the project's test switches, and other programs' variables.
        "METAQUORUM_UNSAFE_STALE_READS": "0",
        "METAQUORUM_TEST_FSYNC_DELAY_MS": "0",
        "KAFKA_NODE_ID": "7",
    }
    config = load_config(path, environ=environ)
    assert config.node_id == 2
    assert config.delete_topic_delay_ms == 60_000
    assert config.metrics_listener == HostPort("0.0.0.0", 9404)
    assert config.super_users == ("User:CN=admin", "User:CN=ops")
    assert config.ssl_keystore_location == Path("/etc/metaquorum/tls/c-1.pem")
    # --override comes last.
    config = load_config(path, ["node.id=3"], environ=environ)
    assert config.node_id == 3
    # Without environ (the default), the environment is not read.
    with pytest.raises(ConfigError, match=r"node\.id is required"):
        load_config(path)


def test_unknown_environment_variable_is_refused_with_a_suggestion(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as info:
        load_config(shared_file(tmp_path), environ={"METAQUORUM_NODE_IDD": "1"})
    message = str(info.value)
    assert "environment variable METAQUORUM_NODE_IDD names no config key" in message
    assert "did you mean 'METAQUORUM_NODE_ID'?" in message


def test_bad_environment_value_names_the_variable(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as info:
        load_config(shared_file(tmp_path), environ={"METAQUORUM_NODE_ID": "one"})
    message = str(info.value)
    assert "node.id: 'one' is not an integer" in message
    assert "(from environment variable METAQUORUM_NODE_ID)" in message


@pytest.mark.parametrize(
    ("base", "hostname", "node_id"),
    [("1", "metaquorum-controller-0", 1), ("1", "metaquorum-controller-2", 3), ("101", "b-1", 102)],
)
def test_node_id_from_the_pod_ordinal(
    tmp_path: Path, base: str, hostname: str, node_id: int
) -> None:
    environ = {NODE_ID_FROM_ORDINAL_ENV: base, "HOSTNAME": hostname}
    body = SHARED_FILE
    if node_id > 100:  # a broker listens on every interface as NAME://:port (Kafka's rule)
        body = body.replace('["controller"]', '["broker"]').replace("0.0.0.0", "")
        body += '"log.dirs" = ["/var/lib/metaquorum/data"]\n'
    assert load_config(shared_file(tmp_path, body), environ=environ).node_id == node_id


@pytest.mark.parametrize(
    ("environ", "expected"),
    [
        (
            {NODE_ID_FROM_ORDINAL_ENV: "1", "HOSTNAME": "controller"},
            "host name 'controller' does not end in -<ordinal>",
        ),
        (
            {NODE_ID_FROM_ORDINAL_ENV: "-1", "HOSTNAME": "c-0"},
            "'-1' is not a node id; allowed: an integer from 0",
        ),
        (
            {NODE_ID_FROM_ORDINAL_ENV: "1", "HOSTNAME": "c-0", "METAQUORUM_NODE_ID": "1"},
            "are both set; give one",
        ),
        # The ordinal's node must still be a voter: c-5 would be node 6.
        (
            {NODE_ID_FROM_ORDINAL_ENV: "1", "HOSTNAME": "c-5"},
            "node.id 6 is not among controller.quorum.voters",
        ),
    ],
)
def test_node_id_from_ordinal_errors(
    tmp_path: Path, environ: dict[str, str], expected: str
) -> None:
    with pytest.raises(ConfigError) as info:
        load_config(shared_file(tmp_path), environ=environ)
    assert expected in str(info.value)
    assert info.value.key == "node.id"
