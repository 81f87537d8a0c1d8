"""``metaquorum groups`` (kafka-consumer-groups): its argument checks in Kafka's order with
Kafka's messages, and its output, against strings Kafka 4.4's own tool printed
(tests/process/test_groups_tool_process.py compares the two tools live). The admin calls are
a fake here."""

from __future__ import annotations

import io
from collections.abc import Mapping, Sequence
from pathlib import Path

import pytest

from quorum.cli import build_parser, main
from quorum.tools.groups import (
    TP,
    GroupDescription,
    GroupListing,
    GroupsCommand,
    GroupsError,
    GroupsUsageError,
    Member,
    OffsetRow,
    command_from_args,
    format_delete_offsets,
    format_deletion,
    format_listings,
    format_members,
    format_offsets,
    format_reset,
    format_reset_csv,
    format_state,
    java_hash_order,
    java_string_hash,
    java_tp_hash,
    kafka_error,
    parse_datetime_ms,
    parse_duration_ms,
    read_reset_plan,
    run_groups,
)
from quorum.tools.groups_options import NO_DRY_RUN_WARNING

BASE = ["groups", "--bootstrap-server", "127.0.0.1:1"]
LIVE_ID = "live-client-73c59472-35e4-4cac-aa5b-07782493f9d9"


def parse(*args: str, base: Sequence[str] = BASE) -> tuple[GroupsCommand, str]:
    err = io.StringIO()
    command = command_from_args(build_parser().parse_args([*base, *args]), err)
    return command, err.getvalue()


# ----- argument checks -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ([], "Command must include exactly one action: --list, --describe, --delete, "
             "--reset-offsets, --delete-offsets, --validate-regex"),
        (["--describe"], "Option [describe] takes one of these options: [group], [all-groups]"),
        (["--list", "--describe"], "Option [describe] takes one of these options"),
        (["--list", "--members"],
         "Option(s) [members] are unavailable given other options on the command line"),
        (["--describe", "--group", "g", "--members", "--state"],
         "Option [describe] takes at most one of these options: [members], [offsets], [state]"),
        (["--describe", "--group", "g", "--state", "Stable"],
         "Option [describe] does not take a value for [state]"),
        (["--describe", "--group", "g", "--all-groups"],
         'Option "[group]" can\'t be used with option "[all-groups]"'),
        (["--list", "--group", "g"], 'Option "[group]" can\'t be used with option "[list]"'),
        (["--describe", "--group", "g", "--topic", "t"],
         'Option "[topic]" can\'t be used with option "[describe]"'),
        (["--delete"], "Option [delete] takes one of these options: [all-groups], [group]"),
        (["--delete", "--group", "g", "--topic", "t"],
         "The consumer does not support topic-specific offset deletion from a consumer group."),
        (["--delete-offsets", "--group", "g"],
         "Option [delete-offsets] takes the following options: [topic], [group]"),
        (["--reset-offsets", "--all-topics", "--to-earliest", "--dry-run"],
         "Option [reset-offsets] takes one of these options: [all-groups], [group]"),
        (["--reset-offsets", "--group", "g", "--all-topics", "--to-earliest", "--dry-run",
          "--execute"], "Option [reset-offsets] only accepts one of [execute] and [dry-run]"),
        (["--reset-offsets", "--group", "g", "--all-topics", "--to-earliest", "--to-latest"],
         'Option "[to-earliest]" can\'t be used with option "[to-latest]"'),
        (["--reset-offsets", "--group", "g", "--all-topics", "--to-offset", "3", "--shift-by",
          "2"], 'Option "[to-offset]" can\'t be used with option "[shift-by]"'),
        (["--list", "--state", "bogus"], "Invalid state list 'bogus'. Valid states are: Stable, "
         "PreparingRebalance, CompletingRebalance, Reconciling, Empty, Assigning, Dead"),
        (["--validate-regex", "a.*"], "--validate-regex is not supported by metaquorum groups"),
    ],
)  # fmt: skip
def test_argument_checks_are_kafkas_in_kafkas_order(args: list[str], message: str) -> None:
    with pytest.raises(GroupsUsageError) as caught:
        parse(*args)
    assert str(caught.value).startswith(message)


def test_bootstrap_server_is_required_as_kafka_says() -> None:
    with pytest.raises(GroupsUsageError, match=r'Missing required argument "\[bootstrap-server\]"'):
        parse("--list", base=["groups"])


def test_a_usage_error_exits_1_with_the_message_on_stderr(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main([*BASE, "--describe"]) == 1
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.splitlines()[0] == (
        "Option [describe] takes one of these options: [group], [all-groups]"
    )


def test_reset_without_execute_is_a_dry_run_and_warns_first() -> None:
    command, warned = parse("--reset-offsets", "--group", "g", "--all-topics", "--to-latest")
    assert warned == NO_DRY_RUN_WARNING + "\n"
    assert not command.execute
    assert command.scenario == "to-latest"
    # The warning comes before a later check's error, as in Kafka.
    err = io.StringIO()
    with pytest.raises(GroupsUsageError, match=r"takes one of these options"):
        command_from_args(build_parser().parse_args([*BASE, "--reset-offsets", "--to-latest"]), err)
    assert err.getvalue().startswith("WARN: No action will be performed")


def test_a_good_command() -> None:
    command, warned = parse(
        "--reset-offsets", "--group", "a", "--group", "b", "--topic", "orders:0,1",
        "--shift-by", "-2", "--execute",
    )  # fmt: skip
    assert warned == ""
    assert command.action == "reset-offsets"
    assert command.groups == ("a", "b")
    assert command.topics == ("orders:0,1",)
    assert (command.scenario, command.scenario_value, command.execute) == ("shift-by", "-2", True)
    assert parse("--describe", "--all-groups", "--members", "--verbose")[0].describe_what == (
        "members"
    )
    assert parse("--list", "--state", "stable,EMPTY")[0].list_states == ("Stable", "Empty")


# ----- Java's HashMap order --------------------------------------------------------------------


def test_java_hashes() -> None:
    assert java_string_hash("g1") == ord("g") * 31 + ord("1")
    assert java_string_hash("") == 0
    # "polygenelubricants".hashCode() is Integer.MIN_VALUE, a classic of Java's String hash.
    assert java_string_hash("polygenelubricants") == 0x80000000
    assert java_tp_hash(("", 0)) == 31 * 31


def test_hash_order_is_kafkas_measured_order() -> None:
    # Kafka 4.4 listed the failed deletions as 'g2' then 'nope3' and reset rows as orders-0,
    # orders-2, payments-with-a-long-name-0 (both from HashMaps).
    assert java_hash_order(["nope3", "g2"], java_string_hash) == ["g2", "nope3"]
    tps = [("payments-with-a-long-name", 0), ("orders", 2), ("orders", 0)]
    assert java_hash_order(tps, java_tp_hash) == [
        ("orders", 0), ("orders", 2), ("payments-with-a-long-name", 0),
    ]  # fmt: skip
    many = [("t", p) for p in range(40)]
    assert sorted(java_hash_order(many, java_tp_hash)) == many


# ----- output, as Kafka 4.4 printed it ---------------------------------------------------------

LIVE = GroupDescription(
    group_id="g2",
    state="Stable",
    coordinator_host="127.0.0.1",
    coordinator_port=23368,
    coordinator_id=101,
    partition_assignor="range",
    members=(
        Member(LIVE_ID, "/127.0.0.1", "live-client", (("orders", 0), ("orders", 1), ("orders", 2))),
    ),
)


def test_offsets_table() -> None:
    rows = [
        OffsetRow("g2", "orders", 0, None, 10, LIVE_ID, "/127.0.0.1", "live-client"),
        OffsetRow("g2", "orders", 1, 10, 10, LIVE_ID, "/127.0.0.1", "live-client"),
    ]
    assert format_offsets(rows, verbose=False) == (
        "\nGROUP           TOPIC           PARTITION  CURRENT-OFFSET  LOG-END-OFFSET  LAG        "
        f"     CONSUMER-ID                                      HOST            CLIENT-ID\n"
        f"g2              orders          0          -               10              -          "
        f"     {LIVE_ID} /127.0.0.1      live-client\n"
        f"g2              orders          1          10              10              0          "
        f"     {LIVE_ID} /127.0.0.1      live-client\n"
    )
    empty = [OffsetRow("g1", "orders", 1, 5, 10, "-", "-", "-", leader_epoch=0)]
    assert format_offsets(empty, verbose=True) == (
        "\nGROUP           TOPIC           PARTITION  LEADER-EPOCH    CURRENT-OFFSET  "
        "LOG-END-OFFSET  LAG             CONSUMER-ID     HOST            CLIENT-ID\n"
        "g1              orders          1          0               5               10         "
        "     5               -               -               -\n"
    )


def test_members_and_state_tables() -> None:
    assert format_members(LIVE, verbose=True, widths_from_members=True) == (
        "\nGROUP           CONSUMER-ID                                      HOST            "
        "CLIENT-ID       #PARTITIONS     CURRENT-EPOCH   CURRENT-ASSIGNMENT   TARGET-EPOCH    "
        "TARGET-ASSIGNMENT   \n"
        f"g2              {LIVE_ID} /127.0.0.1      live-client     3               -         "
        "      orders:0,1,2         -               -                   \n"
    )
    empty = GroupDescription("g1", "Empty", "127.0.0.1", 23368, 101)
    assert format_members(empty, verbose=False, widths_from_members=False) == (
        "\nGROUP           CONSUMER-ID     HOST            CLIENT-ID       #PARTITIONS     \n"
    )
    assert format_state(LIVE, verbose=False) == (
        "\nGROUP           COORDINATOR (ID)          ASSIGNMENT-STRATEGY  STATE                "
        "#MEMBERS\ng2              127.0.0.1:23368  (101)    range                Stable      "
        "         1\n"
    )
    assert format_state(empty, verbose=True) == (
        "\nGROUP           COORDINATOR (ID)          ASSIGNMENT-STRATEGY  STATE                "
        "GROUP-EPOCH     TARGET-ASSIGNMENT-EPOCH   #MEMBERS\ng1              127.0.0.1:23368  "
        "(101)    -                    Empty                -               -                "
        "         0\n"
    )


def test_list_tables() -> None:
    listings = [GroupListing("g1", "Empty", "Classic"), GroupListing("g2", "Stable", "Classic")]
    assert format_listings(listings, with_type=True, with_state=True) == (
        "GROUP                     TYPE                 STATE               \n"
        "g1                        Classic              Empty               \n"
        "g2                        Classic              Stable              \n"
    )


def test_reset_tables_and_csv() -> None:
    plan = {("payments-with-a-long-name", 0): 0, ("orders", 2): 0, ("orders", 0): 0}
    assert format_reset({"g3": plan}) == (
        "\nGROUP           TOPIC                     PARTITION  NEW-OFFSET\n"
        "g3              orders                    0          0\n"
        "g3              orders                    2          0\n"
        "g3              payments-with-a-long-name 0          0\n"
    )
    assert format_reset({}) == "\n"
    assert format_reset({"g2": {}}) == "\nGROUP           TOPIC           PARTITION  NEW-OFFSET\n"
    assert format_reset_csv({"g3": plan}, single_group=True) == (
        'orders,0,0\norders,2,0\n"payments-with-a-long-name",0,0\n'
    )
    assert format_reset_csv({"g3": {("orders", 0): 5}}, single_group=False) == "g3,orders,0,5\n"
    # Measured with Kafka's tool: '-', '.' and '_' alone do not quote; 25 characters do.
    assert format_reset_csv({"csv-2": {("a.b_c", 0): 0}}, single_group=False) == (
        "csv-2,a.b_c,0,0\n"
    )
    assert format_reset_csv({"a b": {("x" * 24, 0): 0}}, single_group=False) == (
        f'"a b",{"x" * 24},0,0\n'
    )


def test_deletion_lines() -> None:
    assert format_deletion(["g8"], []) == (
        "Deletion of requested consumer groups ('g8') was successful.\n"
    )
    failed = [
        ("g2", kafka_error("NON_EMPTY_GROUP", "The group is not empty.")),
        ("nope3", kafka_error("GROUP_ID_NOT_FOUND", "The group id does not exist.")),
    ]
    assert format_deletion(["g4"], failed) == (
        "\nError: Deletion of some consumer groups failed:\n"
        "* Group 'g2' could not be deleted due to: "
        "org.apache.kafka.common.errors.GroupNotEmptyException: The group is not empty.\n"
        "* Group 'nope3' could not be deleted due to: "
        "org.apache.kafka.common.errors.GroupIdNotFoundException: The group id does not exist.\n"
        "\nThese consumer groups were deleted successfully: 'g4'\n"
    )
    unknown = kafka_error("UNKNOWN_TOPIC_OR_PARTITION", "This server does not host this "
                          "topic-partition.")  # fmt: skip
    assert format_delete_offsets({("orders", 0): None, ("nosuch", -1): unknown}) == (
        "\nTOPIC           PARTITION  STATUS         \n"
        "nosuch          -          Error: org.apache.kafka.common.errors."
        "UnknownTopicOrPartitionException: This server does not host this topic-partition.\n"
        "orders          0          Successful     \n"
    )


def test_times() -> None:
    assert parse_datetime_ms("2020-01-01T00:00:00.000") == 1577836800000
    assert parse_datetime_ms("2020-01-01T01:00:00.000+01:00") == 1577836800000
    assert parse_datetime_ms("2020-01-01T00:00:00.250Z") == 1577836800250
    with pytest.raises(GroupsError, match="Unparseable date"):
        parse_datetime_ms("2020-01-01T00:00:00")
    assert parse_duration_ms("PT1H") == 3_600_000
    assert parse_duration_ms("P1DT2M3.5S") == 86_400_000 + 120_000 + 3_500
    assert parse_duration_ms("-PT1S") == -1000
    with pytest.raises(GroupsError, match="cannot be parsed"):
        parse_duration_ms("1H")


# ----- running against a fake admin ------------------------------------------------------------


class FakeAdmin:
    def __init__(self, groups: Mapping[str, GroupDescription]) -> None:
        self.groups = dict(groups)
        self.committed: dict[str, dict[TP, tuple[int, int | None]]] = {
            "g1": {("orders", 0): (10, 0), ("orders", 1): (5, 0)}
        }
        self.altered: dict[str, dict[TP, int]] = {}

    def list_groups(
        self, states: Sequence[str] = (), types: Sequence[str] = ()
    ) -> list[GroupListing]:
        return [GroupListing(g, d.state, "Classic") for g, d in self.groups.items()]

    def describe_groups(self, group_ids: Sequence[str]) -> dict[str, GroupDescription]:
        dead = GroupDescription("", "Dead", "127.0.0.1", 1, 101)
        return {g: self.groups.get(g, dead) for g in group_ids}

    def committed_offsets(self, group_id: str) -> dict[TP, tuple[int, int | None]]:
        return dict(self.committed.get(group_id, {}))

    def topic_partitions(
        self, topics: Sequence[str]
    ) -> dict[str, list[tuple[int, bool]] | GroupsError]:
        return {t: [(0, True), (1, True), (2, True)] for t in topics}

    def list_offsets(self, partitions: Sequence[TP], spec: str | int) -> dict[TP, int]:
        return dict.fromkeys(partitions, 0 if spec == "earliest" else 10)

    def alter_offsets(self, group_id: str, offsets: Mapping[TP, int]) -> None:
        self.altered[group_id] = dict(offsets)

    def delete_groups(self, group_ids: Sequence[str]) -> dict[str, GroupsError | None]:
        return dict.fromkeys(group_ids)

    def delete_offsets(
        self, group_id: str, partitions: Sequence[TP]
    ) -> tuple[str | None, dict[TP, GroupsError | None]]:
        return None, dict.fromkeys(partitions)


EMPTY = GroupDescription("g1", "Empty", "127.0.0.1", 23368, 101)


def run(admin: FakeAdmin, *args: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    command, _ = parse(*args)
    code = run_groups(command, admin, out, err, now_ms=lambda: 1_000_000)
    return code, out.getvalue(), err.getvalue()


def test_describe_an_empty_group_and_a_missing_one() -> None:
    admin = FakeAdmin({"g1": EMPTY})
    code, out, err = run(admin, "--describe", "--group", "g1")
    assert code == 0
    assert out.splitlines()[2:] == [
        "g1              orders          0          10              10              0          "
        "     -               -               -",
        "g1              orders          1          5               10              5          "
        "     -               -               -",
    ]
    assert err == "\nConsumer group 'g1' has no active members.\n"
    # An error while running is Kafka's "Error: ..." on stdout, and exit code 0.
    code, out, err = run(admin, "--describe", "--group", "nope")
    assert (code, err) == (0, "")
    assert out == (
        "\nError: Executing consumer group command failed due to "
        "org.apache.kafka.common.errors.GroupIdNotFoundException: Group nope not found.\n"
    )


def test_reset_execute_alters_and_refuses_active_groups() -> None:
    live = GroupDescription("live", "Stable", "127.0.0.1", 1, 101, members=LIVE.members)
    admin = FakeAdmin({"g1": EMPTY, "live": live})
    code, out, _ = run(admin, "--reset-offsets", "--group", "g1", "--all-topics",
                       "--shift-by", "20", "--execute")  # fmt: skip
    assert code == 0
    assert admin.altered == {"g1": {("orders", 0): 10, ("orders", 1): 10}}
    assert out.endswith("g1              orders          1          10\n")
    code, out, _ = run(admin, "--reset-offsets", "--group", "live", "--all-topics",
                       "--to-earliest", "--dry-run")  # fmt: skip
    assert out.startswith(
        "\nError: Assignments can only be reset if the group 'live' is inactive, but the "
        "current state is Stable.\n"
    )
    assert "live" not in admin.altered


def test_a_usage_error_found_while_running_exits_1() -> None:
    admin = FakeAdmin({"g1": EMPTY})
    code, out, err = run(admin, "--reset-offsets", "--group", "g1", "--topic", "orders",
                         "--shift-by", "1", "--dry-run")  # fmt: skip
    assert (code, out) == (1, "")
    assert err == (
        "Cannot shift offset for partition orders-2 since there is no current committed offset\n"
    )
    code, _, err = run(admin, "--reset-offsets", "--group", "g1", "--topic", "orders:x",
                       "--to-latest", "--dry-run")  # fmt: skip
    assert (code, err) == (1, "Invalid partition 'x' specified in topic arg 'orders:x''\n")


def test_list_is_by_group_id() -> None:
    admin = FakeAdmin({"z-app": EMPTY, "a-app": EMPTY})
    assert run(admin, "--list") == (0, "a-app\nz-app\n", "")
    _, out, _ = run(admin, "--list", "--state")
    assert out.splitlines()[1:] == [
        "a-app                     Empty               ",
        "z-app                     Empty               ",
    ]


def test_a_value_kafka_cannot_convert_fails_while_running_as_in_kafka() -> None:
    admin = FakeAdmin({"g1": EMPTY})
    code, out, err = run(admin, "--reset-offsets", "--group", "g1", "--all-topics",
                         "--to-offset", "x", "--dry-run")  # fmt: skip
    assert (code, err) == (0, "")
    assert out == (
        "\nError: Executing consumer group command failed due to Cannot parse argument 'x' of "
        "option to-offset\n"
    )
    _, out, _ = run(admin, "--describe", "--group", "g1", "--timeout", "1_000")
    assert out.endswith("Cannot parse argument '1_000' of option timeout\n")
    assert parse("--describe", "--group", "g1", "--timeout", "+250")[0].timeout_ms == 250


def test_from_file_reads_kafkas_csv(tmp_path: Path) -> None:
    one = tmp_path / "one.csv"
    one.write_text('orders,0,2\n"payments-with-a-long-name",0,7\n')
    assert read_reset_plan(str(one), ["g"]) == {
        "g": {("orders", 0): 2, ("payments-with-a-long-name", 0): 7}
    }
    many = tmp_path / "many.csv"
    many.write_text("g,orders,2,1\nh,orders,0,3\n")
    assert read_reset_plan(str(many), ["g", "h"]) == {
        "g": {("orders", 2): 1},
        "h": {("orders", 0): 3},
    }
    with pytest.raises(GroupsError, match="IOException: Unable to read file"):
        read_reset_plan(str(tmp_path / "missing.csv"), ["g"])
    admin = FakeAdmin({"g1": EMPTY})
    code, out, _ = run(admin, "--reset-offsets", "--group", "g1", "--from-file", str(many))
    assert (code, out) == (0, "\nError: No reset plan for group g1 found.\n\nGROUP           "
                              "TOPIC           PARTITION  NEW-OFFSET\n")  # fmt: skip
