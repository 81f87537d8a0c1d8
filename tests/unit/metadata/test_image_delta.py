"""MetadataImage / MetadataDelta: replay of every record type, refusals, copy-on-write, local
changes, and the PersistentMap underneath."""

from __future__ import annotations

import random
from collections.abc import Sequence

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from quorum.ids import METADATA_TOPIC_ID, ZERO_UUID, Uuid
from quorum.metadata.batch import DecodedBatch, decode_batch, encode_batch
from quorum.metadata.delta import (
    LocalTopicPartitions,
    MetadataDelta,
    MetadataReplayError,
    replay_batches,
    replay_records,
)
from quorum.metadata.image import (
    CLUSTER_METADATA_TOPIC_NAME,
    DeletedTopic,
    MetadataImage,
    PartitionImage,
    PersistentMap,
)
from quorum.metadata.records import (
    BrokerEndpoint,
    ConfigRecord,
    ConfigResourceType,
    FenceBrokerRecord,
    LeaderChangeMessage,
    NoOpRecord,
    PartitionChangeRecord,
    PartitionRecord,
    Record,
    RegisterBrokerRecord,
    RemoveTopicRecord,
    TopicRecord,
    UnfenceBrokerRecord,
    UnregisterBrokerRecord,
)

rng = random.Random(7)
ID_A = Uuid.random(rng)
ID_B = Uuid.random(rng)
ID_C = Uuid.random(rng)
INCARNATION = Uuid.random(rng)
ENDPOINT = BrokerEndpoint("PLAINTEXT", "127.0.0.1", 9092)


def replay(records: Sequence[Record], image: MetadataImage = MetadataImage.EMPTY) -> MetadataImage:
    return replay_records(image, enumerate(records, start=image.offset + 1))


def topic(
    name: str, topic_id: Uuid, partitions: int = 2, replicas: tuple[int, ...] = (0, 1)
) -> list[Record]:
    records: list[Record] = [TopicRecord(name, topic_id)]
    for p in range(partitions):
        rot = replicas[p % len(replicas) :] + replicas[: p % len(replicas)]
        records.append(PartitionRecord(topic_id, p, rot, rot, rot[0]))
    return records


def broker(broker_id: int, epoch: int, *, fenced: bool = False) -> RegisterBrokerRecord:
    return RegisterBrokerRecord(broker_id, INCARNATION, epoch, (ENDPOINT,), None, fenced)


BASE_RECORDS: list[Record] = [
    broker(0, 0),
    broker(1, 1),
    broker(2, 2),
    *topic("orders", ID_A, partitions=3, replicas=(0, 1)),
    ConfigRecord(ConfigResourceType.TOPIC, "orders", "retention.ms", "1000"),
    *topic("payments", ID_B, partitions=2, replicas=(1, 2)),
]


@pytest.fixture
def base() -> MetadataImage:
    return replay(BASE_RECORDS)


# ----- replay of each record type -------------------------------------------------------------


def test_empty_image() -> None:
    empty = MetadataImage.EMPTY
    assert empty.offset == -1
    assert not empty.topics_by_id and not empty.topics_by_name and not empty.brokers
    assert empty.metadata_topic_id is None
    assert MetadataDelta(empty).apply() is empty


def test_topics_partitions_configs_and_brokers_replay(base: MetadataImage) -> None:
    assert base.offset == len(BASE_RECORDS) - 1
    orders = base.topic_by_name("orders")
    assert orders is not None and orders.topic_id == ID_A
    assert orders.creation_offset == 3
    assert orders.internal is False
    assert orders.replication_factor == 2
    assert dict(orders.partitions) == {
        0: PartitionImage(0, (0, 1), (0, 1), 0, 0, 0),
        1: PartitionImage(1, (1, 0), (1, 0), 1, 0, 0),
        2: PartitionImage(2, (0, 1), (0, 1), 0, 0, 0),
    }
    assert dict(orders.configs) == {"retention.ms": "1000"}
    assert base.topics_by_name == {"orders": ID_A, "payments": ID_B}
    assert sorted(base.brokers) == [0, 1, 2]
    assert base.unfenced_broker_ids() == (0, 1, 2)
    assert base.partition_count() == 5


def test_control_and_noop_records_only_advance_the_offset(base: MetadataImage) -> None:
    after = replay([NoOpRecord(), LeaderChangeMessage(1, 2, (1, 2, 3))], base)
    assert after.offset == base.offset + 2
    assert after.topics_by_id is base.topics_by_id
    assert after.brokers is base.brokers


def test_partition_change_defaults_bump_epochs(base: MetadataImage) -> None:
    after = replay([PartitionChangeRecord(ID_A, 0, isr=(1,), leader=1)], base)
    assert after.topics_by_id[ID_A].partitions[0] == PartitionImage(0, (0, 1), (1,), 1, 1, 1)
    after = replay([PartitionChangeRecord(ID_A, 0, isr=(0,))], base)
    assert after.topics_by_id[ID_A].partitions[0] == PartitionImage(0, (0, 1), (0,), 0, 0, 1)
    explicit = PartitionChangeRecord(ID_A, 0, leader=1, leader_epoch=5, partition_epoch=9)
    after = replay([explicit], base)
    assert after.topics_by_id[ID_A].partitions[0] == PartitionImage(0, (0, 1), (0, 1), 1, 5, 9)


def test_remove_topic_frees_the_name_and_remembers_the_id(base: MetadataImage) -> None:
    after = replay([RemoveTopicRecord(ID_A)], base)
    assert "orders" not in after.topics_by_name
    assert ID_A not in after.topics_by_id
    assert after.deleted_topics[ID_A] == DeletedTopic("orders", ID_A, 3, base.offset + 1)
    assert after.is_topic_id_used(ID_A)
    # The name can be reused at once, with a new id.
    again = replay(topic("orders", ID_C), after)
    assert again.topics_by_name["orders"] == ID_C
    assert again.topics_by_id[ID_C].creation_offset == after.offset + 1
    assert dict(again.topics_by_id[ID_C].configs) == {}  # configs died with the old topic


def test_config_records_for_topics_and_brokers(base: MetadataImage) -> None:
    after = replay(
        [
            ConfigRecord(ConfigResourceType.TOPIC, "orders", "retention.ms", None),
            ConfigRecord(ConfigResourceType.TOPIC, "orders", "cleanup.policy", "compact"),
            ConfigRecord(ConfigResourceType.BROKER, "", "num.partitions", "3"),
            ConfigRecord(ConfigResourceType.BROKER, "1", "log.retention.ms", "5"),
        ],
        base,
    )
    assert dict(after.topics_by_id[ID_A].configs) == {"cleanup.policy": "compact"}
    assert dict(after.cluster_configs) == {"num.partitions": "3"}
    assert dict(after.broker_configs["1"]) == {"log.retention.ms": "5"}
    cleared = replay(
        [ConfigRecord(ConfigResourceType.BROKER, "1", "log.retention.ms", None)], after
    )
    assert "1" not in cleared.broker_configs


def test_broker_fence_unfence_register_unregister(base: MetadataImage) -> None:
    fenced = replay([FenceBrokerRecord(1, 1)], base)
    assert fenced.brokers[1].fenced
    assert fenced.unfenced_broker_ids() == (0, 2)
    unfenced = replay([UnfenceBrokerRecord(1, 1)], fenced)
    assert not unfenced.brokers[1].fenced
    reregistered = replay([broker(1, unfenced.offset + 1, fenced=True)], unfenced)
    assert reregistered.brokers[1].broker_epoch == unfenced.offset + 1
    gone = replay([UnregisterBrokerRecord(1, reregistered.offset)], reregistered)
    assert 1 not in gone.brokers


def test_metadata_topic_record_sets_the_metadata_topic_id() -> None:
    image = replay([TopicRecord(CLUSTER_METADATA_TOPIC_NAME, ID_C, internal=True)])
    assert image.metadata_topic_id == ID_C
    assert image.topic(ID_C) is not None and image.topic(ID_C).internal  # type: ignore[union-attr]
    assert replay([NoOpRecord()], image).metadata_topic_id == ID_C


def test_collision_index_follows_creates_and_deletes() -> None:
    image = replay(topic("a.b", ID_A))
    assert image.colliding_topic_name("a_b") == "a.b"
    assert image.colliding_topic_name("a.b") is None  # a name does not collide with itself
    assert image.colliding_topic_name("ab") is None
    image = replay([RemoveTopicRecord(ID_A)], image)
    assert image.colliding_topic_name("a_b") is None
    assert not image.topic_names_by_collision_key


# ----- refusals -------------------------------------------------------------------------------


REFUSALS: list[tuple[str, list[Record], str]] = [
    ("live name", [TopicRecord("orders", ID_C)], "exists with id"),
    ("live id", [TopicRecord("other", ID_A)], "ids are never reused"),
    ("deleted id", [RemoveTopicRecord(ID_A), TopicRecord("x", ID_A)], "ids are never reused"),
    ("reserved zero id", [TopicRecord("x", ZERO_UUID)], "reserved"),
    ("reserved sentinel id", [TopicRecord("x", METADATA_TOPIC_ID)], "reserved"),
    ("metadata topic not internal", [TopicRecord(CLUSTER_METADATA_TOPIC_NAME, ID_C)], "internal"),
    ("partition of unknown topic", [PartitionRecord(ID_C, 0, (0,), (0,), 0)], "no live topic"),
    (
        "partition of deleted topic",
        [RemoveTopicRecord(ID_A), PartitionRecord(ID_A, 9, (0,), (0,), 0)],
        "no live topic",
    ),
    ("duplicate partition", [PartitionRecord(ID_A, 0, (0,), (0,), 0)], "exists"),
    ("no replicas", [PartitionRecord(ID_A, 7, (), (), -1)], "at least one replica"),
    ("repeated replica", [PartitionRecord(ID_A, 7, (0, 0), (0,), 0)], "repeat"),
    ("empty isr", [PartitionRecord(ID_A, 7, (0, 1), (), -1)], "never empty"),
    ("isr not replicas", [PartitionRecord(ID_A, 7, (0, 1), (2,), 2)], "not a set of distinct"),
    ("leader not in isr", [PartitionRecord(ID_A, 7, (0, 1), (0,), 1)], "not in the ISR"),
    ("change unknown partition", [PartitionChangeRecord(ID_A, 9, leader=1)], "no partition 9"),
    ("change unknown topic", [PartitionChangeRecord(ID_C, 0, leader=1)], "no live topic"),
    ("change to bad leader", [PartitionChangeRecord(ID_A, 0, leader=2)], "not in the ISR"),
    (
        "stale partition epoch",
        [PartitionChangeRecord(ID_A, 0, leader=1, partition_epoch=0)],
        "partition epoch",
    ),
    (
        "config for unknown topic",
        [ConfigRecord(ConfigResourceType.TOPIC, "nope", "a", "b")],
        "no live topic",
    ),
    ("config of unknown type", [ConfigRecord(8, "x", "a", "b")], "neither TOPIC"),
    ("remove unknown topic", [RemoveTopicRecord(ID_C)], "no live topic"),
    ("remove twice", [RemoveTopicRecord(ID_A), RemoveTopicRecord(ID_A)], "no live topic"),
    ("fence unknown broker", [FenceBrokerRecord(9, 0)], "not registered"),
    ("fence stale epoch", [FenceBrokerRecord(1, 0)], "stale broker epoch"),
    ("unfence stale epoch", [UnfenceBrokerRecord(2, 1)], "stale broker epoch"),
    ("unregister unknown", [UnregisterBrokerRecord(9, 0)], "not registered"),
    ("register older epoch", [broker(2, 1)], "greater epoch"),
]


@pytest.mark.parametrize(
    ("records", "reason"), [r[1:] for r in REFUSALS], ids=[r[0] for r in REFUSALS]
)
def test_replay_refuses_impossible_records(
    base: MetadataImage, records: list[Record], reason: str
) -> None:
    delta = MetadataDelta(base)
    with pytest.raises(MetadataReplayError, match=reason) as caught:
        for offset, record in enumerate(records, start=base.offset + 1):
            delta.replay(record, offset)
    assert isinstance(caught.value, AssertionError)  # corruption or our bug: crash
    assert caught.value.offset == base.offset + len(records)
    assert caught.value.record == records[-1]
    assert f"at offset {caught.value.offset}" in str(caught.value)


def test_replay_refuses_the_metadata_topic_removal() -> None:
    image = replay([TopicRecord(CLUSTER_METADATA_TOPIC_NAME, ID_C, internal=True)])
    with pytest.raises(MetadataReplayError, match="never removed"):
        replay([RemoveTopicRecord(ID_C)], image)


def test_replay_refuses_offsets_that_do_not_grow(base: MetadataImage) -> None:
    delta = MetadataDelta(base)
    with pytest.raises(MetadataReplayError, match="offsets must grow"):
        delta.replay(NoOpRecord(), base.offset)
    batch = DecodedBatch(base.offset, 1, 0, False, (NoOpRecord(),))
    with pytest.raises(MetadataReplayError, match="offsets must grow"):
        delta.replay_batch(batch)


def test_a_refused_record_leaves_the_image_untouched(base: MetadataImage) -> None:
    delta = MetadataDelta(base)
    with pytest.raises(MetadataReplayError):
        delta.replay(TopicRecord("orders", ID_C), base.offset + 1)
    assert delta.apply() is base


# ----- copy-on-write --------------------------------------------------------------------------


def test_apply_shares_everything_it_did_not_change() -> None:
    records: list[Record] = [broker(0, 0), broker(1, 1)]
    ids = [Uuid.random(rng) for _ in range(2_000)]
    for index, topic_id in enumerate(ids):
        records.extend(topic(f"t{index}", topic_id, partitions=4))
    image = replay(records)
    changed = ids[1234]
    after = replay([PartitionChangeRecord(changed, 2, isr=(1,), leader=1)], image)
    for topic_id in ids:
        if topic_id != changed:
            assert after.topics_by_id[topic_id] is image.topics_by_id[topic_id]
    old_topic, new_topic = image.topics_by_id[changed], after.topics_by_id[changed]
    assert new_topic is not old_topic
    for p in (0, 1, 3):
        assert new_topic.partitions[p] is old_topic.partitions[p]
    assert new_topic.configs is old_topic.configs
    assert after.topics_by_name is image.topics_by_name
    assert after.brokers is image.brokers
    by_id = after.topics_by_id
    assert isinstance(by_id, PersistentMap) and isinstance(image.topics_by_id, PersistentMap)
    shards = len(by_id._shards)
    assert shards > 16
    assert by_id.shares_shards_with(image.topics_by_id) == shards - 1
    assert by_id.changed_keys(image.topics_by_id) == {changed}
    # The old image is unchanged.
    assert image.topics_by_id[changed].partitions[2].leader in (0, 1)
    assert image.topics_by_id[changed].partitions[2].partition_epoch == 0


@pytest.mark.parametrize("seed", range(5))
def test_changed_keys_names_what_differs_also_across_a_rebuild(seed: int) -> None:
    """Against a dict model: puts, replacements and removes, with sizes that make ``updated``
    rebuild the shards (then every entry is compared)."""
    generator = random.Random(seed)
    print(f"seed {seed}")
    model = {key: object() for key in range(generator.randrange(0, 300))}
    current: PersistentMap[int, object] = PersistentMap(model)
    for _ in range(40):
        older, before = current, dict(model)
        puts = {generator.randrange(600): object() for _ in range(generator.randrange(0, 40))}
        if generator.random() < 0.2:  # reput an unchanged value: not a change
            puts.update(dict(generator.sample(sorted(model.items()), min(3, len(model)))))
        removes = generator.sample(sorted(model), min(len(model), generator.randrange(0, 60)))
        current = older.updated(puts, removes)
        model.update(puts)
        for key in removes:
            model.pop(key, None)
        expected = {k for k in before.keys() | model.keys() if before.get(k) is not model.get(k)}
        assert current.changed_keys(older) == expected
        assert older.changed_keys(current) == expected


def test_replay_batches_equals_record_by_record_replay() -> None:
    batches = []
    offset = 0
    for chunk in (BASE_RECORDS[:3], BASE_RECORDS[3:8], BASE_RECORDS[8:]):
        batches.append(DecodedBatch(offset, 1, 0, False, tuple(chunk)))
        offset += len(chunk)
    assert replay_batches(MetadataImage.EMPTY, batches) == replay(BASE_RECORDS)
    # Through the codec too.
    encoded = [
        decode_batch(
            encode_batch(base_offset=b.base_offset, epoch=1, timestamp_ms=0, records=b.records).data
        )
        for b in batches
    ]
    assert replay_batches(MetadataImage.EMPTY, encoded) == replay(BASE_RECORDS)


def test_one_delta_per_batch_equals_one_delta_for_all() -> None:
    image = MetadataImage.EMPTY
    for offset, record in enumerate(BASE_RECORDS):
        image = replay_records(image, [(offset, record)])
    assert image == replay(BASE_RECORDS)


# ----- local changes --------------------------------------------------------------------------


def test_local_changes_creates_and_deletes(base: MetadataImage) -> None:
    delta = MetadataDelta(base)
    records: list[Record] = [
        *topic("new", ID_C, partitions=2, replicas=(2, 0)),  # broker 2: p0, p1
        RemoveTopicRecord(ID_B),  # payments on 1, 2: both partitions go
        PartitionChangeRecord(ID_A, 1, replicas=(1, 2), isr=(1, 2)),  # moves 0 -> 2
    ]
    for offset, record in enumerate(records, start=base.offset + 1):
        delta.replay(record, offset)
    on_2 = delta.local_changes(2)
    assert on_2.creates == {
        ID_C: LocalTopicPartitions(ID_C, "new", frozenset({0, 1})),
        ID_A: LocalTopicPartitions(ID_A, "orders", frozenset({1})),
    }
    assert on_2.deletes == {ID_B: LocalTopicPartitions(ID_B, "payments", frozenset({0, 1}))}
    on_0 = delta.local_changes(0)
    assert on_0.creates == {ID_C: LocalTopicPartitions(ID_C, "new", frozenset({0, 1}))}
    assert on_0.deletes == {ID_A: LocalTopicPartitions(ID_A, "orders", frozenset({1}))}
    assert delta.local_changes(7).is_empty


def test_topic_created_and_deleted_in_one_delta_leaves_no_trace(base: MetadataImage) -> None:
    delta = MetadataDelta(base)
    for offset, record in enumerate(
        [*topic("brief", ID_C, replicas=(0, 1, 2)), RemoveTopicRecord(ID_C)],
        start=base.offset + 1,
    ):
        delta.replay(record, offset)
    for broker_id in (0, 1, 2):
        assert delta.local_changes(broker_id).is_empty
    after = delta.apply()
    assert ID_C not in after.topics_by_id and "brief" not in after.topics_by_name
    assert after.deleted_topics[ID_C].name == "brief"  # the id stays used


def test_name_recreated_in_one_delta_is_a_delete_and_a_create(base: MetadataImage) -> None:
    delta = MetadataDelta(base)
    for offset, record in enumerate(
        [RemoveTopicRecord(ID_A), *topic("orders", ID_C, partitions=1, replicas=(0,))],
        start=base.offset + 1,
    ):
        delta.replay(record, offset)
    changes = delta.local_changes(0)
    assert changes.deletes == {ID_A: LocalTopicPartitions(ID_A, "orders", frozenset({0, 1, 2}))}
    assert changes.creates == {ID_C: LocalTopicPartitions(ID_C, "orders", frozenset({0}))}
    assert delta.apply().topics_by_name["orders"] == ID_C


# ----- PersistentMap --------------------------------------------------------------------------


def test_persistent_map_basics() -> None:
    m: PersistentMap[str, int] = PersistentMap({"a": 1, "b": 2})
    assert m["a"] == 1 and m.get("z") is None and m.get("z", 5) == 5
    assert (
        "a" in m and "z" not in m and m.__contains__([]) is False
    )  # an unhashable probe is not a key
    assert m == {"a": 1, "b": 2} and m != {"a": 1}
    assert sorted(m.items()) == [("a", 1), ("b", 2)] and sorted(m.values()) == [1, 2]
    assert m.updated({}) is m
    n = m.updated({"c": 3}, ["a", "missing"])
    assert n == {"b": 2, "c": 3} and m == {"a": 1, "b": 2}
    with pytest.raises(TypeError):
        hash(m)
    assert "PersistentMap" in repr(PersistentMap({i: i for i in range(100)}))


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.tuples(st.booleans(), st.integers(0, 400), st.integers()),
        max_size=300,
    ),
    st.integers(1, 40),
)
def test_persistent_map_behaves_like_a_dict(ops: list[tuple[bool, int, int]], chunk: int) -> None:
    model: dict[int, int] = {}
    pmap: PersistentMap[int, int] = PersistentMap()
    history = [(pmap, dict(model))]
    for start in range(0, len(ops), chunk):
        puts: dict[int, int] = {}
        removes: set[int] = set()
        for is_put, key, value in ops[start : start + chunk]:
            if is_put:
                puts[key] = value
                removes.discard(key)
                model[key] = value
            else:
                removes.add(key)
                puts.pop(key, None)
                model.pop(key, None)
        pmap = pmap.updated(puts, removes)
        history.append((pmap, dict(model)))
    for snapshot, expected in history:  # every older version is intact
        assert len(snapshot) == len(expected)
        assert dict(snapshot.items()) == expected
        assert all(snapshot[k] == v for k, v in expected.items())
