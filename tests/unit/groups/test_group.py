"""The classic group state machine without I/O (broker/groups/group.py): each rule of
docs/groups.md#the-state-machine driven with a hand-moved clock, and a seeded random schedule
of joins, leaves, heartbeats and expiries checked against the invariants after each step."""

from __future__ import annotations

import itertools
import os
import random
from typing import Any

import pytest
from kio.schema.errors import ErrorCode as E

from broker.groups.group import (
    Completion,
    Group,
    GroupSettings,
    GroupState,
    JoinRequest,
    Persist,
)

SETTINGS = GroupSettings(
    min_session_timeout_ms=100,
    max_session_timeout_ms=10_000,
    initial_rebalance_delay_ms=0,
    max_size=5,
    new_member_join_timeout_ms=3_000,
)


def new_group(settings: GroupSettings = SETTINGS) -> Group:
    counter = itertools.count()
    return Group("g", settings, lambda client: f"{client}-{next(counter)}")


def request(member_id: str = "", *, instance: str | None = None, **kw: Any) -> JoinRequest:
    values: dict[str, Any] = {
        "member_id": member_id,
        "group_instance_id": instance,
        "client_id": "c",
        "client_host": "/127.0.0.1",
        "session_timeout_ms": 1_000,
        "rebalance_timeout_ms": 2_000,
        "protocol_type": "consumer",
        "protocols": (("range", b"r"), ("roundrobin", b"rr")),
        "require_known_member_id": True,
    }
    values.update(kw)
    return JoinRequest(**values)


def completions(group: Group) -> dict[Any, dict[str, Any]]:
    done = {c.waiter: c.values for c in group.outbox if isinstance(c, Completion)}
    group.outbox[:] = [c for c in group.outbox if not isinstance(c, Completion)]
    return done


def persists(group: Group) -> list[Persist]:
    found = [p for p in group.outbox if isinstance(p, Persist)]
    group.outbox[:] = [p for p in group.outbox if not isinstance(p, Persist)]
    return found


def join_new(group: Group, waiter: str, now: int = 0, **kw: Any) -> str:
    """A new member's two joins (KIP-394): its member id."""
    first = group.join(request(**kw), None, now)
    assert first is not None
    assert first["error_code"] == E.member_id_required
    assert group.join(request(first["member_id"], **kw), waiter, now) is None
    return str(first["member_id"])


def stabilize(group: Group, members: dict[str, str], now: int = 0) -> None:
    """Every member's join answered; the leader syncs; the group is Stable."""
    answers = completions(group)
    leader = group.leader
    assert leader is not None
    for waiter in members:
        assert answers[waiter]["error_code"] == E.none
    assert (
        group.sync(
            member_id=leader,
            instance_id=None,
            generation=group.generation,
            protocol_type=None,
            protocol_name=None,
            assignments={m: m.encode() for m in members.values()},
            waiter="sync-leader",
        )
        is None
    )
    (persist,) = persists(group)
    assert persist.generation == group.generation
    group.persisted(group.generation, None, now)
    assert group.state is GroupState.STABLE
    completions(group)


def test_first_join_needs_a_member_id_then_completes_alone() -> None:
    group = new_group()
    member = join_new(group, "w")
    answer = completions(group)["w"]
    assert answer["generation_id"] == 1
    assert answer["leader"] == member
    assert answer["protocol_name"] == "range"
    assert [m["member_id"] for m in answer["members"]] == [member]
    assert group.state is GroupState.COMPLETING_REBALANCE


def test_session_timeout_bounds_and_protocol_checks() -> None:
    group = new_group()
    assert group.join(request(session_timeout_ms=50), None, 0)["error_code"] == (  # type: ignore[index]
        E.invalid_session_timeout
    )
    assert group.join(request(protocol_type=""), None, 0)["error_code"] == (  # type: ignore[index]
        E.inconsistent_group_protocol
    )
    join_new(group, "w")
    other = group.join(request(protocols=(("sticky", b""),)), None, 0)
    assert other is not None
    assert other["error_code"] == E.inconsistent_group_protocol
    assert group.join(request("nobody"), None, 0)["error_code"] == E.unknown_member_id  # type: ignore[index]


def test_initial_delay_waits_for_more_members() -> None:
    group = new_group(GroupSettings(min_session_timeout_ms=100, initial_rebalance_delay_ms=500))
    a = join_new(group, "a", now=0)
    b = join_new(group, "b", now=100)
    assert not completions(group)
    group.poll(499)
    assert not completions(group)
    group.poll(500)  # b joined during the delay: one more delay
    assert not completions(group)
    group.poll(1_000)
    answers = completions(group)
    assert set(answers) == {"a", "b"}
    assert {answers["a"]["generation_id"], answers["b"]["generation_id"]} == {1}
    assert group.members.keys() == {a, b}


def test_generation_checks_of_sync_heartbeat_and_commit() -> None:
    group = new_group()
    member = join_new(group, "w")
    stabilize(group, {"w": member})
    assert group.heartbeat(member, None, 1, 10) == E.none
    assert group.heartbeat(member, None, 0, 10) == E.illegal_generation
    assert group.heartbeat("x", None, 1, 10) == E.unknown_member_id
    assert group.commit_error(member, None, 1) is None
    assert group.commit_error(member, None, 2) == E.illegal_generation
    assert group.commit_error("", None, -1) == E.unknown_member_id  # not Empty
    sync = group.sync(
        member_id=member,
        instance_id=None,
        generation=1,
        protocol_type="consumer",
        protocol_name="other",
        assignments={},
        waiter="s",
    )
    assert sync is not None
    assert sync["error_code"] == E.inconsistent_group_protocol


def test_a_second_member_makes_a_rebalance_and_the_first_rejoins() -> None:
    group = new_group()
    first = join_new(group, "w1")
    stabilize(group, {"w1": first})
    second = join_new(group, "w2", now=10)
    assert group.state is GroupState.PREPARING_REBALANCE
    assert group.heartbeat(first, None, 1, 20) == E.rebalance_in_progress
    assert group.commit_error(first, None, 1) is None  # PreparingRebalance still commits
    assert group.join(request(first), "w1b", 30) is None
    answers = completions(group)
    assert answers["w1b"]["generation_id"] == answers["w2"]["generation_id"] == 2
    assert len(answers["w1b"]["members"]) == 2  # the first stays the leader
    assert answers["w2"]["members"] == []
    assert group.commit_error(second, None, 2) == E.rebalance_in_progress


def test_an_expired_member_is_removed_and_the_group_rebalances() -> None:
    group = new_group()
    a = join_new(group, "a")
    b = join_new(group, "b")
    assert group.join(request(a), "a2", 0) is None  # a rejoins the rebalance b started
    stabilize(group, {"a2": a, "b": b})
    assert group.generation == 2
    group.heartbeat(a, None, 2, 900)
    group.poll(1_000)  # b's session (1,000 ms) expired
    assert b not in group.members
    assert group.state is GroupState.PREPARING_REBALANCE
    group.poll(3_000)  # a never rejoined within the rebalance timeout: removed too
    assert group.state is GroupState.EMPTY
    assert group.generation == 3
    assert [p.value.members if p.value else None for p in persists(group)] == [()]


def test_a_leaving_member_answers_and_an_empty_group_is_persisted() -> None:
    group = new_group()
    a = join_new(group, "a")
    stabilize(group, {"a": a})
    assert group.leave(a, None, 5) == (E.none, a)
    assert group.state is GroupState.EMPTY
    assert group.leave(a, None, 5) == (E.unknown_member_id, a)
    assert group.commit_error("", None, -1) is None  # a simple commit to an Empty group


def test_static_member_rejoins_without_a_rebalance_and_fences_its_old_id() -> None:
    group = new_group()
    a = join_new(group, "a")
    first = group.join(request(instance="i-1"), "s", 0)
    assert first is None
    static = next(m for m in group.members if m != a)
    assert group.join(request(a), "a2", 0) is None
    answers = completions(group)
    assert answers["s"]["error_code"] == E.none
    group.outbox.clear()
    leader = group.leader
    assert leader is not None
    group.sync(
        member_id=leader,
        instance_id=None,
        generation=group.generation,
        protocol_type=None,
        protocol_name=None,
        assignments={a: b"A", static: b"S"},
        waiter="sl",
    )
    group.persisted(group.generation, None, 0)
    completions(group)
    persists(group)
    generation = group.generation
    if leader == static:
        pytest.skip("the static member leads in this schedule")
    again = group.join(request(instance="i-1"), "s2", 100)  # a restart: no member id
    assert again is not None
    assert again["generation_id"] == generation
    assert group.state is GroupState.STABLE
    assert group.heartbeat(static, "i-1", generation, 100) == E.fenced_instance_id
    assert group.heartbeat(again["member_id"], "i-1", generation, 100) == E.none
    assert group.members[again["member_id"]].assignment == b"S"


def test_group_max_size() -> None:
    group = new_group(
        GroupSettings(min_session_timeout_ms=100, initial_rebalance_delay_ms=0, max_size=1)
    )
    join_new(group, "a")
    refused = group.join(request(), None, 0)
    assert refused is not None
    assert refused["error_code"] == E.group_max_size_reached


def test_a_leader_that_never_syncs_is_removed() -> None:
    group = new_group()
    a = join_new(group, "a", session_timeout_ms=5_000)
    b = join_new(group, "b", session_timeout_ms=5_000)
    assert group.join(request(a, session_timeout_ms=5_000), "a2", 0) is None
    completions(group)
    follower = b if group.leader == a else a
    assert (
        group.sync(
            member_id=follower,
            instance_id=None,
            generation=2,
            protocol_type=None,
            protocol_name=None,
            assignments={},
            waiter="f",
        )
        is None
    )
    group.poll(2_000)  # the rebalance timeout passed without the leader's SyncGroup
    assert follower in group.members
    assert len(group.members) == 1
    assert completions(group)["f"]["error_code"] == E.rebalance_in_progress
    assert group.state is GroupState.PREPARING_REBALANCE


def test_random_schedules_keep_the_invariants() -> None:
    """Seeded: joins, rejoins, leaves, heartbeats, syncs and clock moves in random order; after
    each step the group's invariants hold. Replay with GROUPS_SEED=<seed>."""
    seed = int(os.environ.get("GROUPS_SEED", str(random.SystemRandom().randrange(2**32))))
    print(f"GROUPS_SEED={seed}")
    rng = random.Random(seed)
    for _ in range(50):
        group = new_group()
        now = 0
        waiters = itertools.count()
        for _ in range(200):
            now += rng.choice((0, 10, 100, 600))
            action = rng.random()
            members = list(group.members)
            if action < 0.25 or not members:
                first = group.join(request(), None, now)
                if first and first["error_code"] == E.member_id_required:
                    group.join(request(first["member_id"]), next(waiters), now)
            elif action < 0.45:
                group.join(request(rng.choice(members)), next(waiters), now)
            elif action < 0.55:
                group.leave(rng.choice(members), None, now)
            elif action < 0.75:
                group.heartbeat(rng.choice(members), None, group.generation, now)
            elif action < 0.9 and group.leader is not None:
                group.sync(
                    member_id=group.leader,
                    instance_id=None,
                    generation=group.generation,
                    protocol_type=None,
                    protocol_name=None,
                    assignments=dict.fromkeys(members, b"x"),
                    waiter=next(waiters),
                )
                for persist in persists(group):
                    group.persisted(persist.generation, None, now)
            group.poll(now)
            completions(group)
            persists(group)
            check(group, seed)


def check(group: Group, seed: int) -> None:
    where = f"GROUPS_SEED={seed}"
    assert (group.state is GroupState.EMPTY) == (not group.members) or (
        group.state is GroupState.PREPARING_REBALANCE
    ), where
    if group.members:
        assert group.leader in group.members, where
    for instance, member_id in group.static.items():
        assert group.members[member_id].group_instance_id == instance, where
    if group.state is GroupState.STABLE:
        assert all(m.join_waiter is None for m in group.members.values()), where
        assert group.protocol is not None, where
