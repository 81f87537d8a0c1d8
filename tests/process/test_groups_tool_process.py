"""``metaquorum groups`` beside Kafka 4.4's own ``kafka-consumer-groups`` (the Java class
``ConsumerGroupCommand``), both against Apache Kafka itself (``quorum.kafka_peer``: one
controller, one broker, mTLS, ACLs on), with the same arguments: stdout must be byte for byte
the same, the exit code the same, and stderr the same lines once Kafka's logging decoration
(timestamps, logger names, Java stack traces, the option table of a usage error) is taken off.

One Kafka cluster for the module. The groups: ``empty-app`` (offsets committed, no member:
Empty), ``live-app`` (one member of a confluent-kafka consumer that stays subscribed: Stable),
``new-app`` (the same with KIP-848's consumer protocol: epochs in ``--verbose``),
and per destructive case a group made again before each tool runs, so that both tools start
from the same state.

Kafka's tool runs in one JVM for the module (``scripts/kafka/GroupsDriver.java`` calls its
``main`` once per case, with Kafka's ``Exit`` made an exception): a JVM start per case cost most
of the module's time. Kafka's jars come from ``scripts/kafka/fetch``; without Java 17+ or them,
the module skips with one line.
"""

from __future__ import annotations

import re
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path

import pytest
from confluent_kafka import (
    Consumer,
    ConsumerGroupTopicPartitions,
    KafkaException,
    Producer,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient, NewTopic

from quorum.harness import REPO, wait_until
from quorum.kafka_peer import (
    KafkaCluster,
    compile_driver,
    java_command,
    kafka_cluster,
    kafka_missing,
)

MISSING = kafka_missing()
if MISSING is not None:
    pytest.skip(f"Kafka's tools cannot run: {MISSING}", allow_module_level=True)

pytestmark = [pytest.mark.slow, pytest.mark.process]

GROUPS = "org.apache.kafka.tools.consumer.group.ConsumerGroupCommand"
TOPICS = {"orders": 3, "payments-eu": 1}
# Committed offsets of the groups made by ``commit``: orders-1 has none.
COMMITTED = {("orders", 0): 3, ("orders", 2): 7, ("payments-eu", 0): 1}


@dataclass
class Peer:
    cluster: KafkaCluster
    config: dict[str, str]
    properties: Path

    @property
    def base(self) -> list[str]:
        return ["--bootstrap-server", self.cluster.bootstrap, "--command-config",
                str(self.properties)]  # fmt: skip


def commit(peer: Peer, group: str, offsets: dict[tuple[str, int], int] = COMMITTED) -> None:
    """Commit ``offsets`` for ``group`` (retried while the offsets topic's coordinator loads:
    the first commit of a fresh cluster creates it)."""

    def attempt() -> bool:
        consumer = Consumer(peer.config | {"group.id": group, "enable.auto.commit": False})
        try:
            consumer.commit(
                offsets=[TopicPartition(t, p, o) for (t, p), o in offsets.items()],
                asynchronous=False,
            )
        except KafkaException as exc:
            if not exc.args[0].retriable():
                raise
            return False
        finally:
            consumer.close()
        return True

    wait_until(attempt, 60, f"offsets of {group} committed")


def committed(peer: Peer, group: str) -> dict[tuple[str, int], int]:
    admin = AdminClient(peer.config)
    answer = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)])[group]
    return {(tp.topic, tp.partition): tp.offset for tp in answer.result().topic_partitions}


@pytest.fixture(scope="module")
def peer(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Peer]:
    root = tmp_path_factory.mktemp("kafka-groups")
    # A group's first member is assigned at once (Kafka waits 3 s by default for others).
    settings = {"group.initial.rebalance.delay.ms": "0"}
    with kafka_cluster(root, controllers=1, brokers=1, settings=settings) as c:
        assert c.certs is not None
        peer = Peer(c, c.confluent_config(), c.certs.kafka_client_properties())
        admin = AdminClient(peer.config)
        for future in admin.create_topics(
            [NewTopic(name, count, 1) for name, count in TOPICS.items()]
        ).values():
            future.result(timeout=30)
        producer = Producer(peer.config)
        for i in range(30):
            producer.produce("orders", value=b"o%d" % i, partition=i % 3)
        for _ in range(5):
            producer.produce("payments-eu", value=b"p")
        assert producer.flush(30) == 0
        commit(peer, "empty-app", {("orders", 0): 10, ("orders", 1): 5})
        stop = threading.Event()
        members = [
            threading.Thread(target=stay_in_group, args=(peer, stop, group, protocol), daemon=True)
            for group, protocol in (("live-app", "classic"), ("new-app", "consumer"))
        ]
        for member in members:
            member.start()
        try:
            for group in ("live-app", "new-app"):
                wait_until(lambda g=group: committed(peer, g), 60, f"{group}'s first commit")
            yield peer
        finally:
            stop.set()
            for member in members:
                member.join(timeout=30)


def stay_in_group(peer: Peer, stop: threading.Event, group: str, protocol: str) -> None:
    """A member of ``group`` on every partition of orders, committing after 20 records; its
    ``group.protocol`` is "classic" or "consumer" (KIP-848)."""
    consumer = Consumer(
        peer.config
        | {"group.id": group, "client.id": f"{group}-client", "group.protocol": protocol,
           "auto.offset.reset": "earliest", "enable.auto.commit": False}
    )  # fmt: skip
    consumer.subscribe(["orders"])
    seen = 0
    try:
        while not stop.is_set():
            message = consumer.poll(0.2)
            if message is not None and not message.error():
                seen += 1
                if seen == 20:
                    consumer.commit(asynchronous=False)
    finally:
        consumer.close()


# ----- running both ----------------------------------------------------------------------------

_LOG_LINE = re.compile(r"^\[\d{4}-\d\d-\d\d [\d:,]+\] (?P<level>[A-Z]+) (?P<text>.*) \([\w.$]+\)$")
_JAVA_EXCEPTION = re.compile(r"^(Caused by: )?[a-z][\w]*(\.[\w$]+)+(Exception|Error)\b")


def kafka_stderr(text: str) -> list[str]:
    """Kafka's stderr without its decoration: log lines as ``LEVEL text``, no stack traces,
    no option table, an uncaught option exception as its message."""
    lines = []
    table = False
    for raw in text.splitlines():
        line = raw.removeprefix(
            'Exception in thread "main" joptsimple.UnavailableOptionException: '
        )
        if line.startswith("Option ") and "Description" in line:
            table = True  # the option table ends the output
        if table or not line.strip() or line.startswith("\t") or _JAVA_EXCEPTION.match(line):
            continue
        match = _LOG_LINE.match(line)
        lines.append(f"{match['level']} {match['text']}" if match else line)
    return lines


def mq_stderr(text: str) -> list[str]:
    return [
        line
        for line in text.splitlines()
        if line.strip() and not line.startswith("(see `metaquorum groups --help`)")
    ]


@dataclass(frozen=True)
class Outcome:
    stdout: str
    stderr: list[str]
    code: int


class KafkaTool:
    """Kafka's ``ConsumerGroupCommand`` run again and again in one JVM
    (``scripts/kafka/GroupsDriver.java``): one JVM start for the module instead of one per
    case."""

    def __init__(self, root: Path) -> None:
        classes = compile_driver(REPO / "scripts" / "kafka" / "GroupsDriver.java")
        self.log = root / "groups-driver.log"
        with self.log.open("wb") as log:
            self.process = subprocess.Popen(
                java_command("GroupsDriver", extra_classpath=[classes]),
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log,
            )  # fmt: skip
        self.lock = threading.Lock()

    def run(self, args: list[str]) -> Outcome:
        assert self.process.stdin is not None
        assert self.process.stdout is not None
        with self.lock:
            self.process.stdin.write(("\t".join(args) + "\n").encode())
            self.process.stdin.flush()
            header = self.process.stdout.readline().decode()
            assert header, f"GroupsDriver stopped:\n{self.log.read_text(errors='replace')}"
            code, out_bytes, err_bytes = (int(x) for x in header.split())
            out = self.process.stdout.read(out_bytes).decode()
            err = self.process.stdout.read(err_bytes).decode()
        return Outcome(out, kafka_stderr(err), code)

    def close(self) -> None:
        assert self.process.stdin is not None
        self.process.stdin.close()
        try:
            self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(timeout=10)


@pytest.fixture(scope="module")
def kafka_tool(peer: Peer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaTool]:
    tool = KafkaTool(tmp_path_factory.mktemp("groups-driver"))
    try:
        yield tool
    finally:
        tool.close()


def run_mq(peer: Peer, args: list[str]) -> Outcome:
    result = subprocess.run(
        [sys.executable, "-m", "quorum.cli", "groups", *peer.base, *args],
        cwd=REPO, capture_output=True, text=True, stdin=subprocess.DEVNULL, timeout=120,
        check=False,
    )  # fmt: skip
    return Outcome(result.stdout, mq_stderr(result.stderr), result.returncode)


def run_both(
    peer: Peer, tool: KafkaTool, args: list[str], prepare: Callable[[], None] | None = None
) -> tuple[Outcome, Outcome]:
    """Kafka's tool, then ``metaquorum groups``, with ``args`` (and the cluster's bootstrap and
    client properties); ``prepare`` runs before each (a destructive case's group)."""
    if prepare is not None:
        prepare()
    kafka = tool.run([*peer.base, *args])
    if prepare is not None:
        prepare()
    return kafka, run_mq(peer, args)


def assert_same(
    peer: Peer, tool: KafkaTool, args: list[str], prepare: Callable[[], None] | None = None
) -> Outcome:
    return compare(args, *run_both(peer, tool, args, prepare))


def compare(args: list[str], kafka: Outcome, mq: Outcome) -> Outcome:
    assert mq.stdout == kafka.stdout, f"stdout differs for {args}"
    assert mq.code == kafka.code, f"exit code differs for {args}: {kafka.stderr} / {mq.stderr}"
    assert [unordered(x) for x in mq.stderr] == [unordered(x) for x in kafka.stderr], (
        f"stderr differs for {args}"
    )
    return mq


_SET_LIST = re.compile(
    r"^(?P<head>.*(?:options|scenarios): \[?)(?P<items>\[[^]]+\](?:, \[[^]]+\])*)(?P<end>\]?)$"
)


def unordered(line: str) -> str:
    """Kafka prints some option sets from a Java HashSet of objects hashed by identity: their
    order changes from one run of its tool to the next. Such a list, sorted."""
    if match := _SET_LIST.match(line):
        items = sorted(match["items"].split(", "))
        return f"{match['head']}{', '.join(items)}{match['end']}"
    head, sep, states = line.partition("Valid states are: ")
    if sep:
        return head + sep + ", ".join(sorted(states.split(", ")))
    return line


# ----- the cases -------------------------------------------------------------------------------

READ_ONLY = [
    "--list",
    "--list --state --type",
    "--list --state stable",
    "--describe --group empty-app",
    "--describe --group live-app",
    "--describe --all-groups --offsets --verbose",
    "--describe --group live-app --members",
    "--describe --group live-app --members --verbose",
    "--describe --group empty-app --members",
    "--describe --all-groups --state",
    "--describe --group live-app --state --verbose",
    "--describe --group new-app",
    "--describe --group new-app --members --verbose",
    "--describe --group new-app --state --verbose",
    "--describe --group no-such-group",
    "--reset-offsets --group empty-app --all-topics --to-earliest --dry-run",
    "--reset-offsets --group empty-app --topic orders --to-offset 50 --dry-run",
    "--reset-offsets --group empty-app --topic orders:0,1 --shift-by -7 --dry-run",
    "--reset-offsets --group empty-app --topic orders --to-current --dry-run",
    "--reset-offsets --group empty-app --topic orders --topic payments-eu "
    "--to-datetime 2020-01-01T00:00:00.000 --dry-run",
    "--reset-offsets --group empty-app --all-topics --by-duration PT1H --export",
    "--reset-offsets --group empty-app --group no-such-group --all-topics --to-earliest "
    "--dry-run --export",
    "--reset-offsets --group empty-app --group no-such-group --topic payments-eu --to-latest",
    "--reset-offsets --group live-app --all-topics --to-earliest --dry-run",
    "--reset-offsets --group empty-app --topic no-such-topic --to-latest --dry-run",
    "--reset-offsets --group empty-app --topic orders:7 --to-latest --dry-run",
    "--reset-offsets --group empty-app --all-topics --to-offset x --dry-run",
]
USAGE_ERRORS = [
    "",
    "--describe",
    "--list --members",
    "--list --state bogus",
    "--describe --group empty-app --members --state",
    "--delete --group empty-app --topic orders",
    "--delete-offsets --group empty-app",
    "--reset-offsets --all-topics --to-earliest",
    "--reset-offsets --group empty-app --all-topics --to-earliest --to-latest --dry-run",
    "--reset-offsets --group empty-app --topic orders --dry-run",
    "--reset-offsets --group empty-app --topic orders:x --to-earliest --dry-run",
    "--reset-offsets --group empty-app --topic orders --shift-by 1 --dry-run",
]


@pytest.fixture(scope="module")
def outcomes(peer: Peer, kafka_tool: KafkaTool) -> dict[str, tuple[Outcome, Outcome]]:
    """Every read-only case and usage error, run by both tools: Kafka's in its one JVM, ours
    two processes at a time."""
    lines = READ_ONLY + USAGE_ERRORS
    kafka = {line: kafka_tool.run([*peer.base, *line.split()]) for line in lines}
    with ThreadPoolExecutor(max_workers=2) as pool:
        ours = dict(zip(lines, pool.map(lambda line: run_mq(peer, line.split()), lines),
                        strict=True))  # fmt: skip
    return {line: (kafka[line], ours[line]) for line in lines}


@pytest.mark.parametrize("line", READ_ONLY)
def test_read_only_commands_print_what_kafkas_tool_prints(
    outcomes: dict[str, tuple[Outcome, Outcome]], line: str
) -> None:
    kafka, mq = outcomes[line]
    if line.startswith("--list"):
        # Kafka's tool lists in its coordinator's internal order (neither by name nor by
        # offsets partition); ours by name, as confluent-kafka answers. The same rows.
        kafka, mq = sorted_rows(kafka), sorted_rows(mq)
        assert mq.stdout.splitlines() == sorted(mq.stdout.splitlines(), key=header_first)
    outcome = compare(line.split(), kafka, mq)
    assert outcome.code == 0


def header_first(row: str) -> tuple[bool, str]:
    return (not row.startswith("GROUP "), row)


def sorted_rows(outcome: Outcome) -> Outcome:
    rows = sorted(outcome.stdout.splitlines(), key=header_first)
    return replace(outcome, stdout="".join(f"{row}\n" for row in rows))


@pytest.mark.parametrize("line", USAGE_ERRORS)
def test_usage_errors_are_kafkas_messages_and_exit_codes(
    outcomes: dict[str, tuple[Outcome, Outcome]], line: str
) -> None:
    outcome = compare(line.split(), *outcomes[line])
    assert outcome.code == 1
    assert outcome.stdout == ""


def test_reset_execute_commits_the_same_offsets(peer: Peer, kafka_tool: KafkaTool) -> None:
    args = "--reset-offsets --group reset-app --topic orders:0,2 --to-offset 4 --execute"
    offsets: list[dict[tuple[str, int], int]] = []

    def prepare() -> None:
        if offsets or committed(peer, "reset-app"):
            offsets.append(committed(peer, "reset-app"))
        commit(peer, "reset-app")

    assert_same(peer, kafka_tool, args.split(), prepare)
    offsets.append(committed(peer, "reset-app"))
    assert offsets[0] == offsets[1] == COMMITTED | {("orders", 0): 4, ("orders", 2): 4}


def test_delete_groups_prints_kafkas_lines(peer: Peer, kafka_tool: KafkaTool) -> None:
    def prepare() -> None:
        commit(peer, "delete-app")

    args = "--delete --group delete-app --group no-such-group --group live-app"
    outcome = assert_same(peer, kafka_tool, args.split(), prepare)
    assert "These consumer groups were deleted successfully: 'delete-app'" in outcome.stdout
    assert committed(peer, "delete-app") == {}
    outcome = assert_same(peer, kafka_tool, ["--delete", "--group", "delete-app"], prepare)
    assert (
        outcome.stdout == "Deletion of requested consumer groups ('delete-app') was successful.\n"
    )


@pytest.mark.parametrize(
    "line",
    [
        "--delete-offsets --group offsets-app --topic orders --topic no-such-topic",
        "--delete-offsets --group live-app --topic orders",
        "--delete-offsets --group no-such-group --topic payments-eu:0",
    ],
)
def test_delete_offsets_prints_kafkas_table(peer: Peer, kafka_tool: KafkaTool, line: str) -> None:
    assert_same(peer, kafka_tool, line.split(), lambda: commit(peer, "offsets-app"))


def test_reset_from_a_file_as_kafka_reads_it(
    peer: Peer, kafka_tool: KafkaTool, tmp_path: Path
) -> None:
    one = tmp_path / "one.csv"
    one.write_text("orders,0,2\norders,1,99\npayments-eu,0,0\n")
    many = tmp_path / "many.csv"
    many.write_text("empty-app,orders,2,1\nother-app,orders,0,3\n")
    for args in (
        f"--reset-offsets --group empty-app --from-file {one} --dry-run",
        f"--reset-offsets --group empty-app --group no-such-group --from-file {many} --dry-run",
        f"--reset-offsets --group empty-app --from-file {tmp_path / 'missing.csv'} --dry-run",
    ):
        assert_same(peer, kafka_tool, args.split())
