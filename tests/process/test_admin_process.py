"""The admin API end to end: three real controllers, test brokers registered through the
lifecycle RPCs, the AdminClient and the ``metaquorum topics`` CLI."""

from __future__ import annotations

import signal
import threading
from pathlib import Path

import grpc
import pytest

from quorum.admin import (
    AdminError,
    InvalidReplicationFactorError,
    NewTopic,
    TopicCollection,
    TopicDeletionDisabledError,
    TopicExistsError,
    UnknownTopicIdError,
)
from quorum.errors import ErrorCode
from quorum.harness import (
    ProcessCluster,
    cluster_with_brokers,
    wait_until,
)
from quorum.ids import Uuid
from quorum.rpc.v1 import admin_pb2, admin_pb2_grpc, raft_pb2, raft_pb2_grpc

pytestmark = [pytest.mark.slow]


def bootstrap(cluster: ProcessCluster) -> str:
    return ",".join(n.address for n in cluster.nodes.values())


def test_create_describe_delete_recreate_on_every_controller(tmp_path: Path) -> None:
    with cluster_with_brokers(tmp_path) as cluster, cluster.admin(bootstrap(cluster)) as admin:
        created = admin.create_topics([NewTopic("orders", 3, 2)])
        first_id = created.topic_id("orders")
        offset = created.metadata_offset
        # Every controller shows the same id and partitions once it has applied the offset.
        views = []
        for node in cluster.nodes.values():
            with cluster.admin(node.address) as one:
                by_name = one.describe_topics(
                    TopicCollection.of_topic_names(["orders"]), min_metadata_offset=offset
                ).all_topic_names()["orders"]
                by_id = one.describe_topics(
                    TopicCollection.of_topic_ids([first_id]), min_metadata_offset=offset
                ).all_topic_ids()[first_id]
            assert by_name == by_id
            views.append(by_name)
        assert all(v == views[0] for v in views)
        assert views[0].topic_id == first_id
        assert len(views[0].partitions) == 3
        assert all(len(p.replicas) == 2 for p in views[0].partitions)

        with pytest.raises(TopicExistsError):
            admin.create_topics([NewTopic("orders", 1, 1)]).topic_id("orders")

        admin.delete_topics(TopicCollection.of_topic_ids([first_id])).all()
        second_id = admin.create_topics([NewTopic("orders", 1, 2)]).topic_id("orders")
        assert second_id != first_id
        gone = admin.describe_topics(TopicCollection.of_topic_ids([first_id]))
        with pytest.raises(UnknownTopicIdError):
            gone.topic_id_values()[first_id].result()  # type: ignore[index]

        # Both name and id in one delete entry: INVALID_REQUEST (as Kafka), nothing deleted.
        with cluster.channel(admin.controller_address or "") as channel:
            answer = admin_pb2_grpc.AdminServiceStub(channel).DeleteTopics(
                admin_pb2.DeleteTopicsRequest(
                    topics=[admin_pb2.DeletableTopic(name="orders", topic_id=second_id.bytes)]
                ),
                timeout=10,
            )
        assert answer.topics[0].error_code == ErrorCode.INVALID_REQUEST
        assert "orders" in admin.list_topics().names()

        # System topics cannot be deleted; a user-defined internal topic (KIP-619) can.
        listing = {t.name: t for t in admin.list_topics().listings()}
        assert listing["__cluster_metadata"].is_internal
        system = admin.delete_topics(TopicCollection.of_topic_names(["__cluster_metadata"]))
        with pytest.raises(TopicDeletionDisabledError):
            system.all()
        admin.create_topics([NewTopic("audit", 1, 1, configs={"internal": "true"})]).all()
        described = admin.describe_topics(TopicCollection.of_topic_names(["audit"]))
        assert described.all_topic_names()["audit"].is_internal
        admin.delete_topics(TopicCollection.of_topic_names(["audit"])).all()
        assert "audit" not in admin.list_topics().names()

        cluster_view = admin.describe_cluster()
        assert {b.broker_id for b in cluster_view.brokers} == {101, 102, 103}  # type: ignore[attr-defined]


def test_topics_cli_against_the_quorum(tmp_path: Path) -> None:
    with cluster_with_brokers(tmp_path) as cluster:
        server = bootstrap(cluster)
        out = cluster.run_cli(
            "topics", "--bootstrap-server", server, "--create", "--topic", "payments",
            "--partitions", "2", "--replication-factor", "3", "--config", "retention.ms=1000",
        )  # fmt: skip
        assert "Created topic payments." in out.stdout
        described = cluster.run_cli(
            "topics", "--bootstrap-server", server, "--describe", "--topic", "payments"
        )
        first = described.stdout.splitlines()[0]
        assert first.startswith("Topic: payments\tTopicId: ")
        assert "PartitionCount: 2\tReplicationFactor: 3\tConfigs: retention.ms=1000" in first
        topic_id = first.split("TopicId: ")[1].split("\t")[0]
        assert Uuid.parse(topic_id)
        again = cluster.run_cli(
            "topics", "--bootstrap-server", server, "--create", "--topic", "payments",
            "--partitions", "1", "--replication-factor", "1", check=False,
        )  # fmt: skip
        assert again.returncode == 1
        assert "TOPIC_ALREADY_EXISTS" in again.stderr
        listed = cluster.run_cli(
            "topics", "--bootstrap-server", server, "--list", "--exclude-internal"
        )
        assert listed.stdout.split() == ["payments"]
        cluster.run_cli("topics", "--bootstrap-server", server, "--delete", "--topic-id", topic_id)
        missing = cluster.run_cli(
            "topics", "--bootstrap-server", server, "--describe", "--topic-id", topic_id,
            check=False,
        )  # fmt: skip
        assert missing.returncode == 1
        assert "UNKNOWN_TOPIC_ID" in missing.stderr


def test_bad_input_is_refused_and_changes_nothing(tmp_path: Path) -> None:
    with cluster_with_brokers(tmp_path) as cluster, cluster.admin(bootstrap(cluster)) as admin:
        admin.create_topics([NewTopic("a.b", 1, 1)]).all()
        before = sorted((t.name, t.topic_id) for t in admin.list_topics().listings())
        cases: list[tuple[NewTopic, str]] = [
            (NewTopic("", 1, 1), "INVALID_TOPIC_EXCEPTION"),
            (NewTopic(".", 1, 1), "INVALID_TOPIC_EXCEPTION"),
            (NewTopic("..", 1, 1), "INVALID_TOPIC_EXCEPTION"),
            (NewTopic("x" * 250, 1, 1), "INVALID_TOPIC_EXCEPTION"),
            (NewTopic("a/b", 1, 1), "INVALID_TOPIC_EXCEPTION"),
            (NewTopic("caf\u00e9", 1, 1), "INVALID_TOPIC_EXCEPTION"),
            (NewTopic("a_b", 1, 1), "INVALID_TOPIC_EXCEPTION"),  # collides with a.b
            (NewTopic("__cluster_metadata", 1, 1), "INVALID_REQUEST"),
            (NewTopic("zero", 0, 1), "INVALID_PARTITIONS"),
            (NewTopic("minus-two", -2, 1), "INVALID_PARTITIONS"),
            (NewTopic("rf-zero", 1, 0), "INVALID_REPLICATION_FACTOR"),
            (NewTopic("rf-four", 1, 4), "INVALID_REPLICATION_FACTOR"),
            (NewTopic("cfg", 1, 1, configs={"no.such.key": "1"}), "INVALID_CONFIG"),
            (
                NewTopic("assign", replica_assignments={0: [101, 101]}),
                "INVALID_REPLICA_ASSIGNMENT",
            ),
            (NewTopic("assign2", replica_assignments={0: [999]}), "INVALID_REPLICA_ASSIGNMENT"),
        ]
        for topic, expected in cases:
            result = admin.create_topics([topic])
            with pytest.raises(AdminError) as excinfo:
                result.topic_id(topic.name)
            assert expected in str(excinfo.value), (topic.name[:20], str(excinfo.value))
        with pytest.raises(InvalidReplicationFactorError, match="broker"):
            admin.create_topics([NewTopic("rf-many", 1, 5)]).all()
        with cluster.channel(admin.controller_address or "") as channel:
            stub = admin_pb2_grpc.AdminServiceStub(channel)
            too_many = stub.CreateTopics(
                admin_pb2.CreateTopicsRequest(
                    topics=[admin_pb2.CreatableTopic(name=f"t{i}", num_partitions=1,
                                                     replication_factor=1) for i in range(1001)]
                ),
                timeout=10,
            )  # fmt: skip
            assert too_many.error_code == ErrorCode.INVALID_REQUEST
            assert "1000" in too_many.error_message or "1,000" in too_many.error_message
            bad_id = stub.DeleteTopics(
                admin_pb2.DeleteTopicsRequest(topics=[admin_pb2.DeletableTopic(topic_id=b"x" * 5)]),
                timeout=10,
            )
            assert bad_id.error_code == ErrorCode.INVALID_REQUEST
            with pytest.raises(grpc.RpcError) as huge:
                stub.CreateTopics(
                    admin_pb2.CreateTopicsRequest(
                        topics=[admin_pb2.CreatableTopic(name="x" * (5 * 1024 * 1024))]
                    ),
                    timeout=10,
                )
            assert huge.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
            duplicate = stub.DeleteTopics(
                admin_pb2.DeleteTopicsRequest(
                    topics=[
                        admin_pb2.DeletableTopic(name="a.b"),
                        admin_pb2.DeletableTopic(name="a.b"),
                    ]
                ),
                timeout=10,
            )
            assert [t.error_code for t in duplicate.topics] == [ErrorCode.INVALID_REQUEST] * 2
            # Bytes that are no CreateTopicsRequest (a name with invalid UTF-8): INVALID_ARGUMENT
            # naming the method and the reason, on the real server (docs/conventions.md).
            raw = channel.unary_unary("/quorum.rpc.v1.AdminService/CreateTopics")
            with pytest.raises(grpc.RpcError) as undecodable:
                raw(b"\x0a\x03\x0a\x01\xff", timeout=10)
            assert undecodable.value.code() == grpc.StatusCode.INVALID_ARGUMENT
            assert "request AdminService/CreateTopics could not be decoded" in str(
                undecodable.value.details()
            )
            assert "bad UTF-8" in str(undecodable.value.details())
        # FetchSnapshot (as broker 101, the only kind of caller that may send it) for a
        # snapshot id no snapshot can have: INVALID_REQUEST, not UNKNOWN.
        leader_epoch = cluster.wait_for_leader()[1]
        address = admin.controller_address or ""
        with cluster.channel(address, cluster.node_security(101)) as channel:
            snapshot = raft_pb2_grpc.QuorumServiceStub(channel).FetchSnapshot(
                raft_pb2.FetchSnapshotRequest(
                    cluster_id=cluster.cluster_id,
                    replica_id=101,
                    current_leader_epoch=leader_epoch,
                    snapshot_id=raft_pb2.SnapshotId(end_offset=-1, epoch=1),
                ),
                timeout=10,
            )
            assert snapshot.error_code == ErrorCode.INVALID_REQUEST, snapshot
        after = sorted((t.name, t.topic_id) for t in admin.list_topics().listings())
        assert after == before


def test_acknowledged_creates_survive_kill_9_of_the_leader(tmp_path: Path) -> None:
    with (
        cluster_with_brokers(tmp_path) as cluster,
        cluster.admin(bootstrap(cluster), timeout_s=20) as admin,
    ):
        acknowledged: dict[str, Uuid] = {}
        attempted: list[str] = []
        stop = threading.Event()

        def create_stream() -> None:
            i = 0
            while not stop.is_set() and i < 2000:
                name = f"stream-{i}"
                attempted.append(name)
                i += 1
                try:
                    acknowledged[name] = admin.create_topics([NewTopic(name, 1, 3)]).topic_id(name)
                except AdminError:
                    continue

        writer = threading.Thread(target=create_stream, daemon=True)
        writer.start()
        wait_until(lambda: len(acknowledged) >= 20, 30, "some acknowledged creates")
        leader, _, _ = cluster.wait_for_leader()
        cluster.kill(leader, signal.SIGKILL)
        count = len(acknowledged)
        wait_until(lambda: len(acknowledged) >= count + 20, 40, "creates continuing after failover")
        stop.set()
        writer.join(timeout=60)
        cluster.start(leader)
        listing = {t.name: t.topic_id for t in admin.list_topics().listings()}
        for name, topic_id in acknowledged.items():
            assert listing.get(name) == topic_id, f"acknowledged {name} lost or changed"
        names = [t.name for t in admin.list_topics().listings()]
        assert len(names) == len(set(names))
        # Unacknowledged creates are either fully present (with partitions) or absent.
        unknown = [n for n in attempted if n not in acknowledged and n in listing]
        if unknown:
            described = admin.describe_topics(TopicCollection.of_topic_names(unknown))
            for description in described.all_topic_names().values():
                assert len(description.partitions) == 1
