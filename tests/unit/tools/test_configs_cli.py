"""``metaquorum configs``' arguments (kafka-configs'): --add-config split on commas outside
brackets, --delete-config, exactly one of --alter and --describe, topics only. The commands
themselves run against a real cluster in tests/process/test_alter_configs_process.py."""

from __future__ import annotations

import pytest

from quorum.admin.types import AlterConfigOp, AlterConfigOpType
from quorum.cli import build_parser
from quorum.tools.configs import ConfigsCommand, ConfigsError, command_from_args
from quorum.tools.configs_quotas import QuotaTarget, java_double, quota_line

BASE = ["configs", "--bootstrap-server", "127.0.0.1:1", "--entity-type", "topics"]


def parse(*args: str) -> ConfigsCommand:
    return command_from_args(build_parser().parse_args([*BASE, *args]))


def test_alter_sets_and_deletes_with_kafkas_bracketed_lists() -> None:
    command = parse(
        "--entity-name", "orders", "--alter",
        "--add-config", "retention.ms=1000,cleanup.policy=[compact,delete]",
        "--delete-config", "segment.ms,max.message.bytes",
    )  # fmt: skip
    assert command == ConfigsCommand(
        "orders",
        describe=False,
        changes=(
            AlterConfigOp("retention.ms", "1000"),
            AlterConfigOp("cleanup.policy", "compact,delete"),
            AlterConfigOp("segment.ms", None, AlterConfigOpType.DELETE),
            AlterConfigOp("max.message.bytes", None, AlterConfigOpType.DELETE),
        ),
    )


def test_describe() -> None:
    assert parse("--entity-name", "orders", "--describe") == ConfigsCommand("orders", True)


@pytest.mark.parametrize(
    ("args", "text"),
    [
        (["--entity-name", "t", "--alter", "--add-config", "retention.ms"], "format 'key=val'"),
        (["--entity-name", "t", "--alter"], "needs --add-config or --delete-config"),
        (["--entity-name", "t"], "exactly one of --alter and --describe"),
        (["--entity-name", "t", "--describe", "--add-config", "a=b"], "go with --alter"),
        (["--alter", "--add-config", "a=b"], "takes --entity-name"),
    ],
)
def test_bad_arguments_say_what_to_give(args: list[str], text: str) -> None:
    with pytest.raises(ConfigsError, match=text):
        parse(*args)


def brokers(*args: str) -> ConfigsCommand:
    base = ["configs", "--bootstrap-server", "h:1", "--entity-type", "brokers"]
    return command_from_args(build_parser().parse_args([*base, *args]))


def test_brokers_take_an_id_or_the_cluster_wide_default() -> None:
    command = brokers(
        "--entity-default", "--alter", "--add-config", "unclean.leader.election.enable=true"
    )
    assert command == ConfigsCommand(
        None, False, (AlterConfigOp("unclean.leader.election.enable", "true"),)
    )
    assert brokers("--entity-name", "101", "--alter", "--delete-config", "log.retention.ms") == (
        ConfigsCommand(
            None,
            False,
            (AlterConfigOp("log.retention.ms", None, AlterConfigOpType.DELETE),),
            broker_id=101,
        )
    )
    assert brokers("--entity-name", "101", "--describe", "--all") == ConfigsCommand(
        None, True, broker_id=101, describe_all=True
    )
    assert brokers("--entity-default", "--describe") == ConfigsCommand(None, True)
    with pytest.raises(ConfigsError, match=r"--entity-name ID \(one broker\) or --entity-default"):
        brokers("--entity-name", "1", "--entity-default", "--describe")
    with pytest.raises(ConfigsError, match="'b1' is not a broker id"):
        brokers("--entity-name", "b1", "--describe")
    with pytest.raises(ConfigsError, match="--all goes with --describe"):
        brokers("--entity-default", "--alter", "--all", "--add-config", "a=b")
    with pytest.raises(ConfigsError, match="topics, brokers, users or clients"):
        command_from_args(
            build_parser().parse_args(
                ["configs", "--bootstrap-server", "h:1", "--entity-type", "ips", "--describe"]
            )
        )


# ----- client quotas (--entity-type users|clients) -------------------------------------------


def quotas(entity_type: str, *args: str) -> ConfigsCommand:
    base = ["configs", "--bootstrap-server", "h:1", "--entity-type", entity_type]
    return command_from_args(build_parser().parse_args([*base, *args]))


def test_quota_arguments() -> None:
    command = quotas(
        "users", "--entity-name", "CN=alice", "--alter",
        "--add-config", "producer_byte_rate=1024,request_percentage=12.5",
        "--delete-config", "consumer_byte_rate",
    )  # fmt: skip
    assert command.quota == QuotaTarget("user", "CN=alice")
    assert command.changes == (
        AlterConfigOp("producer_byte_rate", "1024"),
        AlterConfigOp("request_percentage", "12.5"),
        AlterConfigOp("consumer_byte_rate", None, AlterConfigOpType.DELETE),
    )
    default = quotas("clients", "--entity-default", "--alter", "--add-config", "a=1")
    assert default.quota == QuotaTarget("client-id", None)
    assert quotas("users", "--describe").quota == QuotaTarget("user", None, every=True)
    assert quotas("clients", "--entity-default", "--describe").quota == QuotaTarget(
        "client-id", None
    )


@pytest.mark.parametrize(
    ("args", "text"),
    [
        (["--alter", "--add-config", "producer_byte_rate=1"], "--entity-name NAME or"),
        (["--entity-name", "u", "--alter", "--add-config", "k=fast"], "Invalid value 'fast'"),
        (["--entity-name", "u", "--entity-default", "--describe"], "not both"),
        (["--entity-name", "u", "--describe", "--all"], "--all is not supported"),
        (["--entity-name", "", "--describe"], "--entity-name is empty"),
    ],
)
def test_bad_quota_arguments_say_what_to_give(args: list[str], text: str) -> None:
    with pytest.raises(ConfigsError, match=text):
        quotas("users", *args)


def test_quota_lines_are_kafkas() -> None:
    assert (
        quota_line((("client-id", None), ("user", "CN=alice")), {"producer_byte_rate": 1e7})
        == "Quota configs for user-principal 'CN=alice', client-id '<default>' are "
        "producer_byte_rate=1.0E7\n"
    )
    assert quota_line(
        (("user", "u"),), {"request_percentage": 12.5, "consumer_byte_rate": 1024.0}
    ) == ("Quota configs for user-principal 'u' are consumer_byte_rate=1024.0, "
          "request_percentage=12.5\n")  # fmt: skip
    assert [java_double(v) for v in (0.0, 1.0, 9999999.0, 1.5e8, 5e-4)] == [
        "0.0",
        "1.0",
        "9999999.0",
        "1.5E8",
        "5.0E-4",
    ]
