"""Kafka habits on a real cluster: CreatePartitions through `topics --alter` (brokers create the
new directories), Kafka's topic defaults from the controllers' config, the describe filters,
`quorum describe --bootstrap-server` answered by a broker, and a node started from a Kafka
`.properties` file. Real processes on 127.0.0.1, mTLS on (ACLs, the admin a super user)."""

from __future__ import annotations

import json
import signal
from pathlib import Path

import pytest

from quorum.admin import AdminClient, NewPartitions, NewTopic, TopicCollection
from quorum.errors import InvalidPartitionsError, TopicAuthorizationFailedError
from quorum.harness import (
    CLUSTER_ID,
    ProcessCluster,
    free_port,
    process_cluster,
    run_cli,
    start_node,
    stop_node,
    wait_until,
)
from quorum.ids import Uuid
from tests.process.test_broker_process import assigned, partition_dirs

pytestmark = [pytest.mark.slow]

SESSION_TIMEOUT_MS = 3_000


def describe_lines(cluster: ProcessCluster, *args: str) -> list[str]:
    result = cluster.run_cli(
        "topics", "--bootstrap-server", cluster.bootstrap, "--describe", *args, check=False
    )
    assert result.returncode == 0, result.stderr
    return result.stdout.splitlines()


def wait_reconciled(cluster: ProcessCluster, admin: AdminClient, what: str) -> None:
    for broker_id in cluster.broker_ids:
        wait_until(
            lambda b=broker_id: partition_dirs(cluster, b) == assigned(admin, b),  # type: ignore[misc]
            20,
            f"broker {broker_id}'s directories matching the image ({what})",
        )


def test_create_partitions_defaults_filters_and_describe_via_a_broker(tmp_path: Path) -> None:
    controller_settings = {
        "num.partitions": 2,
        "default.replication.factor": 2,
        "broker.session.timeout.ms": SESSION_TIMEOUT_MS,
    }
    with process_cluster(
        tmp_path,
        brokers=2,
        settings=controller_settings,
        broker_settings={"broker.heartbeat.interval.ms": 500},
    ) as cluster:
        cluster.format()
        cluster.start_all()
        cluster.wait_for_leader(timeout_s=30)
        admin = cluster.admin(timeout_s=30)
        wait_until(
            lambda: sum(not b.is_fenced for b in admin.describe_cluster().brokers) == 2,
            30,
            "both brokers registered and unfenced",
        )
        # num.partitions / default.replication.factor: what a create that sets neither gets.
        created = cluster.run_cli("topics", "--bootstrap-server", cluster.bootstrap, "--create",
                                  "--topic", "orders")  # fmt: skip
        assert (created.returncode, created.stdout) == (0, "Created topic orders.\n")
        (line, *partitions) = describe_lines(cluster, "--topic", "orders")
        assert "\tPartitionCount: 2\tReplicationFactor: 2\t" in line
        orders_id = Uuid.parse(line.split("TopicId: ")[1].split("\t")[0])

        # topics --alter --partitions: Kafka prints nothing; the brokers create the new dirs.
        altered = cluster.run_cli("topics", "--bootstrap-server", cluster.bootstrap, "--alter",
                                  "--topic", "orders", "--partitions", "4")  # fmt: skip
        assert (altered.returncode, altered.stdout, altered.stderr) == (0, "", "")
        (line, *partitions) = describe_lines(cluster, "--topic", "orders")
        assert "\tPartitionCount: 4\tReplicationFactor: 2\t" in line
        assert [p.split("\t")[2] for p in partitions] == [f"Partition: {i}" for i in range(4)]
        wait_reconciled(cluster, admin, "after --alter")
        on_disk = set(partition_dirs(cluster, 101)) | set(partition_dirs(cluster, 102))
        assert on_disk == {f"orders-{p}" for p in range(4)}
        assert set(partition_dirs(cluster, 101).values()) == {orders_id}

        # Shrinking is refused with Kafka's code; nothing changes.
        shrink = cluster.run_cli("topics", "--bootstrap-server", cluster.bootstrap, "--alter",
                                 "--topic", "orders", "--partitions", "3", check=False)  # fmt: skip
        assert shrink.returncode == 1
        assert shrink.stderr.startswith(
            "Error while executing topic command : INVALID_PARTITIONS: Topic 'orders' currently "
            "has 4 partition(s); 3 would not be an increase"
        ), shrink.stderr
        # By id, validate only: accepted, nothing written.
        checked = admin.create_partitions(
            {orders_id: NewPartitions.increase_to(6)}, validate_only=True
        )
        checked.all()
        with pytest.raises(InvalidPartitionsError):
            admin.create_partitions({"orders": NewPartitions.increase_to(4)}).all()
        # ALTER on the topic is needed, as in Kafka: alice has no ACL.
        with cluster.admin(security=cluster.client_security("alice")) as alice:
            refused = alice.create_partitions({"orders": NewPartitions.increase_to(8)})
            with pytest.raises(TopicAuthorizationFailedError, match="may not ALTER topic"):
                refused.all()
        described = admin.describe_topics(TopicCollection.of_topic_names(["orders"]))
        assert len(described.all_topic_names()["orders"].partitions) == 4

        # quorum describe through a broker (Kafka's --bootstrap-server): it forwards.
        broker = cluster.nodes[101].address
        status = cluster.run_cli(
            "quorum", "describe", "--status", "--bootstrap-server", broker, check=False
        )
        assert status.returncode == 0, status.stderr
        fields = {
            key.strip(): value.strip()
            for key, value in (row.split(":", 1) for row in status.stdout.splitlines())
        }
        leader = cluster.leader()
        assert leader is not None
        assert fields["ClusterId"] == CLUSTER_ID
        assert fields["LeaderId"] == str(leader[0])
        assert json.loads(fields["CurrentVoters"])[0]["id"] in cluster.controller_ids

        # A single-replica topic, then broker 102 dies: its partitions are under-replicated,
        # and the single replica it held is unavailable (no leader).
        admin.create_topics([NewTopic("single", 2, 1)]).all()
        wait_reconciled(cluster, admin, "after creating single")
        cluster.kill(102, signal.SIGKILL)
        wait_until(
            lambda: any(
                b.broker_id == 102 and b.is_fenced for b in admin.describe_cluster().brokers
            ),
            20,
            "broker 102 fenced",
        )
        under = describe_lines(cluster, "--under-replicated-partitions")
        assert under, "no under-replicated partition after a broker was fenced"
        assert all(line.startswith("\tTopic: orders\t") for line in under)
        assert len(under) == 4  # RF 2 on two brokers: every orders partition had 102
        unavailable = describe_lines(cluster, "--unavailable-partitions")
        assert len(unavailable) == 1
        assert unavailable[0].startswith("\tTopic: single\t")
        assert "\tLeader: none\t" in unavailable[0]
        healthy = describe_lines(cluster, "--topic", "orders", "--unavailable-partitions")
        assert healthy == []
        admin.close()


def test_a_kafka_properties_file_starts_a_controller(tmp_path: Path) -> None:
    """Kafka's controller.properties keys, unchanged in form: the node starts, leads its
    one-voter quorum, and warns once about the keys that mean nothing here."""
    port = free_port()
    config = tmp_path / "controller.properties"
    template = (
        Path(__file__).resolve().parents[1] / "fixtures" / "kraft" / "controller.properties"
    ).read_text()
    config.write_text(
        template.replace(
            "controller.quorum.voters=1@127.0.0.1:29093,2@127.0.0.1:29094,3@127.0.0.1:29095",
            f"controller.quorum.voters=1@127.0.0.1:{port}",
        )
        .replace("listeners=CONTROLLER://:29093", f"listeners=CONTROLLER://127.0.0.1:{port}")
        .replace("log.dirs=data/controller-1", f"log.dirs={tmp_path / 'data'}")
    )
    run_cli("storage", "format", "--config", str(config), "--cluster-id", CLUSTER_ID)
    log_path = tmp_path / "controller.log"
    process = start_node("controller", config, log_path)
    try:
        with AdminClient(f"127.0.0.1:{port}", timeout_s=30) as admin:
            wait_until(lambda: admin.describe_quorum().leader_id == 1, 30, "node 1 leading")
    finally:
        assert stop_node(process) in (0, -signal.SIGTERM)
    events = [
        json.loads(line) for line in log_path.read_text().splitlines() if line.startswith("{")
    ]
    (warning,) = [e for e in events if e.get("event") == "config_keys_ignored"]
    assert (
        "num.network.threads" in warning["keys"]
        and "transaction.state.log.replication.factor" in warning["keys"]
    )
    # Kafka's log defaults and the offsets topic's keys are read (a broker's defaults for
    # topics, the group coordinator's), so not "ignored".
    assert "log.retention.hours" not in warning["keys"]
    assert "offsets.topic.replication.factor" not in warning["keys"]
    assert warning["level"] == "warning"
