"""A node's metrics (docs/operating.md#metrics): Kafka's windowed statistics
(quorum/server/metric_stats.py), the Raft metrics measured on a real ``RaftNode``
(quorum/server/raft_metrics.py), the counts of an image (quorum/server/controller_metrics.py),
the snapshot the event loop hands a scrape and the exposition of every family
(quorum/server/metrics.py), the gRPC interceptor (quorum/server/grpc_metrics.py)."""

from __future__ import annotations

import asyncio
import math
import random
import threading
from typing import Any

import grpc
import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from quorum.ids import Uuid
from quorum.metadata.delta import MetadataDelta
from quorum.metadata.image import MetadataImage
from quorum.metadata.records import (
    BrokerEndpoint,
    FenceBrokerRecord,
    NoOpRecord,
    PartitionRecord,
    RegisterBrokerRecord,
    TopicRecord,
)
from quorum.raft.config import RaftConfig
from quorum.raft.node import RaftNode, Ready
from quorum.rpc.v1 import admin_pb2
from quorum.server import controller_metrics, grpc_metrics, metric_stats, raft_metrics
from quorum.server import metrics as m

SEED = 1604


def samples(text: bytes) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """name and sorted labels -> value, for every sample of an exposition."""
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text.decode())
        for s in family.samples
    }


# ----- Kafka's windowed statistics --------------------------------------------------------------


def test_windowed_stat_avg_max_over_the_live_windows() -> None:
    stat = metric_stats.WindowedStat(window_ms=1_000, samples=2)
    assert math.isnan(stat.avg(0))  # Kafka reports NaN with no sample
    assert math.isnan(stat.max(0))
    stat.record(10, 0)
    stat.record(30, 500)
    stat.record(2, 1_200)  # a second window
    assert stat.avg(1_500) == pytest.approx(14.0)
    assert stat.max(1_500) == 30
    # 2 windows of 1 s: the first one expires once 2 s passed since it started.
    assert stat.avg(2_100) == 2
    assert stat.max(2_100) == 2
    assert math.isnan(stat.avg(5_000))


def test_windowed_rate_counts_at_least_samples_minus_one_windows() -> None:
    stat = metric_stats.WindowedStat(window_ms=1_000, samples=2)
    assert stat.rate_per_s(0) == 0.0
    stat.record(50, 0)
    # Kafka's Rate: 0.2 s elapsed count as 0.2 s plus the (samples - 1) full windows missing.
    assert stat.rate_per_s(200) == pytest.approx(50 / 1.2)
    stat.record(50, 1_500)
    assert stat.rate_per_s(1_500) == pytest.approx(100 / 1.5)


def test_quantiles_interpolate_like_yammer() -> None:
    ordered = [float(v) for v in range(1, 101)]
    assert metric_stats.quantile(ordered, 0.5) == pytest.approx(50.5)
    assert metric_stats.quantile(ordered, 0.99) == pytest.approx(99.99)
    assert metric_stats.quantile(ordered, 0.999) == 100.0
    assert metric_stats.quantile([7.0], 0.5) == 7.0
    assert math.isnan(metric_stats.quantile([], 0.5))


# ----- Raft metrics on a real single-voter node -------------------------------------------------


class SingleVoter:
    """One voter quorum driven by hand, as the driver would: poll, (persist), advance."""

    def __init__(self) -> None:
        self.now_ms = 0
        self.node = RaftNode(
            node_id=1,
            voters=frozenset({1}),
            cluster_id="metrics-test",
            config=RaftConfig(),
            rng=random.Random(SEED),
            now_ms=0,
        )
        self.idle_s = 0.0
        self.metrics = raft_metrics.RaftMetrics(self.node, lambda: self.idle_s)
        self.readies: list[Ready] = []

    def turn(self, advance_ms: int = 50) -> Ready:
        self.now_ms += advance_ms
        ready = self.node.poll(self.now_ms)
        self.node.advance(ready)
        self.metrics.observe_ready(ready, self.now_ms)
        self.readies.append(ready)
        return ready

    def until(self, condition: object, turns_max: int = 400) -> None:
        for _ in range(turns_max):
            if callable(condition) and condition():
                return
            self.turn()
        raise AssertionError(f"seed {SEED}: condition not met within {turns_max} turns")


def test_raft_metrics_follow_a_real_node_through_election_and_commits() -> None:
    voter = SingleVoter()
    before = voter.metrics.read(voter.now_ms)
    assert before["current_leader"] == -1
    assert raft_metrics.kafka_state(voter.node) == "unattached"
    assert math.isnan(before["election_latency_avg"])

    voter.until(voter.node.is_leader)
    after = voter.metrics.read(voter.now_ms)
    assert raft_metrics.kafka_state(voter.node) == "leader"
    assert after["current_leader"] == 1
    assert after["current_vote"] == 1
    assert after["current_epoch"] >= 1
    # One election, from prospective to leader: a quorum of one decides it within one poll.
    assert after["election_latency_max"] == 0
    assert after["election_latency_avg"] == 0

    proposal = voter.node.propose([NoOpRecord()] * 5, voter.now_ms)
    voter.until(lambda: voter.node.high_watermark > proposal.last_offset)
    values = voter.metrics.read(voter.now_ms)
    assert values["high_watermark"] == voter.node.high_watermark
    assert values["log_end_offset"] == voter.node.log_end_offset
    assert values["append_records_rate"] > 0
    assert values["fetch_records_rate"] == 0  # a leader fetches nothing
    assert values["commit_latency_max"] >= 0
    assert not math.isnan(values["commit_latency_avg"])
    assert voter.metrics.last_applied_offset >= proposal.last_offset
    assert voter.metrics.last_applied_wall_ms > 0
    # The driver reports no idle time here: the loop never waited.
    assert values["poll_idle_ratio_avg"] == 0.0
    # KIP-853's: one voter, no observer, no voter change under way.
    assert values["log_end_epoch"] == voter.node.epoch
    assert (values["number_of_voters"], values["number_of_observers"]) == (1, 0)
    assert values["uncommitted_voter_change"] == 0
    assert values["number_unknown_voter_connections"] == 0
    unknown = raft_metrics.RaftMetrics(voter.node, lambda: 0.0, unknown_voters=lambda: 2)
    assert unknown.read(voter.now_ms)["number_unknown_voter_connections"] == 2


def test_poll_idle_ratio_is_the_share_of_time_spent_waiting() -> None:
    voter = SingleVoter()
    voter.turn()
    # The driver's idle counter moves by more than the wall time since the last turn could
    # hold: the ratio is capped at 1.
    voter.idle_s += 1_000.0
    voter.turn()
    assert voter.metrics.read(voter.now_ms)["poll_idle_ratio_avg"] == pytest.approx(0.5)


# ----- image counts -----------------------------------------------------------------------------


def build_image() -> tuple[MetadataImage, Uuid]:
    topic_id = Uuid.random()
    delta = MetadataDelta(MetadataImage.EMPTY)
    records = [
        RegisterBrokerRecord(
            broker_id=b,
            incarnation_id=Uuid.random(),
            broker_epoch=b - 1,  # the offset of its registration
            endpoints=(BrokerEndpoint("BROKER", "127.0.0.1", 9000 + b),),
            rack=None,
            fenced=False,
        )
        for b in (1, 2, 3)
    ]
    records += [
        FenceBrokerRecord(broker_id=3, broker_epoch=2),
        TopicRecord(name="orders", topic_id=topic_id),
        PartitionRecord(topic_id=topic_id, partition=0, replicas=(1, 2), isr=(1, 2), leader=1),
        PartitionRecord(topic_id=topic_id, partition=1, replicas=(3,), isr=(3,), leader=-1),
    ]
    for offset, record in enumerate(records):
        delta.replay(record, offset)
    return delta.apply(), topic_id


def test_image_counts_are_kafkas_controller_metadata_metrics() -> None:
    image, _ = build_image()
    counts = controller_metrics.image_counts(image)
    assert counts == controller_metrics.ImageCounts(
        topics=1, partitions=2, offline_partitions=1, active_brokers=2, fenced_brokers=1
    )


# ----- the snapshot from the loop, and the exposition -------------------------------------------


def test_scrape_reads_the_loop_snapshot_and_renders_every_family() -> None:
    voter = SingleVoter()
    voter.until(voter.node.is_leader)
    image, _ = build_image()
    registry = CollectorRegistry()
    metrics = m.NodeMetrics(node=voter.node, idle_s=lambda: 0.0, registry=registry)
    metrics.raft = voter.metrics
    controller = controller_metrics.ControllerMetrics()
    controller.observe_operation(2.0, 5.0)
    controller.observe_operation(4.0, 7.0)
    loop_threads: list[int] = []

    def read_controller() -> dict[str, object]:
        loop_threads.append(threading.get_ident())
        return {
            **controller.read(),
            "active": True,
            "committed_image": image,
            "last_committed_offset": 6,
            "metadata_errors": 0,
            "timed_out_heartbeats": 1,
            "new_active_controllers": 1,
        }

    metrics.add_source(
        read_controller,
        lambda data: controller_metrics.controller_families(controller, data, 10_000),
    )
    metrics.add_source(
        lambda: {"snapshot_generated_bytes": 123, "snapshot_generated_wall_ms": 4_000},
        lambda data: m.snapshot_families(data, 10_000),
    )

    async def scrape() -> bytes:
        metrics.loop_reader.attach(asyncio.get_running_loop())
        # prometheus_client's HTTP thread scrapes; the readers must run in the loop's thread
        return await asyncio.to_thread(generate_latest, registry)

    text = asyncio.run(scrape())
    assert loop_threads == [threading.get_ident()]
    values = samples(text)
    assert values[("kafka_server_raftmetrics_current_state", (("state", "leader"),))] == 1
    assert values[("kafka_server_raftmetrics_current_state", (("state", "follower"),))] == 0
    assert values[("kafka_server_raftmetrics_current_leader", ())] == 1
    prefix = "kafka_controller_kafkacontroller_"
    assert values[(prefix + "activecontrollercount", ())] == 1
    assert values[(prefix + "globaltopiccount", ())] == 1
    assert values[(prefix + "globalpartitioncount", ())] == 2
    assert values[(prefix + "offlinepartitionscount", ())] == 1
    assert values[(prefix + "fencedbrokercount", ())] == 1
    assert values[(prefix + "activebrokercount", ())] == 2
    assert values[(prefix + "lastappliedrecordoffset", ())] == image.offset
    assert values[(prefix + "timedoutbrokerheartbeatcount", ())] == 1
    queue = "kafka_controller_controllereventmanager_eventqueuetimems"
    assert values[(queue + "_count", ())] == 2
    assert values[(queue + "_sum", ())] == 6.0
    assert values[(queue, (("quantile", "0.5"),))] == pytest.approx(3.0)
    assert values[("kafka_server_snapshotemitter_latestsnapshotgeneratedbytes", ())] == 123
    assert values[("kafka_server_snapshotemitter_latestsnapshotgeneratedagems", ())] == 6_000
    assert values[("metaquorum_metrics_stale_snapshots_total", ())] == 0
    # Counters carry no _created series.
    assert b"_created" not in text


def test_a_busy_loop_gets_the_previous_snapshot_counted_as_stale() -> None:
    reads: list[int] = []

    def read() -> dict[str, object]:
        reads.append(1)
        return {"read": len(reads)}

    reader = m.LoopReader(read)
    reader.wait_s = 0.05

    async def main() -> tuple[object, object]:
        reader.attach(asyncio.get_running_loop())
        first = await asyncio.to_thread(reader.read)
        gave_up = threading.Event()
        second: list[object] = []

        def scrape() -> None:
            second.append(reader.read())
            gave_up.set()

        thread = threading.Thread(target=scrape)
        thread.start()
        # The loop is busy (this very wait holds it) until the scrape gave up on it.
        assert gave_up.wait(timeout=10)
        thread.join(timeout=10)
        return first, second[0]

    first, second = asyncio.run(main())
    assert first == {"read": 1}
    assert second == first  # the previous snapshot
    assert reader.stale == 1
    assert reads == [1]  # the late callback found the scrape gone and read nothing


def test_admin_responses_are_counted_by_request_and_entry_error_code() -> None:
    registry = CollectorRegistry()
    voter = SingleVoter()
    metrics = m.NodeMetrics(node=voter.node, idle_s=lambda: 0.0, registry=registry)
    response = admin_pb2.CreateTopicsResponse(error_code=0)
    response.topics.add(name="a", error_code=0)
    response.topics.add(name="b", error_code=36)  # TOPIC_ALREADY_EXISTS
    response.topics.add(name="c", error_code=36)
    grpc_metrics.count_admin_response(metrics.grpc, "CreateTopics", response)
    grpc_metrics.count_admin_response(
        metrics.grpc, "DescribeCluster", admin_pb2.DescribeClusterResponse(error_code=41)
    )
    values = samples(generate_latest(registry))
    requests = "metaquorum_admin_requests_total"
    results = "metaquorum_admin_results_total"
    assert values[(requests, (("error_code", "NONE"), ("rpc", "CreateTopics")))] == 1
    assert values[(requests, (("error_code", "NOT_CONTROLLER"), ("rpc", "DescribeCluster")))] == 1
    assert values[(results, (("error_code", "NONE"), ("rpc", "CreateTopics")))] == 1
    assert values[(results, (("error_code", "TOPIC_ALREADY_EXISTS"), ("rpc", "CreateTopics")))] == 2


def test_interceptor_times_calls_and_counts_aborted_admin_requests_by_status() -> None:
    """A real grpc.aio server with the interceptor: an answered CreateTopics counts its Kafka
    codes, an aborted one its gRPC status; both are timed."""
    registry = CollectorRegistry()
    voter = SingleVoter()
    metrics = m.NodeMetrics(node=voter.node, idle_s=lambda: 0.0, registry=registry)

    async def create_topics(request: Any, context: grpc.aio.ServicerContext) -> Any:
        if not request.topics:
            await context.abort(grpc.StatusCode.UNAVAILABLE, "shutting down")
        response = admin_pb2.CreateTopicsResponse()
        response.topics.add(name=request.topics[0].name, error_code=36)
        return response

    async def main() -> None:
        server = grpc.aio.server(interceptors=[grpc_metrics.GrpcMetricsInterceptor(metrics.grpc)])
        server.add_generic_rpc_handlers(
            (
                grpc.method_handlers_generic_handler(
                    "quorum.rpc.v1.AdminService",
                    {
                        "CreateTopics": grpc.unary_unary_rpc_method_handler(
                            create_topics,
                            request_deserializer=admin_pb2.CreateTopicsRequest.FromString,
                            response_serializer=admin_pb2.CreateTopicsResponse.SerializeToString,
                        )
                    },
                ),
            )
        )
        port = server.add_insecure_port("127.0.0.1:0")
        await server.start()
        try:
            async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
                call = channel.unary_unary(
                    "/quorum.rpc.v1.AdminService/CreateTopics",
                    request_serializer=admin_pb2.CreateTopicsRequest.SerializeToString,
                    response_deserializer=admin_pb2.CreateTopicsResponse.FromString,
                )
                request = admin_pb2.CreateTopicsRequest()
                request.topics.add(name="orders", num_partitions=1, replication_factor=1)
                answer = await call(request, timeout=5)
                assert answer.topics[0].error_code == 36
                with pytest.raises(grpc.aio.AioRpcError) as info:
                    await call(admin_pb2.CreateTopicsRequest(), timeout=5)
                assert info.value.code() == grpc.StatusCode.UNAVAILABLE
        finally:
            await server.stop(0)

    asyncio.run(main())
    values = samples(generate_latest(registry))
    requests = "metaquorum_admin_requests_total"
    assert values[(requests, (("error_code", "NONE"), ("rpc", "CreateTopics")))] == 1
    assert values[(requests, (("error_code", "UNAVAILABLE"), ("rpc", "CreateTopics")))] == 1
    results = (
        "metaquorum_admin_results_total",
        (("error_code", "TOPIC_ALREADY_EXISTS"), ("rpc", "CreateTopics")),
    )
    assert values[results] == 1
    timed = "metaquorum_grpc_server_handling_seconds_count"
    for code in ("OK", "UNAVAILABLE"):
        labels = (
            ("grpc_code", code),
            ("grpc_method", "CreateTopics"),
            ("grpc_service", "quorum.rpc.v1.AdminService"),
        )
        assert values[(timed, labels)] == 1
