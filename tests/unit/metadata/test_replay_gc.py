"""Replay leaves no reference cycles (docs/conventions.md#bounds-at-the-edge): every delta, topic
change and superseded image is freed by reference counting, so the driver can freeze the
long-lived heap and no collection ever has to walk the image."""

from __future__ import annotations

import gc
from collections.abc import Callable, Iterator

import pytest

from quorum.controller.requests import (
    CreatableTopic,
    CreateTopicsRequest,
    DeleteTopic,
)
from quorum.metadata.delta import MetadataDelta
from quorum.metadata.image import MetadataImage
from quorum.metadata.snapshot_records import image_from_records, image_to_records
from tests.unit.controller.test_controller_topics import Harness


@pytest.fixture
def cycles_made() -> Iterator[Callable[[], int]]:
    """A function returning how many objects became cyclic garbage since the fixture started
    (the automatic collector is off meanwhile)."""
    was_enabled = gc.isenabled()
    gc.collect()
    gc.disable()
    try:
        yield gc.collect
    finally:
        if was_enabled:
            gc.enable()


def test_proposing_and_replaying_creates_and_deletes_makes_no_cycles(
    cycles_made: Callable[[], int],
) -> None:
    h = Harness()
    for batch in range(3):
        topics = tuple(CreatableTopic(f"t{batch}-{n}", 2, 2) for n in range(300))
        h.propose(
            h.sm.create_topics(
                CreateTopicsRequest(topics), next_offset=h.next_offset, new_topic_id=h.new_id
            )
        )
        deletes = tuple(DeleteTopic(f"t{batch}-{n}") for n in range(0, 300, 2))
        h.propose(h.delete_result(*deletes))
    image = h.sm.committed_image
    loaded = image_from_records(image_to_records(image), end_offset=image.offset + 1)
    assert loaded == image
    assert cycles_made() == 0


def test_the_checker_bites(cycles_made: Callable[[], int]) -> None:
    class Holder:
        def __init__(self) -> None:
            self.handlers = {"x": self.method}  # what MetadataDelta used to do

        def method(self) -> None:
            pass

    delta = MetadataDelta(MetadataImage.EMPTY)
    Holder()
    del delta
    assert cycles_made() > 0
