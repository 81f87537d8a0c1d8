"""`metaquorum quorum describe`: the kafka-metadata-quorum formats, from hand-built answers.

The formatting functions are pure; the last tests run the command as a process against a tiny
in-process gRPC server that answers a fixed DescribeQuorumResponse, and against a closed port.
"""

from __future__ import annotations

import io
import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from concurrent import futures
from dataclasses import replace
from pathlib import Path
from typing import Any

import grpc
import pytest

from quorum.errors import ErrorCode
from quorum.ids import METADATA_TOPIC_ID, ZERO_UUID, Uuid
from quorum.rpc.v1 import raft_pb2, raft_pb2_grpc
from quorum.tools import quorum_describe
from quorum.tools.quorum_describe import (
    QuorumDescribeError,
    describe_quorum,
    format_replication,
    format_status,
    format_table,
    max_follower_lag,
    parse_bootstrap,
    run_describe,
)
from quorum.wire.quorum_description import QuorumDescription, ReplicaDescription

REPO_ROOT = Path(__file__).resolve().parents[3]
CLUSTER_ID = "MkU3OEVBNTcwNTJENDM2Qg"
DIR_1 = Uuid.parse("ILZ5MPTeRWakmJu99uBJCA")
DIR_2 = Uuid.parse("b-DwmhtOheTqZzPoh52kfA")
NOW_MS = 1_700_000_010_000


def voter(
    node_id: int,
    log_end_offset: int,
    last_fetch: int | None,
    last_caught_up: int | None,
    directory_id: Uuid = ZERO_UUID,
) -> ReplicaDescription:
    return ReplicaDescription(
        node_id,
        directory_id,
        log_end_offset,
        last_fetch,
        last_caught_up,
        (f"CONTROLLER://127.0.0.1:1909{node_id}",),
    )


def healthy() -> QuorumDescription:
    return QuorumDescription(
        error_code=ErrorCode.NONE,
        error_message="",
        cluster_id=CLUSTER_ID,
        topic_id=METADATA_TOPIC_ID,
        partition=0,
        leader_id=2,
        leader_epoch=5,
        high_watermark=40,
        voters=(
            voter(1, 38, NOW_MS - 100, NOW_MS - 600, DIR_1),
            voter(2, 42, NOW_MS, NOW_MS, DIR_2),
            voter(3, 42, NOW_MS - 20, NOW_MS - 20),
        ),
        observers=(ReplicaDescription(100, ZERO_UUID, 41, NOW_MS - 300, NOW_MS - 900),),
    )


def no_leader() -> QuorumDescription:
    return QuorumDescription(
        error_code=ErrorCode.NOT_LEADER_OR_FOLLOWER,
        error_message="this node does not lead epoch 7; no leader is known",
        cluster_id=CLUSTER_ID,
        topic_id=METADATA_TOPIC_ID,
        partition=0,
        leader_id=None,
        leader_epoch=7,
        high_watermark=40,
    )


# ----- --status --------------------------------------------------------------------------------


def test_status_is_kafkas_layout() -> None:
    assert format_status(healthy()) == (
        "ClusterId:              MkU3OEVBNTcwNTJENDM2Qg\n"
        "LeaderId:               2\n"
        "LeaderEpoch:            5\n"
        "HighWatermark:          40\n"
        "MaxFollowerLag:         4\n"
        "MaxFollowerLagTimeMs:   600\n"
        'CurrentVoters:          [{"id": 1, "directoryId": "ILZ5MPTeRWakmJu99uBJCA", '
        '"endpoints": ["CONTROLLER://127.0.0.1:19091"]}, '
        '{"id": 2, "directoryId": "b-DwmhtOheTqZzPoh52kfA", '
        '"endpoints": ["CONTROLLER://127.0.0.1:19092"]}, '
        '{"id": 3, "endpoints": ["CONTROLLER://127.0.0.1:19093"]}]\n'
        'CurrentObservers:       [{"id": 100}]'
    )


def test_status_without_a_leader_says_so() -> None:
    text = format_status(no_leader())
    assert text.splitlines() == [
        "ClusterId:              MkU3OEVBNTcwNTJENDM2Qg",
        "LeaderId:               no leader",
        "LeaderEpoch:            7",
        "HighWatermark:          -1",
        "MaxFollowerLag:         -1",
        "MaxFollowerLagTimeMs:   -1",
        "CurrentVoters:          []",
        "CurrentObservers:       []",
    ]


def test_max_follower_lag_cases() -> None:
    description = healthy()
    assert max_follower_lag(description) == (4, 600)
    # Everyone caught up: the lag is 0, the time is how much earlier the last follower caught up.
    caught_up = replace(
        description,
        voters=(
            voter(1, 42, NOW_MS - 5, NOW_MS - 5),
            voter(2, 42, NOW_MS, NOW_MS),
            voter(3, 42, NOW_MS - 20, NOW_MS - 20),
        ),
    )
    assert max_follower_lag(caught_up) == (0, 20)
    # A single voter is its own leader.
    alone = replace(description, leader_id=1, voters=(voter(1, 42, NOW_MS, NOW_MS),))
    assert max_follower_lag(alone) == (0, 0)
    # A voter that never fetched: its lag and lag time are unknown.
    silent = replace(
        description,
        voters=(voter(1, -1, None, None), voter(2, 42, NOW_MS, NOW_MS), voter(3, 42, 1, 1)),
    )
    assert max_follower_lag(silent) == (-1, -1)
    # A leader missing from the voters (a confused answer): unknown, never a crash.
    assert max_follower_lag(replace(description, leader_id=9)) == (-1, -1)


# ----- --replication ---------------------------------------------------------------------------


def test_replication_table_is_kafkas_layout() -> None:
    text = format_replication(healthy(), NOW_MS)
    lines = text.split("\n")
    cells = [line.split("\t") for line in lines]
    # Every cell is followed by a tab, so each line ends in one.
    assert all(line.endswith("\t") for line in lines)
    assert [[cell.strip() for cell in row[:-1]] for row in cells] == [
        [
            "NodeId",
            "DirectoryId",
            "LogEndOffset",
            "Lag",
            "LastFetchTimestamp",
            "LastCaughtUpTimestamp",
            "Status",
        ],
        ["2", str(DIR_2), "42", "0", str(NOW_MS), str(NOW_MS), "Leader"],
        ["1", str(DIR_1), "38", "4", str(NOW_MS - 100), str(NOW_MS - 600), "Follower"],
        ["3", str(ZERO_UUID), "42", "0", str(NOW_MS - 20), str(NOW_MS - 20), "Follower"],
        ["100", str(ZERO_UUID), "41", "1", str(NOW_MS - 300), str(NOW_MS - 900), "Observer"],
    ]
    # Columns are aligned: every row's cells have the same widths.
    widths = {tuple(len(cell) for cell in row) for row in cells}
    assert len(widths) == 1


def test_replication_human_readable_and_unknowns() -> None:
    description = replace(
        healthy(),
        observers=(ReplicaDescription(100, ZERO_UUID, -1, None, None),),
    )
    text = format_replication(description, NOW_MS, human_readable=True)
    rows = [[cell.strip() for cell in line.split("\t")[:-1]] for line in text.split("\n")]
    assert rows[1][4:] == ["0 ms ago", "0 ms ago", "Leader"]
    assert rows[2][4:] == ["100 ms ago", "600 ms ago", "Follower"]
    assert rows[4][2:] == ["-1", "-1", "-1", "-1", "Observer"]
    # A timestamp slightly in the future (clock skew) never prints a negative age.
    skewed = replace(healthy(), voters=(voter(2, 42, NOW_MS + 5, NOW_MS + 5),))
    assert "0 ms ago" in format_replication(skewed, NOW_MS, human_readable=True)


def test_replication_without_a_leader_lists_the_voters_it_knows() -> None:
    assert format_replication(no_leader(), NOW_MS).split("\n") == [
        "NodeId\tDirectoryId\tLogEndOffset\tLag\tLastFetchTimestamp\tLastCaughtUpTimestamp\t"
        "Status\t"
    ]
    listed = replace(no_leader(), voters=(voter(1, -1, None, None),))
    rows = format_replication(listed, NOW_MS).split("\n")
    assert [cell.strip() for cell in rows[1].split("\t")[:-1]] == [
        "1",
        str(ZERO_UUID),
        "-1",
        "-1",
        "-1",
        "-1",
        "Voter",
    ]


def test_format_table_pads_to_the_widest_cell() -> None:
    assert format_table(("A", "Bee"), [("long", "x")]) == "A   \tBee\t\nlong\tx  \t"


# ----- asking nodes ------------------------------------------------------------------------------


class FakeRpcError(grpc.RpcError):  # type: ignore[misc]
    def __init__(self, code: grpc.StatusCode, details: str) -> None:
        super().__init__(details)
        self._code = code
        self._details = details

    def code(self) -> grpc.StatusCode:
        return self._code

    def details(self) -> str:
        return self._details


def answers(table: dict[str, QuorumDescription | Exception]) -> Any:
    def ask(address: str, timeout_s: float) -> QuorumDescription:
        assert timeout_s == quorum_describe.DEADLINE_S
        answer = table[address]
        if isinstance(answer, Exception):
            raise answer
        return answer

    return ask


def test_parse_bootstrap() -> None:
    assert parse_bootstrap("127.0.0.1:19091") == ["127.0.0.1:19091"]
    assert parse_bootstrap("a:1, [::1]:2") == ["a:1", "[::1]:2"]
    for bad in ("", "host", "host:", ":9093", "host:0", "host:65536", "host:x"):
        with pytest.raises(QuorumDescribeError, match="HOST:PORT"):
            parse_bootstrap(bad)


def test_the_first_node_with_a_leader_answers() -> None:
    ask = answers(
        {
            "a:1": FakeRpcError(grpc.StatusCode.UNAVAILABLE, "connection refused"),
            "b:2": no_leader(),
            "c:3": healthy(),
        }
    )
    assert describe_quorum(["a:1", "b:2", "c:3"], ask=ask) == ("c:3", healthy())
    assert describe_quorum(["a:1", "b:2"], ask=ask) == ("b:2", no_leader())


def test_no_node_answers() -> None:
    ask = answers(
        {
            "a:1": FakeRpcError(grpc.StatusCode.UNAVAILABLE, "connection refused"),
            "b:2": FakeRpcError(grpc.StatusCode.DEADLINE_EXCEEDED, "Deadline Exceeded"),
        }
    )
    with pytest.raises(QuorumDescribeError) as raised:
        describe_quorum(["a:1", "b:2"], ask=ask)
    assert str(raised.value) == (
        "cannot describe the quorum: a:1: UNAVAILABLE (connection refused); "
        "b:2: DEADLINE_EXCEEDED (Deadline Exceeded)"
    )


def run(description: QuorumDescription, *, replication: bool = False) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = run_describe(
        "n:1",
        replication=replication,
        human_readable=False,
        out=out,
        err=err,
        now_ms=lambda: NOW_MS,
        ask=answers({"n:1": description}),
    )
    return code, out.getvalue(), err.getvalue()


def test_run_describe_prints_status_or_replication() -> None:
    assert run(healthy()) == (0, format_status(healthy()) + "\n", "")
    assert run(healthy(), replication=True) == (
        0,
        format_replication(healthy(), NOW_MS) + "\n",
        "",
    )


def test_run_describe_without_a_leader_succeeds_with_a_note() -> None:
    code, out, err = run(no_leader())
    assert code == 0
    assert "LeaderId:               no leader" in out
    assert err == (
        "Note: the quorum has no leader in epoch 7 as seen by n:1; try again after the election "
        "timeout\n"
    )


def test_run_describe_fails_on_other_errors() -> None:
    refused = replace(
        no_leader(),
        error_code=ErrorCode.INCONSISTENT_CLUSTER_ID,
        error_message="the request's cluster_id is not this node's",
    )
    with pytest.raises(QuorumDescribeError, match=r"n:1 answered INCONSISTENT_CLUSTER_ID: the"):
        run(refused)
    unreachable_leader = replace(no_leader(), leader_id=3)
    with pytest.raises(QuorumDescribeError, match="the leader is node 3 in epoch 7"):
        run(unreachable_leader)


# ----- as a process --------------------------------------------------------------------------


class FixedQuorumService(raft_pb2_grpc.QuorumServiceServicer):
    def __init__(self, response: raft_pb2.DescribeQuorumResponse) -> None:
        self.response = response
        self.requests: list[raft_pb2.DescribeQuorumRequest] = []

    def DescribeQuorum(self, request: Any, context: Any) -> Any:
        self.requests.append(request)
        return self.response


@pytest.fixture
def fixed_server() -> Iterator[tuple[str, FixedQuorumService]]:
    service = FixedQuorumService(
        raft_pb2.DescribeQuorumResponse(
            error_code=0,
            cluster_id=CLUSTER_ID,
            topic_id=METADATA_TOPIC_ID.bytes,
            leader_id=1,
            leader_epoch=3,
            high_watermark=12,
            current_voters=[
                raft_pb2.ReplicaState(
                    replica_id=1,
                    log_end_offset=12,
                    last_fetch_timestamp_ms=NOW_MS,
                    last_caught_up_timestamp_ms=NOW_MS,
                    endpoints=["CONTROLLER://127.0.0.1:19091"],
                    directory_id=DIR_1.bytes,
                ),
                raft_pb2.ReplicaState(
                    replica_id=2,
                    log_end_offset=10,
                    last_fetch_timestamp_ms=NOW_MS - 10,
                    last_caught_up_timestamp_ms=NOW_MS - 30,
                    endpoints=["CONTROLLER://127.0.0.1:19092"],
                ),
            ],
        )
    )
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    raft_pb2_grpc.add_QuorumServiceServicer_to_server(service, server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        yield f"127.0.0.1:{port}", service
    finally:
        server.stop(grace=None)


def metaquorum(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "quorum.cli", *args],
        cwd=REPO_ROOT,
        env={**os.environ, "PYTHONPATH": str(REPO_ROOT)},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_the_command_asks_over_grpc_with_empty_ids(
    fixed_server: tuple[str, FixedQuorumService],
) -> None:
    address, service = fixed_server
    status = metaquorum("quorum", "describe", "--status", "--bootstrap-controller", address)
    table = metaquorum("quorum", "--bootstrap-controller", address, "describe", "--replication")

    assert status.returncode == 0, status.stderr
    assert status.stdout.splitlines()[:6] == [
        f"ClusterId:              {CLUSTER_ID}",
        "LeaderId:               1",
        "LeaderEpoch:            3",
        "HighWatermark:          12",
        "MaxFollowerLag:         2",
        "MaxFollowerLagTimeMs:   30",
    ]
    assert table.returncode == 0, table.stderr
    assert [line.split("\t")[-2].strip() for line in table.stdout.splitlines()] == [
        "Status",
        "Leader",
        "Follower",
    ]
    assert [(r.cluster_id, r.topic_id, r.partition_index) for r in service.requests] == [
        ("", b"", 0),
        ("", b"", 0),
    ]


def test_an_unreachable_node_is_one_line_naming_it() -> None:
    with socket.socket() as probe:  # a port that was free a moment ago: nothing listens there
        probe.bind(("127.0.0.1", 0))
        address = f"127.0.0.1:{probe.getsockname()[1]}"
    result = metaquorum("quorum", "describe", "--status", "--bootstrap-controller", address)

    assert result.returncode == 1
    assert result.stdout == ""
    lines = result.stderr.splitlines()
    assert len(lines) == 1
    assert address in lines[0]
    assert "UNAVAILABLE" in lines[0]


def test_human_readable_needs_replication() -> None:
    result = metaquorum(
        "quorum", "describe", "--status", "--human-readable", "--bootstrap-controller", "a:1"
    )
    assert result.returncode == 1
    assert "--human-readable is only supported along with --replication" in result.stderr
