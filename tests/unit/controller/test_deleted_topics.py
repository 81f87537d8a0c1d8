"""Deleted-topic ids are kept as long as they must be and no longer
(docs/architecture.md#deleted-topic-ids): an image keeps the newest
``DELETED_TOPICS_RETAINED_MAX`` deletions, the same on every node, whatever deltas the log was
replayed in, and after a snapshot; a forgotten id gets the generic unknown-id error."""

from __future__ import annotations

import itertools
import random
import statistics
import time
from collections.abc import Sequence

from hypothesis import given, settings
from hypothesis import strategies as st

from quorum.controller.describe import describe_topics
from quorum.controller.requests import (
    DeleteTopic,
    DeleteTopicsRequest,
    DescribeTopic,
)
from quorum.controller.topics import delete_topics, unknown_topic_id_message
from quorum.errors import ErrorCode
from quorum.ids import Uuid
from quorum.limits import DELETED_TOPICS_RETAINED_MAX
from quorum.metadata.delta import MetadataDelta, MetadataReplayError
from quorum.metadata.image import DeletedTopic, DeletedTopics, MetadataImage
from quorum.metadata.records import (
    PartitionRecord,
    Record,
    RemoveTopicRecord,
    TopicRecord,
)
from quorum.metadata.snapshot_records import image_to_records, snapshot_end_offset

Entry = tuple[int, Record]


def replay(image: MetadataImage, entries: Sequence[Entry], retained_max: int) -> MetadataImage:
    delta = MetadataDelta(image, deleted_topics_retained_max=retained_max)
    for offset, record in entries:
        delta.replay(record, offset)
    return delta.apply()


def load_snapshot(image: MetadataImage, retained_max: int) -> MetadataImage:
    """What a node loads from a snapshot of ``image`` (with the same bound)."""
    delta = MetadataDelta(
        MetadataImage.EMPTY,
        snapshot_end_offset=snapshot_end_offset(image),
        deleted_topics_retained_max=retained_max,
    )
    for position, record in enumerate(image_to_records(image)):
        delta.replay(record, position)
    return delta.apply()


def churn(rng: random.Random, topics: int, *, reuse: bool = False) -> list[Entry]:
    """Create and delete ``topics`` topics (one partition each), interleaved: one to three live
    at a time. With ``reuse``, a new topic sometimes takes the id of one deleted long ago (the
    controller never draws one the image still knows: the caller decides which are legal)."""
    entries: list[Entry] = []
    live: list[tuple[str, Uuid]] = []
    offset = 0
    for n in range(topics):
        name = f"t{n % 5}-{n}"
        topic_id = Uuid.random(rng)
        entries += [
            (offset, TopicRecord(name, topic_id)),
            (offset + 1, PartitionRecord(topic_id, 0, (0,), (0,), 0)),
        ]
        offset += 2
        live.append((name, topic_id))
        while len(live) > rng.randint(1, 3):
            _, gone = live.pop(rng.randrange(len(live)))
            entries.append((offset, RemoveTopicRecord(gone)))
            offset += 1
    return entries


def newest_deletions(entries: Sequence[Entry], upto: int, retained_max: int) -> set[Uuid]:
    """The model: ids of the newest ``retained_max`` RemoveTopicRecords at or below ``upto``."""
    removed = [r.topic_id for o, r in entries if o <= upto and isinstance(r, RemoveTopicRecord)]
    return set(removed[max(0, len(removed) - retained_max) :]) if retained_max else set()


def test_the_bound_is_the_newest_deletions_oldest_forgotten_first() -> None:
    entries = churn(random.Random(1), 20)
    image = replay(MetadataImage.EMPTY, entries, retained_max=4)
    assert len(image.deleted_topics) == 4
    assert set(image.deleted_topics) == newest_deletions(entries, entries[-1][0], 4)
    offsets = [image.deleted_topics[i].deletion_offset for i in image.deleted_topics]
    assert offsets == sorted(offsets), "iteration is in deletion order, oldest first"
    assert isinstance(image.deleted_topics, DeletedTopics)
    oldest = image.deleted_topics.oldest()
    assert oldest is not None and oldest.deletion_offset == offsets[0]
    # A delta that deletes nothing keeps the very same object.
    assert (
        replay(
            image, [(image.offset + 1, TopicRecord("x", Uuid.random(random.Random(2))))], 4
        ).deleted_topics
        is image.deleted_topics
    )


def test_the_production_bound_holds_across_a_long_churn() -> None:
    rng = random.Random(3)
    entries = churn(rng, DELETED_TOPICS_RETAINED_MAX + 500)
    # One delta per 100 records, as a broker or follower applies them.
    image = MetadataImage.EMPTY
    for start in range(0, len(entries), 100):
        image = replay(image, entries[start : start + 100], DELETED_TOPICS_RETAINED_MAX)
    assert len(image.deleted_topics) == DELETED_TOPICS_RETAINED_MAX
    assert set(image.deleted_topics) == newest_deletions(
        entries, image.offset, DELETED_TOPICS_RETAINED_MAX
    )
    assert load_snapshot(image, DELETED_TOPICS_RETAINED_MAX) == image


def test_one_deletion_on_a_full_set_copies_one_chunk_not_the_set() -> None:
    rng = random.Random(4)
    entries = churn(rng, DELETED_TOPICS_RETAINED_MAX + 10)
    image = replay(MetadataImage.EMPTY, entries, DELETED_TOPICS_RETAINED_MAX)
    deleted = image.deleted_topics
    assert isinstance(deleted, DeletedTopics) and len(deleted) == DELETED_TOPICS_RETAINED_MAX
    next_offset = image.offset + 1
    samples: list[float] = []
    after = deleted
    for n in range(200):
        gone = DeletedTopic(f"x{n}", Uuid.random(rng), next_offset, next_offset + 1)
        next_offset += 2
        started = time.perf_counter()
        after = after.with_deletions((gone,), DELETED_TOPICS_RETAINED_MAX)
        samples.append(time.perf_counter() - started)
    assert len(after) == DELETED_TOPICS_RETAINED_MAX
    # Tens of microseconds; sorting or copying 10,000 entries would take milliseconds.
    assert statistics.median(samples) < 0.001, samples
    one = deleted.with_deletions(
        (DeletedTopic("y", Uuid.random(rng), next_offset, next_offset + 1),),
        DELETED_TOPICS_RETAINED_MAX,
    )
    shared = {id(c) for c in deleted._order} & {id(c) for c in one._order}
    assert len(shared) >= len(deleted._order) - 2


def test_a_retained_id_says_when_it_was_deleted_a_forgotten_one_is_just_unknown() -> None:
    entries = churn(random.Random(5), 10)
    image = replay(MetadataImage.EMPTY, entries, retained_max=2)
    removed = [r.topic_id for _, r in entries if isinstance(r, RemoveTopicRecord)]
    forgotten, retained = removed[0], removed[-1]
    assert retained in image.deleted_topics and forgotten not in image.deleted_topics
    assert image.is_topic_id_used(retained) and not image.is_topic_id_used(forgotten)
    gone_at = image.deleted_topics[retained].deletion_offset
    assert unknown_topic_id_message(image, retained) == (
        f"Topic id {retained} was deleted (at metadata offset {gone_at}); topic ids are never "
        "reused, so a topic created since under the same name has another id"
    )
    assert unknown_topic_id_message(image, forgotten) == (
        f"No topic has id {forgotten}: list topics to see the current ids"
    )
    result = delete_topics(
        image,
        DeleteTopicsRequest((DeleteTopic(topic_id=retained), DeleteTopic(topic_id=forgotten))),
    )
    assert not result.records
    codes = [(t.error_code, t.error_message) for t in result.response.topics]
    assert codes == [
        (ErrorCode.UNKNOWN_TOPIC_ID, unknown_topic_id_message(image, retained)),
        (ErrorCode.UNKNOWN_TOPIC_ID, unknown_topic_id_message(image, forgotten)),
    ]
    described = describe_topics(
        image, (DescribeTopic(topic_id=retained), DescribeTopic(topic_id=forgotten))
    )
    assert [d.error_code for d in described] == [ErrorCode.UNKNOWN_TOPIC_ID] * 2
    assert "was deleted (at metadata offset" in described[0].error_message
    assert described[1].error_message.startswith("No topic has id")


def test_replay_refuses_a_retained_id_in_any_delta_and_accepts_a_forgotten_one() -> None:
    entries = churn(random.Random(6), 8)
    removed = [r.topic_id for _, r in entries if isinstance(r, RemoveTopicRecord)]
    next_offset = entries[-1][0] + 1
    for reused, refused in ((removed[-2], True), (removed[0], False)):
        log = [*entries, (next_offset, TopicRecord("again", reused))]
        for granularity in (1, 5, len(log)):
            image = MetadataImage.EMPTY
            try:
                for start in range(0, len(log), granularity):
                    image = replay(image, log[start : start + granularity], retained_max=3)
            except MetadataReplayError as exc:
                assert refused, exc
                assert "was used before" in exc.reason
            else:
                assert not refused, f"{reused} reused at granularity {granularity}"
                assert image.topic_by_name("again") is not None


@settings(max_examples=60, deadline=None)
@given(
    seed=st.integers(0, 2**16),
    topics=st.integers(1, 40),
    retained_max=st.integers(0, 8),
    cuts=st.lists(st.integers(0, 200), max_size=6),
)
def test_any_replay_granularity_and_any_snapshot_give_the_same_image(
    seed: int, topics: int, retained_max: int, cuts: list[int]
) -> None:
    rng = random.Random(seed)
    log = _with_forgotten_ids_reused(rng, churn(rng, topics), retained_max)
    last = log[-1][0]
    full = replay(MetadataImage.EMPTY, log, retained_max)
    assert set(full.deleted_topics) == newest_deletions(log, last, retained_max)
    # Cut the log into deltas anywhere: the same image.
    bounds = sorted({min(c, len(log)) for c in cuts} | {0, len(log)})
    image = MetadataImage.EMPTY
    for start, end in itertools.pairwise(bounds):
        image = replay(image, log[start:end], retained_max)
        # A snapshot at this point, then the rest of the log: the same image.
        loaded = load_snapshot(image, retained_max)
        assert loaded == image
        assert replay(loaded, log[end:], retained_max) == full
    assert image == full


def _with_forgotten_ids_reused(
    rng: random.Random, entries: list[Entry], retained_max: int
) -> list[Entry]:
    """``entries`` where, now and then, a created topic takes an id that the model says is
    forgotten at that offset (and is not live), with every later record of it rewritten."""
    remap: dict[Uuid, Uuid] = {}
    out: list[Entry] = []
    live: set[Uuid] = set()
    removed: list[Uuid] = []
    for offset, original in entries:
        record = original
        if isinstance(record, TopicRecord):
            retained = (
                set(removed[max(0, len(removed) - retained_max) :]) if retained_max else set()
            )
            forgotten = [i for i in removed if i not in retained and i not in live]
            topic_id = record.topic_id
            if forgotten and rng.random() < 0.3:
                remap[topic_id] = rng.choice(forgotten)
                removed = [i for i in removed if i != remap[topic_id]]
            record = TopicRecord(record.name, remap.get(topic_id, topic_id))
            live.add(record.topic_id)
        elif isinstance(record, PartitionRecord):
            record = PartitionRecord(
                remap.get(record.topic_id, record.topic_id), record.partition,
                record.replicas, record.isr, record.leader,
            )  # fmt: skip
        elif isinstance(record, RemoveTopicRecord):
            record = RemoveTopicRecord(remap.get(record.topic_id, record.topic_id))
            live.discard(record.topic_id)
            removed.append(record.topic_id)
        out.append((offset, record))
    return out
