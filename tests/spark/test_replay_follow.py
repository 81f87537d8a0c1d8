"""``metaquorum replay --follow`` as a user runs it: a process following a log that grows while
it runs, stopped by SIGTERM, started again and killed with kill -9 while the log grows, started
a third time with ``--until-offset``; the Parquet table then holds every offset once (exactly
once across the restarts). Plus the flags it refuses.

The log is written by the storage layer a controller uses (``SegmentedLog``, small segments so
that it rolls), from this test process, while the command runs.
"""

from __future__ import annotations

import signal
import subprocess
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from quorum.analytics.stream import checkpointed_offset
from quorum.harness import METAQUORUM, REPO, run_cli, wait_until
from quorum.metadata.batch import encode_batch
from quorum.metadata.records import NoOpRecord
from quorum.storage import SegmentedLog

pytestmark = [pytest.mark.process, pytest.mark.slow]


def append(log: SegmentedLog, batches: int, records: int = 7) -> None:
    for _ in range(batches):
        offset = log.log_end_offset
        log.append(
            [
                encode_batch(
                    base_offset=offset,
                    epoch=1,
                    timestamp_ms=1_700_000_000_000 + offset,
                    records=[NoOpRecord()] * records,
                    control=False,
                )
            ]
        )
        log.flush()


def test_follow_stops_on_signals_and_resumes_exactly_once(spark: Any, tmp_path: Path) -> None:
    log = SegmentedLog.open(tmp_path / "meta" / "__cluster_metadata-0", segment_bytes_max=2048)
    append(log, 20)
    out = tmp_path / "out"
    checkpoint = out / "_checkpoints" / "records"
    follow = [
        "replay",
        "--follow",
        "--log-dir",
        str(tmp_path / "meta"),
        "--out",
        str(out),
        "--master",
        "local[1]",
        "--trigger-interval",
        "0.5",
    ]
    output = tmp_path / "follow.out"
    with output.open("w") as sink:
        process = subprocess.Popen(
            [*METAQUORUM, *follow], cwd=REPO, stdout=sink, stderr=subprocess.STDOUT
        )
    try:
        wait_until(lambda: (checkpointed_offset(checkpoint) or 0) >= 140, 240, "offset 139 written")
        append(log, 20)  # while it runs
        wait_until(lambda: (checkpointed_offset(checkpoint) or 0) >= 280, 120, "offset 279 written")
        append(log, 5)
        process.send_signal(signal.SIGTERM)
        code = process.wait(timeout=120)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    text = output.read_text()
    assert code == 0, text
    assert "stopped by a signal: records up to offset" in text, text
    first_life = checkpointed_offset(checkpoint)
    assert first_life is not None and first_life >= 280
    # The second life dies by kill -9, its micro-batches running back to back.
    append(log, 10)
    with output.open("w") as sink:
        process = subprocess.Popen(
            [*METAQUORUM, *follow[:-1], "0"], cwd=REPO, stdout=sink, stderr=subprocess.STDOUT
        )
    try:
        wanted = log.log_end_offset
        wait_until(
            lambda: (checkpointed_offset(checkpoint) or 0) >= wanted, 240, f"offset {wanted - 1}"
        )
        append(log, 10)
        process.kill()
        process.wait(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    second_life = checkpointed_offset(checkpoint)
    assert second_life is not None and second_life > first_life
    append(log, 30)
    last = log.log_end_offset - 1
    log.close()
    until = run_cli(*follow, "--until-offset", str(last), timeout_s=300)
    assert f"every record up to offset {last:,} is written" in until.stdout, until.stdout
    assert f"from offset {second_life:,}" in until.stdout, until.stdout
    offsets = [
        row[0] for row in spark.read.parquet(str(out / "records")).select("offset").collect()
    ]
    duplicates = [o for o, n in Counter(offsets).items() if n > 1]
    assert not duplicates, f"offsets written twice across the restart: {duplicates[:10]}"
    assert sorted(offsets) == list(range(last + 1))


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--until-offset", "5"], "--until-offset needs --follow"),
        (["--follow", "--as-of-offset", "5"], "--as-of-offset and --include-snapshots belong"),
        (["--follow", "--until-offset", "-1"], "--until-offset must be >= 0, got -1"),
    ],
)
def test_follow_refuses_flags_that_do_not_apply(
    tmp_path: Path, flags: list[str], message: str
) -> None:
    SegmentedLog.open(tmp_path / "__cluster_metadata-0").close()
    result = run_cli(
        "replay", "--log-dir", str(tmp_path), "--out", str(tmp_path / "out"), *flags, check=False
    )
    assert result.returncode == 1, result
    assert message in result.stderr, result.stderr
    assert not (tmp_path / "out" / "records").exists()


def test_follow_behind_deleted_segments_fails_naming_the_offsets(tmp_path: Path) -> None:
    """A stream stopped while the node deleted the segments it had not read (retention behind
    a snapshot) fails on its next start, naming its offset, the new log start and the
    snapshot, and says what to do; it writes nothing more."""
    log = SegmentedLog.open(tmp_path / "meta" / "__cluster_metadata-0", segment_bytes_max=1024)
    append(log, 20, records=5)
    out = tmp_path / "out"
    follow = ["replay", "--follow", "--log-dir", str(tmp_path / "meta"), "--out", str(out)]
    run_cli(*follow, "--master", "local[1]", "--until-offset", "30", timeout_s=300)
    append(log, 80, records=5)
    new_start = log.delete_before(400)
    log.close()
    (log.directory / f"{400:020d}-{1:010d}.checkpoint").write_bytes(b"")  # its name is enough
    result = run_cli(*follow, "--master", "local[1]", check=False, timeout_s=300)
    assert result.returncode == 1, result
    assert (
        f"StreamOffsetError: {tmp_path / 'meta'}: the stream's next offset is 31, but the log "
        f"now starts at offset {new_start}" in result.stderr
    ), result.stderr
    assert "(snapshots ending at: 400)" in result.stderr, result.stderr
    assert "What to do: run replay --follow with a new --out" in result.stderr, result.stderr
    assert checkpointed_offset(out / "_checkpoints" / "records") == 31
