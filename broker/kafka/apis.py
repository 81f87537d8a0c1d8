"""What the Kafka listener answers: one handler per served API (Kafka's ``KafkaApis``).

The data APIs (Produce, Fetch, ListOffsets, OffsetForLeaderEpoch) have modules of their own
(``produce.py``, ``fetch.py``, ``offsets.py``, over ``data_plane.py``), as do DescribeConfigs
(``describe_configs.py``) and the config writes (``alter_configs.py``); this one registers them
beside the metadata and admin APIs it serves itself.

Reads (Metadata, DescribeCluster, DescribeConfigs, DescribeTopicPartitions, DescribeAcls) are
served from the broker's own ``MetadataImage``, authorized with the ACLs of that image, as the
broker's admin gRPC serves them (docs/authorization.md). Writes (CreateTopics, DeleteTopics,
CreateAcls, DeleteAcls) are forwarded to the active controller with the client's principal
(KIP-590, ``broker/kafka/forwarding.py``), which authorizes and validates them; the offset that
committed them is remembered per connection, and the next read on that connection first waits,
bounded, until the image has applied it (read-your-writes, docs/kafka-listener.md).

Every handler builds one plain mapping shaped like the newest version of its response and lets
``protocol.build`` keep what the requested version has, so every version of an API is answered
by the same code. Error codes are Kafka's; topic ids follow KIP-516 (a zero id is "none").
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final, Protocol

import structlog
from kio.schema.api_versions.v0.response import ApiVersionsResponse as ApiVersionsResponseV0
from kio.schema.errors import ErrorCode as KioErrorCode

from broker.kafka.alter_configs import AlterConfigsHandler
from broker.kafka.client_quotas import AlterClientQuotasHandler, DescribeClientQuotasHandler
from broker.kafka.data_plane import DataPlane
from broker.kafka.describe_configs import (
    CONFIG_SOURCE_DEFAULT,
    CONFIG_SOURCE_DYNAMIC_TOPIC,
    DescribeConfigsHandler,
)
from broker.kafka.elect_leaders import ElectLeadersHandler
from broker.kafka.features import api_versions_features
from broker.kafka.fetch import SESSION_SLOTS_DEFAULT, FetchHandler
from broker.kafka.forwarding import ForwardingError
from broker.kafka.group_apis import GroupApis
from broker.kafka.groups import CoordinatorSettings, GroupCoordinator
from broker.kafka.log_dirs import DescribeLogDirsHandler
from broker.kafka.offset_apis import OffsetApis
from broker.kafka.offsets import OffsetsHandler
from broker.kafka.produce import CLOSE_CONNECTION, NO_RESPONSE, ProduceHandler
from broker.kafka.producer_id import InitProducerIdHandler
from broker.kafka.producers import DescribeProducersHandler
from broker.kafka.protocol import (
    API_VERSIONS,
    CREATE_PARTITIONS_FORWARDABLE,
    ApiKey,
    Request,
    UnsupportedRequest,
    build,
    by_api_key,
    kafka_uuid,
    our_uuid,
)
from broker.kafka.quorum_api import DescribeQuorumHandler, QuorumUnreachableError
from broker.kafka.transactions import TransactionsHandler
from quorum.config import NodeConfig
from quorum.controller.acls import describe_acls
from quorum.controller.configs import TOPIC_CONFIG_DEFAULTS
from quorum.controller.names import legal_name_error
from quorum.errors import ErrorCode
from quorum.ids import ZERO_UUID, Uuid
from quorum.metadata.image import MetadataImage, TopicImage
from quorum.rpc.v1 import admin_pb2
from quorum.security.acls import AclBinding, AclOperation, ResourceType
from quorum.security.authorization import RequestAuthorization
from quorum.security.identity import Caller
from quorum.server.driver import ShuttingDownError, TooManyWaitersError
from quorum.wire.acls import filter_from_proto

__all__ = ["CLOSE_CONNECTION", "NO_RESPONSE", "AdminForwarder", "KafkaApis", "Session"]

# Kafka's "authorized operations were not asked for" (INT32_MIN in every *_authorized_operations).
AUTHORIZED_OPERATIONS_OMITTED: Final = -(2**31)
# The operations this project's ACLs know, reported in the authorized-operations bit fields
# (bit n = Kafka's AclOperation code n). Kafka also lists DESCRIBE_CONFIGS, ALTER_CONFIGS.
TOPIC_OPERATIONS: Final = (
    AclOperation.READ,
    AclOperation.WRITE,
    AclOperation.CREATE,
    AclOperation.DELETE,
    AclOperation.ALTER,
    AclOperation.DESCRIBE,
)
CLUSTER_OPERATIONS: Final = (
    AclOperation.CREATE,
    AclOperation.ALTER,
    AclOperation.DESCRIBE,
    AclOperation.CLUSTER_ACTION,
)
# DescribeTopicPartitions: at most this many partitions per response, whatever the request's
# limit (Kafka's max.request.partition.size.limit default).
DESCRIBE_TOPIC_PARTITIONS_PARTITIONS_MAX: Final = 2_000
# A read on a connection that wrote waits at most this long for the write's offset to be
# applied here, then answers from the image it has (our choice: well under the 30 s
# request.timeout.ms of Kafka's clients; the broker normally applies within milliseconds).
READ_YOUR_WRITES_WAIT_MS_MAX: Final = 10_000
# Kafka's DescribeCluster endpoint types (KIP-919): a broker describes brokers only.
ENDPOINT_TYPE_BROKERS: Final = 1
# KIP-511: what ApiVersions v3+ accepts as a client software name or version.
SOFTWARE_NAME_RE: Final = re.compile(r"[a-zA-Z0-9](?:[a-zA-Z0-9\-.]*[a-zA-Z0-9])?")


class AdminForwarder(Protocol):
    """Hands a write to the active controller (``broker.kafka.forwarding.Forwarder``)."""

    async def call(self, method: str, request: Any, caller: Caller, timeout_ms: int) -> Any:
        """The controller's answer to admin RPC ``method``; raises ``ForwardingError``."""


@dataclass
class Session:
    """One client connection: who it is, which listener it came in on, the offset of its last
    write (-1: none), which its next read waits for, and for the request quota
    (``broker/kafka/quota.py``) the throttle time its last answer carried, for which nothing
    more is read, and the thread time of that answer's encoding, charged with the next one."""

    caller: Caller
    listener_name: str
    written_offset: int = -1
    throttle_ms: int = 0
    unbilled_s: float = 0.0


async def _no_quorum(request: Any) -> Any:
    raise QuorumUnreachableError("this listener was built without a controller client")


def _ms(value: Any) -> int:
    """A kio timedelta field as integer milliseconds."""
    return int(value.total_seconds() * 1000)


class KafkaApis:
    def __init__(
        self,
        *,
        broker_id: int,
        cluster_id: str,
        image: Callable[[], MetadataImage],
        authorization: RequestAuthorization,
        forwarder: AdminForwarder,
        wait_applied: Callable[[int, float], Awaitable[bool]],
        data: DataPlane | None = None,
        describe_quorum: Callable[[Any], Awaitable[Any]] | None = None,
        kraft_version: Callable[[], int] = lambda: 0,
        next_producer_id: Callable[[], Awaitable[int]] | None = None,
        node_config: NodeConfig | None = None,
        groups: GroupCoordinator | CoordinatorSettings | None = None,
    ) -> None:
        """``wait_applied(offset, timeout_s)``: True once the image has applied ``offset``
        (False on timeout). ``data``: the partition logs and their threads (None: a broker
        without logs, whose data requests are answered NOT_LEADER_OR_FOLLOWER).
        ``describe_quorum``: the controllers' answer to a gRPC DescribeQuorum (None: no
        controller to ask, answered as unreachable).
        ``kraft_version``: the KIP-853 level the broker's Raft observer has in force.
        ``next_producer_id``: a new producer id for InitProducerId (``broker/producer_ids.py``;
        None: answered COORDINATOR_LOAD_IN_PROGRESS). ``node_config``: this broker's
        configuration, which DescribeConfigs reports (``describe_configs.py``).
        ``groups``: the broker's group coordinator, shared by its Kafka listeners, or the
        configs of one of this listener's own (docs/groups.md; without a way to create
        ``__consumer_offsets``: FindCoordinator waits for it to exist)."""
        self.broker_id = broker_id
        self.cluster_id = cluster_id
        self._image = image
        self._authorization = authorization
        self._forwarder = forwarder
        self._wait_applied = wait_applied
        self._kraft_version = kraft_version
        self._log = structlog.get_logger("broker.kafka").bind(node_id=broker_id)
        self.data = data if data is not None else DataPlane(None, broker_id=broker_id)
        produce = ProduceHandler(self.data, authorization, self._read_image)
        fetch = FetchHandler(
            self.data,
            authorization,
            self._read_image,
            cluster_id=cluster_id,
            session_slots=(
                node_config.max_incremental_fetch_session_cache_slots
                if node_config is not None
                else SESSION_SLOTS_DEFAULT
            ),
        )
        offsets = OffsetsHandler(self.data, authorization, self._read_image)
        quorum = DescribeQuorumHandler(
            describe_quorum or _no_quorum, authorization, self._read_image, cluster_id=cluster_id
        )
        init_producer_id = InitProducerIdHandler(
            authorization, self._read_image, next_producer_id, broker_id=broker_id
        )
        transactions = TransactionsHandler(authorization)
        self.groups = (
            groups
            if isinstance(groups, GroupCoordinator)
            else GroupCoordinator(
                self.data, image, broker_id=broker_id, settings=groups or CoordinatorSettings()
            )
        )
        group_apis = GroupApis(self.groups, authorization, self._read_image)
        offset_apis = OffsetApis(self.groups, authorization, self._read_image)
        handlers: dict[ApiKey, Callable[[Request, Session], Awaitable[Any]]] = {
            ApiKey.PRODUCE: produce.handle,
            ApiKey.FETCH: fetch.handle,
            ApiKey.LIST_OFFSETS: offsets.list_offsets,
            ApiKey.OFFSET_FOR_LEADER_EPOCH: offsets.offset_for_leader_epoch,
            ApiKey.INIT_PRODUCER_ID: init_producer_id.handle,
            ApiKey.FIND_COORDINATOR: group_apis.find_coordinator,
            ApiKey.JOIN_GROUP: group_apis.join_group,
            ApiKey.SYNC_GROUP: group_apis.sync_group,
            ApiKey.HEARTBEAT: group_apis.heartbeat,
            ApiKey.LEAVE_GROUP: group_apis.leave_group,
            ApiKey.LIST_GROUPS: group_apis.list_groups,
            ApiKey.DESCRIBE_GROUPS: group_apis.describe_groups,
            ApiKey.DELETE_GROUPS: group_apis.delete_groups,
            ApiKey.OFFSET_COMMIT: offset_apis.offset_commit,
            ApiKey.OFFSET_FETCH: offset_apis.offset_fetch,
            ApiKey.OFFSET_DELETE: offset_apis.offset_delete,
            ApiKey.METADATA: self._metadata,
            ApiKey.API_VERSIONS: self._api_versions,
            ApiKey.CREATE_TOPICS: self._create_topics,
            ApiKey.DELETE_TOPICS: self._delete_topics,
            ApiKey.DESCRIBE_ACLS: self._describe_acls,
            ApiKey.CREATE_ACLS: self._create_acls,
            ApiKey.DELETE_ACLS: self._delete_acls,
            ApiKey.DESCRIBE_CONFIGS: DescribeConfigsHandler(
                broker_id=broker_id,
                authorization=authorization,
                read_image=self._read_image,
                denied=self._denied,
                node_config=node_config,
            ).handle,
            ApiKey.DESCRIBE_QUORUM: quorum.handle,
            ApiKey.DESCRIBE_CLUSTER: self._describe_cluster,
            ApiKey.DESCRIBE_TOPIC_PARTITIONS: self._describe_topic_partitions,
            ApiKey.ELECT_LEADERS: ElectLeadersHandler(
                authorization, self._read_image, self._forward
            ).handle,
            ApiKey.DESCRIBE_LOG_DIRS: DescribeLogDirsHandler(
                self.data, authorization, self._read_image
            ).handle,
            ApiKey.DESCRIBE_PRODUCERS: DescribeProducersHandler(
                self.data, authorization, self._read_image
            ).handle,
            ApiKey.LIST_TRANSACTIONS: transactions.list_transactions,
            ApiKey.DESCRIBE_TRANSACTIONS: transactions.describe_transactions,
            ApiKey.ALTER_CONFIGS: AlterConfigsHandler(
                self._forward, incremental=False, broker_id=broker_id
            ).handle,
            ApiKey.INCREMENTAL_ALTER_CONFIGS: AlterConfigsHandler(
                self._forward, incremental=True, broker_id=broker_id
            ).handle,
            ApiKey.DESCRIBE_CLIENT_QUOTAS: DescribeClientQuotasHandler(
                authorization, self._read_image
            ).handle,
            ApiKey.ALTER_CLIENT_QUOTAS: AlterClientQuotasHandler(self._forward).handle,
        }
        if CREATE_PARTITIONS_FORWARDABLE:
            handlers[ApiKey.CREATE_PARTITIONS] = self._create_partitions
        # By the header's plain int: a request's lookup costs no enum comparison.
        self._handlers = by_api_key(handlers)
        assert set(self._handlers) == set(API_VERSIONS)

    def client_quotas(self) -> Mapping[tuple[tuple[str, str | None], ...], Mapping[str, float]]:
        """The client quotas of the broker's image (docs/kafka-listener.md#client-quotas)."""
        return self._image().client_quotas

    async def handle(self, request: Request, session: Session) -> Any:
        """The response entity for ``request``, or ``NO_RESPONSE`` / ``CLOSE_CONNECTION``
        (Produce with acks=0)."""
        values = await self._handlers[request.api_key](request, session)
        if values is NO_RESPONSE or values is CLOSE_CONNECTION:
            return values
        return build(request.response_type, {"throttle_time": 0, **values})

    def unsupported(self, request: UnsupportedRequest) -> Any | None:
        """The answer to an API or version this listener does not serve, or None (close)."""
        if request.response_type is None:  # ApiVersions at a version we lack (KIP-511)
            return build(
                ApiVersionsResponseV0,
                {"api_keys": self._api_keys()},
                error_code=ErrorCode.UNSUPPORTED_VERSION,
            )
        return build(request.response_type, {}, error_code=ErrorCode.UNSUPPORTED_VERSION)

    # ----- shared ---------------------------------------------------------------------------

    async def _read_image(self, session: Session) -> MetadataImage:
        """The image to answer a read from: one that has applied the connection's last write,
        waiting for it at most ``READ_YOUR_WRITES_WAIT_MS_MAX``."""
        wanted = session.written_offset
        if wanted >= 0 and self._image().offset < wanted:
            try:
                reached = await self._wait_applied(wanted, READ_YOUR_WRITES_WAIT_MS_MAX / 1000)
            except (TooManyWaitersError, ShuttingDownError):
                reached = False
            if not reached:
                self._log.warning(
                    "read_your_writes_timed_out",
                    wanted_offset=wanted,
                    applied_offset=self._image().offset,
                    peer=session.caller.peer,
                )
        return self._image()

    def _allows_topic(
        self, caller: Caller, image: MetadataImage, operation: AclOperation, name: str
    ) -> bool:
        return self._authorization.allows_topic(caller, image, operation, name)

    def _operations(
        self,
        caller: Caller,
        image: MetadataImage,
        resource_type: ResourceType,
        name: str,
        operations: Iterable[AclOperation],
    ) -> int:
        """Kafka's authorized-operations bit field: bit n set when operation n is allowed."""
        bits = 0
        for operation in operations:
            if self._authorization.allows(caller, image, operation, resource_type, name):
                bits |= 1 << int(operation)
        return bits

    def _brokers(self, image: MetadataImage, listener_name: str) -> list[dict[str, Any]]:
        """The live brokers with an endpoint of this listener's name (Kafka lists a broker on
        the listener the request came in on). This broker is always live: it is answering."""
        brokers = []
        for broker in sorted(image.brokers.values(), key=lambda b: b.broker_id):
            if broker.fenced and broker.broker_id != self.broker_id:
                continue
            endpoint = next((e for e in broker.endpoints if e.name == listener_name), None)
            if endpoint is None:
                continue
            brokers.append(
                {
                    "node_id": broker.broker_id,
                    "broker_id": broker.broker_id,
                    "host": endpoint.host,
                    "port": endpoint.port,
                    "rack": broker.rack,
                }
            )
        return brokers

    def _partitions(self, image: MetadataImage, topic: TopicImage, first: int = 0) -> list[Any]:
        result = []
        for index in sorted(topic.partitions):
            if index < first:
                continue
            state = topic.partitions[index]
            offline = [
                replica
                for replica in state.replicas
                if (broker := image.brokers.get(replica)) is None or broker.fenced
            ]
            result.append(
                {
                    "error_code": KioErrorCode.leader_not_available
                    if state.leader < 0
                    else ErrorCode.NONE,
                    "partition_index": index,
                    "leader_id": state.leader,
                    "leader_epoch": state.leader_epoch,
                    "replica_nodes": list(state.replicas),
                    "isr_nodes": list(state.isr),
                    "offline_replicas": offline,
                    # Kafka's brokers send empty lists when there is no ELR (KIP-966), and
                    # Kafka's AdminClient dereferences them: null would fail it.
                    "eligible_leader_replicas": [],
                    "last_known_elr": [],
                }
            )
        return result

    def _topic(
        self,
        image: MetadataImage,
        topic: TopicImage,
        caller: Caller,
        include_operations: bool,
        partitions: list[Any] | None = None,
    ) -> dict[str, Any]:
        return {
            "error_code": ErrorCode.NONE,
            "name": topic.name,
            "topic_id": kafka_uuid(topic.topic_id),
            "is_internal": topic.internal,
            "partitions": self._partitions(image, topic) if partitions is None else partitions,
            "topic_authorized_operations": self._operations(
                caller, image, ResourceType.TOPIC, topic.name, TOPIC_OPERATIONS
            )
            if include_operations
            else AUTHORIZED_OPERATIONS_OMITTED,
        }

    @staticmethod
    def _topic_error(
        code: ErrorCode | KioErrorCode, name: str | None, topic_id: Uuid = ZERO_UUID
    ) -> dict[str, Any]:
        return {
            "error_code": code,
            "name": name,
            "topic_id": kafka_uuid(topic_id),
            "is_internal": False,
            "partitions": [],
            "topic_authorized_operations": AUTHORIZED_OPERATIONS_OMITTED,
        }

    def _denied(self, caller: Caller, operation: AclOperation, what: str) -> str:
        return (
            f"{caller.principal} may not {operation.name} {what}: the ACLs do not allow it "
            f"(metaquorum acls --add --allow-principal {caller.principal} --operation "
            f"{operation.name} ...)"
        )

    # ----- ApiVersions ----------------------------------------------------------------------

    @staticmethod
    def _api_keys() -> list[dict[str, int]]:
        return [
            {"api_key": key, "min_version": low, "max_version": high}
            for key, (low, high) in sorted(API_VERSIONS.items())
        ]

    async def _api_versions(self, request: Request, session: Session) -> dict[str, Any]:
        body = request.body
        for field in ("client_software_name", "client_software_version"):
            value = getattr(body, field, None)
            if value is not None and not SOFTWARE_NAME_RE.fullmatch(value):
                return {"error_code": ErrorCode.INVALID_REQUEST, "api_keys": []}
        return {
            "error_code": ErrorCode.NONE,
            "api_keys": self._api_keys(),
            **api_versions_features(self._image().offset, self._kraft_version()),
            "zk_migration_ready": False,
        }

    # ----- Metadata -------------------------------------------------------------------------

    async def _metadata(self, request: Request, session: Session) -> dict[str, Any]:
        """Possible topic codes: TOPIC_AUTHORIZATION_FAILED (asked by name: whether or not
        the topic exists), UNKNOWN_TOPIC_ID (v12, by id), UNKNOWN_TOPIC_OR_PARTITION,
        INVALID_TOPIC_EXCEPTION (a name no topic can have), INVALID_REQUEST (a name and an id,
        or neither; an id before v12). Topics are never created on demand."""
        body = request.body
        version = request.api_version
        image = await self._read_image(session)
        caller = session.caller
        include_operations = bool(getattr(body, "include_topic_authorized_operations", False))
        topics: list[dict[str, Any]] = []
        if body.topics is None or (version == 0 and not body.topics):
            for topic in sorted(image.topics_by_id.values(), key=lambda t: t.name):
                if self._allows_topic(caller, image, AclOperation.DESCRIBE, topic.name):
                    topics.append(self._topic(image, topic, caller, include_operations))
        else:
            for entry in body.topics:
                found = self._metadata_topic(
                    image,
                    caller,
                    name=entry.name,
                    topic_id=our_uuid(getattr(entry, "topic_id", None)),
                    version=version,
                    include_operations=include_operations,
                )
                if found.get("name") is None and version < 12:
                    found["name"] = ""  # a non-nullable field before v12
                topics.append(found)
        include_cluster = bool(getattr(body, "include_cluster_authorized_operations", False))
        return {
            "brokers": self._brokers(image, session.listener_name),
            "cluster_id": self.cluster_id,
            # KIP-590: clients send admin writes to the "controller"; this broker forwards them.
            "controller_id": self.broker_id,
            "topics": topics,
            "cluster_authorized_operations": self._operations(
                caller, image, ResourceType.CLUSTER, "kafka-cluster", CLUSTER_OPERATIONS
            )
            if include_cluster
            else AUTHORIZED_OPERATIONS_OMITTED,
        }

    def _metadata_topic(
        self,
        image: MetadataImage,
        caller: Caller,
        *,
        name: str | None,
        topic_id: Uuid,
        version: int,
        include_operations: bool,
    ) -> dict[str, Any]:
        if topic_id != ZERO_UUID:
            if name == "":
                name = None  # Kafka's Java clients send "" with an id; its brokers read no name.
            if version < 12 or name is not None:
                return self._topic_error(ErrorCode.INVALID_REQUEST, name, topic_id)
            topic = image.topic(topic_id)
            if topic is None:
                return self._topic_error(ErrorCode.UNKNOWN_TOPIC_ID, None, topic_id)
            if not self._allows_topic(caller, image, AclOperation.DESCRIBE, topic.name):
                # By id, the name is not told: the caller may not know it.
                return self._topic_error(ErrorCode.TOPIC_AUTHORIZATION_FAILED, None, topic_id)
            return self._topic(image, topic, caller, include_operations)
        if name is None:
            return self._topic_error(ErrorCode.INVALID_REQUEST, None)
        if not self._allows_topic(caller, image, AclOperation.DESCRIBE, name):
            return self._topic_error(ErrorCode.TOPIC_AUTHORIZATION_FAILED, name)
        if legal_name_error(name) is not None:
            return self._topic_error(ErrorCode.INVALID_TOPIC_EXCEPTION, name)
        topic = image.topic_by_name(name)
        if topic is None:
            return self._topic_error(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, name)
        return self._topic(image, topic, caller, include_operations)

    # ----- DescribeCluster ------------------------------------------------------------------

    async def _describe_cluster(self, request: Request, session: Session) -> dict[str, Any]:
        body = request.body
        endpoint_type = getattr(body, "endpoint_type", ENDPOINT_TYPE_BROKERS)
        values: dict[str, Any] = {
            "endpoint_type": endpoint_type,
            "cluster_id": self.cluster_id,
            "controller_id": self.broker_id,
            "cluster_authorized_operations": AUTHORIZED_OPERATIONS_OMITTED,
        }
        if endpoint_type != ENDPOINT_TYPE_BROKERS:
            return values | {
                "error_code": KioErrorCode.unsupported_endpoint_type,
                "error_message": "a broker describes brokers only (endpoint type 1); the "
                "controllers are described by `metaquorum quorum describe`",
                "brokers": [],
            }
        image = await self._read_image(session)
        if body.include_cluster_authorized_operations:
            values["cluster_authorized_operations"] = self._operations(
                session.caller, image, ResourceType.CLUSTER, "kafka-cluster", CLUSTER_OPERATIONS
            )
        return values | {
            "error_code": ErrorCode.NONE,
            "error_message": None,
            "brokers": self._brokers(image, session.listener_name),
        }

    # ----- DescribeTopicPartitions ----------------------------------------------------------

    async def _describe_topic_partitions(
        self, request: Request, session: Session
    ) -> dict[str, Any]:
        """Topics in name order from the cursor on, their partitions from the cursor's
        partition on, at most ``response_partition_limit`` partitions (bounded by
        ``DESCRIBE_TOPIC_PARTITIONS_PARTITIONS_MAX``); ``next_cursor`` names where the next
        page starts. No topics named: every topic the caller may describe."""
        body = request.body
        image = await self._read_image(session)
        caller = session.caller
        limit = body.response_partition_limit
        if not 0 < limit <= DESCRIBE_TOPIC_PARTITIONS_PARTITIONS_MAX:
            limit = DESCRIBE_TOPIC_PARTITIONS_PARTITIONS_MAX
        named = bool(body.topics)
        if named:
            names = sorted({entry.name for entry in body.topics})
        else:
            names = sorted(
                topic.name
                for topic in image.topics_by_id.values()
                if self._allows_topic(caller, image, AclOperation.DESCRIBE, topic.name)
            )
        cursor = body.cursor
        start_name = None if cursor is None else cursor.topic_name
        start_partition = 0 if cursor is None else max(0, cursor.partition_index)
        remaining = limit
        topics: list[dict[str, Any]] = []
        next_cursor = None
        for name in names:
            if start_name is not None and name < start_name:
                continue
            first = start_partition if name == start_name else 0
            if named and not self._allows_topic(caller, image, AclOperation.DESCRIBE, name):
                topics.append(self._topic_error(ErrorCode.TOPIC_AUTHORIZATION_FAILED, name))
                continue
            topic = image.topic_by_name(name)
            if topic is None:
                topics.append(self._topic_error(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, name))
                continue
            if remaining == 0:
                next_cursor = {"topic_name": name, "partition_index": first}
                break
            partitions = self._partitions(image, topic, first)
            taken = partitions[:remaining]
            topics.append(self._topic(image, topic, caller, True, taken))
            remaining -= len(taken)
            if len(taken) < len(partitions):
                next_cursor = {
                    "topic_name": name,
                    "partition_index": partitions[len(taken)]["partition_index"],
                }
                break
        return {"topics": topics, "next_cursor": next_cursor}

    # ----- writes, forwarded to the active controller --------------------------------------

    async def _forward(
        self, method: str, pb: Any, session: Session, timeout_ms: int
    ) -> tuple[Any, tuple[ErrorCode, str] | None]:
        """(the controller's answer, None) or (None, (code, message)) for every entry: the
        forwarding failed, or the controller answered a request-level error. A committed write
        moves the connection's read-your-writes offset."""
        try:
            answer = await self._forwarder.call(method, pb, session.caller, timeout_ms)
        except ForwardingError as exc:
            return None, (exc.error_code, str(exc))
        if answer.error_code != ErrorCode.NONE:
            return None, (ErrorCode(answer.error_code), answer.error_message)
        session.written_offset = max(session.written_offset, answer.metadata_offset)
        return answer, None

    async def _create_topics(self, request: Request, session: Session) -> dict[str, Any]:
        """Forwarded as AdminService/CreateTopics. Per-topic codes are the controller's
        (TOPIC_ALREADY_EXISTS, INVALID_*, TOPIC_AUTHORIZATION_FAILED, ...), INVALID_CONFIG for
        a null config value, or NOT_CONTROLLER / REQUEST_TIMED_OUT for all."""
        body = request.body
        pb = admin_pb2.CreateTopicsRequest(
            validate_only=bool(getattr(body, "validate_only", False))
        )
        refused: dict[int, str] = {}
        for index, topic in enumerate(body.topics):
            null = [c.name for c in topic.configs if c.value is None]
            if null:
                refused[index] = f"Null value not supported for topic configs: {null[0]}"
                continue
            pb.topics.add(
                name=topic.name,
                num_partitions=topic.num_partitions,
                replication_factor=topic.replication_factor,
                assignments=[
                    admin_pb2.CreatableReplicaAssignment(
                        partition_index=a.partition_index, broker_ids=list(a.broker_ids)
                    )
                    for a in topic.assignments
                ],
                configs=[admin_pb2.TopicConfig(name=c.name, value=c.value) for c in topic.configs],
            )
        answer, failure = (None, None)
        if pb.topics:
            answer, failure = await self._forward("CreateTopics", pb, session, _ms(body.timeout))
        results = iter(answer.topics if answer is not None else ())
        topics = []
        for index, topic in enumerate(body.topics):
            error: tuple[ErrorCode, str] | None = (
                (ErrorCode.INVALID_CONFIG, refused[index]) if index in refused else failure
            )
            if error is not None:
                topics.append(
                    {
                        "name": topic.name,
                        "topic_id": None,
                        "error_code": error[0],
                        "error_message": error[1],
                        "num_partitions": -1,
                        "replication_factor": -1,
                        "configs": None,
                    }
                )
                continue
            result = next(results)
            ok = result.error_code == ErrorCode.NONE
            given = {c.name: c.value for c in result.configs}
            topics.append(
                {
                    "name": result.name,
                    "topic_id": kafka_uuid(Uuid.from_bytes(result.topic_id))
                    if len(result.topic_id) == 16
                    else None,
                    "error_code": result.error_code,
                    "error_message": result.error_message or None,
                    "num_partitions": result.num_partitions,
                    "replication_factor": result.replication_factor,
                    "configs": [
                        {
                            "name": key,
                            "value": given.get(key, default),
                            "read_only": False,
                            "config_source": CONFIG_SOURCE_DYNAMIC_TOPIC
                            if key in given
                            else CONFIG_SOURCE_DEFAULT,
                            "is_sensitive": False,
                        }
                        for key, default in sorted((TOPIC_CONFIG_DEFAULTS | given).items())
                    ]
                    if ok
                    else None,
                }
            )
        return {"topics": topics}

    async def _delete_topics(self, request: Request, session: Session) -> dict[str, Any]:
        """Forwarded as AdminService/DeleteTopics; v6 by name or by id (KIP-516: a zero id
        means the name; both or neither is INVALID_REQUEST, decided by the controller)."""
        body = request.body
        version = request.api_version
        if version >= 6:
            entries = [(t.name, our_uuid(t.topic_id)) for t in body.topics or ()]
        else:
            entries = [(name, ZERO_UUID) for name in body.topic_names or ()]
        pb = admin_pb2.DeleteTopicsRequest(
            topics=[
                admin_pb2.DeletableTopic(
                    name=name or "", topic_id=b"" if topic_id == ZERO_UUID else topic_id.bytes
                )
                for name, topic_id in entries
            ]
        )
        answer, failure = (None, None)
        if entries:
            answer, failure = await self._forward("DeleteTopics", pb, session, _ms(body.timeout))
        responses = []
        results = iter(answer.topics if answer is not None else ())
        for name, topic_id in entries:
            if failure is not None:
                responses.append(
                    {
                        "name": name if name is not None or version >= 6 else "",
                        "topic_id": kafka_uuid(topic_id),
                        "error_code": failure[0],
                        "error_message": failure[1],
                    }
                )
                continue
            result = next(results)
            result_name: str | None = result.name or None
            if result_name is None and version < 6:
                result_name = name or ""
            responses.append(
                {
                    "name": result_name,
                    "topic_id": kafka_uuid(Uuid.from_bytes(result.topic_id))
                    if len(result.topic_id) == 16
                    else kafka_uuid(topic_id),
                    "error_code": result.error_code,
                    "error_message": result.error_message or None,
                }
            )
        return {"responses": responses}

    async def _create_partitions(self, request: Request, session: Session) -> dict[str, Any]:
        """Forwarded as AdminService/CreatePartitions (by name, as Kafka's request is). Per-topic
        codes are the controller's (INVALID_PARTITIONS, INVALID_REPLICA_ASSIGNMENT,
        UNKNOWN_TOPIC_OR_PARTITION, TOPIC_AUTHORIZATION_FAILED, ...), or NOT_CONTROLLER /
        REQUEST_TIMED_OUT for all."""
        body = request.body
        topics = body.topics or ()
        # Built by name: the admin API of this build may predate CreatePartitions (then this
        # handler is not registered and the API not advertised).
        request_type = getattr(admin_pb2, "CreatePartitionsRequest")  # noqa: B009
        assignment_type = getattr(admin_pb2, "CreatePartitionsAssignment")  # noqa: B009
        pb = request_type(timeout_ms=_ms(body.timeout), validate_only=bool(body.validate_only))
        for topic in topics:
            pb.topics.add(
                name=topic.name,
                count=topic.count,
                assignments=[
                    assignment_type(broker_ids=list(a.broker_ids)) for a in topic.assignments or ()
                ],
            )
        answer, failure = (None, None)
        if topics:
            answer, failure = await self._forward(
                "CreatePartitions", pb, session, _ms(body.timeout)
            )
        if answer is None:
            return {
                "results": [
                    {"name": t.name, "error_code": failure[0], "error_message": failure[1]}
                    for t in topics
                    if failure is not None
                ]
            }
        return {
            "results": [
                {
                    "name": topic.name,
                    "error_code": result.error_code,
                    "error_message": result.error_message or None,
                }
                for topic, result in zip(topics, answer.results, strict=True)
            ]
        }

    # ----- ACLs (docs/authorization.md) -----------------------------------------------------

    async def _create_acls(self, request: Request, session: Session) -> dict[str, Any]:
        creations = request.body.creations
        pb = admin_pb2.CreateAclsRequest(
            creations=[
                admin_pb2.AclBinding(
                    resource_type=c.resource_type,
                    resource_name=c.resource_name,
                    # v0 has no pattern types: LITERAL (3), as Kafka reads it
                    pattern_type=getattr(c, "resource_pattern_type", 3),
                    principal=c.principal,
                    host=c.host,
                    operation=c.operation,
                    permission_type=c.permission_type,
                )
                for c in creations
            ]
        )
        answer, failure = await self._forward("CreateAcls", pb, session, 0)
        if answer is None:
            assert failure is not None
            code, message = failure
            return {"results": [{"error_code": code, "error_message": message} for _ in creations]}
        return {
            "results": [
                {"error_code": r.error_code, "error_message": r.error_message or None}
                for r in answer.results
            ]
        }

    @staticmethod
    def _acl_filter(entry: Any, prefix: str) -> admin_pb2.AclFilter:
        """An AclFilter from a DeleteAcls filter (field names ending in ``_filter``) or a
        DescribeAcls request (the same fields at the top level)."""
        pb = admin_pb2.AclFilter(
            resource_type=getattr(entry, f"resource_type{prefix}"),
            pattern_type=getattr(entry, f"pattern_type{prefix}", 3),  # v0: LITERAL
            operation=entry.operation,
            permission_type=entry.permission_type,
        )
        for field in ("resource_name", "principal", "host"):
            value = getattr(entry, f"{field}{prefix}")
            if value is not None:
                setattr(pb, field, value)
        return pb

    async def _delete_acls(self, request: Request, session: Session) -> dict[str, Any]:
        filters = request.body.filters
        pb = admin_pb2.DeleteAclsRequest(filters=[self._acl_filter(f, "_filter") for f in filters])
        answer, failure = await self._forward("DeleteAcls", pb, session, 0)
        if answer is None:
            assert failure is not None
            code, message = failure
            return {
                "filter_results": [
                    {"error_code": code, "error_message": message, "matching_acls": []}
                    for _ in filters
                ]
            }
        return {
            "filter_results": [
                {
                    "error_code": r.error_code,
                    "error_message": r.error_message or None,
                    "matching_acls": [
                        {
                            "error_code": ErrorCode.NONE,
                            "error_message": None,
                            "resource_type": acl.resource_type,
                            "resource_name": acl.resource_name,
                            "pattern_type": acl.pattern_type,
                            "principal": acl.principal,
                            "host": acl.host,
                            "operation": acl.operation,
                            "permission_type": acl.permission_type,
                        }
                        for acl in r.matching_acls
                    ],
                }
                for r in answer.filter_results
            ]
        }

    async def _describe_acls(self, request: Request, session: Session) -> dict[str, Any]:
        """Served from this broker's image. SECURITY_DISABLED without an authorizer,
        CLUSTER_AUTHORIZATION_FAILED without DESCRIBE on the cluster, INVALID_REQUEST for a
        filter this project's ACLs cannot hold."""
        caller = session.caller
        if not self._authorization.enabled:
            return {
                "error_code": ErrorCode.SECURITY_DISABLED,
                "error_message": "no authorizer is configured (authorizer.class.name is "
                "empty), so there are no ACLs",
                "resources": [],
            }
        image = await self._read_image(session)
        if not self._authorization.allows(
            caller, image, AclOperation.DESCRIBE, ResourceType.CLUSTER
        ):
            return {
                "error_code": ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
                "error_message": self._denied(caller, AclOperation.DESCRIBE, "the cluster's ACLs"),
                "resources": [],
            }
        try:
            acl_filter = filter_from_proto(self._acl_filter(request.body, "_filter"))
        except ValueError as exc:
            return {"error_code": ErrorCode.INVALID_REQUEST, "error_message": str(exc)}
        grouped: dict[tuple[int, str, int], list[AclBinding]] = {}
        for binding in describe_acls(image, acl_filter):
            key = (int(binding.resource_type), binding.resource_name, int(binding.pattern_type))
            grouped.setdefault(key, []).append(binding)
        return {
            "error_code": ErrorCode.NONE,
            "error_message": None,
            "resources": [
                {
                    "resource_type": resource_type,
                    "resource_name": resource_name,
                    "pattern_type": pattern_type,
                    "acls": [
                        {
                            "principal": b.principal,
                            "host": b.host,
                            "operation": int(b.operation),
                            "permission_type": int(b.permission_type),
                        }
                        for b in bindings
                    ],
                }
                for (resource_type, resource_name, pattern_type), bindings in grouped.items()
            ],
        }
