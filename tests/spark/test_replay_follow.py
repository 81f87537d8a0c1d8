"""``metaquorum replay --follow`` as a user runs it: a process following a log that grows while
it runs, stopped by Ctrl-C (SIGINT to its process group, the JVM included), started again and
stopped by SIGTERM, again and killed with kill -9, and a last time with ``--until-offset``; the
Parquet table then holds every offset once (exactly once across the restarts). Plus the flags
it refuses, and a stream whose segments were deleted before it read them.

The log is written by the storage layer a controller uses (``SegmentedLog``, small segments so
that it rolls), from this test process, while the command runs.
"""

from __future__ import annotations

import os
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


def group_gone(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return True
    return False


def life(command: list[str], output: Path, sig: int, *, to_group: bool, until: Any) -> int:
    """One run of the command in a session of its own: ``until()`` then ``sig`` (to the whole
    group, as a terminal's Ctrl-C, or to the command alone). Returns its exit code once it and
    the JVM it started are gone."""
    with output.open("w") as sink:
        process = subprocess.Popen(
            command, cwd=REPO, stdout=sink, stderr=subprocess.STDOUT, start_new_session=True
        )
    try:
        until()
        if to_group:
            os.killpg(process.pid, sig)
        else:
            process.send_signal(sig)
        return process.wait(timeout=120)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
        wait_until(lambda: group_gone(process.pid), 60, "the stopped run's JVM exits")


def test_follow_stops_on_signals_and_resumes_exactly_once(spark: Any, tmp_path: Path) -> None:
    log = SegmentedLog.open(tmp_path / "meta" / "__cluster_metadata-0", segment_bytes_max=2048)
    append(log, 20)
    out = tmp_path / "out"
    checkpoint = out / "_checkpoints" / "records"
    follow = [
        *METAQUORUM,
        "replay",
        "--follow",
        "--log-dir",
        str(tmp_path / "meta"),
        "--out",
        str(out),
        "--master",
        "local[1]",
        "--no-tables",  # the records table is what this test is about (test_follow_tables.py)
    ]
    output = tmp_path / "follow.out"

    def committed() -> int:
        return checkpointed_offset(checkpoint) or 0

    def grows_while_followed() -> None:
        wanted = log.log_end_offset
        wait_until(lambda: committed() >= wanted, 240, f"offset {wanted - 1} written")
        append(log, 20)  # while it runs
        wanted = log.log_end_offset
        wait_until(lambda: committed() >= wanted, 120, f"offset {wanted - 1} written")
        append(log, 5)

    lives = []
    # Ctrl-C in a terminal (SIGINT to the command and the JVM), SIGTERM, then kill -9, each
    # while the log grows; micro-batches every 0.5 s, then back to back.
    for sig, to_group, interval in (
        (signal.SIGINT, True, "0.5"),
        (signal.SIGTERM, False, "0"),
        (signal.SIGKILL, False, "0"),
    ):
        code = life(
            [*follow, "--trigger-interval", interval],
            output,
            sig,
            to_group=to_group,
            until=grows_while_followed,
        )
        text = output.read_text()
        if sig != signal.SIGKILL:
            assert code == 0, text
            assert "stopped by a signal: records up to offset" in text, text
        lives.append(committed())
        assert lives[-1] > (lives[-2] if len(lives) > 1 else 0), (lives, text)
    append(log, 30)
    last = log.log_end_offset - 1
    log.close()
    until = run_cli(*follow[len(METAQUORUM) :], "--until-offset", str(last), timeout_s=300)
    assert f"every record up to offset {last:,} is written" in until.stdout, until.stdout
    assert f"from offset {lives[-1]:,}" in until.stdout, until.stdout
    offsets = [
        row[0] for row in spark.read.parquet(str(out / "records")).select("offset").collect()
    ]
    duplicates = [o for o, n in Counter(offsets).items() if n > 1]
    assert not duplicates, f"offsets written twice across the restarts: {duplicates[:10]}"
    assert sorted(offsets) == list(range(last + 1))


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--until-offset", "5"], "--until-offset needs --follow"),
        (["--follow", "--as-of-offset", "5"], "--as-of-offset and --include-snapshots belong"),
        (["--follow", "--until-offset", "-1"], "--until-offset must be >= 0, got -1"),
        (["--refresh-interval", "5"], "--refresh-interval and --no-tables need --follow"),
        (["--follow", "--refresh-interval", "-1"], "--refresh-interval must be >= 0 seconds"),
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
    follow = [
        *("replay", "--follow", "--no-tables", "--log-dir", str(tmp_path / "meta")),
        *("--out", str(out)),
    ]
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


def test_follow_refuses_an_out_holding_a_one_off_replay(tmp_path: Path) -> None:
    """--follow links OUT/<table> to its current version: it does not overwrite a table that
    is something else (a one-off replay's output) and says what to do, before Spark starts."""
    SegmentedLog.open(tmp_path / "__cluster_metadata-0").close()
    (tmp_path / "out" / "topic_lifecycle").mkdir(parents=True)
    (tmp_path / "out" / "topic_lifecycle" / "part-0.parquet").write_bytes(b"kept")
    result = run_cli(
        *("replay", "--follow", "--log-dir", str(tmp_path), "--out", str(tmp_path / "out")),
        check=False,
    )
    assert result.returncode == 1, result
    assert "topic_lifecycle exists and is not --follow's link to current/topic_lifecycle" in (
        result.stderr
    ), result.stderr
    assert "give --follow an --out of its own" in result.stderr, result.stderr
    assert (tmp_path / "out" / "topic_lifecycle" / "part-0.parquet").read_bytes() == b"kept"
    assert not (tmp_path / "out" / "records").exists()
