"""Authorization on a real mTLS quorum (docs/authorization.md): a client without ACLs is
refused per topic and changes nothing; a topic's existence is not revealed; ACLs granted
through the AdminClient let it in, DENY overrides ALLOW, PREFIXED patterns apply; the admin
super user is allowed everything; a node may register only as itself."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest

from quorum.admin import NewTopic, TopicCollection
from quorum.errors import ErrorCode, KafkaError, TopicAuthorizationFailedError
from quorum.harness import ProcessCluster, cluster_with_brokers, wait_until
from quorum.rpc.v1 import admin_pb2, admin_pb2_grpc
from quorum.security.acls import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourceType,
)

LITERAL, PREFIXED = PatternType.LITERAL, PatternType.PREFIXED
ALLOW, DENY = AclPermissionType.ALLOW, AclPermissionType.DENY


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ProcessCluster]:
    # Small snapshot intervals: the restart test then loads ACLs from snapshots.
    settings = {
        "metadata.log.max.record.bytes.between.snapshots": 20_000,
        "metadata.log.segment.bytes": 16_384,
    }
    with cluster_with_brokers(
        tmp_path_factory.mktemp("authz"), brokers=1, settings=settings
    ) as cluster:
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
    assert "broker_id 102" in answer.error_message and "controller 3" in answer.error_message
    with cluster.channel(leader, cluster.client_security("alice")) as channel:
        answer = admin_pb2_grpc.AdminServiceStub(channel).RegisterBroker(request, timeout=10)
    assert answer.error_code == ErrorCode.CLUSTER_AUTHORIZATION_FAILED
    with cluster.admin() as admin:
        # Only the real broker 101's registration (by the harness, with its own certificate).
        assert [b.broker_id for b in admin.describe_cluster().nodes] == [101]


def allow(
    principal: str, operation: AclOperation, name: str, pattern: PatternType = LITERAL
) -> AclBinding:
    return AclBinding(ResourceType.TOPIC, name, pattern, principal, "*", operation, ALLOW)


def test_acls_grant_deny_wins_and_prefixed_patterns(cluster: ProcessCluster) -> None:
    bob = "User:CN=bob"
    with cluster.admin() as admin:
        admin.create_topics([NewTopic(n, 1, 1) for n in ("pay.eu", "pay.us", "ledger")]).all()
        admin.create_acls(
            [
                allow(bob, AclOperation.DESCRIBE, "pay.", PREFIXED),
                allow(bob, AclOperation.CREATE, "bob-", PREFIXED),
                allow(bob, AclOperation.DESCRIBE, "pay.us"),
                AclBinding(
                    ResourceType.TOPIC, "pay.us", LITERAL, bob, "*", AclOperation.DESCRIBE, DENY
                ),
            ]
        ).all()
        assert len(admin.describe_acls(AclBindingFilter(principal=bob))) == 4
    with cluster.admin(security=cluster.client_security("bob")) as client:
        described = client.describe_topics(
            TopicCollection.of_topic_names(["pay.eu", "pay.us", "ledger"])
        ).topic_name_values()
        assert described is not None
        assert described["pay.eu"].ok  # PREFIXED allows
        assert isinstance(described["pay.us"].error, TopicAuthorizationFailedError)  # DENY wins
        assert isinstance(described["ledger"].error, TopicAuthorizationFailedError)  # no ACL
        assert {t.name for t in client.list_topics().listings()} == {"pay.eu"}
        client.create_topics([NewTopic("bob-events", 1, 1)]).all()  # CREATE by prefix
        # bob may not manage ACLs: ALTER on the cluster.
        refused = None
        try:
            client.create_acls([allow(bob, AclOperation.ALL, "*")])
        except KafkaError as exc:
            refused = exc
        assert refused is not None and refused.error_code == ErrorCode.CLUSTER_AUTHORIZATION_FAILED


def test_acls_survive_a_restart_of_every_controller(cluster: ProcessCluster) -> None:
    carol = "User:CN=carol"
    with cluster.admin() as admin:
        admin.create_acls([allow(carol, AclOperation.DESCRIBE, "ledger")]).all()
        before = set(admin.describe_acls())
        # Enough records for a snapshot after the ACLs on every controller.
        admin.create_topics([NewTopic(f"filler-{n}", 1, 1) for n in range(300)]).all()
    for node_id in cluster.controller_ids:
        directory = cluster.nodes[node_id].metadata_dir
        wait_until(lambda d=directory: list(d.glob("*.checkpoint")), 30, "a snapshot")  # type: ignore[misc]
    for node_id in cluster.controller_ids:
        cluster.kill(node_id)
        cluster.start(node_id)
    cluster.wait_for_leader(timeout_s=30)
    with cluster.admin() as admin:
        assert set(admin.describe_acls()) == before
        removed = admin.delete_acls(
            [AclBindingFilter(principal=carol, pattern_type=PatternType.ANY)]
        ).all()
        assert removed == [allow(carol, AclOperation.DESCRIBE, "ledger")]
        assert carol not in {b.principal for b in admin.describe_acls()}


def test_the_acls_cli_adds_lists_and_removes(cluster: ProcessCluster) -> None:
    common = ("--bootstrap-server", cluster.bootstrap)
    added = cluster.run_cli(
        "acls", *common, "--add", "--allow-principal", "User:CN=dave",
        "--operation", "Describe", "--operation", "Delete", "--topic", "audit.",
        "--resource-pattern-type", "prefixed",
    )  # fmt: skip
    assert "Adding ACLs for resource `ResourcePattern(resourceType=TOPIC, name=audit., " in (
        added.stdout
    )
    listed = cluster.run_cli("acls", *common, "--list", "--principal", "User:CN=dave")
    assert listed.stdout.count("principal=User:CN=dave") == 2
    assert "operation=DELETE, permissionType=ALLOW" in listed.stdout
    matched = cluster.run_cli(
        "acls", *common, "--list", "--topic", "audit.eu", "--resource-pattern-type", "match"
    )
    assert "name=audit., patternType=PREFIXED" in matched.stdout
    removed = cluster.run_cli(
        "acls", *common, "--remove", "--allow-principal", "User:CN=dave", "--topic", "audit.",
        "--resource-pattern-type", "prefixed", "--force",
    )  # fmt: skip
    assert removed.stdout.count("principal=User:CN=dave") == 2
    after = cluster.run_cli("acls", *common, "--list", "--principal", "User:CN=dave")
    assert "User:CN=dave" not in after.stdout
    bad = cluster.run_cli("acls", *common, "--add", "--topic", "x", check=False)
    assert bad.returncode != 0 and "--allow-principal or --deny-principal" in bad.stderr


def test_a_listing_names_no_topic_the_caller_may_not_describe(cluster: ProcessCluster) -> None:
    """ListTopics' pages and their cursors are made of the topics the caller may describe: a
    cursor once named the first topic left out of a page before the ACL filter, so a caller
    paging one topic at a time learned every name (docs/security.md#what-a-listing-shows)."""
    dave = "User:CN=dave"
    visible = ["walk.b", "walk.d"]
    hidden = ["walk.a", "walk.c", "walk.e"]
    with cluster.admin() as admin:
        admin.create_topics([NewTopic(n, 1, 1) for n in visible + hidden]).all()
        created = admin.create_acls([allow(dave, AclOperation.DESCRIBE, n) for n in visible])
        created.all()
        offset = created.metadata_offset
    leader, _, _ = cluster.wait_for_leader()
    seen: list[str] = []
    cursors: list[str] = []
    with cluster.channel(leader, cluster.client_security("dave")) as channel:
        stub = admin_pb2_grpc.AdminServiceStub(channel)
        cursor = "walk."
        while True:
            page = stub.ListTopics(
                admin_pb2.ListTopicsRequest(
                    cursor=cursor, page_topics_max=1, min_metadata_offset=offset
                ),
                timeout=10,
            )
            assert page.error_code == ErrorCode.NONE, page.error_message
            seen += [t.name for t in page.topics]
            if not page.next_cursor:
                break
            cursors.append(page.next_cursor)
            cursor = page.next_cursor
    assert [n for n in seen if n.startswith("walk.")] == visible
    leaked = [c for c in cursors if c in hidden]
    assert not leaked, f"a cursor named a topic dave may not describe: {leaked}"
