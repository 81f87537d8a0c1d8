"""Trust follows role (docs/security.md#what-a-node-may-claim), on a real mTLS dynamic (KIP-853)
quorum of three controllers and one broker, as the outside review attacked it.

With the broker's own certificate (``.../broker/101``): BeginQuorumEpoch naming itself leader
of the next epoch, sent to every controller, once made all three follow it; AddRaftVoter(101)
made it a voter. Both are refused now, and the quorum's epoch, leader and voter set stay as they
were. A broker certificate of an id the cluster does not know (999), or a controller's, may not
forward a client's principal (KIP-590), and a controller's may not register as a broker. A
certificate of the earlier form, without a role, is nobody.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from quorum.errors import ErrorCode
from quorum.harness import ProcessCluster, process_cluster, run_cli, wait_until
from quorum.ids import METADATA_TOPIC_ID, Uuid
from quorum.rpc.v1 import admin_pb2, admin_pb2_grpc, raft_pb2, raft_pb2_grpc
from quorum.security.certs import write_private
from quorum.security.identity import ROLE_BROKER, ROLE_CONTROLLER, Caller, forwarding_metadata

pytestmark = [pytest.mark.slow]

BROKER = 101


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ProcessCluster]:
    root = tmp_path_factory.mktemp("roles")
    with process_cluster(root, voters=3, dynamic=True, brokers=1) as running:
        directories = {n: str(Uuid.random()) for n in running.controller_ids}
        initial = ",".join(
            f"{n}@127.0.0.1:{running.nodes[n].port}:{directories[n]}"
            for n in running.controller_ids
        )
        for n in running.controller_ids:
            running.format(n, extra=["--initial-controllers", initial])
        running.format(BROKER)
        running.start_all()
        running.wait_for_leader(timeout_s=30)
        with running.admin() as admin:
            wait_until(
                lambda: any(b.broker_id == BROKER for b in admin.describe_cluster().brokers),
                30,
                "broker 101 registered",
            )
        yield running


def quorum_view(cluster: ProcessCluster) -> tuple[int, int, frozenset[int]]:
    """(leader id, epoch, voter ids) as the leader describes them."""
    leader, _, _ = cluster.wait_for_leader(timeout_s=30)
    answer = cluster.describe(leader)
    return (
        answer.leader_id,
        answer.leader_epoch,
        frozenset(v.replica_id for v in answer.current_voters),
    )


def header(cluster: ProcessCluster) -> dict[str, object]:
    return {
        "cluster_id": cluster.cluster_id,
        "topic_id": METADATA_TOPIC_ID.bytes,
        "partition_index": 0,
    }


def test_a_broker_certificate_cannot_take_over_a_dynamic_quorum(cluster: ProcessCluster) -> None:
    leader, epoch, voters = quorum_view(cluster)
    assert BROKER not in voters
    broker_address = cluster.nodes[BROKER].address
    as_broker = cluster.node_security(BROKER)  # the broker's own certificate
    for node_id in cluster.controller_ids:
        with cluster.channel(node_id, as_broker) as channel:
            stub = raft_pb2_grpc.QuorumServiceStub(channel)
            begin = stub.BeginQuorumEpoch(
                raft_pb2.BeginQuorumEpochRequest(
                    **header(cluster), leader_id=BROKER, leader_epoch=epoch + 1,
                    voter_id=node_id, leader_endpoint=broker_address,
                ),
                timeout=10,
            )  # fmt: skip
            assert begin.error_code == ErrorCode.CLUSTER_AUTHORIZATION_FAILED, begin
            assert "only a controller may send" in begin.error_message
            vote = stub.Vote(
                raft_pb2.VoteRequest(
                    **header(cluster), candidate_epoch=epoch + 1, candidate_id=BROKER,
                    last_offset_epoch=epoch, last_offset=10**9, voter_id=node_id,
                ),
                timeout=10,
            )  # fmt: skip
            assert (
                vote.error_code == ErrorCode.CLUSTER_AUTHORIZATION_FAILED and not vote.vote_granted
            )
    with cluster.channel(leader, as_broker) as channel:
        added = raft_pb2_grpc.QuorumServiceStub(channel).AddRaftVoter(
            raft_pb2.AddRaftVoterRequest(
                cluster_id=cluster.cluster_id, timeout_ms=5_000, voter_id=BROKER,
                voter_directory_id=Uuid.random().bytes,
                endpoints=[raft_pb2.VoterEndpoint(name="CONTROLLER", host="127.0.0.1", port=1)],
            ),
            timeout=20,
        )  # fmt: skip
    assert added.error_code == ErrorCode.CLUSTER_AUTHORIZATION_FAILED, added
    # Nothing moved: the same leader in the same epoch, the same voters, on every controller.
    assert quorum_view(cluster) == (leader, epoch, voters)
    for node_id in cluster.controller_ids:
        assert cluster.describe(node_id).leader_epoch == epoch
    assert "request_refused" in cluster.logs(leader)


def forwarded_create(
    cluster: ProcessCluster, holder: int, roles: list[str] | None, name: str
) -> int:
    """A CreateTopics forwarded as the super user ``User:CN=admin`` (KIP-590) by a caller holding
    node ``holder``'s certificate (in ``roles``); the topic's error code."""
    leader, _, _ = cluster.wait_for_leader(timeout_s=30)
    claimed = Caller("User:CN=admin", None, None, authenticated=True, peer="203.0.113.9:1")
    with cluster.channel(leader, cluster.node_security(holder, roles)) as channel:
        answer = admin_pb2_grpc.AdminServiceStub(channel).CreateTopics(
            admin_pb2.CreateTopicsRequest(
                topics=[admin_pb2.CreatableTopic(name=name, num_partitions=1, replication_factor=1)]
            ),
            metadata=forwarding_metadata(claimed),
            timeout=20,
        )
    assert answer.error_code == ErrorCode.NONE, answer
    return int(answer.topics[0].error_code)


def test_only_a_registered_broker_may_forward_a_principal(cluster: ProcessCluster) -> None:
    # An unknown broker id, and a controller, act as User:ANONYMOUS: refused, nothing created.
    unknown = forwarded_create(cluster, 999, [ROLE_BROKER], "forwarded-by-999")
    assert unknown == ErrorCode.TOPIC_AUTHORIZATION_FAILED
    by_controller = forwarded_create(cluster, 1, [ROLE_CONTROLLER], "forwarded-by-controller")
    assert by_controller == ErrorCode.TOPIC_AUTHORIZATION_FAILED
    # The registered broker forwards as KIP-590 intends.
    assert forwarded_create(cluster, BROKER, None, "forwarded-by-101") == ErrorCode.NONE
    with cluster.admin() as admin:
        names = {t.name for t in admin.list_topics().listings()}
    assert "forwarded-by-101" in names
    assert not {"forwarded-by-999", "forwarded-by-controller"} & names
    leader, _, _ = cluster.wait_for_leader(timeout_s=30)
    assert "forwarded_principal_refused" in cluster.logs(leader)


def test_a_controller_may_not_register_as_a_broker(cluster: ProcessCluster) -> None:
    leader, _, _ = cluster.wait_for_leader(timeout_s=30)
    request = admin_pb2.RegisterBrokerRequest(
        cluster_id=cluster.cluster_id,
        broker_id=1,
        incarnation_id=uuid.uuid4().bytes,
        listeners=[admin_pb2.BrokerListener(name="BROKER", host="127.0.0.1", port=9)],
    )
    with cluster.channel(leader, cluster.node_security(1)) as channel:
        answer = admin_pb2_grpc.AdminServiceStub(channel).RegisterBroker(request, timeout=10)
    assert answer.error_code == ErrorCode.CLUSTER_AUTHORIZATION_FAILED, answer
    assert "only a broker may send" in answer.error_message
    with cluster.admin() as admin:
        assert 1 not in {b.broker_id for b in admin.describe_cluster().brokers}


def test_a_node_refuses_to_start_without_a_certificate_naming_its_id_and_role(
    tmp_path: Path,
) -> None:
    """Another node's certificate, a broker's certificate on a controller, and the earlier form
    without a role: each stops `controller start` with one line saying what is wrong (a
    controller started with another node's certificate once looped on refused requests)."""
    cluster = ProcessCluster(tmp_path, voters=2)
    assert cluster.certs is not None
    cluster.format()
    keystore = cluster.certs.node_keystore(1)
    authority = cluster.certs.authority
    wrong = {
        "another node's": authority.issue_node(cluster.cluster_id, 2, [ROLE_CONTROLLER]),
        "a broker's": authority.issue_node(cluster.cluster_id, 1, [ROLE_BROKER]),
        "another cluster's": authority.issue_node("b3RoZXJjbHVzdGVy", 1, [ROLE_CONTROLLER]),
        "a role-less": authority.issue(
            "node-1",
            uris=[f"spiffe://metaquorum/{cluster.cluster_id}/node/1"],
            ip_addresses=["127.0.0.1"],
        ),
    }
    for what, pem in wrong.items():
        write_private(keystore, pem, private=True)
        result = run_cli(
            "controller", "start", "--config", str(cluster.nodes[1].config), check=False,
            timeout_s=60,
        )  # fmt: skip
        assert result.returncode == 1, f"{what}: {result.stdout}{result.stderr}"
        errors = [line for line in result.stderr.splitlines() if line.strip()]
        assert len(errors) == 1, f"{what}: {errors}"
        assert "ssl.keystore" in errors[0] and "controller 1" in errors[0], (what, errors)
    # Its own certificate starts it.
    write_private(
        keystore, authority.issue_node(cluster.cluster_id, 1, [ROLE_CONTROLLER]), private=True
    )
    try:
        cluster.start(1)
        wait_until(lambda: "listening" in cluster.logs(1), 30, "controller 1 listening")
    finally:
        cluster.stop_all()
