"""``AdminClient``: Kafka's Admin API over gRPC. The package docstring (``quorum.admin``) is
its manual: routing, retries, read-your-writes, errors and security."""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any, Final

from quorum.admin.messages import (
    NO_OFFSET,
    at_most_one_request,
    chunks,
    creatable_topic,
    creation_outcome,
    deletion_outcome,
    description_outcome,
    key_outcomes,
    optional_id,
    partitions_outcome,
    partitions_topic,
    uuid_from_answer,
    with_empty_name_errors,
    with_zero_id_errors,
)
from quorum.admin.results import (
    AlterConfigsResult,
    CreateAclsResult,
    CreatePartitionsResult,
    CreateTopicsResult,
    DeleteAclsResult,
    DeleteTopicsResult,
    DescribeTopicsResult,
    ElectLeadersResult,
    ListTopicsResult,
)
from quorum.admin.routing import CHANNEL_OPTIONS, Router, parse_bootstrap
from quorum.admin.types import (
    AlterConfigOp,
    BrokerNode,
    ClusterDescription,
    ControllerNode,
    DeletedTopic,
    NewPartitions,
    NewTopic,
    PartitionsCreated,
    TopicCollection,
    TopicDescription,
    TopicIdCollection,
    TopicListing,
    TopicMetadataAndConfig,
    TopicNameCollection,
    TopicOutcome,
    TopicPartition,
)
from quorum.controller.alter_configs import (
    AlterableConfig,
    AlterConfigsRequest,
    AlterConfigsResource,
)
from quorum.controller.client_quotas import (
    AlterClientQuotasEntry,
    AlterClientQuotasRequest,
    AlterClientQuotasResult,
)
from quorum.controller.describe_configs import DescribeConfigsOutcome
from quorum.controller.elections import ELECT_LEADERS_PARTITIONS_MAX
from quorum.controller.requests import ElectionType
from quorum.errors import (
    AdminError,
    AdminTransportError,
    InvalidTopicError,
    UnknownServerError,
    error_for,
)
from quorum.ids import ZERO_UUID, Uuid
from quorum.limits import ALTER_CONFIGS_RESOURCES_MAX
from quorum.metadata.client_quotas import ClientQuotaEntity
from quorum.metadata.records import ConfigResourceType
from quorum.rpc.v1 import admin_pb2, raft_pb2
from quorum.security.acls import AclBinding, AclBindingFilter
from quorum.security.tls import ClientSecurity, SyncChannels
from quorum.wire.acls import binding_from_proto, binding_to_proto, filter_to_proto
from quorum.wire.alter_configs import alter_configs_to_proto
from quorum.wire.client_quotas import (
    alter_client_quotas_results_from_proto,
    alter_client_quotas_to_proto,
    described_client_quotas_from_proto,
)
from quorum.wire.describe_configs import describe_configs_outcomes_from_proto
from quorum.wire.quorum_description import (
    QuorumDescription,
    describe_quorum_from_proto,
    tool_describe_quorum_request,
)
from quorum.wire.scalars import MalformedMessageError

__all__ = [
    "RETRIES_MAX_DEFAULT",
    "RETRY_BACKOFF_MAX_S_DEFAULT",
    "RETRY_BACKOFF_S_DEFAULT",
    "TIMEOUT_S_DEFAULT",
    "TOPICS_PER_REQUEST_MAX",
    "AdminClient",
]

# The server refuses requests naming more topics with INVALID_REQUEST (admin.proto); the client
# splits larger ones. Kafka has no such bound; 1,000 keeps one request's records well inside
# RECORDS_PER_BATCH_MAX for small topics and one answer far below gRPC's message size limit.
TOPICS_PER_REQUEST_MAX: Final = 1_000
TIMEOUT_S_DEFAULT: Final = 30.0  # Kafka's request.timeout.ms
RETRIES_MAX_DEFAULT: Final = 10
RETRY_BACKOFF_S_DEFAULT: Final = 0.1  # Kafka's retry.backoff.ms
RETRY_BACKOFF_MAX_S_DEFAULT: Final = 1.0  # Kafka's retry.backoff.max.ms


class AdminClient:
    """Kafka's Admin over gRPC; the docstring of ``quorum.admin`` says how calls are routed and
    retried and what they raise."""

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
        self._timeout_s = timeout_s
        self._read_your_writes = read_your_writes
        self._clock = clock
        self._security = security or ClientSecurity.from_properties(config)
        self._channels = SyncChannels(self._security, CHANNEL_OPTIONS)
        self._router = Router(
            parse_bootstrap(bootstrap),
            self._channels,
            retries_max=retries_max,
            retry_backoff_s=retry_backoff_s,
            retry_backoff_max_s=retry_backoff_max_s,
            clock=clock,
            sleep=sleep,
            rng=rng or random.Random(),
            security_protocol=self._security.protocol,
        )
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
        return tuple(self._router.addresses)

    @property
    def controller_address(self) -> str | None:
        """The active controller's address as last learned, or None."""
        return self._router.controller

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
        for chunk in chunks(topics, TOPICS_PER_REQUEST_MAX):
            request = admin_pb2.CreateTopicsRequest(
                topics=[creatable_topic(topic) for topic in chunk], validate_only=validate_only
            )
            response = self._router.call("CreateTopics", request, deadline, mutation=True)
            metadata_offset = max(metadata_offset, response.metadata_offset)
            answered = [
                (result.name, creation_outcome(result, validate_only)) for result in response.topics
            ]
            outcomes.update(key_outcomes("topic", [t.name for t in chunk], answered))
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
        for chunk in chunks(entries, TOPICS_PER_REQUEST_MAX):
            asked = [(key, growth) for key, growth in chunk if not self._bad_key(key, outcomes)]
            if not asked:
                continue
            request = admin_pb2.CreatePartitionsRequest(
                topics=[partitions_topic(key, growth) for key, growth in asked],
                validate_only=validate_only,
                timeout_ms=max(1, int((deadline - self._clock()) * 1000)),
            )
            response = self._router.call("CreatePartitions", request, deadline, mutation=True)
            metadata_offset = max(metadata_offset, response.metadata_offset)
            if len(response.results) != len(asked):
                raise UnknownServerError(
                    f"malformed answer: {len(response.results)} CreatePartitions results for "
                    f"{len(asked)} topics"
                )
            for (key, growth), result in zip(asked, response.results, strict=True):
                outcomes[key] = partitions_outcome(key, growth, result)
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
            for id_chunk in chunks(valid_ids, TOPICS_PER_REQUEST_MAX):
                request = admin_pb2.DeleteTopicsRequest(
                    topics=[admin_pb2.DeletableTopic(topic_id=i.bytes) for i in id_chunk]
                )
                response = self._router.call("DeleteTopics", request, deadline, mutation=True)
                metadata_offset = max(metadata_offset, response.metadata_offset)
                answered = [
                    (uuid_from_answer("topic_id", r.topic_id), deletion_outcome(r))
                    for r in response.topics
                ]
                by_id.update(key_outcomes("topic id", id_chunk, answered))
            return DeleteTopicsResult(
                None, with_zero_id_errors(topics.topic_ids, by_id), metadata_offset
            )
        if isinstance(topics, TopicNameCollection):
            by_name: dict[str, TopicOutcome[DeletedTopic]] = {}
            valid_names = [n for n in topics.topic_names if n]
            for chunk in chunks(valid_names, TOPICS_PER_REQUEST_MAX):
                request = admin_pb2.DeleteTopicsRequest(
                    topics=[
                        admin_pb2.DeletableTopic(
                            name=n, expected_topic_id=expected[n].bytes if n in expected else b""
                        )
                        for n in chunk
                    ]
                )
                response = self._router.call("DeleteTopics", request, deadline, mutation=True)
                metadata_offset = max(metadata_offset, response.metadata_offset)
                named = [(r.name, deletion_outcome(r)) for r in response.topics]
                by_name.update(key_outcomes("topic", chunk, named))
            return DeleteTopicsResult(
                with_empty_name_errors(topics.topic_names, by_name), None, metadata_offset
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
            for id_chunk in chunks(valid_ids, TOPICS_PER_REQUEST_MAX):
                request = admin_pb2.DescribeTopicsRequest(
                    topics=[admin_pb2.TopicRef(topic_id=i.bytes) for i in id_chunk]
                )
                response = self._read("DescribeTopics", request, deadline, offset)
                offset = metadata_offset = max(offset, response.metadata_offset)
                answered = [
                    (uuid_from_answer("topic_id", r.topic_id), description_outcome(r))
                    for r in response.topics
                ]
                by_id.update(key_outcomes("topic id", id_chunk, answered))
            return DescribeTopicsResult(
                None, with_zero_id_errors(topics.topic_ids, by_id), metadata_offset
            )
        if isinstance(topics, TopicNameCollection):
            by_name: dict[str, TopicOutcome[TopicDescription]] = {}
            valid_names = [n for n in topics.topic_names if n]
            for chunk in chunks(valid_names, TOPICS_PER_REQUEST_MAX):
                request = admin_pb2.DescribeTopicsRequest(
                    topics=[admin_pb2.TopicRef(name=n) for n in chunk]
                )
                response = self._read("DescribeTopics", request, deadline, offset)
                offset = metadata_offset = max(offset, response.metadata_offset)
                named = [(r.name, description_outcome(r)) for r in response.topics]
                by_name.update(key_outcomes("topic", chunk, named))
            return DescribeTopicsResult(
                with_empty_name_errors(topics.topic_names, by_name), None, metadata_offset
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
                    topic_id=uuid_from_answer("topic_id", t.topic_id),
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
            self._router.learn(controller.endpoint)
        metadata_topic_id = uuid_from_answer("metadata_topic_id", response.metadata_topic_id)
        return ClusterDescription(
            cluster_id=response.cluster_id,
            controller_id=optional_id(response.controller_id),
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
        response = self._router.call(
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
        response = self._router.call(method, request, deadline, mutation=True)
        return int(response.high_watermark)

    # ----- ACLs (docs/authorization.md) ------------------------------------------------------

    def create_acls(
        self, bindings: Iterable[AclBinding], *, timeout_s: float | None = None
    ) -> CreateAclsResult:
        """Add ACLs (Kafka's ``createAcls``); each succeeds or fails on its own. An ACL that
        already exists succeeds without a change."""
        wanted = at_most_one_request(bindings, "ACLs")
        deadline = self._deadline(timeout_s)
        request = admin_pb2.CreateAclsRequest(creations=[binding_to_proto(b) for b in wanted])
        response = self._router.call("CreateAcls", request, deadline, mutation=True)
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
        wanted = at_most_one_request(filters, "filters")
        deadline = self._deadline(timeout_s)
        request = admin_pb2.DeleteAclsRequest(filters=[filter_to_proto(f) for f in wanted])
        response = self._router.call("DeleteAcls", request, deadline, mutation=True)
        deleted = tuple(
            (f, tuple(binding_from_proto(b) for b in r.matching_acls))
            for f, r in zip(wanted, response.filter_results, strict=True)
        )
        return DeleteAclsResult(deleted, response.metadata_offset)

    def incremental_alter_configs(
        self,
        configs: Mapping[str, Iterable[AlterConfigOp]],
        *,
        validate_only: bool = False,
        timeout_s: float | None = None,
    ) -> AlterConfigsResult:
        """Change topics' configs (Kafka's ``incrementalAlterConfigs``): ``{topic:
        [AlterConfigOp(name, value, op), ...]}`` with op SET, DELETE, APPEND or SUBTRACT
        (APPEND / SUBTRACT only for list configs such as ``cleanup.policy``). Topics succeed
        or fail one by one; needs ALTER_CONFIGS on each topic."""
        entries = list(configs.items())
        if len(entries) > ALTER_CONFIGS_RESOURCES_MAX:
            raise ValueError(
                f"{len(entries)} topics in one call; at most {ALTER_CONFIGS_RESOURCES_MAX}"
            )
        if not entries:
            return AlterConfigsResult({}, NO_OFFSET)
        resources = tuple(
            AlterConfigsResource(
                ConfigResourceType.TOPIC,
                topic,
                tuple(AlterableConfig(c.name, c.op, c.value) for c in ops),
            )
            for topic, ops in entries
        )
        return self._alter_configs(resources, validate_only, timeout_s)

    def alter_cluster_configs(
        self,
        configs: Iterable[AlterConfigOp],
        *,
        broker_id: int | None = None,
        validate_only: bool = False,
        timeout_s: float | None = None,
    ) -> int:
        """Change dynamic broker configs (Kafka's ``incrementalAlterConfigs`` on a broker
        resource): one broker's (``broker_id``, ``kafka-configs --entity-type brokers
        --entity-name ID``) or, with None, the cluster-wide defaults (the empty name,
        ``--entity-default``); the keys of ``quorum.controller.broker_configs``, SET or DELETE.
        Needs ALTER_CONFIGS on the cluster. Raises the error (``InvalidConfigError``,
        ``InvalidRequestError`` for a key that cannot change live, ...); returns the metadata
        offset that committed the change."""
        resource = AlterConfigsResource(
            ConfigResourceType.BROKER,
            "" if broker_id is None else str(broker_id),
            tuple(AlterableConfig(c.name, c.op, c.value) for c in configs),
        )
        result = self._alter_configs((resource,), validate_only, timeout_s)
        result.all()
        return result.metadata_offset

    def describe_configs(
        self,
        resources: Iterable[tuple[int, str]],
        *,
        include_synonyms: bool = False,
        include_documentation: bool = False,
        min_metadata_offset: int | None = None,
        timeout_s: float | None = None,
    ) -> list[DescribeConfigsOutcome]:
        """Kafka's ``describeConfigs``: per (resource type, name), its configs with their
        sources (and synonyms, documentation when asked), or its error (``error_code``,
        ``error_message``; ``quorum.errors.error_for`` makes it an ``AdminError``), in order.
        TOPIC (2) resources by name, BROKER (4) by id or "" for the cluster-wide defaults.
        Served from the answering node's image: a controller knows no broker's file, so it
        describes a broker's dynamic configs only (``describe_broker_configs`` asks the broker
        itself). Needs DESCRIBE_CONFIGS on each topic (on the cluster for brokers)."""
        wanted = list(resources)
        if len(wanted) > ALTER_CONFIGS_RESOURCES_MAX:
            raise ValueError(
                f"{len(wanted)} resources; describe at most {ALTER_CONFIGS_RESOURCES_MAX} at once"
            )
        deadline = self._deadline(timeout_s)
        request = admin_pb2.DescribeConfigsRequest(
            resources=[
                admin_pb2.DescribeConfigsResource(resource_type=t, resource_name=n)
                for t, n in wanted
            ],
            include_synonyms=include_synonyms,
            include_documentation=include_documentation,
        )
        response = self._read(
            "DescribeConfigs", request, deadline, self._read_offset(min_metadata_offset)
        )
        if len(response.results) != len(wanted):
            raise UnknownServerError(
                f"malformed answer: {len(response.results)} DescribeConfigs results for "
                f"{len(wanted)} resources"
            )
        return describe_configs_outcomes_from_proto(response.results)

    def describe_broker_configs(
        self,
        broker_id: int,
        *,
        include_synonyms: bool = False,
        include_documentation: bool = False,
        timeout_s: float | None = None,
    ) -> DescribeConfigsOutcome:
        """One broker's configs, asked of that broker as Kafka's AdminClient asks it (its
        gRPC listener, from ``describe_cluster``): every key of its configuration, with its
        file's values (STATIC_BROKER_CONFIG). If the broker is not registered, fenced or does
        not answer, the controllers' view (``describe_configs``: its dynamic configs only)."""
        deadline = self._deadline(timeout_s)
        resource = (ConfigResourceType.BROKER, str(broker_id))
        node = next(
            (
                b
                for b in self.describe_cluster(
                    timeout_s=max(deadline - self._clock(), 0.001)
                ).brokers
                if b.broker_id == broker_id and not b.is_fenced and b.host
            ),
            None,
        )
        if node is not None:
            request = admin_pb2.DescribeConfigsRequest(
                resources=[
                    admin_pb2.DescribeConfigsResource(
                        resource_type=resource[0], resource_name=resource[1]
                    )
                ],
                include_synonyms=include_synonyms,
                include_documentation=include_documentation,
            )
            offset = self._read_offset(None)
            if offset >= 0:
                request.min_metadata_offset = offset
            try:
                response = self._router.call_at(
                    f"{node.host}:{node.port}", "DescribeConfigs", request, deadline
                )
            except AdminTransportError:
                pass  # the controllers' view below
            else:
                (outcome,) = describe_configs_outcomes_from_proto(response.results)
                return outcome
        (outcome,) = self.describe_configs(
            [resource],
            include_synonyms=include_synonyms,
            include_documentation=include_documentation,
            timeout_s=max(deadline - self._clock(), 0.001),
        )
        return outcome

    def alter_client_quotas(
        self,
        entries: Iterable[AlterClientQuotasEntry],
        *,
        validate_only: bool = False,
        timeout_s: float | None = None,
    ) -> tuple[tuple[AlterClientQuotasResult, ...], int]:
        """Set or remove client quotas (Kafka's ``alterClientQuotas``): each entry an entity
        and its ops (a None value removes the key). Needs ALTER_CONFIGS on the cluster. The
        per-entity results (``error_code``, ``error_message``) and the offset that committed
        the change."""
        wanted = tuple(entries)
        deadline = self._deadline(timeout_s)
        request = alter_client_quotas_to_proto(AlterClientQuotasRequest(wanted, validate_only))
        response = self._router.call("AlterClientQuotas", request, deadline, mutation=True)
        results = alter_client_quotas_results_from_proto(response)
        if len(results) != len(wanted):
            raise UnknownServerError(
                f"malformed answer: {len(results)} AlterClientQuotas results for "
                f"{len(wanted)} entities"
            )
        return results, response.metadata_offset

    def describe_client_quotas(
        self,
        components: Iterable[tuple[str, int, str | None]],
        *,
        strict: bool = False,
        min_metadata_offset: int | None = None,
        timeout_s: float | None = None,
    ) -> list[tuple[ClientQuotaEntity, dict[str, float]]]:
        """Kafka's ``describeClientQuotas``: the entities the filter (``(entity_type,
        match_type, match)``, match types 0 exact, 1 default, 2 any) matches, with their
        quotas, from the answering node's image. Needs DESCRIBE_CONFIGS on the cluster."""
        deadline = self._deadline(timeout_s)
        request = admin_pb2.DescribeClientQuotasRequest(strict=strict)
        for kind, match_type, match in components:
            component = request.components.add(entity_type=kind, match_type=match_type)
            if match is not None:
                component.match = match
        response = self._read(
            "DescribeClientQuotas", request, deadline, self._read_offset(min_metadata_offset)
        )
        return described_client_quotas_from_proto(response)

    def _alter_configs(
        self,
        resources: tuple[AlterConfigsResource, ...],
        validate_only: bool,
        timeout_s: float | None,
    ) -> AlterConfigsResult:
        deadline = self._deadline(timeout_s)
        request = alter_configs_to_proto(
            AlterConfigsRequest(resources, validate_only=validate_only)
        )
        response = self._router.call("AlterConfigs", request, deadline, mutation=True)
        if len(response.results) != len(resources):
            raise UnknownServerError(
                f"malformed answer: {len(response.results)} AlterConfigs results for "
                f"{len(resources)} resources"
            )
        return AlterConfigsResult(
            {
                r.resource_name: None
                if r.error_code == 0
                else error_for(r.error_code, r.error_message)
                for r in response.results
            },
            response.metadata_offset,
        )

    def elect_leaders(
        self,
        election_type: ElectionType,
        partitions: Iterable[TopicPartition] | None = None,
        *,
        timeout_s: float | None = None,
    ) -> ElectLeadersResult:
        """Elect leaders (Kafka's ``electLeaders``): PREFERRED moves leadership back to each
        partition's first replica; UNCLEAN elects any unfenced replica of a leaderless
        partition. ``partitions`` None: every partition, and the result then lists only those
        where an election ran or failed. Needs ALTER on the cluster."""
        deadline = self._deadline(timeout_s)
        kind = ElectionType(election_type)
        if partitions is None:
            requests = [admin_pb2.ElectLeadersRequest(election_type=kind, all_partitions=True)]
        else:
            wanted = list(dict.fromkeys(partitions))
            if not wanted:
                return ElectLeadersResult({}, NO_OFFSET)
            requests = [
                admin_pb2.ElectLeadersRequest(
                    election_type=kind,
                    partitions=[
                        admin_pb2.ElectLeadersPartition(topic=tp.topic, partition=tp.partition)
                        for tp in chunk
                    ],
                )
                for chunk in chunks(wanted, ELECT_LEADERS_PARTITIONS_MAX)
            ]
        outcomes: dict[TopicPartition, tuple[AdminError | None, int | None]] = {}
        offset = NO_OFFSET
        for request in requests:
            response = self._router.call("ElectLeaders", request, deadline, mutation=True)
            offset = max(offset, response.metadata_offset)
            for r in response.results:
                error = None if r.error_code == 0 else error_for(r.error_code, r.error_message)
                leader = None if r.leader < 0 else r.leader
                outcomes[TopicPartition(r.topic, r.partition)] = (error, leader)
        return ElectLeadersResult(outcomes, offset)

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
            offset = max(offset, self._router.written_offset)
        return offset

    def _read(self, method: str, request: Any, deadline: float, min_offset: int) -> Any:
        if min_offset >= 0:
            request.min_metadata_offset = min_offset
        return self._router.call(method, request, deadline, mutation=False)
