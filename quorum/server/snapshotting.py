"""Snapshots in the I/O shell (KIP-630), shared by controllers and brokers.

- Start-up: the newest valid snapshot (a corrupt newer one is reported and skipped, as long as
  the log still covers the gap) plus the log after it.
- Taking one: when ``metadata.log.max.record.bytes.between.snapshots`` of committed batches
  have been applied since the last one (or ``metadata.log.max.snapshot.interval.ms`` passed),
  the committed image (immutable) is encoded on the event loop in slices (fsync and rename in a
  worker thread); then the core drops the in-memory log it covers (a fetcher behind it is sent
  this snapshot).
- Cleaning (Kafka's ``maybeClean``): on disk, older snapshots and the log between them are
  kept within ``metadata.max.retention.bytes`` / ``.ms``; beyond, the oldest snapshot goes
  with the whole segments before the next one. The newest snapshot always stays, and the disk
  log always covers every snapshot kept, so a corrupt newest snapshot can fall back to an older
  one at start-up.
- Fetching one: when the core reports it is behind the leader's log start, the snapshot is
  downloaded with FetchSnapshot in chunks (unless this node wrote the same one itself),
  validated, decoded in a worker thread, and installed inside the driver loop.
"""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc

from quorum.config import NodeConfig
from quorum.errors import ErrorCode
from quorum.ids import METADATA_TOPIC_ID
from quorum.metadata.batch import LogBatch
from quorum.metadata.delta import MetadataReplayError
from quorum.metadata.image import MetadataImage
from quorum.metadata.records import KRaftVersionRecord, Record
from quorum.metadata.snapshot_records import image_to_records
from quorum.raft.messages import SnapshotId
from quorum.raft.node import RaftNode
from quorum.raft.voters import VoterSet
from quorum.rpc.v1 import raft_pb2
from quorum.security.tls import ClientSecurity
from quorum.server.driver import RaftDriver
from quorum.storage import SegmentedLog
from quorum.storage.errors import StorageError
from quorum.storage.snapshots import (
    CorruptSnapshotError,
    SnapshotDownload,
    SnapshotNotFoundError,
    SnapshotWriter,
    delete_snapshots_before,
    describe_snapshot,
    last_contained_log_timestamp_ms,
    list_snapshots,
    load_snapshot_image,
    newest_valid_snapshot,
    plan_retention,
    remove_partial_snapshots,
    snapshot_path,
    snapshot_voters,
)

CHUNK_BYTES = 1024 * 1024
# Records encoded per turn of the event loop while a snapshot is written (~10-20 ms).
SLICE_RECORDS = 4096
SNAPSHOT_RETRY_S = 30.0
FETCH_SNAPSHOT_TIMEOUT_S = 10.0


class SnapshotStartupError(Exception):
    """The log and the snapshots do not fit together; the message says what to do."""


@dataclass
class Loaded:
    snapshot: SnapshotId | None
    image: MetadataImage
    batches: list[LogBatch]
    # Corrupt snapshots skipped (a metadata load error, counted in the node's metrics).
    corrupt_skipped: int = 0
    # The kraft.version and voter set the snapshot holds (KIP-853); None for a static quorum.
    snapshot_voters: tuple[int, VoterSet] | None = None


def load_at_startup(directory: Path, log: SegmentedLog, logger: Any) -> Loaded:
    """The newest valid snapshot and the log batches after it."""
    for removed in remove_partial_snapshots(directory):
        logger.warning("partial_snapshot_removed", path=str(removed))
    valid = newest_valid_snapshot(directory)
    if valid is not None:
        for skipped in valid.skipped:
            logger.error("corrupt_snapshot_skipped", problem=str(skipped))
    if valid is None:
        if log.log_start_offset > 0:
            raise SnapshotStartupError(
                f"the metadata log in {directory} starts at offset {log.log_start_offset} but no "
                "valid snapshot covers what comes before: move the directory aside and restart "
                "the node empty; it will fetch a snapshot from the leader"
            )
        return Loaded(None, MetadataImage.EMPTY, list(log.read_all()))
    snapshot = valid.snapshot_id
    if log.log_start_offset > snapshot.end_offset:
        raise SnapshotStartupError(
            f"the newest valid snapshot in {directory} ends at offset {snapshot.end_offset}, but "
            f"the log starts at {log.log_start_offset}: offsets in between are lost. Move the "
            "directory aside and restart the node empty; it will fetch a snapshot from the leader"
        )
    for skipped in valid.skipped:
        # Kept for a person to look at, under a name no snapshot listing matches, so a new
        # snapshot with the same id can be written later.
        aside = skipped.path.with_name(skipped.path.name + ".corrupt")
        skipped.path.replace(aside)
        logger.warning("corrupt_snapshot_moved_aside", path=str(aside))
    image = load_snapshot_image(directory, snapshot)
    voters = snapshot_voters(directory, snapshot)
    if log.log_end_offset < snapshot.end_offset:
        # The snapshot is durable but the log it was taken from was not fsynced that far
        # before a crash: the snapshot holds all of it, the log continues after it.
        logger.warning(
            "log_behind_snapshot",
            log_end_offset=log.log_end_offset,
            snapshot_end_offset=snapshot.end_offset,
        )
        log.truncate_fully_and_start_at(snapshot.end_offset)
    batches = list(log.read_all(snapshot.end_offset))
    if batches and batches[0].base_offset != snapshot.end_offset:
        raise SnapshotStartupError(
            f"snapshot {snapshot} ends inside a log batch (next batch at "
            f"{batches[0].base_offset}) in {directory}"
        )
    logger.info(
        "snapshot_loaded",
        end_offset=snapshot.end_offset,
        epoch=snapshot.epoch,
        topics=len(image.topics_by_id),
        log_batches_after=len(batches),
    )
    return Loaded(
        snapshot, image, batches, corrupt_skipped=len(valid.skipped), snapshot_voters=voters
    )


class Snapshotter:
    def __init__(
        self,
        *,
        directory: Path,
        log: SegmentedLog,
        driver: RaftDriver,
        bytes_between: int,
        interval_ms: int,
        retention_bytes: int,
        retention_ms: int,
        logger: Any,
    ) -> None:
        self.directory = directory
        self.retention_bytes = retention_bytes
        self.retention_ms = retention_ms
        self.log = log
        self.driver = driver
        self.node: RaftNode = driver.node
        self.bytes_between = bytes_between
        self.interval_ms = interval_ms
        self.logger = logger
        self.bytes_since = 0
        self.last_taken_s = time.monotonic()
        self.taken = 0
        # Kafka's SnapshotEmitter metrics: the latest snapshot this process wrote (until one
        # is, its age counts from start-up, as Kafka's does) and snapshots that failed.
        self.latest_generated_bytes = 0
        self.latest_generated_wall_ms = time.time_ns() // 1_000_000
        self.failures = 0
        self._running = False
        self._retry_at_s = 0.0

    @classmethod
    def for_node(
        cls,
        config: NodeConfig,
        *,
        directory: Path,
        log: SegmentedLog,
        driver: RaftDriver,
        logger: Any,
    ) -> Snapshotter:
        """A controller's or broker's snapshotter, with the node's snapshot and retention
        settings (``metadata.log.max.*``, ``metadata.max.retention.*``)."""
        return cls(
            directory=directory,
            log=log,
            driver=driver,
            bytes_between=config.metadata_log_max_record_bytes_between_snapshots,
            interval_ms=config.metadata_log_max_snapshot_interval_ms,
            retention_bytes=config.metadata_max_retention_bytes,
            retention_ms=config.metadata_max_retention_ms,
            logger=logger,
        )

    def on_committed(self, batches: Sequence[LogBatch]) -> None:
        self.bytes_since += sum(len(b.data) for b in batches)

    def due(self) -> bool:
        if self._running or self.bytes_since == 0 or time.monotonic() < self._retry_at_s:
            return False
        elapsed_ms = (time.monotonic() - self.last_taken_s) * 1000
        return self.bytes_since >= self.bytes_between or elapsed_ms >= self.interval_ms

    async def take(self, image: MetadataImage) -> SnapshotId | None:
        """Snapshot ``image`` (the committed image, immutable) and compact the log."""
        node = self.node
        end = image.offset + 1
        current = node.snapshot_id
        if image.offset < 0 or (current is not None and end <= current.end_offset):
            return None
        if end > node.high_watermark or not node.log.is_batch_boundary(end):
            return None
        # KIP-853: the voter set in force at the snapshot's end goes into it (committed, so
        # nothing the loop does meanwhile changes it).
        voters: list[Record] = []
        if node.is_dynamic:
            history = node.voter_history
            voters = [
                KRaftVersionRecord(0, history.kraft_version_before(end)),
                history.voters_before(end).to_record(),
            ]
        self._running = True
        try:
            # The batch that ends at the image's offset: its epoch names the snapshot, its
            # append time is the header's last_contained_log_timestamp_ms (Kafka's).
            (last_batch,) = node.log.read(image.offset, 0)
            started = time.monotonic()
            snapshot = SnapshotId(end, last_batch.epoch)
            if snapshot_path(self.directory, snapshot).is_file():
                # Fetched from the leader already (same id, same committed prefix).
                self.logger.info("snapshot_already_local", snapshot=str(snapshot))
            else:
                timestamp_ms = last_contained_log_timestamp_ms(last_batch)
                snapshot = await self._write(image, snapshot, timestamp_ms, voters)
                self.latest_generated_bytes = snapshot_path(self.directory, snapshot).stat().st_size
                self.latest_generated_wall_ms = time.time_ns() // 1_000_000
            await self.driver.call_in_loop(lambda: self._compact(snapshot))
            self.bytes_since = 0
            self.last_taken_s = time.monotonic()
            self.taken += 1
            # storage logs snapshot_written, the core log_compacted; this adds the duration
            self.logger.info(
                "snapshot_taken",
                end_offset=snapshot.end_offset,
                seconds=round(time.monotonic() - started, 3),
            )
            return snapshot
        except (OSError, StorageError) as exc:
            # Not fatal: the log still holds everything; try again after a pause.
            self.logger.error("snapshot_failed", end_offset=end, reason=str(exc))
            self.failures += 1
            self._retry_at_s = time.monotonic() + SNAPSHOT_RETRY_S
            return None
        finally:
            self._running = False

    async def _write(
        self,
        image: MetadataImage,
        snapshot: SnapshotId,
        timestamp_ms: int,
        voters: Sequence[Record] = (),
    ) -> SnapshotId:
        """Encode the image on the event loop in slices of ``SLICE_RECORDS`` records, letting
        the loop serve Raft and admin traffic between them, then fsync and rename in a worker
        thread. (Encoding in a worker thread instead starves the loop: the two threads convoy
        on the GIL, and with a million partitions followers time out and elect.)
        ``timestamp_ms``: the append time of the last batch the snapshot contains."""
        records = image_to_records(image)
        with SnapshotWriter(
            self.directory,
            snapshot,
            last_contained_log_timestamp_ms=timestamp_ms,
            voters=voters,
        ) as writer:
            while chunk := list(itertools.islice(records, SLICE_RECORDS)):
                writer.append(chunk)
                await asyncio.sleep(0)
            return await asyncio.to_thread(writer.freeze)

    def _compact(self, snapshot: SnapshotId) -> None:
        node = self.node
        current = node.snapshot_id
        if current is not None and snapshot.end_offset <= current.end_offset:
            return
        node.compact(snapshot)
        self.clean()

    def clean(self) -> None:
        """Apply ``metadata.max.retention.bytes`` / ``.ms`` to the snapshots and log on disk."""
        infos = []
        for snapshot in list_snapshots(self.directory):
            try:
                infos.append(describe_snapshot(self.directory, snapshot))
            except (CorruptSnapshotError, SnapshotNotFoundError) as exc:
                # Left out of the plan: deleted once a snapshot after it is the oldest kept.
                self.logger.warning("snapshot_unreadable", snapshot=str(snapshot), problem=str(exc))
        plan = plan_retention(
            infos,
            self.log.segments,
            retention_bytes=self.retention_bytes,
            retention_ms=self.retention_ms,
            now_ms=int(time.time() * 1000),
        )
        if plan.keep_from is not None:
            delete_snapshots_before(self.directory, plan.keep_from)
        if plan.log_start_offset is not None:
            self.log.delete_before(plan.log_start_offset)


async def download_snapshot(
    *,
    address: str,
    directory: Path,
    snapshot: SnapshotId,
    cluster_id: str,
    replica_id: int,
    epoch: int,
    security: ClientSecurity | None = None,
) -> None:
    """FetchSnapshot from the leader at ``address`` in chunks into a validated snapshot file,
    over a new channel with the node's client ``security`` (its current certificate)."""
    from quorum.rpc.v1 import raft_pb2_grpc  # noqa: PLC0415 - keep module import light

    client = security or ClientSecurity.plaintext()
    async with client.aio_channel(address) as channel:
        stub = raft_pb2_grpc.QuorumServiceStub(channel)
        position = 0
        with SnapshotDownload(directory, snapshot) as download:
            while True:
                answer = await stub.FetchSnapshot(
                    raft_pb2.FetchSnapshotRequest(
                        cluster_id=cluster_id,
                        topic_id=METADATA_TOPIC_ID.bytes,
                        partition_index=0,
                        replica_id=replica_id,
                        current_leader_epoch=epoch,
                        snapshot_id=raft_pb2.SnapshotId(
                            end_offset=snapshot.end_offset, epoch=snapshot.epoch
                        ),
                        position=position,
                        max_bytes=CHUNK_BYTES,
                    ),
                    timeout=FETCH_SNAPSHOT_TIMEOUT_S,
                )
                if answer.error_code != ErrorCode.NONE:
                    raise OSError(
                        f"FetchSnapshot {snapshot} at {position}: error {answer.error_code} "
                        f"{answer.error_message}"
                    )
                download.append(position, answer.unaligned_records)
                position += len(answer.unaligned_records)
                if position >= answer.size:
                    break
            download.complete()


async def fetch_and_install(
    *,
    driver: RaftDriver,
    log: SegmentedLog,
    directory: Path,
    address: str,
    snapshot: SnapshotId,
    cluster_id: str,
    on_image: Callable[[MetadataImage], None],
    logger: Any,
    security: ClientSecurity | None = None,
) -> bool:
    """Behind the leader's log start: download its snapshot, then, inside the driver loop, make
    it the node's state (``on_image`` replaces the node's image). On failure the core is told
    to fetch again (the leader names its current snapshot). Returns whether it installed."""
    node = driver.node
    try:
        if snapshot_path(directory, snapshot).is_file():
            # This node wrote the same snapshot itself (same end offset and epoch: the same
            # committed prefix), e.g. just before its log diverged from the new leader's.
            logger.info("snapshot_already_local", snapshot=str(snapshot))
        else:
            await download_snapshot(
                address=address,
                directory=directory,
                snapshot=snapshot,
                cluster_id=cluster_id,
                replica_id=node.node_id,
                epoch=node.epoch,
                security=security,
            )
        # Decoding a large snapshot takes seconds: off the loop, which keeps serving.
        image = await asyncio.to_thread(load_snapshot_image, directory, snapshot)
        voters = await asyncio.to_thread(snapshot_voters, directory, snapshot)
    except (OSError, grpc.aio.AioRpcError, StorageError, MetadataReplayError) as exc:
        # Any failure must reach the core, or it would wait for this snapshot forever.
        logger.warning("snapshot_fetch_failed", snapshot=str(snapshot), reason=str(exc))
        if isinstance(exc, CorruptSnapshotError) and exc.path.is_file():
            # A damaged local copy: set it aside so the next attempt downloads the snapshot.
            exc.path.replace(exc.path.with_name(exc.path.name + ".corrupt"))
        await driver.call_in_loop(lambda: node.snapshot_fetch_failed(driver.clock.now_ms()))
        return False

    def install() -> None:
        log.truncate_fully_and_start_at(snapshot.end_offset)
        on_image(image)
        if image.metadata_topic_id is not None:
            node.set_metadata_topic_id(image.metadata_topic_id)
        node.install_snapshot(snapshot, driver.clock.now_ms(), voters)
        delete_snapshots_before(directory, snapshot)  # the core logs snapshot_installed

    await driver.call_in_loop(install)
    return True
