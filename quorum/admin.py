"""``AdminClient``: Kafka's Admin API over gRPC (docs/architecture.md#interfaces, KIP-516).

The client mirrors ``org.apache.kafka.clients.admin.Admin`` with Python names::

    with AdminClient("127.0.0.1:19091,127.0.0.1:19092,127.0.0.1:19093") as admin:
        created = admin.create_topics([NewTopic("orders", 3, 2, {"cleanup.policy": "compact"})])
        topic_id = created.topic_id("orders")  # raises TopicExistsError, ... for this topic
        described = admin.describe_topics(TopicCollection.of_topic_ids([topic_id]))
        print(described.all_topic_ids()[topic_id].partitions)
        admin.create_partitions({"orders": NewPartitions.increase_to(6)}).all()
        admin.delete_topics(TopicCollection.of_topic_ids([topic_id])).all()

Kafka's results are maps of futures; this client is synchronous, so its results hold one
already-completed ``TopicOutcome`` per topic: ``outcome.result()`` returns the value or raises the
topic's typed error, exactly where Kafka's ``future.get()`` would. Shortcuts raise the same way
(``CreateTopicsResult.topic_id(name)``, ``DescribeTopicsResult.all_topic_names()``, ...).

Errors (docs/conventions.md#errors; the classes live in ``quorum.errors``):

- ``KafkaError`` and its subclasses (Kafka's exception names with ``Error``: ``TopicExistsError``,
  ``UnknownTopicIdError``, ...) carry a Kafka ``ErrorCode``, the server's message and
  ``retriable``. ``error_for(code, message)`` builds the right one.
- ``AdminTransportError`` covers gRPC failures: ``AdminConnectionError`` when no node could be
  reached within the retries, ``AdminTimeoutError`` when the call's deadline passed (for a
  mutation, its outcome is then unknown: describe to find out, as with Kafka's
  ``TimeoutException``), and the base class for other gRPC statuses.
- ``UnknownServerError``: the server answered something this client cannot read (an error code
  it does not know, a malformed id, a result for a topic it did not ask about).

All of them derive from ``AdminError``. Bad arguments raise ``ValueError`` / ``TypeError``.

Routing. The client bootstraps from any controller (``"host:port,host:port"`` or a list). It
sends every call to the active controller once it knows it, and otherwise to the bootstrap
addresses in turn. A ``NOT_CONTROLLER`` answer names the active controller
(``controller_endpoint``), and the client goes there at once; without a name (an election is
under way) it backs off and tries the next address. ``UNAVAILABLE`` and ``RESOURCE_EXHAUSTED``
move on to the next address after a backoff. Each call makes at most ``1 + retries_max``
attempts and never outlives its deadline (``timeout_s``, per call or for the client), which is
also the gRPC deadline of each attempt. Backoff is exponential with 20 % jitter, from
``retry_backoff_s`` up to ``retry_backoff_max_s`` (Kafka's ``retry.backoff.ms`` /
``retry.backoff.max.ms``).

Read-your-writes. Every mutation's result has the ``metadata_offset`` that committed it; every
read takes ``min_metadata_offset`` and the server answers from an image that contains it. With
``read_your_writes=True`` (the default) the client also passes the highest offset its own
mutations returned, so a describe after a create sees the topic on any node.

Requests are split into chunks of ``TOPICS_PER_REQUEST_MAX`` topics (the server's bound); later
chunks of a read wait for the offset the earlier ones were served at, so one result never mixes
an older image into a newer one.

Security (docs/security.md#clients). ``config`` takes Kafka's client keys, as Kafka's
``Admin.create(Properties)`` does: ``security.protocol`` (PLAINTEXT, the default, or SSL),
``ssl.keystore.location`` (one PEM file: the client's key and certificate chain),
``ssl.keystore.type = PEM``, ``ssl.truststore.location`` (the CA bundle) ...;
``AdminClient.from_properties_file`` reads them from a ``client.properties`` file (relative
paths against its directory). Before each call the client checks whether its certificate files
changed and, if so, opens new channels, so a rotated client certificate is used from the next
call on.

Not thread-safe: use one client per thread (gRPC channels are cheap).
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType, TracebackType
from typing import Any, Final, Generic, TypeVar, cast

import grpc

from quorum.errors import (
    AdminConnectionError,
    AdminError,
    AdminTimeoutError,
    AdminTransportError,
    BrokerNotAvailableError,
    DuplicateBrokerRegistrationError,
    ErrorCode,
    FencedLeaderEpochError,
    InconsistentClusterIdError,
    InconsistentTopicIdError,
    InconsistentVoterSetError,
    InvalidConfigError,
    InvalidPartitionsError,
    InvalidReplicaAssignmentError,
    InvalidReplicationFactorError,
    InvalidRequestError,
    InvalidTopicError,
    KafkaError,
    NotControllerError,
    NotLeaderOrFollowerError,
    PolicyViolationError,
    PositionOutOfRangeError,
    RecordListTooLargeError,
    RequestTimedOutError,
    ServerFailedError,
    SnapshotNotFoundError,
    StaleBrokerEpochError,
    TopicDeletionDisabledError,
    TopicExistsError,
    UnknownLeaderEpochError,
    UnknownServerError,
    UnknownTopicIdError,
    UnknownTopicOrPartitionError,
    UnsupportedVersionError,
    error_for,
    error_name,
)
from quorum.ids import UUID_BYTES, ZERO_UUID, Uuid
from quorum.limits import ACL_REQUEST_ENTRIES_MAX
from quorum.rpc.v1 import admin_pb2, admin_pb2_grpc, raft_pb2, raft_pb2_grpc
from quorum.security.acl_wire import binding_from_proto, binding_to_proto, filter_to_proto
from quorum.security.acls import AclBinding, AclBindingFilter
from quorum.security.tls import ClientSecurity, SyncChannels
from quorum.server.transport import (
    MalformedMessageError,
    QuorumDescription,
    describe_quorum_from_proto,
    tool_describe_quorum_request,
)

__all__ = [
    "TOPICS_PER_REQUEST_MAX",
    "AdminConnectionError",
    "AdminError",
    "AdminTimeoutError",
    "AdminTransportError",
    "BrokerNotAvailableError",
    "CreatePartitionsResult",
    "DeleteTopicsResult",
    "DescribeTopicsResult",
    "DuplicateBrokerRegistrationError",
    "FencedLeaderEpochError",
    "InconsistentClusterIdError",
    "InconsistentTopicIdError",
    "InconsistentVoterSetError",
    "InvalidConfigError",
    "InvalidPartitionsError",
    "InvalidReplicaAssignmentError",
    "InvalidReplicationFactorError",
    "InvalidRequestError",
    "InvalidTopicError",
    "KafkaError",
    "NewPartitions",
    "NotControllerError",
    "NotLeaderOrFollowerError",
    "PartitionsCreated",
    "PolicyViolationError",
    "PositionOutOfRangeError",
    "RecordListTooLargeError",
    "RequestTimedOutError",
    "ServerFailedError",
    "SnapshotNotFoundError",
    "StaleBrokerEpochError",
    "TopicDeletionDisabledError",
    "TopicExistsError",
    "TopicIdCollection",
    "TopicNameCollection",
    "TopicOutcome",
    "UnknownLeaderEpochError",
    "UnknownServerError",
    "UnknownTopicIdError",
    "UnknownTopicOrPartitionError",
    "UnsupportedVersionError",
    "error_for",
    "parse_bootstrap",
]

# The server refuses requests naming more topics with INVALID_REQUEST (admin.proto); the client
# splits larger ones. Kafka has no such bound; 1,000 keeps one request's records well inside
# RECORDS_PER_BATCH_MAX for small topics and one answer far below gRPC's message size limit.
TOPICS_PER_REQUEST_MAX: Final = 1_000
TIMEOUT_S_DEFAULT: Final = 30.0  # Kafka's request.timeout.ms
RETRIES_MAX_DEFAULT: Final = 10
RETRY_BACKOFF_S_DEFAULT: Final = 0.1  # Kafka's retry.backoff.ms
RETRY_BACKOFF_MAX_S_DEFAULT: Final = 1.0  # Kafka's retry.backoff.max.ms
RETRY_BACKOFF_JITTER: Final = 0.2  # Kafka's ExponentialBackoff jitter
NO_ID: Final = -1
NO_OFFSET: Final = -1
# gRPC statuses after which another attempt (on the next address) may succeed.
_RETRIABLE_STATUSES: Final = frozenset(
    {grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.RESOURCE_EXHAUSTED}
)
_CHANNEL_OPTIONS: Final[list[tuple[str, Any]]] = [
    ("grpc.max_receive_message_length", 64 * 1024 * 1024),
    ("grpc.keepalive_time_ms", 30_000),
]

T = TypeVar("T")
K = TypeVar("K", str, Uuid)


# ----- topic collections -------------------------------------------------------------------------


class TopicCollection:
    """Topics named by id or by name (KIP-516's ``TopicCollection``). Repeats are dropped,
    the first occurrence keeps its place."""

    @staticmethod
    def of_topic_ids(topic_ids: Iterable[Uuid | str]) -> TopicIdCollection:
        """Ids as ``Uuid`` or text (Kafka's base64 form, or dashed hex)."""
        if isinstance(topic_ids, str):
            raise TypeError("of_topic_ids takes a collection of ids, not one id string")
        ids = (i if isinstance(i, Uuid) else Uuid.parse(i) for i in topic_ids)
        return TopicIdCollection(tuple(dict.fromkeys(ids)))

    @staticmethod
    def of_topic_names(topic_names: Iterable[str]) -> TopicNameCollection:
        if isinstance(topic_names, str):
            raise TypeError("of_topic_names takes a collection of names, not one name")
        names = list(topic_names)
        for name in names:
            if not isinstance(name, str):
                raise TypeError(f"a topic name is a str, got {name!r}")
        return TopicNameCollection(tuple(dict.fromkeys(names)))


@dataclass(frozen=True, slots=True)
class TopicIdCollection(TopicCollection):
    topic_ids: tuple[Uuid, ...]


@dataclass(frozen=True, slots=True)
class TopicNameCollection(TopicCollection):
    topic_names: tuple[str, ...]


# ----- values ------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class TopicOutcome(Generic[T]):
    """One topic's outcome: Kafka's ``KafkaFuture``, already completed."""

    value: T | None
    error: AdminError | None = None

    def __post_init__(self) -> None:
        assert (self.value is None) != (self.error is None), "exactly one of value and error"

    def result(self) -> T:
        """The value, or raises the topic's error (``KafkaFuture.get()``)."""
        if self.error is not None:
            raise self.error
        return cast(T, self.value)

    def exception(self) -> AdminError | None:
        return self.error

    @property
    def ok(self) -> bool:
        return self.error is None


@dataclass(frozen=True, slots=True)
class NewTopic:
    """A topic to create (Kafka's ``NewTopic``). ``None`` partitions or replication factor use
    the cluster's default; with ``replica_assignments`` ({partition: [broker, ...]}) leave both
    ``None``."""

    name: str
    num_partitions: int | None = None
    replication_factor: int | None = None
    configs: Mapping[str, str] = field(default_factory=dict)
    replica_assignments: Mapping[int, Sequence[int]] | None = None


@dataclass(frozen=True, slots=True)
class NewPartitions:
    """How to grow one topic (Kafka's ``NewPartitions``): to ``total_count`` partitions, the new
    ones placed by the controller, or on ``new_assignments`` (one broker list per new
    partition, the preferred leader first). Build it with ``increase_to``."""

    total_count: int
    new_assignments: tuple[tuple[int, ...], ...] | None = None

    @staticmethod
    def increase_to(
        total_count: int, new_assignments: Sequence[Sequence[int]] | None = None
    ) -> NewPartitions:
        if isinstance(total_count, bool) or not isinstance(total_count, int):
            raise TypeError(f"total_count is an int, got {total_count!r}")
        assignments = None if new_assignments is None else tuple(tuple(a) for a in new_assignments)
        return NewPartitions(total_count, assignments)


@dataclass(frozen=True, slots=True)
class PartitionsCreated:
    """A topic that grew (or, with ``validate_only``, would grow) to ``total_count``
    partitions; Kafka's future completes with nothing, this one with the topic's identity."""

    name: str
    topic_id: Uuid
    total_count: int


@dataclass(frozen=True, slots=True)
class TopicMetadataAndConfig:
    """A created topic (Kafka's ``CreateTopicsResult.TopicMetadataAndConfig``). With
    ``validate_only``: ``topic_id`` is ZERO_UUID and ``creation_offset`` -1."""

    name: str
    topic_id: Uuid
    creation_offset: int
    num_partitions: int
    replication_factor: int
    configs: Mapping[str, str]


@dataclass(frozen=True, slots=True)
class TopicPartitionInfo:
    """One partition (Kafka's ``TopicPartitionInfo``, with broker ids instead of ``Node``s).
    ``leader`` is None when the partition has no leader."""

    partition: int
    leader: int | None
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    leader_epoch: int = 0
    offline_replicas: tuple[int, ...] = ()


@dataclass(frozen=True, slots=True)
class TopicDescription:
    """A described topic (Kafka's ``TopicDescription``). The pair (``topic_id``,
    ``creation_offset``) is the topic's identity."""

    name: str
    topic_id: Uuid
    is_internal: bool
    creation_offset: int
    partitions: tuple[TopicPartitionInfo, ...]
    configs: Mapping[str, str]

    @property
    def replication_factor(self) -> int:
        """As kafka-topics computes it: the first partition's replica count (0 if none)."""
        return len(self.partitions[0].replicas) if self.partitions else 0


@dataclass(frozen=True, slots=True)
class DeletedTopic:
    """A deleted topic: both its name and its id, whichever it was named by (KIP-516)."""

    name: str
    topic_id: Uuid


@dataclass(frozen=True, slots=True)
class TopicListing:
    """One topic of ``list_topics`` (Kafka's ``TopicListing``, plus the creation offset)."""

    name: str
    topic_id: Uuid
    is_internal: bool
    creation_offset: int


@dataclass(frozen=True, slots=True)
class BrokerNode:
    broker_id: int
    host: str
    port: int
    rack: str | None
    is_fenced: bool
    broker_epoch: int


@dataclass(frozen=True, slots=True)
class ControllerNode:
    node_id: int
    host: str
    port: int

    @property
    def endpoint(self) -> str:
        return _join_host_port(self.host, self.port)


@dataclass(frozen=True, slots=True)
class ClusterDescription:
    """``describe_cluster()``: Kafka's ``DescribeClusterResult``, completed."""

    cluster_id: str
    controller_id: int | None
    brokers: tuple[BrokerNode, ...]
    controllers: tuple[ControllerNode, ...]
    metadata_topic_id: Uuid | None
    metadata_offset: int

    @property
    def nodes(self) -> tuple[BrokerNode, ...]:
        """Kafka's ``nodes()``: the brokers."""
        return self.brokers


# ----- results -----------------------------------------------------------------------------------


def _first_error(outcomes: Iterable[TopicOutcome[Any]]) -> None:
    for outcome in outcomes:
        if outcome.error is not None:
            raise outcome.error


class CreateTopicsResult:
    """Per-topic outcomes of ``create_topics``, in request order (Kafka's
    ``CreateTopicsResult``). Accessors for one topic raise that topic's error."""

    def __init__(
        self, outcomes: Mapping[str, TopicOutcome[TopicMetadataAndConfig]], metadata_offset: int
    ) -> None:
        self._outcomes = dict(outcomes)
        self.metadata_offset = metadata_offset

    def values(self) -> dict[str, TopicOutcome[TopicMetadataAndConfig]]:
        return dict(self._outcomes)

    def all(self) -> dict[str, TopicMetadataAndConfig]:
        """Every topic's metadata; raises the first failure in request order."""
        _first_error(self._outcomes.values())
        return {name: outcome.result() for name, outcome in self._outcomes.items()}

    def errors(self) -> dict[str, AdminError]:
        return {n: o.error for n, o in self._outcomes.items() if o.error is not None}

    def _get(self, name: str) -> TopicMetadataAndConfig:
        try:
            outcome = self._outcomes[name]
        except KeyError:
            raise KeyError(f"topic {name!r} was not part of the request") from None
        return outcome.result()

    def topic_id(self, name: str) -> Uuid:
        return self._get(name).topic_id

    def creation_offset(self, name: str) -> int:
        return self._get(name).creation_offset

    def num_partitions(self, name: str) -> int:
        return self._get(name).num_partitions

    def replication_factor(self, name: str) -> int:
        return self._get(name).replication_factor

    def config(self, name: str) -> Mapping[str, str]:
        return self._get(name).configs

    def __repr__(self) -> str:
        return f"CreateTopicsResult({self._outcomes!r}, metadata_offset={self.metadata_offset})"


class CreatePartitionsResult:
    """Per-topic outcomes of ``create_partitions`` (Kafka's ``CreatePartitionsResult``), keyed
    as the request named each topic (a name, or a ``Uuid``)."""

    def __init__(
        self, outcomes: Mapping[str | Uuid, TopicOutcome[PartitionsCreated]], metadata_offset: int
    ) -> None:
        self._outcomes = dict(outcomes)
        self.metadata_offset = metadata_offset

    def values(self) -> dict[str | Uuid, TopicOutcome[PartitionsCreated]]:
        return dict(self._outcomes)

    def all(self) -> None:
        """Raises the first failure in request order; returns if every topic grew."""
        _first_error(self._outcomes.values())

    def errors(self) -> dict[str | Uuid, AdminError]:
        return {k: o.error for k, o in self._outcomes.items() if o.error is not None}

    def __repr__(self) -> str:
        return f"CreatePartitionsResult({self._outcomes!r}, metadata_offset={self.metadata_offset})"


class _ByNameOrId(Generic[T]):
    """Outcomes keyed by name or by id, as the request named them (Kafka's
    ``topicNameValues()`` / ``topicIdValues()``: the other one is None)."""

    def __init__(
        self,
        by_name: Mapping[str, TopicOutcome[T]] | None,
        by_id: Mapping[Uuid, TopicOutcome[T]] | None,
        metadata_offset: int,
    ) -> None:
        assert (by_name is None) != (by_id is None)
        self._by_name = None if by_name is None else dict(by_name)
        self._by_id = None if by_id is None else dict(by_id)
        self.metadata_offset = metadata_offset

    def topic_name_values(self) -> dict[str, TopicOutcome[T]] | None:
        return None if self._by_name is None else dict(self._by_name)

    def topic_id_values(self) -> dict[Uuid, TopicOutcome[T]] | None:
        return None if self._by_id is None else dict(self._by_id)

    def _outcomes(self) -> Iterable[TopicOutcome[T]]:
        outcomes = self._by_name if self._by_name is not None else self._by_id
        assert outcomes is not None
        return outcomes.values()

    def errors(self) -> list[AdminError]:
        return [o.error for o in self._outcomes() if o.error is not None]

    def _all_by_name(self) -> dict[str, T]:
        if self._by_name is None:
            raise ValueError("the topics were named by id: use the *_ids accessor")
        _first_error(self._by_name.values())
        return {name: outcome.result() for name, outcome in self._by_name.items()}

    def _all_by_id(self) -> dict[Uuid, T]:
        if self._by_id is None:
            raise ValueError("the topics were named by name: use the *_names accessor")
        _first_error(self._by_id.values())
        return {topic_id: outcome.result() for topic_id, outcome in self._by_id.items()}

    def __repr__(self) -> str:
        outcomes = self._by_name if self._by_name is not None else self._by_id
        return f"{type(self).__name__}({outcomes!r}, metadata_offset={self.metadata_offset})"


class DescribeTopicsResult(_ByNameOrId[TopicDescription]):
    """Per-topic outcomes of ``describe_topics`` (Kafka's ``DescribeTopicsResult``)."""

    def all_topic_names(self) -> dict[str, TopicDescription]:
        """Every description by name; raises the first failure. Only for a by-name request."""
        return self._all_by_name()

    def all_topic_ids(self) -> dict[Uuid, TopicDescription]:
        """Every description by id; raises the first failure. Only for a by-id request."""
        return self._all_by_id()


class DeleteTopicsResult(_ByNameOrId[DeletedTopic]):
    """Per-topic outcomes of ``delete_topics`` (Kafka's ``DeleteTopicsResult``)."""

    def all(self) -> None:
        """Raises the first failure in request order; returns if every topic was deleted."""
        _first_error(self._outcomes())


# What one CreateAcls / DeleteAcls request may carry (the server's bound).
ACL_ENTRIES_PER_REQUEST_MAX: Final = ACL_REQUEST_ENTRIES_MAX


def _at_most_one_request(entries: Iterable[T], what: str) -> list[T]:
    """``entries`` as a list, or ``ValueError`` past what one ACL request may carry."""
    wanted = list(entries)
    if len(wanted) > ACL_ENTRIES_PER_REQUEST_MAX:
        raise ValueError(f"{len(wanted)} {what} in one call; at most {ACL_ENTRIES_PER_REQUEST_MAX}")
    return wanted


@dataclass(frozen=True, slots=True)
class CreateAclsResult:
    """``create_acls``: each binding with its error (None: created or already there)."""

    outcomes: tuple[tuple[AclBinding, KafkaError | UnknownServerError | None], ...]
    metadata_offset: int

    def all(self) -> None:
        """Raises the first failure in request order."""
        for _, error in self.outcomes:
            if error is not None:
                raise error


@dataclass(frozen=True, slots=True)
class DeleteAclsResult:
    """``delete_acls``: each filter with the ACLs it removed."""

    deleted: tuple[tuple[AclBindingFilter, tuple[AclBinding, ...]], ...]
    metadata_offset: int

    def all(self) -> list[AclBinding]:
        """Every ACL removed, in filter order."""
        return [binding for _, bindings in self.deleted for binding in bindings]


@dataclass(frozen=True, slots=True)
class ListTopicsResult:
    """``list_topics``: Kafka's ``ListTopicsResult``, completed, sorted by name."""

    topics: tuple[TopicListing, ...]
    metadata_offset: int

    def listings(self) -> list[TopicListing]:
        return list(self.topics)

    def names(self) -> set[str]:
        return {t.name for t in self.topics}

    def names_to_listings(self) -> dict[str, TopicListing]:
        return {t.name: t for t in self.topics}


# ----- wire helpers ------------------------------------------------------------------------------


def parse_bootstrap(bootstrap: str | Sequence[str]) -> list[str]:
    """``"host:port,host:port"`` (or a list of them) as gRPC targets; ``[::1]:9093`` for IPv6.
    Raises ``ValueError`` naming a bad entry."""
    items = bootstrap.split(",") if isinstance(bootstrap, str) else list(bootstrap)
    addresses: list[str] = []
    for item in items:
        address = item.strip()
        host, _, port = address.rpartition(":")
        if not host or not port.isdigit() or not 0 < int(port) <= 65535:
            raise ValueError(f"{address!r} is not HOST:PORT (e.g. 127.0.0.1:19091)")
        if address not in addresses:
            addresses.append(address)
    if not addresses:
        raise ValueError("no bootstrap address given")
    return addresses


def _join_host_port(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host and not host.startswith("[") else f"{host}:{port}"


def _uuid_from_wire(what: str, data: bytes) -> Uuid:
    if not data:
        return ZERO_UUID
    if len(data) != UUID_BYTES:
        raise UnknownServerError(f"malformed answer: {what} is {len(data)} bytes, not 16")
    return Uuid.from_bytes(data)


def _optional_id(value: int) -> int | None:
    return None if value < 0 else value


def _configs_from_wire(entries: Iterable[admin_pb2.TopicConfig]) -> Mapping[str, str]:
    return MappingProxyType({entry.name: entry.value for entry in entries})


def _chunks(items: Sequence[T], size: int) -> Iterator[Sequence[T]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]


def _topic_error(code: int, message: str) -> AdminError | None:
    return None if code == ErrorCode.NONE else error_for(code, message)


def _status_name(exc: grpc.RpcError) -> tuple[grpc.StatusCode | None, str]:
    code = getattr(exc, "code", None)
    details = getattr(exc, "details", None)
    status = code() if callable(code) else None
    text = details() if callable(details) else str(exc)
    return status, str(text or "")


def _key_outcomes(
    kind: str,
    requested: Sequence[K],
    answered: Iterable[tuple[K, TopicOutcome[T]]],
) -> dict[K, TopicOutcome[T]]:
    """Match per-topic results to the requested keys: every key gets exactly one outcome."""
    by_key: dict[K, TopicOutcome[T]] = {}
    wanted = set(requested)
    for key, outcome in answered:
        if key not in wanted:
            raise UnknownServerError(f"malformed answer: a result for {kind} {key} not asked for")
        if key in by_key:
            raise UnknownServerError(f"malformed answer: two results for {kind} {key}")
        by_key[key] = outcome
    return {
        key: by_key.get(
            key,
            TopicOutcome(None, UnknownServerError(f"the server did not answer for {kind} {key}")),
        )
        for key in requested
    }


# ----- the client --------------------------------------------------------------------------------


class AdminClient:
    """Kafka's Admin over gRPC; see the module docstring for routing, retries and errors."""

    def __init__(
        self,
        bootstrap: str | Sequence[str],
        *,
        timeout_s: float = TIMEOUT_S_DEFAULT,
        retries_max: int = RETRIES_MAX_DEFAULT,
        retry_backoff_s: float = RETRY_BACKOFF_S_DEFAULT,
        retry_backoff_max_s: float = RETRY_BACKOFF_MAX_S_DEFAULT,
        read_your_writes: bool = True,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
        rng: random.Random | None = None,
        config: Mapping[str, str] | None = None,
        security: ClientSecurity | None = None,
    ) -> None:
        """``config``: Kafka client properties (``security.protocol``, ``ssl.*``); or an
        already built ``security``. Raises ``ConfigError`` for unusable security settings."""
        if config is not None and security is not None:
            raise ValueError("give config or security, not both")
        if timeout_s <= 0:
            raise ValueError(f"timeout_s must be > 0, got {timeout_s}")
        if retries_max < 0:
            raise ValueError(f"retries_max must be >= 0, got {retries_max}")
        if not 0 <= retry_backoff_s <= retry_backoff_max_s:
            raise ValueError("need 0 <= retry_backoff_s <= retry_backoff_max_s")
        self._addresses = parse_bootstrap(bootstrap)
        self._timeout_s = timeout_s
        self._retries_max = retries_max
        self._retry_backoff_s = retry_backoff_s
        self._retry_backoff_max_s = retry_backoff_max_s
        self._read_your_writes = read_your_writes
        self._clock = clock
        self._sleep = sleep
        self._rng = rng or random.Random()
        self._security = security or ClientSecurity.from_properties(config)
        self._channels = SyncChannels(self._security, _CHANNEL_OPTIONS)
        self._controller: str | None = None  # the active controller's address, once known
        self._next_index = 0  # where the next call without a known controller starts
        self._written_offset = NO_OFFSET  # the highest metadata_offset of our own mutations
        self._closed = False

    # ----- lifecycle ---------------------------------------------------------------------------

    def close(self) -> None:
        """Close every channel. Idempotent; the client cannot be used afterwards."""
        self._closed = True
        self._channels.close()

    @classmethod
    def from_properties_file(
        cls, bootstrap: str | Sequence[str], path: str | Path, **kwargs: Any
    ) -> AdminClient:
        """A client whose security comes from a Java-style ``client.properties`` file (what
        the CLI's ``--command-config`` takes); ``kwargs`` as for the constructor."""
        return cls(bootstrap, security=ClientSecurity.from_properties_file(Path(path)), **kwargs)

    @property
    def security_protocol(self) -> str:
        """``PLAINTEXT`` or ``SSL``."""
        return self._security.protocol

    def __enter__(self) -> AdminClient:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()

    @property
    def addresses(self) -> tuple[str, ...]:
        """The addresses this client knows: the bootstrap list, then those it learned."""
        return tuple(self._addresses)

    @property
    def controller_address(self) -> str | None:
        """The active controller's address as last learned, or None."""
        return self._controller

    # ----- topics ------------------------------------------------------------------------------

    def create_topics(
        self,
        new_topics: Iterable[NewTopic],
        *,
        validate_only: bool = False,
        timeout_s: float | None = None,
    ) -> CreateTopicsResult:
        """Create topics (Kafka's ``createTopics``). Topics succeed or fail one by one; read
        each with ``result.topic_id(name)`` or ``result.values()``. Raises for the whole call
        only when no controller accepted it (``AdminError``)."""
        topics = list(new_topics)
        names = [topic.name for topic in topics]
        if len(set(names)) != len(names):
            repeated = sorted({n for n in names if names.count(n) > 1})
            raise ValueError(f"topics named more than once: {repeated}")
        deadline = self._deadline(timeout_s)
        outcomes: dict[str, TopicOutcome[TopicMetadataAndConfig]] = {}
        metadata_offset = NO_OFFSET
        for chunk in _chunks(topics, TOPICS_PER_REQUEST_MAX):
            request = admin_pb2.CreateTopicsRequest(
                topics=[_creatable_topic(topic) for topic in chunk], validate_only=validate_only
            )
            response = self._call("CreateTopics", request, deadline, mutation=True)
            metadata_offset = max(metadata_offset, response.metadata_offset)
            answered = [
                (result.name, _creation_outcome(result, validate_only))
                for result in response.topics
            ]
            outcomes.update(_key_outcomes("topic", [t.name for t in chunk], answered))
        return CreateTopicsResult(outcomes, metadata_offset)

    def create_partitions(
        self,
        new_partitions: Mapping[str | Uuid, NewPartitions],
        *,
        validate_only: bool = False,
        timeout_s: float | None = None,
    ) -> CreatePartitionsResult:
        """Grow topics to more partitions (Kafka's ``createPartitions``): ``{name:
        NewPartitions.increase_to(n)}``; a key may also be a topic id (``Uuid``; not in Kafka),
        which grows exactly the topic that was seen. Topics succeed or fail one by one
        (``InvalidPartitionsError`` for a count that is not an increase, ...). Raises for the
        whole call only when no controller accepted it (``AdminError``)."""
        entries = list(new_partitions.items())
        for key, growth in entries:
            if not isinstance(growth, NewPartitions):
                raise TypeError(f"create_partitions takes NewPartitions values, got {growth!r}")
            if not isinstance(key, str | Uuid):
                raise TypeError(f"a topic is named by a str or a Uuid, got {key!r}")
        deadline = self._deadline(timeout_s)
        outcomes: dict[str | Uuid, TopicOutcome[PartitionsCreated]] = {}
        metadata_offset = NO_OFFSET
        for chunk in _chunks(entries, TOPICS_PER_REQUEST_MAX):
            asked = [(key, growth) for key, growth in chunk if not self._bad_key(key, outcomes)]
            if not asked:
                continue
            request = admin_pb2.CreatePartitionsRequest(
                topics=[_partitions_topic(key, growth) for key, growth in asked],
                validate_only=validate_only,
                timeout_ms=max(1, int((deadline - self._clock()) * 1000)),
            )
            response = self._call("CreatePartitions", request, deadline, mutation=True)
            metadata_offset = max(metadata_offset, response.metadata_offset)
            if len(response.results) != len(asked):
                raise UnknownServerError(
                    f"malformed answer: {len(response.results)} CreatePartitions results for "
                    f"{len(asked)} topics"
                )
            for (key, growth), result in zip(asked, response.results, strict=True):
                outcomes[key] = _partitions_outcome(key, growth, result)
        return CreatePartitionsResult({key: outcomes[key] for key, _ in entries}, metadata_offset)

    @staticmethod
    def _bad_key(
        key: str | Uuid, outcomes: dict[str | Uuid, TopicOutcome[PartitionsCreated]]
    ) -> bool:
        """Kafka fails an empty name (and here ZERO_UUID) locally, without asking."""
        if key in ("", ZERO_UUID):
            outcomes[key] = TopicOutcome(
                None, InvalidTopicError(f"{key!r} cannot name a topic (empty name or ZERO_UUID)")
            )
            return True
        return False

    def delete_topics(
        self,
        topics: TopicCollection,
        *,
        expected_topic_ids: Mapping[str, Uuid] | None = None,
        timeout_s: float | None = None,
    ) -> DeleteTopicsResult:
        """Delete topics by name or by id (Kafka's ``deleteTopics(TopicCollection)``). Deleting
        by id deletes exactly the topic that was seen, never a newer one of the same name.

        ``expected_topic_ids`` (names only; not in Kafka) adds that guarantee to deletion by
        name: a topic whose current id differs fails with ``InconsistentTopicIdError``.
        """
        expected = dict(expected_topic_ids or {})
        if expected:
            if not isinstance(topics, TopicNameCollection):
                raise ValueError("expected_topic_ids only go with TopicCollection.of_topic_names")
            strays = sorted(set(expected) - set(topics.topic_names))
            if strays:
                raise ValueError(f"expected_topic_ids for topics not being deleted: {strays}")
        deadline = self._deadline(timeout_s)
        metadata_offset = NO_OFFSET
        if isinstance(topics, TopicIdCollection):
            by_id: dict[Uuid, TopicOutcome[DeletedTopic]] = {}
            valid_ids = [i for i in topics.topic_ids if i != ZERO_UUID]
            for id_chunk in _chunks(valid_ids, TOPICS_PER_REQUEST_MAX):
                request = admin_pb2.DeleteTopicsRequest(
                    topics=[admin_pb2.DeletableTopic(topic_id=i.bytes) for i in id_chunk]
                )
                response = self._call("DeleteTopics", request, deadline, mutation=True)
                metadata_offset = max(metadata_offset, response.metadata_offset)
                answered = [
                    (_uuid_from_wire("topic_id", r.topic_id), _deletion_outcome(r))
                    for r in response.topics
                ]
                by_id.update(_key_outcomes("topic id", id_chunk, answered))
            return DeleteTopicsResult(
                None, _with_zero_id_errors(topics.topic_ids, by_id), metadata_offset
            )
        if isinstance(topics, TopicNameCollection):
            by_name: dict[str, TopicOutcome[DeletedTopic]] = {}
            valid_names = [n for n in topics.topic_names if n]
            for chunk in _chunks(valid_names, TOPICS_PER_REQUEST_MAX):
                request = admin_pb2.DeleteTopicsRequest(
                    topics=[
                        admin_pb2.DeletableTopic(
                            name=n, expected_topic_id=expected[n].bytes if n in expected else b""
                        )
                        for n in chunk
                    ]
                )
                response = self._call("DeleteTopics", request, deadline, mutation=True)
                metadata_offset = max(metadata_offset, response.metadata_offset)
                named = [(r.name, _deletion_outcome(r)) for r in response.topics]
                by_name.update(_key_outcomes("topic", chunk, named))
            return DeleteTopicsResult(
                _with_empty_name_errors(topics.topic_names, by_name), None, metadata_offset
            )
        raise TypeError(f"not a TopicCollection: {topics!r}")

    def describe_topics(
        self,
        topics: TopicCollection,
        *,
        min_metadata_offset: int | None = None,
        timeout_s: float | None = None,
    ) -> DescribeTopicsResult:
        """Describe topics by name or by id (Kafka's ``describeTopics(TopicCollection)``),
        from an image that contains ``min_metadata_offset`` (and, with read_your_writes, this
        client's own last write)."""
        deadline = self._deadline(timeout_s)
        offset = self._read_offset(min_metadata_offset)
        metadata_offset = NO_OFFSET
        if isinstance(topics, TopicIdCollection):
            by_id: dict[Uuid, TopicOutcome[TopicDescription]] = {}
            valid_ids = [i for i in topics.topic_ids if i != ZERO_UUID]
            for id_chunk in _chunks(valid_ids, TOPICS_PER_REQUEST_MAX):
                request = admin_pb2.DescribeTopicsRequest(
                    topics=[admin_pb2.TopicRef(topic_id=i.bytes) for i in id_chunk]
                )
                response = self._read("DescribeTopics", request, deadline, offset)
                offset = metadata_offset = max(offset, response.metadata_offset)
                answered = [
                    (_uuid_from_wire("topic_id", r.topic_id), _description_outcome(r))
                    for r in response.topics
                ]
                by_id.update(_key_outcomes("topic id", id_chunk, answered))
            return DescribeTopicsResult(
                None, _with_zero_id_errors(topics.topic_ids, by_id), metadata_offset
            )
        if isinstance(topics, TopicNameCollection):
            by_name: dict[str, TopicOutcome[TopicDescription]] = {}
            valid_names = [n for n in topics.topic_names if n]
            for chunk in _chunks(valid_names, TOPICS_PER_REQUEST_MAX):
                request = admin_pb2.DescribeTopicsRequest(
                    topics=[admin_pb2.TopicRef(name=n) for n in chunk]
                )
                response = self._read("DescribeTopics", request, deadline, offset)
                offset = metadata_offset = max(offset, response.metadata_offset)
                named = [(r.name, _description_outcome(r)) for r in response.topics]
                by_name.update(_key_outcomes("topic", chunk, named))
            return DescribeTopicsResult(
                _with_empty_name_errors(topics.topic_names, by_name), None, metadata_offset
            )
        raise TypeError(f"not a TopicCollection: {topics!r}")

    def list_topics(
        self,
        *,
        exclude_internal: bool = False,
        min_metadata_offset: int | None = None,
        timeout_s: float | None = None,
    ) -> ListTopicsResult:
        """Every topic with its id (Kafka's ``listTopics``; internal topics are listed unless
        ``exclude_internal``, like kafka-topics, unlike Kafka's ``ListTopicsOptions``).

        The server answers in pages (``LIST_TOPICS_PAGE_TOPICS_MAX`` topics); the client follows
        their cursors within the one deadline. Each later page is read at or after the first
        page's offset, so the listing never goes back in time; it is the result's
        ``metadata_offset``, that of the newest page."""
        deadline = self._deadline(timeout_s)
        floor = self._read_offset(min_metadata_offset)
        listings: list[TopicListing] = []
        cursor = ""
        metadata_offset = NO_OFFSET
        while True:
            request = admin_pb2.ListTopicsRequest(exclude_internal=exclude_internal, cursor=cursor)
            response = self._read("ListTopics", request, deadline, floor)
            listings += (
                TopicListing(
                    name=t.name,
                    topic_id=_uuid_from_wire("topic_id", t.topic_id),
                    is_internal=t.is_internal,
                    creation_offset=t.creation_offset,
                )
                for t in response.topics
            )
            metadata_offset = max(metadata_offset, response.metadata_offset)
            if not response.next_cursor:
                break
            if response.next_cursor <= cursor:
                raise UnknownServerError(
                    f"ListTopics: the next page's cursor {response.next_cursor!r} does not come "
                    f"after this page's {cursor!r}; the server would list forever"
                )
            cursor = response.next_cursor
            floor = max(floor, response.metadata_offset)
        listings.sort(key=lambda listing: listing.name)
        return ListTopicsResult(tuple(listings), metadata_offset)

    # ----- cluster -----------------------------------------------------------------------------

    def describe_cluster(
        self, *, min_metadata_offset: int | None = None, timeout_s: float | None = None
    ) -> ClusterDescription:
        """The cluster id, the active controller, the controllers and the brokers (Kafka's
        ``describeCluster``). Also teaches the client every controller's address."""
        deadline = self._deadline(timeout_s)
        response = self._read(
            "DescribeCluster",
            admin_pb2.DescribeClusterRequest(),
            deadline,
            self._read_offset(min_metadata_offset),
        )
        controllers = tuple(ControllerNode(c.node_id, c.host, c.port) for c in response.controllers)
        for controller in controllers:
            self._learn(controller.endpoint)
        metadata_topic_id = _uuid_from_wire("metadata_topic_id", response.metadata_topic_id)
        return ClusterDescription(
            cluster_id=response.cluster_id,
            controller_id=_optional_id(response.controller_id),
            brokers=tuple(
                BrokerNode(
                    broker_id=b.broker_id,
                    host=b.host,
                    port=b.port,
                    rack=b.rack or None,
                    is_fenced=b.is_fenced,
                    broker_epoch=b.broker_epoch,
                )
                for b in response.brokers
            ),
            controllers=controllers,
            metadata_topic_id=None if metadata_topic_id == ZERO_UUID else metadata_topic_id,
            metadata_offset=response.metadata_offset,
        )

    def describe_quorum(self, *, timeout_s: float | None = None) -> QuorumDescription:
        """The Raft quorum as its leader sees it (Kafka's ``describeMetadataQuorum``), from
        ``QuorumService.DescribeQuorum`` on the same listeners. A node that does not lead
        forwards the request; while no leader is known the client backs off and tries the other
        nodes, then raises ``NotLeaderOrFollowerError``."""
        deadline = self._deadline(timeout_s)
        response = self._call(
            "DescribeQuorum", tool_describe_quorum_request(), deadline, mutation=False
        )
        try:
            description = describe_quorum_from_proto(response)
        except MalformedMessageError as exc:
            raise UnknownServerError(f"malformed DescribeQuorum answer: {exc}") from exc
        return description

    # ----- the voter set (KIP-853) -------------------------------------------------------------

    def add_raft_voter(
        self,
        voter_id: int,
        voter_directory_id: Uuid,
        endpoints: Sequence[tuple[str, str, int]],
        *,
        timeout_s: float | None = None,
    ) -> int:
        """Add a controller to the voter set (Kafka's ``addRaftVoter``): it must run as an
        observer (formatted with --no-initial-controllers) with this directory id; the leader
        waits, within the call's timeout, for it to catch up, then commits the new voter set.
        ``endpoints``: (listener name, host, port) where it serves Raft RPCs. Returns the high
        watermark at which the change committed. Raises ``DuplicateVoterError``,
        ``UnsupportedVersionError`` (a static quorum), ``RequestTimedOutError`` (another
        change under way, or the controller did not catch up in time), ..."""
        deadline = self._deadline(timeout_s)
        timeout_ms = max(1, int((deadline - self._clock()) * 1000) - 1_000)
        request = raft_pb2.AddRaftVoterRequest(
            cluster_id="",
            timeout_ms=timeout_ms,
            voter_id=voter_id,
            voter_directory_id=voter_directory_id.bytes,
            endpoints=[
                raft_pb2.VoterEndpoint(name=name, host=host, port=port)
                for name, host, port in endpoints
            ],
        )
        return self._voter_change("AddRaftVoter", request, deadline)

    def remove_raft_voter(
        self, voter_id: int, voter_directory_id: Uuid, *, timeout_s: float | None = None
    ) -> int:
        """Remove a voter (Kafka's ``removeRaftVoter``): both its id and its directory id must
        match. A removed leader hands over once the removal commits. Returns the high watermark
        at which the change committed. Raises ``VoterNotFoundError``, ..."""
        deadline = self._deadline(timeout_s)
        request = raft_pb2.RemoveRaftVoterRequest(
            cluster_id="", voter_id=voter_id, voter_directory_id=voter_directory_id.bytes
        )
        return self._voter_change("RemoveRaftVoter", request, deadline)

    def _voter_change(self, method: str, request: Any, deadline: float) -> int:
        """Send a voter change to the leader; the cluster id comes from DescribeQuorum (a
        client with a certificate is told it)."""
        description = self.describe_quorum(timeout_s=max(0.1, deadline - self._clock()))
        if not description.cluster_id:
            raise AdminTransportError(
                f"{method} needs the cluster id, which the quorum tells only a client with a "
                "certificate (docs/security.md#what-a-node-may-claim)",
                status="UNAUTHENTICATED",
                failures=[],
            )
        request.cluster_id = description.cluster_id
        response = self._call(method, request, deadline, mutation=True)
        return int(response.high_watermark)

    # ----- ACLs (docs/authorization.md) ------------------------------------------------------

    def create_acls(
        self, bindings: Iterable[AclBinding], *, timeout_s: float | None = None
    ) -> CreateAclsResult:
        """Add ACLs (Kafka's ``createAcls``); each succeeds or fails on its own. An ACL that
        already exists succeeds without a change."""
        wanted = _at_most_one_request(bindings, "ACLs")
        deadline = self._deadline(timeout_s)
        request = admin_pb2.CreateAclsRequest(creations=[binding_to_proto(b) for b in wanted])
        response = self._call("CreateAcls", request, deadline, mutation=True)
        outcomes = tuple(
            (binding, None if r.error_code == 0 else error_for(r.error_code, r.error_message))
            for binding, r in zip(wanted, response.results, strict=True)
        )
        return CreateAclsResult(outcomes, response.metadata_offset)

    def delete_acls(
        self, filters: Iterable[AclBindingFilter], *, timeout_s: float | None = None
    ) -> DeleteAclsResult:
        """Remove every ACL each filter matches (Kafka's ``deleteAcls``); the result lists
        what each filter removed."""
        wanted = _at_most_one_request(filters, "filters")
        deadline = self._deadline(timeout_s)
        request = admin_pb2.DeleteAclsRequest(filters=[filter_to_proto(f) for f in wanted])
        response = self._call("DeleteAcls", request, deadline, mutation=True)
        deleted = tuple(
            (f, tuple(binding_from_proto(b) for b in r.matching_acls))
            for f, r in zip(wanted, response.filter_results, strict=True)
        )
        return DeleteAclsResult(deleted, response.metadata_offset)

    def describe_acls(
        self,
        acl_filter: AclBindingFilter | None = None,
        *,
        min_metadata_offset: int | None = None,
        timeout_s: float | None = None,
    ) -> tuple[AclBinding, ...]:
        """The ACLs ``acl_filter`` matches (every ACL without one; Kafka's ``describeAcls``)."""
        deadline = self._deadline(timeout_s)
        request = admin_pb2.DescribeAclsRequest(
            filter=filter_to_proto(acl_filter or AclBindingFilter())
        )
        response = self._read(
            "DescribeAcls", request, deadline, self._read_offset(min_metadata_offset)
        )
        return tuple(binding_from_proto(b) for b in response.acls)

    # ----- routing, retries, deadlines ---------------------------------------------------------

    def _deadline(self, timeout_s: float | None) -> float:
        if self._closed:
            raise RuntimeError("the AdminClient is closed")
        timeout = self._timeout_s if timeout_s is None else timeout_s
        if timeout <= 0:
            raise ValueError(f"timeout_s must be > 0, got {timeout}")
        return self._clock() + timeout

    def _read_offset(self, min_metadata_offset: int | None) -> int:
        offset = NO_OFFSET if min_metadata_offset is None else min_metadata_offset
        if self._read_your_writes:
            offset = max(offset, self._written_offset)
        return offset

    def _read(self, method: str, request: Any, deadline: float, min_offset: int) -> Any:
        if min_offset >= 0:
            request.min_metadata_offset = min_offset
        return self._call(method, request, deadline, mutation=False)

    def _learn(self, address: str) -> None:
        if address not in self._addresses:
            self._addresses.append(address)

    def _channel(self, address: str) -> grpc.Channel:
        return self._channels.get(address)

    def _invoke(self, address: str, method: str, request: Any, timeout_s: float) -> Any:
        channel = self._channel(address)
        if method in _QUORUM_SERVICE_METHODS:
            stub: Any = raft_pb2_grpc.QuorumServiceStub(channel)
        else:
            stub = admin_pb2_grpc.AdminServiceStub(channel)
        return getattr(stub, method)(request, timeout=timeout_s)

    def _first_address(self) -> str:
        if self._controller is not None:
            return self._controller
        return self._addresses[self._next_index % len(self._addresses)]

    def _after(self, address: str) -> str:
        """The address to try after ``address`` failed; also where the next call starts."""
        self._next_index = (self._addresses.index(address) + 1) % len(self._addresses)
        return self._addresses[self._next_index]

    def _backoff_s(self, retry: int) -> float:
        base = min(self._retry_backoff_max_s, self._retry_backoff_s * 2.0 ** min(retry, 30))
        jitter = 1 + RETRY_BACKOFF_JITTER * (2 * self._rng.random() - 1)
        return min(self._retry_backoff_max_s, base * jitter)

    def _call(self, method: str, request: Any, deadline: float, *, mutation: bool) -> Any:
        """One RPC with redirects and bounded retries; returns a response whose request-level
        error_code is NONE, or raises ``AdminError``.

        At most ``retries_max + 1`` attempts, each with the call's remaining time as its gRPC
        deadline. Every retry backs off first, except the first redirect to a controller named
        by a NOT_CONTROLLER answer (so stale answers naming each other still back off).
        """
        address = self._first_address()
        failures: list[str] = []
        redirected_to: set[str] = set()
        last_status: str | None = None
        last_error: AdminError | None = None
        fresh_redirect = False
        for attempt in range(self._retries_max + 1):
            if attempt > 0 and not fresh_redirect:
                pause = self._backoff_s(attempt - 1)
                self._sleep(min(pause, max(0.0, deadline - self._clock())))
            fresh_redirect = False
            remaining = deadline - self._clock()
            if remaining <= 0:
                raise self._timed_out(method, mutation, failures)
            try:
                response = self._invoke(address, method, request, remaining)
            except grpc.RpcError as exc:
                status, details = _status_name(exc)
                last_status = status.name if status is not None else type(exc).__name__
                failures.append(f"{address}: {last_status} ({details})")
                if self._controller == address:
                    self._controller = None
                if status is grpc.StatusCode.DEADLINE_EXCEEDED:
                    raise self._timed_out(method, mutation, failures) from None
                if status not in _RETRIABLE_STATUSES:
                    raise AdminTransportError(
                        f"{method} failed at {address}: {last_status} ({details})",
                        status=last_status,
                        failures=failures,
                    ) from None
                last_error = None
                address = self._after(address)
                continue

            code = response.error_code
            message = response.error_message
            if method == "DescribeQuorum":
                if code == ErrorCode.NONE and response.leader_id >= 0:
                    return response
                if code not in (ErrorCode.NONE, ErrorCode.NOT_LEADER_OR_FOLLOWER):
                    raise error_for(code, message)
                # No leader known (an election is under way): back off, ask another node.
                message = message or "no leader is known"
                failures.append(f"{address}: NOT_LEADER_OR_FOLLOWER ({message})")
                last_error = NotLeaderOrFollowerError(message)
                address = self._after(address)
                continue
            if method in _VOTER_CHANGE_METHODS and code == ErrorCode.NOT_LEADER_OR_FOLLOWER:
                # Voter changes go to the Raft leader (the active controller): follow it.
                failures.append(f"{address}: NOT_LEADER_OR_FOLLOWER ({message})")
                last_error = NotLeaderOrFollowerError(message)
                endpoint = response.leader_endpoint or None
                if endpoint is not None and endpoint != address:
                    self._learn(endpoint)
                    fresh_redirect = endpoint not in redirected_to
                    redirected_to.add(endpoint)
                    address = endpoint
                else:
                    address = self._after(address)
                continue
            if code == ErrorCode.NONE:
                if method in _VOTER_CHANGE_METHODS:
                    return response
                if mutation:
                    # Only the active controller accepts mutations: remember it.
                    self._controller = address
                    self._written_offset = max(self._written_offset, response.metadata_offset)
                return response

            failures.append(f"{address}: {error_name(code)} ({message})")
            if code == ErrorCode.NOT_CONTROLLER:
                controller_id = _optional_id(response.controller_id)
                endpoint = response.controller_endpoint or None
                last_error = NotControllerError(
                    message, controller_id=controller_id, controller_endpoint=endpoint
                )
                if self._controller == address:
                    self._controller = None
                if endpoint is not None and endpoint != address:
                    self._learn(endpoint)
                    self._controller = endpoint
                    fresh_redirect = endpoint not in redirected_to
                    redirected_to.add(endpoint)
                    address = endpoint
                else:
                    address = self._after(address)
                continue
            error = error_for(code, message)
            # A mutation that may have happened is not repeated (Kafka neither): only reads
            # retry a retriable request-level error such as REQUEST_TIMED_OUT, elsewhere.
            if mutation or not error.retriable:
                raise error
            last_error = error
            address = self._after(address)

        summary = "; ".join(failures)
        attempts = self._retries_max + 1
        if isinstance(last_error, NotControllerError):
            raise NotControllerError(
                f"no active controller accepted {method} in {attempts} attempts: {summary}",
                controller_id=last_error.controller_id,
                controller_endpoint=last_error.controller_endpoint,
            )
        if last_error is not None:
            raise last_error
        hint = (
            " (the client speaks PLAINTEXT; if the listeners are SSL, give "
            "security.protocol=SSL and the ssl.* keys, e.g. --command-config client.properties)"
            if self._security.protocol == "PLAINTEXT"
            else ""
        )
        raise AdminConnectionError(
            f"cannot reach a controller for {method} in {attempts} attempts: {summary}{hint}",
            status=last_status,
            failures=failures,
        )

    def _timed_out(self, method: str, mutation: bool, failures: Sequence[str]) -> AdminTimeoutError:
        message = f"{method} did not complete within its deadline"
        if failures:
            message += f" (attempts: {'; '.join(failures)})"
        if mutation:
            message += "; its outcome is unknown: describe the topics to find out"
        return AdminTimeoutError(message, status="DEADLINE_EXCEEDED", failures=failures)


_VOTER_CHANGE_METHODS: Final = frozenset({"AddRaftVoter", "RemoveRaftVoter"})
_QUORUM_SERVICE_METHODS: Final = frozenset({"DescribeQuorum", *_VOTER_CHANGE_METHODS})


# ----- per-topic mapping -------------------------------------------------------------------------


def _creatable_topic(topic: NewTopic) -> admin_pb2.CreatableTopic:
    if not isinstance(topic, NewTopic):
        raise TypeError(f"create_topics takes NewTopic values, got {topic!r}")
    assignments = [
        admin_pb2.CreatableReplicaAssignment(partition_index=p, broker_ids=list(brokers))
        for p, brokers in sorted((topic.replica_assignments or {}).items())
    ]
    return admin_pb2.CreatableTopic(
        name=topic.name,
        num_partitions=NO_ID if topic.num_partitions is None else topic.num_partitions,
        replication_factor=NO_ID if topic.replication_factor is None else topic.replication_factor,
        assignments=assignments,
        configs=[admin_pb2.TopicConfig(name=k, value=v) for k, v in topic.configs.items()],
    )


def _creation_outcome(
    result: admin_pb2.CreatableTopicResult, validate_only: bool
) -> TopicOutcome[TopicMetadataAndConfig]:
    error = _topic_error(result.error_code, result.error_message)
    if error is not None:
        return TopicOutcome(None, error)
    topic_id = _uuid_from_wire("topic_id", result.topic_id)
    if topic_id == ZERO_UUID and not validate_only:
        error = UnknownServerError(f"malformed answer: topic {result.name!r} created without id")
        return TopicOutcome(None, error)
    return TopicOutcome(
        TopicMetadataAndConfig(
            name=result.name,
            topic_id=topic_id,
            creation_offset=result.creation_offset,
            num_partitions=result.num_partitions,
            replication_factor=result.replication_factor,
            configs=_configs_from_wire(result.configs),
        )
    )


def _partitions_topic(key: str | Uuid, growth: NewPartitions) -> admin_pb2.CreatePartitionsTopic:
    assignments = [
        admin_pb2.CreatePartitionsAssignment(broker_ids=list(brokers))
        for brokers in growth.new_assignments or ()
    ]
    if isinstance(key, Uuid):
        return admin_pb2.CreatePartitionsTopic(
            topic_id=key.bytes, count=growth.total_count, assignments=assignments
        )
    return admin_pb2.CreatePartitionsTopic(
        name=key, count=growth.total_count, assignments=assignments
    )


def _partitions_outcome(
    key: str | Uuid, growth: NewPartitions, result: admin_pb2.CreatePartitionsTopicResult
) -> TopicOutcome[PartitionsCreated]:
    topic_id = _uuid_from_wire("topic_id", result.topic_id)
    if (isinstance(key, Uuid) and result.topic_id and topic_id != key) or (
        isinstance(key, str) and result.name != key
    ):
        raise UnknownServerError(
            f"malformed answer: a CreatePartitions result for {result.name!r} / {topic_id} "
            f"where {key} was asked for"
        )
    error = _topic_error(result.error_code, result.error_message)
    if error is not None:
        return TopicOutcome(None, error)
    return TopicOutcome(PartitionsCreated(result.name, topic_id, growth.total_count))


def _deletion_outcome(result: admin_pb2.DeletableTopicResult) -> TopicOutcome[DeletedTopic]:
    error = _topic_error(result.error_code, result.error_message)
    if error is not None:
        return TopicOutcome(None, error)
    return TopicOutcome(DeletedTopic(result.name, _uuid_from_wire("topic_id", result.topic_id)))


def _description_outcome(
    result: admin_pb2.DescribeTopicResult,
) -> TopicOutcome[TopicDescription]:
    error = _topic_error(result.error_code, result.error_message)
    if error is not None:
        return TopicOutcome(None, error)
    partitions = sorted(
        (
            TopicPartitionInfo(
                partition=p.partition_index,
                leader=_optional_id(p.leader_id),
                replicas=tuple(p.replica_nodes),
                isr=tuple(p.isr_nodes),
                leader_epoch=p.leader_epoch,
                offline_replicas=tuple(p.offline_replicas),
            )
            for p in result.partitions
        ),
        key=lambda info: info.partition,
    )
    return TopicOutcome(
        TopicDescription(
            name=result.name,
            topic_id=_uuid_from_wire("topic_id", result.topic_id),
            is_internal=result.is_internal,
            creation_offset=result.creation_offset,
            partitions=tuple(partitions),
            configs=_configs_from_wire(result.configs),
        )
    )


def _with_zero_id_errors(
    requested: Sequence[Uuid], outcomes: Mapping[Uuid, TopicOutcome[T]]
) -> dict[Uuid, TopicOutcome[T]]:
    """Kafka fails ZERO_UUID locally: it means "no id" and cannot name a topic."""
    return {
        topic_id: outcomes[topic_id]
        if topic_id != ZERO_UUID
        else TopicOutcome(
            None,
            InvalidTopicError(f"the topic id {topic_id} (ZERO_UUID) cannot name a topic"),
        )
        for topic_id in requested
    }


def _with_empty_name_errors(
    requested: Sequence[str], outcomes: Mapping[str, TopicOutcome[T]]
) -> dict[str, TopicOutcome[T]]:
    """Kafka fails an empty topic name locally, without asking the server."""
    return {
        name: outcomes[name]
        if name
        else TopicOutcome(None, InvalidTopicError("an empty string is not a topic name"))
        for name in requested
    }
