"""Broker lifecycle in the controller state machine: register, duplicate registration,
heartbeats, fencing after the session timeout (ISRs shrink, leadership moves), unfencing once
caught up (ISRs do not grow back by themselves; a leaderless partition elects its last ISR
member), unclean.leader.election.enable, and what a failover does to sessions."""

from __future__ import annotations

import random

import pytest

from quorum.controller.configs import unclean_leader_election_enabled
from quorum.controller.requests import (
    AlterPartitionItem,
    AlterPartitionRequest,
    AlterPartitionTopic,
    BrokerHeartbeatRequest,
    CreatableReplicaAssignment,
    CreatableTopic,
    CreatePartitionsRequest,
    CreatePartitionsTopic,
    CreateTopicsRequest,
    DeleteTopic,
    DeleteTopicsRequest,
    RegisterBrokerRequest,
)
from quorum.controller.state_machine import ControllerConfig, ControllerStateMachine
from quorum.errors import ErrorCode
from quorum.ids import ZERO_UUID, Uuid
from quorum.metadata.image import NO_LEADER, MetadataImage, PartitionImage
from quorum.metadata.records import (
    FenceBrokerRecord,
    PartitionChangeRecord,
    RegisterBrokerRecord,
    UnfenceBrokerRecord,
)
from tests.unit.controller.test_controller_topics import Harness

SESSION_MS = 9_000


def register(h: Harness, broker_id: int, incarnation: Uuid, **kw: object) -> object:
    return h.sm.register_broker(
        RegisterBrokerRequest(broker_id, incarnation, **kw),  # type: ignore[arg-type]
        next_offset=h.next_offset,
        now_ms=h.now_ms,
    )


def partition(h: Harness, name: str, index: int) -> PartitionImage:
    topic = h.sm.committed_image.topic_by_name(name)
    assert topic is not None
    return topic.partitions[index]


def fence(h: Harness) -> tuple[int, ...]:
    return h.propose(h.sm.fence_stale_brokers(now_ms=h.now_ms, next_offset=h.next_offset))


def keep_alive(h: Harness, *broker_ids: int) -> None:
    for broker_id in broker_ids:
        h.heartbeat(broker_id)


# ----- registration -----------------------------------------------------------------------------


def test_registration_epoch_is_the_record_offset_and_starts_fenced() -> None:
    h = Harness(racks=())
    offset = h.next_offset
    incarnation = Uuid.random(h.rng)
    result = h.sm.register_broker(
        RegisterBrokerRequest(0, incarnation, rack="r1"), next_offset=offset, now_ms=h.now_ms
    )
    (record,) = result.records
    assert isinstance(record, RegisterBrokerRecord)
    assert record.broker_epoch == offset == result.response.broker_epoch
    assert record.fenced and record.rack == "r1" and record.incarnation_id == incarnation
    h.propose(result)
    broker = h.sm.committed_image.brokers[0]
    assert broker.fenced and broker.broker_epoch == offset
    h.check_replay()


@pytest.mark.parametrize(
    ("broker_id", "incarnation", "rack", "text"),
    [
        (-1, Uuid.random(random.Random(1)), None, "broker id must be an int"),
        (2**31, Uuid.random(random.Random(1)), None, "broker id must be an int"),
        (0, ZERO_UUID, None, "incarnation id must not be the zero id"),
        (0, Uuid.random(random.Random(1)), "", "rack must be a non-empty name"),
    ],
)
def test_invalid_registrations(
    broker_id: int, incarnation: Uuid, rack: str | None, text: str
) -> None:
    h = Harness(racks=())
    response = h.expect_refused(
        lambda: h.sm.register_broker(
            RegisterBrokerRequest(broker_id, incarnation, rack=rack),
            next_offset=h.next_offset,
            now_ms=h.now_ms,
        )
    )
    assert response.error_code == ErrorCode.INVALID_REQUEST
    assert text in (response.error_message or "")


def test_another_incarnation_while_the_session_lives_is_a_duplicate() -> None:
    h = Harness(racks=(None,))
    old_epoch = h.sm.committed_image.brokers[0].broker_epoch
    h.now_ms += SESSION_MS  # exactly the timeout: the session still lives
    response = h.expect_refused(
        lambda: h.sm.register_broker(
            RegisterBrokerRequest(0, Uuid.random(h.rng)), next_offset=h.next_offset, now_ms=h.now_ms
        )
    )
    assert response.error_code == ErrorCode.DUPLICATE_BROKER_REGISTRATION
    assert "already registered" in (response.error_message or "")
    assert "broker.session.timeout.ms = 9000" in (response.error_message or "")
    # One millisecond later the session has expired: the new incarnation replaces the old.
    h.now_ms += 1
    new_epoch = h.add_broker(0, unfence=False)
    assert new_epoch > old_epoch
    assert h.sm.committed_image.brokers[0].fenced
    stale = h.sm.broker_heartbeat(
        BrokerHeartbeatRequest(0, old_epoch, h.next_offset),
        next_offset=h.next_offset,
        now_ms=h.now_ms,
    )
    assert stale.response.error_code == ErrorCode.STALE_BROKER_EPOCH
    assert f"Expected broker epoch {new_epoch}" in (stale.response.error_message or "")


def test_the_same_incarnation_re_registers_with_a_new_epoch() -> None:
    h = Harness(racks=(None, None))
    h.create(CreatableTopic("t", 2, 2))
    broker = h.sm.committed_image.brokers[0]
    assert not broker.fenced
    result = h.sm.register_broker(
        RegisterBrokerRequest(0, broker.incarnation_id), next_offset=h.next_offset, now_ms=h.now_ms
    )
    assert result.response.error_code == ErrorCode.NONE
    # It was unfenced: it leaves ISRs and leadership first, then re-registers fenced.
    assert isinstance(result.records[-1], RegisterBrokerRecord)
    assert all(isinstance(r, PartitionChangeRecord) for r in result.records[:-1])
    assert len(result.records) == 3
    assert result.response.broker_epoch == h.next_offset + 2
    assert not result.is_atomic
    h.propose(result)
    for index in (0, 1):
        state = partition(h, "t", index)
        assert state.leader == 1 and state.isr == (1,)
    h.check_replay()


# ----- heartbeats -------------------------------------------------------------------------------


def test_heartbeat_errors() -> None:
    h = Harness(racks=(None,))
    epoch = h.sm.committed_image.brokers[0].broker_epoch
    unknown = h.expect_refused(
        lambda: h.sm.broker_heartbeat(
            BrokerHeartbeatRequest(5, 0, 0), next_offset=h.next_offset, now_ms=h.now_ms
        )
    )
    assert unknown.error_code == ErrorCode.STALE_BROKER_EPOCH
    assert "No broker registration found for broker 5" in (unknown.error_message or "")
    wrong = h.expect_refused(
        lambda: h.sm.broker_heartbeat(
            BrokerHeartbeatRequest(0, epoch + 1, 0), next_offset=h.next_offset, now_ms=h.now_ms
        )
    )
    assert wrong.error_code == ErrorCode.STALE_BROKER_EPOCH


def test_unfenced_only_once_caught_up_with_its_own_registration() -> None:
    h = Harness(racks=())
    epoch = h.add_broker(0, unfence=False)
    behind = h.sm.broker_heartbeat(
        BrokerHeartbeatRequest(0, epoch, epoch - 1), next_offset=h.next_offset, now_ms=h.now_ms
    )
    assert behind.records == ()
    assert (behind.response.is_caught_up, behind.response.is_fenced) == (False, True)
    caught_up = h.sm.broker_heartbeat(
        BrokerHeartbeatRequest(0, epoch, epoch), next_offset=h.next_offset, now_ms=h.now_ms
    )
    assert caught_up.records == (UnfenceBrokerRecord(0, epoch),)
    assert (caught_up.response.is_caught_up, caught_up.response.is_fenced) == (True, False)
    h.propose(caught_up, hold=True)
    # While the unfencing is pending, heartbeats do not propose it again.
    again = h.sm.broker_heartbeat(
        BrokerHeartbeatRequest(0, epoch, epoch), next_offset=h.next_offset, now_ms=h.now_ms
    )
    assert again.records == () and not again.response.is_fenced
    h.commit_held()
    assert not h.sm.committed_image.brokers[0].fenced


# ----- fencing and unfencing --------------------------------------------------------------------


LAYOUT: dict[str, list[tuple[int, ...]]] = {"t": [(0, 1, 2), (1, 2, 0)], "u": [(2, 0)], "v": [(0,)]}
PARTS = [("t", 0), ("t", 1), ("u", 0), ("v", 0)]


def make_cluster() -> Harness:
    """Brokers 0, 1, 2; partitions t-0 (0,1,2), t-1 (1,2,0), u-0 (2,0), v-0 (0,)."""
    h = Harness(racks=(None, None, None))
    for name, layout in LAYOUT.items():
        assignments = tuple(CreatableReplicaAssignment(i, r) for i, r in enumerate(layout))
        result = h.create(CreatableTopic(name, assignments=assignments)).topics[0]
        assert result.error_code == ErrorCode.NONE
    return h


def parts(h: Harness) -> list[PartitionImage]:
    return [partition(h, name, index) for name, index in PARTS]


def test_a_silent_broker_is_fenced_and_leadership_moves() -> None:
    h = make_cluster()
    h.now_ms += SESSION_MS - 100
    keep_alive(h, 1, 2)
    h.now_ms += 100
    assert h.sm.fence_stale_brokers(now_ms=h.now_ms, next_offset=h.next_offset).records == ()
    assert h.sm.next_session_expiry_ms() == h.now_ms + 1  # broker 0's, heard from at the start
    h.now_ms += 1
    result = h.sm.fence_stale_brokers(now_ms=h.now_ms, next_offset=h.next_offset)
    assert result.response == (0,)
    assert isinstance(result.records[-1], FenceBrokerRecord)  # changes first, fence last
    assert not result.is_atomic
    before = dict(enumerate(parts(h)))
    h.propose(result)
    assert h.sm.committed_image.brokers[0].fenced
    p0, p1, p2, p3 = parts(h)
    # p0 was led by 0: the next in-sync unfenced replica (1) leads; 0 leaves the ISR.
    assert (p0.leader, p0.isr) == (1, (1, 2))
    assert p0.leader_epoch == before[0].leader_epoch + 1
    assert p0.partition_epoch == before[0].partition_epoch + 1
    # p1 was led by 1: only the ISR shrinks; the leader epoch stays.
    assert (p1.leader, p1.isr, p1.leader_epoch) == (1, (1, 2), before[1].leader_epoch)
    assert p1.partition_epoch == before[1].partition_epoch + 1
    assert (p2.leader, p2.isr) == (2, (2,))
    # p3's only replica is 0: no leader; the last ISR member stays in the ISR.
    assert (p3.leader, p3.isr) == (NO_LEADER, (0,))
    h.check_replay()


def test_controlled_shutdown_fences_at_once_and_a_new_incarnation_registers_at_once() -> None:
    """Kafka's controlled shutdown: a heartbeat with want_shut_down takes the broker out of
    ISRs and leadership (as fencing does), ends its session and says should_shut_down; the
    restarted broker (a new incarnation) then registers without waiting out the session."""
    h = make_cluster()
    epoch = h.sm.committed_image.brokers[0].broker_epoch
    result = h.sm.broker_heartbeat(
        BrokerHeartbeatRequest(0, epoch, h.next_offset, want_shut_down=True),
        next_offset=h.next_offset,
        now_ms=h.now_ms,
    )
    assert result.response.should_shut_down and result.response.is_fenced
    assert isinstance(result.records[-1], FenceBrokerRecord)
    h.propose(result)
    assert h.sm.committed_image.brokers[0].fenced
    p0, _, _, _ = parts(h)
    assert p0.leader == 1 and 0 not in p0.isr
    h.now_ms += 1  # well within the session timeout
    new_epoch = h.add_broker(0, unfence=False)
    assert new_epoch > epoch
    # Asking again once fenced changes nothing and still says should_shut_down.
    again = h.sm.broker_heartbeat(
        BrokerHeartbeatRequest(0, new_epoch, h.next_offset, want_shut_down=True),
        next_offset=h.next_offset,
        now_ms=h.now_ms,
    )
    assert again.records == () and again.response.should_shut_down
    h.check_replay()


def test_fencing_is_not_proposed_twice_while_pending() -> None:
    h = make_cluster()
    h.now_ms += SESSION_MS + 1
    first = h.sm.fence_stale_brokers(now_ms=h.now_ms, next_offset=h.next_offset)
    assert first.response == (0, 1, 2)
    h.propose(first, hold=True)
    assert h.sm.fence_stale_brokers(now_ms=h.now_ms, next_offset=h.next_offset).records == ()
    h.commit_held()
    image = h.sm.committed_image
    assert image.unfenced_broker_ids() == ()
    for state in parts(h):
        assert state.leader == NO_LEADER and len(state.isr) == 1
    h.check_replay()


def test_an_unfenced_broker_does_not_rejoin_isrs_but_leads_where_it_kept_the_data() -> None:
    """With data replication, a returning broker's log may be behind: the partition leader adds
    it back with AlterPartition once it has caught up. Only where fencing kept it as the last
    ISR member (it holds the committed data) and nobody leads does it become leader."""
    h = make_cluster()
    h.now_ms += SESSION_MS + 1
    keep_alive(h, 1, 2)
    assert fence(h) == (0,)
    fenced = parts(h)
    h.now_ms += 10
    response = h.heartbeat(0)
    assert response.is_caught_up and not response.is_fenced
    assert not h.sm.committed_image.brokers[0].fenced
    p0, p1, p2, p3 = parts(h)
    assert (p0, p1, p2) == tuple(fenced[:3])  # no ISR grows back, no leader moves
    assert p0.isr == (1, 2) and p0.leader == 1
    assert p3.isr == (0,) and p3.leader == 0  # the leaderless partition it kept elects it
    assert p3.leader_epoch == fenced[3].leader_epoch + 1
    assert p3.partition_epoch == fenced[3].partition_epoch + 1
    h.check_replay()


def test_a_leaderless_partition_waits_for_its_last_isr_member() -> None:
    h = make_cluster()
    h.now_ms += SESSION_MS + 1
    keep_alive(h, 0)
    assert fence(h) == (1, 2)
    h.now_ms += SESSION_MS + 1
    assert fence(h) == (0,)
    assert (partition(h, "t", 1).leader, partition(h, "t", 1).isr) == (NO_LEADER, (0,))
    before = partition(h, "t", 1)
    h.heartbeat(2)
    # 2 is a replica but not in the ISR: it may lack committed data, so it does not lead.
    assert partition(h, "t", 1) == before
    h.heartbeat(0)
    state = partition(h, "t", 1)
    assert (state.leader, state.isr) == (0, (0,))
    h.check_replay()


# ----- unclean.leader.election.enable -----------------------------------------------------------

UNCLEAN = (("unclean.leader.election.enable", "true"),)
CLEAN = (("unclean.leader.election.enable", "false"),)


def unclean_cluster(
    configs: tuple[tuple[str, str], ...], *, default: bool = False
) -> tuple[Harness, Uuid]:
    """Brokers 0, 1, 2; topic w on (0, 1, 2) led by 0, its ISR shrunk to (0,) (the leader
    removed the followers with AlterPartition)."""
    h = Harness(
        racks=(None, None, None), config=ControllerConfig(unclean_leader_election_enable=default)
    )
    created = h.create(
        CreatableTopic(
            "w", assignments=(CreatableReplicaAssignment(0, (0, 1, 2)),), configs=configs
        )
    ).topics[0]
    assert created.error_code == ErrorCode.NONE, created.error_message
    state = partition(h, "w", 0)
    item = AlterPartitionItem(0, state.leader_epoch, (0,), state.partition_epoch)
    answer = h.propose(
        h.sm.alter_partition(
            AlterPartitionRequest(
                0,
                h.sm.latest_image.brokers[0].broker_epoch,
                (AlterPartitionTopic(created.topic_id, (item,)),),
            ),
            next_offset=h.next_offset,
        )
    )
    assert answer.topics[0].partitions[0].isr == (0,)
    return h, created.topic_id


@pytest.mark.parametrize(
    ("configs", "default", "unclean"),
    [
        ((), False, False),
        (UNCLEAN, False, True),
        ((), True, True),  # the controller's default decides for a topic that does not set it
        (CLEAN, True, False),  # the topic's config wins
    ],
)
def test_fencing_the_last_isr_member_elects_another_replica_only_when_unclean(
    configs: tuple[tuple[str, str], ...], default: bool, unclean: bool
) -> None:
    h, _ = unclean_cluster(configs, default=default)
    before = partition(h, "w", 0)
    h.now_ms += SESSION_MS + 1
    keep_alive(h, 1, 2)
    assert fence(h) == (0,)
    state = partition(h, "w", 0)
    if unclean:
        # The first available replica in replica order, alone in the ISR.
        assert (state.leader, state.isr) == (1, (1,))
    else:
        assert (state.leader, state.isr) == (NO_LEADER, (0,))
    assert state.leader_epoch == before.leader_epoch + 1
    h.check_replay()


def test_an_unclean_election_skips_fenced_replicas_and_finds_none_when_all_are() -> None:
    h, _ = unclean_cluster(UNCLEAN)
    h.now_ms += SESSION_MS + 1
    keep_alive(h, 0, 2)
    assert fence(h) == (1,)
    h.now_ms += SESSION_MS + 1
    keep_alive(h, 2)
    assert fence(h) == (0,)
    state = partition(h, "w", 0)
    assert (state.leader, state.isr) == (2, (2,))  # 1 is fenced: skipped
    h.now_ms += SESSION_MS + 1
    assert fence(h) == (2,)
    state = partition(h, "w", 0)
    assert (state.leader, state.isr) == (NO_LEADER, (2,))  # nobody left: no leader
    h.check_replay()


def test_unfencing_elects_a_returning_replica_of_a_leaderless_partition_when_unclean() -> None:
    h, _ = unclean_cluster(UNCLEAN)
    h.now_ms += SESSION_MS + 1
    assert set(fence(h)) == {0, 1, 2}
    assert (partition(h, "w", 0).leader, partition(h, "w", 0).isr) == (NO_LEADER, (0,))
    h.heartbeat(2)
    state = partition(h, "w", 0)
    # 2 was not in the ISR: unclean, it leads alone (the fenced 0 leaves the ISR).
    assert (state.leader, state.isr) == (2, (2,))
    h.heartbeat(0)
    assert (partition(h, "w", 0).leader, partition(h, "w", 0).isr) == (2, (2,))
    h.check_replay()


# ----- sessions across failover -----------------------------------------------------------------


def test_a_new_controller_gives_every_unfenced_broker_a_fresh_session() -> None:
    h = make_cluster()
    h.now_ms += 10 * SESSION_MS
    h.lose_leadership()  # sessions are volatile: gone with the leadership
    assert h.sm.fence_stale_brokers(now_ms=h.now_ms, next_offset=h.next_offset).records == ()
    # A restarted broker with a new incarnation must wait out the fresh session...
    refused = h.expect_refused(
        lambda: h.sm.register_broker(
            RegisterBrokerRequest(1, Uuid.random(h.rng)), next_offset=h.next_offset, now_ms=h.now_ms
        )
    )
    assert refused.error_code == ErrorCode.DUPLICATE_BROKER_REGISTRATION
    h.now_ms += SESSION_MS + 1
    assert set(fence(h)) == {0, 1, 2}
    h.add_broker(1)
    assert not h.sm.committed_image.brokers[1].fenced
    h.check_replay()


def test_a_fenced_broker_unheard_by_this_controller_does_not_block_a_new_incarnation() -> None:
    h = Harness(racks=(None,))
    h.add_broker(1, unfence=False)
    fresh = ControllerStateMachine(h.sm.committed_image)  # a newly elected controller
    result = fresh.register_broker(
        RegisterBrokerRequest(1, Uuid.random(h.rng)), next_offset=h.next_offset, now_ms=h.now_ms
    )
    assert result.response.error_code == ErrorCode.NONE
    # ... while an unfenced one, unheard, gets a fresh session and blocks.
    blocked = fresh.register_broker(
        RegisterBrokerRequest(0, Uuid.random(h.rng)), next_offset=h.next_offset, now_ms=h.now_ms
    )
    assert blocked.response.error_code == ErrorCode.DUPLICATE_BROKER_REGISTRATION


def test_the_active_controller_fences_one_broker_per_operation_longest_silent_first() -> None:
    h = make_cluster()
    h.now_ms += 100
    keep_alive(h, 0)  # 0 was heard from last; 1 and 2 only at the start
    h.now_ms += 50
    keep_alive(h, 1)
    h.now_ms += SESSION_MS + 1
    assert h.propose(
        h.sm.fence_stale_brokers(now_ms=h.now_ms, next_offset=h.next_offset, max_brokers=1)
    ) == (2,)
    assert h.propose(
        h.sm.fence_stale_brokers(now_ms=h.now_ms, next_offset=h.next_offset, max_brokers=1)
    ) == (0,)
    assert h.propose(
        h.sm.fence_stale_brokers(now_ms=h.now_ms, next_offset=h.next_offset, max_brokers=1)
    ) == (1,)
    assert h.sm.fence_stale_brokers(now_ms=h.now_ms, next_offset=h.next_offset).records == ()
    assert h.sm.committed_image.unfenced_broker_ids() == ()
    h.check_replay()


def test_forgetting_sessions_at_a_new_term_fences_nobody_heard_by_another_leader() -> None:
    """A controller that led, lost leadership without proposing, and leads again must not
    judge brokers by heartbeats from its first term (they heartbeated the other leader)."""
    h = make_cluster()
    keep_alive(h, 0, 1, 2)
    h.now_ms += 2 * SESSION_MS  # another controller led meanwhile
    h.sm.forget_broker_sessions()
    assert h.sm.fence_stale_brokers(now_ms=h.now_ms, next_offset=h.next_offset).records == ()
    h.now_ms += SESSION_MS + 1  # a fresh session still expires
    assert fence(h) == (0, 1, 2)


def _index_by_scan(image: MetadataImage) -> dict[int, dict[Uuid, frozenset[int]]]:
    found: dict[int, dict[Uuid, set[int]]] = {}
    for topic in image.topics_by_id.values():
        for state in topic.partitions.values():
            for broker_id in state.replicas:
                found.setdefault(broker_id, {}).setdefault(topic.topic_id, set()).add(
                    state.partition
                )
    return {b: {t: frozenset(p) for t, p in topics.items()} for b, topics in found.items()}


@pytest.mark.parametrize("seed", range(10))
def test_the_broker_index_follows_the_latest_image(seed: int) -> None:
    """The active controller's ``BrokerPartitionIndex`` (what fencing and unfencing visit)
    equals a scan of every partition of its latest image after any mix of creates, deletes,
    partition growth, fences, unfences, proposals held pending and lost leaderships."""
    rng = random.Random(seed)
    h = make_cluster()
    names = [f"i{i}" for i in range(5)]
    for step in range(80):
        image = h.sm.latest_image
        live = [n for n in names if image.topic_by_name(n) is not None]
        hold = rng.random() < 0.3
        choice = rng.random()
        if choice < 0.4:
            topic = CreatableTopic(rng.choice(names), rng.randint(1, 4), rng.randint(1, 3))
            h.propose(
                h.sm.create_topics(
                    CreateTopicsRequest((topic,)), next_offset=h.next_offset, new_topic_id=h.new_id
                ),
                hold=hold,
            )
        elif choice < 0.55 and live:
            delete = DeleteTopicsRequest((DeleteTopic(rng.choice(live), ZERO_UUID),))
            h.propose(h.sm.delete_topics(delete, next_offset=h.next_offset), hold=hold)
        elif choice < 0.7 and live:
            name = rng.choice(live)
            count = len(image.topic_by_name(name).partitions) + rng.randint(1, 2)  # type: ignore[union-attr]
            grow = CreatePartitionsRequest((CreatePartitionsTopic(name, count),))
            h.propose(h.sm.create_partitions(grow, next_offset=h.next_offset), hold=hold)
        elif choice < 0.8:
            h.now_ms += SESSION_MS + 1  # every session expires but two
            keep_alive(h, *rng.sample([0, 1, 2], 2))
            fence(h)
        elif choice < 0.9:
            for broker_id in (0, 1, 2):
                if h.sm.latest_image.brokers[broker_id].fenced:
                    h.heartbeat(broker_id)
        elif h.held:
            h.lose_leadership()
        if not hold and rng.random() < 0.5:
            h.commit_held()
        assert h.sm._index.as_dict() == _index_by_scan(h.sm.latest_image), (
            f"seed {seed}, step {step}"
        )


def test_the_unclean_topic_config_is_validated_and_normalised() -> None:
    h = Harness(racks=(None,))
    created = h.create_one("x", configs=(("unclean.leader.election.enable", "TRUE"),))
    assert created.error_code == ErrorCode.NONE, created.error_message
    topic = h.sm.committed_image.topic_by_name("x")
    assert topic is not None
    assert topic.configs["unclean.leader.election.enable"] == "true"
    refused = h.create_one("y", configs=(("unclean.leader.election.enable", "yes"),))
    assert refused.error_code == ErrorCode.INVALID_CONFIG
    assert "must be true or false" in (refused.error_message or "")


@pytest.mark.parametrize(
    ("topic", "cluster", "default", "expected"),
    [
        ({}, {}, False, False),
        ({}, {}, True, True),
        ({}, {"unclean.leader.election.enable": "true"}, False, True),
        (
            {"unclean.leader.election.enable": "false"},
            {"unclean.leader.election.enable": "true"},
            True,
            False,
        ),
    ],
)
def test_unclean_precedence_topic_then_cluster_then_controller(
    topic: dict[str, str], cluster: dict[str, str], default: bool, expected: bool
) -> None:
    assert unclean_leader_election_enabled(topic, cluster, default) is expected
