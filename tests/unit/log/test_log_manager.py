"""The broker's partition logs (broker/log/manager.py) and the checkpoint files in Kafka's text
format (broker/log/checkpoints.py): opening by topic id (KIP-516), closing before a move to
deleting/, and a new incarnation under the same name that inherits nothing."""

from __future__ import annotations

import os
import random
from pathlib import Path

import pytest
import structlog

from broker import partition_metadata
from broker.log.checkpoints import (
    CheckpointError,
    read_epoch_checkpoint,
    read_offset_checkpoint,
    write_epoch_checkpoint,
    write_offset_checkpoint,
)
from broker.log.config import LogConfig
from broker.log.errors import LogClosedError
from broker.log.manager import (
    InconsistentTopicIdError,
    LogManager,
    LogNotHereError,
    LogTarget,
)
from broker.logdirs import LogDirs
from broker.reconcile import ReconcileMode
from quorum.ids import Uuid
from tests.unit.log.test_partition_log import NOW_MS, produced, read_all

LOGGER = structlog.get_logger("test")


def test_offset_checkpoint_is_kafkas_text_format(tmp_path: Path) -> None:
    path = tmp_path / "recovery-point-offset-checkpoint"
    write_offset_checkpoint(path, {("orders", 1): 42, ("orders", 0): 7, ("a.b-c", 3): 0})
    assert path.read_text() == "0\n3\na.b-c 3 0\norders 0 7\norders 1 42\n"
    assert read_offset_checkpoint(path) == {("orders", 0): 7, ("orders", 1): 42, ("a.b-c", 3): 0}
    assert read_offset_checkpoint(tmp_path / "missing") == {}
    assert not (tmp_path / "recovery-point-offset-checkpoint.tmp").exists()


def test_epoch_checkpoint_is_kafkas_text_format(tmp_path: Path) -> None:
    path = tmp_path / "leader-epoch-checkpoint"
    write_epoch_checkpoint(path, [(0, 0), (3, 120)])
    assert path.read_text() == "0\n2\n0 0\n3 120\n"
    assert read_epoch_checkpoint(path) == [(0, 0), (3, 120)]


@pytest.mark.parametrize(
    "text",
    [
        "1\n0\n",  # unknown version
        "0\n2\norders 0 1\n",  # count says 2, one entry
        "0\n1\norders zero 1\n",
        "0\n1\norders 0\n",
        "\xff",
    ],
)
def test_malformed_offset_checkpoints_are_refused(tmp_path: Path, text: str) -> None:
    path = tmp_path / "log-start-offset-checkpoint"
    path.write_bytes(text.encode("latin-1"))
    with pytest.raises(CheckpointError):
        read_offset_checkpoint(path)


def test_epochs_must_increase(tmp_path: Path) -> None:
    path = tmp_path / "leader-epoch-checkpoint"
    path.write_text("0\n2\n3 10\n2 20\n")
    with pytest.raises(CheckpointError, match="both must increase"):
        read_epoch_checkpoint(path)


def make_partition(log_dir: Path, name: str, topic_id: Uuid) -> Path:
    path = log_dir / name
    path.mkdir(parents=True)
    (path / "partition.metadata").write_bytes(partition_metadata.render(topic_id))
    return path


def test_a_log_is_opened_only_under_its_own_topic_id(tmp_path: Path) -> None:
    old, new = Uuid.random(), Uuid.random()
    make_partition(tmp_path, "orders-0", old)
    logs = LogManager([tmp_path], LOGGER, clock=lambda: NOW_MS)
    with pytest.raises(InconsistentTopicIdError) as caught:
        logs.get(new, "orders", 0)
    assert caught.value.found == old
    with pytest.raises(LogNotHereError):
        logs.get(old, "orders", 1)
    log = logs.get(old, "orders", 0)
    assert logs.get(old, "orders", 0) is log


def test_moving_aside_closes_the_log_and_a_new_incarnation_starts_at_zero(tmp_path: Path) -> None:
    """KIP-516 on data: `orders` deleted and created again. The old directory's log is closed
    before it moves to deleting/ (a caller still holding it gets LogClosedError), its
    checkpoint entries are dropped first, and the new directory's log starts at offset 0
    and never reads the old incarnation's files."""
    log_dir = tmp_path / "logs"
    old, new = Uuid.random(), Uuid.random()
    logs = LogManager([log_dir], LOGGER, clock=lambda: NOW_MS)
    dirs = LogDirs([log_dir], LOGGER, on_move_aside=logs)
    log_dir.mkdir()
    dirs.scan()
    dirs.reconcile(
        assigned={(old, 0): "orders"},
        mode=ReconcileMode.FULL,
        now_ms=NOW_MS,
        delete_delay_ms=60_000,
    )
    log = logs.get(old, "orders", 0)
    for seed in range(5):
        log.append(produced(10, seed=seed), 0, LogConfig(), NOW_MS)
    old_records = read_all(log)
    logs.write_checkpoints()
    assert (log_dir / "recovery-point-offset-checkpoint").read_text() == "0\n1\norders 0 0\n"
    assert "orders 0 0" in (log_dir / "log-start-offset-checkpoint").read_text()

    dirs.reconcile(
        assigned={(new, 0): "orders"},
        mode=ReconcileMode.INCREMENTAL,
        now_ms=NOW_MS,
        delete_delay_ms=60_000,
        removed={(old, 0)},
    )
    with pytest.raises(LogClosedError):
        log.read(0, 100, True)
    assert (log_dir / "recovery-point-offset-checkpoint").read_text() == "0\n0\n"
    assert f"{old}_0" in os.listdir(log_dir / "deleting")
    with pytest.raises(InconsistentTopicIdError):  # by the old id: the name holds the new one
        logs.get(old, "orders", 0)
    fresh = logs.get(new, "orders", 0)
    assert fresh.log_end_offset == 0 and fresh.log_start_offset == 0
    assert fresh.append(produced(2, seed=9), 0, LogConfig(), NOW_MS).base_offset == 0
    assert [r.offset for r in read_all(fresh)] == [0, 1]
    assert read_all(fresh) != old_records[:2]
    logs.close()


def test_recovery_points_survive_a_clean_close(tmp_path: Path) -> None:
    topic = Uuid.random()
    make_partition(tmp_path, "t-0", topic)
    logs = LogManager([tmp_path], LOGGER, clock=lambda: NOW_MS)
    log = logs.get(topic, "t", 0)
    for seed in range(3):
        log.append(produced(4, seed=seed), 0, LogConfig(), NOW_MS)
    logs.close()
    assert (tmp_path / "recovery-point-offset-checkpoint").read_text() == "0\n1\nt 0 12\n"
    again = LogManager([tmp_path], LOGGER, clock=lambda: NOW_MS).get(topic, "t", 0)
    assert again.truncated_bytes == 0 and again.log_end_offset == 12


def test_a_close_whose_checkpoints_cannot_be_written_still_closes_every_log(
    tmp_path: Path,
) -> None:
    """A broker stopping because its disk fails must not fail again in its clean close (the
    cause of the stop would be lost): the checkpoint write fails, is logged, and every log is
    closed; the previous checkpoint stays whole."""
    topic = Uuid.random()
    make_partition(tmp_path, "t-0", topic)
    logs = LogManager([tmp_path], LOGGER, clock=lambda: NOW_MS)
    log = logs.get(topic, "t", 0)
    log.append(produced(4, seed=1), 0, LogConfig(), NOW_MS)
    logs.write_checkpoints()
    before = (tmp_path / "recovery-point-offset-checkpoint").read_text()
    log.append(produced(4, seed=2), 0, LogConfig(), NOW_MS)
    (tmp_path / "recovery-point-offset-checkpoint.tmp").mkdir()  # every write of it fails
    with structlog.testing.capture_logs() as events:
        logs.close()
    assert [e["event"] for e in events if e["log_level"] == "warning"] == [
        "checkpoints_not_written"
    ]
    assert (tmp_path / "recovery-point-offset-checkpoint").read_text() == before
    with pytest.raises(LogClosedError):
        logs.get(topic, "t", 0)


def test_retention_runs_over_the_partitions_led_here(tmp_path: Path) -> None:
    topic = Uuid.random()
    make_partition(tmp_path, "t-0", topic)
    logs = LogManager([tmp_path], LOGGER, clock=lambda: NOW_MS + 10**9)
    config = LogConfig(segment_bytes=800, retention_ms=1_000)
    log = logs.get(topic, "t", 0)
    for seed in range(8):
        log.append(produced(2, seed=seed), 0, config, NOW_MS)
    log.update_high_watermark(log.log_end_offset)
    deleted = logs.run_retention(
        [LogTarget(topic, "t", 0, config), LogTarget(Uuid.random(), "u", 0, config)]
    )
    assert deleted >= 2 and log.log_start_offset == log.log_end_offset == 16
    assert (tmp_path / "log-start-offset-checkpoint").read_text() == "0\n1\nt 0 16\n"


def test_the_cleaner_runs_over_compacted_replicas_and_reports_kafkas_gauges(
    tmp_path: Path,
) -> None:
    from broker.metrics import cleaner_families  # noqa: PLC0415
    from tests.unit.log.test_log_cleaner import COMPACT, generate  # noqa: PLC0415

    topic = Uuid.random()
    make_partition(tmp_path, "c-0", topic)
    logs = LogManager([tmp_path], LOGGER, clock=lambda: NOW_MS)
    log = logs.get(topic, "c", 0)
    generate(random.Random(3), log, 60, 5)
    size = log.size_bytes()
    # A topic that is not compacted is left alone; a partition not here is skipped.
    assert logs.run_cleaner([LogTarget(topic, "c", 0, LogConfig())]) == 0
    targets = [LogTarget(topic, "c", 0, COMPACT), LogTarget(Uuid.random(), "u", 0, COMPACT)]
    assert logs.run_cleaner(targets) == 1
    assert log.size_bytes() < size
    metrics = logs.cleaner_metrics
    assert 0 < metrics.recopy_percent < 100 and metrics.max_clean_time_s > 0
    rendered = {s.name: s.value for f in cleaner_families(metrics) for s in f.samples}
    assert rendered == {
        "kafka_log_logcleaner_cleaner_recopy_percent": metrics.recopy_percent,
        "kafka_log_logcleaner_max_clean_time_secs": metrics.max_clean_time_s,
    }
    assert logs.run_cleaner(targets) == 0  # nothing dirty is left
    first_dirty = log.first_dirty_offset
    assert first_dirty == log.segments[-1].base_offset > 0
    logs.close()
    # cleaner-offset-checkpoint, Kafka's text format: a restart does not clean it all again.
    checkpoint = (tmp_path / "cleaner-offset-checkpoint").read_text()
    assert checkpoint == f"0\n1\nc 0 {first_dirty}\n"
    again = LogManager([tmp_path], LOGGER, clock=lambda: NOW_MS)
    reopened = again.get(topic, "c", 0)
    assert reopened.first_dirty_offset == first_dirty
    reopened.update_high_watermark(reopened.log_end_offset)
    assert again.run_cleaner(targets) == 0
    again.close()
