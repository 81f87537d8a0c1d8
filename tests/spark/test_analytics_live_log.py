"""Spark reads the metadata log of a running quorum while the active controller appends to it.

Three real controller processes (quorum/harness.py) with small segments, test brokers
heartbeating, and a thread creating topics through the AdminClient as fast as they commit.
Meanwhile Spark loads the leader's ``__cluster_metadata-0`` several times. Every read must
succeed and be a prefix of the final log that ends at a batch boundary (the source stops at
the last complete batch of the segment being appended); the read after the writes stop must
hold every acknowledged creation, and agree with ``metaquorum log dump``.
"""

from __future__ import annotations

import threading
from itertools import pairwise
from pathlib import Path
from typing import Any

import pytest

from quorum.admin import AdminClient, NewTopic
from quorum.analytics.source import list_log_files, load
from quorum.harness import FakeBrokers, process_cluster, wait_until
from quorum.ids import Uuid
from quorum.metadata.records import KAFKA_TYPE_NAMES
from quorum.security.tls import ClientSecurity
from quorum.tools.log_dump import Tail, iter_frames, segment_files

pytestmark = [pytest.mark.process, pytest.mark.slow]

SETTINGS = {"metadata.log.segment.bytes": 8_192}  # several segments roll during the test
READS_WHILE_WRITING = 4
CREATES_BETWEEN_READS = 25  # >= 100 creations: > 25 KB, several segments
PAUSE_BETWEEN_CREATES_S = 0.02  # leaves the two cores some room for Spark
COLUMNS = ("offset", "epoch", "record_type", "topic_id", "topic.name", "partition.id", "broker.id")


class Creator(threading.Thread):
    """Creates topics one request at a time until stopped; remembers what was acknowledged."""

    def __init__(self, bootstrap: str, security: ClientSecurity) -> None:
        super().__init__(daemon=True)
        self.bootstrap = bootstrap
        self.security = security
        self.acknowledged: dict[str, tuple[Uuid, int]] = {}  # name -> (id, metadata_offset)
        self.error: BaseException | None = None
        self._stop_requested = threading.Event()

    def run(self) -> None:
        try:
            with AdminClient(self.bootstrap, security=self.security) as admin:
                n = 0
                while not self._stop_requested.is_set():
                    name = f"live-{n}"
                    created = admin.create_topics([NewTopic(name, 2, 2)])
                    self.acknowledged[name] = (created.topic_id(name), created.metadata_offset)
                    n += 1
                    self._stop_requested.wait(PAUSE_BETWEEN_CREATES_S)
        except BaseException as exc:  # reported by the test
            self.error = exc

    def stop(self) -> None:
        self._stop_requested.set()
        self.join(timeout=30)
        assert not self.is_alive(), "the creating thread did not stop"


def read_rows(spark: Any, directory: Path) -> list[tuple[Any, ...]]:
    df = load(spark, directory).select(*COLUMNS).orderBy("offset")
    return [tuple(row) for row in df.collect()]


def batch_ends(directory: Path) -> set[int]:
    """The end offset of every batch of the log, from the frame walk ``log dump`` uses."""
    ends = set()
    for item in iter_frames(segment_files(directory)):
        if isinstance(item, Tail):
            break
        ends.add(item.batch.end_offset)
    return ends


def test_spark_reads_the_log_of_a_running_quorum(spark: Any, tmp_path: Path) -> None:
    with process_cluster(tmp_path, settings=SETTINGS) as cluster:
        cluster.format()
        cluster.start_all()
        leader, _, _ = cluster.wait_for_leader(timeout_s=30)
        brokers = FakeBrokers(cluster, [101, 102, 103])
        brokers.register()
        wait_until(brokers.heartbeat_all, 20, "every test broker unfenced")
        directory = cluster.nodes[leader].metadata_dir
        creator = Creator(cluster.bootstrap, cluster.client_security())
        try:
            creator.start()
            reads = []
            for _ in range(READS_WHILE_WRITING):
                wanted = len(creator.acknowledged) + CREATES_BETWEEN_READS
                wait_until(
                    lambda wanted=wanted: creator.error or len(creator.acknowledged) >= wanted,
                    30,
                    f"{wanted} topics created",
                )
                assert creator.error is None, creator.error
                reads.append(read_rows(spark, directory))  # while the leader appends
        finally:
            creator.stop()
            brokers.stop()
        assert creator.error is None, creator.error
        acknowledged = dict(creator.acknowledged)
        last_acknowledged = max(offset for _, offset in acknowledged.values())
        # Committed on a majority means appended on the leader: its log holds every creation.
        current = cluster.leader()
        assert current is not None and current[0] == leader, "the leader changed"
        final = read_rows(spark, directory)  # the controllers still run (and append NoOps)
        cluster.stop_all()
        dumped = cluster.log_dump(leader)
        ends = batch_ends(directory)

    assert len(list_log_files(directory)[0]) > 2, "the log rolled no segment during the test"
    # The read after the writes stopped: contiguous from 0, every acknowledged creation in it.
    assert [row[0] for row in final] == list(range(len(final)))
    assert final[-1][0] >= last_acknowledged
    created = {row[4]: (row[3], row[0]) for row in final if row[2] == "TopicRecord"}
    for name, (topic_id, metadata_offset) in acknowledged.items():
        assert name in created, f"the acknowledged creation of {name} is not in the log"
        assert created[name][0] == str(topic_id), name
        assert created[name][1] <= metadata_offset, name
    # Every read: a prefix of the log as log dump prints it once the processes stopped, ending
    # at a batch boundary; the reads grow (each saw the creations acknowledged before it).
    whole = [(d["offset"], d["epoch"], d["type"]) for d in dumped]
    for rows in [*reads, final]:
        # The source names types by class (TopicRecord), the dump as Kafka (TOPIC_RECORD).
        kafka_rows = [(row[0], row[1], KAFKA_TYPE_NAMES[row[2]]) for row in rows]
        assert kafka_rows == whole[: len(rows)], "a read is not a prefix of the log"
        assert len(rows) in ends, f"a read ended at offset {len(rows)}, inside a batch"
    for earlier, later in pairwise([*reads, final]):
        assert later[: len(earlier)] == earlier
    sizes = [len(rows) for rows in reads]  # each waited for new acknowledged creations
    assert sizes == sorted(set(sizes)) and sizes[-1] <= len(final), sizes
