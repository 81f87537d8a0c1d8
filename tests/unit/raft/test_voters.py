"""The voter set (KIP-853): ``VoterSet`` and ``VoterSetHistory`` as units, and the leader's
AddRaftVoter / RemoveRaftVoter rules and the vote rules of a dynamic quorum on a simulated
cluster (real ``RaftNode``s, virtual time, invariants after every event)."""

from __future__ import annotations

import random

import pytest

from quorum.errors import ErrorCode
from quorum.ids import METADATA_TOPIC_ID, Uuid
from quorum.metadata.batch import LogBatch, decode_log_batch, encode_batch
from quorum.metadata.records import BrokerEndpoint, KRaftVersionRecord, NoOpRecord
from quorum.raft.config import RaftConfig
from quorum.raft.messages import (
    AddRaftVoterRequest,
    BeginQuorumEpochRequest,
    BeginQuorumEpochResponse,
    Envelope,
    Message,
    RemoveRaftVoterRequest,
    RequestHeader,
    UpdateRaftVoterRequest,
    VoterChangeResponse,
    VoteRequest,
    VoteResponse,
)
from quorum.raft.node import RaftNode, Ready
from quorum.raft.voters import (
    KRAFT_VERSION_DYNAMIC,
    ReplicaKey,
    VoterNode,
    VoterSet,
    VoterSetHistory,
    voter_changes_in,
)
from tests.sim.cluster import ADMIN_ID, CLUSTER_ID, SimCluster
from tests.sim.scenarios import FIRST_LEADER_MS_MAX, run_until_or_not

RNG = random.Random(853)
DIRS = [Uuid.random(RNG) for _ in range(6)]
ENDPOINT = (BrokerEndpoint("CONTROLLER", "h", 9093),)


def key(node_id: int) -> ReplicaKey:
    return ReplicaKey(node_id, DIRS[node_id])


def voters(*ids: int) -> VoterSet:
    return VoterSet(VoterNode(key(n), ENDPOINT) for n in ids)


# ----- VoterSet ---------------------------------------------------------------------------------


def test_voter_set_changes_one_voter_at_a_time() -> None:
    three = voters(1, 2, 3)
    assert three.add(VoterNode(key(4))) == VoterSet([*three, VoterNode(key(4))])
    assert three.add(VoterNode(ReplicaKey(3, DIRS[5]))) is None  # DUPLICATE_VOTER: same id
    assert three.remove(key(3)) == voters(1, 2)
    assert three.remove(ReplicaKey(3, DIRS[5])) is None  # VOTER_NOT_FOUND: another directory
    assert voters(1).remove(key(1)) is None  # never the last voter
    moved = VoterNode(key(2), (BrokerEndpoint("CONTROLLER", "new", 1),))
    assert three.update(moved) is not None and three.update(moved).voter(2) == moved  # type: ignore[union-attr]
    assert three.differs_by_at_most_one(voters(1, 2)) and not three.differs_by_at_most_one(
        voters(1)
    )


def test_a_wiped_replica_is_not_the_voter_it_replaced() -> None:
    three = voters(1, 2, 3)
    assert three.is_voter(key(2))
    assert not three.is_voter(ReplicaKey(2, DIRS[5]))
    assert three.is_voter(ReplicaKey(2))  # no directory known: the id decides (static quorums)
    assert VoterSet.static([1, 2]).is_voter(ReplicaKey(2, DIRS[5]))


def test_voters_record_round_trip() -> None:
    three = voters(1, 2, 3)
    batch = encode_batch(
        base_offset=7,
        epoch=2,
        timestamp_ms=0,
        records=[KRaftVersionRecord(0, 1), three.to_record()],
        control=True,
    )
    assert voter_changes_in(batch) == (1, three)
    plain = encode_batch(base_offset=7, epoch=2, timestamp_ms=0, records=[NoOpRecord()])
    assert voter_changes_in(plain) == (None, None)


# ----- VoterSetHistory --------------------------------------------------------------------------


def test_history_in_force_even_uncommitted_and_rolled_back_by_truncation() -> None:
    history = VoterSetHistory(voters(1), 1)
    history.add(0, 1, voters(1))
    history.add(10, None, voters(1, 2))
    history.add(20, None, voters(1, 2, 3))
    assert history.latest() == voters(1, 2, 3)
    assert history.voters_before(20) == voters(1, 2)
    assert history.voters_before(21) == voters(1, 2, 3)
    assert history.truncate_to(15)  # the uncommitted add at 20 is gone with the log
    assert history.latest() == voters(1, 2)
    assert not history.truncate_to(15)
    history.compact_to(12)  # a snapshot ending at 12: what was in force there is the base
    assert history.entries() == ()
    assert history.latest() == voters(1, 2) and history.kraft_version() == 1
    assert history.truncate_to(0) is False  # the base stays


# ----- the leader's rules, on a simulated dynamic quorum ------------------------------------------


def dynamic_cluster(seed: int = 1) -> SimCluster:
    cluster = SimCluster(seed=seed, voters=3, observers=0, dynamic=True, spares=1)
    cluster.start()
    cluster.run_until(cluster.has_leader, FIRST_LEADER_MS_MAX, "a leader")
    cluster.run_for(500)  # its epoch committed
    return cluster


def ask(cluster: SimCluster, destination: int, request: Message) -> Message:
    correlation_id = cluster.send_admin(destination, request)
    assert run_until_or_not(cluster, lambda: correlation_id in cluster.admin_answers, 20_000)
    return cluster.admin_answers.pop(correlation_id)


def change(cluster: SimCluster, request: Message, *, to: int | None = None) -> VoterChangeResponse:
    leader = cluster.leader()
    assert leader is not None
    answer = ask(cluster, to if to is not None else leader.node_id, request)
    assert isinstance(answer, VoterChangeResponse), answer
    return answer


def add(cluster: SimCluster, node_id: int, timeout_ms: int = 10_000) -> AddRaftVoterRequest:
    directory = cluster.nodes[node_id].directory_id
    assert directory is not None
    return AddRaftVoterRequest(CLUSTER_ID, node_id, directory, ENDPOINT, timeout_ms)


def remove(cluster: SimCluster, node_id: int) -> RemoveRaftVoterRequest:
    directory = cluster.nodes[node_id].directory_id
    assert directory is not None
    return RemoveRaftVoterRequest(CLUSTER_ID, node_id, directory)


def test_add_and_remove_with_kafkas_error_codes() -> None:
    cluster = dynamic_cluster()
    leader = cluster.leader()
    assert leader is not None and leader.raft is not None
    follower = next(n for n in (1, 2, 3) if n != leader.node_id)

    assert change(cluster, add(cluster, 4)).error_code is ErrorCode.NONE
    assert leader.raft.voters == {1, 2, 3, 4}
    assert change(cluster, add(cluster, 4)).error_code is ErrorCode.DUPLICATE_VOTER
    wrong = RemoveRaftVoterRequest(CLUSTER_ID, follower, DIRS[5])
    assert change(cluster, wrong).error_code is ErrorCode.VOTER_NOT_FOUND
    other = change(cluster, remove(cluster, follower), to=follower)
    assert other.error_code is ErrorCode.NOT_LEADER_OR_FOLLOWER
    assert other.leader_id == leader.node_id
    foreign = RemoveRaftVoterRequest("another-cluster", follower, DIRS[5])
    assert change(cluster, foreign).error_code is ErrorCode.INCONSISTENT_CLUSTER_ID

    # One change at a time: a second one while the first is in flight is refused.
    first = cluster.send_admin(leader.node_id, remove(cluster, 4))
    second = change(cluster, remove(cluster, follower))
    assert second.error_code is ErrorCode.REQUEST_TIMED_OUT
    assert "one change at a time" in second.error_message
    assert run_until_or_not(cluster, lambda: first in cluster.admin_answers, 10_000)
    assert cluster.admin_answers[first].error_code is ErrorCode.NONE  # type: ignore[union-attr]
    assert leader.raft.voters == {1, 2, 3}
    assert cluster.nodes[4].raft is not None and not cluster.nodes[4].raft.is_voter


def test_a_new_voter_must_catch_up_first() -> None:
    """A controller that does not fetch (crashed) is never added: REQUEST_TIMED_OUT, naming
    how far it got; the voter set is unchanged."""
    cluster = dynamic_cluster(seed=2)
    cluster.crash(4)
    answer = change(cluster, add(cluster, 4, timeout_ms=1_000))
    assert answer.error_code is ErrorCode.REQUEST_TIMED_OUT
    assert "did not catch up" in answer.error_message
    leader = cluster.leader()
    assert leader is not None and leader.raft is not None and leader.raft.voters == {1, 2, 3}


def test_removed_leader_resigns_once_the_removal_commits() -> None:
    cluster = dynamic_cluster(seed=3)
    leader = cluster.leader()
    assert leader is not None
    assert change(cluster, remove(cluster, leader.node_id)).error_code is ErrorCode.NONE
    cluster.run_until(
        lambda: (new := cluster.leader()) is not None and new.node_id != leader.node_id,
        20_000,
        "another leader",
    )
    assert leader.raft is not None and not leader.raft.is_voter and not leader.raft.is_leader()


def test_a_static_quorum_never_changes() -> None:
    cluster = SimCluster(seed=4, voters=3, observers=0)
    cluster.start()
    cluster.run_until(cluster.has_leader, FIRST_LEADER_MS_MAX, "a leader")
    cluster.run_for(500)
    request = AddRaftVoterRequest(CLUSTER_ID, 4, DIRS[4], ENDPOINT, 1_000)
    assert change(cluster, request).error_code is ErrorCode.UNSUPPORTED_VERSION


@pytest.mark.parametrize(
    ("candidate_directory", "voter_directory", "log_ahead", "expected"),
    [
        ("old", "new", False, ErrorCode.INVALID_VOTER_KEY),  # addressed to another directory
        ("stranger", "own", False, ErrorCode.INCONSISTENT_VOTER_SET),  # not a voter, not ahead
        ("stranger", "own", True, ErrorCode.NONE),  # may hold a newer voter set
    ],
)
def test_vote_rules_of_a_dynamic_quorum(
    candidate_directory: str, voter_directory: str, log_ahead: bool, expected: ErrorCode
) -> None:
    cluster = dynamic_cluster(seed=5)
    leader = cluster.leader()
    assert leader is not None and leader.raft is not None
    target = next(n for n in (1, 2, 3) if n != leader.node_id)
    candidate = next(n for n in (1, 2, 3) if n not in (leader.node_id, target))
    raft = cluster.nodes[target].raft
    assert raft is not None
    request = VoteRequest(
        RequestHeader(CLUSTER_ID, METADATA_TOPIC_ID, 0),
        raft.epoch + 1,
        candidate,
        raft.log.last_fetched_epoch + (1 if log_ahead else 0),
        raft.log_end_offset,
        True,  # a pre-vote: it moves nothing
        target,
        DIRS[5] if candidate_directory == "stranger" else cluster.nodes[candidate].directory_id,
        DIRS[5] if voter_directory == "new" else cluster.nodes[target].directory_id,
    )
    answer = ask(cluster, target, request)
    assert isinstance(answer, VoteResponse)
    assert answer.error_code is expected
    assert not answer.vote_granted  # a live leader: no pre-vote granted either way


def test_a_voter_refuses_a_leader_outside_its_voter_set_a_joining_controller_follows_it() -> None:
    """docs/security.md#a-leader-outside-the-voter-set: a voter of a dynamic quorum refuses
    BeginQuorumEpoch from a node outside its voter set (INCONSISTENT_VOTER_SET, nothing moves);
    a controller that is not a voter of its own set (about to be added, its set possibly older
    than the leader's) follows it, as KIP-853 needs."""
    cluster = dynamic_cluster(seed=6)
    leader = cluster.leader()
    assert leader is not None and leader.raft is not None
    voter = next(n for n in (1, 2, 3) if n != leader.node_id)
    voter_raft, joining = cluster.nodes[voter].raft, cluster.nodes[4].raft
    assert voter_raft is not None and joining is not None and not joining.is_voter
    epoch = voter_raft.epoch
    header = RequestHeader(CLUSTER_ID, METADATA_TOPIC_ID, 0)
    refused = ask(cluster, voter, BeginQuorumEpochRequest(header, 9, epoch + 1, voter))
    assert isinstance(refused, BeginQuorumEpochResponse)
    assert refused.error_code is ErrorCode.INCONSISTENT_VOTER_SET
    assert (voter_raft.epoch, voter_raft.leader_id) == (epoch, leader.node_id)
    followed = ask(cluster, 4, BeginQuorumEpochRequest(header, 9, epoch + 1, 4))
    assert isinstance(followed, BeginQuorumEpochResponse)
    assert followed.error_code is ErrorCode.NONE
    assert (joining.epoch, joining.leader_id) == (epoch + 1, 9)


def test_every_batch_of_a_dynamic_leader_carries_the_wall_clock() -> None:
    """Batches carry the leader's wall-clock append time
    (docs/architecture.md#fetch-and-the-high-watermark): the core's clock is monotonic and the
    driver hands it the offset to the wall clock. The VotersRecord of a voter change was
    stamped with the monotonic clock alone, so a dynamic cluster's voter changes carried
    timestamps near zero."""
    offset_ms = 1_700_000_000_000
    node = RaftNode(
        node_id=1,
        voters=voters(1),
        cluster_id=CLUSTER_ID,
        config=RaftConfig(),
        rng=random.Random(853),
        now_ms=0,
        directory_id=DIRS[1],
        kraft_version=KRAFT_VERSION_DYNAMIC,
    )
    node.wall_clock_offset_ms = offset_ms
    appended: list[LogBatch] = []
    now_ms = 0

    def turn() -> Ready:
        ready = node.poll(now_ms)
        appended.extend(ready.entries_to_append)
        node.advance(ready)
        return ready

    while node.high_watermark <= 0:  # elected alone, then its epoch committed
        now_ms = turn().next_poll_at_ms
    moved = (BrokerEndpoint("CONTROLLER", "moved", 9093),)
    node.step(
        Envelope(
            ADMIN_ID,
            1,
            1,
            UpdateRaftVoterRequest(CLUSTER_ID, node.epoch, 1, DIRS[1], moved, 0, 1),
        ),
        now_ms,
    )
    turn()
    assert node.voter_set.voter(1) == VoterNode(key(1), moved, 0, 1)
    assert [voter_changes_in(b)[1] is not None for b in appended] == [True, True]
    stamps = [decode_log_batch(b).timestamp_ms - offset_ms for b in appended]
    assert all(0 <= stamp <= now_ms for stamp in stamps), stamps
