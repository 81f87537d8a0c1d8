"""Apache Kafka's own tools against metaquorum's brokers (issue 33; the matrix is
docs/kafka-listener.md#kafkas-own-tools). The tools are Kafka 4.4's Java main classes behind
``kafka-topics.sh``, ``kafka-acls.sh``, ``kafka-configs.sh``, ``kafka-metadata-quorum.sh``,
``kafka-cluster.sh``, ``kafka-broker-api-versions.sh``, ``kafka-consumer-groups.sh``,
``kafka-features.sh``, and on the data plane ``kafka-dump-log.sh`` (on our segments and
indexes), ``kafka-console-producer.sh``, ``kafka-console-consumer.sh``,
``kafka-get-offsets.sh``, ``kafka-log-dirs.sh`` and ``kafka-transactions.sh``, and Kafka's Java
AdminClient through a small driver (``scripts/kafka/AdminDriver.java``) for the calls by topic
id. Each runs against one broker's SSL Kafka listener, as ``CN=admin`` over mTLS
(``ssl.keystore.type=PEM``), and what it prints is compared with what ``metaquorum``'s own
commands print.

Where a tool fails against our brokers, the test still asserts what the tool should do, and is
marked ``xfail(strict=True)`` with the reason; it counts as expected only when the tool fails
with that reason's own signature in its output (``KnownToolFailure``): a failure for any other
reason fails the test, and a fix makes it pass, which strict xfail turns into a failure until the
marker goes.

Kafka's jars come from ``scripts/kafka/fetch`` (``scripts/test`` runs it); without Java 17+ or
the cache, the module skips with one line saying why. One cluster for the module (3 controllers,
2 brokers, mTLS, ACLs on); each JVM start costs about a second.
"""

from __future__ import annotations

import json
import os
import random
import re
import struct
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, OffsetSpec

from broker.groups.partitioning import partition_for
from broker.kafka.protocol import API_VERSIONS
from quorum.harness import REPO, ProcessCluster, process_cluster, wait_until
from quorum.kafka_peer import compile_driver, kafka_missing, run_tool
from tests.process.test_kafka_data_process import listening
from tests.record_batches import decode_batches

MISSING = kafka_missing()
if MISSING is not None:
    pytest.skip(f"Kafka's tools cannot run: {MISSING}", allow_module_level=True)

BROKERS = (101, 102)
TOPICS = "org.apache.kafka.tools.TopicCommand"
ACLS = "org.apache.kafka.tools.AclCommand"
CONFIGS = "org.apache.kafka.tools.ConfigCommand"
QUORUM = "org.apache.kafka.tools.MetadataQuorumCommand"
CLUSTER = "org.apache.kafka.tools.ClusterTool"
API_VERSIONS_TOOL = "org.apache.kafka.tools.BrokerApiVersionsCommand"
GROUPS = "org.apache.kafka.tools.consumer.group.ConsumerGroupCommand"
FEATURES = "org.apache.kafka.tools.FeatureCommand"
DUMP_LOG = "org.apache.kafka.tools.DumpLogSegments"
CONSOLE_PRODUCER = "org.apache.kafka.tools.ConsoleProducer"
CONSOLE_CONSUMER = "org.apache.kafka.tools.consumer.ConsoleConsumer"
GET_OFFSETS = "org.apache.kafka.tools.GetOffsetShell"

# The reasons a tool fails against our brokers today, each a (reason, signature it prints)
# pair for ``xfail_for``: none at the moment.


class KnownToolFailure(AssertionError):
    """A Kafka tool failed with the recorded reason's signature in its output."""


def xfail_for(reason: tuple[str, str]) -> pytest.MarkDecorator:
    return pytest.mark.xfail(reason=reason[0], strict=True, raises=KnownToolFailure)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ProcessCluster]:
    with process_cluster(
        tmp_path_factory.mktemp("kafka-tools"),
        brokers=len(BROKERS),
        kafka_listeners={"KAFKA": "SSL"},
        # Consumer groups on 2 brokers (docs/groups.md#configuration): fast to create and join.
        broker_settings={
            "offsets.topic.num.partitions": 3,
            "offsets.topic.replication.factor": 2,
            "group.initial.rebalance.delay.ms": 100,
        },
    ) as cluster:
        cluster.format()
        cluster.start_all()
        cluster.wait_for_leader(timeout_s=30)
        with cluster.admin() as admin:
            wait_until(
                lambda: sum(not b.is_fenced for b in admin.describe_cluster().brokers) == 2,
                30,
                "both brokers unfenced",
            )
        for broker_id in BROKERS:
            address = kafka_address(cluster, broker_id)
            wait_until(lambda a=address: listening(a), 30, f"Kafka listener {address}")
        yield cluster
        for broker_id in BROKERS:  # nothing a Kafka tool sent made a handler fail
            assert "kafka_request_failed" not in cluster.logs(broker_id)


@pytest.fixture(scope="module")
def driver() -> Path:
    return compile_driver()


def client_properties(cluster: ProcessCluster) -> str:
    assert cluster.certs is not None
    return str(cluster.certs.kafka_client_properties())


def kafka_address(cluster: ProcessCluster, broker: int = 101) -> str:
    return cluster.nodes[broker].kafka_address("KAFKA")


def tool(
    cluster: ProcessCluster,
    main_class: str,
    *args: str,
    known: tuple[str, str] | None = None,
    subcommand: tuple[str, ...] = (),
    broker: int = 101,
    input_text: str | None = None,
) -> str:
    """Run a Kafka tool against a broker as the admin; its stdout. A non-zero exit or an
    exception in its output fails: with ``KnownToolFailure`` when ``known``'s signature is in
    the output, else with a plain assertion (an unexpected failure)."""
    result = run_tool(
        main_class,
        *subcommand,  # a tool with subparsers (kafka-cluster) takes its subcommand first
        "--bootstrap-server",
        kafka_address(cluster, broker),
        "--command-config",
        client_properties(cluster),
        *args,
        input_text=input_text,
    )
    output = result.stdout + result.stderr
    failed = result.returncode != 0 or "Exception" in result.stderr
    if failed:
        message = f"{main_class} {' '.join(args)} exited {result.returncode}:\n{output[-3000:]}"
        if known is not None and known[1] in output:
            raise KnownToolFailure(message)
        raise AssertionError(message)
    return result.stdout


def admin_driver(
    cluster: ProcessCluster, driver: Path, *args: str, known: tuple[str, str] | None = None
) -> str:
    result = run_tool(
        "AdminDriver",
        client_properties(cluster),
        kafka_address(cluster),
        *args,
        extra_classpath=[driver],
    )
    output = result.stdout + result.stderr
    if result.returncode != 0:
        message = f"AdminDriver {' '.join(args)} exited {result.returncode}:\n{output[-3000:]}"
        if known is not None and known[1] in output:
            raise KnownToolFailure(message)
        raise AssertionError(message)
    return result.stdout


def mq(cluster: ProcessCluster, *args: str, check: bool = True) -> str:
    """A ``metaquorum`` command against the controllers, as the admin; stdout (+ stderr)."""
    flag = "--bootstrap-controller" if args[0] == "quorum" else "--bootstrap-server"
    result = cluster.run_cli(*args, flag, cluster.bootstrap, check=check)
    return result.stdout + ("" if check else result.stderr)


# ----- what metaquorum prints, parsed ------------------------------------------------------------

HEADER = re.compile(
    r"^Topic: (?P<name>\S+)\tTopicId: (?P<id>\S+)\tPartitionCount: (?P<count>\d+)\t"
    r"ReplicationFactor: (?P<rf>\d+)\tConfigs: ?(?P<configs>[^\t]*)"
)
PARTITION = re.compile(
    r"^\s*Topic: (?P<name>\S+)\tPartition: (?P<p>\d+)\tLeader: (?P<leader>\S+)\t"
    r"Replicas: (?P<replicas>\S+)\tIsr: (?P<isr>\S+)"
)


def parse_describe(output: str) -> dict[str, dict[str, object]]:
    """kafka-topics' describe format (both print it): per topic its id, partition count,
    replication factor, configs and (leader, replicas, isr) per partition."""
    topics: dict[str, dict[str, object]] = {}
    for line in output.splitlines():
        if header := HEADER.match(line):
            configs = header["configs"].strip()
            topics[header["name"]] = {
                "id": header["id"],
                "partitions": int(header["count"]),
                "rf": int(header["rf"]),
                "configs": dict(c.split("=", 1) for c in configs.split(",") if c),
                "layout": {},
            }
        elif partition := PARTITION.match(line):
            layout = topics[partition["name"]]["layout"]
            assert isinstance(layout, dict)
            layout[int(partition["p"])] = (
                int(partition["leader"]),
                partition["replicas"],
                partition["isr"],
            )
    return topics


def mq_describe(cluster: ProcessCluster, name: str) -> dict[str, object]:
    return parse_describe(mq(cluster, "topics", "--describe", "--topic", name))[name]


def mq_create(cluster: ProcessCluster, name: str, partitions: int = 2, rf: int = 2) -> str:
    mq(cluster, "topics", "--create", "--topic", name, "--partitions", str(partitions),
       "--replication-factor", str(rf))  # fmt: skip
    topic_id = mq_describe(cluster, name)["id"]
    assert isinstance(topic_id, str)
    return topic_id


def wait_visible_on_brokers(cluster: ProcessCluster, name: str) -> None:
    """Until both brokers' images have the topic (a tool may ask either broker)."""
    for broker_id in BROKERS:
        wait_until(
            lambda b=broker_id: (
                name
                in cluster.run_cli(
                    "topics", "--bootstrap-server", cluster.nodes[b].address, "--list", check=False
                ).stdout.split()
            ),
            20,
            f"{name} on broker {broker_id}",
        )


# ----- kafka-topics -----------------------------------------------------------------------------


def test_kafka_topics_create_is_what_metaquorum_describes(cluster: ProcessCluster) -> None:
    out = tool(cluster, TOPICS, "--create", "--topic", "kt-create", "--partitions", "3",
               "--replication-factor", "2", "--config", "retention.ms=60000")  # fmt: skip
    assert out.strip() == "Created topic kt-create."
    described = mq_describe(cluster, "kt-create")
    assert described["partitions"] == 3
    assert described["rf"] == 2
    assert described["configs"] == {"retention.ms": "60000"}
    # Creating it again: Kafka's tool reports the controller's TOPIC_ALREADY_EXISTS.
    with pytest.raises(AssertionError, match="already exists"):
        tool(cluster, TOPICS, "--create", "--topic", "kt-create", "--partitions", "1")
    # ... and --if-not-exists makes that a success, as with metaquorum topics --create.
    tool(cluster, TOPICS, "--create", "--topic", "kt-create", "--partitions", "1",
         "--if-not-exists")  # fmt: skip


def test_kafka_topics_list_is_metaquorum_topics_list(cluster: ProcessCluster) -> None:
    mq_create(cluster, "kt-list")
    wait_visible_on_brokers(cluster, "kt-list")
    assert tool(cluster, TOPICS, "--list").split() == mq(cluster, "topics", "--list").split()
    assert (
        tool(cluster, TOPICS, "--list", "--exclude-internal").split()
        == mq(cluster, "topics", "--list", "--exclude-internal").split()
    )
    assert "__cluster_metadata" in tool(cluster, TOPICS, "--list").split()


def test_kafka_topics_describe_by_name_is_metaquorum_describe(cluster: ProcessCluster) -> None:
    mq_create(cluster, "kt-describe", partitions=3)
    wait_visible_on_brokers(cluster, "kt-describe")
    theirs = parse_describe(tool(cluster, TOPICS, "--describe", "--topic", "kt-describe"))
    assert theirs["kt-describe"] == mq_describe(cluster, "kt-describe")


def test_kafka_topics_describe_by_topic_id_is_metaquorum_describe(
    cluster: ProcessCluster,
) -> None:
    topic_id = mq_create(cluster, "kt-describe-id")
    wait_visible_on_brokers(cluster, "kt-describe-id")
    theirs = parse_describe(tool(cluster, TOPICS, "--describe", "--topic-id", topic_id))
    ours = parse_describe(mq(cluster, "topics", "--describe", "--topic-id", topic_id))
    assert theirs == ours
    assert theirs["kt-describe-id"]["id"] == topic_id


def test_kafka_topics_alter_adds_partitions(cluster: ProcessCluster) -> None:
    topic_id = mq_create(cluster, "kt-alter", partitions=1)
    wait_visible_on_brokers(cluster, "kt-alter")
    assert tool(cluster, TOPICS, "--alter", "--topic", "kt-alter", "--partitions", "4") == ""
    described = mq_describe(cluster, "kt-alter")
    assert described["partitions"] == 4
    assert described["id"] == topic_id  # the same topic, grown (CreatePartitions)
    with pytest.raises(AssertionError, match=r"(?i)partition"):  # fewer: the controller refuses
        tool(cluster, TOPICS, "--alter", "--topic", "kt-alter", "--partitions", "2")


def test_kafka_topics_delete_is_gone_for_metaquorum(cluster: ProcessCluster) -> None:
    mq_create(cluster, "kt-delete")
    wait_visible_on_brokers(cluster, "kt-delete")
    assert tool(cluster, TOPICS, "--delete", "--topic", "kt-delete") == ""
    assert "kt-delete" not in mq(cluster, "topics", "--list").split()
    gone = mq(cluster, "topics", "--describe", "--topic", "kt-delete", check=False)
    assert "kt-delete" not in parse_describe(gone)
    wait_until(
        lambda: "kt-delete" not in tool(cluster, TOPICS, "--list").split(),
        20,
        "the deletion seen by Kafka's tool",
    )


# ----- Kafka's Java AdminClient, by topic id ------------------------------------------------------


def test_admin_client_lists_the_ids_metaquorum_prints(
    cluster: ProcessCluster, driver: Path
) -> None:
    mq_create(cluster, "ac-list")
    wait_visible_on_brokers(cluster, "ac-list")
    listed = {
        name: topic_id
        for name, topic_id, _ in (
            line.split("\t") for line in admin_driver(cluster, driver, "list").splitlines()
        )
    }
    ours = parse_describe(mq(cluster, "topics", "--describe"))
    # Every topic with the same id, __cluster_metadata (internal) included.
    assert {name: t["id"] for name, t in ours.items()} == listed
    assert "__cluster_metadata" in listed


def test_admin_client_describe_topics_by_id(cluster: ProcessCluster, driver: Path) -> None:
    topic_id = mq_create(cluster, "ac-describe-id", partitions=2)
    wait_visible_on_brokers(cluster, "ac-describe-id")
    out = admin_driver(cluster, driver, "describe-ids", topic_id)
    assert out.splitlines()[0] == f"topic ac-describe-id {topic_id} 2 2"
    layout = mq_describe(cluster, "ac-describe-id")["layout"]
    assert isinstance(layout, dict)
    for line in out.splitlines()[1:]:
        _, partition, leader, replicas, isr = line.split()
        assert layout[int(partition)] == (int(leader), replicas, isr)


def test_admin_client_describe_topics_by_name(cluster: ProcessCluster, driver: Path) -> None:
    topic_id = mq_create(cluster, "ac-describe-name", partitions=2)
    wait_visible_on_brokers(cluster, "ac-describe-name")
    out = admin_driver(cluster, driver, "describe-names", "ac-describe-name")
    assert out.splitlines()[0] == f"topic ac-describe-name {topic_id} 2 2"


def test_admin_client_delete_topics_by_id(cluster: ProcessCluster, driver: Path) -> None:
    topic_id = mq_create(cluster, "ac-delete-id")
    wait_visible_on_brokers(cluster, "ac-delete-id")
    assert admin_driver(cluster, driver, "delete-ids", topic_id).strip() == f"deleted {topic_id}"
    assert "ac-delete-id" not in mq(cluster, "topics", "--list").split()
    gone = mq(cluster, "topics", "--describe", "--topic-id", topic_id, check=False)
    assert "UNKNOWN_TOPIC_ID" in gone or "not found" in gone.lower(), gone
    # Deleting it again: the id is unknown, as Kafka says.
    with pytest.raises(AssertionError, match="UnknownTopicIdException"):
        admin_driver(cluster, driver, "delete-ids", topic_id)


# ----- kafka-acls ---------------------------------------------------------------------------------


def acl_lines(output: str) -> list[str]:
    """The ACL entries of kafka-acls' listing format (both print it), one per resource."""
    return sorted(line.strip() for line in output.splitlines() if line.strip().startswith(
        ("Current ACLs", "(principal=")))  # fmt: skip


def test_kafka_acls_add_list_remove_as_metaquorum_acls(cluster: ProcessCluster) -> None:
    mq_create(cluster, "acl-orders")
    grant = ("--allow-principal", "User:CN=alice", "--operation", "Describe",
             "--topic", "acl-orders")  # fmt: skip
    added = tool(cluster, ACLS, "--add", *grant)
    assert "(principal=User:CN=alice, host=*, operation=DESCRIBE, permissionType=ALLOW)" in added
    theirs = tool(cluster, ACLS, "--list", "--topic", "acl-orders")
    ours = mq(cluster, "acls", "--list", "--topic", "acl-orders")
    assert acl_lines(theirs) == acl_lines(ours)
    assert len(acl_lines(theirs)) == 2  # the resource line and alice's entry
    tool(cluster, ACLS, "--remove", *grant, "--force")
    assert acl_lines(mq(cluster, "acls", "--list", "--topic", "acl-orders")) == []
    assert acl_lines(tool(cluster, ACLS, "--list", "--topic", "acl-orders")) == []


# ----- kafka-configs ------------------------------------------------------------------------------


def test_kafka_configs_describe_topic_is_what_metaquorum_describes(
    cluster: ProcessCluster,
) -> None:
    mq(cluster, "topics", "--create", "--topic", "cfg-orders", "--partitions", "1",
       "--replication-factor", "2", "--config", "retention.ms=120000",
       "--config", "cleanup.policy=compact")  # fmt: skip
    wait_visible_on_brokers(cluster, "cfg-orders")
    out = tool(cluster, CONFIGS, "--describe", "--entity-type", "topics",
               "--entity-name", "cfg-orders")  # fmt: skip
    assert out.splitlines()[0] == "Dynamic configs for topic cfg-orders are:"
    dynamic = dict(
        line.split()[0].split("=", 1) for line in out.splitlines()[1:] if line.startswith("  ")
    )
    assert dynamic == mq_describe(cluster, "cfg-orders")["configs"]
    assert dynamic == {"retention.ms": "120000", "cleanup.policy": "compact"}
    assert "synonyms={DYNAMIC_TOPIC_CONFIG:retention.ms=120000}" in out


def test_kafka_configs_alter_topic(cluster: ProcessCluster) -> None:
    mq_create(cluster, "cfg-alter")
    wait_visible_on_brokers(cluster, "cfg-alter")
    out = tool(cluster, CONFIGS, "--alter", "--entity-type", "topics", "--entity-name",
               "cfg-alter", "--add-config", "retention.ms=1000,cleanup.policy=compact")  # fmt: skip
    assert out.strip() == "Completed updating config for topic cfg-alter."
    assert mq_describe(cluster, "cfg-alter")["configs"] == {
        "retention.ms": "1000",
        "cleanup.policy": "compact",
    }
    tool(cluster, CONFIGS, "--alter", "--entity-type", "topics", "--entity-name", "cfg-alter",
         "--delete-config", "retention.ms")  # fmt: skip
    assert mq_describe(cluster, "cfg-alter")["configs"] == {"cleanup.policy": "compact"}


def test_kafka_configs_describe_broker(cluster: ProcessCluster) -> None:
    out = tool(cluster, CONFIGS, "--describe", "--entity-type", "brokers", "--entity-name",
               "101")  # fmt: skip
    assert out.startswith("Dynamic configs for broker 101 are:")
    everything = tool(cluster, CONFIGS, "--describe", "--entity-type", "brokers",
                      "--entity-name", "101", "--all")  # fmt: skip
    lines = everything.splitlines()
    assert lines[0] == "All configs for broker 101 are:"
    assert "  node.id=101 sensitive=false synonyms={STATIC_BROKER_CONFIG:node.id=101}" in lines
    assert any(line.startswith("  log.retention.hours=168 sensitive=false ") for line in lines)
    # Every broker (each asked itself) and the default.
    every = tool(cluster, CONFIGS, "--describe", "--entity-type", "brokers")
    assert "Dynamic configs for broker 101 are:" in every.splitlines()
    assert "Dynamic configs for broker 102 are:" in every.splitlines()


def test_kafka_configs_alter_broker_and_the_default(cluster: ProcessCluster) -> None:
    """kafka-configs --alter for one broker and for the cluster-wide default, then what it
    describes for each (metaquorum configs describes the same), and a read-only key refused."""
    out = tool(cluster, CONFIGS, "--alter", "--entity-type", "brokers", "--entity-name", "102",
               "--add-config", "log.retention.ms=86400000", broker=102)  # fmt: skip
    assert out.strip() == "Completed updating config for broker 102."
    out = tool(cluster, CONFIGS, "--alter", "--entity-type", "brokers", "--entity-default",
               "--add-config", "log.retention.ms=172800000")  # fmt: skip
    assert out.strip() == "Completed updating default config for brokers in the cluster."
    try:
        expected = (
            "  log.retention.ms=86400000 sensitive=false synonyms={DYNAMIC_BROKER_CONFIG:"
            "log.retention.ms=86400000, DYNAMIC_DEFAULT_BROKER_CONFIG:log.retention.ms=172800000, "
            "DEFAULT_CONFIG:log.retention.hours=168}"
        )
        wait_until(
            lambda: tool(cluster, CONFIGS, "--describe", "--entity-type", "brokers",
                         "--entity-name", "102", broker=102).splitlines()
            == ["Dynamic configs for broker 102 are:", expected],
            20,
            "broker 102 describes its own value",
        )  # fmt: skip
        default = tool(cluster, CONFIGS, "--describe", "--entity-type", "brokers",
                       "--entity-default")  # fmt: skip
        assert default.splitlines() == [
            "Default configs for brokers in the cluster are:",
            "  log.retention.ms=172800000 sensitive=false synonyms="
            "{DYNAMIC_DEFAULT_BROKER_CONFIG:log.retention.ms=172800000}",
        ]
        mine = mq(cluster, "configs", "--entity-type", "brokers", "--entity-name", "102",
                  "--describe")  # fmt: skip
        assert mine.splitlines() == ["Dynamic configs for broker 102 are:", expected]
        mine = mq(cluster, "configs", "--entity-type", "brokers", "--entity-default", "--describe")
        assert mine == default
        refused = run_tool(
            CONFIGS, "--bootstrap-server", kafka_address(cluster, 101), "--command-config",
            client_properties(cluster), "--alter", "--entity-type", "brokers", "--entity-name",
            "101", "--add-config", "listeners=SSL://:1",
        )  # fmt: skip
        assert refused.returncode != 0
        assert "Cannot update these configs dynamically: Set(listeners)" in refused.stderr
    finally:
        tool(cluster, CONFIGS, "--alter", "--entity-type", "brokers", "--entity-name", "102",
             "--delete-config", "log.retention.ms", broker=102)  # fmt: skip
        tool(cluster, CONFIGS, "--alter", "--entity-type", "brokers", "--entity-default",
             "--delete-config", "log.retention.ms")  # fmt: skip


# ----- kafka-metadata-quorum, kafka-cluster, kafka-features --------------------------------------


def mq_quorum_status(cluster: ProcessCluster) -> dict[str, str]:
    out = mq(cluster, "quorum", "describe", "--status")
    return {k.strip(): v.strip() for k, _, v in (line.partition(":") for line in out.splitlines())}


def test_kafka_metadata_quorum_describe_status(cluster: ProcessCluster) -> None:
    out = tool(cluster, QUORUM, "describe", "--status")
    theirs = {k.strip(): v.strip() for k, _, v in (line.partition(":") for line in
                                                   out.splitlines())}  # fmt: skip
    ours = mq_quorum_status(cluster)
    for key in ("ClusterId", "LeaderId", "LeaderEpoch", "CurrentVoters"):
        assert theirs[key] == ours[key], key


def test_kafka_metadata_quorum_describe_replication(cluster: ProcessCluster) -> None:
    out = tool(cluster, QUORUM, "describe", "--replication")
    ours = mq(cluster, "quorum", "describe", "--replication")
    assert out.splitlines()[0].split() == ours.splitlines()[0].split()
    assert sorted(line.split()[0] for line in out.splitlines()[1:]) == sorted(
        line.split()[0] for line in ours.splitlines()[1:]
    )


def test_kafka_cluster_id_is_the_formatted_one(cluster: ProcessCluster) -> None:
    out = tool(cluster, CLUSTER, subcommand=("cluster-id",))
    assert out.strip() == f"Cluster ID: {cluster.cluster_id}"
    assert mq_quorum_status(cluster)["ClusterId"] == cluster.cluster_id


def test_kafka_broker_api_versions_are_the_listener_s_table(cluster: ProcessCluster) -> None:
    out = tool(cluster, API_VERSIONS_TOOL)
    for broker_id in BROKERS:
        assert f"(id: {broker_id} rack: null isFenced: false) -> (" in out
    # One broker's block: "Name(key): low to high [usable: v]" ("low [usable: v]" for one).
    served = dict(re.findall(r"\((\d+)\): (\d+(?: to \d+)?) \[", out.split(" -> (", 2)[1]))
    assert served == {
        str(key): f"{low} to {high}" if low != high else str(low)
        for key, (low, high) in API_VERSIONS.items()
    }
    # The APIs we do not serve are listed as UNSUPPORTED, by Kafka's names.
    unsupported = {int(k) for k in re.findall(r"\((\d+)\): UNSUPPORTED", out)}
    assert unsupported
    assert not unsupported & set(API_VERSIONS)


def test_kafka_features_describe(cluster: ProcessCluster) -> None:
    """KIP-584: metadata.version 3.9-IV0 (the level of Kafka 3.9, whose schemas and ranges the
    listener serves; no node can change it) and kraft.version 0 (this cluster's static quorum:
    supported up to 1, not finalized), with the broker's image offset as the epoch."""
    assert not cluster.dynamic
    out = tool(cluster, FEATURES, "describe")
    rows = {
        fields["Feature"]: fields
        for fields in (
            dict(cell.split(": ", 1) for cell in line.split("\t") if cell.strip())
            for line in (re.sub(r" {2,}", "\t", row) for row in out.splitlines())
            if line.startswith("Feature: ")
        )
    }
    assert set(rows) == {"metadata.version", "kraft.version"}, out
    metadata = {k: v.strip() for k, v in rows["metadata.version"].items()}
    kraft = {k: v.strip() for k, v in rows["kraft.version"].items()}
    assert (metadata["SupportedMinVersion"], metadata["SupportedMaxVersion"]) == ("3.9-IV0",) * 2
    assert metadata["FinalizedVersionLevel"] == "3.9-IV0"
    assert (kraft["SupportedMinVersion"], kraft["SupportedMaxVersion"]) == ("0", "1")
    assert kraft["FinalizedVersionLevel"] == "0"
    # The epoch is an offset the broker's image has applied: within the committed log.
    epoch = int(metadata["Epoch"])
    assert epoch == int(kraft["Epoch"])
    assert 0 <= epoch < int(mq_quorum_status(cluster)["HighWatermark"])


def test_kafka_features_describe_a_dynamic_quorum(tmp_path: Path) -> None:
    """A quorum formatted with --standalone (KIP-853: its voters in the log) has kraft.version 1
    finalized, as the broker's Raft observer holds it."""
    with process_cluster(
        tmp_path, voters=1, brokers=1, dynamic=True, kafka_listeners={"KAFKA": "SSL"}
    ) as dynamic:
        dynamic.format(1, extra=["--standalone"])
        dynamic.format(BROKERS[0])
        dynamic.start_all()
        dynamic.wait_for_leader(timeout_s=30)
        address = kafka_address(dynamic)
        wait_until(lambda: listening(address), 60, f"Kafka listener {address}")
        out = tool(dynamic, FEATURES, "describe")
        kraft = (
            r"Feature: kraft\.version\s+SupportedMinVersion: 0\s+SupportedMaxVersion: 1\s+"
            r"FinalizedVersionLevel: 1\s"
        )
        assert re.search(kraft, out), out
        assert re.search(r"Feature: metadata\.version\s.*FinalizedVersionLevel: 3\.9-IV0\s", out)


# ----- kafka-consumer-groups ----------------------------------------------------------------------


def test_kafka_consumer_groups_list(cluster: ProcessCluster) -> None:
    """ListGroups to every broker: the groups confluent-kafka lists through our brokers (none,
    or the console consumer's when its test ran first on this worker's cluster)."""
    listed = sorted(tool(cluster, GROUPS, "--list").split())
    admin = AdminClient(confluent_config(cluster))
    ours = admin.list_consumer_groups(request_timeout=30).result(timeout=30)
    assert listed == sorted(g.group_id for g in ours.valid), listed
    assert set(listed) <= {"console-group"}, listed


# ----- the data plane: kafka-dump-log, console producer and consumer, kafka-get-offsets -----------


def data_seed() -> int:
    value = int(os.environ.get("KAFKA_TOOLS_SEED", str(random.SystemRandom().randrange(2**32))))
    print(f"KAFKA_TOOLS_SEED={value}")
    return value


def confluent_config(cluster: ProcessCluster) -> dict[str, Any]:
    assert cluster.certs is not None
    keystore = str(cluster.certs.client_keystore("admin"))
    return {
        "bootstrap.servers": kafka_address(cluster),
        "security.protocol": "SSL",
        "ssl.ca.location": str(cluster.certs.ca),
        "ssl.certificate.location": keystore,
        "ssl.key.location": keystore,
    }


def leader_segment(cluster: ProcessCluster, name: str) -> Path:
    """The first segment of partition 0 of ``name`` on its leader (the only copy: data is not
    replicated yet)."""
    layout = mq_describe(cluster, name)["layout"]
    assert isinstance(layout, dict)
    directory = cluster.nodes[layout[0][0]].log_dir / f"{name}-0"
    return directory / "00000000000000000000.log"


def stored_batches(segment: Path) -> list[tuple[int, int, int, int]]:
    """(position, base offset, last offset, CRC) of every batch in ``segment``, read by the
    batch framing (our own reading of the bytes, to compare with Kafka's)."""
    data = segment.read_bytes()
    batches = []
    position = 0
    while position + 12 <= len(data):
        base_offset, length = struct.unpack_from(">qi", data, position)
        (crc,) = struct.unpack_from(">I", data, position + 17)
        (last_delta,) = struct.unpack_from(">i", data, position + 23)
        batches.append((position, base_offset, base_offset + last_delta, crc))
        position += 12 + length
    assert position == len(data), f"{segment} ends inside a batch"
    return batches


DUMP_BATCH = re.compile(
    r"^baseOffset: (?P<base>\d+) lastOffset: (?P<last>\d+) count: (?P<count>\d+) .*"
    r"position: (?P<position>\d+) .* magic: (?P<magic>\d+) compresscodec: (?P<codec>\S+) "
    r"crc: (?P<crc>\d+) isvalid: (?P<valid>\w+)$"
)
DUMP_RECORD = re.compile(
    r"^\| offset: (?P<offset>\d+) CreateTime: (?P<ts>\d+) keySize: (?P<key_size>-?\d+) "
    r"valueSize: (?P<value_size>-?\d+) .*?headerKeys: \[[^]]*\]"
    r"(?: key: (?P<key>\S*))?(?: payload: (?P<payload>.*))?$"
)


@pytest.fixture(scope="module")
def produced(cluster: ProcessCluster) -> tuple[str, list[tuple[bytes | None, bytes]]]:
    """A topic of one partition holding 12 batches of 3 records (keys, one null key a batch,
    values of 0.5-1.5 KB: enough bytes for index entries every 4 KiB), produced with
    confluent-kafka; the records in offset order."""
    rng = random.Random(data_seed())
    name = "tools-data"
    mq_create(cluster, name, partitions=1, rf=1)
    wait_visible_on_brokers(cluster, name)
    producer = Producer({**confluent_config(cluster), "linger.ms": 100, "acks": "1"})
    records: list[tuple[bytes | None, bytes]] = []
    errors: list[Any] = []
    for batch in range(12):
        for index in range(3):
            key = None if index == 2 else f"key-{batch}-{index}".encode()
            value = bytes(rng.choice(b"abcdefghij") for _ in range(rng.randrange(500, 1500)))
            producer.produce(
                name, key=key, value=value, partition=0, on_delivery=lambda e, _m: errors.append(e)
            )
            records.append((key, value))
        assert producer.flush(30) == 0  # one batch per flush
    assert errors == [None] * len(records)
    return name, records


def test_kafka_dump_log_reads_our_segment(
    cluster: ProcessCluster, produced: tuple[str, list[tuple[bytes | None, bytes]]]
) -> None:
    """kafka-dump-log --print-data-log on our segment: every batch valid (Kafka computes the
    same CRC32C), at the positions, offsets and CRCs our bytes hold, and every record's offset,
    key and value as produced; --deep-iteration walks the same records."""
    name, records = produced
    segment = leader_segment(cluster, name)
    ours = stored_batches(segment)
    assert len(ours) == 12
    result = run_tool(DUMP_LOG, "--files", str(segment), "--print-data-log")
    assert result.returncode == 0, result.stderr
    batches = [m.groupdict() for m in map(DUMP_BATCH.match, result.stdout.splitlines()) if m]
    dumped = [m.groupdict() for m in map(DUMP_RECORD.match, result.stdout.splitlines()) if m]
    assert [b["valid"] for b in batches] == ["true"] * 12, result.stdout[-2000:]
    assert {(b["magic"], b["codec"]) for b in batches} == {("2", "none")}
    assert [
        (int(b["position"]), int(b["base"]), int(b["last"]), int(b["crc"])) for b in batches
    ] == ours
    assert [int(b["count"]) for b in batches] == [3] * 12
    assert [int(r["offset"]) for r in dumped] == list(range(len(records)))
    for record, (key, value) in zip(dumped, records, strict=True):
        assert record["key"] == (None if key is None else key.decode()), record
        assert int(record["key_size"]) == (-1 if key is None else len(key))
        assert (record["payload"], int(record["value_size"])) == (value.decode(), len(value))
    # The same records in our own reading of the bytes (tests/record_batches.py).
    decoded = [r for b in decode_batches(segment.read_bytes()) for r in b.records]
    assert [(r.key, r.value) for r in decoded] == records
    assert [int(r["ts"]) for r in dumped] == [r.timestamp for r in decoded]
    deep = run_tool(DUMP_LOG, "--files", str(segment), "--deep-iteration")
    assert deep.returncode == 0, deep.stderr
    deep_offsets = [int(m["offset"]) for m in map(DUMP_RECORD.match, deep.stdout.splitlines()) if m]
    assert deep_offsets == list(range(len(records)))
    assert "isvalid: false" not in deep.stdout


def test_kafka_dump_log_checks_our_indexes(
    cluster: ProcessCluster, produced: tuple[str, list[tuple[bytes | None, bytes]]]
) -> None:
    """Our .index and .timeindex pass kafka-dump-log's --index-sanity-check and
    --verify-index-only (which reads the log at every entry: an entry not at a batch holding
    its offset is reported as a mismatch), and every offset-index entry is a batch's last
    offset at that batch's position, as Kafka's own segments index."""
    name, _ = produced
    segment = leader_segment(cluster, name)
    index = segment.with_suffix(".index")
    timeindex = segment.with_suffix(".timeindex")
    assert index.stat().st_size > 0, "no index entry: too few bytes produced"
    files = f"{index},{timeindex}"
    sane = run_tool(DUMP_LOG, "--files", files, "--index-sanity-check")
    assert sane.returncode == 0, sane.stderr
    assert f"{index} passed sanity check." in sane.stdout
    assert f"{timeindex} passed sanity check." in sane.stdout
    verify = run_tool(DUMP_LOG, "--files", files, "--verify-index-only")
    assert verify.returncode == 0, verify.stderr
    problems = [line for line in verify.stdout.splitlines() if not line.startswith("Dumping ")]
    assert problems == [], verify.stdout
    entries = run_tool(DUMP_LOG, "--files", str(index))
    assert entries.returncode == 0, entries.stderr
    pairs = [
        (int(m[1]), int(m[2]))
        for m in re.finditer(r"^offset: (\d+) position: (\d+)$", entries.stdout, re.MULTILINE)
    ]
    assert len(pairs) == index.stat().st_size // 8
    last_at = {position: last for position, _, last, _ in stored_batches(segment)}
    assert all(last_at.get(position) == offset for offset, position in pairs), pairs


def test_kafka_console_producer_and_consumer_without_a_group(cluster: ProcessCluster) -> None:
    """kafka-console-producer writes keyed lines (idempotent, the Java producer's default:
    InitProducerId and the partition's sequence checks); kafka-console-consumer reads them back
    by partition and offset, no group; our own reading of the segment holds the same records at
    the same offsets."""
    name = "tools-console"
    mq_create(cluster, name, partitions=1, rf=1)
    wait_visible_on_brokers(cluster, name)
    lines = [f"k{i}:value {i} {'x' * i}" for i in range(20)]
    out = tool(cluster, CONSOLE_PRODUCER, "--topic", name,
               "--command-property", "acks=all",
               "--reader-property", "parse.key=true", "--reader-property", "key.separator=:",
               input_text="\n".join(lines) + "\n")  # fmt: skip
    assert out == ""
    read = tool(cluster, CONSOLE_CONSUMER, "--topic", name, "--partition", "0",
                "--offset", "earliest", "--max-messages", str(len(lines)),
                "--formatter-property", "print.key=true",
                "--formatter-property", "print.offset=true")  # fmt: skip
    assert read.splitlines() == [
        f"Offset:{i}\t{line.replace(':', chr(9), 1)}" for i, line in enumerate(lines)
    ]
    stored = [
        r for b in decode_batches(leader_segment(cluster, name).read_bytes()) for r in b.records
    ]
    assert [(r.key, r.value) for r in stored] == [
        tuple(part.encode() for part in line.split(":", 1)) for line in lines
    ]


@pytest.fixture(scope="module")
def console_group_read(
    cluster: ProcessCluster, produced: tuple[str, list[tuple[bytes | None, bytes]]]
) -> str:
    """What Kafka's console consumer printed reading 3 records in group ``console-group``, run
    once per cluster (each xdist worker has its own): the group and its records in
    __consumer_offsets, which the tests below read whatever order they run in."""
    name, _ = produced
    return tool(cluster, CONSOLE_CONSUMER, "--topic", name, "--group", "console-group",
                "--from-beginning", "--max-messages", "3", "--timeout-ms", "30000")  # fmt: skip


def test_kafka_console_consumer_in_a_group(
    cluster: ProcessCluster,
    produced: tuple[str, list[tuple[bytes | None, bytes]]],
    console_group_read: str,
) -> None:
    """The console consumer in a group (FindCoordinator creates __consumer_offsets, JoinGroup,
    SyncGroup, OffsetFetch, OffsetCommit); then kafka-consumer-groups lists the group and
    describes its committed offset, which confluent-kafka reads back through our brokers."""
    name, records = produced
    read = console_group_read
    assert read.splitlines() == [value.decode() for _, value in records[:3]]
    assert "console-group" in tool(cluster, GROUPS, "--list").split()
    described = tool(cluster, GROUPS, "--describe", "--group", "console-group", "--offsets")
    reader = Consumer({**confluent_config(cluster), "group.id": "console-group"})
    try:
        (committed,) = reader.committed([TopicPartition(name, 0)], timeout=30)
    finally:
        reader.close()
    assert committed.offset >= 3
    row = next(line.split() for line in described.splitlines() if f" {name} " in f" {line} ")
    assert row[:4] == ["console-group", name, "0", str(committed.offset)], described


TOOL_GROUP_COMMANDS = [
    "--describe --group tools-group",
    "--describe --group tools-group --offsets --verbose",
    "--describe --group tools-group --members",
    "--describe --group tools-group --state",
    "--reset-offsets --group tools-group --topic {topic} --to-earliest --dry-run",
    "--reset-offsets --group tools-group --topic {topic}:0 --shift-by -2 --dry-run",
    "--reset-offsets --group tools-group --topic {topic} --to-offset 5 --execute",
    "--describe --group tools-group --offsets",
    "--describe --group tools-group --state --verbose",
    "--delete-offsets --group tools-group --topic {topic}",
    "--describe --group no-such-group",
]


def test_kafka_consumer_groups_prints_what_metaquorum_groups_prints(
    cluster: ProcessCluster, produced: tuple[str, list[tuple[bytes | None, bytes]]]
) -> None:
    """Kafka's kafka-consumer-groups and ``metaquorum groups`` against our brokers, on a group
    with committed offsets and no member (its own: the console consumer's group is read by
    other tests): the same stdout, byte for byte, and exit code for each command in turn. A
    command that changes the group (reset --execute, delete-offsets) finds the same state for
    both tools: the group's offset is committed again before each run."""
    name, _ = produced

    def commit_30() -> None:
        committer = Consumer({**confluent_config(cluster), "group.id": "tools-group"})
        try:
            committer.commit(offsets=[TopicPartition(name, 0, 30)], asynchronous=False)
        finally:
            committer.close()

    commit_30()
    base = ["--bootstrap-server", kafka_address(cluster), "--command-config",
            client_properties(cluster)]  # fmt: skip
    for command in TOOL_GROUP_COMMANDS:
        args = command.format(topic=name).split()
        changes = "--execute" in args or "--delete-offsets" in args
        theirs = run_tool(GROUPS, *base, *args)
        if changes:
            commit_30()
        ours = subprocess.run(
            [sys.executable, "-m", "quorum.cli", "groups", *base, *args],
            cwd=REPO, capture_output=True, text=True, timeout=120, check=False,
        )  # fmt: skip
        assert ours.stdout == theirs.stdout, (
            f"{command}: Kafka's tool printed\n{theirs.stdout}{theirs.stderr[-2000:]}\n"
            f"metaquorum groups printed\n{ours.stdout}{ours.stderr[-2000:]}"
        )
        assert ours.returncode == theirs.returncode, command
    # the last change (delete-offsets, by ours) took: the group has no offset left
    reader = Consumer({**confluent_config(cluster), "group.id": "tools-group"})
    try:
        (committed,) = reader.committed([TopicPartition(name, 0)], timeout=30)
    finally:
        reader.close()
    assert committed.offset < 0, committed


def test_kafka_dump_log_decodes_the_offsets_topic(
    cluster: ProcessCluster,
    produced: tuple[str, list[tuple[bytes | None, bytes]]],
    console_group_read: str,
) -> None:
    """kafka-dump-log --offsets-decoder reads the records of the console consumer's group in
    __consumer_offsets (docs/groups.md#records): Kafka's GroupMetadataKey/Value and
    OffsetCommitKey/Value, as its own brokers write them."""
    name, _ = produced
    group = "console-group"
    index = partition_for(group, 3)
    layout = mq_describe(cluster, "__consumer_offsets")["layout"]
    assert isinstance(layout, dict)
    directory = cluster.nodes[layout[index][0]].log_dir / f"__consumer_offsets-{index}"
    segment = directory / "00000000000000000000.log"
    result = run_tool(DUMP_LOG, "--files", str(segment), "--offsets-decoder")
    assert result.returncode == 0, result.stderr
    keys, payloads = [], []
    for line in result.stdout.splitlines():
        found = re.search(r" key: (\{.*\}) payload: (.*)$", line)
        if found:
            keys.append(json.loads(found[1]))
            payloads.append(None if found[2] in ("", "<DELETE>") else json.loads(found[2]))
    assert keys, result.stdout[-3000:]
    groups = [(k, p) for k, p in zip(keys, payloads, strict=True) if str(k["type"]) == "2"]
    commits = [(k, p) for k, p in zip(keys, payloads, strict=True) if str(k["type"]) == "1"]
    assert {k["data"]["group"] for k, _ in groups} == {group}, result.stdout[-3000:]
    last_group = groups[-1][1]
    assert last_group is not None
    assert last_group["data"]["protocolType"] == "consumer"
    assert last_group["data"]["generation"] >= 1
    offsets = {
        (k["data"]["topic"], k["data"]["partition"]): p["data"]["offset"]
        for k, p in commits
        if k["data"]["group"] == group and p is not None
    }
    assert offsets[(name, 0)] >= 3, result.stdout[-3000:]


def test_kafka_get_offsets_is_list_offsets_as_our_clients_see_it(
    cluster: ProcessCluster, produced: tuple[str, list[tuple[bytes | None, bytes]]]
) -> None:
    """kafka-get-offsets (GetOffsetShell) for latest, earliest, max timestamp and a timestamp
    answers what confluent-kafka's list_offsets gets from our broker, and what the log holds."""
    name, records = produced
    segment = leader_segment(cluster, name)
    timestamps = [r.timestamp for b in decode_batches(segment.read_bytes()) for r in b.records]
    middle = timestamps[len(timestamps) // 2]
    admin = AdminClient(confluent_config(cluster))
    partition = TopicPartition(name, 0)

    def theirs(time: str) -> int:
        out = tool(cluster, GET_OFFSETS, "--topic", name, "--time", time)
        assert out.splitlines()[0].rsplit(":", 1)[0] == f"{name}:0", out
        return int(out.splitlines()[0].rsplit(":", 1)[1])

    def ours(spec: OffsetSpec) -> int:
        future = admin.list_offsets({partition: spec}, request_timeout=30)[partition]
        return int(future.result(timeout=30).offset)

    assert theirs("-1") == ours(OffsetSpec.latest()) == len(records)
    assert theirs("-2") == ours(OffsetSpec.earliest()) == 0
    newest = max(timestamps)
    assert theirs("-3") == ours(OffsetSpec.max_timestamp()) == timestamps.index(newest)
    first_at = next(i for i, t in enumerate(timestamps) if t >= middle)
    assert theirs(str(middle)) == ours(OffsetSpec.for_timestamp(middle)) == first_at


LOG_DIRS = "org.apache.kafka.tools.LogDirsCommand"


def test_kafka_log_dirs_describe_is_the_leader_s_log_dir(
    cluster: ProcessCluster, produced: tuple[str, list[tuple[bytes | None, bytes]]]
) -> None:
    """kafka-log-dirs --describe (DescribeLogDirs) lists the leader's log dir by its absolute
    path, with the produced partition at the size of its segment on disk, lag 0, not future."""
    name, _ = produced
    segment = leader_segment(cluster, name)
    leader = int(mq_describe(cluster, name)["layout"][0][0])  # type: ignore[index]
    out = tool(cluster, LOG_DIRS, "--describe", "--broker-list", str(leader), "--topic-list", name)
    report = json.loads(next(line for line in out.splitlines() if line.startswith("{")))
    ((broker,),) = [report["brokers"]]
    assert broker["broker"] == leader
    (log_dir,) = broker["logDirs"]
    assert log_dir["error"] is None
    assert log_dir["logDir"] == os.path.abspath(segment.parent.parent)
    assert log_dir["partitions"] == [
        {
            "partition": f"{name}-0",
            "size": segment.stat().st_size,
            "offsetLag": 0,
            "isFuture": False,
        }
    ]


TRANSACTIONS = "org.apache.kafka.tools.TransactionsCommand"


def transactions(cluster: ProcessCluster, *args: str) -> str:
    """kafka-transactions (its connection options come before its subcommand); its stdout."""
    result = run_tool(
        TRANSACTIONS,
        "--bootstrap-server",
        kafka_address(cluster),
        "--command-config",
        client_properties(cluster),
        *args,
    )
    output = result.stdout + result.stderr
    assert result.returncode == 0 and "Exception" not in result.stderr, output[-3000:]
    return result.stdout


def test_kafka_transactions_describe_producers_and_list(cluster: ProcessCluster) -> None:
    """kafka-transactions describe-producers (DescribeProducers) shows the idempotent producer
    that wrote to the partition, with its last sequence; kafka-transactions list
    (ListTransactions to every broker) lists no transaction: there are none here."""
    name = "tools-producers"
    mq_create(cluster, name, partitions=1, rf=1)
    wait_visible_on_brokers(cluster, name)
    producer = Producer({**confluent_config(cluster), "enable.idempotence": True})
    for index in range(3):
        producer.produce(name, value=f"v{index}".encode(), partition=0)
        assert producer.flush(30) == 0  # one batch per flush: sequences 0, 1, 2
    out = transactions(cluster, "describe-producers", "--topic", name, "--partition", "0")
    header, *rows = [line.split() for line in out.strip().splitlines()]
    assert header[:4] == ["ProducerId", "ProducerEpoch", "LatestCoordinatorEpoch", "LastSequence"]
    ((producer_id, epoch, coordinator_epoch, last_sequence, _, txn_start),) = rows
    assert int(producer_id) >= 0 and int(epoch) >= 0
    assert (coordinator_epoch, last_sequence, txn_start) == ("-1", "2", "None")
    listed = transactions(cluster, "list")
    assert listed.strip().splitlines()[1:] == [], listed
