"""``metaquorum broker pending-deletions``: the dry run of reconciliation, offline.

It reads the broker's local copy of the metadata log without modifying it (the storage layer's
read-only reader, as ``log dump``, stopping at the last complete batch), replays it into an image,
scans ``log.dirs`` and plans a FULL reconciliation against that image. Nothing is changed on
disk. The local log may hold a tail the quorum has not committed yet; the report says which
offset it replayed up to.
"""

from __future__ import annotations

import time
from pathlib import Path

from broker.logdirs import LogDirs
from broker.plan_report import describe_plan
from broker.reconcile import ReconcileMode
from broker.server import assigned_partitions
from quorum.config import NodeConfig
from quorum.metadata.batch import decode_batch
from quorum.metadata.delta import MetadataDelta
from quorum.metadata.image import MetadataImage
from quorum.server.raft_manager import METADATA_PARTITION_DIR
from quorum.storage.frames import Frame, read_frames, segment_files


def local_image(metadata_dir: Path) -> MetadataImage:
    """The image the broker's local metadata log describes (read-only). Damage that is not a
    torn tail raises ``quorum.storage.frames.CorruptFrameError``."""
    segments = segment_files(metadata_dir) if metadata_dir.is_dir() else []
    if not segments:
        return MetadataImage.EMPTY
    delta = MetadataDelta(MetadataImage.EMPTY)
    for item in read_frames(segments):
        if isinstance(item, Frame):
            delta.replay_batch(decode_batch(item.batch.data))
    return delta.apply()


def pending_deletions_report(config: NodeConfig) -> list[dict[str, object]]:
    image = local_image(config.metadata_log_dir / METADATA_PARTITION_DIR)
    log_dirs = LogDirs(config.log_dirs)
    plan = log_dirs.plan(
        assigned=assigned_partitions(image, config.node_id),
        mode=ReconcileMode.FULL,
        now_ms=time.time_ns() // 1_000_000,
        delete_delay_ms=config.delete_topic_delay_ms,
    )
    rows: list[dict[str, object]] = [
        {
            "kind": "metadata",
            "replayed_up_to_offset": image.offset,
            "topics": len(image.topics_by_id),
            "bytes_pending_deletion": log_dirs.bytes_pending_deletion(),
        }
    ]
    rows += [{"kind": "pending_deletion", **row} for row in log_dirs.describe_pending()]
    rows += [{"kind": "would", **row} for row in describe_plan(plan)]
    return rows
