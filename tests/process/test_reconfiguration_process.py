"""A dynamic controller quorum on real processes with mTLS (KIP-853, docs/operating.md):
grow 1 -> 3 from ``storage format --standalone``, replace a killed voter while writes go on,
a wiped controller (new directory id) that cannot vote until it is added again, and a removed
controller whose requests are refused. Every process is killed by PID at the end.
"""

from __future__ import annotations

import threading
from pathlib import Path

import grpc
import pytest

from quorum.errors import AdminError, ErrorCode
from quorum.harness import ProcessCluster, process_cluster, wait_until
from quorum.ids import METADATA_TOPIC_ID, Uuid
from quorum.meta_properties import read as read_meta_properties
from quorum.rpc.v1 import raft_pb2, raft_pb2_grpc
from quorum.security.acls import (
    AclBinding,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourceType,
)

pytestmark = [pytest.mark.slow]


def acl(name: str) -> AclBinding:
    """A write that needs no broker: an ACL naming topic ``name``."""
    return AclBinding(
        ResourceType.TOPIC,
        name,
        PatternType.LITERAL,
        "User:CN=writer",
        "*",
        AclOperation.DESCRIBE,
        AclPermissionType.ALLOW,
    )


def voters_of(cluster: ProcessCluster, via: int) -> dict[int, str]:
    """The voter set as the leader describes it: node id -> directory id."""
    answer = cluster.describe(via)
    assert answer.error_code == 0, answer
    return {v.replica_id: str(Uuid.from_bytes(v.directory_id)) for v in answer.current_voters}


def observers_of(cluster: ProcessCluster, via: int) -> dict[int, str]:
    answer = cluster.describe(via)
    return {
        o.replica_id: str(Uuid.from_bytes(o.directory_id)) if o.directory_id else ""
        for o in answer.observers
    }


def directory_id(cluster: ProcessCluster, node_id: int) -> str:
    return str(read_meta_properties(cluster.nodes[node_id].data_dir).directory_id)


def live(cluster: ProcessCluster) -> list[int]:
    return [n for n in cluster.controller_ids if cluster.nodes[n].alive]


def add_controller(cluster: ProcessCluster, node_id: int, via: int) -> str:
    result = cluster.run_cli(
        "quorum", "add-controller", "--config", str(cluster.nodes[node_id].config),
        "--bootstrap-controller", cluster.nodes[via].address, "--timeout-s", "60",
    )  # fmt: skip
    return result.stdout


def remove_controller(
    cluster: ProcessCluster, node_id: int, directory: str, via: int, check: bool = True
) -> str:
    result = cluster.run_cli(
        "quorum", "remove-controller", "--controller-id", str(node_id),
        "--controller-directory-id", directory,
        "--bootstrap-controller", cluster.nodes[via].address, check=check,
    )  # fmt: skip
    return result.stdout + result.stderr


def test_grow_one_to_three_then_remove_a_live_controller(tmp_path: Path) -> None:
    """--standalone, two add-controller, a failover among the new voters; then a live voter
    removed: it stays an observer, its Vote requests are refused (INCONSISTENT_VOTER_SET),
    adding a voter twice is DUPLICATE_VOTER and removing an unknown one VOTER_NOT_FOUND."""
    with process_cluster(tmp_path, voters=3, dynamic=True) as cluster:
        cluster.format(1, extra=["--standalone"])
        cluster.format(2, extra=["--no-initial-controllers"])
        cluster.format(3, extra=["--no-initial-controllers"])
        cluster.start_all()
        wait_until(lambda: cluster.leader([1]), 30, "controller 1 leading alone")
        assert voters_of(cluster, 1) == {1: directory_id(cluster, 1)}
        # Nodes 2 and 3 follow as observers, with their directory ids.
        wait_until(lambda: {2, 3} <= set(observers_of(cluster, 1)), 30, "two observers")
        assert observers_of(cluster, 1)[2] == directory_id(cluster, 2)
        status = cluster.run_cli(
            "quorum", "describe", "--status", "--bootstrap-controller", cluster.nodes[1].address
        ).stdout
        assert f'"directoryId": "{directory_id(cluster, 2)}"' in status  # an observer that can join

        out = add_controller(cluster, 2, via=1)
        assert f"Added controller 2 with directory id {directory_id(cluster, 2)}" in out
        add_controller(cluster, 3, via=2)  # any controller: the request reaches the leader
        expected = {n: directory_id(cluster, n) for n in (1, 2, 3)}
        assert voters_of(cluster, 1) == expected
        with cluster.admin() as admin:
            admin.create_acls([acl("grown")]).all()
        # The new voters elect a leader without node 1.
        cluster.kill(1)
        leader, _, _ = wait_until(lambda: cluster.leader([2, 3]), 30, "a leader among 2 and 3")
        assert leader in (2, 3)
        cluster.start(1)
        wait_until(lambda: voters_of(cluster, leader) == expected, 30, "node 1 back")

        # Removing a voter that is running: it becomes an observer.
        victim = next(n for n in (1, 2, 3) if n != leader)
        out = remove_controller(cluster, victim, expected[victim], via=leader)
        assert f"Removed KRaft controller {victim}" in out
        remaining = {n: d for n, d in expected.items() if n != victim}
        assert voters_of(cluster, leader) == remaining
        wait_until(lambda: victim in observers_of(cluster, leader), 30, "the removed observer")
        # Its requests as a voter are refused: a Vote in its own name (its certificate).
        answer = cluster.describe(leader)
        with cluster.channel(leader, cluster.node_security(victim)) as channel:
            vote = raft_pb2_grpc.QuorumServiceStub(channel).Vote(
                raft_pb2.VoteRequest(
                    cluster_id=cluster.cluster_id,
                    topic_id=METADATA_TOPIC_ID.bytes,
                    partition_index=0,
                    candidate_epoch=answer.leader_epoch + 1,
                    candidate_id=victim,
                    last_offset_epoch=0,
                    last_offset=0,
                    pre_vote=True,
                    voter_id=leader,
                ),
                timeout=5,
            )
        assert vote.error_code == ErrorCode.INCONSISTENT_VOTER_SET, vote
        assert not vote.vote_granted
        # Kafka's errors for a duplicate and an unknown voter.
        with cluster.admin() as admin:
            with pytest.raises(AdminError, match="DUPLICATE_VOTER"):
                admin.add_raft_voter(
                    leader, Uuid.random(), [("CONTROLLER", "127.0.0.1", 1)], timeout_s=10
                )
            with pytest.raises(AdminError, match="VOTER_NOT_FOUND"):
                admin.remove_raft_voter(victim, Uuid.parse(expected[victim]), timeout_s=10)
        # Only an operator with ALTER on the cluster may change the voter set.
        with (
            cluster.admin(security=cluster.client_security("mallory")) as mallory,
            pytest.raises(AdminError, match="CLUSTER_AUTHORIZATION_FAILED"),
        ):
            mallory.remove_raft_voter(leader, Uuid.parse(expected[leader]), timeout_s=10)
        assert cluster.leader([leader])[1] == answer.leader_epoch  # nobody disturbed the epoch


def test_replace_a_killed_voter_while_writes_continue(tmp_path: Path) -> None:
    """3 -> 4 -> remove a voter killed with -9 -> 3, a client writing (ACLs: no broker needed)
    throughout: every acknowledged write is there at the end (docs/invariants.md I6)."""
    with process_cluster(tmp_path, voters=4, dynamic=True) as cluster:
        directories = {n: str(Uuid.random()) for n in (1, 2, 3)}
        initial = ",".join(
            f"{n}@127.0.0.1:{cluster.nodes[n].port}:{directories[n]}" for n in (1, 2, 3)
        )
        for n in (1, 2, 3):
            cluster.format(n, extra=["--initial-controllers", initial])
        cluster.format(4, extra=["--no-initial-controllers"])
        for n in (1, 2, 3):
            cluster.start(n)
        leader, _, _ = cluster.wait_for_leader(30)
        assert voters_of(cluster, leader) == directories

        acknowledged: list[str] = []
        stop = threading.Event()

        def write() -> None:
            with cluster.admin(timeout_s=10) as admin:
                index = 0
                while not stop.is_set():
                    name = f"t{index}"
                    index += 1
                    try:
                        admin.create_acls([acl(name)]).all()
                    except AdminError:
                        continue  # indeterminate or refused: not counted
                    acknowledged.append(name)

        writer = threading.Thread(target=write, daemon=True)
        writer.start()
        try:
            wait_until(lambda: len(acknowledged) >= 5, 30, "writes before the changes")
            cluster.start(4)
            add_controller(cluster, 4, via=leader)
            directories[4] = directory_id(cluster, 4)
            assert voters_of(cluster, cluster.wait_for_leader(30)[0]) == directories
            before = len(acknowledged)
            wait_until(lambda: len(acknowledged) > before + 3, 30, "writes with four voters")

            leader = cluster.wait_for_leader(30)[0]
            victim = next(n for n in (1, 2, 3) if n != leader)
            cluster.kill(victim)
            before = len(acknowledged)
            wait_until(lambda: len(acknowledged) > before + 3, 30, "writes with one voter dead")
            remove_controller(cluster, victim, directories.pop(victim), via=leader)
            leader = cluster.wait_for_leader(30, among=live(cluster))[0]
            assert voters_of(cluster, leader) == directories
            before = len(acknowledged)
            wait_until(lambda: len(acknowledged) > before + 3, 30, "writes with three voters")
        finally:
            stop.set()
            writer.join(timeout=30)
        with cluster.admin() as admin:
            present = {binding.resource_name for binding in admin.describe_acls()}
        missing = [name for name in acknowledged if name not in present]
        assert not missing, f"acknowledged creates lost: {missing}"
        assert len(acknowledged) >= 17


def test_wiped_controller_cannot_vote_until_added_again(tmp_path: Path) -> None:
    """A voter's disk is lost; the node is formatted again (a new directory id) and restarted.
    It fetches as an observer but is not the voter it replaced: with another voter down, no
    leader can be elected (its old key does not vote); once the old key is removed and the new
    one added, it votes."""
    with process_cluster(tmp_path, voters=3, dynamic=True) as cluster:
        directories = {n: str(Uuid.random()) for n in (1, 2, 3)}
        initial = ",".join(
            f"{n}@127.0.0.1:{cluster.nodes[n].port}:{directories[n]}" for n in (1, 2, 3)
        )
        for n in (1, 2, 3):
            cluster.format(n, extra=["--initial-controllers", initial])
        cluster.start_all()
        leader, _, _ = cluster.wait_for_leader(30)
        victim, other = [n for n in (1, 2, 3) if n != leader][:2]
        cluster.kill(victim)
        node = cluster.nodes[victim]
        for path in sorted(node.data_dir.rglob("*"), reverse=True):
            path.unlink() if path.is_file() else path.rmdir()
        cluster.format(victim, extra=["--no-initial-controllers"])
        new_directory = directory_id(cluster, victim)
        assert new_directory != directories[victim]
        cluster.start(victim)
        wait_until(
            lambda: observers_of(cluster, leader).get(victim) == new_directory,
            30,
            "the wiped node fetching as an observer",
        )
        assert voters_of(cluster, leader) == directories  # still the old replica

        # With one more voter down, the wiped node's vote would make a majority; it has none.
        cluster.kill(other)
        cluster.kill(leader)
        cluster.start(leader)
        wait_until(
            lambda: "INVALID_VOTER_KEY" in cluster.logs(victim),
            30,
            "a vote addressed to the old replica refused by the wiped node",
        )
        assert cluster.leader([leader]) is None
        with pytest.raises(grpc.RpcError):
            cluster.describe(other)  # still down
        cluster.start(other)
        leader = cluster.wait_for_leader(30, among=[leader, other])[0]

        # Replace: remove the old replica, add the new one; then it votes.
        remove_controller(cluster, victim, directories[victim], via=leader)
        add_controller(cluster, victim, via=leader)
        directories[victim] = new_directory
        assert voters_of(cluster, leader) == directories
        keep = next(n for n in (1, 2, 3) if n not in (victim, leader))
        cluster.kill(keep)
        new_leader, _, _ = wait_until(
            lambda: cluster.leader([leader, victim]), 30, "a leader elected with the new replica"
        )
        assert new_leader in (leader, victim)


def test_auto_join_adds_a_controller_once_caught_up(tmp_path: Path) -> None:
    """controller.quorum.auto.join.enable (Kafka 4.1): a controller formatted to join adds
    itself (its own certificate may add its own id), and is then a voter."""
    with process_cluster(tmp_path, voters=2, dynamic=True) as cluster:
        cluster.format(1, extra=["--standalone"])
        cluster.format(2, extra=["--no-initial-controllers"])
        config = cluster.nodes[2].config
        config.write_text(config.read_text() + '"controller.quorum.auto.join.enable" = true\n')
        cluster.start_all()
        wait_until(lambda: cluster.leader([1]), 30, "controller 1 leading")
        expected = {n: directory_id(cluster, n) for n in (1, 2)}
        wait_until(lambda: voters_of(cluster, 1) == expected, 30, "controller 2 joining")
        # Controller 1 shows the voter set once it commits; controller 2 logs when the answer
        # to its AddRaftVoter (or its next look, AUTO_JOIN_RETRY_S later) finds it a voter.
        wait_until(lambda: "auto_join_done" in cluster.logs(2), 10, "controller 2 done")
