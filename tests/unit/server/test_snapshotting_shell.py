"""The snapshot shell (quorum/server/snapshotting.py) around a real driver and files."""

from __future__ import annotations

import asyncio
import random
from pathlib import Path

import structlog

from quorum.ids import Uuid
from quorum.metadata.batch import encode_batch
from quorum.metadata.delta import MetadataDelta
from quorum.metadata.image import MetadataImage
from quorum.metadata.records import TopicRecord
from quorum.metadata.snapshot_records import image_to_records
from quorum.raft.config import RaftConfig
from quorum.raft.messages import Envelope, Message, SnapshotId
from quorum.raft.node import RaftNode
from quorum.server.driver import Clock, RaftDriver
from quorum.server.snapshotting import Snapshotter, fetch_and_install
from quorum.storage import ElectionStore, SegmentedLog
from quorum.storage.snapshots import describe_snapshot, list_snapshots, write_snapshot


async def _unreachable(envelope: Envelope) -> Message:
    raise OSError("no leader reachable in this test")


def observer_driver(directory: Path) -> RaftDriver:
    log = SegmentedLog.open(directory)
    clock = Clock()
    node = RaftNode(
        node_id=101,
        voters=frozenset({1}),
        cluster_id="snapshot-shell-test",
        config=RaftConfig(election_timeout_ms=50, fetch_timeout_ms=200, fetch_max_wait_ms=100),
        rng=random.Random(1),
        now_ms=clock.now_ms(),
        election_state=None,
        batches=[],
    )
    return RaftDriver(
        node=node, log=log, election_store=None, send_request=_unreachable, clock=clock
    )


def image_with_topic(offset: int) -> MetadataImage:
    delta = MetadataDelta(MetadataImage.EMPTY)
    delta.replay(TopicRecord(name="kept", topic_id=Uuid.random(), internal=False), offset)
    return delta.apply()


def test_a_snapshot_already_written_locally_is_installed_without_a_download(
    tmp_path: Path,
) -> None:
    """A node that wrote snapshot S itself and is then told by a new leader to load S (its log
    diverged after S) installs its own file: no download, which would find S existing and
    fail, leaving the core waiting for the snapshot forever."""
    image = image_with_topic(41)
    snapshot = write_snapshot(tmp_path, 42, 0, image_to_records(image), 0)
    assert snapshot == SnapshotId(42, 0)  # the node (epoch 0) is at or past its epoch
    installed: list[MetadataImage] = []

    async def scenario() -> None:
        driver = observer_driver(tmp_path)
        task = asyncio.create_task(driver.run())
        await fetch_and_install(
            driver=driver,
            log=driver.log,  # type: ignore[arg-type]
            directory=tmp_path,
            address="127.0.0.1:1",  # nothing listens: a download would fail
            snapshot=snapshot,
            cluster_id="snapshot-shell-test",
            on_image=installed.append,
            logger=structlog.get_logger("test"),
        )
        assert driver.node.snapshot_id == snapshot
        driver.stop()
        await task
        driver.log.close()  # type: ignore[attr-defined]

    asyncio.run(scenario())
    assert [i.topic_by_name("kept") is not None for i in installed] == [True]
    assert list_snapshots(tmp_path) == [snapshot]
    with SegmentedLog.open(tmp_path) as log:
        assert log.log_start_offset == log.log_end_offset == 42


def test_a_snapshot_carries_the_timestamp_of_the_last_batch_it_contains(tmp_path: Path) -> None:
    """The header's ``last_contained_log_timestamp_ms`` is the append time of the last batch
    the snapshot contains (Kafka's lastContainedLogTimestamp), which ``metadata.max.retention.ms``
    ages snapshots by; the snapshot's creation time made a snapshot of a month-old log look new
    and kept it past its retention."""
    appended_ms = 1_600_000_000_000  # the leader appended the batch in September 2020
    with SegmentedLog.open(tmp_path) as log:
        log.append(
            [
                encode_batch(
                    base_offset=0,
                    epoch=0,
                    timestamp_ms=appended_ms,
                    records=[TopicRecord(name="kept", topic_id=Uuid.random(), internal=False)],
                )
            ]
        )
        log.flush()

    async def scenario() -> SnapshotId | None:
        log = SegmentedLog.open(tmp_path)
        store = ElectionStore(tmp_path / "quorum-state")
        clock = Clock()
        node = RaftNode(
            node_id=1,
            voters=frozenset({1}),
            cluster_id="snapshot-shell-test",
            config=RaftConfig(election_timeout_ms=50, fetch_timeout_ms=200, fetch_max_wait_ms=100),
            rng=random.Random(1),
            now_ms=clock.now_ms(),
            election_state=store.read(),
            batches=list(log.read_all()),
        )
        driver = RaftDriver(
            node=node, log=log, election_store=store, send_request=_unreachable, clock=clock
        )
        task = asyncio.create_task(driver.run())
        # Leader of epoch 1 once its LeaderChangeMessage (offset 1) commits, and with it offset 0.
        assert await driver.wait_for(lambda: node.is_leader() and node.high_watermark > 1, 10)
        snapshotter = Snapshotter(
            directory=tmp_path,
            log=log,
            driver=driver,
            bytes_between=1,
            interval_ms=3_600_000,
            retention_bytes=-1,
            retention_ms=-1,
            logger=structlog.get_logger("test"),
        )
        taken = await snapshotter.take(image_with_topic(0))
        driver.stop()
        await task
        log.close()
        return taken

    snapshot = asyncio.run(scenario())
    assert snapshot == SnapshotId(1, 0)
    header = describe_snapshot(tmp_path, snapshot)
    assert header.last_contained_log_timestamp_ms == appended_ms
