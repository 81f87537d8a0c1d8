"""The replay jobs on real logs (``SegmentedLog`` + ``encode_batch``, several small segments):
each job's output checked exactly on a scripted history, ``state_as_of`` against a plain-Python
replay, and ``metaquorum replay`` end to end. One Spark session for all (conftest.py)."""

from __future__ import annotations

import io
import random
from collections.abc import Iterator
from functools import reduce
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import functions as F

from quorum.analytics import jobs, source
from quorum.analytics.replay import run_replay
from quorum.ids import Uuid
from quorum.metadata.records import (
    BrokerEndpoint,
    ConfigRecord,
    ConfigResourceType,
    FenceBrokerRecord,
    LeaderChangeMessage,
    PartitionChangeRecord,
    PartitionRecord,
    Record,
    RegisterBrokerRecord,
    RemoveTopicRecord,
    TopicRecord,
    UnfenceBrokerRecord,
)
from tests.spark.test_analytics_source import METADATA_DIR, timestamp_ms, write_log

A, B, C, D = (Uuid.random(random.Random(seed)) for seed in range(4))
INC = [Uuid.random(random.Random(100 + n)) for n in range(3)]
ENDPOINT = BrokerEndpoint("PLAINTEXT", "localhost", 9092)
VOTERS = (1, 2, 3)

# (epoch, records); offsets follow in order. Comments give each batch's base offset.
SCRIPT: list[tuple[int, list[Record]]] = [
    (1, [LeaderChangeMessage(1, 1, VOTERS)]),  # 0
    (
        1,
        [
            RegisterBrokerRecord(0, INC[0], 10, (ENDPOINT,), "r0", True),
            RegisterBrokerRecord(1, INC[1], 11, (ENDPOINT,), "r1", True),
        ],
    ),  # 1
    (1, [UnfenceBrokerRecord(0, 10), UnfenceBrokerRecord(1, 11)]),  # 3
    (
        1,
        [
            TopicRecord("orders", A),
            PartitionRecord(A, 0, (0, 1), (0, 1), 0),
            PartitionRecord(A, 1, (1, 0), (1, 0), 1),
            ConfigRecord(ConfigResourceType.TOPIC, "orders", "retention.ms", "1000"),
        ],
    ),  # 5
    (1, [TopicRecord("payments", B, True), PartitionRecord(B, 0, (1,), (1,), 1)]),  # 9
    (
        1,
        [
            PartitionChangeRecord(A, 0, isr=(0,), partition_epoch=1),
            PartitionChangeRecord(A, 1, leader=0, leader_epoch=1, partition_epoch=1),
        ],
    ),  # 11
    (1, [FenceBrokerRecord(1, 11)]),  # 13
    (2, [LeaderChangeMessage(2, 2, VOTERS)]),  # 14
    (2, [RemoveTopicRecord(A)]),  # 15
    (2, [TopicRecord("orders", C), PartitionRecord(C, 0, (0, 1), (0, 1), 0)]),  # 16
    (
        2,
        [
            PartitionChangeRecord(C, 0, (1,), 1, (1,), 1, 1),
            UnfenceBrokerRecord(1, 11),
        ],
    ),  # 18
    (2, [RegisterBrokerRecord(1, INC[2], 12, (ENDPOINT,), "r1", True)]),  # 20
    (2, [RemoveTopicRecord(C)]),  # 21
    (3, [LeaderChangeMessage(3, 3, VOTERS)]),  # 22
    (3, [TopicRecord("orders", D), PartitionRecord(D, 0, (1, 0), (1, 0), 1)]),  # 23
    (3, [PartitionChangeRecord(D, 0, leader=-1, leader_epoch=1, partition_epoch=1)]),  # 25
]
END_OFFSET = 26
BATCH_OF = {}  # offset -> base offset of its batch
_offset = 0
for _, _records in SCRIPT:
    for _index in range(len(_records)):
        BATCH_OF[_offset + _index] = _offset
    _offset += len(_records)
assert _offset == END_OFFSET


def ts(offset: int) -> int:
    """The batch timestamp of the record at ``offset``."""
    return timestamp_ms(BATCH_OF[offset])


@pytest.fixture(scope="module")
def scripted_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("scripted")
    write_log(root / METADATA_DIR, SCRIPT)
    assert len(source.list_log_files(root)[0]) >= 4  # several segments
    return root


@pytest.fixture(scope="module")
def records(spark: Any, scripted_dir: Path) -> Iterator[Any]:
    df = source.load(spark, scripted_dir).cache()  # decoded once for the module's jobs
    yield df
    df.unpersist()


def millis(df: Any, *columns: str) -> Any:
    """``df`` with TIMESTAMP ``columns`` as epoch milliseconds (no time zone in the way)."""
    for column in columns:
        df = df.withColumn(column, F.unix_millis(column))
    return df


def tuples(df: Any) -> list[tuple[Any, ...]]:
    return [tuple(row) for row in df.collect()]


def test_topic_lifecycle(records: Any) -> None:
    result = millis(jobs.topic_lifecycle(records), "created_time", "deleted_time")
    assert result.columns == [
        "name",
        "topic_id",
        "created_offset",
        "created_time",
        "deleted_offset",
        "deleted_time",
        "partitions",
        "internal",
    ]
    assert tuples(result) == [
        ("orders", str(A), 5, ts(5), 15, ts(15), 2, False),
        ("payments", str(B), 9, ts(9), None, None, 1, True),
        ("orders", str(C), 16, ts(16), 21, ts(21), 1, False),
        ("orders", str(D), 23, ts(23), None, None, 1, False),
    ]


def test_name_reuse(records: Any) -> None:
    assert tuples(jobs.name_reuse(records)) == [
        (
            "orders",
            3,
            [str(A), str(C), str(D)],
            [5, 16, 23],
            [15, 21, None],
            [16 - 15, 23 - 21],
            [ts(16) - ts(15), ts(23) - ts(21)],
        )
    ]


def test_partitions_per_broker_over_time(records: Any) -> None:
    result = millis(jobs.partitions_per_broker_over_time(records), "time")
    expected = {
        0: [(6, 1, 1), (7, 2, 1), (12, 2, 2), (15, 0, 0), (17, 1, 1), (18, 0, 0), (24, 1, 0)],
        1: [
            (6, 1, 0),
            (7, 2, 1),
            (10, 3, 2),
            (12, 3, 1),
            (15, 1, 1),
            (17, 2, 1),
            (18, 2, 2),
            (21, 1, 1),
            (24, 2, 2),
            (25, 2, 1),
        ],
    }
    assert tuples(result) == [
        (broker, offset, ts(offset), partitions, leaders)
        for broker, points in expected.items()
        for offset, partitions, leaders in points
    ]


def test_leadership_timeline(records: Any) -> None:
    assert tuples(millis(jobs.leadership_timeline(records), "time")) == [
        (1, 1, [1, 2, 3], 0, ts(0), 14, ts(14) - ts(0)),
        (2, 2, [1, 2, 3], 14, ts(14), 22, ts(22) - ts(14)),
        (3, 3, [1, 2, 3], 22, ts(22), None, None),
    ]


def test_partition_elections(records: Any) -> None:
    result = millis(jobs.partition_elections(records), "time")
    assert tuples(result) == [
        (str(A), 1, 12, ts(12), 1, 0, 1, "other"),  # broker 1 stayed in the ISR
        (str(C), 0, 18, ts(18), 0, 1, 1, "previous_leader_fenced"),  # 0 left the ISR with it
        (str(D), 0, 25, ts(25), 1, -1, 1, "offline"),
    ]


def test_broker_events(records: Any) -> None:
    result = millis(jobs.broker_events(records).drop("endpoints"), "time")
    assert tuples(result) == [
        (0, "registered", 1, ts(1), 10, str(INC[0]), "r0", True),
        (1, "registered", 2, ts(2), 11, str(INC[1]), "r1", True),
        (0, "unfenced", 3, ts(3), 10, None, None, None),
        (1, "unfenced", 4, ts(4), 11, None, None, None),
        (1, "fenced", 13, ts(13), 11, None, None, None),
        (1, "unfenced", 19, ts(19), 11, None, None, None),
        (1, "registered", 20, ts(20), 12, str(INC[2]), "r1", True),
    ]
    endpoints = jobs.broker_events(records).filter("event = 'registered'").select("endpoints")
    assert {tuple(tuple(e) for e in row[0]) for row in endpoints.collect()} == {
        (("PLAINTEXT", "localhost", 9092),)
    }


# ----- state as of an offset, against a plain-Python replay ---------------------------------


def python_state(history: list[tuple[int, list[Record]]], as_of: int) -> list[tuple[Any, ...]]:
    """The image at ``as_of`` by replaying records one by one: the rows ``state_as_of`` gives."""
    topics: dict[Uuid, tuple[str, bool]] = {}
    partitions: dict[tuple[Uuid, int], dict[str, Any]] = {}
    offset = 0
    for _, batch in history:
        for record in batch:
            if offset > as_of:
                break
            if isinstance(record, TopicRecord):
                topics[record.topic_id] = (record.name, record.internal)
            elif isinstance(record, RemoveTopicRecord):
                del topics[record.topic_id]
                for key in [k for k in partitions if k[0] == record.topic_id]:
                    del partitions[key]
            elif isinstance(record, PartitionRecord):
                partitions[(record.topic_id, record.partition)] = {
                    field: getattr(record, field) for field in jobs._PARTITION_FIELDS
                }
            elif isinstance(record, PartitionChangeRecord):
                state = partitions[(record.topic_id, record.partition)]
                for field in jobs._PARTITION_FIELDS:
                    if getattr(record, field) is not None:
                        state[field] = getattr(record, field)
            offset += 1
    rows = []
    for topic_id, (name, internal) in topics.items():
        mine = sorted((p, s) for (t, p), s in partitions.items() if t == topic_id)
        if not mine:
            rows.append((str(topic_id), name, internal, None, None, None, None, None, None))
        for partition, state in mine:
            values = [list(v) if isinstance(v, tuple) else v for v in state.values()]
            rows.append((str(topic_id), name, internal, partition, *values))
    return sorted(rows, key=lambda row: (row[1], -1 if row[3] is None else row[3]))


def states_at(df: Any, offsets: list[int]) -> dict[int, list[tuple[Any, ...]]]:
    """``state_as_of`` at several offsets in one Spark job."""
    coverage = jobs.Coverage.of(df)
    frames = [jobs.state_as_of(df, n, coverage).withColumn("as_of", F.lit(n)) for n in offsets]
    rows = reduce(lambda a, b: a.unionByName(b), frames).collect()
    by_offset: dict[int, list[tuple[Any, ...]]] = {n: [] for n in offsets}
    for row in rows:
        by_offset[row["as_of"]].append(tuple(row)[:-1])
    return {
        n: sorted(found, key=lambda row: (row[1], -1 if row[3] is None else row[3]))
        for n, found in by_offset.items()
    }


def test_state_as_of_matches_a_plain_replay(records: Any) -> None:
    # Before any topic, inside a creation batch, after changes, a deletion, a reassignment, a
    # second deletion, the third incarnation and an offline partition.
    offsets = [4, 5, 6, 12, 15, 18, 21, 25]
    got = states_at(records, offsets)
    for n in offsets:
        assert got[n] == python_state(SCRIPT, n), n
    # The creation batch of "orders" (offsets 5-8): a topic without partitions yet.
    assert got[5] == [(str(A), "orders", False, None, None, None, None, None, None)]
    assert got[25] == [
        (str(D), "orders", False, 0, [1, 0], [1, 0], -1, 1, 1),
        (str(B), "payments", True, 0, [1], [1], 1, 0, 0),
    ]


def random_history(seed: int, batches: int) -> list[tuple[int, list[Record]]]:
    """Creates (names reused), partition changes of every shape, deletions, in random batches."""
    rng = random.Random(seed)
    history: list[tuple[int, list[Record]]] = [(1, [LeaderChangeMessage(1, 1, VOTERS)])]
    live: dict[Uuid, tuple[str, int]] = {}
    names = [f"t{n}" for n in range(8)]
    for _ in range(batches):
        records: list[Record] = []
        roll = rng.random()
        free = [n for n in names if n not in {name for name, _ in live.values()}]
        if roll < 0.3 and free:
            topic_id = Uuid.random(rng)
            count = rng.randrange(1, 4)
            live[topic_id] = (rng.choice(free), count)
            records.append(TopicRecord(live[topic_id][0], topic_id, rng.random() < 0.2))
            for p in range(count):
                replicas = tuple(rng.sample(range(4), 2))
                records.append(PartitionRecord(topic_id, p, replicas, replicas, replicas[0]))
        elif roll < 0.4 and live:
            topic_id = rng.choice(sorted(live))
            del live[topic_id]
            records.append(RemoveTopicRecord(topic_id))
        elif live:
            for _ in range(rng.randrange(1, 6)):
                topic_id = rng.choice(sorted(live))
                p = rng.randrange(live[topic_id][1])

                def maybe(value: Any) -> Any:
                    return value if rng.random() < 0.5 else None

                records.append(
                    PartitionChangeRecord(
                        topic_id,
                        p,
                        isr=maybe(tuple(rng.sample(range(4), rng.randrange(1, 3)))),
                        leader=maybe(rng.randrange(-1, 4)),
                        replicas=maybe(tuple(rng.sample(range(4), 2))),
                        leader_epoch=maybe(rng.randrange(10)),
                        partition_epoch=maybe(rng.randrange(10)),
                    )
                )
        if records:
            history.append((1, records))
    return history


def test_state_as_of_matches_a_plain_replay_on_a_random_history(spark: Any, tmp_path: Path) -> None:
    history = random_history(seed=11, batches=120)
    write_log(tmp_path / METADATA_DIR, history, segment_bytes=2048)
    end = sum(len(batch) for _, batch in history)
    offsets = [end // 3, 2 * end // 3, end - 1]
    got = states_at(source.load(spark, tmp_path), offsets)
    for n in offsets:
        assert got[n] == python_state(history, n), n
    # The source's endOffset gives the same image while reading only the segments it needs.
    pruned = states_at(source.load(spark, tmp_path, endOffset=end // 3 + 1), [end // 3])
    assert pruned[end // 3] == got[end // 3]


# ----- metaquorum replay --------------------------------------------------------------------


def test_run_replay_writes_parquet_a_report_and_plots(
    spark: Any, scripted_dir: Path, tmp_path: Path
) -> None:
    out = tmp_path / "out"
    stdout, stderr = io.StringIO(), io.StringIO()
    code = run_replay(scripted_dir, out, master="local[2]", stdout=stdout, stderr=stderr)
    assert code == 0, stderr.getvalue()
    printed = stdout.getvalue()
    assert "[1/12] starting Spark" in printed
    assert "[12/12] report and plots" in printed
    assert f"| orders | 3 | {A}, {C}, {D} | 1, 2 | 10, 20 |" in printed
    for name in [*jobs.JOBS, "state_as_of"]:  # acls_as_of: empty here, so no part files
        assert list((out / name).glob("*.parquet")), name
    lifecycle = spark.read.parquet(str(out / "topic_lifecycle"))
    assert lifecycle.count() == 4
    state = spark.read.parquet(str(out / "state_as_of")).orderBy("name", "partition")
    assert [tuple(r) for r in state.collect()] == python_state(SCRIPT, END_OFFSET - 1)
    report = (out / "report.md").read_text()
    assert "| topic ids ever created | 4 |" in report
    assert "| names used by more than one topic id | 1 |" in report
    assert "| partition leader elections | 3 |" in report
    assert "| partition leader elections: previous_leader_fenced | 1 |" in report
    for plot in ("topics_alive.png", "partitions_per_broker.png", "leadership_timeline.png"):
        assert (out / plot).read_bytes().startswith(b"\x89PNG"), plot
        assert f"]({plot})" in report
    assert not spark.sparkContext._jsc.sc().isStopped()  # the shared session is left running


def test_run_replay_reports_a_missing_log(tmp_path: Path) -> None:
    stderr = io.StringIO()
    assert run_replay(tmp_path / "nope", tmp_path / "out", stderr=stderr) == 1
    assert "no such directory" in stderr.getvalue()
