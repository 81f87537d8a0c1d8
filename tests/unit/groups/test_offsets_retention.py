"""Offsets retention (KIP-211, ``GroupShard.expire_offsets``): an Empty group's offsets expire
``offsets.retention.minutes`` after it became Empty, a group of simple commits' after each
commit, a v1 commit's at its own expire timestamp; a Stable group keeps them; an Empty group
left without offsets is Dead and tombstoned; the tombstones replayed (a load after the log
cleaner) leave nothing."""

from __future__ import annotations

import itertools

from broker.groups.group import GroupState
from broker.groups.records import (
    GroupMetadataKey,
    OffsetCommitKey,
    OffsetCommitValue,
    decode_key,
)
from broker.groups.shard import GroupShard
from tests.unit.groups.test_group import SETTINGS, join_new, stabilize

RETENTION_MS = 7 * 24 * 3_600_000
WALL_MS = 1_700_000_000_000


def new_shard() -> GroupShard:
    counter = itertools.count()
    return GroupShard(0, SETTINGS, lambda client: f"{client}-{next(counter)}")


def commit(offset: int, wall_ms: int = WALL_MS, expire_ms: int = -1) -> OffsetCommitValue:
    return OffsetCommitValue(
        offset, -1, "", commit_timestamp_ms=wall_ms, expire_timestamp_ms=expire_ms
    )


def keys(records: list[tuple[bytes, bytes | None]]) -> list[object]:
    assert all(value is None for _, value in records), "expiry writes tombstones only"
    return [decode_key(key) for key, _ in records]


def test_an_empty_groups_offsets_expire_after_the_retention_from_when_it_became_empty() -> None:
    shard = new_shard()
    group = shard.get_or_create("g")
    member = join_new(group, "a", now=0)
    stabilize(group, {"a": member}, now=0)
    shard.apply_commits("g", [("t", 0, commit(5)), ("t", 1, commit(7))])
    # Stable: nothing expires, however old the commits.
    assert shard.expire_offsets(10 * RETENTION_MS, WALL_MS + 10 * RETENTION_MS, RETENTION_MS) == []
    group.leave(member, None, 1_000)
    assert group.state is GroupState.EMPTY and group.state_timestamp_ms == 1_000
    assert shard.expire_offsets(1_000 + RETENTION_MS - 1, WALL_MS, RETENTION_MS) == []
    assert shard.committed("g") == {("t", 0): commit(5), ("t", 1): commit(7)}
    records = shard.expire_offsets(1_000 + RETENTION_MS, WALL_MS, RETENTION_MS)
    assert keys(records) == [
        OffsetCommitKey("g", "t", 0),
        OffsetCommitKey("g", "t", 1),
        GroupMetadataKey("g"),
    ]
    assert shard.committed("g") == {} and shard.group("g") is None
    assert group.state is GroupState.DEAD
    # Replayed (a coordinator loading the partition): nothing is left.
    loaded = new_shard()
    for key, value in records:
        decoded = decode_key(key)
        assert decoded is not None
        loaded.replay(decoded, value, 0)
    loaded.loaded()
    assert loaded.offsets == {} and loaded.groups == {}


def test_simple_commits_expire_after_each_commit_and_v1_at_their_expire_timestamp() -> None:
    shard = new_shard()
    shard.apply_commits(
        "simple",
        [
            ("t", 0, commit(1, wall_ms=WALL_MS)),
            ("t", 1, commit(2, wall_ms=WALL_MS + 5_000)),
            ("t", 2, commit(3, wall_ms=WALL_MS, expire_ms=WALL_MS + 60_000)),
        ],
    )
    assert shard.group("simple") is not None
    # On the wall clock: the v1 commit first, at its own expire timestamp.
    assert keys(shard.expire_offsets(0, WALL_MS + 60_000, RETENTION_MS)) == [
        OffsetCommitKey("simple", "t", 2)
    ]
    assert keys(shard.expire_offsets(0, WALL_MS + RETENTION_MS, RETENTION_MS)) == [
        OffsetCommitKey("simple", "t", 0)
    ]
    assert shard.committed("simple") == {("t", 1): commit(2, wall_ms=WALL_MS + 5_000)}
    assert keys(shard.expire_offsets(0, WALL_MS + 5_000 + RETENTION_MS, RETENTION_MS)) == [
        OffsetCommitKey("simple", "t", 1),
        GroupMetadataKey("simple"),
    ]
    assert shard.group("simple") is None
    assert shard.expire_offsets(0, WALL_MS + 10 * RETENTION_MS, RETENTION_MS) == []
