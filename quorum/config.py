"""Node configuration: a TOML file whose keys are Kafka's configuration names.

A controller's file looks like a Kafka ``server.properties`` written in TOML::

    "node.id" = 1
    "process.roles" = ["controller"]
    "controller.quorum.voters" = ["1@127.0.0.1:19091", "2@127.0.0.1:19092", "3@127.0.0.1:19093"]
    "listeners" = ["CONTROLLER://127.0.0.1:19091"]
    "metadata.log.dir" = "../../.data/controller-1"

Rules:

- Keys are Kafka's names. Quote them (``"node.id" = 1``) or write them as TOML dotted keys
  (``node.id = 1``), which TOML reads as nested tables and this module flattens back; quoting is
  the safer habit, because TOML refuses a name that is both a value and the prefix of another
  (``log.dir`` and ``log.dir.failure.timeout.ms`` in Kafka's own set). A key given twice, in
  either spelling, is an error. An unknown key is an error that suggests the closest known name.
- Lists may be TOML arrays or Kafka's comma-separated strings (``"broker,controller"``).
  Integers may be TOML integers or strings of digits, as in a properties file.
- ``--override key=value`` replaces a key after the file is read. The value is parsed as a TOML
  value when it is one (``node.id=2`` is the integer 2, ``log.dirs=["a","b"]`` a list) and is
  otherwise taken as a string (``process.roles=broker``).
- Relative paths in the file resolve against the file's directory, so a config can sit next to
  its data; relative paths given with ``--override`` resolve against the current directory, as
  any other path typed on a command line does. ``~`` is expanded.
- One gRPC port per node: one ``listeners`` entry carries every service of the node (Raft,
  admin, broker registration, health, reflection). With several entries, the served one is
  the first of ``controller.listener.names`` on a controller, ``inter.broker.listener.name``
  on a broker-only node, and otherwise the first entry. On a broker-only node every other
  entry is a Kafka wire-protocol listener for Kafka's own clients (``["BROKER://127.0.0.1:9192",
  "KAFKA://127.0.0.1:9092"]``, docs/kafka-listener.md); on a node with the controller role
  the others are accepted, not served, and named in the start-up warning. An empty host
  (``CONTROLLER://:9093``) binds every interface, as in Kafka; a broker then needs its address
  in ``advertised.listeners``, which gives, per listener name, the address the broker
  registers and Kafka Metadata answers name (default: the listener's own).
- A Kafka ``.properties`` file (``server.properties``, ``controller.properties``) is read as it
  is when the file name ends in ``.properties``: every value is text, lists are
  comma-separated, as Kafka writes them.
- Kafka keys that mean nothing here (threads, the partition data path, coordinators, quotas,
  SASL, ...; ``quorum/config_kafka.py``) are accepted and ignored; ``ignored_keys`` lists the
  ones a config holds, and a node warns once at start-up naming them all.

- Security keys are Kafka's (``listener.security.protocol.map``, ``ssl.keystore.location``,
  ``ssl.truststore.location``, ``ssl.client.auth``, ``ssl.principal.mapping.rules``, ...), but a
  listener the map does not name is SSL, not PLAINTEXT. Their values are checked here; whether
  an SSL listener has its certificate files is checked at start-up (quorum/security/tls.py), so
  ``storage format`` needs none (docs/security.md#listeners-and-protocols).

- Environment variables (``load_config(..., environ=os.environ)``, as the CLI does) come between
  the file and ``--override``: ``METAQUORUM_`` followed by the key in upper case with ``_`` for
  ``.`` (``METAQUORUM_NODE_ID=2`` is ``node.id = 2``), its value read as an override's.
  ``METAQUORUM_NODE_ID_FROM_ORDINAL=<base>`` sets ``node.id`` to base plus the ordinal that ends
  the host name (``HOSTNAME``, as a Kubernetes StatefulSet names its pods ``name-0``,
  ``name-1``), so one image and one config file serve every node (docs/operating.md).
  ``METAQUORUM_UNSAFE_*`` and ``METAQUORUM_TEST_*`` are test switches, not keys; any other
  ``METAQUORUM_`` variable must name a key.
- ``metrics.listener`` (``http://host:port``) serves Prometheus metrics; ``health.listener``
  (``host:port``) serves only the gRPC health service, in plaintext, for probes that cannot
  speak mTLS (Kubernetes' ``grpc`` probe). Both are off unless given.

Every error is a ``ConfigError`` whose message names the key, the bad value and what is allowed.
Defaults are Kafka's (KIP-595 and ``KafkaConfig``), except where the key's comment says otherwise.

Where things are (this module re-exports what the rest of the project imports):

- ``quorum/config_keys.py``: the table of keys, ``NodeConfig``, one field per key with its
  type, default, kind (parser and bounds) and doc; everything else is derived from it;
- ``quorum/config_values.py``: the kinds of value and the parsers of raw values;
- ``quorum/config_rules.py``: the rules between keys, checked on every construction;
- ``quorum/config_load.py``: files, the environment and ``--override``;
- ``quorum/config_types.py``: ``ConfigError``, ``HostPort``, ``Listener`` and constants;
- ``quorum/config_kafka.py``: Kafka's keys that are accepted and ignored;
- ``quorum/config_doc.py``: the table of keys in docs/operating.md, written from the table.
"""

from __future__ import annotations

from quorum.config_keys import KEYS, QUORUM_KEYS, REQUIRED_KEYS, NodeConfig
from quorum.config_load import (
    ENV_PREFIX,
    NODE_ID_FROM_ORDINAL_ENV,
    config_from_settings,
    env_variable,
    load_config,
    parse_override,
)
from quorum.config_types import (
    AUTHORIZERS,
    CLIENT_AUTH_VALUES,
    PLAINTEXT,
    PORT_MAX,
    QUOTA_WINDOWS_MAX,
    ROLE_BROKER,
    ROLE_CONTROLLER,
    ROLES,
    SECURITY_PROTOCOLS,
    SSL,
    STANDARD_AUTHORIZER,
    ConfigError,
    HostPort,
    Listener,
)
from quorum.raft.config import RaftConfig

__all__ = [
    "AUTHORIZERS",
    "CLIENT_AUTH_VALUES",
    "ENV_PREFIX",
    "KEYS",
    "NODE_ID_FROM_ORDINAL_ENV",
    "PLAINTEXT",
    "PORT_MAX",
    "QUORUM_KEYS",
    "QUOTA_WINDOWS_MAX",
    "REQUIRED_KEYS",
    "ROLES",
    "ROLE_BROKER",
    "ROLE_CONTROLLER",
    "SECURITY_PROTOCOLS",
    "SSL",
    "STANDARD_AUTHORIZER",
    "ConfigError",
    "HostPort",
    "Listener",
    "NodeConfig",
    "config_from_settings",
    "env_variable",
    "load_config",
    "parse_override",
    "raft_config",
]


def raft_config(config: NodeConfig) -> RaftConfig:
    """The Raft core's timings from the node's ``controller.quorum.*`` and
    ``metadata.max.idle.interval.ms`` keys."""
    return RaftConfig(
        election_timeout_ms=config.controller_quorum_election_timeout_ms,
        fetch_timeout_ms=config.controller_quorum_fetch_timeout_ms,
        election_backoff_max_ms=config.controller_quorum_election_backoff_max_ms,
        request_timeout_ms=config.controller_quorum_request_timeout_ms,
        append_linger_ms=config.controller_quorum_append_linger_ms,
        idle_interval_ms=config.metadata_max_idle_interval_ms,
        fetch_max_wait_ms=min(500, config.controller_quorum_fetch_timeout_ms // 2),
    )
