"""``metaquorum configs``' arguments (kafka-configs'): --add-config split on commas outside
brackets, --delete-config, exactly one of --alter and --describe, topics only. The commands
themselves run against a real cluster in tests/process/test_alter_configs_process.py."""

from __future__ import annotations

import pytest

from quorum.admin.types import AlterConfigOp, AlterConfigOpType
from quorum.cli import build_parser
from quorum.tools.configs import ConfigsCommand, ConfigsError, command_from_args

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
    with pytest.raises(ConfigsError, match="topics or brokers"):
        command_from_args(
            build_parser().parse_args(
                ["configs", "--bootstrap-server", "h:1", "--entity-type", "users", "--describe"]
            )
        )
