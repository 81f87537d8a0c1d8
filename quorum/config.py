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
"""

from __future__ import annotations

import difflib
import os
import re
import socket
import tomllib
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Final

from quorum.config_kafka import NOT_APPLICABLE_KEYS
from quorum.ids import RESERVED_UUIDS, InvalidUuidError, Uuid
from quorum.limits import INT32_MAX, REPLICATION_FACTOR_MAX, TOPIC_PARTITIONS_MAX
from quorum.properties import property_entries
from quorum.raft.config import RaftConfig

ROLE_CONTROLLER: Final = "controller"
ROLE_BROKER: Final = "broker"
ROLES: Final = frozenset({ROLE_CONTROLLER, ROLE_BROKER})

PORT_MAX: Final = 65_535
# The windows a request quota keeps per principal (quota.window.num): each is a few numbers per
# principal in memory. Our choice; Kafka's default is 11 and its users rarely exceed 60.
QUOTA_WINDOWS_MAX: Final = 1_000

# Kafka's security protocols this project speaks (SASL is not supported).
PLAINTEXT: Final = "PLAINTEXT"
SSL: Final = "SSL"
SECURITY_PROTOCOLS: Final = (PLAINTEXT, SSL)
# Kafka's example configs map every protocol name to itself, SASL ones included: accepted in the
# map for listeners this node does not serve.
_SASL_PROTOCOLS: Final = ("SASL_PLAINTEXT", "SASL_SSL")
CLIENT_AUTH_VALUES: Final = ("required", "requested", "none")
# authorizer.class.name: Kafka's KRaft authorizer, deciding from ACLs in the metadata log.
STANDARD_AUTHORIZER: Final = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"
AUTHORIZERS: Final[Mapping[str, str]] = {
    STANDARD_AUTHORIZER: STANDARD_AUTHORIZER,
    "StandardAuthorizer": STANDARD_AUTHORIZER,
    "": "",
}


class ConfigError(ValueError):
    """The configuration is not usable. ``key`` names the offending key when there is one."""

    def __init__(self, message: str, *, key: str | None = None) -> None:
        super().__init__(message)
        self.key = key


@dataclass(frozen=True, slots=True)
class HostPort:
    """A network address. ``host`` is a name or an IP address (IPv6 without brackets)."""

    host: str
    port: int

    def __str__(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{host}:{self.port}"


@dataclass(frozen=True, slots=True)
class Listener:
    """One ``NAME://host:port`` entry of ``listeners``: where this node's gRPC server binds."""

    name: str
    host: str
    port: int
    # Written NAME://:port (Kafka's every-interface form): bound on 0.0.0.0 and advertised
    # under this machine's host name when advertised.listeners does not name it.
    host_omitted: bool = field(default=False, compare=False)

    @property
    def address(self) -> HostPort:
        return HostPort(self.host, self.port)

    def __str__(self) -> str:
        return f"{self.name}://{self.address}"


@dataclass(frozen=True, slots=True)
class NodeConfig:
    """The validated configuration of one node. Field ``a_b_c`` is Kafka's key ``a.b.c``.

    Construct it with ``load_config`` (from a file) or ``config_from_settings`` (from a mapping
    of Kafka names, for tests and the simulator), or directly with typed values: the
    cross-field rules below are checked on construction in every case.
    """

    # The id of this node, unique in the cluster; voters are named by it in
    # controller.quorum.voters. Required.
    node_id: int
    # What this node runs: "controller" (a voter of the metadata quorum), "broker" (an
    # observer that fetches the metadata log and keeps partition directories), or both.
    process_roles: frozenset[str]
    # The static voter set, node id -> address of its listener: voters to elect, brokers and
    # tools to find the leader. Empty when controller.quorum.bootstrap.servers is given instead
    # (a dynamic quorum, KIP-853); one of the two is required.
    controller_quorum_voters: Mapping[int, HostPort]
    # Where this node's gRPC server listens, then, on a broker, its Kafka wire-protocol
    # listeners; Kafka's listener keys pick the served one (see the module docstring).
    listeners: tuple[Listener, ...]
    # The directory of the metadata log (__cluster_metadata-0/, quorum-state, snapshots) and its
    # meta.properties. Kafka's default, the first entry of log.dirs, applies when it is omitted.
    metadata_log_dir: Path
    # The partition directories of a broker, each with its own meta.properties. Required for
    # brokers, usually empty for controllers.
    log_dirs: tuple[Path, ...] = ()
    # The cluster id this node must belong to. Optional: `storage format --cluster-id` writes
    # the id into meta.properties, which is what startup checks against.
    cluster_id: Uuid | None = None
    # KIP-853: controllers to ask for the quorum (host:port each) when the voter set lives in
    # the log (a quorum formatted with --standalone or --initial-controllers). With
    # controller.quorum.voters also given (Kafka's example configs have both), the static
    # voters are the voter set and these are only accepted.
    controller_quorum_bootstrap_servers: tuple[HostPort, ...] = ()
    # Kafka 4.1 (KIP-853 follow-up): a controller that is not a voter adds itself with
    # AddRaftVoter once it has caught up as an observer.
    controller_quorum_auto_join_enable: bool = False
    # T: a voter waits a random time in [T, 2T) without a leader before it starts an election.
    controller_quorum_election_timeout_ms: int = 1_000
    # A follower with no successful Fetch for this long starts an election (check-quorum for
    # the leader is 1.5 times this); BeginQuorumEpoch is re-sent every half of it.
    controller_quorum_fetch_timeout_ms: int = 2_000
    # Cap of the binary exponential backoff between failed elections (base 100 ms).
    controller_quorum_election_backoff_max_ms: int = 1_000
    # How long the leader waits to batch appends before writing them.
    controller_quorum_append_linger_ms: int = 25
    # Deadline of one Raft RPC to another voter.
    controller_quorum_request_timeout_ms: int = 2_000
    # The leader appends a NoOpRecord when nothing was written for this long, so observers can
    # prove they are fresh; 0 disables it (Kafka's meaning).
    metadata_max_idle_interval_ms: int = 500
    # A metadata log segment is rolled once it reaches this size (Kafka: 1 GiB).
    metadata_log_segment_bytes: int = 1_073_741_824
    # A snapshot is written once this many bytes of records were appended since the last one
    # (Kafka: 20 MiB).
    metadata_log_max_record_bytes_between_snapshots: int = 20_971_520
    # A snapshot is also written once this long has passed since the last one, if anything was
    # committed meanwhile (Kafka: 1 hour).
    metadata_log_max_snapshot_interval_ms: int = 3_600_000
    # Snapshots and log kept on disk (Kafka's soft limits): while the log plus the snapshots
    # exceed this many bytes, the oldest snapshot is deleted with the log before the next one.
    # The newest snapshot is always kept; -1 disables the rule (Kafka: 100 MiB).
    metadata_max_retention_bytes: int = 104_857_600
    # ... and while the oldest snapshot's newest record is older than this (Kafka: 7 days; -1
    # disables the rule).
    metadata_max_retention_ms: int = 604_800_000
    # A broker heartbeats the active controller this often.
    broker_heartbeat_interval_ms: int = 2_000
    # A broker that has not heartbeated for this long is fenced.
    broker_session_timeout_ms: int = 9_000
    # A stale partition directory moved to log.dirs/deleting/ is deleted after this long. The
    # seed's "14400 (4 hours)" read as 4 hours, in milliseconds (docs/architecture.md, "Brokers").
    delete_topic_delay_ms: int = 14_400_000
    # Connections open at once on all of a broker's Kafka listeners (docs/kafka-listener.md);
    # past it a new one is closed at once. Kafka's default is unbounded; 500 here, so that with
    # the 4 MiB frame bound at most 2 GiB of requests are held at once.
    max_connections: int = 500
    # ... from one client address. Kafka's default is unbounded; 50 here, a tenth of
    # max.connections, so idle connections from one address can no longer lock every other
    # client out (it takes ten addresses), while an admin client needs one per broker. 0 admits
    # only the hosts of max.connections.per.ip.overrides (Kafka's rule).
    max_connections_per_ip: int = 50
    # Per-address limits that replace max.connections.per.ip: host (name or IP address) ->
    # limit, in Kafka's form "host:count,host:count" (e.g. a NAT gateway many clients share,
    # "10.0.0.1:200"). Names are resolved once, when the listeners open.
    max_connections_per_ip_overrides: Mapping[str, int] = field(default_factory=dict)
    # A Kafka connection with no request for this long is closed (Kafka's default, 10 minutes;
    # Kafka's clients close theirs after 9, so a healthy client never meets it).
    connections_max_idle_ms: int = 600_000
    # The request quota (docs/kafka-listener.md#request-quota): the percentage of one thread's
    # time each principal's requests may take on the Kafka listeners, measured over
    # quota.window.num windows of quota.window.size.seconds; beyond it the answers carry
    # throttle_time_ms and the connection is read again only after that time. Kafka sets
    # request_percentage per user (kafka-configs) and has no default; here it is on, at 50:
    # one principal, however many connections it opens, leaves half of the listeners' thread to
    # everyone else. 100 lets one principal take all of it.
    quota_request_percentage_default: int = 50
    # Kafka's keys and defaults: the windows a quota is measured over, and their length.
    quota_window_num: int = 11
    quota_window_size_seconds: int = 1
    # Listener name -> security protocol (Kafka's key). Secure by default: a listener the map
    # does not name is SSL, not PLAINTEXT as in Kafka (docs/security.md#listeners-and-protocols).
    listener_security_protocol_map: Mapping[str, str] = field(default_factory=dict)
    # Only PEM stores are supported (Kafka also takes JKS and PKCS12).
    ssl_keystore_type: str = "PEM"
    # One PEM file: the node's private key and its certificate chain, leaf first. Re-read when
    # it changes (rotation). It also serves as the node's client certificate towards others.
    ssl_keystore_location: Path | None = None
    # ... or the same PEM text inline: the private key, and the certificate chain.
    ssl_keystore_key: str | None = field(default=None, repr=False)
    ssl_keystore_certificate_chain: str | None = None
    ssl_truststore_type: str = "PEM"
    # The PEM CA bundle that verifies other nodes' and clients' certificates.
    ssl_truststore_location: Path | None = None
    # "required" (default): callers must present a certificate the truststore accepts.
    ssl_client_auth: str = "required"
    # How a certificate's subject becomes a principal: Kafka's RULE:pattern/replacement/[LU]
    # and DEFAULT rules, tried in order (quorum/security/identity.py).
    ssl_principal_mapping_rules: tuple[str, ...] = ("DEFAULT",)
    # Who may do what (docs/authorization.md): Kafka's StandardAuthorizer, deciding from the
    # ACLs in the metadata log, or "" for none (every call allowed, Kafka's meaning).
    authorizer_class_name: str = STANDARD_AUTHORIZER
    # Principals allowed everything, e.g. ["User:CN=admin"] (Kafka: "User:a;User:b").
    super_users: tuple[str, ...] = ()
    # Whether a resource that no ACL names is open to every principal (Kafka's default: no).
    allow_everyone_if_no_acl_found: bool = False
    # Where this node serves Prometheus metrics over HTTP (GET /metrics), e.g.
    # "http://0.0.0.0:9404"; None (the default): no metrics listener. Not a Kafka key: Kafka
    # serves JMX, which the Prometheus JMX exporter turns into the names served here
    # (docs/operating.md#metrics). Port 0 picks a free port (logged as metrics_listening).
    metrics_listener: HostPort | None = None
    # Where this node serves the gRPC health service alone, in plaintext, e.g. "0.0.0.0:9405":
    # for probes that cannot present a client certificate (Kubernetes' grpc probe). Its status
    # is the main listener's: SERVING once a controller knows a leader, once a broker caught
    # up. None (the default): health only on the main listener. Not a Kafka key.
    health_listener: HostPort | None = None
    # The names of the listeners controllers serve (Kafka requires it in KRaft). On a
    # controller the first one that is among `listeners` is the served listener; on a
    # broker-only node none may be among its own listeners (Kafka's rule).
    controller_listener_names: tuple[str, ...] = ()
    # The listener a broker-only node serves when `listeners` has several (Kafka's listener
    # between brokers).
    inter_broker_listener_name: str | None = None
    # The addresses a broker registers (Kafka's advertised.listeners): the entry named like the
    # served listener, else the listener itself. Required for a listener on every interface.
    advertised_listeners: tuple[Listener, ...] = ()
    # The rack a broker registers; CreateTopics places replicas rack-aware.
    broker_rack: str | None = None
    # CreateTopics' defaults when a request leaves them at -1 (Kafka's num.partitions and
    # default.replication.factor, both 1).
    num_partitions: int = 1
    default_replication_factor: int = 1
    # Only false: there is no produce or fetch path here that could create a topic (Kafka's
    # default is true).
    auto_create_topics_enable: bool = False
    # Only true: deleting topics is always enabled (KIP-516's stale-partition flow needs it).
    delete_topic_enable: bool = True
    # The file this config was read from, if any (for messages that tell a person what to edit).
    config_file: Path | None = field(default=None, compare=False)
    # Kafka keys the config held that mean nothing here (quorum/config_kafka.py), sorted; a
    # node warns once at start-up naming them.
    ignored_keys: tuple[str, ...] = field(default=(), compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "controller_quorum_voters", dict(self.controller_quorum_voters))
        object.__setattr__(
            self, "listener_security_protocol_map", dict(self.listener_security_protocol_map)
        )
        object.__setattr__(
            self, "max_connections_per_ip_overrides", dict(self.max_connections_per_ip_overrides)
        )
        _validate(self)

    # ----- views ---------------------------------------------------------------------------

    @property
    def is_controller(self) -> bool:
        return ROLE_CONTROLLER in self.process_roles

    @property
    def is_broker(self) -> bool:
        return ROLE_BROKER in self.process_roles

    @property
    def listener(self) -> Listener:
        """The listener this node serves every gRPC service on (see the module docstring)."""
        return _served_listener(self)

    @property
    def advertised_listener(self) -> Listener:
        """The address a broker registers: its advertised.listeners entry named like the
        served listener; else, for a listener on every interface of a node that is also a
        voter, its address in controller.quorum.voters; else the served listener."""
        served = self.listener
        for advertised in self.advertised_listeners:
            if advertised.name == served.name:
                return advertised
        voter = self.controller_quorum_voters.get(self.node_id)
        if _is_wildcard(served.host) and self.is_controller and voter is not None:
            return Listener(served.name, voter.host, voter.port)
        return _named_host(served)

    @property
    def unserved_listeners(self) -> tuple[Listener, ...]:
        """Listeners of the config that this node does not serve: on a node with the
        controller role, every one but the gRPC listener (a broker-only node serves the others
        as Kafka listeners)."""
        if not self.is_controller:
            return ()
        served = self.listener
        return tuple(listener for listener in self.listeners if listener != served)

    @property
    def listener_protocol(self) -> str:
        """The security protocol of the node's listener: the map's entry, SSL when unnamed."""
        return self.listener_security_protocol_map.get(self.listener.name, SSL)

    @property
    def kafka_listeners(self) -> tuple[Listener, ...]:
        """The broker's Kafka wire-protocol listeners: every entry of ``listeners`` but the
        gRPC one (docs/kafka-listener.md); none on a node with the controller role."""
        if self.is_controller or not self.is_broker:
            return ()
        return tuple(entry for entry in self.listeners if entry != self.listener)

    def protocol_of(self, listener: Listener) -> str:
        """The security protocol of any of this node's listeners (SSL when the map is silent)."""
        return self.listener_security_protocol_map.get(listener.name, SSL)

    def advertised(self, listener: Listener) -> Listener:
        """The address ``listener`` is advertised at (``advertised.listeners``, else itself)."""
        for entry in self.advertised_listeners:
            if entry.name == listener.name:
                return entry
        return _named_host(listener)

    @property
    def voter_ids(self) -> frozenset[int]:
        return frozenset(self.controller_quorum_voters)

    @property
    def dynamic_quorum(self) -> bool:
        """Whether the voter set lives in the log (controller.quorum.bootstrap.servers given
        instead of controller.quorum.voters, KIP-853)."""
        return not self.controller_quorum_voters

    @property
    def data_dirs(self) -> tuple[Path, ...]:
        """Every directory that holds a meta.properties: the metadata log dir, then log.dirs."""
        return tuple(dict.fromkeys((self.metadata_log_dir, *self.log_dirs)))

    def describe_source(self) -> str:
        """How to refer to this config in a message: its file, or a generic phrase."""
        return str(self.config_file) if self.config_file else "the node's configuration"


# ----- keys --------------------------------------------------------------------------------


def _key_name(attribute: str) -> str:
    return attribute.replace("_", ".")


# Kafka name -> NodeConfig attribute, for every key a file may contain.
KEYS: Final[Mapping[str, str]] = {
    _key_name(f.name): f.name
    for f in fields(NodeConfig)
    if f.name not in ("config_file", "ignored_keys")
}
assert not set(KEYS) & set(NOT_APPLICABLE_KEYS), set(KEYS) & set(NOT_APPLICABLE_KEYS)
REQUIRED_KEYS: Final = ("node.id", "process.roles", "listeners")
# At least one of these says where the quorum is (KIP-853); with both, the static voters are
# the voter set and the bootstrap servers only another way to find it.
QUORUM_KEYS: Final = ("controller.quorum.voters", "controller.quorum.bootstrap.servers")

# Lower bounds of the integer keys (all are at most INT32_MAX except the byte sizes).
_INT_MINIMUMS: Final[Mapping[str, int]] = {
    "controller.quorum.election.timeout.ms": 1,
    "controller.quorum.fetch.timeout.ms": 1,
    "controller.quorum.election.backoff.max.ms": 1,
    "controller.quorum.append.linger.ms": 0,
    "controller.quorum.request.timeout.ms": 1,
    "metadata.max.idle.interval.ms": 0,
    "metadata.log.segment.bytes": 1,
    "metadata.log.max.record.bytes.between.snapshots": 1,
    "metadata.log.max.snapshot.interval.ms": 0,
    "metadata.max.retention.bytes": -1,
    "metadata.max.retention.ms": -1,
    "broker.heartbeat.interval.ms": 1,
    "broker.session.timeout.ms": 1,
    "delete.topic.delay.ms": 0,
    "num.partitions": 1,
    "default.replication.factor": 1,
    "max.connections": 1,
    "max.connections.per.ip": 0,
    "connections.max.idle.ms": 1,
    "quota.request.percentage.default": 1,
    "quota.window.num": 1,
    "quota.window.size.seconds": 1,
}
# Upper bounds below INT32_MAX: what CreateTopics accepts itself (quorum/limits.py), a
# percentage of one thread, and the windows a request quota keeps per principal.
_INT_MAXIMUMS: Final[Mapping[str, int]] = {
    "num.partitions": TOPIC_PARTITIONS_MAX,
    "default.replication.factor": REPLICATION_FACTOR_MAX,
    "quota.request.percentage.default": 100,
    "quota.window.num": QUOTA_WINDOWS_MAX,
}
_INT64_KEYS: Final = frozenset(
    {
        "metadata.log.segment.bytes",
        "metadata.log.max.record.bytes.between.snapshots",
        "metadata.log.max.snapshot.interval.ms",
        "metadata.max.retention.bytes",
        "metadata.max.retention.ms",
        "delete.topic.delay.ms",
    }
)
assert set(_INT_MINIMUMS) <= set(KEYS)
assert set(REQUIRED_KEYS) <= set(KEYS)


# ----- validation of typed values ------------------------------------------------------------


def _int_range(key: str) -> tuple[int, int]:
    if key == "node.id":
        return 0, INT32_MAX
    if key in _INT_MAXIMUMS:
        return _INT_MINIMUMS[key], _INT_MAXIMUMS[key]
    return _INT_MINIMUMS[key], (2**63 - 1 if key in _INT64_KEYS else INT32_MAX)


def _validate(config: NodeConfig) -> None:
    for key in ("node.id", *_INT_MINIMUMS):
        minimum, maximum = _int_range(key)
        _check_int(key, getattr(config, KEYS[key]), minimum=minimum, maximum=maximum)

    if not config.process_roles:
        raise ConfigError(
            "process.roles is empty; allowed: 'controller', 'broker', or both",
            key="process.roles",
        )
    unknown_roles = sorted(config.process_roles - ROLES)
    if unknown_roles:
        raise ConfigError(
            f"process.roles: {', '.join(map(repr, unknown_roles))} is not a role; "
            "allowed: 'controller', 'broker', or both",
            key="process.roles",
        )

    voters = config.controller_quorum_voters
    bootstrap = config.controller_quorum_bootstrap_servers
    if not voters and not bootstrap:
        raise ConfigError(
            "controller.quorum.voters is empty; give every controller as id@host:port, "
            "e.g. ['1@127.0.0.1:9093'], or give controller.quorum.bootstrap.servers "
            "(host:port each) for a quorum whose voters are in the log (KIP-853)",
            key="controller.quorum.voters",
        )
    for address in bootstrap:
        _check_port("controller.quorum.bootstrap.servers", address.port, minimum=1)
    for voter_id, address in voters.items():
        _check_int("controller.quorum.voters", voter_id, minimum=0, maximum=INT32_MAX)
        _check_port("controller.quorum.voters", address.port, minimum=1)
    addresses = [str(address) for address in voters.values()]
    shared = sorted({a for a in addresses if addresses.count(a) > 1})
    if shared:
        raise ConfigError(
            f"controller.quorum.voters: two voters share the address {shared[0]}; each voter "
            "needs its own host:port",
            key="controller.quorum.voters",
        )
    voter_list = _format_voters(voters)
    if config.is_controller and voters and config.node_id not in voters:
        raise ConfigError(
            f"node.id {config.node_id} is not among controller.quorum.voters ({voter_list}); "
            "a node whose process.roles includes 'controller' must be one of the voters: fix "
            "node.id or add the node to controller.quorum.voters",
            key="node.id",
        )
    if not config.is_controller and config.node_id in voters:
        raise ConfigError(
            f"node.id {config.node_id} is among controller.quorum.voters ({voter_list}) but "
            "process.roles has no 'controller'; a broker-only node must not be a voter: give it "
            "another node.id or add 'controller' to process.roles",
            key="node.id",
        )

    _validate_listeners(config)

    if config.is_broker and not config.log_dirs:
        raise ConfigError(
            "log.dirs is required when process.roles includes 'broker': give the directories "
            "that hold the broker's partitions, e.g. ['/var/lib/metaquorum/data']",
            key="log.dirs",
        )
    duplicates = sorted({str(d) for d in config.log_dirs if config.log_dirs.count(d) > 1})
    if duplicates:
        raise ConfigError(
            f"log.dirs: {', '.join(duplicates)} is listed more than once; each directory may "
            "appear once",
            key="log.dirs",
        )

    if config.cluster_id is not None and config.cluster_id in RESERVED_UUIDS:
        raise ConfigError(
            f"cluster.id: {config.cluster_id} is reserved; allowed: any other id, e.g. one from "
            "`metaquorum storage random-uuid`",
            key="cluster.id",
        )

    _validate_security(config)
    _validate_side_listeners(config)

    for host, limit in config.max_connections_per_ip_overrides.items():
        _check_int(
            f"max.connections.per.ip.overrides ({host})", limit, minimum=0, maximum=INT32_MAX
        )
    if config.max_connections_per_ip == 0 and not config.max_connections_per_ip_overrides:
        raise ConfigError(
            "max.connections.per.ip is 0 but max.connections.per.ip.overrides names no host, so "
            "no client could connect to a Kafka listener; allowed: 0 only with overrides "
            "(Kafka's rule), else at least 1",
            key="max.connections.per.ip",
        )

    if config.broker_session_timeout_ms <= config.broker_heartbeat_interval_ms:
        raise ConfigError(
            f"broker.session.timeout.ms ({config.broker_session_timeout_ms}) must be greater "
            f"than broker.heartbeat.interval.ms ({config.broker_heartbeat_interval_ms}), or a "
            "healthy broker is fenced between two heartbeats",
            key="broker.session.timeout.ms",
        )


def _validate_listeners(config: NodeConfig) -> None:
    """``listeners`` and Kafka's keys that name listeners (see the module docstring)."""
    if not config.listeners:
        raise ConfigError(
            "listeners is empty; give this node's gRPC address, e.g. 'CONTROLLER://127.0.0.1:9093'",
            key="listeners",
        )
    names = [listener.name for listener in config.listeners]
    for listener in (*config.listeners, *config.advertised_listeners):
        key = "listeners" if listener in config.listeners else "advertised.listeners"
        if not _LISTENER_NAME_RE.fullmatch(listener.name):
            raise ConfigError(
                f"{key}: {listener.name!r} is not a listener name; allowed: letters, digits "
                "and '_', not starting with a digit, e.g. 'CONTROLLER'",
                key=key,
            )
        _check_port(key, listener.port, minimum=0 if key == "listeners" else 1)
    repeated = sorted({name for name in names if names.count(name) > 1})
    if repeated:
        raise ConfigError(
            f"listeners: the listener name {repeated[0]} is used twice; each listener needs its "
            "own name",
            key="listeners",
        )
    listed = ", ".join(str(listener) for listener in config.listeners)
    controller_names = config.controller_listener_names
    if (
        config.is_controller
        and controller_names
        and not any(name in names for name in controller_names)
    ):
        raise ConfigError(
            f"controller.listener.names ({', '.join(controller_names)}) names none of the "
            f"listeners ({listed}); a controller serves the first of them that is in "
            "listeners: add it there, or fix the name",
            key="controller.listener.names",
        )
    if not config.is_controller:
        own = sorted(set(controller_names) & set(names))
        if own:
            raise ConfigError(
                f"controller.listener.names names {', '.join(own)}, a listener of this "
                "broker-only node; in KRaft a broker must not listen on a controller listener "
                "(Kafka's rule): remove it from listeners",
                key="controller.listener.names",
            )
    if (
        config.inter_broker_listener_name is not None
        and config.is_broker
        and config.inter_broker_listener_name not in names
    ):
        raise ConfigError(
            f"inter.broker.listener.name {config.inter_broker_listener_name!r} is not a "
            f"listener of this node ({listed}); allowed: one of {', '.join(names)}",
            key="inter.broker.listener.name",
        )
    ports = [listener.port for listener in config.listeners if listener.port != 0]
    if len(set(ports)) != len(ports):
        raise ConfigError(
            f"listeners: two listeners share a port ({listed}); each needs its own",
            key="listeners",
        )
    for advertised in config.advertised_listeners:
        if advertised.name not in names:
            raise ConfigError(
                f"advertised.listeners: {advertised.name!r} is not one of this node's listeners "
                f"({listed}); advertise only listeners it has",
                key="advertised.listeners",
            )
    for advertised in config.advertised_listeners:
        if _is_wildcard(advertised.host):
            raise ConfigError(
                f"advertised.listeners: {advertised} is not an address others can reach; give "
                "the host name or IP address clients should use",
                key="advertised.listeners",
            )
    if config.is_broker and _is_wildcard(config.advertised_listener.host):
        raise ConfigError(
            f"listeners: {config.listener} listens on every interface, so the broker needs the "
            f"address to register: add {config.listener.name}://<host>:{config.listener.port} "
            f"to advertised.listeners, or write {config.listener.name}://:"
            f"{config.listener.port} to register this machine's host name (Kafka's rule)",
            key="advertised.listeners",
        )


def _served_listener(config: NodeConfig) -> Listener:
    """The gRPC listener: the first of controller.listener.names on a controller, else
    inter.broker.listener.name on a broker-only node, else the first entry (checked by
    ``_validate_listeners``: a name given is among the listeners)."""
    listeners = config.listeners
    by_name = {listener.name: listener for listener in listeners}
    if config.is_controller:
        for name in config.controller_listener_names:
            if name in by_name:
                return by_name[name]
    elif config.inter_broker_listener_name in by_name:
        return by_name[config.inter_broker_listener_name]
    return listeners[0]


def _named_host(listener: Listener) -> Listener:
    """A listener with an empty host (``NAME://:port``: every interface) is advertised under
    this machine's host name, as Kafka does; ``0.0.0.0`` and ``::`` are not addresses others
    can use and need ``advertised.listeners``."""
    if not listener.host_omitted:
        return listener
    return Listener(listener.name, socket.getfqdn(), listener.port)


def _is_wildcard(host: str) -> bool:
    return host in ("", "0.0.0.0", "::")


def _validate_security(config: NodeConfig) -> None:
    """The values of the ssl.* keys; whether an SSL listener has its files is checked at
    start-up (quorum/security/tls.py), so `storage format` needs no certificates."""
    for name, protocol in config.listener_security_protocol_map.items():
        if not _LISTENER_NAME_RE.fullmatch(name):
            raise ConfigError(
                f"listener.security.protocol.map: {name!r} is not a listener name; allowed: "
                "letters, digits and '_', e.g. 'CONTROLLER:SSL'",
                key="listener.security.protocol.map",
            )
        served = name == config.listener.name
        if protocol not in SECURITY_PROTOCOLS and (served or protocol not in _SASL_PROTOCOLS):
            raise ConfigError(
                f"listener.security.protocol.map: {name}:{protocol} is not supported"
                f"{' for the listener this node serves' if served else ''}; allowed "
                f"protocols: {', '.join(SECURITY_PROTOCOLS)} (SASL is not supported)",
                key="listener.security.protocol.map",
            )
    for key in ("ssl.keystore.type", "ssl.truststore.type"):
        value = getattr(config, KEYS[key])
        if value != "PEM":
            raise ConfigError(
                f"{key}: {value!r} is not supported; allowed: 'PEM' (a JKS or PKCS12 store "
                "converts with keytool or openssl; `metaquorum dev certs` writes PEM)",
                key=key,
            )
    if config.ssl_client_auth not in CLIENT_AUTH_VALUES:
        raise ConfigError(
            f"ssl.client.auth: {config.ssl_client_auth!r} is not allowed; allowed: "
            f"{', '.join(map(repr, CLIENT_AUTH_VALUES))}",
            key="ssl.client.auth",
        )
    inline = (config.ssl_keystore_key, config.ssl_keystore_certificate_chain)
    if config.ssl_keystore_location is not None and any(v is not None for v in inline):
        raise ConfigError(
            "give either ssl.keystore.location or ssl.keystore.key with "
            "ssl.keystore.certificate.chain, not both",
            key="ssl.keystore.location",
        )
    if (inline[0] is None) != (inline[1] is None):
        raise ConfigError(
            "ssl.keystore.key and ssl.keystore.certificate.chain go together: give both, or "
            "ssl.keystore.location",
            key="ssl.keystore.key",
        )
    if not config.ssl_principal_mapping_rules:
        raise ConfigError(
            "ssl.principal.mapping.rules is empty; allowed: Kafka's rules, e.g. 'DEFAULT'",
            key="ssl.principal.mapping.rules",
        )


def _validate_side_listeners(config: NodeConfig) -> None:
    """metrics.listener and health.listener: valid ports, distinct from each other and from
    the main listener when on the same host (one of them could not bind)."""
    taken = {("listeners", config.listener.host, config.listener.port)}
    for key in ("metrics.listener", "health.listener"):
        address: HostPort | None = getattr(config, KEYS[key])
        if address is None:
            continue
        _check_port(key, address.port, minimum=0)
        for other, host, port in taken:
            same_host = host == address.host or "0.0.0.0" in (host, address.host)
            if port != 0 and port == address.port and same_host:
                raise ConfigError(
                    f"{key}: port {address.port} is already {other}'s on {host}; give it a "
                    "port of its own",
                    key=key,
                )
        taken.add((key, address.host, address.port))


def _check_int(key: str, value: object, *, minimum: int, maximum: int) -> None:
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


def _check_port(key: str, port: int, *, minimum: int) -> None:
    if not minimum <= port <= PORT_MAX:
        raise ConfigError(
            f"{key}: port {port} is out of range; allowed: {minimum} to {PORT_MAX}", key=key
        )


def _format_voters(voters: Mapping[int, HostPort]) -> str:
    return ", ".join(f"{voter_id}@{address}" for voter_id, address in sorted(voters.items()))


# ----- parsing raw values (TOML or override text) into typed values ------------------------------

_LISTENER_NAME_RE: Final = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_INT_TEXT_RE: Final = re.compile(r"[+-]?[0-9]+")
_VOTER_RE: Final = re.compile(r"(?P<id>[^@]*)@(?P<address>.*)")
_LISTENER_RE: Final = re.compile(r"(?P<name>[^:/]*)://(?P<address>.*)")
_HOST_PORT_RE: Final = re.compile(r"(?:\[(?P<ipv6>[^\]]+)\]|(?P<host>[^:\[\]]+)):(?P<port>[0-9]+)")


@dataclass(frozen=True, slots=True)
class _Setting:
    """One raw value, with where it came from (for messages) and what relative paths mean."""

    value: object
    source: str
    base_dir: Path
    from_override: bool = False


def _parse_int(key: str, value: object) -> int:
    if isinstance(value, str) and _INT_TEXT_RE.fullmatch(value.strip()):
        return int(value.strip())
    if isinstance(value, bool) or not isinstance(value, int):
        minimum, maximum = _int_range(key)
        raise ConfigError(
            f"{key}: {value!r} is not an integer; allowed: an integer from {minimum} to {maximum}",
            key=key,
        )
    return value


def _parse_str_list(key: str, value: object, example: str) -> tuple[str, ...]:
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


def _parse_host_port(key: str, entry: str, text: str, example: str) -> HostPort:
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


def _parse_roles(key: str, value: object) -> frozenset[str]:
    roles = _parse_str_list(key, value, "['controller'] or 'broker,controller'")
    for role in roles:
        if role not in ROLES:
            hint = _suggestion(role, ROLES)
            raise ConfigError(
                f"{key}: {role!r} is not a role{hint}; allowed: 'controller', 'broker', or both",
                key=key,
            )
    if len(set(roles)) != len(roles):
        raise ConfigError(f"{key}: {value!r} lists a role twice; give each role once", key=key)
    return frozenset(roles)


def _parse_voters(key: str, value: object) -> dict[int, HostPort]:
    example = "'1@127.0.0.1:9093'"
    voters: dict[int, HostPort] = {}
    for entry in _parse_str_list(key, value, f"[{example}, '2@127.0.0.1:9094']"):
        match = _VOTER_RE.fullmatch(entry)
        if match is None or not _INT_TEXT_RE.fullmatch(match.group("id")):
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
        voters[voter_id] = _parse_host_port(key, entry, match.group("address"), example)
    return voters


def _parse_listeners(key: str, value: object) -> tuple[Listener, ...]:
    example = "'CONTROLLER://127.0.0.1:9093'"
    listeners: list[Listener] = []
    for entry in _parse_str_list(key, value, f"[{example}]"):
        match = _LISTENER_RE.fullmatch(entry)
        if match is None or not match.group("name"):
            raise ConfigError(
                f"{key}: {entry!r} is not of the form NAME://host:port, e.g. {example}", key=key
            )
        text = match.group("address")
        omitted = text.startswith(":") and key == "listeners"
        if omitted:
            text = "0.0.0.0" + text  # Kafka's NAME://:port: every interface
        address = _parse_host_port(key, entry, text, example)
        listeners.append(Listener(match.group("name"), address.host, address.port, omitted))
    return tuple(listeners)


def _parse_metrics_listener(key: str, value: object) -> HostPort:
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
    return _parse_host_port(key, text, rest.rstrip("/"), example)


def _parse_connection_overrides(key: str, value: object) -> dict[str, int]:
    """Kafka's ``host:count,host:count`` (or a TOML array of ``host:count``); the count after
    the last colon, so an IPv6 address may be written bare or in brackets."""
    example = "'10.0.0.1:200,gateway.example:100'"
    overrides: dict[str, int] = {}
    for entry in _parse_str_list(key, value, example):
        host, sep, count = entry.rpartition(":")
        host = host.strip().removeprefix("[").removesuffix("]")
        if not sep or not host or not _INT_TEXT_RE.fullmatch(count.strip()):
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


def _parse_health_listener(key: str, value: object) -> HostPort:
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
    return _parse_host_port(key, text, text, example)


def _parse_path(key: str, value: object, base_dir: Path) -> Path:
    if not isinstance(value, str) or not value.strip():
        raise ConfigError(
            f"{key}: {value!r} is not a path; allowed: a non-empty string, relative to the "
            "config file's directory or absolute",
            key=key,
        )
    path = Path(value).expanduser()
    return (path if path.is_absolute() else base_dir / path).resolve()


def _parse_paths(key: str, setting: _Setting) -> tuple[Path, ...]:
    entries = _parse_str_list(key, setting.value, "['/var/lib/metaquorum/data']")
    return tuple(_parse_path(key, entry, setting.base_dir) for entry in entries)


def _parse_cluster_id(key: str, value: object) -> Uuid:
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


def _parse_protocol_map(key: str, value: object) -> dict[str, str]:
    example = "['CONTROLLER:SSL', 'BROKER:SSL']"
    result: dict[str, str] = {}
    for entry in _parse_str_list(key, value, example):
        name, sep, protocol = entry.partition(":")
        if not sep or not name.strip() or not protocol.strip():
            raise ConfigError(
                f"{key}: {entry!r} is not of the form NAME:PROTOCOL, e.g. {example}", key=key
            )
        if name.strip() in result:
            raise ConfigError(f"{key}: listener {name.strip()!r} is mapped twice", key=key)
        result[name.strip()] = protocol.strip().upper()
    return result


def _parse_text(key: str, value: object, *, upper: bool = False, lower: bool = False) -> str:
    if not isinstance(value, str) or not value.strip():
        raise ConfigError(f"{key}: {value!r} is not a non-empty string", key=key)
    text = value.strip()
    return text.upper() if upper else text.lower() if lower else text


def _parse_authorizer(key: str, value: object) -> str:
    if not isinstance(value, str) or value.strip() not in AUTHORIZERS:
        raise ConfigError(
            f"{key}: {value!r} is not an authorizer this node has; allowed: "
            f"{STANDARD_AUTHORIZER!r} (ACLs in the metadata log) or '' (none: every call "
            "allowed)",
            key=key,
        )
    return AUTHORIZERS[value.strip()]


def _parse_super_users(key: str, value: object) -> tuple[str, ...]:
    if isinstance(value, str):  # Kafka's form: User:a;User:b
        value = [v for v in value.split(";") if v.strip()]
    users = _parse_str_list(key, value, "['User:CN=admin'] or 'User:CN=admin;User:CN=ops'")
    for user in users:
        kind, _, name = user.partition(":")
        if kind != "User" or not name:
            raise ConfigError(
                f"{key}: {user!r} is not a principal; allowed: 'User:<name>', e.g. 'User:CN=admin'",
                key=key,
            )
    return users


def _parse_names(key: str, value: object) -> tuple[str, ...]:
    names = _parse_str_list(key, value, "['CONTROLLER'] or 'CONTROLLER'")
    for name in names:
        if not _LISTENER_NAME_RE.fullmatch(name):
            raise ConfigError(
                f"{key}: {name!r} is not a listener name; allowed: letters, digits and '_', "
                "not starting with a digit, e.g. 'CONTROLLER'",
                key=key,
            )
    return names


def _parse_bootstrap_servers(key: str, value: object) -> tuple[HostPort, ...]:
    example = "'127.0.0.1:9093'"
    return tuple(
        _parse_host_port(key, entry, entry, example)
        for entry in _parse_str_list(key, value, f"[{example}] or 'host1:9093,host2:9093'")
    )


def _parse_only(key: str, value: object, allowed: bool, why: str) -> bool:
    """A boolean key of Kafka's of which only one value is supported here."""
    parsed = _parse_bool(key, value)
    if parsed != allowed:
        raise ConfigError(
            f"{key}={str(parsed).lower()} is not supported: {why}; set it to "
            f"{str(allowed).lower()} or leave it out",
            key=key,
        )
    return parsed


def _parse_bool(key: str, value: object) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in ("true", "false"):
        return value.strip().lower() == "true"
    raise ConfigError(f"{key}: {value!r} is not a boolean; allowed: true or false", key=key)


def _parse_mapping_rules(key: str, value: object) -> tuple[str, ...]:
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


def _suggestion(word: str, choices: Iterable[str]) -> str:
    close = difflib.get_close_matches(word, list(choices), n=1, cutoff=0.6)
    return f" (did you mean {close[0]!r}?)" if close else ""


# ----- building a NodeConfig from settings -------------------------------------------------------


def _build(settings: Mapping[str, _Setting], config_file: Path | None) -> NodeConfig:
    ignored: list[str] = []
    for key, setting in settings.items():
        if key in NOT_APPLICABLE_KEYS:
            ignored.append(key)
        elif key not in KEYS:
            known = [*KEYS, *NOT_APPLICABLE_KEYS]
            raise ConfigError(
                f"unknown config key {key!r} in {setting.source}{_suggestion(key, known)}; "
                f"known keys: {', '.join(sorted(KEYS))} (and Kafka keys that are accepted but "
                "mean nothing here: quorum/config_kafka.py)",
                key=key,
            )
    for key in REQUIRED_KEYS:
        if key not in settings:
            raise ConfigError(f"{key} is required but missing; {_REQUIRED_HELP[key]}", key=key)
    if not any(key in settings for key in QUORUM_KEYS):
        raise ConfigError(
            "controller.quorum.voters is required but missing; "
            f"{_REQUIRED_HELP['controller.quorum.voters']} (or give "
            "controller.quorum.bootstrap.servers for a quorum whose voters are in the log)",
            key="controller.quorum.voters",
        )

    parsed: dict[str, object] = {}
    for key, setting in settings.items():
        if key in NOT_APPLICABLE_KEYS:
            continue
        try:
            parsed[KEYS[key]] = _parse_one(key, setting)
        except ConfigError as exc:
            if not setting.from_override:
                raise
            raise ConfigError(f"{exc} (from {setting.source})", key=key) from None

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
    )


_REQUIRED_HELP: Final[Mapping[str, str]] = {
    "controller.quorum.voters": "give every controller as id@host:port, e.g. ['1@127.0.0.1:9093']",
    "node.id": "give this node's integer id, e.g. 1",
    "process.roles": "allowed: ['controller'], ['broker'] or ['broker', 'controller']",
    "listeners": "give this node's gRPC address, e.g. ['CONTROLLER://127.0.0.1:9093']",
}
assert set(_REQUIRED_HELP) == {*REQUIRED_KEYS, "controller.quorum.voters"}

_PARSERS: Final[Mapping[str, Callable[[str, _Setting], object]]] = {
    "node.id": lambda key, s: _parse_int(key, s.value),
    "process.roles": lambda key, s: _parse_roles(key, s.value),
    "controller.quorum.voters": lambda key, s: _parse_voters(key, s.value),
    "controller.quorum.bootstrap.servers": lambda key, s: _parse_bootstrap_servers(key, s.value),
    "controller.quorum.auto.join.enable": lambda key, s: _parse_bool(key, s.value),
    "listeners": lambda key, s: _parse_listeners(key, s.value),
    "advertised.listeners": lambda key, s: _parse_listeners(key, s.value),
    "metadata.log.dir": lambda key, s: _parse_path(key, s.value, s.base_dir),
    "log.dirs": _parse_paths,
    "cluster.id": lambda key, s: _parse_cluster_id(key, s.value),
    "listener.security.protocol.map": lambda key, s: _parse_protocol_map(key, s.value),
    "ssl.keystore.type": lambda key, s: _parse_text(key, s.value, upper=True),
    "ssl.keystore.location": lambda key, s: _parse_path(key, s.value, s.base_dir),
    "ssl.keystore.key": lambda key, s: _parse_text(key, s.value),
    "ssl.keystore.certificate.chain": lambda key, s: _parse_text(key, s.value),
    "ssl.truststore.type": lambda key, s: _parse_text(key, s.value, upper=True),
    "ssl.truststore.location": lambda key, s: _parse_path(key, s.value, s.base_dir),
    "ssl.client.auth": lambda key, s: _parse_text(key, s.value, lower=True),
    "ssl.principal.mapping.rules": lambda key, s: _parse_mapping_rules(key, s.value),
    "authorizer.class.name": lambda key, s: _parse_authorizer(key, s.value),
    "super.users": lambda key, s: _parse_super_users(key, s.value),
    "allow.everyone.if.no.acl.found": lambda key, s: _parse_bool(key, s.value),
    "metrics.listener": lambda key, s: _parse_metrics_listener(key, s.value),
    "health.listener": lambda key, s: _parse_health_listener(key, s.value),
    "max.connections.per.ip.overrides": lambda key, s: _parse_connection_overrides(key, s.value),
    "controller.listener.names": lambda key, s: _parse_names(key, s.value),
    "inter.broker.listener.name": lambda key, s: (
        _parse_names(key, [s.value])[0] if isinstance(s.value, str) else _parse_text(key, s.value)
    ),
    "broker.rack": lambda key, s: _parse_text(key, s.value),
    "auto.create.topics.enable": lambda key, s: _parse_only(
        key,
        s.value,
        False,
        "topics are created only by CreateTopics (there is no produce or metadata request here "
        "that could create one)",
    ),
    "delete.topic.enable": lambda key, s: _parse_only(
        key,
        s.value,
        True,
        "deleting topics is always enabled here (a deleted topic's id is what brokers reconcile "
        "against)",
    ),
    **{key: (lambda key, s: _parse_int(key, s.value)) for key in _INT_MINIMUMS},
}
assert set(_PARSERS) == set(KEYS), set(KEYS) ^ set(_PARSERS)


def _parse_one(key: str, setting: _Setting) -> object:
    return _PARSERS[key](key, setting)


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


# ----- public entry points ---------------------------------------------------------------------


# Keys whose value is always text: an override such as cluster.id=1234567890123456789012 or
# metadata.log.dir=2024-01-01 stays a string even though TOML would read a number or a date.
_TEXT_KEYS: Final = frozenset(
    {
        "cluster.id",
        "metadata.log.dir",
        "ssl.keystore.location",
        "ssl.truststore.location",
        "ssl.keystore.type",
        "ssl.truststore.type",
        "ssl.client.auth",
        "ssl.principal.mapping.rules",
        "authorizer.class.name",
        "super.users",
        "metrics.listener",
        "health.listener",
        "inter.broker.listener.name",
        "broker.rack",
        "max.connections.per.ip.overrides",
    }
)


def parse_override(text: str) -> tuple[str, object]:
    """Split ``key=value``; the value is a TOML value if it parses as one, else a string.

    For keys that only take text (cluster.id, metadata.log.dir) a value that TOML reads as
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
    if key in _TEXT_KEYS and not isinstance(value, str):
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


# Environment variables (see the module docstring).
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
            hint = _suggestion(name, [*by_variable, NODE_ID_FROM_ORDINAL_ENV])
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
    if not _INT_TEXT_RE.fullmatch(base_text) or int(base_text) < 0:
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
