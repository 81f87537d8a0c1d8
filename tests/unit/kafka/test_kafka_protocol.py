"""The Kafka listener without processes: the codec for every served API and version, what the
handlers answer from a real image (replayed records), KIP-511, and a seeded fuzzer over request
bytes (docs/kafka-listener.md#robustness).

The listener under test is the real ``KafkaListenerServer.answer`` (decode, handle, encode);
only the controller behind the forwarder is a stand-in, answering what a controller answers.
"""

from __future__ import annotations

import asyncio
import os
import random
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import structlog
from kio.schema.api_versions.v0.response import ApiVersionsResponse as ApiVersionsResponseV0
from kio.serial import entity_reader
from kio.serial.errors import BufferUnderflow
from kio.serial.readers import (
    compact_array_reader,
    legacy_array_reader,
    read_legacy_bytes,
    read_legacy_string,
)

from broker.kafka.apis import KafkaApis, Session
from broker.kafka.connections import ConnectionLimits
from broker.kafka.forwarding import ForwardingError
from broker.kafka.protocol import API_VERSIONS, build, request_schema, response_schema
from broker.kafka.server import KAFKA_REQUEST_BYTES_MAX, KafkaListenerServer, ListenerLimits
from quorum.config import Listener
from quorum.errors import ErrorCode
from quorum.ids import Uuid
from quorum.kafka_wire import request_frame
from quorum.metadata.delta import replay_records
from quorum.metadata.image import MetadataImage
from quorum.metadata.records import (
    BrokerEndpoint,
    ConfigRecord,
    PartitionRecord,
    RegisterBrokerRecord,
    TopicRecord,
)
from quorum.rpc.v1 import admin_pb2
from quorum.security.authorization import RequestAuthorization
from quorum.security.identity import ANONYMOUS, Caller, CallerResolver

ORDERS_ID = Uuid.random()
PAYMENTS_ID = Uuid.random()
LISTENER = Listener("KAFKA", "127.0.0.1", 0)


def image_with_topics() -> MetadataImage:
    records: list[Any] = [
        RegisterBrokerRecord(
            broker_id,
            Uuid.random(),
            broker_id - 1,  # a broker epoch is the offset of its registration
            (
                BrokerEndpoint("BROKER", "127.0.0.1", 19000 + broker_id),
                BrokerEndpoint("KAFKA", "127.0.0.1", 9000 + broker_id),
            ),
            None,
            False,
        )
        for broker_id in (1, 2)
    ]
    records += [TopicRecord("orders", ORDERS_ID)]
    records += [PartitionRecord(ORDERS_ID, p, (1, 2), (1, 2), 1) for p in range(3)]
    records += [ConfigRecord(2, "orders", "retention.ms", "1000")]
    records += [TopicRecord("payments", PAYMENTS_ID)]
    records += [PartitionRecord(PAYMENTS_ID, p, (2,), (2,), 2) for p in range(2)]
    return replay_records(MetadataImage.EMPTY, enumerate(records))


class Controller:
    """Stands in for the active controller behind the forwarder: records what was forwarded
    and answers success at ``offset`` (or raises ``ForwardingError`` when ``down``)."""

    def __init__(self, offset: int = 1_000) -> None:
        self.calls: list[tuple[str, Any, Caller]] = []
        self.offset = offset
        self.down = False

    async def call(self, method: str, request: Any, caller: Caller, timeout_ms: int) -> Any:
        self.calls.append((method, request, caller))
        if self.down:
            raise ForwardingError(ErrorCode.NOT_CONTROLLER, "no controller")
        if method == "CreateTopics":
            return admin_pb2.CreateTopicsResponse(
                metadata_offset=self.offset,
                topics=[
                    admin_pb2.CreatableTopicResult(
                        name=t.name,
                        topic_id=Uuid.random().bytes,
                        num_partitions=max(t.num_partitions, 1),
                        replication_factor=max(t.replication_factor, 1),
                    )
                    for t in request.topics
                ],
            )
        if method == "DeleteTopics":
            return admin_pb2.DeleteTopicsResponse(
                metadata_offset=self.offset,
                topics=[
                    admin_pb2.DeletableTopicResult(
                        name=t.name or "orders", topic_id=t.topic_id or ORDERS_ID.bytes
                    )
                    for t in request.topics
                ],
            )
        if method == "ElectLeaders":
            return admin_pb2.ElectLeadersResponse(
                metadata_offset=self.offset,
                results=[
                    admin_pb2.ElectLeadersResult(topic=p.topic, partition=p.partition, leader=1)
                    for p in request.partitions
                ],
            )
        if method == "CreateAcls":
            return admin_pb2.CreateAclsResponse(
                results=[admin_pb2.AclCreationResult() for _ in request.creations]
            )
        if method == "CreatePartitions":
            return admin_pb2.CreatePartitionsResponse(
                metadata_offset=self.offset,
                results=[
                    admin_pb2.CreatePartitionsTopicResult(name=t.name) for t in request.topics
                ],
            )
        if method == "AlterConfigs":
            return admin_pb2.AlterConfigsResponse(
                metadata_offset=self.offset,
                results=[
                    admin_pb2.AlterConfigsResult(
                        resource_type=r.resource_type, resource_name=r.resource_name
                    )
                    for r in request.resources
                ],
            )
        if method == "DeleteAcls":
            return admin_pb2.DeleteAclsResponse(
                filter_results=[admin_pb2.DeleteAclsFilterResult() for _ in request.filters]
            )
        raise AssertionError(f"the stand-in controller does not answer {method}: teach it")


class Harness:
    """A listener's ``answer`` with a client-side encoder and decoder (kio, as a client)."""

    def __init__(
        self,
        image: MetadataImage,
        *,
        authorization: RequestAuthorization | None = None,
        controller: Controller | None = None,
        kraft_version: int = 0,
    ) -> None:
        self.image = image
        self.controller = controller or Controller()
        self.waited: list[int] = []
        self.apis = KafkaApis(
            broker_id=1,
            cluster_id="MkU3OEVBNTcwNTJENDM2Qg",
            image=lambda: self.image,
            authorization=authorization or RequestAuthorization.disabled(),
            forwarder=self.controller,
            wait_applied=self._wait_applied,
            kraft_version=lambda: kraft_version,
        )
        self.server = KafkaListenerServer(
            LISTENER, self.apis, CallerResolver(), tls=None, logger=structlog.get_logger()
        )
        self.correlation_id = 0

    async def _wait_applied(self, offset: int, timeout_s: float) -> bool:
        self.waited.append(offset)
        return self.image.offset >= offset

    def session(self, principal: str = ANONYMOUS) -> Session:
        return Session(Caller(principal, None, None, False, "127.0.0.1:1"), "KAFKA")

    def frame(self, api_key: int, version: int, body: Any) -> bytes:
        assert (int(body.__api_key__), int(body.__version__)) == (api_key, version), body
        self.correlation_id += 1
        return request_frame(body, self.correlation_id, "test")

    def ask(
        self,
        api_key: int,
        version: int,
        values: dict[str, Any] | None = None,
        session: Session | None = None,
    ) -> Any:
        """Send one request (built from ``values``) and decode the answer."""
        body = build(request_schema(api_key, version), values or {})
        frame = self.frame(api_key, version, body)
        data = asyncio.run(self.server.answer(frame, session or self.session()))
        assert data is not None, "the listener closed the connection"
        return decode_answer(data, response_schema(api_key, version), self.correlation_id)


def decode_answer(data: bytes, response_type: type[Any], correlation_id: int) -> Any:
    assert int.from_bytes(data[:4], "big") == len(data) - 4
    header, header_bytes = entity_reader(response_type.__header_schema__)(data, 4)
    assert header.correlation_id == correlation_id
    response, body_bytes = entity_reader(response_type)(data, 4 + header_bytes)
    assert 4 + header_bytes + body_bytes == len(data)
    return response


@pytest.fixture
def harness() -> Harness:
    return Harness(image_with_topics())


def served_versions() -> Iterator[tuple[int, int]]:
    for api_key, (low, high) in sorted(API_VERSIONS.items()):
        for version in range(low, high + 1):
            yield api_key, version


# ----- the codec ------------------------------------------------------------------------------


@pytest.mark.parametrize(("api_key", "version"), list(served_versions()))
def test_every_served_version_is_answered_in_its_own_version(
    harness: Harness, api_key: int, version: int
) -> None:
    """A request of every advertised API and version (fields at their zero values) decodes,
    is answered, and the answer decodes as that version's response: the table never
    advertises a version the codec lacks. (Produce asks acks=1: with acks=0 nothing answers.)"""
    response = harness.ask(api_key, version, {"acks": 1} if api_key == 0 else None)
    assert type(response) is response_schema(api_key, version)
    assert harness.server.failures == 0


def test_api_versions_advertises_the_table(harness: Harness) -> None:
    response = harness.ask(18, 4, {"client_software_name": "x", "client_software_version": "1"})
    assert int(response.error_code) == 0
    assert {(k.api_key, k.min_version, k.max_version) for k in response.api_keys} == {
        (key, low, high) for key, (low, high) in API_VERSIONS.items()
    }


def test_api_versions_advertises_the_features_the_cluster_has(harness: Harness) -> None:
    """KIP-584: metadata.version 21 (3.9-IV0) supported and finalized, kraft.version 0-1
    supported and finalized only when the quorum is dynamic (a level of 0 is not finalized);
    the epoch is the image's offset. Before v3 the fields do not exist."""

    def features(response: Any) -> tuple[Any, ...]:
        return (
            {f.name: (f.min_version, f.max_version) for f in response.supported_features},
            {
                f.name: (f.min_version_level, f.max_version_level)
                for f in response.finalized_features
            },
            response.finalized_features_epoch,
        )

    supported = {"metadata.version": (21, 21), "kraft.version": (0, 1)}
    static = harness.ask(18, 3, {"client_software_name": "x", "client_software_version": "1"})
    assert features(static) == (supported, {"metadata.version": (21, 21)}, harness.image.offset)
    assert harness.image.offset >= 0
    dynamic = Harness(harness.image, kraft_version=1)
    answer = dynamic.ask(18, 4, {"client_software_name": "x", "client_software_version": "1"})
    assert features(answer) == (
        supported,
        {"metadata.version": (21, 21), "kraft.version": (1, 1)},
        harness.image.offset,
    )
    assert not hasattr(harness.ask(18, 2), "supported_features")


def test_api_versions_refuses_bad_software_names(harness: Harness) -> None:
    """KIP-511: client software name and version match [a-zA-Z0-9](?:[a-zA-Z0-9.-]*[a-zA-Z0-9])?"""
    response = harness.ask(18, 3, {"client_software_name": "-bad", "client_software_version": "1"})
    assert int(response.error_code) == ErrorCode.INVALID_REQUEST


def test_api_versions_of_an_unknown_version_answers_v0_with_our_ranges(harness: Harness) -> None:
    """KIP-511: whatever the version, the answer is a v0 response with UNSUPPORTED_VERSION and
    the ranges served, so a newer client can retry with a version we have."""
    frame = (18).to_bytes(2, "big") + (99).to_bytes(2, "big") + (7).to_bytes(4, "big") + b"junk"
    data = asyncio.run(harness.server.answer(frame, harness.session()))
    assert data is not None
    response = decode_answer(data, ApiVersionsResponseV0, 7)
    assert int(response.error_code) == ErrorCode.UNSUPPORTED_VERSION
    assert {k.api_key: (k.min_version, k.max_version) for k in response.api_keys} == dict(
        API_VERSIONS
    )


@pytest.mark.parametrize(("api_key", "version"), [(17, 1), (50, 0), (36, 1)])
def test_an_api_not_served_is_answered_unsupported_version(
    harness: Harness, api_key: int, version: int
) -> None:
    """SaslHandshake, DescribeUserScramCredentials, SaslAuthenticate: APIs whose response has
    a top-level error code get that response with UNSUPPORTED_VERSION (clients report "not
    supported")."""
    response = harness.ask(api_key, version)
    assert int(response.error_code) == ErrorCode.UNSUPPORTED_VERSION


@pytest.mark.parametrize(
    "frame",
    [
        b"\x00\x03",  # shorter than a header
        (999).to_bytes(2, "big") + b"\x00\x00\x00\x00\x00\x01",  # unknown API key
        (19).to_bytes(2, "big") + b"\x00\x08\x00\x00\x00\x01",  # CreateTopics v8: unknown
        (0).to_bytes(2, "big") + b"\x00\x09\x00\x00\x00\x01\x00\x00",  # Produce: not served
        (3).to_bytes(2, "big") + b"\x00\x0c\x00\x00\x00\x01\x00\x01c\x00\x7f",  # truncated body
    ],
    ids=["short", "unknown-key", "unknown-version", "produce", "truncated"],
)
def test_a_frame_that_does_not_decode_closes_the_connection(harness: Harness, frame: bytes) -> None:
    assert asyncio.run(harness.server.answer(frame, harness.session())) is None
    assert harness.server.closed_for_cause == 1
    assert harness.server.failures == 0


# ----- Metadata (KIP-516) ---------------------------------------------------------------------


def test_metadata_lists_every_topic_with_its_id_and_the_brokers_of_this_listener(
    harness: Harness,
) -> None:
    response = harness.ask(3, 12, {"topics": None})
    assert response.cluster_id == "MkU3OEVBNTcwNTJENDM2Qg"
    assert response.controller_id == 1  # the answering broker forwards writes (KIP-590)
    assert [(b.node_id, b.port) for b in response.brokers] == [(1, 9001), (2, 9002)]
    topics = {t.name: t for t in response.topics}
    assert set(topics) == {"orders", "payments"}
    assert topics["orders"].topic_id == uuid.UUID(bytes=ORDERS_ID.bytes)
    assert [p.partition_index for p in topics["orders"].partitions] == [0, 1, 2]
    assert topics["payments"].partitions[0].leader_id == 2


def test_metadata_before_v10_has_no_ids_and_v0_empty_means_all(harness: Harness) -> None:
    response = harness.ask(3, 0, {"topics": []})
    assert {t.name for t in response.topics} == {"orders", "payments"}
    assert not hasattr(response.topics[0], "topic_id")
    assert harness.ask(3, 1, {"topics": []}).topics == ()  # v1+: empty means none


def test_metadata_by_id_and_the_kip_516_rules(harness: Harness) -> None:
    unknown = Uuid.random()

    def ask(name: str | None, topic_id: Uuid | None, version: int = 12) -> Any:
        entry = {
            "name": name,
            "topic_id": None if topic_id is None else uuid.UUID(bytes=topic_id.bytes),
        }
        return harness.ask(3, version, {"topics": [entry]}).topics[0]

    by_id = ask(None, ORDERS_ID)
    assert (int(by_id.error_code), by_id.name) == (0, "orders")
    missing = ask(None, unknown)
    assert int(missing.error_code) == ErrorCode.UNKNOWN_TOPIC_ID
    assert missing.name is None
    assert missing.topic_id == uuid.UUID(bytes=unknown.bytes)
    assert int(ask("orders", ORDERS_ID).error_code) == ErrorCode.INVALID_REQUEST  # both
    assert int(ask(None, None).error_code) == ErrorCode.INVALID_REQUEST  # neither
    assert int(ask(None, ORDERS_ID, version=10).error_code) == ErrorCode.INVALID_REQUEST
    by_name = ask("nope", None)
    assert int(by_name.error_code) == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    assert by_name.topic_id is None  # the zero id
    assert int(ask("bad name!", None).error_code) == ErrorCode.INVALID_TOPIC_EXCEPTION


def test_metadata_by_id_with_an_empty_name_is_by_id(harness: Harness) -> None:
    """Kafka's Java clients (AdminClient.describeTopics by id, kafka-topics --topic-id) send
    the name "" with the id; Kafka's brokers read it as no name, and so must this one."""
    for topic_id, code, name in (
        (ORDERS_ID, 0, "orders"),
        (Uuid.random(), ErrorCode.UNKNOWN_TOPIC_ID, None),
    ):
        entry = {"name": "", "topic_id": uuid.UUID(bytes=topic_id.bytes)}
        topic = harness.ask(3, 12, {"topics": [entry]}).topics[0]
        assert (int(topic.error_code), topic.name) == (code, name)
        assert topic.topic_id == uuid.UUID(bytes=topic_id.bytes)
    # A real name with an id is still both at once.
    both = {"name": "orders", "topic_id": uuid.UUID(bytes=ORDERS_ID.bytes)}
    assert int(harness.ask(3, 12, {"topics": [both]}).topics[0].error_code) == (
        ErrorCode.INVALID_REQUEST
    )


def test_metadata_leaves_out_and_refuses_what_the_caller_may_not_describe() -> None:
    harness = Harness(
        image_with_topics(), authorization=RequestAuthorization(enabled=True, cluster_id="c")
    )
    assert harness.ask(3, 12, {"topics": None}).topics == ()
    refused = harness.ask(3, 12, {"topics": [{"name": "orders", "topic_id": None}]}).topics[0]
    assert int(refused.error_code) == ErrorCode.TOPIC_AUTHORIZATION_FAILED
    by_id = harness.ask(
        3, 12, {"topics": [{"name": None, "topic_id": uuid.UUID(bytes=ORDERS_ID.bytes)}]}
    ).topics[0]
    assert int(by_id.error_code) == ErrorCode.TOPIC_AUTHORIZATION_FAILED
    assert by_id.name is None  # by id, the name is not told


# ----- DescribeTopicPartitions, DescribeConfigs, DescribeCluster ----------------------------


def test_describe_topic_partitions_pages_with_its_cursor(harness: Harness) -> None:
    """orders has 3 partitions, payments 2; pages of 2 partitions resume at the cursor."""
    pages = []
    cursor = None
    for _ in range(10):
        response = harness.ask(
            75, 0, {"topics": [], "response_partition_limit": 2, "cursor": cursor}
        )
        pages.append([(t.name, [p.partition_index for p in t.partitions]) for t in response.topics])
        if response.next_cursor is None:
            break
        cursor = {
            "topic_name": response.next_cursor.topic_name,
            "partition_index": response.next_cursor.partition_index,
        }
    assert pages == [
        [("orders", [0, 1])],
        [("orders", [2]), ("payments", [0])],
        [("payments", [1])],
    ]
    named = harness.ask(75, 0, {"topics": [{"name": "nope"}, {"name": "payments"}]})
    assert [(t.name, int(t.error_code)) for t in named.topics] == [
        ("nope", ErrorCode.UNKNOWN_TOPIC_OR_PARTITION),
        ("payments", 0),
    ]


def test_describe_topic_partitions_answers_empty_elr_lists_never_null(harness: Harness) -> None:
    """Kafka's brokers send [] for eligible_leader_replicas and last_known_elr when there is
    no ELR (KIP-966); Kafka 4's AdminClient dereferences both (a null is its
    NullPointerException in DescribeTopicPartitionsResponse)."""
    response = harness.ask(75, 0, {"topics": [{"name": "orders"}], "response_partition_limit": 10})
    partitions = response.topics[0].partitions
    assert [p.partition_index for p in partitions] == [0, 1, 2]
    for partition in partitions:
        assert partition.eligible_leader_replicas == ()
        assert partition.last_known_elr == ()


def test_describe_configs_gives_set_and_default_topic_configs_and_broker_ones(
    harness: Harness,
) -> None:
    response = harness.ask(
        32,
        4,
        {
            "resources": [
                {"resource_type": 2, "resource_name": "orders", "configuration_keys": None},
                {"resource_type": 2, "resource_name": "nope", "configuration_keys": None},
                {"resource_type": 4, "resource_name": "1", "configuration_keys": None},
            ],
            "include_synonyms": True,
        },
    )
    orders, missing, broker = response.results
    configs = {c.name: (c.value, c.config_source) for c in orders.configs}
    assert configs["retention.ms"] == ("1000", 1)  # DYNAMIC_TOPIC_CONFIG
    assert configs["cleanup.policy"] == ("delete", 5)  # DEFAULT_CONFIG
    assert int(missing.error_code) == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    assert int(broker.error_code) == ErrorCode.NONE  # this broker (test_kafka_describe_configs)


def test_describe_cluster_describes_brokers_only(harness: Harness) -> None:
    response = harness.ask(60, 1, {"include_cluster_authorized_operations": True})
    assert (response.cluster_id, response.controller_id) == ("MkU3OEVBNTcwNTJENDM2Qg", 1)
    assert [b.broker_id for b in response.brokers] == [1, 2]
    assert response.cluster_authorized_operations > 0
    controllers = harness.ask(60, 1, {"endpoint_type": 2})
    assert int(controllers.error_code) == 115  # UNSUPPORTED_ENDPOINT_TYPE


# ----- writes: forwarded, then read-your-writes ---------------------------------------------


def test_create_topics_is_forwarded_and_the_next_read_waits_for_its_offset(
    harness: Harness,
) -> None:
    session = harness.session("User:CN=alice")
    created = harness.ask(
        19,
        7,
        {
            "topics": [
                {"name": "new", "num_partitions": 2, "replication_factor": 1, "configs": []},
                {
                    "name": "nulls",
                    "num_partitions": 1,
                    "replication_factor": 1,
                    "configs": [{"name": "retention.ms", "value": None}],
                },
            ],
            "timeout": 5_000,
        },
        session,
    )
    new, nulls = created.topics
    assert (int(new.error_code), new.num_partitions) == (0, 2)
    assert new.topic_id is not None
    assert int(nulls.error_code) == ErrorCode.INVALID_CONFIG
    (method, forwarded, caller), *_ = harness.controller.calls
    assert (method, [t.name for t in forwarded.topics]) == ("CreateTopics", ["new"])
    assert caller.principal == "User:CN=alice"
    assert harness.waited == []
    harness.ask(3, 12, {"topics": None}, session)
    assert harness.waited == [harness.controller.offset]  # read-your-writes on this connection
    harness.ask(3, 12, {"topics": None})
    assert harness.waited == [harness.controller.offset]  # another connection does not wait


def test_delete_topics_by_name_and_by_id(harness: Harness) -> None:
    response = harness.ask(
        20,
        6,
        {
            "topics": [
                {"name": "orders", "topic_id": None},
                {"name": None, "topic_id": uuid.UUID(bytes=ORDERS_ID.bytes)},
            ],
            "timeout": 1_000,
        },
    )
    forwarded = harness.controller.calls[0][1]
    assert [(t.name, t.topic_id) for t in forwarded.topics] == [
        ("orders", b""),
        ("", ORDERS_ID.bytes),
    ]
    assert [int(r.error_code) for r in response.responses] == [0, 0]
    old = harness.ask(20, 1, {"topic_names": ["orders"], "timeout": 1_000})
    assert [r.name for r in old.responses] == ["orders"]


def test_writes_without_a_controller_are_not_controller_for_every_entry() -> None:
    controller = Controller()
    controller.down = True
    harness = Harness(image_with_topics(), controller=controller)
    response = harness.ask(
        19,
        5,
        {"topics": [{"name": "a", "num_partitions": 1, "replication_factor": 1}], "timeout": 0},
    )
    assert [int(t.error_code) for t in response.topics] == [ErrorCode.NOT_CONTROLLER]
    acls = harness.ask(30, 3, {"creations": [{"resource_type": 2, "resource_name": "a"}]})
    assert [int(r.error_code) for r in acls.results] == [ErrorCode.NOT_CONTROLLER]


def test_describe_acls_needs_an_authorizer(harness: Harness) -> None:
    response = harness.ask(29, 3, {"resource_type_filter": 1, "pattern_type_filter": 1})
    assert int(response.error_code) == ErrorCode.SECURITY_DISABLED


# ----- the fuzzer -----------------------------------------------------------------------------

FUZZ_SECONDS = float(os.environ.get("KAFKA_FUZZ_SECONDS", "4"))


def fuzz_seed() -> int:
    return int(os.environ.get("KAFKA_FUZZ_SEED", str(random.SystemRandom().randrange(2**32))))


def mutate(rng: random.Random, frame: bytes) -> bytes:
    data = bytearray(frame)
    for _ in range(rng.randint(1, 6)):
        choice = rng.random()
        if choice < 0.4 and data:
            data[rng.randrange(len(data))] = rng.randrange(256)
        elif choice < 0.55 and data:
            del data[rng.randrange(len(data)) :]
        elif choice < 0.7:
            position = rng.randrange(len(data) + 1)
            data[position:position] = rng.randbytes(rng.randint(1, 8))
        elif choice < 0.85 and len(data) > 8:
            # a plausible length or count: a small or huge int32 / varint somewhere
            position = rng.randrange(8, len(data))
            value = rng.choice([0, 1, 0x7F, 0x80, 0xFF, 0xFFFF, 0x7FFFFFFF, 0xFFFFFFFF])
            data[position : position + 4] = value.to_bytes(4, "big")
        else:
            data[rng.randrange(len(data) + 1) :] = rng.randbytes(rng.randint(0, 16))
    return bytes(data)


def _uvarint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        out.append(byte | (0x80 if value else 0))
        if not value:
            return bytes(out)


def test_a_negative_string_length_is_refused() -> None:
    """kio alone reads a legacy string of length -2 as '' in zero bytes (and moves the offset
    back); the listener's codec refuses any negative length but -1 (null), as Kafka does."""

    for length in (-2, -32768):
        with pytest.raises(BufferUnderflow, match="negative"):
            read_legacy_string(length.to_bytes(2, "big", signed=True) + b"abc", 0)
    with pytest.raises(BufferUnderflow, match="negative"):
        read_legacy_bytes((-7).to_bytes(4, "big", signed=True) + b"abcdefgh", 0)


def test_an_array_claiming_more_items_than_bytes_is_refused_before_any_item() -> None:
    """Kafka's generated readers refuse an array that claims more items than bytes remain,
    before reading one; so does the listener's codec (the item reader is never called)."""

    calls = 0

    def item(buffer: Any, offset: int, /) -> tuple[int, int]:
        nonlocal calls
        calls += 1
        if calls > 1_000:  # without the check: stop here, not at 2^31 items
            raise AssertionError("the array's items are being read")
        return 0, 0

    with pytest.raises(BufferUnderflow, match="claims 2147483647 items"):
        legacy_array_reader(item)((2**31 - 1).to_bytes(4, "big") + b"\x00" * 10, 0)
    with pytest.raises(BufferUnderflow, match="claims 1000 items"):
        compact_array_reader(item)(_uvarint(1001) + b"\x00" * 10, 0)
    assert calls == 0


FORGED_METADATA_FRAME_CHECK = """
import asyncio, resource, sys, time
resource.setrlimit(resource.RLIMIT_AS, (2 << 30, 2 << 30))
sys.path.insert(0, sys.argv[1])
import tests.unit.kafka.test_kafka_protocol as t
from kio.index import load_request_schema
from broker.kafka.protocol import build

harness = t.Harness(t.image_with_topics())
frame = harness.frame(3, 1, build(load_request_schema(3, 1), {"topics": ()}))
# topics: 2^31 - 1 of them, the first named with a length of -2 (zero bytes, for kio alone)
forged = frame[:-4] + (2**31 - 1).to_bytes(4, "big") + b"\\xff\\xfe"
started = time.monotonic()
answer = asyncio.run(harness.server.answer(forged, harness.session()))
print("RESULT", answer is None, round(time.monotonic() - started, 3), harness.server.failures)
"""


def test_a_forged_metadata_frame_closes_the_connection_at_once(tmp_path: Any) -> None:
    """The frame that grew the fuzz test's process to 9.7 GB: Metadata v1 whose topic array
    claims 2^31 - 1 topics named with a length of -2. The listener closes the connection at
    once. Run in a child process limited to 2 GiB, so a regression fails here instead of
    taking the machine's memory."""

    root = Path(__file__).resolve().parents[3]
    script = tmp_path / "forged.py"
    script.write_text(FORGED_METADATA_FRAME_CHECK)
    done = subprocess.run(
        [sys.executable, str(script), str(root)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    (result,) = [line for line in done.stdout.splitlines() if line.startswith("RESULT ")]
    _, closed, seconds, failures = result.split()
    assert closed == "True", "a forged array count must close the connection"
    assert float(seconds) < 1.0
    assert failures == "0"


def test_fuzzed_request_bytes_never_fail_a_handler() -> None:
    """Seeded mutations of valid requests of every served API and version, and random bytes,
    for a bounded time: each frame is answered (a well-formed frame) or closes the connection;
    no handler raises. Replay with KAFKA_FUZZ_SEED=<seed>."""
    seed = fuzz_seed()
    rng = random.Random(seed)
    harness = Harness(
        image_with_topics(), authorization=RequestAuthorization(enabled=True, cluster_id="c")
    )
    corpus = [
        harness.frame(key, version, build(request_schema(key, version), {}))
        for key, version in served_versions()
    ]
    corpus.append(harness.frame(3, 12, build(request_schema(3, 12), {"topics": None})))

    async def run() -> tuple[int, int]:
        frames = answered = 0
        deadline = time.monotonic() + FUZZ_SECONDS
        while time.monotonic() < deadline:
            frame = (
                rng.randbytes(rng.randint(0, 64))
                if rng.random() < 0.05
                else mutate(rng, rng.choice(corpus))
            )
            data = await harness.server.answer(frame, harness.session())
            frames += 1
            if data:  # b"": a Produce with acks=0, answered by nothing
                answered += 1
                assert int.from_bytes(data[:4], "big") == len(data) - 4, f"seed {seed}"
        return frames, answered

    frames, answered = asyncio.run(run())
    print(f"kafka fuzz seed {seed}: {frames} frames, {answered} answered")
    assert harness.server.failures == 0, f"a handler failed; replay with KAFKA_FUZZ_SEED={seed}"
    assert frames > 1_000, f"seed {seed}: only {frames} frames in {FUZZ_SECONDS} s"
    assert 0 < answered < frames, f"seed {seed}: the mutations should hit both outcomes"


# ----- framing over a real socket -------------------------------------------------------------


def test_frames_outside_the_size_bounds_close_the_connection_and_others_are_served() -> None:
    harness = Harness(image_with_topics())
    api_versions = harness.frame(18, 0, build(request_schema(18, 0), {}))

    async def run() -> list[bytes]:
        server = KafkaListenerServer(
            LISTENER, harness.apis, CallerResolver(), tls=None, logger=structlog.get_logger()
        )
        await server.start()
        received = []
        try:
            for prefix in (
                (-1).to_bytes(4, "big", signed=True),
                (KAFKA_REQUEST_BYTES_MAX + 1).to_bytes(4, "big"),
                (3).to_bytes(4, "big"),
                b"\x16\x03\x01\x02",  # a TLS ClientHello on a PLAINTEXT listener
                len(api_versions).to_bytes(4, "big") + api_versions,  # served
            ):
                reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
                writer.write(prefix)
                await writer.drain()
                received.append(await asyncio.wait_for(reader.read(4096), 5))
                writer.close()
        finally:
            await server.stop()
        assert server.closed_for_cause == 4
        return received

    received = asyncio.run(run())
    assert received[:4] == [b"", b"", b"", b""]  # closed without an answer
    assert decode_answer(received[4], response_schema(18, 0), harness.correlation_id)


def test_the_listener_refuses_connections_past_its_bound() -> None:
    """max.connections (2 here): a third connection is closed at once."""
    harness = Harness(image_with_topics())
    limits = ListenerLimits(ConnectionLimits(2, 10), connection_idle_ms=60_000, quota=None)

    async def run() -> bytes:
        server = KafkaListenerServer(
            LISTENER,
            harness.apis,
            CallerResolver(),
            tls=None,
            logger=structlog.get_logger(),
            limits=limits,
        )
        await server.start()
        try:
            held = [await asyncio.open_connection("127.0.0.1", server.port) for _ in range(2)]
            for _ in range(100):  # until the server has accepted both (no sleep as sync)
                if server.open_connections == 2:
                    break
                await asyncio.sleep(0.01)
            reader, _ = await asyncio.open_connection("127.0.0.1", server.port)
            refused = await asyncio.wait_for(reader.read(10), 5)
            for _, writer in held:
                writer.close()
            return refused
        finally:
            await server.stop()

    assert asyncio.run(run()) == b""
