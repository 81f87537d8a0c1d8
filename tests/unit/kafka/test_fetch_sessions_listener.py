"""Incremental fetch sessions (KIP-227) through the real listener (decode, handle, encode) over
real partition logs: what an incremental Fetch reads and answers, forgetting, refusals, and a
long poll woken by a partition the request did not name (docs/kafka-listener.md#fetch-sessions).
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from quorum.ids import Uuid
from tests.record_batches import decode_batches
from tests.unit.kafka.test_kafka_data import ORDERS, DataHarness, batch


@pytest.fixture
def harness(tmp_path: Path) -> Iterator[DataHarness]:
    made = DataHarness(tmp_path)
    yield made
    made.close()


def values(
    session_id: int,
    epoch: int,
    partitions: list[tuple[int, int]],
    *,
    forgotten: list[int] | None = None,
    max_wait_ms: int = 0,
) -> dict[str, Any]:
    """A v13+ Fetch of ORDERS' ``(partition, fetch offset)`` pairs."""
    topic_id = uuid.UUID(bytes=ORDERS.bytes)
    return {
        "max_wait": max_wait_ms,
        "min_bytes": 1,
        "max_bytes": 1 << 20,
        "session_id": session_id,
        "session_epoch": epoch,
        "topics": [
            {
                "topic_id": topic_id,
                "partitions": [
                    {"partition": p, "fetch_offset": offset, "partition_max_bytes": 1 << 20}
                    for p, offset in partitions
                ],
            }
        ]
        if partitions
        else [],
        "forgotten_topics_data": (
            [{"topic_id": topic_id, "partitions": forgotten}] if forgotten else []
        ),
    }


def answered(response: Any) -> dict[tuple[Uuid, int], Any]:
    assert int(response.error_code) == 0
    return {
        (Uuid.from_bytes(topic.topic_id.bytes), int(p.partition_index)): p
        for topic in response.responses
        for p in topic.partitions
    }


def test_an_incremental_fetch_answers_only_what_changed(harness: DataHarness) -> None:
    harness.produce("orders", 0, batch(2))
    full = harness.ask(1, 17, values(0, 0, [(0, 0), (1, 0)]))
    session_id = int(full.session_id)
    assert session_id != 0 and set(answered(full)) == {(ORDERS, 0), (ORDERS, 1)}
    # partition 0 named at its new offset, nothing else changed: no partitions at all
    idle = harness.ask(1, 17, values(session_id, 1, [(0, 2)]))
    assert idle.session_id == session_id and answered(idle) == {}
    # a produce to partition 1, not named: read at the session's offset (0) and answered alone
    harness.produce("orders", 1, batch(3))
    moved = answered(harness.ask(1, 17, values(session_id, 2, [])))
    assert list(moved) == [(ORDERS, 1)]
    assert moved[(ORDERS, 1)].high_watermark == 3
    assert len(decode_batches(moved[(ORDERS, 1)].records)) == 1
    # the client moves on: its new offsets answer nothing new
    assert answered(harness.ask(1, 17, values(session_id, 3, [(0, 2), (1, 3)]))) == {}
    # forgotten: a produce to partition 0 is no longer answered
    assert answered(harness.ask(1, 17, values(session_id, 4, [], forgotten=[0]))) == {}
    harness.produce("orders", 0, batch(1, seed=1))
    assert answered(harness.ask(1, 17, values(session_id, 5, []))) == {}
    # added back at its offset: answered with the new batch
    back = answered(harness.ask(1, 17, values(session_id, 6, [(0, 2)])))
    assert list(back) == [(ORDERS, 0)] and back[(ORDERS, 0)].high_watermark == 3


def test_session_refusals(harness: DataHarness) -> None:
    session_id = int(harness.ask(1, 17, values(0, 0, [(0, 0)])).session_id)
    stale = harness.ask(1, 17, values(session_id, 7, []))
    assert int(stale.error_code) == 71 and stale.session_id == 0  # INVALID_FETCH_SESSION_EPOCH
    # epoch -1 closes it: answered in full without a session, and the id is gone after
    closing = harness.ask(1, 17, values(session_id, -1, [(0, 0)]))
    assert closing.session_id == 0 and list(answered(closing)) == [(ORDERS, 0)]
    gone = harness.ask(1, 17, values(session_id, 1, []))
    assert int(gone.error_code) == 70  # FETCH_SESSION_ID_NOT_FOUND
    # a session opened by name (v12) is not continued by id (v13 on)
    by_name = harness.ask(1, 12, harness.fetch_values("orders", 0, 0, session_epoch=0))
    assert by_name.session_id != 0
    switched = harness.ask(1, 17, values(int(by_name.session_id), 1, []))
    assert int(switched.error_code) == 106  # FETCH_SESSION_TOPIC_ID_ERROR


def test_a_session_long_poll_wakes_on_a_partition_not_named(harness: DataHarness) -> None:
    session_id = int(harness.ask(1, 17, values(0, 0, [(0, 0), (1, 0)])).session_id)

    async def run() -> tuple[Any, float]:
        started = time.monotonic()
        fetching = asyncio.ensure_future(
            harness.answer(1, 17, values(session_id, 1, [], max_wait_ms=10_000))
        )
        deadline = time.monotonic() + 5
        while (ORDERS, 1) not in harness.apis.data._parked:  # the fetch has parked
            assert time.monotonic() < deadline and not fetching.done()
            await asyncio.sleep(0.005)
        produced = await harness.answer(
            0,
            11,
            {
                "acks": 1,
                "timeout": 1000,
                "topic_data": [
                    {"name": "orders", "partition_data": [{"index": 1, "records": batch(2)}]}
                ],
            },
        )
        assert int(produced.responses[0].partition_responses[0].error_code) == 0
        return await fetching, time.monotonic() - started

    response, elapsed = harness.loop.run_until_complete(run())
    assert list(answered(response)) == [(ORDERS, 1)]
    assert elapsed < 5, "the parked session fetch waited for its max_wait instead of the append"
