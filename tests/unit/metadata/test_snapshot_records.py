"""Image <-> snapshot records (quorum.metadata.snapshot_records) and snapshot-mode replay.

The central property: for histories built through the real ``ControllerStateMachine``,
replaying ``image_to_records(image)`` in snapshot mode gives back an image equal to ``image``
in every field, topic identity included (creation offsets, every removed id), and replaying the
rest of the log on top of a snapshot taken anywhere gives the same image as replaying the whole
log.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from quorum import limits
from quorum.controller.requests import CreatableTopic, DeleteTopic, RegisterBrokerRequest
from quorum.controller.result import ControllerResult
from quorum.errors import ErrorCode
from quorum.ids import METADATA_TOPIC_ID, Uuid
from quorum.metadata.batch import DecodedBatch, decode_log_batch
from quorum.metadata.delta import MetadataDelta, MetadataReplayError, replay_batches
from quorum.metadata.image import MetadataImage
from quorum.metadata.records import (
    SNAPSHOT_RECORD_CLASSES,
    BrokerEndpoint,
    ConfigRecord,
    ConfigResourceType,
    DeletedTopicRecord,
    FenceBrokerRecord,
    InvalidRecordError,
    LeaderChangeMessage,
    NoOpRecord,
    PartitionChangeRecord,
    PartitionRecord,
    RecordDecodeError,
    RegisterBrokerRecord,
    RemoveTopicRecord,
    SnapshotFooter,
    SnapshotHeader,
    TopicIdentityRecord,
    TopicRecord,
    decode_record,
    encode_record,
    is_snapshot_only_record,
    record_to_json_dict,
    record_type_name,
)
from quorum.metadata.snapshot_records import (
    image_from_batches,
    image_from_records,
    image_to_records,
    snapshot_batches,
    snapshot_end_offset,
)
from tests.unit.controller.test_controller_topics import Harness

TOPIC_A = Uuid.parse("ah0vHnqLTD2eDxEiM0RVZg")
TOPIC_B = Uuid.parse("b2TvT0j2QlW3dPl8kZs9Qw")
INCARNATION = Uuid.parse("c0ZP3V7pRFGeAGpJ4w5n1A")


def round_trip(image: MetadataImage) -> MetadataImage:
    return image_from_records(image_to_records(image), end_offset=snapshot_end_offset(image))


def round_trip_through_batches(image: MetadataImage, *, per_batch: int = 7) -> MetadataImage:
    batches = snapshot_batches(
        image_to_records(image),
        epoch=3,
        last_contained_log_timestamp_ms=1_700_000_000_000,
        records_per_batch_max=per_batch,
    )
    decoded = [decode_log_batch(batch) for batch in batches]
    return image_from_batches(decoded, end_offset=snapshot_end_offset(image))


# ----- the codec of the snapshot-only records ------------------------------------------------


def test_snapshot_only_records_encode_decode_and_print() -> None:
    identity = TopicIdentityRecord(TOPIC_A, 17)
    deleted = DeletedTopicRecord("orders", TOPIC_B, 3, 9)
    for record in (identity, deleted):
        assert decode_record(encode_record(record)) == record
        assert is_snapshot_only_record(record)
        assert record_type_name(record.TYPE) == type(record).__name__
    assert sorted(SNAPSHOT_RECORD_CLASSES) == [200, 201]
    assert record_to_json_dict(deleted) == {
        "name": "orders",
        "topic_id": str(TOPIC_B),
        "creation_offset": 3,
        "deletion_offset": 9,
    }
    assert not is_snapshot_only_record(TopicRecord("orders", TOPIC_A))


def test_snapshot_only_records_validate_their_fields() -> None:
    with pytest.raises(InvalidRecordError, match="creation_offset"):
        TopicIdentityRecord(TOPIC_A, -1)
    with pytest.raises(InvalidRecordError, match="greater than creation_offset 9"):
        DeletedTopicRecord("orders", TOPIC_B, 9, 9)
    with pytest.raises(RecordDecodeError, match="malformed DeletedTopicRecord"):
        decode_record(
            encode_record(DeletedTopicRecord("o", TOPIC_B, 1, 2)).replace(b"\x02", b"\x00")
        )


# ----- hand-built images --------------------------------------------------------------------


def rich_image() -> MetadataImage:
    """Every field of an image set: brokers fenced and not, broker and cluster configs, the
    metadata topic, topics with configs and changed partitions, a name deleted and recreated."""
    h = Harness(racks=(None, "r1", "r2"))
    h.add_broker(3, "r2", unfence=False)
    result = h.sm.metadata_topic_record(h.new_id, next_offset=h.next_offset)
    assert result is not None
    h.propose(result)
    h.create_one("orders", 3, 2, configs=(("cleanup.policy", "compact"),))
    h.create_one("payments.v1", 2, 3)
    h.delete(DeleteTopic("orders"))
    h.create_one("orders", 1, 1)
    broker_configs = (
        ConfigRecord(ConfigResourceType.BROKER, "", "log.retention.ms", "1000"),
        ConfigRecord(ConfigResourceType.BROKER, "2", "log.retention.ms", "5"),
        ConfigRecord(ConfigResourceType.BROKER, "10", "num.io.threads", "4"),
    )
    h.propose(ControllerResult(broker_configs, None))
    h.now_ms += 20_000  # every session expires: brokers 0..2 are fenced, leaders move
    h.heartbeat(1)
    h.propose(h.sm.fence_stale_brokers(now_ms=h.now_ms, next_offset=h.next_offset))
    image = h.sm.committed_image
    assert image.metadata_topic_id is not None
    assert image.deleted_topics and image.cluster_configs
    assert any(b.fenced for b in image.brokers.values())
    assert any(not b.fenced for b in image.brokers.values())
    return image


def test_round_trip_of_the_empty_image() -> None:
    assert list(image_to_records(MetadataImage.EMPTY)) == []
    assert round_trip(MetadataImage.EMPTY) == MetadataImage.EMPTY
    assert round_trip_through_batches(MetadataImage.EMPTY) == MetadataImage.EMPTY


def test_round_trip_of_a_rich_image_keeps_every_field() -> None:
    image = rich_image()
    for loaded in (round_trip(image), round_trip_through_batches(image)):
        assert loaded == image
        # Field by field, so a failure names what was lost.
        assert loaded.offset == image.offset
        assert dict(loaded.topics_by_id) == dict(image.topics_by_id)
        assert dict(loaded.deleted_topics) == dict(image.deleted_topics)
        assert dict(loaded.brokers) == dict(image.brokers)
        assert loaded.metadata_topic_id == image.metadata_topic_id
        assert {k: dict(v) for k, v in loaded.broker_configs.items()} == {
            k: dict(v) for k, v in image.broker_configs.items()
        }
        assert dict(loaded.topic_names_by_collision_key) == dict(image.topic_names_by_collision_key)
        for topic_id, topic in image.topics_by_id.items():
            assert loaded.topics_by_id[topic_id].creation_offset == topic.creation_offset


def test_record_order_is_brokers_configs_deleted_then_topics_by_creation() -> None:
    image = rich_image()
    records = list(image_to_records(image))
    kinds = [type(r).__name__ for r in records]
    first_deleted = kinds.index("DeletedTopicRecord")
    first_topic = kinds.index("TopicRecord")
    assert all(k == "RegisterBrokerRecord" for k in kinds[: len(image.brokers)])
    assert first_deleted < first_topic
    assert all(
        k in ("TopicRecord", "TopicIdentityRecord", "ConfigRecord", "PartitionRecord")
        for k in kinds[first_topic:]
    )
    broker_ids = [r.broker_id for r in records if isinstance(r, RegisterBrokerRecord)]
    assert broker_ids == sorted(broker_ids)
    resources = [
        r.resource_name
        for r in records
        if isinstance(r, ConfigRecord) and r.resource_type == ConfigResourceType.BROKER
    ]
    assert resources == ["", "2", "10"]
    creations = [r.creation_offset for r in records if isinstance(r, TopicIdentityRecord)]
    assert creations == sorted(creations)
    # Deterministic: equal images give equal record streams.
    assert list(image_to_records(round_trip(image))) == records


def test_a_loaded_snapshot_still_refuses_a_removed_id_and_continues_the_log() -> None:
    image = rich_image()
    loaded = round_trip(image)
    (gone,) = loaded.deleted_topics.values()
    delta = MetadataDelta(loaded)
    with pytest.raises(MetadataReplayError, match="never reused"):
        delta.replay(TopicRecord("fresh", gone.topic_id), loaded.offset + 1)
    # A new topic after the snapshot gets the offset of its record.
    delta = MetadataDelta(loaded)
    delta.replay(TopicRecord("fresh", TOPIC_A), loaded.offset + 5)
    after = delta.apply()
    assert after.topic_by_name("fresh") is not None
    assert after.topic_by_name("fresh").creation_offset == loaded.offset + 5  # type: ignore[union-attr]


# ----- snapshot-mode replay is strict ----------------------------------------------------------


def snapshot_of(*records: object, end_offset: int = 100) -> MetadataImage:
    return image_from_records(list(records), end_offset=end_offset)  # type: ignore[arg-type]


BROKER = RegisterBrokerRecord(
    1, INCARNATION, 5, (BrokerEndpoint("PLAINTEXT", "h", 9092),), "r1", False
)


def test_a_minimal_snapshot_loads() -> None:
    image = snapshot_of(
        SnapshotHeader(0, 1),
        BROKER,
        DeletedTopicRecord("old", TOPIC_B, 7, 9),
        TopicRecord("orders", TOPIC_A),
        TopicIdentityRecord(TOPIC_A, 12),
        PartitionRecord(TOPIC_A, 0, (1,), (1,), 1, 4, 6),
        SnapshotFooter(0),
    )
    assert image.offset == 99
    assert image.topic(TOPIC_A).creation_offset == 12  # type: ignore[union-attr]
    assert image.deleted_topics[TOPIC_B].deletion_offset == 9
    assert image.is_topic_id_used(TOPIC_B)
    assert image.brokers[1].fenced is False
    assert image.brokers[1].broker_epoch == 5


@pytest.mark.parametrize(
    ("records", "message"),
    [
        ((TopicRecord("orders", TOPIC_A),), "without its TopicIdentityRecord"),
        (
            (TopicRecord("orders", TOPIC_A), PartitionRecord(TOPIC_A, 0, (1,), (1,), 1)),
            "must be followed by its TopicIdentityRecord",
        ),
        (
            (TopicRecord("orders", TOPIC_A), TopicIdentityRecord(TOPIC_B, 1)),
            "must be followed by its TopicIdentityRecord",
        ),
        ((TopicIdentityRecord(TOPIC_A, 1),), "follows the TopicRecord of its topic"),
        (
            (TopicRecord("orders", TOPIC_A), TopicIdentityRecord(TOPIC_A, 100)),
            "past the snapshot's last offset",
        ),
        ((DeletedTopicRecord("old", TOPIC_B, 1, 100),), "past the snapshot's last offset"),
        (
            (DeletedTopicRecord("old", TOPIC_B, 1, 2), DeletedTopicRecord("x", TOPIC_B, 3, 4)),
            "appears twice",
        ),
        (
            (
                DeletedTopicRecord("old", TOPIC_A, 1, 2),
                TopicRecord("orders", TOPIC_A),
            ),
            "never reused",
        ),
        ((DeletedTopicRecord("old", METADATA_TOPIC_ID, 1, 2),), "reserved"),
        ((DeletedTopicRecord("__cluster_metadata", TOPIC_A, 1, 2),), "never removed"),
        ((RemoveTopicRecord(TOPIC_A),), "not a record a snapshot holds"),
        ((PartitionChangeRecord(TOPIC_A, 0, leader=1),), "not a record a snapshot holds"),
        ((BROKER, FenceBrokerRecord(1, 5)), "not a record a snapshot holds"),
        ((NoOpRecord(),), "not a record a snapshot holds"),
        ((LeaderChangeMessage(1, 1, (1,)),), "not a record a snapshot holds"),
        (
            (RegisterBrokerRecord(1, INCARNATION, 100, ()),),
            "a broker epoch is the offset of a RegisterBrokerRecord",
        ),
    ],
)
def test_snapshot_replay_refuses(records: tuple[object, ...], message: str) -> None:
    with pytest.raises(MetadataReplayError, match=message):
        snapshot_of(*records)


def test_positions_must_grow_and_the_base_must_be_empty() -> None:
    delta = MetadataDelta(MetadataImage.EMPTY, snapshot_end_offset=10)
    delta.replay(BROKER, 3)
    with pytest.raises(MetadataReplayError, match="positions in a snapshot must grow"):
        delta.replay(SnapshotFooter(0), 3)
    with pytest.raises(ValueError, match="onto the empty image"):
        MetadataDelta(rich_image(), snapshot_end_offset=10)
    with pytest.raises(ValueError, match="snapshot_end_offset"):
        MetadataDelta(MetadataImage.EMPTY, snapshot_end_offset=-1)


@pytest.mark.parametrize(
    "record", [TopicIdentityRecord(TOPIC_A, 1), DeletedTopicRecord("old", TOPIC_B, 1, 2)]
)
def test_log_replay_refuses_snapshot_only_records(record: object) -> None:
    delta = MetadataDelta(MetadataImage.EMPTY)
    with pytest.raises(MetadataReplayError, match="only in snapshots"):
        delta.replay(record, 0)  # type: ignore[arg-type]
    batch = DecodedBatch(0, 1, 0, False, (record,))  # type: ignore[arg-type]
    with pytest.raises(MetadataReplayError, match="only in snapshots"):
        MetadataDelta(MetadataImage.EMPTY).replay_batch(batch)


# ----- snapshot batches ---------------------------------------------------------------------


def test_snapshot_batches_are_header_bounded_records_footer() -> None:
    image = rich_image()
    records = list(image_to_records(image))
    batches = list(
        snapshot_batches(
            iter(records), epoch=4, last_contained_log_timestamp_ms=123, records_per_batch_max=5
        )
    )
    decoded = [decode_log_batch(b) for b in batches]
    assert decoded[0].control and decoded[0].records == (SnapshotHeader(0, 123),)
    assert decoded[-1].control and decoded[-1].records == (SnapshotFooter(0),)
    middle = decoded[1:-1]
    assert all(not d.control and 1 <= d.record_count <= 5 for d in middle)
    assert [r for d in middle for r in d.records] == records
    assert [d.base_offset for d in decoded] == [0, *(d.end_offset for d in decoded[:-1])]
    assert {d.epoch for d in decoded} == {4}
    assert {d.timestamp_ms for d in decoded} == {123}


def test_snapshot_batches_split_on_bytes() -> None:
    big = "x" * (limits.BATCH_BYTES_MAX // 3)
    records = [ConfigRecord(ConfigResourceType.BROKER, "", f"k{i}", big) for i in range(5)]
    batches = list(snapshot_batches(records, epoch=1, last_contained_log_timestamp_ms=0))
    assert all(len(b.data) <= limits.BATCH_BYTES_MAX for b in batches)
    assert sum(b.record_count for b in batches[1:-1]) == 5
    assert len(batches) > 3
    huge = ConfigRecord(ConfigResourceType.BROKER, "", "k", "y" * limits.BATCH_BYTES_MAX)
    with pytest.raises(ValueError, match="exceeds the batch limit"):
        list(snapshot_batches([huge], epoch=1, last_contained_log_timestamp_ms=0))


# ----- the property: histories through the real controller -----------------------------------

NAMES = ["a", "b", "c.d", "c_d", "e"]
BROKERS = (0, 1, 2, 3)


@dataclass(frozen=True)
class Create:
    names: tuple[str, ...]
    partitions: int
    replication_factor: int
    compact: bool


@dataclass(frozen=True)
class Delete:
    name: str


@dataclass(frozen=True)
class Tick:
    ms: int
    alive: frozenset[int]


@dataclass(frozen=True)
class Reregister:
    broker_id: int


@dataclass(frozen=True)
class BrokerConfig:
    resource: str
    value: str | None


@dataclass(frozen=True)
class MetadataTopic:
    pass


@dataclass(frozen=True)
class Failover:
    pass


operations = st.one_of(
    st.builds(
        Create,
        st.lists(st.sampled_from(NAMES), min_size=1, max_size=2).map(tuple),
        st.integers(1, 3),
        st.integers(1, 3),
        st.booleans(),
    ),
    st.builds(Delete, st.sampled_from(NAMES)),
    st.builds(
        Tick,
        st.sampled_from([0, 1_000, 10_000]),
        st.frozensets(st.sampled_from(BROKERS)),
    ),
    st.builds(Reregister, st.sampled_from(BROKERS)),
    st.builds(BrokerConfig, st.sampled_from(["", "0", "3"]), st.sampled_from(["1", "2", None])),
    st.just(MetadataTopic()),
    st.just(Failover()),
)


def run_history(ops: list[object], seed: int) -> Harness:
    h = Harness(racks=(None, "r1", "r1", "r2"), seed=seed)
    rng = random.Random(seed)
    for op in ops:
        if isinstance(op, Create):
            configs = (("cleanup.policy", "compact"),) if op.compact else ()
            h.propose(
                h.create_result(
                    *(
                        CreatableTopic(n, op.partitions, op.replication_factor, configs=configs)
                        for n in op.names
                    )
                )
            )
        elif isinstance(op, Delete):
            h.propose(h.delete_result(DeleteTopic(op.name)))
        elif isinstance(op, Tick):
            h.now_ms += op.ms
            for broker_id in sorted(op.alive):
                h.heartbeat(broker_id)
            h.propose(h.sm.fence_stale_brokers(now_ms=h.now_ms, next_offset=h.next_offset))
        elif isinstance(op, Reregister):
            h.propose(
                h.sm.register_broker(
                    RegisterBrokerRequest(op.broker_id, Uuid.random(rng), rack="r9"),
                    next_offset=h.next_offset,
                    now_ms=h.now_ms,
                )
            )
        elif isinstance(op, BrokerConfig):
            record = ConfigRecord(ConfigResourceType.BROKER, op.resource, "x", op.value)
            h.propose(ControllerResult((record,), None))
        elif isinstance(op, MetadataTopic):
            result = h.sm.metadata_topic_record(h.new_id, next_offset=h.next_offset)
            if result is not None:
                h.propose(result)
        elif isinstance(op, Failover):
            h.lose_leadership()
    return h


def check_snapshots_of_history(h: Harness, cut_rng: random.Random) -> None:
    final = h.sm.committed_image
    assert round_trip(final) == final
    assert round_trip_through_batches(final, per_batch=cut_rng.randint(1, 20)) == final
    # A snapshot at a batch boundary, then the rest of the log: the same image as the whole log.
    batches = h.committed_batches
    cut = cut_rng.randint(0, len(batches))
    at_cut = replay_batches(MetadataImage.EMPTY, batches[:cut])
    loaded = round_trip(at_cut)
    assert loaded == at_cut
    assert replay_batches(loaded, batches[cut:]) == final


@settings(max_examples=60, deadline=None)
@given(st.lists(operations, min_size=5, max_size=30), st.integers(0, 2**16))
def test_snapshot_of_any_controller_history_replays_to_the_same_image(
    ops: list[object], seed: int
) -> None:
    h = run_history(ops, seed)
    check_snapshots_of_history(h, random.Random(seed))


@pytest.mark.parametrize("seed", range(10))
def test_long_histories_with_deletes_and_recreates(seed: int) -> None:
    rng = random.Random(seed)
    ops: list[object] = []
    for _ in range(120):
        roll = rng.random()
        if roll < 0.4:
            names = tuple(rng.sample(NAMES, rng.randint(1, 2)))
            ops.append(Create(names, rng.randint(1, 3), rng.randint(1, 3), rng.random() < 0.3))
        elif roll < 0.65:
            ops.append(Delete(rng.choice(NAMES)))
        elif roll < 0.8:
            alive = frozenset(b for b in BROKERS if rng.random() < 0.7)
            ops.append(Tick(rng.choice([0, 1_000, 10_000]), alive))
        elif roll < 0.85:
            ops.append(Reregister(rng.choice(BROKERS)))
        elif roll < 0.9:
            ops.append(BrokerConfig(rng.choice(["", "1"]), rng.choice(["1", None])))
        elif roll < 0.95:
            ops.append(MetadataTopic())
        else:
            ops.append(Failover())
    h = run_history(ops, seed)
    assert h.sm.committed_image.deleted_topics, "the walk should delete something"
    check_snapshots_of_history(h, rng)
    # Every id the log ever created is still known as used after a snapshot.
    loaded = round_trip(h.sm.committed_image)
    for batch in h.committed_batches:
        for record in batch.records:
            if isinstance(record, TopicRecord):
                assert loaded.is_topic_id_used(record.topic_id)


def test_create_response_offsets_match_the_snapshot() -> None:
    h = Harness()
    response = h.create_one("orders", 2, 1)
    loaded = round_trip(h.sm.committed_image)
    topic = loaded.topic_by_name("orders")
    assert topic is not None
    assert (topic.topic_id, topic.creation_offset) == (response.topic_id, response.creation_offset)
    assert response.error_code == ErrorCode.NONE
