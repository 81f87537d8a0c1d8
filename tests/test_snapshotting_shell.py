"""The snapshot shell (quorum/server/snapshotting.py) around a real driver and files."""

from __future__ import annotations

import asyncio
import random
from pathlib import Path

import structlog

from quorum.ids import Uuid
from quorum.metadata.delta import MetadataDelta
from quorum.metadata.image import MetadataImage
from quorum.metadata.records import TopicRecord
from quorum.metadata.snapshot_records import image_to_records
from quorum.raft.config import RaftConfig
from quorum.raft.messages import Envelope, Message, SnapshotId
from quorum.raft.node import RaftNode
from quorum.server.driver import Clock, RaftDriver
from quorum.server.snapshotting import fetch_and_install
from quorum.storage import SegmentedLog
from quorum.storage.snapshots import list_snapshots, write_snapshot


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
