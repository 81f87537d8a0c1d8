"""The classic group protocol through the real listener (decode, handle, encode) over a real
``__consumer_offsets`` partition log on disk (docs/groups.md): FindCoordinator, JoinGroup,
SyncGroup, Heartbeat, LeaveGroup, OffsetCommit, OffsetFetch, ListGroups, DescribeGroups,
DeleteGroups, OffsetDelete, and a coordinator that loads what another one wrote."""

from __future__ import annotations

import asyncio
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from broker.groups.group import GroupSettings
from broker.groups.records import GroupMetadataKey, OffsetCommitKey, decode_key, iter_records
from broker.kafka.groups import CoordinatorSettings
from quorum.ids import Uuid
from quorum.metadata.records import AccessControlEntryRecord
from quorum.security.authorization import RequestAuthorization
from tests.unit.kafka.test_kafka_data import DataHarness, image

FIND, JOIN, HEARTBEAT, LEAVE, SYNC = 10, 11, 12, 13, 14
DESCRIBE, LIST, DELETE, COMMIT, FETCH, OFFSET_DELETE = 15, 16, 42, 8, 9, 47
SETTINGS = CoordinatorSettings(
    groups=GroupSettings(initial_rebalance_delay_ms=0, min_session_timeout_ms=100)
)


def groups_harness(root: Path, **kw: Any) -> DataHarness:
    harness = DataHarness(root, **kw)
    harness.apis.groups.settings = SETTINGS
    return harness


@pytest.fixture
def harness(tmp_path: Path) -> Iterator[DataHarness]:
    harness = groups_harness(tmp_path)
    yield harness
    harness.loop.run_until_complete(harness.apis.groups.close())
    harness.close()


def join_values(member_id: str = "", instance: str | None = None, **kw: Any) -> dict[str, Any]:
    return {
        "group_id": "g",
        "session_timeout": 10_000,
        "rebalance_timeout": 5_000,
        "member_id": member_id,
        "group_instance_id": instance,
        "protocol_type": "consumer",
        "protocols": [{"name": "range", "metadata": b"sub"}],
        **kw,
    }


def ask_until_loaded(
    harness: DataHarness, api_key: int, version: int, values: Any, **kw: Any
) -> Any:
    """Ask until the coordinator has loaded its partition (a deadline, no sleep as sync)."""

    async def run() -> Any:
        for _ in range(500):
            answer = await harness.answer(api_key, version, values, **kw)
            code = getattr(answer, "error_code", 0)
            if int(code) != 14:  # COORDINATOR_LOAD_IN_PROGRESS
                return answer
            await asyncio.sleep(0.01)  # the load runs in the reader thread meanwhile
        raise AssertionError("the coordinator never loaded its partition")

    return harness.loop.run_until_complete(run())


def join_one(harness: DataHarness, version: int = 9) -> Any:
    first = ask_until_loaded(harness, JOIN, version, join_values())
    assert int(first.error_code) == 79  # MEMBER_ID_REQUIRED (v4+)
    return harness.ask(JOIN, version, join_values(first.member_id))


def test_find_coordinator_names_the_partitions_leader(harness: DataHarness) -> None:
    old = harness.ask(FIND, 3, {"key": "g", "key_type": 0})
    assert (int(old.error_code), old.node_id, old.port) == (0, 1, 9001)
    new = harness.ask(FIND, 6, {"key_type": 0, "coordinator_keys": ["g", "h"]})
    assert [(c.key, c.node_id, int(c.error_code)) for c in new.coordinators] == [
        ("g", 1, 0),
        ("h", 1, 0),
    ]
    # A transactional id: the broker asked, which owns no transaction (no transactions here).
    transaction = harness.ask(FIND, 4, {"key_type": 1, "coordinator_keys": ["t"]})
    assert [(c.node_id, int(c.error_code)) for c in transaction.coordinators] == [(1, 0)]
    other = harness.ask(FIND, 4, {"key_type": 7, "coordinator_keys": ["t"]})
    assert int(other.coordinators[0].error_code) == 42  # INVALID_REQUEST


def test_one_member_joins_syncs_commits_and_fetches(harness: DataHarness) -> None:
    joined = join_one(harness)
    assert int(joined.error_code) == 0
    assert joined.generation_id == 1
    assert joined.leader == joined.member_id
    assert joined.protocol_name == "range"
    assert [m.member_id for m in joined.members] == [joined.member_id]
    member = joined.member_id
    synced = harness.ask(
        SYNC,
        5,
        {
            "group_id": "g",
            "generation_id": 1,
            "member_id": member,
            "protocol_type": "consumer",
            "protocol_name": "range",
            "assignments": [{"member_id": member, "assignment": b"orders-0"}],
        },
    )
    assert (int(synced.error_code), synced.assignment) == (0, b"orders-0")
    beat = harness.ask(HEARTBEAT, 4, {"group_id": "g", "generation_id": 1, "member_id": member})
    assert int(beat.error_code) == 0
    stale = harness.ask(HEARTBEAT, 4, {"group_id": "g", "generation_id": 0, "member_id": member})
    assert int(stale.error_code) == 22  # ILLEGAL_GENERATION
    unknown = harness.ask(HEARTBEAT, 4, {"group_id": "g", "generation_id": 1, "member_id": "x"})
    assert int(unknown.error_code) == 25  # UNKNOWN_MEMBER_ID
    commit = {
        "group_id": "g",
        "generation_id_or_member_epoch": 1,
        "member_id": member,
        "topics": [
            {
                "name": "orders",
                "partitions": [
                    {"partition_index": 0, "committed_offset": 42, "committed_metadata": "m"},
                    {"partition_index": 9, "committed_offset": 1},
                ],
            },
            {"name": "nope", "partitions": [{"partition_index": 0, "committed_offset": 1}]},
        ],
    }
    committed = harness.ask(COMMIT, 9, commit)
    codes = {
        (t.name, p.partition_index): int(p.error_code)
        for t in committed.topics
        for p in t.partitions
    }
    assert codes == {("orders", 0): 0, ("orders", 9): 3, ("nope", 0): 3}
    bad = harness.ask(COMMIT, 9, {**commit, "generation_id_or_member_epoch": 7})
    assert int(bad.topics[0].partitions[0].error_code) == 22
    fetched = harness.ask(FETCH, 7, {"group_id": "g", "topics": None})
    assert int(fetched.error_code) == 0
    assert [
        (t.name, p.partition_index, p.committed_offset, p.metadata)
        for t in fetched.topics
        for p in t.partitions
    ] == [("orders", 0, 42, "m")]
    multi = harness.ask(
        FETCH,
        9,
        {
            "groups": [
                {"group_id": "g", "topics": [{"name": "orders", "partition_indexes": [0, 1]}]},
                {"group_id": "other", "topics": None},
            ]
        },
    )
    first, second = multi.groups
    assert [p.committed_offset for p in first.topics[0].partitions] == [42, -1]
    assert (second.group_id, second.topics, int(second.error_code)) == ("other", (), 0)
    described = harness.ask(
        DESCRIBE, 5, {"groups": ["g", "none"], "include_authorized_operations": True}
    )
    g, none = described.groups
    assert (g.group_state, g.protocol_type, g.protocol_data) == ("Stable", "consumer", "range")
    assert [(m.member_id, m.member_assignment) for m in g.members] == [(member, b"orders-0")]
    assert (none.group_state, int(none.error_code)) == ("Dead", 0)
    # v6 (KIP-1043): a group that does not exist is GROUP_ID_NOT_FOUND, with Kafka's message
    g, none = harness.ask(
        DESCRIBE, 6, {"groups": ["g", "none"], "include_authorized_operations": False}
    ).groups
    assert (g.group_state, int(g.error_code), g.error_message) == ("Stable", 0, None)
    assert (none.group_state, int(none.error_code)) == ("Dead", 69)
    assert none.error_message == "Group none not found."
    listed = harness.ask(LIST, 5, {"states_filter": [], "types_filter": []})
    assert [(x.group_id, x.group_state, x.group_type) for x in listed.groups] == [
        ("g", "Stable", "classic")
    ]
    not_empty = harness.ask(DELETE, 2, {"groups_names": ["g"]})
    assert int(not_empty.results[0].error_code) == 68  # NON_EMPTY_GROUP
    left = harness.ask(LEAVE, 5, {"group_id": "g", "members": [{"member_id": member}]})
    assert [(m.member_id, int(m.error_code)) for m in left.members] == [(member, 0)]
    empty = harness.ask(LIST, 4, {"states_filter": ["empty"]})
    assert [x.group_id for x in empty.groups] == ["g"]
    deleted = harness.ask(DELETE, 2, {"groups_names": ["g", "g"]})
    assert [(r.group_id, int(r.error_code)) for r in deleted.results] == [("g", 0)]
    again = harness.ask(DELETE, 2, {"groups_names": ["g"]})
    assert int(again.results[0].error_code) == 69  # GROUP_ID_NOT_FOUND
    gone = harness.ask(FETCH, 7, {"group_id": "g", "topics": None})
    assert gone.topics == ()


def test_records_are_kafkas_and_a_new_coordinator_loads_them(tmp_path: Path) -> None:
    harness = groups_harness(tmp_path)
    try:
        joined = join_one(harness)
        member = joined.member_id
        harness.ask(
            SYNC,
            3,
            {
                "group_id": "g",
                "generation_id": 1,
                "member_id": member,
                "assignments": [{"member_id": member, "assignment": b"a"}],
            },
        )
        harness.ask(
            COMMIT,
            8,
            {
                "group_id": "g",
                "generation_id_or_member_epoch": 1,
                "member_id": member,
                "topics": [
                    {
                        "name": "orders",
                        "partitions": [{"partition_index": 1, "committed_offset": 7}],
                    }
                ],
            },
        )
        harness.loop.run_until_complete(harness.apis.groups.close())
    finally:
        harness.close()
    segment = next((tmp_path / "__consumer_offsets-0").glob("*.log")).read_bytes()
    keys = [decode_key(k) for _, k, _ in iter_records(segment) if k is not None]
    assert GroupMetadataKey("g") in keys
    assert OffsetCommitKey("g", "orders", 1) in keys
    # Another broker that leads the partition next: its log holds the same records (a
    # follower's copy), which it loads before it answers.
    again = groups_harness(tmp_path.parent / f"{tmp_path.name}-next")
    target = again.root / "__consumer_offsets-0"
    for path in (tmp_path / "__consumer_offsets-0").iterdir():
        if path.name != "partition.metadata" and path.is_file():
            shutil.copy(path, target / path.name)
    try:
        fetched = ask_until_loaded(again, FETCH, 7, {"group_id": "g", "topics": None})
        assert [p.committed_offset for t in fetched.topics for p in t.partitions] == [7]
        described = again.ask(
            DESCRIBE, 5, {"groups": ["g"], "include_authorized_operations": False}
        )
        assert described.groups[0].group_state == "Stable"
        assert [m.member_id for m in described.groups[0].members] == [member]
        beat = again.ask(HEARTBEAT, 4, {"group_id": "g", "generation_id": 1, "member_id": member})
        assert int(beat.error_code) == 0
    finally:
        again.loop.run_until_complete(again.apis.groups.close())
        again.close()


def test_three_members_rebalance_and_a_leaver_triggers_another(harness: DataHarness) -> None:
    async def run() -> None:
        first = await harness.answer(JOIN, 9, join_values())
        while int(first.error_code) == 14:
            await asyncio.sleep(0.01)
            first = await harness.answer(JOIN, 9, join_values())
        ids = [first.member_id]
        for _ in range(2):
            ids.append((await harness.answer(JOIN, 9, join_values())).member_id)
        answers = await asyncio.gather(*(harness.answer(JOIN, 9, join_values(m)) for m in ids))
        assert {int(a.error_code) for a in answers} == {0}
        assert {a.generation_id for a in answers} == {1}
        leader = answers[0].leader
        assert sum(len(a.members) for a in answers) == 3  # only the leader gets them
        syncs = [
            harness.answer(
                SYNC,
                5,
                {
                    "group_id": "g",
                    "generation_id": 1,
                    "member_id": m,
                    "assignments": [{"member_id": x, "assignment": x.encode()} for x in ids]
                    if m == leader
                    else [],
                },
            )
            for m in ids
        ]
        synced = await asyncio.gather(*syncs)
        assert [s.assignment for s in synced] == [m.encode() for m in ids]
        leaver = ids[2]
        left = await harness.answer(LEAVE, 2, {"group_id": "g", "member_id": leaver})
        assert int(left.error_code) == 0
        beat = await harness.answer(
            HEARTBEAT, 4, {"group_id": "g", "generation_id": 1, "member_id": ids[0]}
        )
        assert int(beat.error_code) == 27  # REBALANCE_IN_PROGRESS
        rejoined = await asyncio.gather(*(harness.answer(JOIN, 9, join_values(m)) for m in ids[:2]))
        assert {a.generation_id for a in rejoined} == {2}

    harness.loop.run_until_complete(run())


def acl(resource_type: int, name: str, principal: str, operation: int) -> Any:
    return AccessControlEntryRecord(
        Uuid.random(), resource_type, name, 3, principal, "*", operation, 3
    )


def test_group_acls(tmp_path: Path) -> None:
    """READ on the group and on the topic to commit; DESCRIBE on the group to find it; others
    are refused GROUP_AUTHORIZATION_FAILED; ListGroups lists only what the caller may see."""
    harness = groups_harness(
        tmp_path, authorization=RequestAuthorization(enabled=True, cluster_id="c")
    )
    harness.image = image(
        [acl(3, "g", "User:alice", 3), acl(2, "orders", "User:alice", 3)]  # READ, READ
    )
    commit = {
        "group_id": "g",
        "generation_id_or_member_epoch": -1,
        "member_id": "",
        "topics": [
            {"name": "orders", "partitions": [{"partition_index": 0, "committed_offset": 1}]}
        ],
    }
    try:
        refused = harness.ask(FIND, 3, {"key": "g", "key_type": 0}, principal="User:bob")
        assert int(refused.error_code) == 30  # GROUP_AUTHORIZATION_FAILED
        transaction = harness.ask(FIND, 3, {"key": "t", "key_type": 1}, principal="User:bob")
        assert int(transaction.error_code) == 53  # TRANSACTIONAL_ID_AUTHORIZATION_FAILED
        found = harness.ask(FIND, 3, {"key": "g", "key_type": 0}, principal="User:alice")
        assert int(found.error_code) == 0  # READ implies DESCRIBE
        join = harness.ask(JOIN, 9, join_values(), principal="User:bob")
        assert int(join.error_code) == 30
        bob = harness.ask(COMMIT, 9, commit, principal="User:bob")
        assert int(bob.topics[0].partitions[0].error_code) == 30
        loaded = ask_until_loaded(
            harness, FETCH, 7, {"group_id": "g", "topics": None}, principal="User:alice"
        )
        assert int(loaded.error_code) == 0
        alice = harness.ask(COMMIT, 9, commit, principal="User:alice")
        assert int(alice.topics[0].partitions[0].error_code) == 0  # a simple commit
        assert harness.ask(LIST, 5, {}, principal="User:bob").groups == ()
        listed = harness.ask(LIST, 5, {}, principal="User:alice")
        assert [g.group_id for g in listed.groups] == ["g"]
        deleted = harness.ask(DELETE, 2, {"groups_names": ["g"]}, principal="User:alice")
        assert int(deleted.results[0].error_code) == 30  # DELETE is not READ
    finally:
        harness.loop.run_until_complete(harness.apis.groups.close())
        harness.close()


def test_empty_group_ids_are_invalid(harness: DataHarness) -> None:
    join = harness.ask(JOIN, 9, {**join_values(), "group_id": ""})
    assert int(join.error_code) == 24  # INVALID_GROUP_ID
    sync = harness.ask(
        SYNC, 5, {"group_id": "", "generation_id": 1, "member_id": "m", "assignments": []}
    )
    assert int(sync.error_code) == 24


def test_group_metrics_count_groups_by_state(harness: DataHarness) -> None:
    from broker.metrics import group_families  # noqa: PLC0415

    join_one(harness)
    values = {m.name: m.samples[0].value for m in group_families(harness.apis.groups)}
    prefix = "kafka_coordinator_group_groupmetadatamanager_"
    assert values[prefix + "numgroups"] == 1
    assert values[prefix + "numgroupscompletingrebalance"] == 1
    assert values[prefix + "numgroupsstable"] == 0
    assert values[prefix + "numoffsets"] == 0


def test_a_refused_first_join_leaves_no_group(harness: DataHarness) -> None:
    refused = ask_until_loaded(harness, JOIN, 9, join_values(session_timeout=10))
    assert int(refused.error_code) == 26  # INVALID_SESSION_TIMEOUT (below the minimum)
    assert harness.ask(LIST, 5, {}).groups == ()
    required = harness.ask(JOIN, 9, join_values())
    assert int(required.error_code) == 79  # MEMBER_ID_REQUIRED: the group is kept for it
    assert [g.group_id for g in harness.ask(LIST, 5, {}).groups] == ["g"]


def test_offsets_of_a_deleted_topic_are_removed(harness: DataHarness) -> None:
    """As Kafka's coordinator does when a topic is deleted: tombstones for its offsets."""
    from quorum.metadata.delta import replay_records  # noqa: PLC0415
    from quorum.metadata.records import RemoveTopicRecord  # noqa: PLC0415
    from tests.unit.kafka.test_kafka_data import ORDERS  # noqa: PLC0415

    commit = {
        "group_id": "g",
        "generation_id_or_member_epoch": -1,
        "member_id": "",
        "topics": [
            {"name": "orders", "partitions": [{"partition_index": 0, "committed_offset": 5}]},
            {"name": "strict", "partitions": [{"partition_index": 0, "committed_offset": 6}]},
        ],
    }
    ask_until_loaded(harness, FETCH, 7, {"group_id": "g", "topics": None})
    committed = harness.ask(COMMIT, 9, commit)
    assert {int(p.error_code) for t in committed.topics for p in t.partitions} == {0}
    base = harness.image
    harness.image = replay_records(base, [(base.offset + 1, RemoveTopicRecord(ORDERS))])

    async def gone() -> list[str]:
        for _ in range(500):
            fetched = await harness.answer(FETCH, 7, {"group_id": "g", "topics": None})
            names = [t.name for t in fetched.topics]
            if "orders" not in names:
                return names
            await asyncio.sleep(0.01)  # the coordinator's timer runs meanwhile
        raise AssertionError("the offsets of the deleted topic are still there")

    assert harness.loop.run_until_complete(gone()) == ["strict"]


def test_static_member_replaced_fences_the_old_member_id(harness: DataHarness) -> None:
    """Two static members; the follower restarts (no member id): same generation, no
    rebalance, its old member id is FENCED_INSTANCE_ID."""

    async def form() -> tuple[Any, Any]:
        a = await harness.answer(JOIN, 9, join_values(instance="a"))
        while int(a.error_code) == 14:
            await asyncio.sleep(0.01)
            a = await harness.answer(JOIN, 9, join_values(instance="a"))
        b_join = harness.answer(JOIN, 9, join_values(instance="b"))
        a_rejoin = harness.answer(JOIN, 9, join_values(a.member_id, instance="a"))
        b, a2 = await asyncio.gather(b_join, a_rejoin)  # b first: its join starts a rebalance
        sync_a = harness.answer(
            SYNC,
            5,
            {
                "group_id": "g",
                "generation_id": a2.generation_id,
                "member_id": a2.member_id,
                "group_instance_id": "a",
                "assignments": [
                    {"member_id": a2.member_id, "assignment": b"A"},
                    {"member_id": b.member_id, "assignment": b"B"},
                ],
            },
        )
        sync_b = harness.answer(
            SYNC,
            5,
            {
                "group_id": "g",
                "generation_id": b.generation_id,
                "member_id": b.member_id,
                "group_instance_id": "b",
                "assignments": [],
            },
        )
        await asyncio.gather(sync_a, sync_b)
        return a2, b

    a, b = harness.loop.run_until_complete(form())
    assert a.leader == a.member_id
    restarted = harness.ask(JOIN, 9, join_values(instance="b"))
    assert int(restarted.error_code) == 0
    assert restarted.generation_id == b.generation_id  # no rebalance
    assert restarted.member_id != b.member_id
    fenced = harness.ask(
        HEARTBEAT,
        4,
        {
            "group_id": "g",
            "generation_id": b.generation_id,
            "member_id": b.member_id,
            "group_instance_id": "b",
        },
    )
    assert int(fenced.error_code) == 82  # FENCED_INSTANCE_ID
    synced = harness.ask(
        SYNC,
        5,
        {
            "group_id": "g",
            "generation_id": restarted.generation_id,
            "member_id": restarted.member_id,
            "group_instance_id": "b",
            "assignments": [],
        },
    )
    assert synced.assignment == b"B"
    described = harness.ask(DESCRIBE, 5, {"groups": ["g"], "include_authorized_operations": False})
    assert described.groups[0].group_state == "Stable"


def test_a_joiner_that_never_comes_back_leaves_no_group(harness: DataHarness) -> None:
    required = ask_until_loaded(harness, JOIN, 9, join_values(session_timeout=200))
    assert int(required.error_code) == 79  # MEMBER_ID_REQUIRED

    async def gone() -> None:
        for _ in range(500):
            if not (await harness.answer(LIST, 5, {})).groups:
                return
            await asyncio.sleep(0.01)  # the pending member expires after its session (200 ms)
        raise AssertionError("the group of a joiner that never came back is still listed")

    harness.loop.run_until_complete(gone())
