"""``peers.py --peer kafka``: metaquorum side by side with Apache Kafka's own KRaft (issue 33).

How the numbers are taken. Both clusters run on this machine one after the other (never both at
once; Kafka first, then metaquorum, ``--repeat`` times), each as 3 controllers and 3 brokers on
127.0.0.1: three brokers because the workload creates topics with replication factor 3, which
needs three live brokers on both sides (the issue's cluster has two; with two, RF 3 cannot be
placed). Kafka 4.4.0 is started by ``quorum/kafka_peer.py`` from the jars ``scripts/kafka/fetch``
cached (``kafka.Kafka``, -Xms128m -Xmx512m, G1, Kafka's JVM flags; every other key at Kafka's
default). Both over mTLS on every listener from one CA with ACLs on (``--security plaintext``:
neither). Durability: metaquorum fsyncs every metadata batch before it counts toward the high
watermark; Kafka's KRaft does the same for ``__cluster_metadata`` (its Raft layer flushes the
metadata log itself; ``log.flush.*`` at their defaults only concern data partitions, of which
this workload has none). The one key changed on our side: ``quota.request.percentage.default``
100 (Kafka has no request quota by default; ours, 50 %, would hold the one client principal to
half of the listener thread).

The client is the same against both clusters' brokers: confluent-kafka (librdkafka) for every
admin call, and for the Metadata probes a raw Kafka-protocol connection per broker (Metadata v12
through kio, the codec our broker uses), because librdkafka cannot ask one chosen broker.

0. warm-up: the load of 2. for ``--warm-up-seconds`` (60), or until ``--warm-up-topics`` topics
   were created (so both clusters hold as many), not measured: the JVM compiles
   Kafka's hot paths during the first minutes (its compiler threads still took 8-10 ms of CPU
   per topic after 300 sequential topics). Both sides get it.
1. sequential CreateTopics: one AdminClient bootstrapped on every broker, one topic (1
   partition, RF 3) per request, waited for; ``--sequential`` requests after 200 more of
   warm-up.
2. ``--in-flight`` (64) CreateTopics in flight for ``--seconds``: 64 AdminClients, one thread
   each, bootstrapped round-robin on the brokers; each keeps one request outstanding (Kafka and
   metaquorum both answer the requests of one connection one at a time, so 64 in flight means
   64 connections). topics/s, p50/p99, CPU per topic of each node and of the client.
3. propagation: ``--propagation`` topics created one at a time; from the moment CreateTopics is
   acknowledged until every broker answers Metadata for the topic without error and with a
   leader for its partition (each broker polled in turn on its own connection).
4. failover: ``--failover-runs`` times each, kill -9 and then SIGTERM of the active controller;
   the clock runs from the signal to the first CreateTopics acknowledged through a broker. Eight
   AdminClients send attempts (a new topic each, 5 s timeout) whenever one is idle, at most every
   25 ms, so an attempt stuck on the dead controller does not hide a later one that would
   succeed. The node is restarted and the cluster settles (every voter and broker at the high
   watermark) before the next run.
5. idle: RSS of every node and its CPU over ``--idle-seconds`` without client traffic, on the
   fresh cluster before any load (a first window of the same length is let pass: Kafka's JIT
   is still compiling start-up code); and every node's RSS after the load.
6. ``--scale-partitions N`` (optional, off by default): topics of 100 partitions, RF 1 (Kafka's
   brokers open two index files per partition replica; RF 3 would be 3N), 50 topics per
   CreateTopics request (5,050 records: Kafka refuses one operation of over 10,000, and so does
   metaquorum's controller), one request at a time: partitions/s until the last one is
   acknowledged, then the largest controller's RSS, and the active controller's restart
   (SIGTERM -> a voter caught up to the high watermark again).

Ratios are metaquorum / Kafka of the medians; the floors of issue 33 are printed with them.

The data half (``--data``: after the metadata half, once, whatever ``--repeat`` says;
``--data-only``: alone) is ``peers_kafka_data.py``: produce and consume MB/s and kill -9 of a
leader broker, on fresh clusters of its own.
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import os
import signal
import socket
import ssl
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient, NewTopic
from kio.schema.describe_quorum.v2.request import DescribeQuorumRequest, PartitionData, TopicData
from kio.schema.metadata.v12.request import MetadataRequest, MetadataRequestTopic
from kio.schema.types import TopicName

from quorum.harness import ProcessCluster, cpu_seconds, process_cluster, resident_mib, wait_until
from quorum.kafka_peer import KAFKA_VERSION, KafkaCluster, kafka_cluster, kafka_missing
from quorum.kafka_wire import KafkaWire, tls_context

WARM_UP = 200
FAILOVER_CLIENTS = 8
FAILOVER_ATTEMPT_EVERY_S = 0.025
FAILOVER_ATTEMPT_TIMEOUT_S = 5.0
SCALE_TOPIC_PARTITIONS = 100
SCALE_TOPICS_PER_REQUEST = 50

# ----- a raw Kafka-protocol connection (quorum/kafka_wire.py), for asking one chosen node -----


def sees_topic(wire: KafkaWire, name: str) -> bool:
    answer = wire.ask(
        MetadataRequest(
            topics=(MetadataRequestTopic(topic_id=None, name=TopicName(name)),),
            allow_auto_topic_creation=False,
            include_topic_authorized_operations=False,
        )
    )
    (topic,) = answer.topics
    return (
        int(topic.error_code) == 0
        and bool(topic.partitions)
        and all(p.leader_id >= 0 for p in topic.partitions)
    )


# ----- the two clusters behind one interface -----------------------------------------------------


class Side:
    """What the benchmark needs of a running cluster of 3 controllers and 3 brokers."""

    name: str

    def brokers(self) -> list[str]:
        """The brokers' Kafka-protocol addresses."""
        raise NotImplementedError

    def client_config(self, bootstrap: str) -> dict[str, str]:
        raise NotImplementedError

    def tls(self) -> ssl.SSLContext | None:
        raise NotImplementedError

    def pids(self) -> dict[str, int]:
        """Every node's pid, by ``controller-N`` / ``broker-N``."""
        raise NotImplementedError

    def active_controller(self) -> int:
        raise NotImplementedError

    def signal(self, node_id: int, sig: int) -> None:
        raise NotImplementedError

    def restart(self, node_id: int) -> None:
        """Wait for the signalled node to exit, start it again, wait until it serves."""
        raise NotImplementedError

    def settle(self) -> None:
        """Until every voter and every broker has the leader's whole log."""
        raise NotImplementedError

    def controller_caught_up(self, node_id: int) -> bool:
        raise NotImplementedError


class MetaquorumSide(Side):
    name = "metaquorum"

    def __init__(self, cluster: ProcessCluster) -> None:
        self.cluster = cluster

    def brokers(self) -> list[str]:
        return [self.cluster.nodes[b].kafka_address("KAFKA") for b in self.cluster.broker_ids]

    def client_config(self, bootstrap: str) -> dict[str, str]:
        config = {"bootstrap.servers": bootstrap}
        if self.cluster.certs is not None:
            keystore = str(self.cluster.certs.client_keystore("admin"))
            config |= {
                "security.protocol": "SSL",
                "ssl.ca.location": str(self.cluster.certs.ca),
                "ssl.certificate.location": keystore,
                "ssl.key.location": keystore,
            }
        return config

    def tls(self) -> ssl.SSLContext | None:
        certs = self.cluster.certs
        return None if certs is None else tls_context(certs.ca, certs.client_keystore("admin"))

    def pids(self) -> dict[str, int]:
        return {
            f"{node.role}-{n}": node.process.pid
            for n, node in self.cluster.nodes.items()
            if node.process is not None
        }

    def active_controller(self) -> int:
        leader, _, _ = self.cluster.wait_for_leader()
        return int(leader)

    def signal(self, node_id: int, sig: int) -> None:
        process = self.cluster.nodes[node_id].process
        assert process is not None
        process.send_signal(sig)

    def restart(self, node_id: int) -> None:
        process = self.cluster.nodes[node_id].process
        assert process is not None
        process.wait(timeout=30)
        self.cluster.start(node_id)
        self.settle()

    def _describe_leader(self) -> Any:
        found = self.cluster.leader()
        return None if found is None else self.cluster.describe(found[0])

    def settle(self) -> None:
        def settled() -> bool:
            answer = self._describe_leader()
            if answer is None or answer.high_watermark <= 0:
                return False
            replicas = [*answer.current_voters, *answer.observers]
            return len(replicas) == len(self.cluster.nodes) and all(
                r.log_end_offset >= answer.high_watermark for r in replicas
            )

        wait_until(settled, 120, "metaquorum settled")

    def controller_caught_up(self, node_id: int) -> bool:
        answer = self._describe_leader()
        return answer is not None and any(
            v.replica_id == node_id and v.log_end_offset >= answer.high_watermark
            for v in answer.current_voters
        )


class KafkaSide(Side):
    name = "kafka"

    def __init__(self, cluster: KafkaCluster) -> None:
        self.cluster = cluster

    def brokers(self) -> list[str]:
        return [self.cluster.nodes[b].address for b in self.cluster.broker_ids]

    def client_config(self, bootstrap: str) -> dict[str, str]:
        return self.cluster.confluent_config(bootstrap)

    def tls(self) -> ssl.SSLContext | None:
        certs = self.cluster.certs
        return None if certs is None else tls_context(certs.ca, certs.client_keystore("admin"))

    def pids(self) -> dict[str, int]:
        return {
            f"{node.role}-{n}": node.pid for n, node in self.cluster.nodes.items() if node.alive
        }

    def active_controller(self) -> int:
        return self.cluster.wait_for_leader()[0]

    def signal(self, node_id: int, sig: int) -> None:
        process = self.cluster.nodes[node_id].process
        assert process is not None
        process.send_signal(sig)

    def restart(self, node_id: int) -> None:
        process = self.cluster.nodes[node_id].process
        assert process is not None
        process.wait(timeout=60)
        self.cluster.start(node_id)
        self.cluster.wait_started(node_id)
        self.settle()

    def _describe(self) -> Any:
        """DescribeQuorum (v2) from a live controller, over the controller listener."""
        for node_id in self.cluster.controller_ids:
            node = self.cluster.nodes[node_id]
            if not node.alive:
                continue
            try:
                wire = KafkaWire(node.address, self.tls())
            except OSError:
                continue
            try:
                answer = wire.ask(
                    DescribeQuorumRequest(
                        topics=(
                            TopicData(
                                topic_name=TopicName("__cluster_metadata"),
                                partitions=(PartitionData(partition_index=0),),
                            ),
                        )
                    )
                )
            except (OSError, ConnectionError):
                continue
            finally:
                wire.close()
            if int(answer.error_code) == 0 and answer.topics:
                partition = answer.topics[0].partitions[0]
                if int(partition.error_code) == 0 and partition.leader_id >= 0:
                    return partition
        return None

    def settle(self) -> None:
        def settled() -> bool:
            partition = self._describe()
            if partition is None or partition.high_watermark <= 0:
                return False
            replicas = [*partition.current_voters, *partition.observers]
            return len(replicas) == len(self.cluster.nodes) and all(
                r.log_end_offset >= partition.high_watermark for r in replicas
            )

        wait_until(settled, 120, "Kafka settled", interval_s=0.1)

    def controller_caught_up(self, node_id: int) -> bool:
        partition = self._describe()
        return partition is not None and any(
            v.replica_id == node_id and v.log_end_offset >= partition.high_watermark
            for v in partition.current_voters
        )


# ----- the measurements -------------------------------------------------------------------------


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


def create(admin: AdminClient, name: str, timeout_s: float = 30, partitions: int = 1,
           rf: int = 3, attempts: int = 3) -> None:  # fmt: skip
    """Create one topic, waited for; a timeout is tried again (``attempts`` in all): after a
    restart a cluster may leave the first request of a client unanswered (Kafka's brokers did,
    once, between two failover runs), and the measurements are not about that."""
    for attempt in range(attempts):
        futures = admin.create_topics(
            [NewTopic(name, num_partitions=partitions, replication_factor=rf)],
            request_timeout=timeout_s,
        )
        try:
            futures[name].result(timeout=timeout_s + 5)
            return
        except KafkaException as exc:
            error = exc.args[0] if exc.args else None
            if getattr(error, "code", lambda: None)() == KafkaError.TOPIC_ALREADY_EXISTS:
                return  # the timed-out attempt went through after all
            if attempt == attempts - 1 or getattr(error, "code", lambda: None)() not in (
                KafkaError._TIMED_OUT,
                KafkaError.REQUEST_TIMED_OUT,
            ):
                raise


def sequential(side: Side, count: int, run: int) -> list[float]:
    admin = AdminClient(side.client_config(",".join(side.brokers())))
    for i in range(WARM_UP):
        create(admin, f"warm-{run}-{i}")
    latencies = []
    for i in range(count):
        started = time.perf_counter()
        create(admin, f"seq-{run}-{i}")
        latencies.append(time.perf_counter() - started)
    return latencies


def in_flight(
    side: Side, depth: int, seconds: float, run: int | str, limit: int | None = None
) -> tuple[list[float], float, dict[str, float]]:
    """``depth`` clients, one request outstanding each, for ``seconds`` (or until ``limit``
    topics were created, if given): the latencies, the client process's CPU seconds and every
    node's over the window."""
    brokers = side.brokers()
    admins = [AdminClient(side.client_config(brokers[i % len(brokers)])) for i in range(depth)]
    for i, admin in enumerate(admins):  # connected and warm before the window
        create(admin, f"load-warm-{run}-{i}")
    latencies: list[list[float]] = [[] for _ in admins]
    start = threading.Barrier(depth + 1)
    deadline = [0.0]
    errors: list[BaseException] = []

    created = itertools.count(1)

    def worker(number: int) -> None:
        start.wait()
        i = 0
        try:
            while time.perf_counter() < deadline[0]:
                if limit is not None and next(created) > limit:
                    break
                began = time.perf_counter()
                create(admins[number], f"load-{run}-{number}-{i}")
                latencies[number].append(time.perf_counter() - began)
                i += 1
        except BaseException as exc:  # reported after the window
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(n,)) for n in range(depth)]
    for thread in threads:
        thread.start()
    pids = side.pids()
    nodes_before = {name: cpu_seconds(pid) for name, pid in pids.items()}
    cpu_before = sum(os.times()[:2])
    deadline[0] = time.perf_counter() + seconds
    start.wait()
    for thread in threads:
        thread.join()
    client_cpu = sum(os.times()[:2]) - cpu_before
    nodes = {name: cpu_seconds(pid) - nodes_before[name] for name, pid in pids.items()}
    if errors:
        raise RuntimeError(f"{side.name}: {len(errors)} clients failed: {errors[0]!r}")
    return [lat for per in latencies for lat in per], client_cpu, nodes


def propagation(side: Side, count: int, run: int) -> list[float]:
    admin = AdminClient(side.client_config(",".join(side.brokers())))
    context = side.tls()
    wires = [KafkaWire(address, context) for address in side.brokers()]
    results = []
    try:
        for i in range(count):
            name = f"prop-{run}-{i}"
            create(admin, name)
            acknowledged = time.perf_counter()
            pending = list(wires)
            while pending:
                if time.perf_counter() - acknowledged > 30:
                    raise RuntimeError(f"{side.name}: {name} not on every broker after 30 s")
                pending = [w for w in pending if not sees_topic(w, name)]
            results.append(time.perf_counter() - acknowledged)
    finally:
        for wire in wires:
            wire.close()
    return results


class Attempts:
    """CreateTopics attempts from a pool of clients, each client one attempt at a time; the
    moment the first one is acknowledged."""

    def __init__(self, admins: list[AdminClient]) -> None:
        self.admins = admins
        self.busy = [False] * len(admins)
        self.lock = threading.Lock()
        self.acknowledged = threading.Event()
        self.first_ok: float | None = None

    def _finished(self, future: Any, client: int) -> None:
        now = time.monotonic()
        with self.lock:
            self.busy[client] = False
            if future.exception() is None and self.first_ok is None:
                self.first_ok = now
                self.acknowledged.set()

    def try_one(self, name: str) -> None:
        """Send a CreateTopics of ``name`` from an idle client, if one is idle."""
        with self.lock:
            client = next((c for c, b in enumerate(self.busy) if not b), None)
            if client is None:
                return
            self.busy[client] = True
        future = self.admins[client].create_topics(
            [NewTopic(name, num_partitions=1, replication_factor=3)],
            request_timeout=FAILOVER_ATTEMPT_TIMEOUT_S,
        )[name]
        future.add_done_callback(lambda f: self._finished(f, client))


def failover(side: Side, sig: int, runs: int, run: int, label: str) -> list[float]:
    brokers = side.brokers()
    results = []
    for attempt in range(runs):
        side.settle()
        admins = [AdminClient(side.client_config(brokers[i % len(brokers)]))
                  for i in range(FAILOVER_CLIENTS)]  # fmt: skip
        for i, admin in enumerate(admins):
            create(admin, f"fo-warm-{label}-{run}-{attempt}-{i}")
        attempts = Attempts(admins)
        leader = side.active_controller()
        side.signal(leader, sig)
        started = time.monotonic()
        number = 0
        while not attempts.acknowledged.wait(FAILOVER_ATTEMPT_EVERY_S):
            if time.monotonic() - started > 60:
                raise RuntimeError(f"{side.name}: no CreateTopics acknowledged 60 s after {label}")
            number += 1
            attempts.try_one(f"fo-{label}-{run}-{attempt}-{number}")
        assert attempts.first_ok is not None
        results.append(attempts.first_ok - started)
        side.restart(leader)
    return results


def idle(side: Side, seconds: float) -> tuple[dict[str, float], dict[str, float]]:
    """RSS (MiB) and CPU (% of one core) of every node over ``seconds`` without traffic."""
    side.settle()
    pids = side.pids()
    before = {name: cpu_seconds(pid) for name, pid in pids.items()}
    began = time.monotonic()
    time.sleep(seconds)  # a measurement window, not synchronisation: nothing happens meanwhile
    took = time.monotonic() - began
    cpu = {name: (cpu_seconds(pid) - before[name]) / took * 100 for name, pid in pids.items()}
    rss = {name: resident_mib(pid) for name, pid in pids.items()}
    return rss, cpu


def scale(side: Side, partitions: int, run: int) -> dict[str, float]:
    if isinstance(side, KafkaSide):
        # Kafka maps a partition's offset and time indexes: two map areas per replica.
        per_broker = partitions // len(side.brokers())
        limit = int(Path("/proc/sys/vm/max_map_count").read_text())
        if limit < 2 * per_broker + 20_000:
            raise RuntimeError(
                f"vm.max_map_count is {limit}: Kafka's brokers need about "
                f"{2 * per_broker + 20_000:,} for {per_broker:,} partitions each "
                "(sysctl -w vm.max_map_count=262144)"
            )
    admin = AdminClient(side.client_config(",".join(side.brokers())))
    topics = partitions // SCALE_TOPIC_PARTITIONS
    names = [f"scale-{run}-{i}" for i in range(topics)]
    started = time.perf_counter()
    for first in range(0, topics, SCALE_TOPICS_PER_REQUEST):
        batch = names[first : first + SCALE_TOPICS_PER_REQUEST]
        futures = admin.create_topics(
            [NewTopic(n, num_partitions=SCALE_TOPIC_PARTITIONS, replication_factor=1)
             for n in batch],
            request_timeout=120,
        )  # fmt: skip
        for future in futures.values():
            future.result(timeout=130)
    took = time.perf_counter() - started
    side.settle()
    pids = side.pids()
    controller_rss = max(resident_mib(p) for n, p in pids.items() if n.startswith("controller"))
    leader = side.active_controller()
    side.signal(leader, signal.SIGTERM)
    restarted = time.monotonic()
    side.restart(leader)  # waits for its exit, starts it, waits until it serves and settled
    wait_until(lambda: side.controller_caught_up(leader), 300, "the restarted controller")
    return {
        "partitions/s": topics * SCALE_TOPIC_PARTITIONS / took,
        "controller RSS MiB (largest)": controller_rss,
        "controller restart s": time.monotonic() - restarted,
    }


@dataclass
class Figures:
    values: dict[str, list[float]] = field(default_factory=dict)

    def add(self, name: str, value: float) -> None:
        self.values.setdefault(name, []).append(value)


def measure(side: Side, args: argparse.Namespace, run: int, figures: Figures) -> None:
    def say(text: str) -> None:
        print(f"  {side.name}: {text}", flush=True)

    side.settle()
    if args.idle_seconds:
        # Idle: the fresh cluster, before any load (after the load, brokers still create the
        # partitions of tens of thousands of topics for a while, and that is not idling).
        idle(side, args.idle_seconds)  # the first window lets start-up work (JIT) finish
        rss, cpu = idle(side, args.idle_seconds)
        figures.add(
            "idle RSS MiB, largest controller",
            max(v for n, v in rss.items() if n.startswith("controller")),
        )
        figures.add(
            "idle RSS MiB, largest broker", max(v for n, v in rss.items() if n.startswith("broker"))
        )
        figures.add("idle RSS MiB, largest node", max(rss.values()))
        figures.add("idle CPU % of a core, all nodes", sum(cpu.values()))
        figures.add("idle CPU % of a core, busiest node", max(cpu.values()))
        say("idle RSS MiB " + ", ".join(f"{n} {v:.0f}" for n, v in sorted(rss.items())))
        say("idle CPU % " + ", ".join(f"{n} {v:.1f}" for n, v in sorted(cpu.items())))
    if args.warm_up_seconds:
        # The JVM compiles Kafka's hot paths during the first minutes of load (its compiler
        # threads took 8-10 ms of CPU per topic after 300 sequential topics); both sides get
        # the same warm-up: the in-flight load for this long, not measured.
        lat, _, _ = in_flight(
            side, args.in_flight, args.warm_up_seconds, f"w{run}", limit=args.warm_up_topics
        )
        say(f"warm-up: {len(lat):,} topics in at most {args.warm_up_seconds:.0f} s, not measured")
    if args.sequential:
        lat = sequential(side, args.sequential, run)
        figures.add("CreateTopics sequential p50 ms", statistics.median(lat) * 1000)
        figures.add("CreateTopics sequential p99 ms", percentile(lat, 0.99) * 1000)
        say(f"sequential p50 {statistics.median(lat) * 1000:.2f} ms, "
            f"p99 {percentile(lat, 0.99) * 1000:.2f} ms")  # fmt: skip
    if args.seconds:
        side.settle()
        lat, client_cpu, node_cpu = in_flight(side, args.in_flight, args.seconds, run)
        node_us = {n: v / len(lat) * 1e6 for n, v in node_cpu.items()}
        rate = len(lat) / args.seconds
        figures.add(f"topics/s, {args.in_flight} in flight", rate)
        figures.add("in-flight p50 ms", statistics.median(lat) * 1000)
        figures.add("in-flight p99 ms", percentile(lat, 0.99) * 1000)
        figures.add("CPU us/topic, all nodes", sum(node_us.values()))
        figures.add(
            "CPU us/topic, busiest controller",
            max(v for n, v in node_us.items() if n.startswith("controller")),
        )
        figures.add(
            "CPU us/topic, busiest broker",
            max(v for n, v in node_us.items() if n.startswith("broker")),
        )
        figures.add("CPU us/topic, client", client_cpu / len(lat) * 1e6)
        say(f"{args.in_flight} in flight: {rate:,.0f} topics/s, p50 "
            f"{statistics.median(lat) * 1000:.1f} ms, p99 {percentile(lat, 0.99) * 1000:.1f} ms; "
            f"CPU us/topic {', '.join(f'{n} {v:.0f}' for n, v in sorted(node_us.items()))}, "
            f"client {client_cpu / len(lat) * 1e6:.0f}")  # fmt: skip
    if args.propagation:
        side.settle()
        lat = propagation(side, args.propagation, run)
        figures.add("propagation to every broker p50 ms", statistics.median(lat) * 1000)
        figures.add("propagation to every broker p99 ms", percentile(lat, 0.99) * 1000)
        say(f"propagation p50 {statistics.median(lat) * 1000:.1f} ms, "
            f"p99 {percentile(lat, 0.99) * 1000:.1f} ms, max {max(lat) * 1000:.1f} ms")  # fmt: skip
    if args.failover_runs:
        for sig, label in ((signal.SIGKILL, "kill -9"), (signal.SIGTERM, "SIGTERM")):
            times = failover(side, sig, args.failover_runs, run, label.replace(" ", ""))
            figures.add(f"{label} controller -> next CreateTopics median ms",
                        statistics.median(times) * 1000)  # fmt: skip
            say(f"{label} of the active controller -> next acknowledged CreateTopics (ms): "
                f"{', '.join(f'{t * 1000:.0f}' for t in times)}")  # fmt: skip
    side.settle()
    after = {name: resident_mib(pid) for name, pid in side.pids().items()}
    figures.add("RSS MiB after the load, largest controller",
                max(v for n, v in after.items() if n.startswith("controller")))  # fmt: skip
    figures.add("RSS MiB after the load, largest broker",
                max(v for n, v in after.items() if n.startswith("broker")))  # fmt: skip
    say("RSS MiB after the load " + ", ".join(f"{n} {v:.0f}" for n, v in sorted(after.items())))
    if args.scale_partitions:
        result = scale(side, args.scale_partitions, run)
        for name, value in result.items():
            figures.add(f"{args.scale_partitions:,} partitions: {name}", value)
        say(", ".join(f"{n} {v:,.1f}" for n, v in result.items()))


# figure -> (floor on metaquorum / Kafka, whether higher is better)
FLOORS = {
    "topics/s, 64 in flight": (0.8, True),
    "CreateTopics sequential p50 ms": (1.5, False),
    "kill -9 controller -> next CreateTopics median ms": (1.0, False),
    "propagation to every broker p99 ms": (1.5, False),
    "idle RSS MiB, largest node": (0.5, False),
}


def spread(values: list[float]) -> str:
    if len(values) == 1:
        return f"{values[0]:,.2f}"
    return f"{min(values):,.2f} / {statistics.median(values):,.2f} / {max(values):,.2f}"


@contextlib.contextmanager
def metaquorum_side(root: Path, security: str) -> Iterator[MetaquorumSide]:
    with process_cluster(
        root,
        brokers=3,
        kafka_listeners={"KAFKA": "SSL" if security == "ssl" else "PLAINTEXT"},
        security=security,
        broker_settings={"quota.request.percentage.default": 100},
    ) as cluster:
        cluster.format()
        cluster.start_all()
        cluster.wait_for_leader(timeout_s=30)
        side = MetaquorumSide(cluster)
        for address in side.brokers():
            wait_until(lambda a=address: _listening(a), 60, f"Kafka listener {address}")
        with cluster.admin() as admin:
            wait_until(
                lambda: sum(not b.is_fenced for b in admin.describe_cluster().brokers) == 3,
                60,
                "three brokers unfenced",
            )
        yield side


def _listening(address: str) -> bool:
    host, port = address.rsplit(":", 1)
    try:
        socket.create_connection((host, int(port)), timeout=0.5).close()
    except OSError:
        return False
    return True


def kafka_main(args: argparse.Namespace) -> int:
    missing = kafka_missing()
    if missing is not None and args.only != "mq":
        print(f"peers.py --peer kafka: {missing}", file=sys.stderr)
        return 1
    import confluent_kafka  # noqa: PLC0415

    if args.data_only:
        from peers_kafka_data import data_main  # noqa: PLC0415 - the data half (issue 33)

        return data_main(args)

    print(f"machine: {os.cpu_count()} cores, load {os.getloadavg()[0]:.1f}; python "
          f"{sys.version.split()[0]}; confluent-kafka {confluent_kafka.version()} (librdkafka "
          f"{confluent_kafka.libversion()[0]}); Apache Kafka {KAFKA_VERSION}; security "
          f"{args.security}", flush=True)  # fmt: skip
    results = {"metaquorum": Figures(), "kafka": Figures()}
    for run in range(args.repeat):
        print(f"run {run + 1} of {args.repeat}", flush=True)
        if args.only != "mq":
            with tempfile.TemporaryDirectory(prefix="peers-kafka-") as tmp:
                started = time.monotonic()
                with kafka_cluster(Path(tmp), brokers=3, security=args.security) as cluster:
                    print(f"  kafka: 3 controllers + 3 brokers ready in "
                          f"{time.monotonic() - started:.1f} s; load average "
                          f"{os.getloadavg()[0]:.1f}", flush=True)  # fmt: skip
                    measure(KafkaSide(cluster), args, run, results["kafka"])
        if args.only != "kafka":
            with tempfile.TemporaryDirectory(prefix="peers-mq-") as tmp:
                started = time.monotonic()
                with metaquorum_side(Path(tmp), args.security) as side:
                    print(f"  metaquorum: 3 controllers + 3 brokers ready in "
                          f"{time.monotonic() - started:.1f} s; load average "
                          f"{os.getloadavg()[0]:.1f}", flush=True)  # fmt: skip
                    measure(side, args, run, results["metaquorum"])
    print()
    print(f"{'figure':52} {'metaquorum':>24} {'Kafka ' + KAFKA_VERSION:>24} {'ratio':>8} "
          f"{'floor':>8}")  # fmt: skip
    names = list(results["kafka"].values) or list(results["metaquorum"].values)
    for name in names:
        ours = results["metaquorum"].values.get(name, [])
        theirs = results["kafka"].values.get(name, [])
        ratio = floor = ""
        if ours and theirs and statistics.median(theirs):
            value = statistics.median(ours) / statistics.median(theirs)
            ratio = f"{value:.2f}x"
            if name in FLOORS:
                limit, higher = FLOORS[name]
                met = value >= limit if higher else value <= limit
                floor = f"{'>=' if higher else '<='}{limit}x {'met' if met else 'MISSED'}"
        print(f"{name:52} {spread(ours) if ours else '-':>24} "
              f"{spread(theirs) if theirs else '-':>24} {ratio:>8} {floor:>8}")  # fmt: skip
    print(
        "ratio = metaquorum / Kafka of the medians; higher is better only for topics/s and "
        "partitions/s"
    )
    if args.data:
        from peers_kafka_data import data_main  # noqa: PLC0415 - the data half (issue 33)

        print()
        return data_main(args)
    return 0
