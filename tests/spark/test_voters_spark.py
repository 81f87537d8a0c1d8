"""Spark replays the voter history (KIP-853): ``voters_as_of`` on a real log equals the voter
set the Raft core's ``VoterSetHistory`` has in force at every offset asked, across the bootstrap
set written at the first epoch, an add, a remove, and a snapshot holding the voters; a static
quorum's voters come from its LeaderChangeMessage."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

from quorum.analytics import jobs, source
from quorum.ids import Uuid
from quorum.metadata.batch import LogBatch
from quorum.metadata.records import (
    BrokerEndpoint,
    KRaftVersionRecord,
    LeaderChangeMessage,
    NoOpRecord,
    Record,
)
from quorum.raft.messages import SnapshotId
from quorum.raft.voters import ReplicaKey, VoterNode, VoterSet, VoterSetHistory, voter_changes_in
from quorum.storage.snapshots import SnapshotWriter, snapshot_voters
from tests.spark.test_analytics_source import METADATA_DIR, write_log

DIRS = [Uuid.random(random.Random(900 + n)) for n in range(5)]


def node(node_id: int) -> VoterNode:
    return VoterNode(
        ReplicaKey(node_id, DIRS[node_id]),
        (BrokerEndpoint("CONTROLLER", "127.0.0.1", 19090 + node_id),),
    )


ONE = VoterSet([node(1)])
TWO = VoterSet([node(1), node(2)])
THREE = VoterSet([node(1), node(2), node(3)])
WITHOUT_ONE = VoterSet([node(2), node(3)])
HISTORY: list[tuple[int, list[Record]]] = [
    (1, [LeaderChangeMessage(1, 1, (1,)), KRaftVersionRecord(0, 1), ONE.to_record()]),  # 0-2
    (1, [NoOpRecord()]),  # 3
    (1, [TWO.to_record()]),  # 4
    (1, [NoOpRecord()]),  # 5
    (1, [THREE.to_record()]),  # 6
    (2, [LeaderChangeMessage(2, 2, (1, 2, 3))]),  # 7
    (2, [WITHOUT_ONE.to_record()]),  # 8
    (2, [NoOpRecord()]),  # 9
]


def expected(batches: list[LogBatch], as_of: int) -> list[tuple[int, str, list[str]]]:
    """What the Raft core has in force after every record at or below ``as_of``."""
    history = VoterSetHistory(VoterSet(), 1)
    for batch in batches:
        kraft, voters = voter_changes_in(batch)
        history.add(batch.base_offset, kraft, voters)
    return [
        (
            n.node_id,
            str(n.key.directory_id),
            [f"{e.name}://{e.host}:{e.port}" for e in n.endpoints],
        )
        for n in history.voters_before(as_of + 1)
    ]


def rows(df: Any, as_of: int, coverage: Any = None) -> list[tuple[int, str, list[str]]]:
    return [
        (r["voter_id"], r["directory_id"], list(r["endpoints"] or ()))
        for r in jobs.voters_as_of(df, as_of, coverage).collect()
    ]


def test_voters_as_of_matches_the_core_history(spark: Any, tmp_path: Path) -> None:
    directory = tmp_path / METADATA_DIR
    batches = write_log(directory, HISTORY)
    df = source.load(spark, tmp_path)
    # At the end of each batch (the core keeps a batch's voter change at its base offset).
    for as_of in (2, 3, 4, 5, 6, 7, 8, 9):
        assert rows(df, as_of) == expected(batches, as_of), as_of
    assert rows(df, 9) and {r[0] for r in rows(df, 9)} == {2, 3}


def test_voters_as_of_reads_the_snapshot_base(spark: Any, tmp_path: Path) -> None:
    """A snapshot ending at 7 holds the voter set in force there (KIP-853); the log before it
    is gone, as after retention: the voters at 6 come from the snapshot alone."""
    directory = tmp_path / METADATA_DIR
    batches = write_log(directory, HISTORY)
    with SnapshotWriter(
        directory,
        SnapshotId(7, 1),
        last_contained_log_timestamp_ms=0,
        voters=[KRaftVersionRecord(0, 1), THREE.to_record()],
    ) as writer:
        writer.freeze()
    assert snapshot_voters(directory, SnapshotId(7, 1)) == (1, THREE)
    for segment in sorted(directory.glob("*.log")):
        if int(segment.name.split(".")[0]) < 6:  # the segment from 6 holds 6 and 7
            segment.unlink()
    df = source.load(spark, tmp_path, includeSnapshots=True)
    assert rows(df, 6) == expected(batches, 6)
    assert rows(df, 9) == expected(batches, 9)


def test_static_quorum_voters_come_from_the_leader_change(spark: Any, tmp_path: Path) -> None:
    write_log(tmp_path / METADATA_DIR, [(1, [LeaderChangeMessage(2, 1, (1, 2, 3))])])
    df = source.load(spark, tmp_path)
    assert [(r["voter_id"], r["directory_id"]) for r in jobs.voters_as_of(df, 0).collect()] == [
        (1, None),
        (2, None),
        (3, None),
    ]
