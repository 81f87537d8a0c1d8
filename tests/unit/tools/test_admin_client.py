"""``quorum.admin.AdminClient`` against an in-process fake of the server.

The fake (``FakeNode``) is a test double of a controller's gRPC listener: an ``AdminService``
and a ``QuorumService`` whose answers each test programs, recording every request and the
deadline it arrived with. The client is real: real channels, real deadlines, real retries (its
sleeps are recorded instead of slept). The lead's end-to-end tests run it against real
controllers.
"""

from __future__ import annotations

import pickle
import random
import socket
import threading
import time
from collections.abc import Callable, Iterator
from concurrent import futures
from dataclasses import dataclass, field
from typing import Any

import grpc
import pytest

from quorum import admin as admin_module
from quorum.admin import (
    AdminClient,
    AdminConnectionError,
    AdminError,
    AdminTimeoutError,
    AdminTransportError,
    DeletedTopic,
    InconsistentTopicIdError,
    InvalidConfigError,
    InvalidPartitionsError,
    InvalidReplicationFactorError,
    InvalidRequestError,
    InvalidTopicError,
    KafkaError,
    NewPartitions,
    NewTopic,
    NotControllerError,
    NotLeaderOrFollowerError,
    PartitionsCreated,
    RequestTimedOutError,
    TopicCollection,
    TopicExistsError,
    TopicIdCollection,
    TopicNameCollection,
    TopicPartitionInfo,
    UnknownServerError,
    UnknownTopicIdError,
    UnknownTopicOrPartitionError,
    error_for,
    parse_bootstrap,
)
from quorum.errors import ErrorCode
from quorum.ids import METADATA_TOPIC_ID, ZERO_UUID, Uuid
from quorum.rpc.v1 import admin_pb2, admin_pb2_grpc, raft_pb2, raft_pb2_grpc

Handler = Callable[[Any, Any], Any]

ADMIN_METHODS = (
    "CreateTopics",
    "DeleteTopics",
    "DescribeTopics",
    "ListTopics",
    "DescribeCluster",
    "RegisterBroker",
    "BrokerHeartbeat",
    "CreatePartitions",
    "DescribeConfigs",
)
RESPONSE_TYPES: dict[str, Any] = {
    "CreateTopics": admin_pb2.CreateTopicsResponse,
    "DeleteTopics": admin_pb2.DeleteTopicsResponse,
    "DescribeTopics": admin_pb2.DescribeTopicsResponse,
    "ListTopics": admin_pb2.ListTopicsResponse,
    "DescribeCluster": admin_pb2.DescribeClusterResponse,
    "RegisterBroker": admin_pb2.RegisterBrokerResponse,
    "BrokerHeartbeat": admin_pb2.BrokerHeartbeatResponse,
    "CreatePartitions": admin_pb2.CreatePartitionsResponse,
    "DescribeConfigs": admin_pb2.DescribeConfigsResponse,
}
ORDERS_ID = Uuid.parse("ah0vHnqLTD2eDxEiM0RVZg")
PAYMENTS_ID = Uuid.parse("b-DwmhtOheTqZzPoh52kfA")


# ----- the fake server ---------------------------------------------------------------------------


@dataclass
class FakeNode:
    """One fake controller listener. ``handlers[method]`` answers ``(request, context)``; an
    unprogrammed method answers UNIMPLEMENTED. ``calls`` records ``(method, request)``."""

    address: str = ""
    handlers: dict[str, Handler] = field(default_factory=dict)
    calls: list[tuple[str, Any]] = field(default_factory=list)
    time_remaining: list[float | None] = field(default_factory=list)
    release: threading.Event = field(default_factory=threading.Event)

    def handle(self, method: str, request: Any, context: Any) -> Any:
        copy = type(request)()
        copy.CopyFrom(request)
        self.calls.append((method, copy))
        self.time_remaining.append(context.time_remaining())
        handler = self.handlers.get(method)
        if handler is None:
            context.abort(grpc.StatusCode.UNIMPLEMENTED, f"{method} is not programmed")
        return handler(request, context)

    def methods(self) -> list[str]:
        return [method for method, _ in self.calls]

    def requests(self, method: str) -> list[Any]:
        return [request for m, request in self.calls if m == method]


def _admin_servicer(node: FakeNode) -> Any:
    def method(name: str) -> Callable[[Any, Any, Any], Any]:
        return lambda self, request, context: node.handle(name, request, context)

    namespace = {name: method(name) for name in ADMIN_METHODS}
    return type("FakeAdminService", (admin_pb2_grpc.AdminServiceServicer,), namespace)()


def _quorum_servicer(node: FakeNode) -> Any:
    class FakeQuorumService(raft_pb2_grpc.QuorumServiceServicer):
        def DescribeQuorum(self, request: Any, context: Any) -> Any:
            return node.handle("DescribeQuorum", request, context)

    return FakeQuorumService()


@pytest.fixture
def start_node() -> Iterator[Callable[..., FakeNode]]:
    """Start fake nodes on 127.0.0.1 (``admin=False``: a node without AdminService)."""
    servers: list[tuple[Any, FakeNode]] = []

    def start(*, admin: bool = True) -> FakeNode:
        node = FakeNode()
        server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
        if admin:
            admin_pb2_grpc.add_AdminServiceServicer_to_server(_admin_servicer(node), server)
        raft_pb2_grpc.add_QuorumServiceServicer_to_server(_quorum_servicer(node), server)
        port = server.add_insecure_port("127.0.0.1:0")
        server.start()
        node.address = f"127.0.0.1:{port}"
        servers.append((server, node))
        return node

    yield start
    for server, node in servers:
        node.release.set()
        server.stop(grace=None)


def closed_address() -> str:
    """A port that was free a moment ago: nothing listens there."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return f"127.0.0.1:{probe.getsockname()[1]}"


@dataclass
class Sleeps:
    """Records the client's backoff sleeps instead of sleeping."""

    seconds: list[float] = field(default_factory=list)

    def __call__(self, seconds: float) -> None:
        self.seconds.append(seconds)


def client(*addresses: str, **kwargs: Any) -> AdminClient:
    kwargs.setdefault("timeout_s", 10.0)
    kwargs.setdefault("sleep", Sleeps())
    kwargs.setdefault("rng", random.Random(7))
    return AdminClient(",".join(addresses), **kwargs)


# ----- canned answers ----------------------------------------------------------------------------


def not_controller(method: str, endpoint: str = "", controller_id: int = -1) -> Handler:
    def answer(request: Any, context: Any) -> Any:
        return RESPONSE_TYPES[method](
            error_code=ErrorCode.NOT_CONTROLLER,
            error_message="this node is not the active controller",
            controller_id=controller_id,
            controller_endpoint=endpoint,
            metadata_offset=-1,
        )

    return answer


def request_error(method: str, code: ErrorCode, message: str) -> Handler:
    def answer(request: Any, context: Any) -> Any:
        return RESPONSE_TYPES[method](
            error_code=code, error_message=message, controller_id=1, metadata_offset=-1
        )

    return answer


def creates_topics(
    ids: dict[str, Uuid] | None = None,
    errors: dict[str, tuple[ErrorCode, str]] | None = None,
    first_offset: int = 40,
) -> Handler:
    """Creates every requested topic (ids from ``ids`` or fresh), except those in ``errors``."""
    ids = ids or {}
    errors = errors or {}

    def answer(request: Any, context: Any) -> Any:
        results = []
        offset = first_offset
        for topic in request.topics:
            if topic.name in errors:
                code, message = errors[topic.name]
                results.append(
                    admin_pb2.CreatableTopicResult(
                        name=topic.name,
                        creation_offset=-1,
                        error_code=code,
                        error_message=message,
                        num_partitions=-1,
                        replication_factor=-1,
                    )
                )
                continue
            topic_id = b"" if request.validate_only else ids.get(topic.name, Uuid.random()).bytes
            results.append(
                admin_pb2.CreatableTopicResult(
                    name=topic.name,
                    topic_id=topic_id,
                    creation_offset=-1 if request.validate_only else offset,
                    num_partitions=topic.num_partitions if topic.num_partitions > 0 else 1,
                    replication_factor=max(topic.replication_factor, 1),
                    configs=list(topic.configs),
                )
            )
            offset += 1 + len(topic.configs) + max(topic.num_partitions, 1)
        return admin_pb2.CreateTopicsResponse(
            controller_id=1, metadata_offset=offset - 1, topics=results
        )

    return answer


ORDERS = admin_pb2.DescribeTopicResult(
    name="orders",
    topic_id=ORDERS_ID.bytes,
    creation_offset=42,
    partitions=[
        admin_pb2.PartitionDescription(
            partition_index=1, leader_id=-1, leader_epoch=3, replica_nodes=[2, 3], isr_nodes=[]
        ),
        admin_pb2.PartitionDescription(
            partition_index=0, leader_id=1, leader_epoch=2, replica_nodes=[1, 2], isr_nodes=[1, 2]
        ),
    ],
    configs=[admin_pb2.TopicConfig(name="cleanup.policy", value="compact")],
)
METADATA = admin_pb2.DescribeTopicResult(
    name="__cluster_metadata",
    topic_id=PAYMENTS_ID.bytes,
    is_internal=True,
    creation_offset=1,
    partitions=[
        admin_pb2.PartitionDescription(partition_index=0, leader_id=1, replica_nodes=[1, 2, 3])
    ],
)
KNOWN_TOPICS = {"orders": ORDERS, "__cluster_metadata": METADATA}


def describes_topics(metadata_offset: int = 50) -> Handler:
    """Describes ORDERS and METADATA by name or id; anything else is unknown."""

    def answer(request: Any, context: Any) -> Any:
        results = []
        for ref in request.topics:
            if ref.topic_id:
                found = [t for t in KNOWN_TOPICS.values() if t.topic_id == ref.topic_id]
                missing = admin_pb2.DescribeTopicResult(
                    topic_id=ref.topic_id,
                    error_code=ErrorCode.UNKNOWN_TOPIC_ID,
                    error_message="no topic has this id",
                    creation_offset=-1,
                )
            else:
                found = [KNOWN_TOPICS[ref.name]] if ref.name in KNOWN_TOPICS else []
                missing = admin_pb2.DescribeTopicResult(
                    name=ref.name,
                    error_code=ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                    error_message=f"no topic is named {ref.name!r}",
                    creation_offset=-1,
                )
            results.append(found[0] if found else missing)
        return admin_pb2.DescribeTopicsResponse(
            controller_id=1, metadata_offset=metadata_offset, topics=results
        )

    return answer


def deletes_topics(metadata_offset: int = 60) -> Handler:
    def answer(request: Any, context: Any) -> Any:
        results = []
        for ref in request.topics:
            known = [
                t
                for t in KNOWN_TOPICS.values()
                if (ref.topic_id and t.topic_id == ref.topic_id) or t.name == ref.name
            ]
            if known and ref.expected_topic_id not in (b"", known[0].topic_id):
                results.append(
                    admin_pb2.DeletableTopicResult(
                        name=ref.name,
                        topic_id=known[0].topic_id,
                        error_code=ErrorCode.INCONSISTENT_TOPIC_ID,
                        error_message=f"topic {ref.name!r} has another id",
                    )
                )
            elif known:
                results.append(
                    admin_pb2.DeletableTopicResult(name=known[0].name, topic_id=known[0].topic_id)
                )
            elif ref.topic_id:
                results.append(
                    admin_pb2.DeletableTopicResult(
                        topic_id=ref.topic_id,
                        error_code=ErrorCode.UNKNOWN_TOPIC_ID,
                        error_message="no topic has this id",
                    )
                )
            else:
                results.append(
                    admin_pb2.DeletableTopicResult(
                        name=ref.name,
                        error_code=ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                        error_message=f"no topic is named {ref.name!r}",
                    )
                )
        return admin_pb2.DeleteTopicsResponse(
            controller_id=1, metadata_offset=metadata_offset, topics=results
        )

    return answer


# ----- errors ------------------------------------------------------------------------------------


def test_error_for_gives_kafkas_typed_errors() -> None:
    expected = {
        ErrorCode.TOPIC_ALREADY_EXISTS: "TopicExistsError",
        ErrorCode.UNKNOWN_TOPIC_ID: "UnknownTopicIdError",
        ErrorCode.UNKNOWN_TOPIC_OR_PARTITION: "UnknownTopicOrPartitionError",
        ErrorCode.INVALID_TOPIC_EXCEPTION: "InvalidTopicError",
        ErrorCode.INVALID_REPLICATION_FACTOR: "InvalidReplicationFactorError",
        ErrorCode.INVALID_PARTITIONS: "InvalidPartitionsError",
        ErrorCode.INVALID_REPLICA_ASSIGNMENT: "InvalidReplicaAssignmentError",
        ErrorCode.INVALID_CONFIG: "InvalidConfigError",
        ErrorCode.INVALID_REQUEST: "InvalidRequestError",
        ErrorCode.NOT_CONTROLLER: "NotControllerError",
        ErrorCode.POLICY_VIOLATION: "PolicyViolationError",
        ErrorCode.TOPIC_DELETION_DISABLED: "TopicDeletionDisabledError",
    }
    for code, class_name in expected.items():
        error = error_for(code, "why")
        assert type(error).__name__ == class_name
        assert isinstance(error, KafkaError)
        assert error.error_code is code
        assert error.error_name == code.name
        assert error.message == "why"
        assert str(error) == f"{code.name}: why"
        assert getattr(admin_module, class_name) is type(error)


def test_every_known_error_code_has_a_typed_error() -> None:
    for code in ErrorCode:
        if code is ErrorCode.NONE:
            with pytest.raises(ValueError, match="NONE is not an error"):
                error_for(code, "")
            continue
        error = error_for(int(code), "")
        assert isinstance(error, KafkaError)
        assert error.error_code is code
        assert type(error) is not KafkaError, f"{code.name} has no class of its own"
        assert error.retriable is code.retriable
        assert code.name in error.message  # a default message names the code


def test_unknown_error_codes_and_retriable_flags() -> None:
    unknown = error_for(999, "from a newer server")
    assert isinstance(unknown, UnknownServerError)
    assert unknown.code == 999
    assert "UNKNOWN_ERROR_CODE(999)" in str(unknown)
    assert "from a newer server" in str(unknown)
    assert not unknown.retriable
    assert error_for(ErrorCode.NOT_CONTROLLER, "").retriable
    assert error_for(ErrorCode.UNKNOWN_TOPIC_ID, "").retriable
    assert not error_for(ErrorCode.TOPIC_ALREADY_EXISTS, "").retriable
    with pytest.raises(TypeError, match="error code"):
        KafkaError("no code")


def test_kafka_errors_pickle_with_their_type_and_code() -> None:
    error = error_for(ErrorCode.TOPIC_ALREADY_EXISTS, "Topic 'orders' already exists.")
    copy = pickle.loads(pickle.dumps(error))
    assert type(copy) is TopicExistsError
    assert str(copy) == str(error)


# ----- collections and arguments -----------------------------------------------------------------


def test_topic_collections() -> None:
    ids = TopicCollection.of_topic_ids([ORDERS_ID, str(PAYMENTS_ID), ORDERS_ID])
    assert isinstance(ids, TopicIdCollection)
    assert ids.topic_ids == (ORDERS_ID, PAYMENTS_ID)
    dashed = TopicCollection.of_topic_ids([str(ORDERS_ID.to_uuid())])
    assert dashed.topic_ids == (ORDERS_ID,)
    names = TopicCollection.of_topic_names(n for n in ["b", "a", "b"])
    assert isinstance(names, TopicNameCollection)
    assert names.topic_names == ("b", "a")
    with pytest.raises(TypeError):
        TopicCollection.of_topic_names("orders")
    with pytest.raises(TypeError):
        TopicCollection.of_topic_ids(str(ORDERS_ID))
    with pytest.raises(ValueError, match="invalid topic id"):
        TopicCollection.of_topic_ids(["not-an-id"])


def test_parse_bootstrap() -> None:
    assert parse_bootstrap("a:1, b:2,a:1") == ["a:1", "b:2"]
    assert parse_bootstrap(["[::1]:9093"]) == ["[::1]:9093"]
    for bad in ("a", "a:", ":1", "a:0", "a:65536", "a:x", ""):
        with pytest.raises(ValueError):
            parse_bootstrap(bad)


def test_client_arguments_are_checked() -> None:
    with pytest.raises(ValueError):
        AdminClient("a:1", timeout_s=0)
    with pytest.raises(ValueError):
        AdminClient("a:1", retries_max=-1)
    with pytest.raises(ValueError):
        AdminClient("a:1", retry_backoff_s=2, retry_backoff_max_s=1)


# ----- create ------------------------------------------------------------------------------------


def test_create_topics_returns_ids_offsets_and_maps_the_request(
    start_node: Callable[..., FakeNode],
) -> None:
    node = start_node()
    node.handlers["CreateTopics"] = creates_topics(ids={"orders": ORDERS_ID})
    with client(node.address) as admin:
        result = admin.create_topics(
            [
                NewTopic("orders", 3, 2, configs={"cleanup.policy": "compact"}),
                NewTopic("assigned", replica_assignments={1: [2, 3], 0: [1, 2]}),
            ]
        )

    assert result.topic_id("orders") == ORDERS_ID
    assert result.creation_offset("orders") == 40
    assert result.num_partitions("orders") == 3
    assert result.replication_factor("orders") == 2
    assert dict(result.config("orders")) == {"cleanup.policy": "compact"}
    assert result.topic_id("assigned") not in (ZERO_UUID, ORDERS_ID)
    assert result.metadata_offset == result.creation_offset("assigned") + 1
    assert set(result.all()) == {"orders", "assigned"}
    assert result.errors() == {}
    with pytest.raises(KeyError, match="not part of the request"):
        result.topic_id("other")

    (request,) = node.requests("CreateTopics")
    orders, assigned = request.topics
    assert (orders.name, orders.num_partitions, orders.replication_factor) == ("orders", 3, 2)
    assert [(c.name, c.value) for c in orders.configs] == [("cleanup.policy", "compact")]
    assert not orders.assignments
    # None means "the cluster's default": -1 on the wire, as in Kafka's CreateTopics.
    assert (assigned.num_partitions, assigned.replication_factor) == (-1, -1)
    assert [(a.partition_index, list(a.broker_ids)) for a in assigned.assignments] == [
        (0, [1, 2]),
        (1, [2, 3]),
    ]
    assert not request.validate_only


def test_each_topic_raises_its_own_typed_error(start_node: Callable[..., FakeNode]) -> None:
    node = start_node()
    node.handlers["CreateTopics"] = creates_topics(
        errors={
            "orders": (ErrorCode.TOPIC_ALREADY_EXISTS, "Topic 'orders' already exists."),
            "big": (ErrorCode.INVALID_REPLICATION_FACTOR, "Unable to replicate 5 times."),
        }
    )
    with client(node.address) as admin:
        result = admin.create_topics(
            [NewTopic("orders", 1, 1), NewTopic("big", 1, 5), NewTopic("ok")]
        )

    assert result.topic_id("ok") != ZERO_UUID
    with pytest.raises(TopicExistsError, match="already exists") as exists:
        result.topic_id("orders")
    assert exists.value.error_code is ErrorCode.TOPIC_ALREADY_EXISTS
    assert not exists.value.retriable
    with pytest.raises(InvalidReplicationFactorError):
        result.num_partitions("big")
    values = result.values()
    assert values["ok"].ok
    assert isinstance(values["big"].exception(), InvalidReplicationFactorError)
    with pytest.raises(InvalidReplicationFactorError):
        values["big"].result()
    with pytest.raises(TopicExistsError):  # the first failure in request order
        result.all()
    assert sorted(result.errors()) == ["big", "orders"]


def test_validate_only_creates_nothing(start_node: Callable[..., FakeNode]) -> None:
    node = start_node()
    node.handlers["CreateTopics"] = creates_topics()
    with client(node.address) as admin:
        result = admin.create_topics([NewTopic("orders", 2, 1)], validate_only=True)
    assert result.topic_id("orders") == ZERO_UUID
    assert result.creation_offset("orders") == -1
    assert result.num_partitions("orders") == 2
    assert node.requests("CreateTopics")[0].validate_only


def test_create_partitions_by_name_and_by_id(start_node: Callable[..., FakeNode]) -> None:
    """Kafka's createPartitions({name: NewPartitions.increase_to(n)}), plus ids as keys;
    outcomes keyed as asked, errors typed, bad keys failed locally, a short answer refused."""
    node = start_node()

    def grows(request: Any, context: Any) -> Any:
        results = []
        for topic in request.topics:
            if topic.topic_id:
                results.append(
                    admin_pb2.CreatePartitionsTopicResult(name="orders", topic_id=topic.topic_id)
                )
            else:
                results.append(
                    admin_pb2.CreatePartitionsTopicResult(
                        name=topic.name,
                        error_code=ErrorCode.INVALID_PARTITIONS,
                        error_message="Topic 'payments' already has 3 partition(s)",
                    )
                )
        return admin_pb2.CreatePartitionsResponse(
            controller_id=1, metadata_offset=90, results=results
        )

    node.handlers["CreatePartitions"] = grows
    with client(node.address) as admin:
        result = admin.create_partitions(
            {
                ORDERS_ID: NewPartitions.increase_to(6, [[1, 2], [2, 3], [3, 1]]),
                "payments": NewPartitions.increase_to(3),
                "": NewPartitions.increase_to(2),
            },
            validate_only=True,
        )
        (request,) = node.requests("CreatePartitions")
        assert [(t.name, t.topic_id, t.count) for t in request.topics] == [
            ("", ORDERS_ID.bytes, 6),
            ("payments", b"", 3),
        ]
        assert [list(a.broker_ids) for a in request.topics[0].assignments] == [
            [1, 2],
            [2, 3],
            [3, 1],
        ]
        assert request.validate_only and request.timeout_ms > 0
        outcomes = result.values()
        assert outcomes[ORDERS_ID].result() == PartitionsCreated("orders", ORDERS_ID, 6)
        assert isinstance(outcomes["payments"].error, InvalidPartitionsError)
        assert isinstance(outcomes[""].error, InvalidTopicError)
        assert result.metadata_offset == 90
        with pytest.raises(InvalidPartitionsError, match="already has 3"):
            result.all()
        with pytest.raises(TypeError, match="NewPartitions"):
            admin.create_partitions({"orders": 6})  # type: ignore[dict-item]
        node.handlers["CreatePartitions"] = lambda request, context: (
            admin_pb2.CreatePartitionsResponse(metadata_offset=1)
        )
        with pytest.raises(UnknownServerError, match="0 CreatePartitions results for 1"):
            admin.create_partitions({"orders": NewPartitions.increase_to(4)})


def test_create_refuses_repeated_names_before_asking() -> None:
    with client(closed_address()) as admin, pytest.raises(ValueError, match="orders"):
        admin.create_topics([NewTopic("orders"), NewTopic("orders")])


def test_a_missing_or_unasked_result_is_the_servers_fault(
    start_node: Callable[..., FakeNode],
) -> None:
    node = start_node()
    node.handlers["CreateTopics"] = lambda request, context: admin_pb2.CreateTopicsResponse(
        metadata_offset=3
    )
    with client(node.address) as admin:
        result = admin.create_topics([NewTopic("orders")])
        with pytest.raises(UnknownServerError, match="did not answer for topic orders"):
            result.topic_id("orders")

        node.handlers["CreateTopics"] = lambda request, context: admin_pb2.CreateTopicsResponse(
            topics=[admin_pb2.CreatableTopicResult(name="other", topic_id=ORDERS_ID.bytes)]
        )
        with pytest.raises(UnknownServerError, match="not asked for"):
            admin.create_topics([NewTopic("orders")])

        node.handlers["CreateTopics"] = lambda request, context: admin_pb2.CreateTopicsResponse(
            topics=[admin_pb2.CreatableTopicResult(name="orders", topic_id=b"12345")]
        )
        with pytest.raises(UnknownServerError, match="5 bytes"):
            admin.create_topics([NewTopic("orders")])


def test_large_requests_are_split_into_chunks(start_node: Callable[..., FakeNode]) -> None:
    node = start_node()
    node.handlers["CreateTopics"] = creates_topics()
    count = admin_module.TOPICS_PER_REQUEST_MAX + 5
    with client(node.address) as admin:
        result = admin.create_topics([NewTopic(f"t{i}", 1, 1) for i in range(count)])
    assert len(result.all()) == count
    assert [len(r.topics) for r in node.requests("CreateTopics")] == [
        admin_module.TOPICS_PER_REQUEST_MAX,
        5,
    ]


# ----- NOT_CONTROLLER redirects and bounded retries ----------------------------------------------


def test_not_controller_redirects_to_the_named_controller(
    start_node: Callable[..., FakeNode],
) -> None:
    follower, controller = start_node(), start_node()
    follower.handlers["CreateTopics"] = not_controller(
        "CreateTopics", controller.address, controller_id=2
    )
    controller.handlers["CreateTopics"] = creates_topics(ids={"orders": ORDERS_ID})
    sleeps = Sleeps()
    with client(follower.address, sleep=sleeps) as admin:
        assert admin.create_topics([NewTopic("orders", 1, 1)]).topic_id("orders") == ORDERS_ID
        assert admin.controller_address == controller.address
        assert controller.address in admin.addresses
        # The next call goes straight to the controller.
        admin.create_topics([NewTopic("payments", 1, 1)]).all()

    assert follower.methods() == ["CreateTopics"]
    assert controller.methods() == ["CreateTopics", "CreateTopics"]
    assert sleeps.seconds == []  # a redirect to a named controller does not back off


def test_not_controller_without_a_name_backs_off_and_tries_the_others(
    start_node: Callable[..., FakeNode],
) -> None:
    electing, controller = start_node(), start_node()
    electing.handlers["DeleteTopics"] = not_controller("DeleteTopics")
    controller.handlers["DeleteTopics"] = deletes_topics()
    sleeps = Sleeps()
    with client(electing.address, controller.address, sleep=sleeps) as admin:
        result = admin.delete_topics(TopicCollection.of_topic_names(["orders"]))
    result.all()
    assert electing.methods() == ["DeleteTopics"]
    assert controller.methods() == ["DeleteTopics"]
    assert len(sleeps.seconds) == 1
    assert 0.08 <= sleeps.seconds[0] <= 0.12  # retry.backoff.ms 100, jitter 20 %


def test_retries_are_bounded_and_back_off_exponentially(
    start_node: Callable[..., FakeNode],
) -> None:
    a, b = start_node(), start_node()
    for node in (a, b):
        node.handlers["CreateTopics"] = not_controller("CreateTopics")
    sleeps = Sleeps()
    with (
        client(a.address, b.address, retries_max=6, sleep=sleeps) as admin,
        pytest.raises(NotControllerError) as raised,
    ):
        admin.create_topics([NewTopic("orders", 1, 1)])

    assert len(a.calls) + len(b.calls) == 7
    assert (len(a.calls), len(b.calls)) == (4, 3)  # alternating, from the first address
    assert len(sleeps.seconds) == 6
    for retry, pause in enumerate(sleeps.seconds):
        nominal = min(1.0, 0.1 * 2**retry)
        assert nominal * 0.8 <= pause <= min(1.0, nominal * 1.2)
    assert raised.value.retriable
    assert raised.value.controller_id is None
    assert "in 7 attempts" in str(raised.value)
    assert a.address in str(raised.value)


def test_controllers_naming_each_other_still_back_off(
    start_node: Callable[..., FakeNode],
) -> None:
    a, b = start_node(), start_node()
    a.handlers["CreateTopics"] = not_controller("CreateTopics", b.address, 2)
    b.handlers["CreateTopics"] = not_controller("CreateTopics", a.address, 1)
    sleeps = Sleeps()
    with (
        client(a.address, retries_max=4, sleep=sleeps) as admin,
        pytest.raises(NotControllerError) as raised,
    ):
        admin.create_topics([NewTopic("orders")])
    assert len(a.calls) + len(b.calls) == 5
    # The first redirect to each node is immediate; returning to one already named backs off.
    assert len(sleeps.seconds) == 2
    assert [m for m, _ in a.calls + b.calls] == ["CreateTopics"] * 5
    assert (len(a.calls), len(b.calls)) == (3, 2)
    # What the last node (a) answered: the controller is node 2 at b.
    assert raised.value.controller_id == 2
    assert raised.value.controller_endpoint == b.address


def test_a_lost_controller_is_forgotten(start_node: Callable[..., FakeNode]) -> None:
    follower, controller = start_node(), start_node()
    follower.handlers["ListTopics"] = lambda request, context: admin_pb2.ListTopicsResponse()
    follower.handlers["CreateTopics"] = not_controller("CreateTopics", controller.address, 2)
    controller.handlers["CreateTopics"] = creates_topics()
    with client(follower.address) as admin:
        admin.create_topics([NewTopic("orders")]).all()
        assert admin.controller_address == controller.address
        controller.handlers["ListTopics"] = not_controller("ListTopics")
        admin.list_topics()  # the old controller lost leadership: go elsewhere
        assert admin.controller_address is None
    assert follower.methods() == ["CreateTopics", "ListTopics"]


# ----- transport failures and deadlines ----------------------------------------------------------


def test_an_unreachable_address_is_skipped(start_node: Callable[..., FakeNode]) -> None:
    node = start_node()
    node.handlers["ListTopics"] = lambda request, context: admin_pb2.ListTopicsResponse(
        metadata_offset=7
    )
    dead = closed_address()
    sleeps = Sleeps()
    with client(dead, node.address, sleep=sleeps) as admin:
        assert admin.list_topics().metadata_offset == 7
    assert len(sleeps.seconds) == 1


def test_no_reachable_node_is_a_connection_error() -> None:
    dead = [closed_address(), closed_address()]
    with client(*dead, retries_max=3) as admin, pytest.raises(AdminConnectionError) as raised:
        admin.list_topics()
    error = raised.value
    assert isinstance(error, AdminTransportError)
    assert error.retriable
    assert error.status == "UNAVAILABLE"
    assert len(error.failures) == 4
    assert all(address in str(error) for address in dead)
    assert "in 4 attempts" in str(error)


def test_every_attempt_carries_the_calls_deadline(start_node: Callable[..., FakeNode]) -> None:
    node = start_node()
    node.handlers["ListTopics"] = lambda request, context: admin_pb2.ListTopicsResponse()
    with client(node.address, timeout_s=5.0) as admin:
        admin.list_topics()
        admin.list_topics(timeout_s=1.0)
    first, second = node.time_remaining
    assert first is not None
    assert second is not None
    # gRPC sends the deadline as a timeout and rounds it up a little.
    assert 3.0 < first <= 5.1
    assert 0.0 < second <= 1.1


def test_a_slow_server_is_a_timeout_whose_outcome_is_unknown(
    start_node: Callable[..., FakeNode],
) -> None:
    node = start_node()

    def hang(request: Any, context: Any) -> Any:
        node.release.wait(10)
        return admin_pb2.CreateTopicsResponse()

    node.handlers["CreateTopics"] = hang
    started = time.monotonic()
    with (
        client(node.address, timeout_s=0.5) as admin,
        pytest.raises(AdminTimeoutError) as raised,
    ):
        admin.create_topics([NewTopic("orders")])
    assert time.monotonic() - started < 3.0
    assert raised.value.status == "DEADLINE_EXCEEDED"
    assert raised.value.retriable
    assert "outcome is unknown" in str(raised.value)
    assert len(node.calls) == 1  # a mutation that may have happened is not sent again


def test_retries_never_outlive_the_deadline() -> None:
    # Real sleeps this time: backoffs are cut short by the deadline, which then wins.
    with (
        AdminClient(
            closed_address(), timeout_s=0.4, retries_max=1000, retry_backoff_max_s=0.2
        ) as admin,
        pytest.raises(AdminTimeoutError),
    ):
        started = time.monotonic()
        admin.list_topics()
    assert time.monotonic() - started < 2.0


def test_other_grpc_statuses_are_not_retried(start_node: Callable[..., FakeNode]) -> None:
    node = start_node(admin=False)  # e.g. a node without the admin API
    with client(node.address) as admin, pytest.raises(AdminTransportError) as raised:
        admin.list_topics()
    assert type(raised.value) is AdminTransportError
    assert raised.value.status == "UNIMPLEMENTED"
    assert not raised.value.retriable


def test_request_level_errors(start_node: Callable[..., FakeNode]) -> None:
    node, other = start_node(), start_node()
    node.handlers["CreateTopics"] = request_error(
        "CreateTopics", ErrorCode.INVALID_REQUEST, "more than 1000 topics in one request"
    )
    node.handlers["ListTopics"] = request_error(
        "ListTopics", ErrorCode.REQUEST_TIMED_OUT, "the image did not reach offset 99 in time"
    )
    for each in (node, other):
        each.handlers["DeleteTopics"] = request_error(
            "DeleteTopics", ErrorCode.REQUEST_TIMED_OUT, "not committed in time"
        )
    other.handlers["ListTopics"] = lambda request, context: admin_pb2.ListTopicsResponse(
        metadata_offset=99
    )
    sleeps = Sleeps()
    with client(node.address, other.address, sleep=sleeps) as admin:
        with pytest.raises(InvalidRequestError, match="more than 1000"):
            admin.create_topics([NewTopic("orders")])
        # A read may be retried elsewhere ...
        assert admin.list_topics(min_metadata_offset=99).metadata_offset == 99
        # ... a mutation is not: it may have happened.
        with pytest.raises(RequestTimedOutError):
            admin.delete_topics(TopicCollection.of_topic_names(["orders"]))
    assert node.methods() == ["CreateTopics", "ListTopics"]
    # The next call starts where the last one succeeded; the mutation was sent exactly once.
    assert other.methods() == ["ListTopics", "DeleteTopics"]


# ----- describe, delete, list, cluster -----------------------------------------------------------


def test_describe_by_name_and_by_id(start_node: Callable[..., FakeNode]) -> None:
    node = start_node()
    node.handlers["DescribeTopics"] = describes_topics(metadata_offset=50)
    unknown_id = Uuid.parse("AAAAAAAAAAAAAAAAAAAAAg")
    with client(node.address) as admin:
        by_name = admin.describe_topics(TopicCollection.of_topic_names(["orders", "missing"]))
        by_id = admin.describe_topics(TopicCollection.of_topic_ids([ORDERS_ID, unknown_id]))

    assert by_name.topic_id_values() is None
    names = by_name.topic_name_values()
    assert names is not None
    orders = names["orders"].result()
    assert orders.topic_id == ORDERS_ID
    assert orders.creation_offset == 42
    assert not orders.is_internal
    assert orders.partitions == (
        TopicPartitionInfo(0, 1, (1, 2), (1, 2), leader_epoch=2),
        TopicPartitionInfo(1, None, (2, 3), (), leader_epoch=3),
    )
    assert dict(orders.configs) == {"cleanup.policy": "compact"}
    assert orders.replication_factor == 2
    with pytest.raises(UnknownTopicOrPartitionError, match="missing"):
        names["missing"].result()
    with pytest.raises(UnknownTopicOrPartitionError):
        by_name.all_topic_names()
    with pytest.raises(ValueError, match="named by name"):
        by_name.all_topic_ids()
    assert by_name.metadata_offset == 50

    assert by_id.topic_name_values() is None
    ids = by_id.topic_id_values()
    assert ids is not None
    assert list(ids) == [ORDERS_ID, unknown_id]
    assert ids[ORDERS_ID].result().name == "orders"
    with pytest.raises(UnknownTopicIdError) as raised:
        ids[unknown_id].result()
    assert raised.value.retriable  # Kafka: the id may not have reached this node yet
    with pytest.raises(ValueError, match="named by id"):
        by_id.all_topic_names()

    by_name_request, by_id_request = node.requests("DescribeTopics")
    assert [(r.name, r.topic_id) for r in by_name_request.topics] == [
        ("orders", b""),
        ("missing", b""),
    ]
    assert [(r.name, r.topic_id) for r in by_id_request.topics] == [
        ("", ORDERS_ID.bytes),
        ("", unknown_id.bytes),
    ]


def test_zero_ids_and_empty_names_fail_locally(start_node: Callable[..., FakeNode]) -> None:
    node = start_node()
    node.handlers["DescribeTopics"] = describes_topics()
    node.handlers["DeleteTopics"] = deletes_topics()
    with client(node.address) as admin:
        described = admin.describe_topics(TopicCollection.of_topic_ids([ZERO_UUID, ORDERS_ID]))
        deleted = admin.delete_topics(TopicCollection.of_topic_names(["", "orders"]))
        nothing = admin.describe_topics(TopicCollection.of_topic_ids([ZERO_UUID]))
    ids = described.topic_id_values()
    assert ids is not None
    with pytest.raises(InvalidTopicError, match="ZERO_UUID"):
        ids[ZERO_UUID].result()
    assert ids[ORDERS_ID].ok
    names = deleted.topic_name_values()
    assert names is not None
    with pytest.raises(InvalidTopicError, match="empty"):
        names[""].result()
    assert names["orders"].result() == DeletedTopic("orders", ORDERS_ID)
    assert nothing.metadata_offset == -1
    assert [len(r.topics) for _, r in node.calls] == [1, 1]  # zero ids and "" never sent


def test_delete_by_id_returns_name_and_id(start_node: Callable[..., FakeNode]) -> None:
    node = start_node()
    node.handlers["DeleteTopics"] = deletes_topics(metadata_offset=61)
    gone = Uuid.parse("AAAAAAAAAAAAAAAAAAAAAg")
    with client(node.address) as admin:
        result = admin.delete_topics(TopicCollection.of_topic_ids([ORDERS_ID, gone]))
    ids = result.topic_id_values()
    assert ids is not None
    assert ids[ORDERS_ID].result() == DeletedTopic("orders", ORDERS_ID)
    with pytest.raises(UnknownTopicIdError):
        result.all()
    assert len(result.errors()) == 1
    assert result.metadata_offset == 61
    (request,) = node.requests("DeleteTopics")
    assert [r.topic_id for r in request.topics] == [ORDERS_ID.bytes, gone.bytes]


def test_delete_by_name_with_an_expected_id(start_node: Callable[..., FakeNode]) -> None:
    node = start_node()
    node.handlers["DeleteTopics"] = deletes_topics()
    names = TopicCollection.of_topic_names(["orders", "__cluster_metadata"])
    with client(node.address) as admin:
        result = admin.delete_topics(names, expected_topic_ids={"orders": PAYMENTS_ID})
        with pytest.raises(ValueError, match="not being deleted"):
            admin.delete_topics(names, expected_topic_ids={"other": ORDERS_ID})
        with pytest.raises(ValueError, match="of_topic_names"):
            admin.delete_topics(
                TopicCollection.of_topic_ids([ORDERS_ID]), expected_topic_ids={"a": ORDERS_ID}
            )
    values = result.topic_name_values()
    assert values is not None
    with pytest.raises(InconsistentTopicIdError, match="another id"):
        values["orders"].result()
    assert values["__cluster_metadata"].ok
    (request,) = node.requests("DeleteTopics")
    assert [(t.name, t.expected_topic_id) for t in request.topics] == [
        ("orders", PAYMENTS_ID.bytes),
        ("__cluster_metadata", b""),
    ]


def test_reads_wait_for_the_clients_own_writes(start_node: Callable[..., FakeNode]) -> None:
    node = start_node()
    node.handlers["CreateTopics"] = creates_topics(first_offset=70)
    node.handlers["DescribeTopics"] = describes_topics(metadata_offset=80)
    node.handlers["ListTopics"] = lambda request, context: admin_pb2.ListTopicsResponse(
        metadata_offset=80
    )
    node.handlers["DescribeCluster"] = lambda request, context: admin_pb2.DescribeClusterResponse(
        metadata_offset=80
    )
    orders = TopicCollection.of_topic_names(["orders"])
    with client(node.address) as admin:
        admin.list_topics()  # nothing written yet: no wait
        written = admin.create_topics([NewTopic("orders", 1, 1)]).metadata_offset
        assert written == 71
        admin.describe_topics(orders)
        admin.describe_topics(orders, min_metadata_offset=75)  # a higher explicit offset wins
        admin.describe_topics(orders, min_metadata_offset=3)  # a lower one does not
        admin.list_topics()
        admin.describe_cluster()
    with client(node.address, read_your_writes=False) as admin:
        admin.create_topics([NewTopic("orders", 1, 1)])
        admin.describe_topics(orders)
        admin.describe_topics(orders, min_metadata_offset=0)

    def offsets(requests: list[Any]) -> list[int | None]:
        return [
            r.min_metadata_offset if r.HasField("min_metadata_offset") else None for r in requests
        ]

    assert offsets(node.requests("ListTopics")) == [None, 71]
    assert offsets(node.requests("DescribeCluster")) == [71]
    assert offsets(node.requests("DescribeTopics")) == [71, 75, 71, None, 0]


def test_chunks_of_a_read_never_go_back_in_time(start_node: Callable[..., FakeNode]) -> None:
    node = start_node()
    node.handlers["DescribeTopics"] = describes_topics(metadata_offset=90)
    names = [f"t{i}" for i in range(admin_module.TOPICS_PER_REQUEST_MAX + 1)]
    with client(node.address) as admin:
        result = admin.describe_topics(TopicCollection.of_topic_names(names))
    first, second = node.requests("DescribeTopics")
    assert not first.HasField("min_metadata_offset")
    assert second.min_metadata_offset == 90
    assert result.metadata_offset == 90
    assert len(result.errors()) == len(names)


def test_list_topics(start_node: Callable[..., FakeNode]) -> None:
    node = start_node()
    node.handlers["ListTopics"] = lambda request, context: admin_pb2.ListTopicsResponse(
        metadata_offset=12,
        topics=[
            admin_pb2.TopicListing(name="orders", topic_id=ORDERS_ID.bytes, creation_offset=9),
            admin_pb2.TopicListing(
                name="__cluster_metadata", topic_id=PAYMENTS_ID.bytes, is_internal=True
            ),
        ],
    )
    with client(node.address) as admin:
        listed = admin.list_topics(exclude_internal=True)
    assert [t.name for t in listed.listings()] == ["__cluster_metadata", "orders"]
    assert listed.names() == {"orders", "__cluster_metadata"}
    assert listed.names_to_listings()["orders"].topic_id == ORDERS_ID
    assert listed.names_to_listings()["orders"].creation_offset == 9
    assert listed.names_to_listings()["__cluster_metadata"].is_internal
    assert listed.metadata_offset == 12
    assert node.requests("ListTopics")[0].exclude_internal


def test_describe_cluster_teaches_the_controllers(start_node: Callable[..., FakeNode]) -> None:
    node, second = start_node(), start_node()
    host, port = second.address.rsplit(":", 1)
    node.handlers["DescribeCluster"] = lambda request, context: admin_pb2.DescribeClusterResponse(
        cluster_id="MkU3OEVBNTcwNTJENDM2Qg",
        controller_id=2,
        controller_endpoint=second.address,
        metadata_offset=5,
        brokers=[
            admin_pb2.DescribeClusterBroker(
                broker_id=100, host="127.0.0.1", port=9092, rack="r1", broker_epoch=4
            ),
            admin_pb2.DescribeClusterBroker(
                broker_id=101, host="127.0.0.1", port=9093, is_fenced=True, broker_epoch=6
            ),
        ],
        controllers=[admin_pb2.DescribeClusterController(node_id=2, host=host, port=int(port))],
        metadata_topic_id=PAYMENTS_ID.bytes,
    )
    with client(node.address) as admin:
        cluster = admin.describe_cluster()
        assert admin.addresses == (node.address, second.address)
    assert cluster.cluster_id == "MkU3OEVBNTcwNTJENDM2Qg"
    assert cluster.controller_id == 2
    assert [(b.broker_id, b.rack, b.is_fenced, b.broker_epoch) for b in cluster.nodes] == [
        (100, "r1", False, 4),
        (101, None, True, 6),
    ]
    assert cluster.controllers[0].endpoint == second.address
    assert cluster.metadata_topic_id == PAYMENTS_ID
    assert cluster.metadata_offset == 5


def test_describe_quorum_asks_quorum_service(start_node: Callable[..., FakeNode]) -> None:
    electing, node = start_node(), start_node()
    electing.handlers["DescribeQuorum"] = lambda request, context: raft_pb2.DescribeQuorumResponse(
        error_code=ErrorCode.NOT_LEADER_OR_FOLLOWER, leader_id=-1, leader_epoch=4
    )
    node.handlers["DescribeQuorum"] = lambda request, context: raft_pb2.DescribeQuorumResponse(
        cluster_id="c",
        topic_id=METADATA_TOPIC_ID.bytes,
        leader_id=1,
        leader_epoch=5,
        high_watermark=17,
        current_voters=[
            raft_pb2.ReplicaState(
                replica_id=1,
                log_end_offset=17,
                last_fetch_timestamp_ms=-1,
                last_caught_up_timestamp_ms=-1,
            )
        ],
    )
    sleeps = Sleeps()
    with client(electing.address, node.address, sleep=sleeps) as admin:
        quorum = admin.describe_quorum()
        assert admin.controller_address is None  # a node answering may just have forwarded
    assert (quorum.leader_id, quorum.leader_epoch, quorum.high_watermark) == (1, 5, 17)
    assert quorum.voters[0].replica_id == 1
    assert len(sleeps.seconds) == 1
    (request,) = electing.requests("DescribeQuorum")
    assert (request.cluster_id, request.topic_id) == ("", b"")

    with (
        client(electing.address, retries_max=2) as admin,
        pytest.raises(NotLeaderOrFollowerError),
    ):
        admin.describe_quorum()


# ----- lifecycle ---------------------------------------------------------------------------------


def test_close_is_idempotent_and_final(start_node: Callable[..., FakeNode]) -> None:
    node = start_node()
    node.handlers["ListTopics"] = lambda request, context: admin_pb2.ListTopicsResponse()
    admin = client(node.address)
    admin.list_topics()
    admin.close()
    admin.close()
    with pytest.raises(RuntimeError, match="closed"):
        admin.list_topics()


def test_every_admin_error_is_an_admin_error() -> None:
    for error in (
        error_for(ErrorCode.INVALID_CONFIG, ""),
        UnknownServerError("x"),
        AdminTimeoutError("x"),
        AdminConnectionError("x"),
        AdminTransportError("x"),
    ):
        assert isinstance(error, AdminError)
    assert isinstance(error_for(ErrorCode.INVALID_CONFIG, ""), InvalidConfigError)


# ----- ListTopics pages ------------------------------------------------------------------------


def test_list_topics_follows_the_cursor_and_never_goes_back_in_time(
    start_node: Callable[..., FakeNode],
) -> None:
    node = start_node()
    pages = {
        "": (["a", "b"], "c", 10),
        "c": (["c", "d"], "e", 12),
        "e": (["e"], "", 11),
    }

    def answer(request: Any, context: Any) -> admin_pb2.ListTopicsResponse:
        names, next_cursor, offset = pages[request.cursor]
        return admin_pb2.ListTopicsResponse(
            topics=[admin_pb2.TopicListing(name=n, topic_id=Uuid.random().bytes) for n in names],
            next_cursor=next_cursor,
            metadata_offset=offset,
        )

    node.handlers["ListTopics"] = answer
    with client(node.address) as admin:
        listing = admin.list_topics()
    assert [t.name for t in listing.topics] == ["a", "b", "c", "d", "e"]
    assert listing.metadata_offset == 12
    floors = [r.min_metadata_offset if r.HasField("min_metadata_offset") else None
              for r in node.requests("ListTopics")]  # fmt: skip
    assert floors == [None, 10, 12], "each later page is read at or after the newest offset seen"


def test_a_cursor_that_does_not_advance_is_refused(start_node: Callable[..., FakeNode]) -> None:
    node = start_node()
    node.handlers["ListTopics"] = lambda request, context: admin_pb2.ListTopicsResponse(
        next_cursor=request.cursor or "m"
    )
    with client(node.address) as admin, pytest.raises(UnknownServerError, match="list forever"):
        admin.list_topics()
    assert len(node.requests("ListTopics")) == 2


def described(source: int) -> Handler:
    """A DescribeConfigs answer: log.retention.ms=1 from ``source`` for each resource."""

    def answer(request: Any, context: Any) -> Any:
        response = admin_pb2.DescribeConfigsResponse(controller_id=1, metadata_offset=9)
        for resource in request.resources:
            result = response.results.add(
                resource_type=resource.resource_type, resource_name=resource.resource_name
            )
            result.configs.add(name="log.retention.ms", value="1", source=source, config_type=5)
        return response

    return answer


def test_a_broker_s_configs_are_asked_of_that_broker_else_of_a_controller(
    start_node: Callable[..., FakeNode],
) -> None:
    """As Kafka's AdminClient: broker 101's resource goes to broker 101 (its file's values
    are known only there); unreachable or fenced, a controller answers from its image."""
    controller, broker = start_node(), start_node()
    host, port = broker.address.rsplit(":", 1)
    brokers = [
        admin_pb2.DescribeClusterBroker(broker_id=101, host=host, port=int(port)),
        admin_pb2.DescribeClusterBroker(broker_id=102, host=host, port=1, is_fenced=True),
    ]
    controller.handlers["DescribeCluster"] = lambda request, context: (
        admin_pb2.DescribeClusterResponse(cluster_id="c", controller_id=1, brokers=brokers)
    )
    controller.handlers["DescribeConfigs"] = described(source=2)
    broker.handlers["DescribeConfigs"] = described(source=4)
    with client(controller.address) as admin:
        outcome = admin.describe_broker_configs(101, include_synonyms=True)
        assert [(c.name, c.value, c.source) for c in outcome.configs] == [
            ("log.retention.ms", "1", 4)
        ]
        (asked,) = broker.requests("DescribeConfigs")
        assert [(r.resource_type, r.resource_name) for r in asked.resources] == [(4, "101")]
        assert asked.include_synonyms
        # broker 102 is fenced, broker 7 unknown: the controllers' view
        assert admin.describe_broker_configs(102).configs[0].source == 2
        assert admin.describe_broker_configs(7).configs[0].source == 2
        broker.handlers["DescribeConfigs"] = lambda request, context: context.abort(
            grpc.StatusCode.UNAVAILABLE, "not caught up"
        )
        assert admin.describe_broker_configs(101).configs[0].source == 2
