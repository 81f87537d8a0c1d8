"""`metaquorum log dump` as a real process, on logs written by SegmentedLog."""

from __future__ import annotations

import hashlib
import io
import json
import os
import subprocess
import sys
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from quorum.ids import Uuid
from quorum.metadata.batch import LogBatch, encode_batch
from quorum.metadata.records import (
    ConfigRecord,
    ConfigResourceType,
    LeaderChangeMessage,
    NoOpRecord,
    PartitionRecord,
    Record,
    TopicRecord,
)
from quorum.storage.frames import FRAME_HEADER_BYTES, encode_frame
from quorum.storage.log import SegmentedLog, segment_file_name
from quorum.tools.log_dump import dump_log

REPO_ROOT = Path(__file__).resolve().parents[3]
TOPIC_ID = Uuid.parse("ah0vHnqLTD2eDxEiM0RVZg")


@dataclass(frozen=True)
class Run:
    returncode: int
    stdout: str
    stderr: str

    @property
    def lines(self) -> list[dict[str, Any]]:
        return [json.loads(line) for line in self.stdout.splitlines()]


def metaquorum(*args: str | Path) -> Run:
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    result = subprocess.run(
        [sys.executable, "-m", "quorum.cli", *map(str, args)],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    return Run(result.returncode, result.stdout, result.stderr)


def leader_change(offset: int, epoch: int) -> LogBatch:
    return encode_batch(
        base_offset=offset,
        epoch=epoch,
        timestamp_ms=1_000 + offset,
        records=[LeaderChangeMessage(1, epoch, (1, 2, 3))],
        control=True,
    )


def metadata(offset: int, epoch: int, records: list[Record]) -> LogBatch:
    return encode_batch(
        base_offset=offset, epoch=epoch, timestamp_ms=1_000 + offset, records=records
    )


def sample_batches() -> list[LogBatch]:
    return [
        leader_change(0, 1),
        metadata(
            1,
            1,
            [
                TopicRecord("orders", TOPIC_ID),
                ConfigRecord(ConfigResourceType.TOPIC, "orders", "cleanup.policy", "compact"),
                PartitionRecord(TOPIC_ID, 0, (1, 2), (1, 2), 1, 0, 0),
            ],
        ),
        metadata(4, 1, [NoOpRecord()]),
        leader_change(5, 2),
        metadata(6, 2, [NoOpRecord(), NoOpRecord()]),
    ]


# Kafka's names, as kafka-dump-log --cluster-metadata-decoder prints them.
EXPECTED_TYPES = [
    ("LEADER_CHANGE", 1, True),
    ("TOPIC_RECORD", 1, False),
    ("CONFIG_RECORD", 1, False),
    ("PARTITION_RECORD", 1, False),
    ("NO_OP_RECORD", 1, False),
    ("LEADER_CHANGE", 2, True),
    ("NO_OP_RECORD", 2, False),
    ("NO_OP_RECORD", 2, False),
]


def write_log(directory: Path, batches: list[LogBatch], **options: int) -> Path:
    with SegmentedLog.open(directory, **options) as log:
        log.append(batches)
        log.flush()
    return directory


def fingerprint(directory: Path) -> dict[str, tuple[str, int]]:
    """Content hash and mtime of every file: a dump must change neither."""
    return {
        path.name: (hashlib.sha256(path.read_bytes()).hexdigest(), path.stat().st_mtime_ns)
        for path in sorted(directory.iterdir())
    }


def test_dumps_every_record_of_a_directory_in_order(tmp_path: Path) -> None:
    # Small segments: the five batches spread over several files.
    log_dir = write_log(tmp_path / "__cluster_metadata-0", sample_batches(), segment_bytes_max=200)
    assert len(list(log_dir.glob("*.log"))) > 1

    run = metaquorum("log", "dump", log_dir)

    assert run.returncode == 0, run.stderr
    assert run.stderr == ""
    lines = run.lines
    assert [line["offset"] for line in lines] == list(range(8))
    assert [(line["type"], line["epoch"], line.get("control", False)) for line in lines] == (
        EXPECTED_TYPES
    )
    assert all(line["version"] == 0 for line in lines)
    assert lines[0] == {
        "offset": 0,
        "epoch": 1,
        "type": "LEADER_CHANGE",
        "version": 0,
        "control": True,
        "data": {
            "leaderId": 1,
            "epoch": 1,
            "voters": [{"voterId": 1}, {"voterId": 2}, {"voterId": 3}],
        },
    }
    # Kafka's payload shape: {"type":"TOPIC_RECORD","version":0,"data":{"name":..,"topicId":..}}
    assert lines[1] == {
        "offset": 1,
        "epoch": 1,
        "type": "TOPIC_RECORD",
        "version": 0,
        "data": {"name": "orders", "topicId": "ah0vHnqLTD2eDxEiM0RVZg", "internal": False},
    }
    assert lines[2]["data"] == {
        "resourceType": 2,
        "resourceName": "orders",
        "name": "cleanup.policy",
        "value": "compact",
    }
    assert set(lines[3]["data"]) == {
        "topicId",
        "partitionId",
        "replicas",
        "isr",
        "leader",
        "leaderEpoch",
        "partitionEpoch",
    }
    assert "control" not in lines[1]


def test_a_segment_file_and_the_metadata_log_dir_are_accepted(tmp_path: Path) -> None:
    log_dir = write_log(tmp_path / "meta" / "__cluster_metadata-0", sample_batches())
    segment = log_dir / segment_file_name(0)

    from_file = metaquorum("log", "dump", segment)
    from_parent = metaquorum("log", "dump", tmp_path / "meta")

    assert from_file.returncode == 0, from_file.stderr
    assert from_parent.returncode == 0, from_parent.stderr
    assert from_file.lines == from_parent.lines
    assert len(from_file.lines) == 8


def test_max_records_and_summary(tmp_path: Path) -> None:
    log_dir = write_log(tmp_path / "log", sample_batches())

    first_three = metaquorum("log", "dump", "--max-records", "3", log_dir)
    summary = metaquorum("log", "dump", "--summary", log_dir)

    assert first_three.returncode == 0
    assert [line["offset"] for line in first_three.lines] == [0, 1, 2]
    assert summary.returncode == 0, summary.stderr
    assert summary.lines == [
        {
            "batches": 5,
            "records": 8,
            "first_offset": 0,
            "last_offset": 7,
            "last_epoch": 2,
            "record_types": {
                "CONFIG_RECORD": 1,
                "LEADER_CHANGE": 2,
                "NO_OP_RECORD": 3,
                "PARTITION_RECORD": 1,
                "TOPIC_RECORD": 1,
            },
        }
    ]
    assert metaquorum("log", "dump", "--max-records", "-1", log_dir).returncode == 2


def test_torn_tail_stops_quietly_and_the_file_is_not_touched(tmp_path: Path) -> None:
    batches = sample_batches()
    log_dir = write_log(tmp_path / "log", batches)
    segment = log_dir / segment_file_name(0)
    whole = segment.stat().st_size
    last_frame = len(encode_frame(batches[-1]))
    # Cut the last frame in half, as a crash mid-write leaves it.
    with segment.open("r+b") as handle:
        handle.truncate(whole - last_frame // 2)
    before = fingerprint(log_dir)

    run = metaquorum("log", "dump", log_dir)

    assert run.returncode == 0, run.stderr
    assert [line["offset"] for line in run.lines] == [0, 1, 2, 3, 4, 5]
    assert f"stopped at byte {whole - last_frame}" in run.stderr
    assert str(segment) in run.stderr
    assert fingerprint(log_dir) == before


def test_corrupt_middle_frame_prints_what_precedes_it_then_fails(tmp_path: Path) -> None:
    batches = sample_batches()
    log_dir = write_log(tmp_path / "log", batches)
    segment = log_dir / segment_file_name(0)
    # Flip a data byte of the third frame (offset 4); valid frames follow it.
    third = len(encode_frame(batches[0])) + len(encode_frame(batches[1]))
    contents = bytearray(segment.read_bytes())
    contents[third + FRAME_HEADER_BYTES + 1] ^= 0x01
    segment.write_bytes(bytes(contents))
    before = fingerprint(log_dir)

    run = metaquorum("log", "dump", log_dir)

    assert run.returncode == 1
    assert [line["offset"] for line in run.lines] == [0, 1, 2, 3]
    error_lines = run.stderr.strip().splitlines()
    assert len(error_lines) == 1
    assert f"{segment} at byte {third}" in error_lines[0]
    assert "CRC32C mismatch" in error_lines[0]
    assert fingerprint(log_dir) == before


def test_damage_at_the_end_of_a_segment_followed_by_another_is_corruption(tmp_path: Path) -> None:
    log_dir = write_log(tmp_path / "log", sample_batches(), segment_bytes_max=200)
    first = log_dir / segment_file_name(0)
    with first.open("ab") as handle:
        handle.write(b"\x4d\x00\x00")  # a partial frame header, then a valid later segment

    run = metaquorum("log", "dump", log_dir)

    assert run.returncode == 1
    assert "yet the later segment" in run.stderr
    assert f"{first} at byte" in run.stderr


def test_an_undecodable_batch_is_reported_with_file_and_offset(tmp_path: Path) -> None:
    good = sample_batches()[:2]
    junk = LogBatch(4, 1, 1, b"\xc1 not msgpack")  # storage frames it; it never decodes
    log_dir = write_log(tmp_path / "log", [*good, junk])
    position = sum(len(encode_frame(batch)) for batch in good)

    run = metaquorum("log", "dump", log_dir)

    assert run.returncode == 1
    assert [line["offset"] for line in run.lines] == [0, 1, 2, 3]
    assert f"at byte {position}" in run.stderr
    assert "base offset 4" in run.stderr


def test_missing_path_and_empty_directory(tmp_path: Path) -> None:
    missing = metaquorum("log", "dump", tmp_path / "nope")
    (tmp_path / "empty").mkdir()
    empty = metaquorum("log", "dump", tmp_path / "empty")

    assert missing.returncode == 1
    assert "no such file or directory" in missing.stderr
    assert empty.returncode == 1
    assert "no segment files" in empty.stderr


def test_a_partial_write_in_progress_is_not_an_error(tmp_path: Path) -> None:
    """What a dump sees while a controller is between writing the two halves of a frame."""
    batches = sample_batches()
    log_dir = write_log(tmp_path / "log", batches[:3])
    segment = log_dir / segment_file_name(0)
    frame = encode_frame(batches[3])
    with segment.open("ab") as handle:
        handle.write(frame[:10])
        handle.flush()
        halfway = metaquorum("log", "dump", log_dir)
        handle.write(frame[10:])
    complete = metaquorum("log", "dump", log_dir)

    assert halfway.returncode == 0, halfway.stderr
    assert [line["offset"] for line in halfway.lines] == [0, 1, 2, 3, 4]
    assert "stopped at byte" in halfway.stderr
    assert complete.returncode == 0, complete.stderr
    assert [line["offset"] for line in complete.lines] == [0, 1, 2, 3, 4, 5]
    assert complete.stderr == ""


def test_dump_while_a_log_is_being_appended(tmp_path: Path) -> None:
    log_dir = tmp_path / "log"
    stop = threading.Event()
    appended = threading.Event()
    errors: list[BaseException] = []

    def appender() -> None:
        try:
            with SegmentedLog.open(log_dir, segment_bytes_max=4096) as log:
                offset = 0
                while not stop.is_set() and offset < 50_000:
                    log.append([metadata(offset, 1, [NoOpRecord()] * 3)])
                    offset += 3
                    if offset % 30 == 0:
                        log.flush()
                        appended.set()
        except BaseException as exc:  # surfaced by the assertion below
            errors.append(exc)
            appended.set()

    thread = threading.Thread(target=appender)
    thread.start()
    try:
        assert appended.wait(10)
        runs = [metaquorum("log", "dump", log_dir) for _ in range(4)]
    finally:
        stop.set()
        thread.join(10)
    assert not errors
    for run in runs:
        assert run.returncode == 0, run.stderr
        offsets = [line["offset"] for line in run.lines]
        assert offsets == list(range(len(offsets)))
        assert len(offsets) >= 30


def test_a_closed_pipe_ends_the_dump_quietly(tmp_path: Path) -> None:
    many = [metadata(offset, 1, [NoOpRecord()]) for offset in range(5_000)]
    log_dir = write_log(tmp_path / "log", many)
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    with subprocess.Popen(
        [sys.executable, "-m", "quorum.cli", "log", "dump", str(log_dir)],
        cwd=REPO_ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    ) as process:
        assert process.stdout is not None
        assert process.stderr is not None
        first = process.stdout.readline()
        process.stdout.close()
        stderr = process.stderr.read()
        returncode = process.wait(30)
    assert json.loads(first)["offset"] == 0
    assert returncode == 0
    assert stderr == b""


def test_dump_log_in_process_writes_to_the_streams_it_is_given(tmp_path: Path) -> None:
    log_dir = write_log(tmp_path / "log", sample_batches())
    out, err = io.StringIO(), io.StringIO()

    assert dump_log([log_dir], out, err, max_records=0) == 0
    assert out.getvalue() == ""
    assert dump_log([log_dir, log_dir / segment_file_name(0)], out, err) == 0
    assert len(out.getvalue().splitlines()) == 16  # each path dumped in turn
    assert err.getvalue() == ""


@pytest.mark.parametrize("summary", [False, True])
def test_summary_is_printed_even_when_the_dump_fails(tmp_path: Path, summary: bool) -> None:
    good = sample_batches()[:2]
    log_dir = write_log(tmp_path / "log", [*good, LogBatch(4, 1, 1, b"\xc1")])
    out, err = io.StringIO(), io.StringIO()

    assert dump_log([log_dir], out, err, summary=summary) == 1

    lines = [json.loads(line) for line in out.getvalue().splitlines()]
    if summary:
        assert lines[0]["records"] == 4
        assert lines[0]["batches"] == 2
    else:
        assert len(lines) == 4
    assert err.getvalue().startswith("Error: ")
