"""ListTopics in pages: the pure page function, the server's edge and the AdminClient following
cursors. A listing of hundreds of thousands of topics would pass gRPC's message limit in one
answer; pages of LIST_TOPICS_PAGE_TOPICS_MAX topics never do."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import grpc
import pytest

from quorum import limits
from quorum.controller.describe import list_topics, list_topics_page
from quorum.errors import ErrorCode
from quorum.ids import Uuid
from quorum.metadata.delta import replay_records
from quorum.metadata.image import MetadataImage
from quorum.metadata.records import Record, TopicRecord
from quorum.rpc.v1 import admin_pb2, admin_pb2_grpc
from tests.unit.server.test_edge_errors import serve


def image_with(names: list[str], internal: frozenset[str] = frozenset()) -> MetadataImage:
    records: list[Record] = [TopicRecord(n, Uuid.random(), n in internal) for n in names]
    return replay_records(MetadataImage.EMPTY, enumerate(records, start=0))


@pytest.mark.parametrize("seed", range(20))
def test_pages_cover_every_topic_once_in_name_order(seed: int) -> None:
    rng = random.Random(seed)
    names = sorted({f"t{rng.randrange(10_000):05d}" for _ in range(rng.randrange(0, 60))})
    internal = frozenset(n for n in names if rng.random() < 0.2)
    image = image_with(rng.sample(names, len(names)), internal)
    for include_internal in (True, False):
        expected = list_topics(image, include_internal=include_internal)
        page_max = rng.randrange(1, 12)
        seen, cursor, pages = [], "", 0
        while True:
            page, cursor = list_topics_page(
                image, include_internal=include_internal, cursor=cursor, topics_max=page_max
            )
            pages += 1
            assert len(page) <= page_max, f"seed {seed}"
            seen += page
            if not cursor:
                break
            assert len(page) == page_max, f"seed {seed}: a short page must be the last"
        assert tuple(seen) == expected, f"seed {seed}"
        assert pages == max(1, -(-len(expected) // page_max)), f"seed {seed}"


def test_a_cursor_resumes_at_the_first_name_at_or_after_it() -> None:
    image = image_with(["a", "b", "d", "e"])
    page, cursor = list_topics_page(image, include_internal=True, cursor="c", topics_max=1)
    assert [t.name for t in page] == ["d"]
    assert cursor == "e"
    page, cursor = list_topics_page(image, include_internal=True, cursor="z", topics_max=5)
    assert (page, cursor) == ((), "")


def test_the_server_pages_and_refuses_bad_cursors(tmp_path: Path) -> None:
    image = image_with([f"topic-{i:03d}" for i in range(25)])

    async def body(channel: object) -> list[admin_pb2.ListTopicsResponse]:
        stub = admin_pb2_grpc.AdminServiceStub(channel)
        answers = [await stub.ListTopics(admin_pb2.ListTopicsRequest(page_topics_max=10))]
        while answers[-1].next_cursor:
            request = admin_pb2.ListTopicsRequest(
                page_topics_max=10, cursor=answers[-1].next_cursor
            )
            answers.append(await stub.ListTopics(request))
        answers.append(await stub.ListTopics(admin_pb2.ListTopicsRequest(page_topics_max=-1)))
        answers.append(await stub.ListTopics(admin_pb2.ListTopicsRequest(cursor="x" * 250)))
        answers.append(await stub.ListTopics(admin_pb2.ListTopicsRequest()))
        return answers

    answers = serve(tmp_path, body, image=lambda: image)
    pages, negative, long_cursor, whole = answers[:3], answers[3], answers[4], answers[5]
    assert [len(p.topics) for p in pages] == [10, 10, 5]
    assert [t.name for p in pages for t in p.topics] == [f"topic-{i:03d}" for i in range(25)]
    assert negative.error_code == ErrorCode.INVALID_REQUEST
    assert "page_topics_max -1 is negative" in negative.error_message
    assert long_cursor.error_code == ErrorCode.INVALID_REQUEST
    assert f"at most {limits.TOPIC_NAME_CHARS_MAX}" in long_cursor.error_message
    assert (len(whole.topics), whole.next_cursor) == (25, "")


def test_a_broker_refuses_reads_until_it_caught_up_since_it_started(tmp_path: Path) -> None:
    """A restarted broker starts from an older image than it served before: until it has
    caught up, a read without min_metadata_offset is UNAVAILABLE (retriable) naming why;
    a read with an offset waits for it as usual."""
    behind: list[str | None] = ["broker 101 is catching up with the metadata log"]

    async def body(channel: grpc.aio.Channel) -> tuple[grpc.aio.AioRpcError, Any, Any]:
        stub = admin_pb2_grpc.AdminServiceStub(channel)
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await stub.ListTopics(admin_pb2.ListTopicsRequest(), timeout=5)
        with_offset = await stub.ListTopics(
            admin_pb2.ListTopicsRequest(min_metadata_offset=0), timeout=5
        )
        behind[0] = None
        caught_up = await stub.ListTopics(admin_pb2.ListTopicsRequest(), timeout=5)
        return refused.value, with_offset, caught_up

    image = image_with(["orders"])
    refused, with_offset, caught_up = serve(
        tmp_path, body, image=lambda: image, broker_caught_up=lambda: behind[0]
    )
    assert refused.code() == grpc.StatusCode.UNAVAILABLE
    assert "catching up" in (refused.details() or "")
    assert with_offset.error_code == 0 and caught_up.error_code == 0


@pytest.mark.parametrize("seed", range(20))
def test_pages_and_cursors_are_made_of_visible_topics_only(seed: int) -> None:
    """With a visibility filter (the caller's DESCRIBE right) the pages hold exactly the
    visible topics in name order, and no cursor names a hidden one."""
    rng = random.Random(seed)
    names = sorted({f"t{rng.randrange(10_000):05d}" for _ in range(rng.randrange(0, 80))})
    shown = frozenset(n for n in names if rng.random() < rng.choice((0.05, 0.5, 0.95)))
    image = image_with(rng.sample(names, len(names)))
    page_max = rng.randrange(1, 7)
    seen: list[str] = []
    cursor = ""
    while True:
        page, cursor = list_topics_page(
            image,
            include_internal=True,
            cursor=cursor,
            topics_max=page_max,
            visible=shown.__contains__,
        )
        seen += [t.name for t in page]
        if not cursor:
            break
        assert cursor in shown, f"seed {seed}: cursor {cursor!r} names a hidden topic"
        assert len(page) == page_max, f"seed {seed}: a short page must be the last"
    assert seen == sorted(shown), f"seed {seed}"
