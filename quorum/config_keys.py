"""The table of configuration keys: ``NodeConfig``, one field per key, as Kafka's ``ConfigDef``
defines each key once with its type, default, validator and documentation.

A row of the table is one field::

    # The rationale, where the key's line of doc cannot hold it.
    controller_quorum_fetch_timeout_ms: int = field(
        default=2_000, metadata=key(integer(1), "a follower without a Fetch for this long ...")
    )

- the Kafka name is the field's name with ``.`` for ``_`` (``controller.quorum.fetch.timeout.ms``);
- the Python type is the field's annotation, the default its default (no default: the
  constructor requires it);
- ``key(kind, doc, ...)`` gives the rest: the ``Kind`` that parses and bounds a raw value
  (``quorum/config_values.py``), one line of doc for the table in docs/operating.md, and whether
  a file must give the key (``required``, with the hint of the error when it is missing).

Everything else is derived from these fields: the Kafka names (``KEYS``), the required ones,
parsing from TOML, ``.properties``, ``--override`` and the environment (``quorum/config_load.py``),
the unknown-key suggestions, each key's environment variable, the check of every integer's
bounds on construction, and the table in docs/operating.md (``python -m quorum.config_doc``).
Rules that involve several keys are in ``quorum/config_rules.py``.

To add a key: add a field here with its ``key(...)``; if it relates to other keys, add its rule
to ``quorum/config_rules.py``; then run ``python -m quorum.config_doc --write``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Final

from quorum.config_kafka import NOT_APPLICABLE_KEYS
from quorum.config_rules import advertised_listener, named_host, served_listener, validate
from quorum.config_types import (
    QUOTA_WINDOWS_MAX,
    ROLE_BROKER,
    ROLE_CONTROLLER,
    SSL,
    STANDARD_AUTHORIZER,
    HostPort,
    Listener,
)
from quorum.config_values import (
    INT64_MAX,
    KEY_METADATA,
    KeySpec,
    boolean,
    integer,
    key,
    key_name,
    parse_authorizer,
    parse_bootstrap_servers,
    parse_cluster_id,
    parse_connection_overrides,
    parse_health_listener,
    parse_listener_name,
    parse_listeners,
    parse_mapping_rules,
    parse_metrics_listener,
    parse_names,
    parse_protocol_map,
    parse_roles,
    parse_super_users,
    parse_voters,
    parsed,
    path,
    paths,
    text,
)
from quorum.ids import Uuid
from quorum.limits import INT32_MAX, REPLICATION_FACTOR_MAX, TOPIC_PARTITIONS_MAX


@dataclass(frozen=True, slots=True)
class NodeConfig:
    """The validated configuration of one node. Field ``a_b_c`` is Kafka's key ``a.b.c``.

    Construct it with ``load_config`` (from a file) or ``config_from_settings`` (from a mapping
    of Kafka names, for tests and the simulator), or directly with typed values: each key's
    bounds and the rules between keys are checked on construction in every case.
    """

    node_id: int = field(
        metadata=key(
            integer(0),
            "this node's id, unique in the cluster; `controller.quorum.voters` names voters by it",
            required=True,
            missing="give this node's integer id, e.g. 1",
        )
    )
    process_roles: frozenset[str] = field(
        metadata=key(
            parsed(parse_roles, "`controller`, `broker`, or both"),
            "what the node runs: a voter of the metadata quorum, a broker (an observer of it "
            "that keeps partition directories), or both",
            required=True,
            missing="allowed: ['controller'], ['broker'] or ['broker', 'controller']",
        )
    )
    # Empty when controller.quorum.bootstrap.servers is given instead (a dynamic quorum,
    # KIP-853); one of the two is required (quorum/config_load.py).
    controller_quorum_voters: Mapping[int, HostPort] = field(
        metadata=key(
            parsed(parse_voters, "a list of `id@host:port`"),
            "the static voter set: each controller's id and listener, for voters to elect and "
            "for brokers and tools to find the leader",
            missing="give every controller as id@host:port, e.g. ['1@127.0.0.1:9093']",
            default_doc="required, or `controller.quorum.bootstrap.servers`",
        )
    )
    # One gRPC port per node; Kafka's listener keys pick the served entry when there are
    # several (quorum/config.py's docstring).
    listeners: tuple[Listener, ...] = field(
        metadata=key(
            parsed(parse_listeners, "a list of `NAME://host:port`"),
            "the gRPC listener serving every service of the node; on a broker, Kafka "
            "listeners after it",
            required=True,
            missing="give this node's gRPC address, e.g. ['CONTROLLER://127.0.0.1:9093']",
        )
    )
    # Kafka's default, the first entry of log.dirs, applies when it is omitted.
    metadata_log_dir: Path = field(
        metadata=key(
            path(),
            "the metadata log's directory: `__cluster_metadata-0/`, `quorum-state`, "
            "snapshots and `meta.properties`",
            default_doc="the first of `log.dirs`",
        )
    )
    log_dirs: tuple[Path, ...] = field(
        default=(),
        metadata=key(
            paths(),
            "a broker's partition directories, each with its own `meta.properties`",
            default_doc="none (required on a broker)",
        ),
    )
    # Optional: `storage format --cluster-id` writes the id into meta.properties, which is
    # what start-up checks against.
    cluster_id: Uuid | None = field(
        default=None,
        metadata=key(
            parsed(parse_cluster_id, "a Uuid", literal=True),
            "the cluster this node must belong to",
        ),
    )
    # With controller.quorum.voters also given (Kafka's example configs have both), the static
    # voters are the voter set and these are only accepted.
    controller_quorum_bootstrap_servers: tuple[HostPort, ...] = field(
        default=(),
        metadata=key(
            parsed(parse_bootstrap_servers, "a list of `host:port`"),
            "controllers to ask for a quorum whose voter set is in the log (KIP-853: "
            "formatted with `--standalone` or `--initial-controllers`)",
        ),
    )
    # Kafka 4.1 (a KIP-853 follow-up).
    controller_quorum_auto_join_enable: bool = field(
        default=False,
        metadata=key(
            boolean(), "a controller that is not a voter adds itself once it has caught up"
        ),
    )
    controller_quorum_election_timeout_ms: int = field(
        default=1_000,
        metadata=key(
            integer(1), "T: a voter without a leader starts an election after a random [T, 2T)"
        ),
    )
    controller_quorum_fetch_timeout_ms: int = field(
        default=2_000,
        metadata=key(
            integer(1),
            "a follower without a successful Fetch for this long starts an election; a leader "
            "checks its quorum every 1.5 times this and re-sends BeginQuorumEpoch every half",
        ),
    )
    # The backoff's base is 100 ms.
    controller_quorum_election_backoff_max_ms: int = field(
        default=1_000,
        metadata=key(integer(1), "cap of the exponential backoff between failed elections"),
    )
    controller_quorum_append_linger_ms: int = field(
        default=25,
        metadata=key(integer(0), "how long the leader waits to batch appends before writing them"),
    )
    controller_quorum_request_timeout_ms: int = field(
        default=2_000, metadata=key(integer(1), "deadline of one Raft RPC to another voter")
    )
    # So that observers can prove they are fresh (Kafka's meaning of 0 too).
    metadata_max_idle_interval_ms: int = field(
        default=500,
        metadata=key(
            integer(0), "the leader appends a NoOpRecord after this long without writes; 0: never"
        ),
    )
    # The sizes and intervals of the metadata log are Kafka's defaults (1 GiB, 20 MiB, 1 hour,
    # 100 MiB, 7 days) and Kafka's long keys.
    metadata_log_segment_bytes: int = field(
        default=1_073_741_824,
        metadata=key(integer(1, INT64_MAX), "a metadata log segment is rolled at this size"),
    )
    metadata_log_max_record_bytes_between_snapshots: int = field(
        default=20_971_520,
        metadata=key(
            integer(1, INT64_MAX),
            "a snapshot is written once this many bytes of records were added",
        ),
    )
    metadata_log_max_snapshot_interval_ms: int = field(
        default=3_600_000,
        metadata=key(
            integer(0, INT64_MAX),
            "... or once this long has passed since the last, if anything was committed",
        ),
    )
    # Kafka's soft limits: the oldest snapshot goes with the log before it while either holds;
    # the newest snapshot is always kept.
    metadata_max_retention_bytes: int = field(
        default=104_857_600,
        metadata=key(
            integer(-1, INT64_MAX), "log and snapshots kept on disk beyond the newest; -1: no limit"
        ),
    )
    metadata_max_retention_ms: int = field(
        default=604_800_000,
        metadata=key(
            integer(-1, INT64_MAX),
            "age of the newest record of the oldest snapshot kept; -1: no limit",
        ),
    )
    broker_heartbeat_interval_ms: int = field(
        default=2_000,
        metadata=key(integer(1), "a broker heartbeats the active controller this often"),
    )
    broker_session_timeout_ms: int = field(
        default=9_000,
        metadata=key(integer(1), "a broker that has not heartbeated for this long is fenced"),
    )
    # Replication of partition data between brokers (docs/replication.md), Kafka's defaults.
    replica_lag_time_max_ms: int = field(
        default=30_000,
        metadata=key(
            integer(1, INT32_MAX),
            "a follower not caught up with its leader for this long leaves the ISR",
        ),
    )
    replica_fetch_wait_max_ms: int = field(
        default=500,
        metadata=key(
            integer(0, INT32_MAX), "how long a follower's Fetch waits at the leader for records"
        ),
    )
    replica_fetch_max_bytes: int = field(
        default=1_048_576,
        metadata=key(integer(1, INT32_MAX), "a follower fetches at most this much per partition"),
    )
    replica_fetch_response_max_bytes: int = field(
        default=10_485_760,
        metadata=key(integer(1, INT32_MAX), "a follower fetches at most this much per Fetch"),
    )
    replica_fetch_backoff_ms: int = field(
        default=1_000,
        metadata=key(
            integer(0, INT32_MAX), "how long a follower waits after its leader refused a Fetch"
        ),
    )
    # KIP-227's leader-side cache of incremental fetch sessions, Kafka's name and default.
    max_incremental_fetch_session_cache_slots: int = field(
        default=1_000,
        metadata=key(
            integer(0, INT32_MAX),
            "incremental fetch sessions a broker keeps (0: none; clients send full fetches)",
        ),
    )
    # The seed's "14400 (4 hours)" read as 4 hours, in milliseconds (docs/architecture.md,
    # "Brokers").
    delete_topic_delay_ms: int = field(
        default=14_400_000,
        metadata=key(
            integer(0, INT64_MAX),
            "how long a stale partition directory waits in `deleting/` before it is deleted",
        ),
    )
    # Kafka's num.partitions and default.replication.factor, both 1; bounded by what
    # CreateTopics accepts itself (quorum/limits.py).
    num_partitions: int = field(
        default=1,
        metadata=key(
            integer(1, TOPIC_PARTITIONS_MAX), "CreateTopics' partitions when a request gives -1"
        ),
    )
    default_replication_factor: int = field(
        default=1,
        metadata=key(
            integer(1, REPLICATION_FACTOR_MAX),
            "CreateTopics' replication factor when a request gives -1",
        ),
    )
    # Kafka's name and default (false: never elect a leader outside the ISR). The controller's
    # value decides for topics that do not set the topic config of the same name.
    unclean_leader_election_enable: bool = field(
        default=False,
        metadata=key(
            boolean(),
            "with no ISR member available, elect another replica (losing what only the ISR "
            "held); topics may override it",
        ),
    )
    # Kafka's names and defaults (true, 300 s). Kafka's third key of the kind,
    # leader.imbalance.per.broker.percentage, is accepted and ignored: every imbalanced
    # partition is elected (quorum/server/controller.py).
    auto_leader_rebalance_enable: bool = field(
        default=True,
        metadata=key(
            boolean(),
            "the active controller moves leadership back to preferred replicas that are in sync",
        ),
    )
    leader_imbalance_check_interval_seconds: int = field(
        default=300,
        metadata=key(integer(1), "how often the active controller looks for such partitions"),
    )
    # The group coordinator (docs/groups.md#configuration): Kafka's names and defaults. The
    # offsets topic is created with these on first use; its replication factor is not capped
    # by the live brokers (Kafka's KRaft brokers do not cap it either: creation fails until
    # enough brokers are registered, and FindCoordinator answers COORDINATOR_NOT_AVAILABLE).
    offsets_topic_num_partitions: int = field(
        default=50,
        metadata=key(
            integer(1, TOPIC_PARTITIONS_MAX), "partitions of __consumer_offsets when created"
        ),
    )
    offsets_topic_replication_factor: int = field(
        default=3,
        metadata=key(
            integer(1, REPLICATION_FACTOR_MAX), "replication factor of __consumer_offsets"
        ),
    )
    offsets_topic_segment_bytes: int = field(
        default=104_857_600,
        metadata=key(integer(1, INT32_MAX), "segment.bytes of __consumer_offsets"),
    )
    offsets_commit_timeout_ms: int = field(
        default=5_000,
        metadata=key(
            integer(1, INT32_MAX),
            "a commit or group write waits this long for the ISR of its partition",
        ),
    )
    # KIP-211: a group's offsets expire this long after it became Empty (7 days).
    offsets_retention_minutes: int = field(
        default=10_080,
        metadata=key(
            integer(1, INT32_MAX),
            "a group's committed offsets expire this long after it became Empty",
        ),
    )
    offsets_retention_check_interval_ms: int = field(
        default=600_000,
        metadata=key(integer(1, INT64_MAX), "how often a coordinator expires committed offsets"),
    )
    offset_metadata_max_bytes: int = field(
        default=4_096,
        metadata=key(integer(0, INT32_MAX), "the longest metadata string of a committed offset"),
    )
    group_initial_rebalance_delay_ms: int = field(
        default=3_000,
        metadata=key(
            integer(0, INT32_MAX), "an empty group's first rebalance waits this long for members"
        ),
    )
    group_min_session_timeout_ms: int = field(
        default=6_000,
        metadata=key(integer(0, INT32_MAX), "the shortest session.timeout.ms a member may ask"),
    )
    group_max_session_timeout_ms: int = field(
        default=1_800_000,
        metadata=key(integer(0, INT32_MAX), "the longest session.timeout.ms a member may ask"),
    )
    group_max_size: int = field(
        default=INT32_MAX,
        metadata=key(integer(1, INT32_MAX), "members one consumer group may have"),
    )
    # Kafka's default is unbounded; 500 here, so that with the 4 MiB frame bound at most 2 GiB
    # of requests are held at once (docs/kafka-listener.md).
    max_connections: int = field(
        default=500,
        metadata=key(
            integer(1), "connections open at once on a broker's Kafka listeners; past it one closes"
        ),
    )
    # Kafka's default is unbounded; 50 here, a tenth of max.connections, so idle connections
    # from one address can no longer lock every other client out (it takes ten addresses),
    # while an admin client needs one per broker.
    max_connections_per_ip: int = field(
        default=50,
        metadata=key(
            integer(0),
            "... from one client address; 0 admits only the hosts of "
            "`max.connections.per.ip.overrides` (Kafka's rule)",
        ),
    )
    # E.g. a NAT gateway many clients share, "10.0.0.1:200". Names are resolved once, when the
    # listeners open.
    max_connections_per_ip_overrides: Mapping[str, int] = field(
        default_factory=dict,
        metadata=key(
            parsed(parse_connection_overrides, "`host:count,host:count`", literal=True),
            "per-address limits replacing `max.connections.per.ip`",
        ),
    )
    # Kafka's default, 10 minutes; Kafka's clients close theirs after 9, so a healthy client
    # never meets it.
    connections_max_idle_ms: int = field(
        default=600_000,
        metadata=key(integer(1), "a Kafka connection with no request for this long is closed"),
    )
    # docs/kafka-listener.md#request-quota. Kafka sets request_percentage per user
    # (kafka-configs) and has no default; here it is on, at 50: one principal, however many
    # connections it opens, leaves half of the listeners' thread to everyone else. 100 lets
    # one principal take all of it. Beyond it the answers carry throttle_time_ms and the
    # connection is read again only after that time.
    quota_request_percentage_default: int = field(
        default=50,
        metadata=key(
            integer(1, 100),
            "the percentage of the Kafka listeners' thread one principal's requests may take "
            "(a client quota's request_percentage replaces it for its clients)",
        ),
    )
    # Kafka's keys and defaults; the client quotas' byte rates are measured over the same
    # windows (docs/kafka-listener.md#client-quotas).
    quota_window_num: int = field(
        default=11,
        metadata=key(
            integer(1, QUOTA_WINDOWS_MAX),
            "the windows a request quota or a client quota's byte rate is measured over",
        ),
    )
    quota_window_size_seconds: int = field(
        default=1, metadata=key(integer(1), "the length of one quota window")
    )
    # Secure by default: a listener the map does not name is SSL, not PLAINTEXT as in Kafka
    # (docs/security.md#listeners-and-protocols).
    listener_security_protocol_map: Mapping[str, str] = field(
        default_factory=dict,
        metadata=key(
            parsed(parse_protocol_map, "a list of `NAME:PROTOCOL`"),
            "each listener's security protocol, `SSL` or `PLAINTEXT`",
            default_doc="every listener `SSL`",
        ),
    )
    # Kafka also takes JKS and PKCS12.
    ssl_keystore_type: str = field(
        default="PEM",
        metadata=key(text(case="upper", shape="`PEM`"), "the keystore's format"),
    )
    # Re-read when it changes (rotation).
    ssl_keystore_location: Path | None = field(
        default=None,
        metadata=key(
            path(),
            "one PEM file: the node's private key and certificate chain, leaf first; also its "
            "client certificate towards others",
        ),
    )
    ssl_keystore_key: str | None = field(
        default=None,
        repr=False,
        metadata=key(
            text(shape="PEM text", literal=False),
            "the node's private key as PEM text, instead of `ssl.keystore.location`",
        ),
    )
    ssl_keystore_certificate_chain: str | None = field(
        default=None,
        metadata=key(
            text(shape="PEM text", literal=False), "... and its certificate chain as PEM text"
        ),
    )
    ssl_truststore_type: str = field(
        default="PEM",
        metadata=key(text(case="upper", shape="`PEM`"), "the truststore's format"),
    )
    ssl_truststore_location: Path | None = field(
        default=None,
        metadata=key(
            path(), "the PEM CA bundle that verifies other nodes' and clients' certificates"
        ),
    )
    ssl_client_auth: str = field(
        default="required",
        metadata=key(
            text(case="lower", shape="`required`, `requested` or `none`"),
            "whether callers must present a certificate the truststore accepts",
        ),
    )
    # Tried in order (quorum/security/identity.py).
    ssl_principal_mapping_rules: tuple[str, ...] = field(
        default=("DEFAULT",),
        metadata=key(
            parsed(
                parse_mapping_rules,
                "Kafka's `RULE:pattern/replacement/[LU]` and `DEFAULT`",
                literal=True,
            ),
            "how a certificate's subject becomes a principal",
        ),
    )
    # docs/authorization.md; "" is Kafka's meaning of no authorizer.
    authorizer_class_name: str = field(
        default=STANDARD_AUTHORIZER,
        metadata=key(
            parsed(
                parse_authorizer, '`StandardAuthorizer` (or its class name) or `""`', literal=True
            ),
            "who may do what: ACLs in the metadata log, or no authorizer (every call allowed)",
        ),
    )
    # Kafka writes "User:a;User:b".
    super_users: tuple[str, ...] = field(
        default=(),
        metadata=key(
            parsed(parse_super_users, "a list of `User:<name>`", literal=True),
            "principals allowed everything, e.g. `User:CN=admin`",
        ),
    )
    allow_everyone_if_no_acl_found: bool = field(
        default=False,
        metadata=key(boolean(), "whether a resource that no ACL names is open to every principal"),
    )
    # Not a Kafka key: Kafka serves JMX, which the Prometheus JMX exporter turns into the names
    # served here (docs/operating.md#metrics). Port 0 picks a free port (logged as
    # metrics_listening).
    metrics_listener: HostPort | None = field(
        default=None,
        metadata=key(
            parsed(parse_metrics_listener, "`http://host:port`", literal=True),
            "where this node serves Prometheus metrics (`GET /metrics`; not a Kafka key)",
        ),
    )
    # Not a Kafka key. Its status is the main listener's: SERVING once a controller knows a
    # leader, once a broker caught up.
    health_listener: HostPort | None = field(
        default=None,
        metadata=key(
            parsed(parse_health_listener, "`host:port`", literal=True),
            "the gRPC health service alone, in plaintext, for probes that cannot present a "
            "client certificate (not a Kafka key)",
        ),
    )
    # Kafka requires it in KRaft; on a broker-only node none may be among its own listeners
    # (Kafka's rule).
    controller_listener_names: tuple[str, ...] = field(
        default=(),
        metadata=key(
            parsed(parse_names, "a list of listener names"),
            "the listeners controllers serve; a controller serves the first in `listeners`",
        ),
    )
    # Kafka's listener between brokers.
    inter_broker_listener_name: str | None = field(
        default=None,
        metadata=key(
            parsed(parse_listener_name, "a listener name", literal=True),
            "the listener a broker-only node serves when `listeners` has several",
        ),
    )
    # Required for a listener on every interface.
    advertised_listeners: tuple[Listener, ...] = field(
        default=(),
        metadata=key(
            parsed(parse_listeners, "a list of `NAME://host:port`"),
            "per listener name, the address a broker registers and Kafka clients are sent to",
            default_doc="the listeners",
        ),
    )
    broker_rack: str | None = field(
        default=None,
        metadata=key(text(), "the rack a broker registers; CreateTopics places replicas by it"),
    )
    # Kafka's default is true.
    auto_create_topics_enable: bool = field(
        default=False,
        metadata=key(
            boolean(
                only=False,
                why="topics are created only by CreateTopics (there is no produce or metadata "
                "request here that could create one)",
            ),
            "topics are created only by CreateTopics",
        ),
    )
    # KIP-516's stale-partition flow needs it.
    delete_topic_enable: bool = field(
        default=True,
        metadata=key(
            boolean(
                only=True,
                why="deleting topics is always enabled here (a deleted topic's id is what "
                "brokers reconcile against)",
            ),
            "deleting topics is always enabled",
        ),
    )

    # The partition logs' defaults for topics that do not set their own (Kafka's names and
    # defaults). Each is also a dynamic broker config (kafka-configs --entity-type brokers,
    # per broker or cluster-wide), which takes precedence over the file's value
    # (quorum/controller/broker_configs.py, docs/kafka-listener.md#broker-configs).
    log_retention_ms: int | None = field(
        default=None,
        metadata=key(
            integer(-1, INT64_MAX),
            "how long a topic without `retention.ms` keeps a segment (-1: forever); "
            "wins over the two below",
            default_doc="none (`log.retention.minutes`, else `log.retention.hours`)",
        ),
    )
    log_retention_minutes: int | None = field(
        default=None,
        metadata=key(
            integer(-1),
            "the same in minutes, when `log.retention.ms` is not given",
            default_doc="none (`log.retention.hours`)",
        ),
    )
    log_retention_hours: int = field(
        default=168,
        metadata=key(integer(-1), "the same in hours, when neither of the two above is given"),
    )
    log_retention_bytes: int = field(
        default=-1,
        metadata=key(
            integer(-1, INT64_MAX),
            "a topic without `retention.bytes` deletes old segments past this size (-1: never)",
        ),
    )
    log_segment_bytes: int = field(
        default=1_073_741_824,
        metadata=key(integer(14), "a topic without `segment.bytes` rolls segments at this size"),
    )
    min_insync_replicas: int = field(
        default=1,
        metadata=key(
            integer(1),
            "a topic without `min.insync.replicas` refuses acks=all writes with fewer in-sync "
            "replicas",
        ),
    )
    # The log cleaner (broker/log/cleaner.py): Kafka's names and defaults.
    log_cleaner_enable: bool = field(
        default=True,
        metadata=key(boolean(), "whether a broker compacts the logs of compacted topics"),
    )
    log_cleaner_backoff_ms: int = field(
        default=15_000,
        metadata=key(
            integer(0, INT64_MAX), "how long the log cleaner waits when no log needs cleaning"
        ),
    )
    # Kafka's name and default (5 minutes).
    log_retention_check_interval_ms: int = field(
        default=300_000,
        metadata=key(
            integer(1, INT64_MAX), "how often a broker deletes segments past their retention"
        ),
    )

    # Not keys: where the config came from.
    # The file this config was read from, if any (for messages that tell a person what to edit).
    config_file: Path | None = field(default=None, compare=False)
    # Kafka keys the config held that mean nothing here (quorum/config_kafka.py), sorted; a
    # node warns once at start-up naming them.
    ignored_keys: tuple[str, ...] = field(default=(), compare=False)
    # The keys the file, the environment or an override gave (a broker reports them as
    # STATIC_BROKER_CONFIG in DescribeConfigs; the others as Kafka's DEFAULT_CONFIG).
    given_keys: frozenset[str] = field(default=frozenset(), compare=False)

    def __post_init__(self) -> None:
        for name, attribute in KEYS.items():
            value = getattr(self, attribute)
            if isinstance(value, Mapping):  # the caller's mapping, copied: it may change
                value = dict(value)
                object.__setattr__(self, attribute, value)
            SPECS[name].kind.check(name, value)
        validate(self)

    # ----- views ---------------------------------------------------------------------------

    @property
    def is_controller(self) -> bool:
        return ROLE_CONTROLLER in self.process_roles

    @property
    def is_broker(self) -> bool:
        return ROLE_BROKER in self.process_roles

    @property
    def listener(self) -> Listener:
        """The listener this node serves every gRPC service on (``served_listener``)."""
        return served_listener(self)

    @property
    def advertised_listener(self) -> Listener:
        """The address a broker registers (``advertised_listener``)."""
        return advertised_listener(self)

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
        return named_host(listener)

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


# ----- derived from the table ------------------------------------------------------------------

# Kafka name -> its row, in the table's order.
SPECS: Final[Mapping[str, KeySpec]] = {
    key_name(f.name): f.metadata[KEY_METADATA]
    for f in fields(NodeConfig)
    if KEY_METADATA in f.metadata
}
# Kafka name -> NodeConfig attribute, for every key a file may contain.
KEYS: Final[Mapping[str, str]] = {
    key_name(f.name): f.name for f in fields(NodeConfig) if KEY_METADATA in f.metadata
}
REQUIRED_KEYS: Final = tuple(name for name, spec in SPECS.items() if spec.required)
# Keys whose --override or environment value is the text typed, never read as TOML.
LITERAL_KEYS: Final = frozenset(name for name, spec in SPECS.items() if spec.kind.literal)
# At least one of these says where the quorum is (KIP-853); with both, the static voters are
# the voter set and the bootstrap servers only another way to find it.
QUORUM_KEYS: Final = ("controller.quorum.voters", "controller.quorum.bootstrap.servers")

assert set(QUORUM_KEYS) <= set(SPECS)
assert all(SPECS[name].missing for name in (*REQUIRED_KEYS, QUORUM_KEYS[0])), "say how to give it"
assert not set(KEYS) & set(NOT_APPLICABLE_KEYS), set(KEYS) & set(NOT_APPLICABLE_KEYS)
