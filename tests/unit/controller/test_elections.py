"""ElectLeaders (Kafka's ``ReplicationControlManager.electLeaders``): PREFERRED moves leadership
back to the first replica when it is in the ISR and unfenced; UNCLEAN elects a leader for a
leaderless partition from any unfenced replica; the codes for everything else; "all
partitions" leaves out what needs no election."""

from __future__ import annotations

from quorum.controller.elections import (
    ELECT_LEADERS_PARTITIONS_MAX,
    elect_leaders,
    preferred_imbalance,
)
from quorum.controller.requests import (
    AlterPartitionItem,
    AlterPartitionRequest,
    AlterPartitionTopic,
    CreatableReplicaAssignment,
    CreatableTopic,
    ElectionResult,
    ElectionType,
    ElectLeadersRequest,
    ElectLeadersResponse,
)
from quorum.errors import ErrorCode
from quorum.metadata.image import NO_LEADER, PartitionImage
from quorum.metadata.records import PartitionChangeRecord
from tests.unit.controller.test_controller_brokers import SESSION_MS, fence, keep_alive
from tests.unit.controller.test_controller_topics import Harness

PREFERRED, UNCLEAN = ElectionType.PREFERRED, ElectionType.UNCLEAN


def cluster() -> Harness:
    """Brokers 0, 1, 2; orders-0 on (0, 1, 2), orders-1 on (1, 2, 0)."""
    h = Harness(racks=(None, None, None))
    layout = ((0, 1, 2), (1, 2, 0))
    assignments = tuple(CreatableReplicaAssignment(i, r) for i, r in enumerate(layout))
    created = h.create(CreatableTopic("orders", assignments=assignments)).topics[0]
    assert created.error_code is ErrorCode.NONE, created.error_message
    return h


def state(h: Harness, partition: int) -> PartitionImage:
    topic = h.sm.latest_image.topic_by_name("orders")
    assert topic is not None
    return topic.partitions[partition]


def elect(
    h: Harness, kind: ElectionType, *partitions: tuple[str, int], every: bool = False
) -> ElectLeadersResponse:
    request = ElectLeadersRequest(kind, None if every else partitions)
    return h.propose(h.sm.elect_leaders(request, next_offset=h.next_offset))


def set_isr(h: Harness, partition: int, isr: tuple[int, ...]) -> None:
    current = state(h, partition)
    topic = h.sm.latest_image.topic_by_name("orders")
    assert topic is not None
    item = AlterPartitionItem(partition, current.leader_epoch, isr, current.partition_epoch)
    request = AlterPartitionRequest(
        current.leader,
        h.sm.latest_image.brokers[current.leader].broker_epoch,
        (AlterPartitionTopic(topic.topic_id, (item,)),),
    )
    answer = h.propose(h.sm.alter_partition(request, next_offset=h.next_offset))
    assert answer.topics[0].partitions[0].error_code is ErrorCode.NONE


def move_leadership_away_from_0(h: Harness) -> None:
    """Broker 0 is fenced (orders-0's leadership moves to 1), then returns: it is not in the
    ISR, so the leader adds it back; it still does not lead."""
    h.now_ms += SESSION_MS + 1
    keep_alive(h, 1, 2)
    assert fence(h) == (0,)
    h.heartbeat(0)
    assert state(h, 0).leader == 1
    set_isr(h, 0, (0, 1, 2))
    set_isr(h, 1, (1, 2, 0))


def test_preferred_election_moves_leadership_back_to_the_first_replica() -> None:
    h = cluster()
    move_leadership_away_from_0(h)
    before = state(h, 0)
    assert preferred_imbalance(h.sm.latest_image) == (("orders", 0),)
    result = h.sm.elect_leaders(
        ElectLeadersRequest(PREFERRED, (("orders", 0),)), next_offset=h.next_offset
    )
    assert not result.is_atomic
    topic = h.sm.latest_image.topic_by_name("orders")
    assert topic is not None
    assert result.records == (
        PartitionChangeRecord(
            topic.topic_id,
            0,
            leader=0,
            leader_epoch=before.leader_epoch + 1,
            partition_epoch=before.partition_epoch + 1,
        ),
    )
    response = h.propose(result)
    assert response.results == (ElectionResult("orders", 0, ErrorCode.NONE, None, 0),)
    after = state(h, 0)
    assert after == before._replace(
        leader=0,
        leader_epoch=before.leader_epoch + 1,
        partition_epoch=before.partition_epoch + 1,
    )
    assert preferred_imbalance(h.sm.latest_image) == ()
    h.check_replay()


def test_preferred_election_codes() -> None:
    h = cluster()
    h.now_ms += SESSION_MS + 1
    keep_alive(h, 1, 2)
    assert fence(h) == (0,)
    response = elect(h, PREFERRED, ("orders", 1), ("orders", 0), ("nope", 0), ("orders", 9))
    already, fenced, no_topic, no_partition = response.results
    assert (already.error_code, already.leader) == (ErrorCode.ELECTION_NOT_NEEDED, 1)
    assert "already leads orders-1" in (already.error_message or "")
    assert fenced.error_code is ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE
    assert "is not in the ISR" in (fenced.error_message or "")
    assert fenced.leader == 1
    assert no_topic.error_code is ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    assert "no topic is named 'nope'" in (no_topic.error_message or "")
    assert no_partition.error_code is ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    assert "partitions 0 to 1" in (no_partition.error_message or "")
    # Unfenced but not yet back in the ISR: still not available.
    h.heartbeat(0)
    (again,) = elect(h, PREFERRED, ("orders", 0)).results
    assert again.error_code is ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE
    h.check_replay()


def test_a_fenced_preferred_replica_in_the_isr_is_not_available() -> None:
    """A fenced broker stays in an ISR only as its last member, with no leader: the preferred
    replica then is in the ISR but fenced."""
    h = cluster()
    set_isr(h, 0, (0,))
    h.now_ms += SESSION_MS + 1
    assert set(fence(h)) == {0, 1, 2}
    (result,) = elect(h, PREFERRED, ("orders", 0)).results
    assert result.error_code is ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE
    assert "is fenced" in (result.error_message or "")


def test_unclean_election_elects_an_unfenced_replica_of_a_leaderless_partition() -> None:
    h = cluster()
    set_isr(h, 0, (0,))  # only 0 is in sync
    h.now_ms += SESSION_MS + 1
    keep_alive(h, 1, 2)
    assert fence(h) == (0,)
    before = state(h, 0)
    assert (before.leader, before.isr) == (NO_LEADER, (0,))
    response = elect(h, UNCLEAN, ("orders", 0), ("orders", 1))
    elected, led = response.results
    assert (elected.error_code, elected.leader) == (ErrorCode.NONE, 1)
    assert (led.error_code, led.leader) == (ErrorCode.ELECTION_NOT_NEEDED, 1)
    assert "only for a partition without one" in (led.error_message or "")
    after = state(h, 0)
    assert (after.leader, after.isr) == (1, (1,))
    assert after.leader_epoch == before.leader_epoch + 1
    h.check_replay()


def test_unclean_election_without_any_available_replica() -> None:
    h = cluster()
    h.now_ms += SESSION_MS + 1
    assert set(fence(h)) == {0, 1, 2}
    (result,) = elect(h, UNCLEAN, ("orders", 0)).results
    assert result.error_code is ErrorCode.ELIGIBLE_LEADERS_NOT_AVAILABLE
    assert "start one of its brokers" in (result.error_message or "")
    assert result.leader == NO_LEADER


def test_all_partitions_leaves_out_what_needs_no_election() -> None:
    h = cluster()
    assert elect(h, PREFERRED, every=True).results == ()
    assert elect(h, UNCLEAN, every=True).results == ()
    move_leadership_away_from_0(h)
    assert elect(h, PREFERRED, every=True).results == (
        ElectionResult("orders", 0, ErrorCode.NONE, None, 0),
    )
    assert elect(h, PREFERRED, every=True).results == ()
    h.check_replay()


def test_a_partition_named_twice_is_elected_once() -> None:
    h = cluster()
    move_leadership_away_from_0(h)
    result = h.sm.elect_leaders(
        ElectLeadersRequest(PREFERRED, (("orders", 0), ("orders", 0))), next_offset=h.next_offset
    )
    assert len(result.records) == 1
    assert len(result.response.results) == 1


def test_too_many_partitions_is_a_request_level_error() -> None:
    h = cluster()
    request = ElectLeadersRequest(PREFERRED, (("orders", 0),) * (ELECT_LEADERS_PARTITIONS_MAX + 1))
    result = elect_leaders(h.sm.latest_image, request)
    assert result.records == ()
    assert result.response.error_code is ErrorCode.INVALID_REQUEST
    assert "split it" in (result.response.error_message or "")


def test_rebalance_elects_in_sync_preferred_replicas_that_do_not_lead() -> None:
    """auto.leader.rebalance.enable: only partitions whose preferred replica is in the ISR and
    unfenced; at most ``partitions_max`` per run."""
    h = cluster()
    h.now_ms += SESSION_MS + 1
    keep_alive(h, 2)
    assert fence(h) == (0, 1)
    h.heartbeat(0)
    h.heartbeat(1)
    # Both partitions are led by 2 now; 0 and 1 are back but out of the ISRs: nothing to do.
    assert (state(h, 0).leader, state(h, 1).leader) == (2, 2)
    assert h.sm.rebalance_leaders(next_offset=h.next_offset).records == ()
    set_isr(h, 0, (0, 1, 2))
    set_isr(h, 1, (1, 2, 0))
    first = h.sm.rebalance_leaders(next_offset=h.next_offset, partitions_max=1)
    assert not first.is_atomic
    assert h.propose(first) == (("orders", 0),)
    assert (state(h, 0).leader, state(h, 1).leader) == (0, 2)
    assert h.propose(h.sm.rebalance_leaders(next_offset=h.next_offset)) == (("orders", 1),)
    assert state(h, 1).leader == 1
    assert h.sm.rebalance_leaders(next_offset=h.next_offset).records == ()
    h.check_replay()
