"""``metaquorum topics``: kafka-topics' flags and output formats.

The formatting and flag checks are pure functions tested directly; the command then runs
in-process and as a process against the fake controller of
``tests/unit/tools/test_admin_client.py``.
The lead's end-to-end tests run it against real controllers.
"""

from __future__ import annotations

import argparse
import io
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from quorum.admin import (
    TopicDescription,
    TopicExistsError,
    TopicListing,
    TopicPartitionInfo,
    error_for,
)
from quorum.cli import build_parser
from quorum.errors import ErrorCode
from quorum.ids import ZERO_UUID, Uuid
from quorum.rpc.v1 import admin_pb2
from quorum.tools.topics import (
    ERROR_PREFIX,
    TopicCommand,
    TopicCommandError,
    command_from_args,
    error_line,
    format_configs,
    format_description,
    format_listing,
    format_partition_line,
    format_topic_line,
    is_unavailable,
    is_under_replicated,
    parse_configs,
    parse_replica_assignment,
    parse_topic_names,
    run_topic_command,
)
from tests.unit.tools.test_admin_client import (
    METADATA,
    ORDERS,
    ORDERS_ID,
    FakeNode,
    closed_address,
    creates_topics,
    deletes_topics,
    describes_topics,
    start_node,
)

__all__ = ["start_node"]  # the fixture, shared with tests/unit/tools/test_admin_client.py

REPO_ROOT = Path(__file__).resolve().parents[3]
DESCRIPTION = TopicDescription(
    name="orders",
    topic_id=ORDERS_ID,
    is_internal=False,
    creation_offset=42,
    partitions=(
        TopicPartitionInfo(1, None, (2, 3), ()),
        TopicPartitionInfo(0, 1, (1, 2), (1, 2)),
    ),
    configs={"retention.ms": "1000", "cleanup.policy": "compact"},
)
ORDERS_LINES = [
    "Topic: orders\tTopicId: ah0vHnqLTD2eDxEiM0RVZg\tPartitionCount: 2\tReplicationFactor: 2"
    "\tConfigs: cleanup.policy=compact\tCreationOffset: 42",
    "\tTopic: orders\tPartition: 0\tLeader: 1\tReplicas: 1,2\tIsr: 1,2\tElr: N/A"
    "\tLastKnownElr: N/A",
    "\tTopic: orders\tPartition: 1\tLeader: none\tReplicas: 2,3\tIsr: \tElr: N/A"
    "\tLastKnownElr: N/A",
]


# ----- pure formatting ---------------------------------------------------------------------------


def test_describe_is_kafkas_tab_separated_layout() -> None:
    assert format_description(DESCRIPTION).split("\n") == [
        "Topic: orders\tTopicId: ah0vHnqLTD2eDxEiM0RVZg\tPartitionCount: 2\tReplicationFactor: 2"
        "\tConfigs: cleanup.policy=compact,retention.ms=1000\tCreationOffset: 42",
        ORDERS_LINES[1],
        ORDERS_LINES[2],
    ]


def test_topic_line_leaves_out_a_zero_id_and_an_unknown_offset() -> None:
    bare = TopicDescription("t", ZERO_UUID, False, -1, (), {})
    assert format_topic_line(bare) == "Topic: t\tPartitionCount: 0\tReplicationFactor: 0\tConfigs: "


def test_partition_line_starts_with_a_tab_and_says_none_without_leader() -> None:
    line = format_partition_line("t", TopicPartitionInfo(3, None, (1,), ()))
    assert (
        line
        == "\tTopic: t\tPartition: 3\tLeader: none\tReplicas: 1\tIsr: \tElr: N/A\tLastKnownElr: N/A"
    )


def test_configs_and_listing_are_sorted() -> None:
    assert format_configs({"b": "2", "a": "x=y"}) == "a=x=y,b=2"
    assert format_configs({}) == ""
    listings = [TopicListing(n, ZERO_UUID, False, 1) for n in ("orders", "__x", "audit")]
    assert format_listing(listings) == "__x\naudit\norders"


def test_errors_name_the_kafka_error() -> None:
    error = error_for(ErrorCode.TOPIC_ALREADY_EXISTS, "Topic 'orders' already exists.")
    assert isinstance(error, TopicExistsError)
    assert error_line(error) == (
        "Error while executing topic command : TOPIC_ALREADY_EXISTS: Topic 'orders' already exists."
    )


def test_parse_configs() -> None:
    assert parse_configs(["a=1", "b = x=y", "a=2"]) == {"a": "2", "b": "x=y"}
    for bad in ("novalue", "=1"):
        with pytest.raises(TopicCommandError, match="key=val"):
            parse_configs([bad])


def test_parse_replica_assignment() -> None:
    assert parse_replica_assignment("1:2, 2:3,3") == {0: (1, 2), 1: (2, 3), 2: (3,)}
    with pytest.raises(TopicCommandError, match="not broker ids"):
        parse_replica_assignment("1:x")
    with pytest.raises(TopicCommandError, match="twice"):
        parse_replica_assignment("1:1")


def test_parse_topic_names() -> None:
    assert parse_topic_names("a,b, a") == ("a", "b")
    with pytest.raises(TopicCommandError, match="empty"):
        parse_topic_names("a,,b")


def test_partition_filters_print_only_the_selected_partitions_and_no_topic_line() -> None:
    healthy = TopicPartitionInfo(0, 1, (1, 2), (1, 2))
    short_isr = TopicPartitionInfo(1, 1, (1, 2), (1,))
    no_leader = TopicPartitionInfo(2, None, (2, 3), ())
    fenced_leader = TopicPartitionInfo(3, 3, (3, 1), (3, 1), offline_replicas=(3,))
    assert [is_under_replicated(p) for p in (healthy, short_isr, no_leader, fenced_leader)] == [
        False,
        True,
        True,
        False,
    ]
    assert [is_unavailable(p) for p in (healthy, short_isr, no_leader, fenced_leader)] == [
        False,
        False,
        True,
        True,
    ]
    topic = TopicDescription(
        "t", ORDERS_ID, False, 1, (healthy, short_isr, no_leader, fenced_leader), {}
    )
    under = format_description(topic, under_replicated=True).splitlines()
    assert [line.split("\t")[2] for line in under] == ["Partition: 1", "Partition: 2"]
    unavailable = format_description(topic, unavailable=True).splitlines()
    assert [line.split("\t")[2] for line in unavailable] == ["Partition: 2", "Partition: 3"]
    both = format_description(topic, under_replicated=True, unavailable=True).splitlines()
    assert [line.split("\t")[2] for line in both] == [
        "Partition: 1",
        "Partition: 2",
        "Partition: 3",
    ]
    assert all(line.startswith("\tTopic: t\t") for line in under + unavailable)
    healthy_only = TopicDescription("h", ORDERS_ID, False, 1, (healthy,), {})
    assert format_description(healthy_only, under_replicated=True) == ""


# ----- flags -------------------------------------------------------------------------------------


def parse(*argv: str) -> argparse.Namespace:
    return build_parser().parse_args(["topics", *argv])


def command(*argv: str) -> TopicCommand:
    return command_from_args(parse(*argv))


def test_flags_and_subcommand_words_are_the_same() -> None:
    as_flag = command(
        "--bootstrap-server",
        "h:1,h:2",
        "--create",
        "--topic",
        "orders",
        "--partitions",
        "3",
        "--replication-factor",
        "2",
        "--config",
        "cleanup.policy=compact",
        "--config",
        "retention.ms=10",
        "--if-not-exists",
    )
    as_word = command(
        "create",
        "--bootstrap-controller",
        "h:1,h:2",
        "--topic",
        "orders",
        "--partitions",
        "3",
        "--replication-factor",
        "2",
        "--config",
        "cleanup.policy=compact",
        "--config",
        "retention.ms=10",
        "--if-not-exists",
    )
    assert as_flag == as_word
    assert as_flag.action == "create"
    assert as_flag.bootstrap == ("h:1", "h:2")
    assert as_flag.topics == ("orders",)
    assert (as_flag.partitions, as_flag.replication_factor) == (3, 2)
    assert dict(as_flag.configs) == {"cleanup.policy": "compact", "retention.ms": "10"}
    assert as_flag.if_not_exists
    assert as_flag.timeout_s == 30.0


def test_describe_and_delete_by_id() -> None:
    described = command("--bootstrap-server", "h:1", "--describe", "--topic-id", str(ORDERS_ID))
    assert described.topic_id == ORDERS_ID
    both = command(
        "delete", "--bootstrap-server", "h:1", "--topic", "x", "--topic-id", str(ORDERS_ID)
    )
    assert both.topic_id == ORDERS_ID  # only the id is used, as in Kafka
    listing = command(
        "--bootstrap-server", "h:1", "--list", "--exclude-internal", "--timeout-ms", "500"
    )
    assert listing.exclude_internal
    assert listing.timeout_s == 0.5


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--bootstrap-server", "h:1"], "exactly one action"),
        (["create", "--bootstrap-server", "h:1", "--list"], "exactly one action"),
        (["--list"], "--bootstrap-server or --bootstrap-controller"),
        (["--list", "--bootstrap-server", "nohost"], "not HOST:PORT"),
        (["--create", "--bootstrap-server", "h:1"], "exactly one --topic"),
        (["--create", "--bootstrap-server", "h:1", "--topic", "a,b"], "exactly one --topic"),
        (["--delete", "--bootstrap-server", "h:1"], "--topic or --topic-id"),
        (["--list", "--bootstrap-server", "h:1", "--partitions", "1"], "--partitions can only"),
        (
            ["--describe", "--bootstrap-server", "h:1", "--replication-factor", "1"],
            "--replication-factor can only",
        ),
        (["--list", "--bootstrap-server", "h:1", "--config", "a=b"], "--config can only"),
        (["--create", "--bootstrap-server", "h:1", "--topic", "t", "--topic-id", "x"], "topic-id"),
        (["--describe", "--bootstrap-server", "h:1", "--topic-id", "nope"], "invalid topic id"),
        (
            ["--describe", "--bootstrap-server", "h:1", "--topic-id", str(ZERO_UUID)],
            "ZERO_UUID",
        ),
        (["--delete", "--bootstrap-server", "h:1", "--topic", "t", "--if-not-exists"], "--create"),
        (["--create", "--bootstrap-server", "h:1", "--topic", "t", "--if-exists"], "--describe"),
        (["--delete", "--bootstrap-server", "h:1", "--topic", "t", "--exclude-internal"], "--list"),
        (
            [
                "--create",
                "--bootstrap-server",
                "h:1",
                "--topic",
                "t",
                "--partitions",
                "2",
                "--replica-assignment",
                "1,2",
            ],
            "can't be used with --partitions",
        ),
        (["--list", "--bootstrap-server", "h:1", "--timeout-ms", "0"], "--timeout-ms"),
        (["--alter", "--bootstrap-server", "h:1", "--partitions", "3"], "--alter needs --topic"),
        (["--alter", "--bootstrap-server", "h:1", "--topic", "t"], "needs --partitions N"),
        (
            ["--alter", "--bootstrap-server", "h:1", "--topic", "t", "--replication-factor", "2"],
            "--replication-factor can only be used with --create",
        ),
        (
            [
                "--alter",
                "--bootstrap-server",
                "h:1",
                "--topic",
                "t",
                "--partitions",
                "3",
                "--replica-assignment",
                "1,2",
            ],
            "lists 2 partition\\(s\\) but --partitions is 3",
        ),
        (
            ["--list", "--bootstrap-server", "h:1", "--under-replicated-partitions"],
            "--under-replicated-partitions can only be used with --describe",
        ),
        (
            ["--create", "--bootstrap-server", "h:1", "--topic", "t", "--unavailable-partitions"],
            "--unavailable-partitions can only be used with --describe",
        ),
    ],
)
def test_flags_that_do_not_fit_together(argv: list[str], message: str) -> None:
    with pytest.raises(TopicCommandError, match=message):
        command(*argv)


# ----- running against a fake controller ---------------------------------------------------------


def lists_topics(request: Any, context: Any) -> Any:
    topics = [
        admin_pb2.TopicListing(
            name=t.name,
            topic_id=t.topic_id,
            is_internal=t.is_internal,
            creation_offset=t.creation_offset,
        )
        for t in (ORDERS, METADATA)
        if not (request.exclude_internal and t.is_internal)
    ]
    # A topic deleted between the listing and the describe is left out of the output.
    topics.append(admin_pb2.TopicListing(name="gone", topic_id=Uuid.random().bytes))
    return admin_pb2.ListTopicsResponse(metadata_offset=77, topics=topics)


def run(node: FakeNode, *argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = run_topic_command(command("--bootstrap-server", node.address, *argv), out, err)
    return code, out.getvalue(), err.getvalue()


@pytest.fixture
def node(start_node: Callable[..., FakeNode]) -> FakeNode:
    node = start_node()
    node.handlers["CreateTopics"] = creates_topics(
        ids={"orders": ORDERS_ID},
        errors={"exists": (ErrorCode.TOPIC_ALREADY_EXISTS, "Topic 'exists' already exists.")},
    )
    node.handlers["DescribeTopics"] = describes_topics()
    node.handlers["DeleteTopics"] = deletes_topics()
    node.handlers["ListTopics"] = lists_topics
    return node


def test_create(node: FakeNode) -> None:
    assert run(node, "--create", "--topic", "orders", "--partitions", "2") == (
        0,
        "Created topic orders.\n",
        "",
    )
    code, out, err = run(node, "--create", "--topic", "exists")
    assert (code, out) == (1, "")
    assert err == f"{ERROR_PREFIX}TOPIC_ALREADY_EXISTS: Topic 'exists' already exists.\n"
    assert run(node, "--create", "--topic", "exists", "--if-not-exists") == (0, "", "")
    assigned = run(node, "--create", "--topic", "a", "--replica-assignment", "1:2,2:3")
    assert assigned[0] == 0
    requests = node.requests("CreateTopics")
    assert (requests[0].topics[0].num_partitions, requests[0].topics[0].replication_factor) == (
        2,
        -1,
    )
    assert [list(a.broker_ids) for a in requests[-1].topics[0].assignments] == [[1, 2], [2, 3]]


def grows_partitions(request: Any, context: Any) -> Any:
    """Knows ORDERS (2 partitions); anything else is unknown."""
    results = []
    for topic in request.topics:
        if topic.name != "orders":
            results.append(
                admin_pb2.CreatePartitionsTopicResult(
                    name=topic.name,
                    error_code=ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                    error_message=f"Topic {topic.name!r} does not exist",
                )
            )
        elif topic.count <= 2:
            results.append(
                admin_pb2.CreatePartitionsTopicResult(
                    name="orders",
                    topic_id=ORDERS_ID.bytes,
                    error_code=ErrorCode.INVALID_PARTITIONS,
                    error_message="Topic 'orders' already has 2 partition(s)",
                )
            )
        else:
            results.append(
                admin_pb2.CreatePartitionsTopicResult(name="orders", topic_id=ORDERS_ID.bytes)
            )
    return admin_pb2.CreatePartitionsResponse(controller_id=1, metadata_offset=70, results=results)


def test_alter_adds_partitions_and_skips_the_existing_ones_assignments(node: FakeNode) -> None:
    node.handlers["CreatePartitions"] = grows_partitions
    assert run(node, "--alter", "--topic", "orders", "--partitions", "4") == (0, "", "")
    grown = node.requests("CreatePartitions")[-1]
    assert [(t.name, t.count, list(t.assignments)) for t in grown.topics] == [("orders", 4, [])]
    assert grown.timeout_ms > 0 and not grown.validate_only
    # Kafka's --replica-assignment with --alter covers every partition; the two existing
    # ones' entries are skipped (the tool describes the topic first).
    assert run(
        node,
        "alter",
        "--topic",
        "orders",
        "--partitions",
        "4",
        "--replica-assignment",
        "9:8,8:7,1:2,2:3",
    ) == (0, "", "")
    grown = node.requests("CreatePartitions")[-1]
    assert [list(a.broker_ids) for a in grown.topics[0].assignments] == [[1, 2], [2, 3]]
    code, out, err = run(node, "--alter", "--topic", "orders", "--partitions", "2")
    assert (code, out) == (1, "")
    assert err == f"{ERROR_PREFIX}INVALID_PARTITIONS: Topic 'orders' already has 2 partition(s)\n"
    code, _, err = run(node, "--alter", "--topic", "nope", "--partitions", "2")
    assert (code, err.split(":")[1].strip()) == (1, "UNKNOWN_TOPIC_OR_PARTITION")
    assert run(node, "--alter", "--topic", "nope", "--partitions", "2", "--if-exists") == (
        0,
        "",
        "",
    )


def test_describe_one_topic_by_name_or_id(node: FakeNode) -> None:
    by_name = run(node, "--describe", "--topic", "orders")
    by_id = run(node, "describe", "--topic-id", str(ORDERS_ID))
    assert by_name == by_id == (0, "\n".join(ORDERS_LINES) + "\n", "")


def test_describe_every_topic_at_the_listings_offset(node: FakeNode) -> None:
    code, out, err = run(node, "--describe")
    assert (code, err) == (0, "")
    lines = out.splitlines()
    assert lines[0].startswith("Topic: __cluster_metadata\t")
    assert lines[2:] == ORDERS_LINES
    describe = node.requests("DescribeTopics")[-1]
    assert describe.min_metadata_offset == 77
    assert len(describe.topics) == 3  # "gone" was asked for, and left out

    code, out, _ = run(node, "--describe", "--exclude-internal")
    assert out.splitlines() == ORDERS_LINES
    assert node.requests("ListTopics")[-1].exclude_internal


def test_describe_unknown_topics(node: FakeNode) -> None:
    code, out, err = run(node, "--describe", "--topic", "orders,missing")
    assert code == 1
    assert out.splitlines() == ORDERS_LINES  # what could be described still is
    assert err.startswith(f"{ERROR_PREFIX}UNKNOWN_TOPIC_OR_PARTITION: ")
    assert run(node, "--describe", "--topic", "missing", "--if-exists") == (0, "", "")


def test_delete(node: FakeNode) -> None:
    assert run(node, "--delete", "--topic-id", str(ORDERS_ID)) == (0, "", "")
    assert node.requests("DeleteTopics")[-1].topics[0].topic_id == ORDERS_ID.bytes
    code, _, err = run(node, "--delete", "--topic", "missing")
    assert code == 1
    assert "UNKNOWN_TOPIC_OR_PARTITION" in err
    assert run(node, "--delete", "--topic", "missing", "--if-exists") == (0, "", "")
    gone = Uuid.parse("AAAAAAAAAAAAAAAAAAAAAg")
    code, _, err = run(node, "delete", "--topic-id", str(gone))
    assert code == 1
    assert err.startswith(f"{ERROR_PREFIX}UNKNOWN_TOPIC_ID: ")


def test_list(node: FakeNode) -> None:
    assert run(node, "--list") == (0, "__cluster_metadata\ngone\norders\n", "")
    assert run(node, "--list", "--exclude-internal") == (0, "gone\norders\n", "")
    assert run(node, "--list", "--topic", "orders,nope") == (0, "orders\n", "")


def test_a_request_level_error_is_one_line(start_node: Callable[..., FakeNode]) -> None:
    node = start_node()
    node.handlers["ListTopics"] = lambda request, context: admin_pb2.ListTopicsResponse(
        error_code=ErrorCode.INVALID_REQUEST, error_message="no"
    )
    assert run(node, "--list") == (1, "", f"{ERROR_PREFIX}INVALID_REQUEST: no\n")


# ----- as a process ------------------------------------------------------------------------------


def metaquorum(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "quorum.cli", "topics", *args],
        cwd=REPO_ROOT,
        env={**os.environ, "PYTHONPATH": str(REPO_ROOT)},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_the_command_as_a_process(node: FakeNode) -> None:
    created = metaquorum(
        "--bootstrap-server",
        node.address,
        "--create",
        "--topic",
        "orders",
        "--partitions",
        "3",
        "--replication-factor",
        "1",
        "--config",
        "cleanup.policy=compact",
    )
    assert (created.returncode, created.stdout, created.stderr) == (
        0,
        "Created topic orders.\n",
        "",
    )
    (request,) = node.requests("CreateTopics")
    assert [(c.name, c.value) for c in request.topics[0].configs] == [("cleanup.policy", "compact")]

    exists = metaquorum("create", "--bootstrap-controller", node.address, "--topic", "exists")
    assert exists.returncode == 1
    assert exists.stderr == f"{ERROR_PREFIX}TOPIC_ALREADY_EXISTS: Topic 'exists' already exists.\n"

    described = metaquorum("--bootstrap-server", node.address, "--describe", "--topic", "orders")
    assert described.returncode == 0
    assert described.stdout.splitlines() == ORDERS_LINES


def test_usage_errors_and_unreachable_controllers_as_a_process() -> None:
    usage = metaquorum("--bootstrap-server", "h:1", "--list", "--partitions", "1")
    assert usage.returncode == 1
    assert usage.stderr == "Error: Option --partitions can only be used with --create or --alter\n"

    dead = closed_address()
    unreachable = metaquorum("--bootstrap-server", dead, "--list", "--timeout-ms", "1000")
    assert unreachable.returncode == 1
    assert unreachable.stdout == ""
    (line,) = unreachable.stderr.splitlines()
    assert line.startswith(ERROR_PREFIX)
    assert dead in line
    assert "UNAVAILABLE" in line
