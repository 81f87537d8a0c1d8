"""The asyncio driver around the core, in-process with a real log on disk (one voter)."""

from __future__ import annotations

import asyncio
import random
from pathlib import Path

from quorum.metadata.batch import decode_batch
from quorum.metadata.records import ConfigRecord, ConfigResourceType, Record
from quorum.raft.config import RaftConfig
from quorum.raft.messages import Envelope, Message
from quorum.raft.node import RaftNode
from quorum.server.driver import Clock, RaftDriver
from quorum.storage import ElectionStore, SegmentedLog


async def _no_peers(envelope: Envelope) -> Message:
    raise OSError("single-voter test: no peers")


def make_driver(directory: Path) -> RaftDriver:
    log = SegmentedLog.open(directory)
    store = ElectionStore(directory / "quorum-state")
    clock = Clock()
    node = RaftNode(
        node_id=1,
        voters=frozenset({1}),
        cluster_id="driver-test",
        config=RaftConfig(election_timeout_ms=50, fetch_timeout_ms=200, fetch_max_wait_ms=100),
        rng=random.Random(1),
        now_ms=clock.now_ms(),
        election_state=store.read(),
        batches=list(log.read_all()),
    )
    return RaftDriver(node=node, log=log, election_store=store, send_request=_no_peers, clock=clock)


def records(n: int, tag: str) -> list[Record]:
    return [ConfigRecord(ConfigResourceType.TOPIC, f"{tag}-{i}", "k", str(i)) for i in range(n)]


async def run_session(directory: Path, proposals: int) -> tuple[int, int, int]:
    """Start, wait for leadership, make ``proposals`` concurrent proposals, wait for all to
    commit; returns (batches appended for them, log end offset, high watermark)."""
    driver = make_driver(directory)
    task = asyncio.create_task(driver.run())
    assert await driver.wait_for(driver.node.is_leader, 5)
    placed = await asyncio.gather(*(driver.propose(records(2, f"p{i}")) for i in range(proposals)))
    await asyncio.gather(*(driver.wait_committed(p) for p in placed))
    batch_count = len({driver.node.log.batch_index(p.base_offset) for p in placed})
    end, hw = driver.node.log_end_offset, driver.node.high_watermark
    driver.stop()
    await task
    driver.log.close()
    return batch_count, end, hw


def test_concurrent_proposals_share_batches_and_survive_restart(tmp_path: Path) -> None:
    batch_count, end, hw = asyncio.run(run_session(tmp_path, proposals=200))
    assert hw == end
    # Group commit: 200 proposals arriving together go out in far fewer batches.
    assert batch_count < 200
    reopened = SegmentedLog.open(tmp_path)
    stored = list(reopened.read_all())
    reopened.close()
    assert stored[-1].end_offset >= end
    values = {
        r.resource_name
        for b in stored
        for r in decode_batch(b.data).records
        if isinstance(r, ConfigRecord)
    }
    assert {f"p{i}-{j}" for i in range(200) for j in range(2)} <= values
    # A restart keeps the log and the epoch moves on.
    _, end_again, _ = asyncio.run(run_session(tmp_path, proposals=1))
    assert end_again > end
