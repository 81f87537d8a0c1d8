"""Metrics on a real cluster (docs/operating.md#metrics): three controllers and two brokers as
processes over mTLS, each with a metrics listener and a plaintext health listener. Every node
is scraped over HTTP and its output checked with ``promtool check metrics``; then a real
Prometheus (Debian's ``prometheus``, when installed) scrapes the cluster and answers queries,
among them every expression of the Grafana dashboard in ``deploy/grafana/``.
"""

from __future__ import annotations

import json
import math
import re
import shutil
import subprocess
import sys
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
import yaml
from grpc_health.v1 import health_pb2, health_pb2_grpc
from prometheus_client.parser import text_string_to_metric_families

from quorum.admin import NewTopic
from quorum.harness import ProcessCluster, free_port, process_cluster, stop_node, wait_until

# timing: the module's tests share one cluster and expect its leader and brokers (a 4 s
# session timeout) to stay put between them; on a busy machine (two workers, or other jobs) an
# election or a fenced broker between two tests failed four of them (NOT_SERVING health).
pytestmark = [pytest.mark.slow, pytest.mark.timing]

REPO = Path(__file__).resolve().parents[2]
DASHBOARD = REPO / "deploy" / "grafana" / "metaquorum.json"
# promtool lints Prometheus naming. Three of Kafka's own broker-metadata-metrics names break
# its rules, and dashboards need them as they are: last-applied-record-lag-ms ends in "_ms" (an
# abbreviated unit), metadata-load-error-count and metadata-apply-error-count in "_count"
# (reserved for histograms). Any other complaint, and any parse error, fails the test.
KAFKA_NAMES_PROMTOOL_REFUSES = frozenset(
    {
        "kafka_server_brokermetadatametrics_last_applied_record_lag_ms",
        "kafka_server_brokermetadatametrics_metadata_load_error_count",
        "kafka_server_brokermetadatametrics_metadata_apply_error_count",
    }
)

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def logged_address(cluster: ProcessCluster, node_id: int, event: str) -> str | None:
    """The address a node logged with ``event`` (metrics_listening, health_listening)."""
    found = cluster.events(node_id, event)
    return str(found[0]["address"]) if found else None


def scrape_text(url: str) -> str:
    with urllib.request.urlopen(url, timeout=5) as response:
        return str(response.read().decode())


def parse(text: str) -> Samples:
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


class Cluster:
    def __init__(self, cluster: ProcessCluster) -> None:
        self.cluster = cluster
        self.metrics_url = {
            n: wait_until(
                lambda n=n: logged_address(cluster, n, "metrics_listening"), 30, f"{n} metrics"
            )
            for n in cluster.nodes
        }
        self.health_address = {
            n: wait_until(
                lambda n=n: logged_address(cluster, n, "health_listening"), 30, f"{n} health"
            )
            for n in cluster.nodes
        }

    def scrape(self, node_id: int) -> Samples:
        return parse(scrape_text(self.metrics_url[node_id]))

    def value(self, node_id: int, name: str, **labels: str) -> float:
        return self.scrape(node_id)[(name, tuple(sorted(labels.items())))]


@pytest.fixture(scope="module")
def running(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    root = tmp_path_factory.mktemp("metrics-cluster")
    side = {"metrics.listener": "http://127.0.0.1:0", "health.listener": "127.0.0.1:0"}
    with process_cluster(
        root,
        brokers=2,
        node_settings=side,
        broker_settings={"broker.heartbeat.interval.ms": 500, "broker.session.timeout.ms": 4000},
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
        yield Cluster(cluster)


def test_every_node_serves_kafkas_metrics_with_values_that_follow_the_cluster(
    running: Cluster,
) -> None:
    cluster = running.cluster
    leader, epoch, _ = cluster.wait_for_leader()
    controllers = cluster.controller_ids
    brokers = cluster.broker_ids
    controller_prefix = "kafka_controller_kafkacontroller_"

    # Roles: one active controller, the others follow; brokers observe.
    for node_id in controllers:
        samples = running.scrape(node_id)
        active = samples[(controller_prefix + "activecontrollercount", ())]
        assert active == (1 if node_id == leader else 0), node_id
        state = "leader" if node_id == leader else "follower"
        assert samples[("kafka_server_raftmetrics_current_state", (("state", state),))] == 1
        assert samples[("kafka_server_raftmetrics_current_leader", ())] == leader
        assert samples[("kafka_server_raftmetrics_current_epoch", ())] == epoch
        assert samples[(controller_prefix + "activebrokercount", ())] == 2
        assert samples[(controller_prefix + "fencedbrokercount", ())] == 0
        assert samples[(controller_prefix + "lastappliedrecordlagms", ())] < 5_000
        assert samples[("kafka_server_raftmetrics_number_of_voters", ())] == 3
        assert samples[("kafka_server_raftmetrics_log_end_epoch", ())] == epoch
        assert samples[("kafka_server_raftmetrics_uncommitted_voter_change", ())] == 0
        assert samples[("kafka_server_raftmetrics_number_unknown_voter_connections", ())] == 0
        # The leader tracks the two brokers as observers (they fetch every 500 ms at most).
        observers = samples[("kafka_server_raftmetrics_number_of_observers", ())]
        assert observers == (2 if node_id == leader else 0), node_id
    for node_id in brokers:
        samples = running.scrape(node_id)
        assert samples[("kafka_server_raftmetrics_current_state", (("state", "observer"),))] == 1
        assert samples[("kafka_server_raftmetrics_current_leader", ())] == leader
        assert samples[("metaquorum_broker_caught_up", ())] == 1
        # Brokers serve no controller metrics.
        assert (controller_prefix + "activecontrollercount", ()) not in samples

    # The high watermark grows (the leader's NoOps), on the leader and on a broker.
    for node_id in (leader, brokers[0]):
        first = running.value(node_id, "kafka_server_raftmetrics_high_watermark")
        wait_until(
            lambda node_id=node_id, first=first: (
                running.value(node_id, "kafka_server_raftmetrics_high_watermark") > first
            ),
            10,
            f"node {node_id}'s high_watermark to grow past {first}",
        )

    # A topic: every controller counts it, its partitions land on the brokers.
    topics_before = running.value(leader, controller_prefix + "globaltopiccount")
    with cluster.admin() as admin:
        created = admin.create_topics([NewTopic("orders", 3, 2)])
        assert created.errors() == {}
        offset = created.metadata_offset
        again = admin.create_topics([NewTopic("orders", 3, 2)])
        assert set(again.errors()) == {"orders"}  # TOPIC_ALREADY_EXISTS, counted below
    for node_id in controllers:
        wait_until(
            lambda node_id=node_id: (
                running.value(node_id, controller_prefix + "globaltopiccount") == topics_before + 1
                and running.value(node_id, controller_prefix + "globalpartitioncount") == 3
                and running.value(node_id, controller_prefix + "lastappliedrecordoffset") >= offset
            ),
            10,
            f"controller {node_id} counting the new topic",
        )
    for node_id in brokers:
        wait_until(
            lambda node_id=node_id: (
                running.value(
                    node_id, "kafka_server_brokermetadatametrics_last_applied_record_offset"
                )
                >= offset
            ),
            10,
            f"broker {node_id} applying the new topic",
        )

    leader_samples = running.scrape(leader)
    requests = "metaquorum_admin_requests_total"
    results = "metaquorum_admin_results_total"
    assert leader_samples[(requests, (("error_code", "NONE"), ("rpc", "CreateTopics")))] >= 2
    assert (
        leader_samples[(results, (("error_code", "TOPIC_ALREADY_EXISTS"), ("rpc", "CreateTopics")))]
        == 1
    )
    queue = "kafka_controller_controllereventmanager_eventqueuetimems"
    assert leader_samples[(queue + "_count", ())] >= 2
    assert not math.isnan(leader_samples[("kafka_server_raftmetrics_commit_latency_avg", ())])
    assert leader_samples[("kafka_server_raftmetrics_append_records_rate", ())] > 0
    fetches = [
        value
        for (name, labels), value in leader_samples.items()
        if name == "metaquorum_grpc_server_handling_seconds_count"
        and ("grpc_method", "FetchStream") in labels
        and ("grpc_code", "OK") in labels
    ]
    assert sum(fetches) > 0
    broker_samples = running.scrape(brokers[0])
    assert broker_samples[("kafka_server_raftmetrics_fetch_records_rate", ())] > 0
    runs = [
        v
        for (name, _), v in broker_samples.items()
        if name == "metaquorum_broker_reconciliations_total"
    ]
    assert sum(runs) >= 1
    log_dir = str(cluster.nodes[brokers[0]].log_dir)
    pending = ("metaquorum_broker_pending_deletion_directories",)
    assert broker_samples[(pending[0], (("broker_id", str(brokers[0])), ("log_dir", log_dir)))] == 0


def test_health_listener_answers_plaintext_grpc_probes(running: Cluster) -> None:
    for node_id, address in running.health_address.items():
        with grpc.insecure_channel(address) as channel:
            answer = health_pb2_grpc.HealthStub(channel).Check(
                health_pb2.HealthCheckRequest(service=""), timeout=5
            )
            assert answer.status == health_pb2.HealthCheckResponse.SERVING, node_id
            # Nothing but health is served there.
            with pytest.raises(grpc.RpcError) as info:
                channel.unary_unary("/quorum.rpc.v1.AdminService/ListTopics")(b"", timeout=5)
            assert info.value.code() == grpc.StatusCode.UNIMPLEMENTED


def test_the_compose_healthcheck_probes_a_real_node(running: Cluster) -> None:
    """deploy/compose/compose.yaml's healthcheck command, run as the engine would run it in
    a container, against each node's health listener here."""
    node = yaml.safe_load((REPO / "deploy" / "compose" / "compose.yaml").read_text())
    command = node["x-node"]["healthcheck"]["test"]
    assert command[:2] == ["CMD", "python"]
    for node_id, address in running.health_address.items():
        argv = [arg.replace("127.0.0.1:9405", address) for arg in command[2:]]
        result = subprocess.run(
            [sys.executable, *argv], capture_output=True, text=True, timeout=30, check=False
        )
        assert result.returncode == 0, f"node {node_id}: {result.stdout}{result.stderr}"
    # A port where nothing serves health fails the check.
    argv = [arg.replace("127.0.0.1:9405", f"127.0.0.1:{free_port()}") for arg in command[2:]]
    failed = subprocess.run([sys.executable, *argv], capture_output=True, timeout=30, check=False)
    assert failed.returncode != 0


def promtool_problems(text: str) -> list[str]:
    """``promtool check metrics`` on ``text``: its complaints, or a failure if it cannot parse."""
    result = subprocess.run(
        ["promtool", "check", "metrics"],
        input=text,
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    output = (result.stdout + result.stderr).strip()
    # 0: clean; 3: lint problems only (1 would be a parse error).
    assert result.returncode in (0, 3), f"promtool exited {result.returncode}: {output}"
    return [line for line in output.splitlines() if line.strip()]


def test_promtool_accepts_every_nodes_output(running: Cluster) -> None:
    if shutil.which("promtool") is None:
        pytest.skip(
            "promtool is not installed (Debian package prometheus; scripts/test installs it)"
        )
    for node_id, url in running.metrics_url.items():
        problems = promtool_problems(scrape_text(url))
        unexpected = [p for p in problems if p.split(" ", 1)[0] not in KAFKA_NAMES_PROMTOOL_REFUSES]
        assert not unexpected, f"node {node_id}: {unexpected}"


def dashboard_expressions() -> list[str]:
    dashboard = json.loads(DASHBOARD.read_text())
    expressions = [
        target["expr"]
        for panel in dashboard["panels"]
        for target in panel.get("targets", [])
        if "expr" in target
    ]
    assert expressions, "the dashboard has no query"
    return expressions


METRIC_NAME = re.compile(r"\b(?:kafka|metaquorum)_[a-z0-9_]+\b")


def test_the_dashboard_uses_only_names_the_nodes_serve(running: Cluster) -> None:
    served = {name for n in running.cluster.nodes for name, _ in running.scrape(n)}
    used = {name for e in dashboard_expressions() for name in METRIC_NAME.findall(e)}
    assert len(used) >= 40, sorted(used)
    assert not used - served, f"the dashboard queries names no node serves: {used - served}"


def promql(expression: str) -> str:
    """A dashboard expression with Grafana's variables as a plain query gets them."""
    text = expression.replace("$__rate_interval", "1m").replace("$__interval", "15s")
    return re.sub(r'=~"\$[a-z_]+"', '=~".*"', text)


def query(base: str, expression: str) -> dict[str, Any]:
    url = f"{base}/api/v1/query?{urllib.parse.urlencode({'query': expression})}"
    with urllib.request.urlopen(url, timeout=5) as response:
        answer: dict[str, Any] = json.loads(response.read())
    assert answer["status"] == "success", answer
    return answer["data"]


def test_a_real_prometheus_scrapes_the_cluster(running: Cluster, tmp_path: Path) -> None:
    binary = shutil.which("prometheus")
    if binary is None:
        pytest.skip(
            "prometheus is not installed (Debian package prometheus; scripts/test installs it "
            "as root): the scrape by a real Prometheus was not exercised"
        )
    cluster = running.cluster
    targets = {
        role: [
            urllib.parse.urlsplit(running.metrics_url[n]).netloc
            for n in cluster.nodes
            if cluster.nodes[n].role == role
        ]
        for role in ("controller", "broker")
    }
    config = {
        "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
        "scrape_configs": [
            {"job_name": f"metaquorum-{role}", "static_configs": [{"targets": addresses}]}
            for role, addresses in targets.items()
        ],
    }
    config_path = tmp_path / "prometheus.yml"
    config_path.write_text(yaml.safe_dump(config))
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    log = (tmp_path / "prometheus.log").open("wb")
    process = subprocess.Popen(
        [
            binary,
            f"--config.file={config_path}",
            f"--storage.tsdb.path={tmp_path / 'tsdb'}",
            f"--web.listen-address=127.0.0.1:{port}",
            "--log.level=warn",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:

        def all_up() -> bool:
            data = query(base, "up")
            ups = [float(r["value"][1]) for r in data["result"]]
            return len(ups) == len(cluster.nodes) and all(u == 1 for u in ups)

        wait_until(all_up, 30, "Prometheus to scrape all five nodes (up == 1)")
        leader, _, _ = cluster.wait_for_leader()

        def active_controllers() -> list[dict[str, Any]] | None:
            result: list[dict[str, Any]] = query(
                base, "kafka_controller_kafkacontroller_activecontrollercount == 1"
            )["result"]
            return result or None

        active = wait_until(active_controllers, 15, "the active controller's series")
        assert len(active) == 1
        leader_address = urllib.parse.urlsplit(running.metrics_url[leader]).netloc
        assert active[0]["metric"]["instance"] == leader_address
        topics = query(base, "max(kafka_controller_kafkacontroller_globaltopiccount)")
        assert float(topics["result"][0]["value"][1]) >= 0
        # Every expression of the dashboard is valid PromQL over what the cluster serves.
        wait_until(
            lambda: all(query(base, promql(e))["result"] for e in dashboard_expressions()),
            30,
            "every dashboard expression returning data",
        )
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=10)
        log.close()
        if process.returncode not in (0, -15):
            print((tmp_path / "prometheus.log").read_text(errors="replace")[-3000:])


def test_a_node_with_metrics_stops_cleanly_on_sigterm(running: Cluster) -> None:
    """Last in this module: SIGTERM stops a broker and a follower controller (their metrics
    and health listeners with them) with exit code 0."""
    cluster = running.cluster
    leader, _, _ = cluster.wait_for_leader()
    follower = next(n for n in cluster.controller_ids if n != leader)
    for node_id in (cluster.broker_ids[-1], follower):
        process = cluster.nodes[node_id].process
        assert process is not None
        assert stop_node(process, timeout_s=20) == 0, cluster.logs(node_id)[-2000:]
        with pytest.raises(OSError):
            scrape_text(running.metrics_url[node_id])
