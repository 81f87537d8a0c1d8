"""Offsets retention through the coordinator's timer (broker/kafka/groups.py, KIP-211): a
group of simple commits whose offsets are older than ``offsets.retention.minutes`` (here
200 ms) loses them at the next check, OffsetFetch then answers none, and the tombstones of
the offset and of the group are in ``__consumer_offsets``."""

from __future__ import annotations

import asyncio
import dataclasses
from pathlib import Path

from broker.groups.records import GroupMetadataKey, OffsetCommitKey, decode_key, iter_records
from tests.unit.kafka.test_kafka_groups import (
    COMMIT,
    FETCH,
    SETTINGS,
    ask_until_loaded,
    groups_harness,
)


def test_expired_offsets_are_tombstoned_and_fetch_answers_none(tmp_path: Path) -> None:
    harness = groups_harness(tmp_path)
    harness.apis.groups.settings = dataclasses.replace(
        SETTINGS, retention_ms=200, retention_check_interval_ms=50
    )
    commit = {
        "group_id": "simple",
        "generation_id_or_member_epoch": -1,
        "member_id": "",
        "topics": [
            {"name": "orders", "partitions": [{"partition_index": 0, "committed_offset": 5}]}
        ],
    }
    try:
        ask_until_loaded(harness, FETCH, 7, {"group_id": "simple", "topics": None})
        committed = harness.ask(COMMIT, 9, commit)
        assert {int(p.error_code) for t in committed.topics for p in t.partitions} == {0}
        fetched = harness.ask(FETCH, 7, {"group_id": "simple", "topics": None})
        assert [p.committed_offset for t in fetched.topics for p in t.partitions] == [5]

        async def expired() -> None:
            for _ in range(1_000):
                answer = await harness.answer(FETCH, 7, {"group_id": "simple", "topics": None})
                if not answer.topics:
                    return
                await asyncio.sleep(0.01)  # the coordinator's timer runs meanwhile
            raise AssertionError("the offsets never expired")

        harness.loop.run_until_complete(expired())

        def tombstones() -> list[object]:
            data = b"".join(
                path.read_bytes()
                for path in sorted((tmp_path / "__consumer_offsets-0").glob("*.log"))
            )
            return [decode_key(k) for _, k, v in iter_records(data) if k is not None and v is None]

        async def written() -> list[object]:
            for _ in range(1_000):
                found = tombstones()
                if GroupMetadataKey("simple") in found:
                    return found
                await asyncio.sleep(0.01)  # the write runs meanwhile
            raise AssertionError(f"no group tombstone: {tombstones()}")

        found = harness.loop.run_until_complete(written())
        assert OffsetCommitKey("simple", "orders", 0) in found
    finally:
        harness.loop.run_until_complete(harness.apis.groups.close())
        harness.close()
