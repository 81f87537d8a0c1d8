"""Apache Kafka's own tools against metaquorum's brokers (issue 33; the matrix is
docs/kafka-listener.md#kafkas-own-tools). The tools are Kafka 4.4's Java main classes behind
``kafka-topics.sh``, ``kafka-acls.sh``, ``kafka-configs.sh``, ``kafka-metadata-quorum.sh``,
``kafka-cluster.sh``, ``kafka-broker-api-versions.sh``, ``kafka-consumer-groups.sh`` and
``kafka-features.sh``, and Kafka's Java AdminClient through a small driver
(``scripts/kafka/AdminDriver.java``) for the calls by topic id. Each runs against one broker's
SSL Kafka listener, as ``CN=admin`` over mTLS (``ssl.keystore.type=PEM``), and what it prints is
compared with what ``metaquorum``'s own commands print.

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

import re
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from broker.kafka.protocol import API_VERSIONS
from quorum.harness import ProcessCluster, process_cluster, wait_until
from quorum.kafka_peer import compile_driver, kafka_missing, run_tool

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

# The reasons a tool fails against our brokers today, each with the signature it prints.
NO_DESCRIBE_QUORUM = (
    "DescribeQuorum (API 55) is not served on the Kafka listener yet: metaquorum answers it "
    "on gRPC (`metaquorum quorum describe`). Needs: DescribeQuorum on the Kafka listener, "
    "forwarded to the controllers as the gRPC side does",
    "does not support DESCRIBE_QUORUM",
)
NO_ALTER_CONFIGS = (
    "IncrementalAlterConfigs (API 44) is not served: topic configs are set at creation only. "
    "Needs: config changes (a ConfigRecord through the controller)",
    "INCREMENTAL_ALTER_CONFIGS API is not supported",
)
NO_BROKER_CONFIGS = (
    "DescribeConfigs answers topic resources only; broker resources (type 4) are "
    "INVALID_REQUEST. Needs: broker configs in the image",
    "resource type 4 is not served here",
)
NO_GROUPS = (
    "ListGroups, FindCoordinator and the group APIs are not served: consumer groups come "
    "with the data plane",
    "does not support LIST_GROUPS",
)


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


def listening(address: str) -> bool:
    host, port = address.split(":")
    try:
        socket.create_connection((host, int(port)), timeout=0.5).close()
    except OSError:
        return False
    return True


def tool(
    cluster: ProcessCluster,
    main_class: str,
    *args: str,
    known: tuple[str, str] | None = None,
    subcommand: tuple[str, ...] = (),
    broker: int = 101,
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


@xfail_for(NO_ALTER_CONFIGS)
def test_kafka_configs_alter_topic(cluster: ProcessCluster) -> None:
    mq_create(cluster, "cfg-alter")
    wait_visible_on_brokers(cluster, "cfg-alter")
    tool(cluster, CONFIGS, "--alter", "--entity-type", "topics", "--entity-name", "cfg-alter",
         "--add-config", "retention.ms=1000", known=NO_ALTER_CONFIGS)  # fmt: skip
    assert mq_describe(cluster, "cfg-alter")["configs"] == {"retention.ms": "1000"}


@xfail_for(NO_BROKER_CONFIGS)
def test_kafka_configs_describe_broker(cluster: ProcessCluster) -> None:
    out = tool(cluster, CONFIGS, "--describe", "--entity-type", "brokers", "--entity-name",
               "101", known=NO_BROKER_CONFIGS)  # fmt: skip
    assert out.startswith("Dynamic configs for broker 101 are:")


# ----- kafka-metadata-quorum, kafka-cluster, kafka-features --------------------------------------


def mq_quorum_status(cluster: ProcessCluster) -> dict[str, str]:
    out = mq(cluster, "quorum", "describe", "--status")
    return {k.strip(): v.strip() for k, _, v in (line.partition(":") for line in out.splitlines())}


@xfail_for(NO_DESCRIBE_QUORUM)
def test_kafka_metadata_quorum_describe_status(cluster: ProcessCluster) -> None:
    out = tool(cluster, QUORUM, "describe", "--status", known=NO_DESCRIBE_QUORUM)
    theirs = {k.strip(): v.strip() for k, _, v in (line.partition(":") for line in
                                                   out.splitlines())}  # fmt: skip
    ours = mq_quorum_status(cluster)
    for key in ("ClusterId", "LeaderId", "LeaderEpoch", "CurrentVoters"):
        assert theirs[key] == ours[key], key


@xfail_for(NO_DESCRIBE_QUORUM)
def test_kafka_metadata_quorum_describe_replication(cluster: ProcessCluster) -> None:
    out = tool(cluster, QUORUM, "describe", "--replication", known=NO_DESCRIBE_QUORUM)
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


# ----- kafka-consumer-groups ----------------------------------------------------------------------


@xfail_for(NO_GROUPS)
def test_kafka_consumer_groups_list(cluster: ProcessCluster) -> None:
    assert tool(cluster, GROUPS, "--list", known=NO_GROUPS).strip() == ""
