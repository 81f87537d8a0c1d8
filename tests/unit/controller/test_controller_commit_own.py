"""The active controller's commit fast path (``ControllerStateMachine.commit_own``): when a
batch it proposed commits, the image built at proposal time becomes the committed image
instead of decoding and replaying the batch again. It must give exactly the image a plain
replay of the committed log gives, whatever the mix of proposals, NoOps and batch shapes."""

from __future__ import annotations

import random

import pytest

from quorum.controller.requests import (
    CreatableTopic,
    CreateTopicsRequest,
    DeleteTopic,
    DeleteTopicsRequest,
)
from quorum.ids import ZERO_UUID
from quorum.metadata.batch import DecodedBatch
from quorum.metadata.delta import replay_batches
from quorum.metadata.image import MetadataImage
from quorum.metadata.records import MetadataRecord, NoOpRecord
from tests.unit.controller.test_controller_topics import Harness


def _proposal(h: Harness, rng: random.Random) -> tuple[MetadataRecord, ...]:
    """The records of one random operation on the latest image (possibly none)."""
    names = [f"t{i}" for i in range(6)]
    existing = [n for n in names if h.sm.latest_image.topic_by_name(n) is not None]
    if existing and rng.random() < 0.4:
        name = rng.choice(existing)
        result = h.sm.delete_topics(
            DeleteTopicsRequest((DeleteTopic(name, ZERO_UUID),)), next_offset=h.next_offset
        )
    else:
        topic = CreatableTopic(rng.choice(names), rng.randint(1, 3), rng.randint(1, 3))
        result = h.sm.create_topics(
            CreateTopicsRequest((topic,)), next_offset=h.next_offset, new_topic_id=h.new_id
        )
    return tuple(result.records)


@pytest.mark.parametrize("seed", range(20))
def test_commit_own_gives_the_image_a_replay_gives(seed: int) -> None:
    rng = random.Random(seed)
    h = Harness(seed=seed)
    fast = slow = 0
    committed: list[DecodedBatch] = list(h.committed_batches)
    for _ in range(60):
        # One batch: a NoOp alone, or one or more proposals back to back (the accumulator
        # groups proposals that arrive together).
        if rng.random() < 0.15:
            batch = DecodedBatch(h.next_offset, 1, 0, False, (NoOpRecord(),))
            h.next_offset += 1
        else:
            base = h.next_offset
            records: list[MetadataRecord] = []
            for _ in range(rng.randint(1, 3)):
                proposal = _proposal(h, rng)
                if proposal:
                    h.sm.replay_pending(proposal, h.next_offset)
                    h.next_offset += len(proposal)
                    records.extend(proposal)
            if not records:
                continue
            batch = DecodedBatch(base, 1, 0, False, tuple(records))
        committed.append(batch)
        if h.sm.commit_own(batch.base_offset, batch.last_offset):
            fast += 1
        else:
            h.sm.replay_committed(batch)
            slow += 1
        assert h.sm.committed_image == replay_batches(MetadataImage.EMPTY, committed), (
            f"seed {seed}: the committed image differs from a replay after {len(committed)} batches"
        )
        assert not h.sm.has_pending
    assert fast > 0 and slow > 0, (fast, slow)


def test_commit_own_refuses_a_batch_that_is_not_whole_proposals() -> None:
    """Part of a proposal (a non-atomic result split over batches), or a batch that does not
    start at the oldest pending proposal, takes the plain replay."""
    h = Harness()
    result = h.sm.create_topics(
        CreateTopicsRequest((CreatableTopic("a", 3, 1), CreatableTopic("b", 3, 1))),
        next_offset=h.next_offset,
        new_topic_id=h.new_id,
    )
    records = tuple(result.records)
    base = h.next_offset
    h.sm.replay_pending(records, base)
    before = h.sm.committed_image
    assert not h.sm.commit_own(base, base + 1)  # the first two records only
    assert not h.sm.commit_own(base + 1, base + len(records) - 1)  # not from the start
    assert h.sm.committed_image is before and h.sm.has_pending
    assert h.sm.commit_own(base, base + len(records) - 1)
    assert not h.sm.has_pending
    assert h.sm.committed_image is h.sm.latest_image
