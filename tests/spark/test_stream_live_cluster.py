"""A Structured Streaming query follows the metadata log of a running quorum into Parquet, is
stopped and started again from its checkpoint while topics are created and deleted, and the
table it wrote holds every offset of the log exactly once.

Three real controller processes (quorum/harness.py) with small segments (the log rolls during
the test), test brokers heartbeating, and a thread creating topics and deleting every other one
through the AdminClient. The query (``readStream.format("metaquorum")`` on the leader's
``__cluster_metadata-0``, Spark's Parquet file sink, a checkpoint) runs in two lives: the first
is stopped while the writes go on, the second resumes from the checkpoint. Afterwards the table
must hold the offsets 0..N once each (no duplicate from the restart, no gap at it), the same
(offset, epoch, type) rows as ``metaquorum log dump`` of the leader, and every acknowledged
creation and deletion with its topic id.
"""

from __future__ import annotations

import threading
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from quorum.admin import AdminClient, NewTopic, TopicCollection
from quorum.analytics.log_files import list_log_files
from quorum.analytics.source import MetaquorumDataSource
from quorum.analytics.stream import checkpointed_offset
from quorum.harness import FakeBrokers, process_cluster, wait_until
from quorum.metadata.records import KAFKA_TYPE_NAMES
from quorum.security.tls import ClientSecurity

pytestmark = [pytest.mark.process, pytest.mark.slow]

SETTINGS = {"metadata.log.segment.bytes": 8_192}
PAUSE_BETWEEN_CALLS_S = 0.02
TOPICS_PER_LIFE = 30


class Churn(threading.Thread):
    """Creates topics one request at a time and deletes every other one; remembers each
    acknowledged call's topic id and metadata offset."""

    def __init__(self, bootstrap: str, security: ClientSecurity) -> None:
        super().__init__(daemon=True)
        self.bootstrap = bootstrap
        self.security = security
        self.created: dict[str, tuple[str, int]] = {}  # name -> (topic id, offset)
        self.deleted: dict[str, int] = {}  # topic id -> offset
        self.error: BaseException | None = None
        self._stop_requested = threading.Event()

    @property
    def last_offset(self) -> int:
        return max([*(o for _, o in self.created.values()), *self.deleted.values(), -1])

    def run(self) -> None:
        try:
            with AdminClient(self.bootstrap, security=self.security) as admin:
                n = 0
                while not self._stop_requested.is_set():
                    name = f"stream-{n}"
                    created = admin.create_topics([NewTopic(name, 2, 2)])
                    topic_id = str(created.topic_id(name))
                    self.created[name] = (topic_id, created.metadata_offset)
                    if n % 2:
                        deleted = admin.delete_topics(TopicCollection.of_topic_names([name]))
                        deleted.all()
                        self.deleted[topic_id] = deleted.metadata_offset
                    n += 1
                    self._stop_requested.wait(PAUSE_BETWEEN_CALLS_S)
        except BaseException as exc:  # reported by the test
            self.error = exc

    def stop(self) -> None:
        self._stop_requested.set()
        self.join(timeout=30)
        assert not self.is_alive(), "the churning thread did not stop"


def start_query(spark: Any, directory: Path, table: Path, checkpoint: Path) -> Any:
    spark.dataSource.register(MetaquorumDataSource)
    return (
        spark.readStream.format("metaquorum")
        .load(str(directory))
        .writeStream.format("parquet")
        .option("path", str(table))
        .option("checkpointLocation", str(checkpoint))
        .trigger(processingTime="500 milliseconds")
        .start()
    )


def wait_committed(query: Any, checkpoint: Path, offset: int, churn: Churn) -> None:
    def reached() -> bool:
        if churn.error is not None or query.exception() is not None:
            return True
        committed = checkpointed_offset(checkpoint)
        return committed is not None and committed > offset

    wait_until(reached, 120, f"the stream committed offset {offset}")
    assert churn.error is None, churn.error
    assert query.exception() is None, query.exception()


def test_stream_follows_a_live_quorum_across_a_restart(spark: Any, tmp_path: Path) -> None:
    table, checkpoint = tmp_path / "out" / "records", tmp_path / "out" / "_checkpoints"
    with process_cluster(tmp_path / "cluster", settings=SETTINGS) as cluster:
        cluster.format()
        cluster.start_all()
        leader, _, _ = cluster.wait_for_leader(timeout_s=30)
        brokers = FakeBrokers(cluster, [101, 102, 103])
        brokers.register()
        wait_until(brokers.heartbeat_all, 20, "every test broker unfenced")
        directory = cluster.nodes[leader].metadata_dir
        churn = Churn(cluster.bootstrap, cluster.client_security())
        lives: list[int] = []
        try:
            churn.start()
            for life in range(2):
                query = start_query(spark, directory, table, checkpoint)
                try:
                    wanted = len(churn.created) + TOPICS_PER_LIFE
                    wait_until(
                        lambda wanted=wanted: churn.error or len(churn.created) >= wanted,
                        120,
                        f"{wanted} topics created",
                    )
                    wait_committed(query, checkpoint, churn.last_offset, churn)
                finally:
                    query.stop()  # while the churn goes on: the next life resumes mid-stream
                committed = checkpointed_offset(checkpoint)
                assert committed is not None
                lives.append(committed)
                if life == 0:
                    first_life_rows = spark.read.parquet(str(table)).count()
            churn.stop()
            last = churn.last_offset
            query = start_query(spark, directory, table, checkpoint)  # the third life ends it
            try:
                wait_committed(query, checkpoint, last, churn)
            finally:
                query.stop()
        finally:
            churn.stop()
            brokers.stop()
        current = cluster.leader()
        assert current is not None and current[0] == leader, "the leader changed"
        rows = spark.read.parquet(str(table)).select("offset", "epoch", "record_type", "topic_id")
        rows = [tuple(r) for r in rows.orderBy("offset").collect()]
        topic_names = {
            r[0]: r[1]
            for r in spark.read.parquet(str(table))
            .where("record_type = 'TopicRecord'")
            .select("topic.name", "topic_id")
            .collect()
        }
        cluster.stop_all()
        dumped = cluster.log_dump(leader)

    assert len(list_log_files(directory)[0]) > 2, "the log rolled no segment during the test"
    assert lives[0] < lives[1], lives
    assert 0 < first_life_rows < len(rows)
    offsets = [r[0] for r in rows]
    duplicates = [o for o, n in Counter(offsets).items() if n > 1]
    assert not duplicates, f"offsets written twice: {duplicates[:10]}"
    assert offsets == list(range(len(offsets))), "offsets are not dense from 0"
    assert offsets[-1] >= last
    whole = [(d["offset"], d["epoch"], d["type"]) for d in dumped]
    assert [(r[0], r[1], KAFKA_TYPE_NAMES[r[2]]) for r in rows] == whole[: len(rows)]
    by_offset = {r[0]: r for r in rows}
    for name, (topic_id, offset) in churn.created.items():
        assert topic_names.get(name) == topic_id, f"the creation of {name} is not in the table"
        assert offset in by_offset, f"the batch of {name} (offset {offset}) is not in the table"
    removed = {r[3]: r[0] for r in rows if r[2] == "RemoveTopicRecord"}
    for topic_id, offset in churn.deleted.items():
        assert topic_id in removed, f"the deletion of {topic_id} is not in the table"
        assert removed[topic_id] <= offset
