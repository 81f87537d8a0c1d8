"""Kafka's own clients against a real cluster (docs/kafka-listener.md): 3 controllers and 2
brokers as processes, mTLS and ACLs on, every broker with an SSL Kafka listener (KAFKA) and a
PLAINTEXT one (KAFKA_PLAIN). The pinned PyPI clients - kafka-python's KafkaAdminClient and
confluent-kafka's (librdkafka's) AdminClient - create, list, describe and delete topics; the
topic id each one sees must be the one `metaquorum topics --describe` prints, and the KIP-516
story (delete, recreate under the same name, the old id unknown) must read the same through
both. Also: writes are forwarded with the client's principal (ACLs apply as on the gRPC side,
and only a node certificate may forward), read-your-writes on one connection, and hostile bytes
that leave the broker serving. The other clients' admin APIs: kafkajs' admin client
(tests/fixtures/kafkajs/admin.js: topics, AlterConfigs/DescribeConfigs, ACLs), aiokafka's
AIOKafkaAdminClient (topics, configs), kafka-python's configs (incremental and not) and
confluent-kafka's ACLs.

One cluster for the module (about 10 s to start); each test uses its own topic names.
"""

from __future__ import annotations

import base64
import json
import os
import random
import re
import socket
import ssl
import subprocess
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import KafkaException, TopicCollection
from confluent_kafka.admin import AclBindingFilter as ConfluentFilter
from confluent_kafka.admin import AclOperation as ConfluentOperation
from confluent_kafka.admin import AclPermissionType as ConfluentPermission
from confluent_kafka.admin import AdminClient as ConfluentAdmin
from confluent_kafka.admin import NewPartitions as ConfluentNewPartitions
from confluent_kafka.admin import NewTopic as ConfluentNewTopic
from confluent_kafka.admin import ResourcePatternType as ConfluentPattern
from confluent_kafka.admin import ResourceType as ConfluentResource
from kafka import KafkaAdminClient
from kafka.admin import (
    ACL,
    ACLFilter,
    ACLOperation,
    ACLPermissionType,
    ACLResourcePatternType,
    NewTopic,
    ResourcePattern,
    ResourcePatternFilter,
    ResourceType,
)
from kafka.errors import (
    IncompatibleBrokerVersion,
    InvalidPartitionsError,
    TopicAlreadyExistsError,
    TopicAuthorizationFailedError,
    UnknownTopicIdError,
)
from kio.index import load_request_schema, load_response_schema
from kio.serial import entity_reader

from broker.kafka.protocol import CREATE_PARTITIONS_FORWARDABLE, build
from quorum.errors import ErrorCode
from quorum.harness import ProcessCluster, process_cluster, wait_until
from quorum.rpc.v1 import admin_pb2, admin_pb2_grpc
from quorum.security.identity import FORWARDED_PRINCIPAL_KEY
from tests.process.test_kafka_data_process import listening
from tests.unit.kafka.test_kafka_protocol import Harness, image_with_topics, mutate

BROKERS = (101, 102)
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ProcessCluster]:
    with process_cluster(
        tmp_path_factory.mktemp("kafka"),
        brokers=len(BROKERS),
        kafka_listeners={"KAFKA": "SSL", "KAFKA_PLAIN": "PLAINTEXT"},
    ) as cluster:
        cluster.format()
        cluster.start_all()
        cluster.wait_for_leader(timeout_s=30)
        for broker_id in BROKERS:
            for name in ("KAFKA", "KAFKA_PLAIN"):
                address = cluster.nodes[broker_id].kafka_address(name)
                wait_until(lambda a=address: listening(a), 30, f"Kafka listener {address}")
        with cluster.admin() as admin:
            wait_until(
                lambda: sum(not b.is_fenced for b in admin.describe_cluster().brokers) == 2,
                30,
                "both brokers unfenced",
            )
        yield cluster
        for broker_id in BROKERS:  # nothing a client sent made a handler fail
            assert "kafka_request_failed" not in cluster.logs(broker_id)


def ssl_files(cluster: ProcessCluster, name: str) -> tuple[str, str]:
    assert cluster.certs is not None
    return str(cluster.certs.ca), str(cluster.certs.client_keystore(name))


def kafka_python(cluster: ProcessCluster, name: str = "admin", broker: int = 101) -> Any:
    ca, keystore = ssl_files(cluster, name)
    return KafkaAdminClient(
        bootstrap_servers=cluster.nodes[broker].kafka_address("KAFKA"),
        security_protocol="SSL",
        ssl_cafile=ca,
        ssl_certfile=keystore,
        ssl_keyfile=keystore,
        request_timeout_ms=20_000,
    )


def confluent(cluster: ProcessCluster, name: str = "admin", *, plaintext: bool = False) -> Any:
    broker = cluster.nodes[102]
    if plaintext:
        return ConfluentAdmin({"bootstrap.servers": broker.kafka_address("KAFKA_PLAIN")})
    ca, keystore = ssl_files(cluster, name)
    return ConfluentAdmin(
        {
            "bootstrap.servers": broker.kafka_address("KAFKA"),
            "security.protocol": "SSL",
            "ssl.ca.location": ca,
            "ssl.certificate.location": keystore,
            "ssl.key.location": keystore,
        }
    )


def cli_topic_id(cluster: ProcessCluster, name: str) -> str:
    """The TopicId `metaquorum topics --describe` prints (Kafka's base64 form)."""
    result = cluster.run_cli(
        "topics", "--bootstrap-server", cluster.bootstrap, "--describe", "--topic", name
    )
    match = re.search(r"TopicId: (\S+)", result.stdout)
    assert match, result.stdout + result.stderr
    return match.group(1)


def cli_describe_id(cluster: ProcessCluster, topic_id: str) -> str:
    result = cluster.run_cli(
        "topics", "--bootstrap-server", cluster.bootstrap, "--describe", "--topic-id", topic_id,
        check=False,
    )  # fmt: skip
    return result.stdout + result.stderr


def as_base64(value: uuid.UUID | str) -> str:
    """Kafka's form of an id (unpadded URL-safe base64) from kafka-python's UUID text."""
    raw = (value if isinstance(value, uuid.UUID) else uuid.UUID(value)).bytes
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def confluent_described(
    admin: Any, name: str, ready: Callable[[Any], bool] = lambda d: True
) -> Any:
    """The topic's description once a broker answers it and ``ready`` holds: librdkafka asks
    any broker, and each answers from its own image (brokers are not linearizable)."""

    def attempt() -> Any:
        try:
            (described,) = (
                f.result(20) for f in admin.describe_topics(TopicCollection([name])).values()
            )
        except KafkaException:
            return None
        return described if ready(described) else None

    return wait_until(attempt, 10, f"{name} described")


def confluent_id(topic_id: Any) -> str:
    """Kafka's form of a confluent-kafka ``Uuid``, from its bits: its ``str()`` is librdkafka's
    base64 with the standard alphabet ('+', '/'), where Kafka's is URL-safe ('-', '_')."""
    most = topic_id.get_most_significant_bits() % 2**64
    least = topic_id.get_least_significant_bits() % 2**64
    raw = most.to_bytes(8, "big") + least.to_bytes(8, "big")
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


# ----- kafka-python ---------------------------------------------------------------------------


def test_kafka_python_admin_client(cluster: ProcessCluster) -> None:
    admin = kafka_python(cluster)
    try:
        admin.create_topics([NewTopic("kp-orders", 3, 2)])
        assert "kp-orders" in admin.list_topics()
        with pytest.raises(TopicAlreadyExistsError):
            admin.create_topics([NewTopic("kp-orders", 1, 1)])
        (described,) = admin.describe_topics(["kp-orders"])
        first_id = described["topic_id"]
        assert as_base64(first_id) == cli_topic_id(cluster, "kp-orders")
        assert sorted(p["partition_index"] for p in described["partitions"]) == [0, 1, 2]
        assert all(len(p["replica_nodes"]) == 2 for p in described["partitions"])

        cluster_info = admin.describe_cluster()
        assert cluster_info["cluster_id"] == cluster.cluster_id
        assert {b["broker_id"] for b in cluster_info["brokers"]} == set(BROKERS)
        assert cluster_info["controller_id"] in BROKERS

        # By id (Metadata v12): the same topic.
        (by_id,) = admin.describe_topics([uuid.UUID(first_id)])
        assert by_id["name"] == "kp-orders"

        # KIP-516: delete by name, recreate, the new topic has a new id, the old one is unknown.
        admin.delete_topics(["kp-orders"])
        assert "kp-orders" not in admin.list_topics()
        admin.create_topics([NewTopic("kp-orders", 1, 1)])
        (recreated,) = admin.describe_topics(["kp-orders"])
        assert recreated["topic_id"] != first_id
        assert as_base64(recreated["topic_id"]) == cli_topic_id(cluster, "kp-orders")
        (old,) = admin.describe_topics([uuid.UUID(first_id)])
        assert old["error_code"] == UnknownTopicIdError.errno
        assert old["name"] is None
        assert "UNKNOWN_TOPIC_ID" in cli_describe_id(cluster, as_base64(first_id))

        # Delete by id (DeleteTopics v6).
        admin.delete_topics([uuid.UUID(recreated["topic_id"])])
        assert "kp-orders" not in admin.list_topics()

        # CreatePartitions: served once the admin API has it (docs/kafka-listener.md); until
        # then the client says the broker does not support it.
        admin.create_topics([NewTopic("kp-grow", 1, 1)])
        if not CREATE_PARTITIONS_FORWARDABLE:
            with pytest.raises(IncompatibleBrokerVersion):
                admin.create_partitions({"kp-grow": 2})
        else:
            admin.create_partitions({"kp-grow": 3})
            (grown,) = admin.describe_topics(["kp-grow"])
            assert len(grown["partitions"]) == 3
            with pytest.raises(InvalidPartitionsError):
                admin.create_partitions({"kp-grow": 2})
    finally:
        admin.close()


# ----- confluent-kafka (librdkafka) ------------------------------------------------------------


def test_confluent_kafka_admin_client(cluster: ProcessCluster) -> None:
    admin = confluent(cluster)
    for future in admin.create_topics([ConfluentNewTopic("ck-orders", 2, 2)]).values():
        future.result(20)
    # Forwarded through one broker; librdkafka may ask the other, which applies it a little later.
    wait_until(lambda: "ck-orders" in admin.list_topics(timeout=20).topics, 10, "ck-orders listed")
    description = confluent_described(admin, "ck-orders")
    first_id = confluent_id(description.topic_id)
    assert first_id == cli_topic_id(cluster, "ck-orders")
    assert [p.id for p in description.partitions] == [0, 1]
    assert not description.is_internal

    cluster_info = admin.describe_cluster().result(20)
    assert cluster_info.cluster_id == cluster.cluster_id
    assert {node.id for node in cluster_info.nodes} == set(BROKERS)
    assert cluster_info.controller.id in BROKERS

    # KIP-516, read through librdkafka (which can only name topics): same name, a new id.
    for future in admin.delete_topics(["ck-orders"]).values():
        future.result(20)
    for future in admin.create_topics([ConfluentNewTopic("ck-orders", 1, 1)]).values():
        future.result(20)
    recreated = confluent_described(
        admin, "ck-orders", lambda d: confluent_id(d.topic_id) != first_id
    )
    assert confluent_id(recreated.topic_id) != first_id
    assert confluent_id(recreated.topic_id) == cli_topic_id(cluster, "ck-orders")
    assert "UNKNOWN_TOPIC_ID" in cli_describe_id(cluster, first_id)
    # ... and through kafka-python by the old id: the same story.
    # Broker 102 answers from its own image: it may apply the recreation a moment later than
    # the broker the writes went through (brokers are not linearizable across connections).
    other = kafka_python(cluster, broker=102)
    try:
        wait_until(
            lambda: (
                as_base64(other.describe_topics(["ck-orders"])[0]["topic_id"])
                == confluent_id(recreated.topic_id)
            ),
            10,
            "broker 102 applying the recreation",
        )
        (old,) = other.describe_topics([uuid.UUID(bytes=base64.urlsafe_b64decode(first_id + "=="))])
        assert old["error_code"] == UnknownTopicIdError.errno
    finally:
        other.close()

    # CreatePartitions: served once the admin API has it (docs/kafka-listener.md).
    grow = admin.create_partitions([ConfluentNewPartitions("ck-orders", 2)])
    if not CREATE_PARTITIONS_FORWARDABLE:
        with pytest.raises(KafkaException):
            for future in grow.values():
                future.result(20)
    else:
        for future in grow.values():
            future.result(20)

        def partitions() -> list[int]:
            described = admin.describe_topics(TopicCollection(["ck-orders"])).values()
            return [p.id for f in described for p in f.result(20).partitions]

        # librdkafka may ask another broker than the one that forwarded the write.
        wait_until(lambda: partitions() == [0, 1], 10, "ck-orders with 2 partitions")

    for future in admin.delete_topics(["ck-orders"]).values():
        future.result(20)
    wait_until(
        lambda: "ck-orders" not in admin.list_topics(timeout=20).topics, 10, "ck-orders gone"
    )


# ----- authorization through the Kafka listener -------------------------------------------------


def test_acls_apply_to_kafka_clients_and_writes_carry_the_client_principal(
    cluster: ProcessCluster,
) -> None:
    admin = kafka_python(cluster)
    alice = kafka_python(cluster, "alice")
    try:
        admin.create_topics([NewTopic("acl-orders", 1, 1)])
        # alice has no ACLs: her forwarded create is refused by the controller as User:CN=alice
        # (the broker's own node certificate grants her nothing), and she sees no topics.
        with pytest.raises(TopicAuthorizationFailedError):
            alice.create_topics([NewTopic("alice-topic", 1, 1)])
        assert "acl-orders" not in alice.list_topics()
        (refused,) = alice.describe_topics(["acl-orders"])
        assert refused["error_code"] == TopicAuthorizationFailedError.errno

        acl = ACL(
            principal="User:CN=alice",
            host="*",
            operation=ACLOperation.DESCRIBE,
            permission_type=ACLPermissionType.ALLOW,
            resource_pattern=ResourcePattern(ResourceType.TOPIC, "acl-orders"),
        )
        created = admin.create_acls([acl])
        assert not created["failed"], created
        wait_until(
            lambda: alice.describe_topics(["acl-orders"])[0]["error_code"] == 0,
            10,
            "the ACL on the broker alice asks",
        )
        (described,) = alice.describe_topics(["acl-orders"])
        assert described["name"] == "acl-orders"
        listed, error = admin.describe_acls(
            ACLFilter(
                principal="User:CN=alice",
                host="*",
                operation=ACLOperation.ANY,
                permission_type=ACLPermissionType.ANY,
                resource_pattern=ResourcePatternFilter(
                    ResourceType.ANY, None, ACLResourcePatternType.ANY
                ),
            )
        )
        assert [a.resource_pattern.resource_name for a in listed] == ["acl-orders"]
        assert error.errno == 0
        deleted = admin.delete_acls([acl])
        assert [len(matches) for _, matches, _ in deleted] == [1]
        # Another client's connection: the broker answers from its image once it has applied
        # the removal (brokers are not linearizable; read-your-writes holds per connection).
        wait_until(
            lambda: "acl-orders" not in alice.list_topics(), 10, "the ACL removal on the broker"
        )
    finally:
        alice.close()
        admin.close()


def test_describe_acls_without_describe_on_the_cluster_is_refused_and_librdkafka_drops_it(
    cluster: ProcessCluster,
) -> None:
    """The broker answers DescribeAcls from a principal without DESCRIBE on the cluster with
    CLUSTER_AUTHORIZATION_FAILED (31), which kafka-python reports. confluent-kafka reports the
    same answer as an empty list without an error: librdkafka's DescribeAcls response parser
    reads the top-level error code and drops it. Both clients ask the same broker, so the
    difference is the client's (docs/kafka-listener.md#what-the-answers-mean-here)."""
    alice = kafka_python(cluster, "alice")
    try:
        everything = ACLFilter(
            principal=None,
            host="*",
            operation=ACLOperation.ANY,
            permission_type=ACLPermissionType.ANY,
            resource_pattern=ResourcePatternFilter(
                ResourceType.ANY, None, ACLResourcePatternType.ANY
            ),
        )
        try:
            _, error = alice.describe_acls(everything)
            code = error.errno
        except Exception as raised:  # kafka-python raises the broker's error in some versions
            code = getattr(raised, "errno", None)
        assert code == ErrorCode.CLUSTER_AUTHORIZATION_FAILED, code
    finally:
        alice.close()
    client = confluent(cluster, "alice")  # held: a collected client fails its futures
    listed = client.describe_acls(
        ConfluentFilter(
            ConfluentResource.ANY,
            None,
            ConfluentPattern.ANY,
            None,
            None,
            ConfluentOperation.ANY,
            ConfluentPermission.ANY,
        )
    ).result(20)
    assert listed == [], listed  # no error raised: the 31 was dropped by the client


def test_a_plaintext_kafka_listener_serves_user_anonymous(cluster: ProcessCluster) -> None:
    """Over PLAINTEXT nobody is authenticated: User:ANONYMOUS, whom the ACLs grant nothing."""
    anonymous = confluent(cluster, plaintext=True)
    topics = anonymous.list_topics(timeout=20).topics
    assert set(topics) <= {"__cluster_metadata"}, topics  # nothing it may describe
    created = anonymous.create_topics([ConfluentNewTopic("anonymous-topic", 1, 1)])
    with pytest.raises(KafkaException, match=r"TOPIC_AUTHORIZATION_FAILED|authoriz"):
        for future in created.values():
            future.result(20)


@pytest.mark.parametrize(
    ("who", "allowed"),
    [("node-101", True), ("alice", False), ("admin", False)],
    ids=["broker-certificate", "client-certificate", "admin-certificate"],
)
def test_only_a_node_certificate_may_forward_a_principal(
    cluster: ProcessCluster, who: str, allowed: bool
) -> None:
    """A forwarded principal (User:CN=admin, a super user) is believed from a broker's node
    certificate only; from a client's certificate - even the admin's - the request acts as
    User:ANONYMOUS and is refused."""
    assert cluster.certs is not None
    security = cluster.node_security(101) if who == "node-101" else cluster.client_security(who)
    name = f"forwarded-{who}"
    leader, _, _ = cluster.wait_for_leader()
    with cluster.channel(leader, security) as channel:
        answer = admin_pb2_grpc.AdminServiceStub(channel).CreateTopics(
            admin_pb2.CreateTopicsRequest(
                topics=[admin_pb2.CreatableTopic(name=name, num_partitions=1, replication_factor=1)]
            ),
            metadata=((FORWARDED_PRINCIPAL_KEY, b"User:CN=admin"),),
            timeout=20,
        )
    (result,) = answer.topics
    expected = ErrorCode.NONE if allowed else ErrorCode.TOPIC_AUTHORIZATION_FAILED
    assert result.error_code == expected, result.error_message
    if not allowed:
        assert "User:ANONYMOUS" in result.error_message


# ----- read-your-writes on one connection --------------------------------------------------------


class RawKafkaConnection:
    """One TLS connection speaking Kafka frames with kio, as a client: no retries, no cache."""

    def __init__(self, cluster: ProcessCluster, broker: int) -> None:
        ca, keystore = ssl_files(cluster, "admin")
        context = ssl.create_default_context(cafile=ca)
        context.load_cert_chain(keystore)
        host, port = cluster.nodes[broker].kafka_address("KAFKA").split(":")
        self.sock = context.wrap_socket(
            socket.create_connection((host, int(port)), timeout=30), server_hostname=host
        )
        self.harness = Harness(image_with_topics())  # only its client-side encoder

    def ask(self, api_key: int, version: int, values: dict[str, Any]) -> Any:
        body = build(load_request_schema(api_key, version), values)
        frame = self.harness.frame(api_key, version, body)
        self.sock.sendall(len(frame).to_bytes(4, "big") + frame)
        size = int.from_bytes(self._read(4), "big")
        data = self._read(size)
        response_type = load_response_schema(api_key, version)
        _, header_bytes = entity_reader(response_type.__header_schema__)(data, 0)
        response, _ = entity_reader(response_type)(data, header_bytes)
        return response

    def _read(self, size: int) -> bytes:
        chunks = b""
        while len(chunks) < size:
            chunk = self.sock.recv(size - len(chunks))
            assert chunk, "the broker closed the connection"
            chunks += chunk
        return chunks

    def close(self) -> None:
        self.sock.close()


def test_metadata_right_after_create_topics_on_one_connection_sees_the_topic(
    cluster: ProcessCluster,
) -> None:
    """The broker waits for the offset that committed the CreateTopics before answering the
    next Metadata on the same connection, and after a DeleteTopics the topic is gone at once
    (docs/kafka-listener.md#writes-forwarding-and-read-your-writes). Without the wait, this
    fails within a few rounds."""
    connection = RawKafkaConnection(cluster, 101)
    try:
        for index in range(10):
            name = f"ryw-{index}"
            created = connection.ask(
                19,
                7,
                {
                    "topics": [{"name": name, "num_partitions": 1, "replication_factor": 2}],
                    "timeout": 10_000,
                },
            )
            (result,) = created.topics
            assert int(result.error_code) == 0, result.error_message
            metadata = connection.ask(3, 12, {"topics": [{"name": name, "topic_id": None}]})
            (topic,) = metadata.topics
            assert int(topic.error_code) == 0, f"{name} not seen right after its creation"
            assert topic.topic_id == result.topic_id
            connection.ask(20, 6, {"topics": [{"name": name, "topic_id": None}], "timeout": 10_000})
            gone = connection.ask(3, 12, {"topics": [{"name": name, "topic_id": None}]})
            assert int(gone.topics[0].error_code) == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    finally:
        connection.close()


# ----- hostile bytes -----------------------------------------------------------------------------

HOSTILE_SECONDS = 3.0


def test_hostile_frames_leave_the_broker_serving(cluster: ProcessCluster) -> None:
    """Seeded mutations of valid requests, wrong sizes and random bytes, for a bounded time,
    to a broker's PLAINTEXT Kafka listener: the broker keeps serving Kafka's clients and logs
    each closed connection (throttled). Replay with the printed seed."""
    seed = random.SystemRandom().randrange(2**32)
    rng = random.Random(seed)
    address = cluster.nodes[101].kafka_address("KAFKA_PLAIN")
    host, port = address.split(":")
    harness = Harness(image_with_topics())
    corpus = [
        harness.frame(3, 12, build(load_request_schema(3, 12), {"topics": None})),
        harness.frame(19, 7, build(load_request_schema(19, 7), {"topics": []})),
        harness.frame(20, 6, build(load_request_schema(20, 6), {"topics": []})),
        harness.frame(75, 0, build(load_request_schema(75, 0), {"topics": []})),
    ]
    sent = 0
    deadline = time.monotonic() + HOSTILE_SECONDS
    while time.monotonic() < deadline:
        frame = mutate(rng, rng.choice(corpus))
        prefix = len(frame).to_bytes(4, "big")
        if rng.random() < 0.1:
            prefix = rng.choice([b"\xff\xff\xff\xff", b"\x7f\xff\xff\xff", b"\x00\x00\x00\x01"])
        with socket.create_connection((host, int(port)), timeout=10) as sock:
            sock.sendall(prefix + frame)
            sock.shutdown(socket.SHUT_WR)
            while sock.recv(65536):  # until the broker answers and/or closes
                pass
        sent += 1
    print(f"hostile seed {seed}: {sent} connections")
    assert sent > 50, f"seed {seed}"
    assert cluster.nodes[101].alive, f"seed {seed}: the broker died"
    admin = confluent(cluster)
    assert "__cluster_metadata" in admin.list_topics(timeout=20).topics
    assert "kafka_request_malformed" in cluster.logs(101)
    assert "kafka_request_failed" not in cluster.logs(101), f"seed {seed}"


# ----- the other clients' admin APIs: kafkajs, aiokafka, and configs / ACLs not covered above ---


def test_kafkajs_admin_topics_configs_and_acls(cluster: ProcessCluster) -> None:
    """kafkajs 2.2.4's admin client (tests/fixtures/kafkajs/admin.js): CreateTopics (a second
    create answers false), Metadata, AlterConfigs (the whole set) and DescribeConfigs read back,
    an invalid value refused, CreateAcls/DescribeAcls/DeleteAcls, DeleteTopics."""
    from tests.process.test_kafka_clients_data_process import kafkajs_modules  # noqa: PLC0415

    modules = kafkajs_modules()
    ca, keystore = ssl_files(cluster, "admin")
    topic = f"kjs-admin-{uuid.uuid4().hex[:8]}"
    spec = {
        "brokers": [cluster.nodes[101].kafka_address("KAFKA")],
        "ca": ca,
        "keystore": keystore,
        "topic": topic,
        "principal": "User:CN=kafkajs-reader",
    }
    done = subprocess.run(
        ["node", str(ROOT / "tests" / "fixtures" / "kafkajs" / "admin.js")],
        input=json.dumps(spec).encode(),
        capture_output=True,
        timeout=60,
        env={**os.environ, "NODE_PATH": str(modules)},
        check=False,
    )
    assert done.returncode == 0, done.stderr.decode(errors="replace")[-2000:]
    seen = json.loads(done.stdout)
    assert seen["created"] is True
    assert seen["createdAgain"] is False  # kafkajs' answer to TOPIC_ALREADY_EXISTS
    assert seen["metadata"] == [
        {"name": topic, "partitions": [{"id": p, "replicas": 2} for p in range(3)]}
    ]
    assert seen["listed"] is True
    (configs,) = seen["configs"]
    assert configs["errorCode"] == 0
    assert configs["name"] == topic
    assert configs["entries"]["retention.ms"] == {"value": "3600000", "isDefault": False}
    assert configs["entries"]["cleanup.policy"] == {"value": "compact", "isDefault": False}
    assert configs["entries"]["segment.ms"]["isDefault"] is True
    assert seen["badConfig"] == "INVALID_CONFIG"
    assert seen["aclCreated"] is True
    assert seen["aclsListed"] == [
        {
            "type": 2,  # TOPIC
            "name": topic,
            "acls": [{"principal": "User:CN=kafkajs-reader", "operation": 8, "permission": 3}],
        }
    ]  # DESCRIBE, ALLOW
    assert seen["aclsDeleted"] == [{"errorCode": 0, "matching": 1}]
    assert seen["aclsAfterDelete"] == 0
    assert seen["listedAfterDelete"] is False


def test_aiokafka_admin_client_topics_and_configs(cluster: ProcessCluster) -> None:
    """aiokafka 0.14's AIOKafkaAdminClient (it has no ACL API): create, list, describe (by
    Metadata), AlterConfigs (the whole set) and DescribeConfigs read back, delete."""
    import asyncio  # noqa: PLC0415

    from aiokafka.admin import AIOKafkaAdminClient  # noqa: PLC0415
    from aiokafka.admin import NewTopic as AioNewTopic  # noqa: PLC0415
    from aiokafka.admin.config_resource import ConfigResource as AioResource  # noqa: PLC0415
    from aiokafka.admin.config_resource import ConfigResourceType as AioResourceType  # noqa: PLC0415
    from aiokafka.helpers import create_ssl_context  # noqa: PLC0415

    ca, keystore = ssl_files(cluster, "admin")
    topic = "aio-admin"

    async def run() -> dict[str, Any]:
        admin = AIOKafkaAdminClient(
            bootstrap_servers=cluster.nodes[101].kafka_address("KAFKA"),
            security_protocol="SSL",
            ssl_context=create_ssl_context(cafile=ca, certfile=keystore, keyfile=keystore),
            request_timeout_ms=20_000,
        )
        await admin.start()
        try:
            seen: dict[str, Any] = {}
            created = await admin.create_topics([AioNewTopic(topic, 2, 2)])
            seen["created"] = [(t[0], t[1]) for t in created.topic_errors]
            again = await admin.create_topics([AioNewTopic(topic, 1, 1)])
            seen["again"] = [(t[0], t[1]) for t in again.topic_errors]

            async def eventually(read: Callable[[], Any], done: Callable[[Any], bool]) -> Any:
                """aiokafka sends each request to the least loaded broker, which answers from
                its own image: the one that did not forward a write may apply it a moment
                later. Reads until ``done`` holds or 10 s have passed; returns the last read."""
                deadline = time.monotonic() + 10
                while True:
                    answer = await read()
                    if done(answer) or time.monotonic() > deadline:
                        return answer
                    await asyncio.sleep(0.1)  # a poll's interval; the condition is the answer

            topics = await eventually(admin.list_topics, lambda names: topic in names)
            seen["listed"] = topic in topics
            (described,) = await eventually(
                lambda: admin.describe_topics([topic]), lambda d: d[0]["error_code"] == 0
            )
            seen["described"] = (
                described["error_code"],
                sorted(len(p["replicas"]) for p in described["partitions"]),
            )
            resource = AioResource(AioResourceType.TOPIC, topic, {"retention.ms": "7200000"})
            (altered,) = await admin.alter_configs([resource])
            seen["altered"] = [tuple(r[:2]) for r in altered.resources]

            async def described_configs() -> tuple[int, dict[str, str]]:
                (answer,) = await admin.describe_configs(
                    [AioResource(AioResourceType.TOPIC, topic, None)]
                )
                ((error, _, _, _, entries),) = answer.resources
                return error, {e[0]: e[1] for e in entries}

            seen["describe_error"], seen["configs"] = await eventually(
                described_configs, lambda answer: answer[1].get("retention.ms") == "7200000"
            )
            deleted = await admin.delete_topics([topic])
            seen["deleted"] = [tuple(t) for t in deleted.topic_error_codes]
            topics = await eventually(admin.list_topics, lambda names: topic not in names)
            seen["listed_after_delete"] = topic in topics
            return seen
        finally:
            await admin.close()

    seen = asyncio.run(run())
    assert seen["created"] == [(topic, 0)]
    assert seen["again"] == [(topic, TopicAlreadyExistsError.errno)]
    assert seen["listed"] is True
    assert seen["described"] == (0, [2, 2])
    assert seen["altered"] == [(0, None)]  # (error code, message)
    assert seen["describe_error"] == 0
    assert seen["configs"]["retention.ms"] == "7200000"
    assert seen["deleted"] == [(topic, 0)]
    assert seen["listed_after_delete"] is False


def test_kafka_python_alters_and_describes_configs(cluster: ProcessCluster) -> None:
    """kafka-python 3's describe_configs and alter_configs, both IncrementalAlterConfigs (its
    default against a broker that has it) and AlterConfigs (``incremental=False``)."""
    from kafka.admin import AlterConfigOp, ConfigResource, ConfigResourceType  # noqa: PLC0415

    admin = kafka_python(cluster)
    try:
        admin.create_topics(
            [NewTopic("kp-configs", 1, 1, topic_configs={"max.message.bytes": "2048"})]
        )

        def modified(broker: int | None = None) -> dict[str, str]:
            """The topic's modified configs as ``broker`` (any broker if None) describes them:
            kafka-python sends DescribeConfigs for a topic to the least loaded broker, which
            answers from its own image, so a read-back waits for both to have the write."""
            resource = ConfigResource(ConfigResourceType.TOPIC, "kp-configs")
            if broker is None:
                answer = admin.describe_configs([resource])
            else:
                request = admin._describe_configs_request([resource], False)

                async def ask() -> Any:
                    return await admin._manager.send(request, node_id=broker)

                response = admin._manager.run(ask)
                answer = admin._describe_configs_process_responses([response], "modified")
            return {k: v["value"] for k, v in answer["topic"]["kp-configs"].items()}

        def on_both(expected: dict[str, str]) -> None:
            wait_until(
                lambda: all(modified(b) == expected for b in BROKERS),
                10,
                f"{expected} served by both brokers",
            )

        # The topic on both brokers first: kafka-python's alter_configs describes it before.
        on_both({"max.message.bytes": "2048"})

        result = admin.alter_configs(
            [
                ConfigResource(
                    ConfigResourceType.TOPIC,
                    "kp-configs",
                    configs={
                        "retention.ms": "3600000",
                        "cleanup.policy": (AlterConfigOp.APPEND, "compact"),
                    },
                )
            ]
        )
        assert result == {"topic": {"kp-configs": "OK"}}
        on_both(
            {
                "max.message.bytes": "2048",
                "retention.ms": "3600000",
                "cleanup.policy": "delete,compact",
            }
        )

        result = admin.alter_configs(
            [
                ConfigResource(
                    ConfigResourceType.TOPIC, "kp-configs", configs={"segment.ms": "60000"}
                )
            ],
            incremental=False,
        )
        assert result == {"topic": {"kp-configs": "OK"}}
        # AlterConfigs replaces the whole set; kafka-python sends the others it read first.
        on_both(
            {
                "max.message.bytes": "2048",
                "retention.ms": "3600000",
                "cleanup.policy": "delete,compact",
                "segment.ms": "60000",
            }
        )

        refused = admin.alter_configs(
            [ConfigResource(ConfigResourceType.TOPIC, "kp-configs", configs={"retention.ms": "x"})]
        )
        message = refused["topic"]["kp-configs"]
        assert message.startswith("[Error 40] InvalidConfigurationError"), message
        assert "retention.ms" in message
        assert modified()["retention.ms"] == "3600000"
    finally:
        admin.close()


def test_confluent_kafka_creates_describes_and_deletes_acls(cluster: ProcessCluster) -> None:
    """confluent-kafka's create_acls, describe_acls and delete_acls as a super user, and the
    ACL taking effect for the principal it names (alice, through kafka-python)."""
    from confluent_kafka.admin import AclBinding as ConfluentBinding  # noqa: PLC0415

    admin = confluent(cluster)
    for future in admin.create_topics([ConfluentNewTopic("ck-acl", 1, 1)]).values():
        future.result(20)
    binding = ConfluentBinding(
        ConfluentResource.TOPIC,
        "ck-acl",
        ConfluentPattern.LITERAL,
        "User:CN=alice",
        "*",
        ConfluentOperation.DESCRIBE,
        ConfluentPermission.ALLOW,
    )
    for future in admin.create_acls([binding]).values():
        assert future.result(20) is None
    alices = ConfluentFilter(
        ConfluentResource.ANY,
        None,
        ConfluentPattern.ANY,
        "User:CN=alice",
        None,
        ConfluentOperation.ANY,
        ConfluentPermission.ANY,
    )
    # librdkafka may ask the broker that did not forward the write: it applies it shortly.
    listed = wait_until(
        lambda: admin.describe_acls(alices).result(20) or None, 10, "alice's ACL listed"
    )
    assert listed == [binding]
    alice = kafka_python(cluster, "alice")
    try:
        wait_until(
            lambda: alice.describe_topics(["ck-acl"])[0]["error_code"] == 0,
            10,
            "alice may describe ck-acl",
        )
        (deleted,) = admin.delete_acls([alices]).values()
        assert deleted.result(20) == [binding]
        wait_until(
            lambda: (
                alice.describe_topics(["ck-acl"])[0]["error_code"]
                == TopicAuthorizationFailedError.errno
            ),
            10,
            "alice refused again",
        )
    finally:
        alice.close()
    for future in admin.delete_topics(["ck-acl"]).values():
        future.result(20)
