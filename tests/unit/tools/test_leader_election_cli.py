"""``metaquorum leader-election``'s arguments (kafka-leader-election's): the election type in
any case, exactly one way of naming partitions, Kafka's JSON file. The elections themselves run
against a real cluster in tests/process/test_replication_admin_process.py."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from quorum.admin.types import TopicPartition
from quorum.cli import build_parser, main
from quorum.controller.requests import ElectionType
from quorum.tools.leader_election import LeaderElectionError, command_from_args

BASE = ["leader-election", "--bootstrap-server", "127.0.0.1:1"]


def parse(*args: str) -> object:
    return command_from_args(build_parser().parse_args([*BASE, *args]))


def test_one_partition_and_all_partitions() -> None:
    one = parse("--election-type", "preferred", "--topic", "orders", "--partition", "2")
    assert one.election_type is ElectionType.PREFERRED  # type: ignore[attr-defined]
    assert one.partitions == (TopicPartition("orders", 2),)  # type: ignore[attr-defined]
    every = parse("--election-type", "UNCLEAN", "--all-topic-partitions")
    assert every.election_type is ElectionType.UNCLEAN  # type: ignore[attr-defined]
    assert every.partitions is None  # type: ignore[attr-defined]


def test_kafkas_json_file(tmp_path: Path) -> None:
    path = tmp_path / "partitions.json"
    path.write_text(
        json.dumps({"partitions": [{"topic": "a", "partition": 0}, {"topic": "b", "partition": 3}]})
    )
    command = parse("--election-type", "PREFERRED", "--path-to-json-file", str(path))
    assert command.partitions == (TopicPartition("a", 0), TopicPartition("b", 3))  # type: ignore[attr-defined]
    path.write_text(json.dumps({"partitions": [{"topic": "a", "partition": -1}]}))
    with pytest.raises(LeaderElectionError, match="is not"):
        parse("--election-type", "PREFERRED", "--path-to-json-file", str(path))


@pytest.mark.parametrize(
    ("args", "text"),
    [
        (["--election-type", "FAIR", "--all-topic-partitions"], "is not PREFERRED or UNCLEAN"),
        (["--election-type", "PREFERRED"], "give exactly one of"),
        (["--election-type", "PREFERRED", "--all-topic-partitions", "--topic", "t"], "exactly one"),
        (["--election-type", "PREFERRED", "--topic", "t"], "go together"),
        (["--election-type", "PREFERRED", "--topic", "t", "--partition", "-1"], "must be >= 0"),
    ],
)
def test_refused_arguments(args: list[str], text: str) -> None:
    with pytest.raises(LeaderElectionError, match=text):
        parse(*args)


def test_a_refusal_exits_1_before_connecting(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([*BASE, "--election-type", "PREFERRED"]) == 1
    assert "give exactly one of" in capsys.readouterr().err
