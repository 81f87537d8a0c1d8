#!/usr/bin/env python3
"""The data plane's throughput and latency with confluent-kafka against one broker
(docs/kafka-listener.md#the-data-plane), beside this machine's limits measured in the same run.

How the numbers are taken: three controllers and one broker are started through the CLI in a
temporary directory (mTLS and ACLs on, as deployed; ``--security plaintext`` for neither), the
broker with one Kafka listener. A topic of ``--partitions`` partitions (default 1) and
replication factor 1 is created with confluent-kafka's AdminClient for each run. Records are
1,000-byte values with no key and no headers (as Kafka's ``kafka-producer-perf-test
--record-size 1000``), taken in turn from a pool of 1,000 random values made once; a MB is
10^6 bytes of values. The clients run in this process:

1. The machine's limits, first: the loopback copy rate (one thread sends 1 MiB buffers through
   a connected TCP socket pair on 127.0.0.1, another receives them into one buffer, 512 MiB),
   and the sequential write rate of the log dir's file system (1 MiB writes of 512 MiB, then
   one fsync, counted to the fsync's end; also without the fsync: the page cache's rate, which
   is what an acks=1 append waits for, since the broker leaves flushing to the kernel as Kafka
   does).
2. Produce throughput, acks=1 and then acks=all: one Producer (``linger.ms`` 5,
   ``batch.size`` 1 MB, idempotence off) produces ``--records`` records as fast as its queue
   takes them; the rate is the records over the time from the first produce to the end of
   ``flush()``. Latency of each record: from ``produce()`` to its delivery callback (what
   Kafka's perf tool reports), at this saturating rate.
3. Produce latency at half the maximum rate: the same producer, acks=1 (and acks=all), paced
   to half the acks=1 rate of step 2 for ``--seconds``: each millisecond it produces the
   records due by then. p50 / p99 / max of the same produce-to-callback latency. This process
   does no cyclic garbage collection while it paces: its full collections (of the pending
   callbacks' closures) took 300-400 ms late in a 10 s run and showed as a p99 of that size,
   which was the client's pause, not the broker's.
4. Consume throughput: one Consumer (``assign``, no group, ``fetch.max.bytes`` and
   ``max.partition.fetch.bytes`` 8 MiB) reads the acks=1 run's records from offset 0 to the end;
   the rate is the records over the time from ``assign`` to the last one, values' bytes
   counted, nothing else done per record.

Beside each run: the CPU seconds of the broker (user and system, its minor page faults and
its peak resident set so far, from /proc) and of this client process, so a reader can tell
who ran out of CPU on the 2 shared cores, and the load average before and after (other work
on the machine moves every figure). Floors from the issue on 2 cores:
produce >= 50 MB/s, consume >= 150 MB/s, acks=1 p99 <= 20 ms at half the maximum rate; the
goal is within 2x of the disk's fsync'd limit. The script exits 0 either way and prints which
held.

5. Replication (``--replication``, instead of 1-4; docs/replication.md): three brokers, a topic of
   replication factor 3 (``min.insync.replicas`` 2). Produce throughput with acks=all as in
   step 2 (floor >= 30 MB/s on 2 cores), through all three brokers. Then failover: a producer
   paced to 1,000 records/s with acks=all (``message.timeout.ms`` 60 s), kill -9 of the
   partition's leader, and the time from the kill to the first acknowledgement of a record
   produced after it (floor <= ``broker.session.timeout.ms`` + 1 s = 10 s with Kafka's
   defaults; goal <= 1 s), and from the new leader's election (as the controller's metadata
   shows it, polled every 50 ms) to that acknowledgement.

Usage: .venv/bin/python scripts/bench/data_plane.py [--records 300000] [--seconds 10]
       [--partitions 1] [--security ssl|plaintext] [--replication]
"""

from __future__ import annotations

import argparse
import gc
import os
import random
import signal
import socket
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from quorum.admin import TopicCollection
from quorum.harness import ProcessCluster, process_cluster, wait_until

RECORD_BYTES = 1_000
MIB = 1 << 20
LIMIT_BYTES = 512 * MIB
FLOOR_PRODUCE_MBS = 50.0
FLOOR_CONSUME_MBS = 150.0
FLOOR_P99_MS = 20.0


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))] if ordered else 0.0


def load() -> str:
    one, five, _ = os.getloadavg()
    return f"load average {one:.1f} (5 min {five:.1f})"


# ----- the machine's limits ------------------------------------------------------------------


def loopback_rate() -> float:
    """MB/s through one TCP connection on 127.0.0.1, a sender and a receiver thread."""
    listener = socket.create_server(("127.0.0.1", 0))
    sender = socket.create_connection(listener.getsockname())
    receiver, _ = listener.accept()
    listener.close()
    chunk = os.urandom(MIB)

    def send() -> None:
        for _ in range(LIMIT_BYTES // MIB):
            sender.sendall(chunk)
        sender.shutdown(socket.SHUT_WR)

    buffer = bytearray(MIB)
    view = memoryview(buffer)
    received = 0
    started = time.perf_counter()
    thread = threading.Thread(target=send)
    thread.start()
    while (n := receiver.recv_into(view)) > 0:
        received += n
    elapsed = time.perf_counter() - started
    thread.join()
    sender.close()
    receiver.close()
    assert received == LIMIT_BYTES
    return received / elapsed / 1e6


def disk_rates(directory: Path) -> tuple[float, float]:
    """MB/s of 1 MiB sequential writes in ``directory``: (to the page cache, to the fsync's
    end)."""
    chunk = os.urandom(MIB)
    path = directory / f"disk-rate-{uuid.uuid4().hex}.bin"
    try:
        descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            started = time.perf_counter()
            for _ in range(LIMIT_BYTES // MIB):
                os.write(descriptor, chunk)
            written = time.perf_counter() - started
            os.fsync(descriptor)
            synced = time.perf_counter() - started
        finally:
            os.close(descriptor)
    finally:
        path.unlink(missing_ok=True)
    return LIMIT_BYTES / written / 1e6, LIMIT_BYTES / synced / 1e6


# ----- CPU ---------------------------------------------------------------------------------


def cpu_seconds(pid: int) -> tuple[float, float, int]:
    """User and system CPU seconds of process ``pid`` (its threads included), and its minor
    page faults."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    tick = os.sysconf("SC_CLK_TCK")
    return int(fields[11]) / tick, int(fields[12]) / tick, int(fields[7])


def peak_rss_mib(pid: int) -> float:
    """The largest resident set process ``pid`` has had (VmHWM), MiB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return 0.0


class CpuMeter:
    def __init__(self, broker_pid: int) -> None:
        self.broker_pid = broker_pid
        self.broker = cpu_seconds(broker_pid)
        times = os.times()
        self.client = times.user + times.system

    def __str__(self) -> str:
        times = os.times()
        user, system, faults = cpu_seconds(self.broker_pid)
        return (
            f"CPU broker {user - self.broker[0]:.1f} s user + {system - self.broker[1]:.1f} s"
            f" system ({faults - self.broker[2]:,} page faults, peak RSS so far"
            f" {peak_rss_mib(self.broker_pid):.0f} MiB),"
            f" client {times.user + times.system - self.client:.1f} s"
        )


# ----- the runs ----------------------------------------------------------------------------


class Bench:
    def __init__(
        self, cluster: ProcessCluster, security: str, partitions: int, replication_factor: int = 1
    ) -> None:
        self.cluster = cluster
        self.partitions = partitions
        self.replication_factor = replication_factor
        brokers = [n for n, node in cluster.nodes.items() if node.role == "broker"]
        address = ",".join(cluster.nodes[b].kafka_address("KAFKA") for b in brokers)
        self.settings: dict[str, Any] = {"bootstrap.servers": address}
        if security == "ssl":
            assert cluster.certs is not None
            keystore = str(cluster.certs.client_keystore("admin"))
            self.settings |= {
                "security.protocol": "SSL",
                "ssl.ca.location": str(cluster.certs.ca),
                "ssl.certificate.location": keystore,
                "ssl.key.location": keystore,
            }
        rng = random.Random(1)
        self.values = [rng.randbytes(RECORD_BYTES) for _ in range(1_000)]
        process = cluster.nodes[101].process
        assert process is not None
        self.broker_pid = process.pid

    def topic(self, name: str) -> str:
        admin = AdminClient(self.settings)
        configs = {"min.insync.replicas": "2"} if self.replication_factor > 1 else {}
        topic = NewTopic(name, self.partitions, self.replication_factor, config=configs)
        for future in admin.create_topics([topic]).values():
            future.result(timeout=30)
        producer = Producer(self.settings)
        wait_until(
            lambda: (
                name in producer.list_topics(timeout=5).topics
                and not producer.list_topics(name, timeout=5).topics[name].error
            ),
            30,
            f"{name} in the broker's metadata",
        )
        return name

    def producer(self, acks: str) -> Producer:
        return Producer(
            {
                **self.settings,
                "acks": acks,
                "linger.ms": 5,
                "batch.size": 1_000_000,
                "enable.idempotence": False,
                "queue.buffering.max.kbytes": 256 * 1024,
                "queue.buffering.max.messages": 500_000,
            }
        )

    def produce_max(self, acks: str, count: int) -> tuple[str, float, list[float]]:
        """Produce ``count`` records as fast as the producer takes them: (topic, records/s,
        latencies in ms)."""
        topic = self.topic(f"max-acks-{acks}-{uuid.uuid4().hex[:6]}")
        producer = self.producer(acks)
        latencies: list[float] = []
        errors: list[Any] = []
        values = self.values
        perf = time.perf_counter

        def callback(sent: float) -> Any:
            def delivered(error: Any, _message: Any) -> None:
                if error is not None:
                    errors.append(error)
                latencies.append((perf() - sent) * 1000)

            return delivered

        cpu = CpuMeter(self.broker_pid)
        started = perf()
        for index in range(count):
            while True:
                try:
                    producer.produce(
                        topic,
                        value=values[index % 1_000],
                        partition=index % self.partitions,
                        on_delivery=callback(perf()),
                    )
                    break
                except BufferError:
                    producer.poll(0.005)
            if index % 500 == 0:
                producer.poll(0)
        remaining = producer.flush(120)
        elapsed = perf() - started
        assert remaining == 0 and not errors, (remaining, errors[:3])
        rate = count / elapsed
        print(
            f"  produce acks={acks:<3} max rate     {rate * RECORD_BYTES / 1e6:7.1f} MB/s"
            f" {rate:9,.0f} records/s   latency p50 {percentile(latencies, 0.5):6.1f} ms"
            f" p99 {percentile(latencies, 0.99):6.1f} ms   ({count:,} records,"
            f" {elapsed:.1f} s; {cpu})",
            flush=True,
        )
        return topic, rate, latencies

    def produce_paced(self, acks: str, rate: float, seconds: float) -> list[float]:
        """Produce at ``rate`` records/s for ``seconds``: produce-to-callback latencies, ms."""
        topic = self.topic(f"paced-acks-{acks}-{uuid.uuid4().hex[:6]}")
        producer = self.producer(acks)
        latencies: list[float] = []
        errors: list[Any] = []
        values = self.values
        perf = time.perf_counter

        def callback(sent: float) -> Any:
            def delivered(error: Any, _message: Any) -> None:
                if error is not None:
                    errors.append(error)
                latencies.append((perf() - sent) * 1000)

            return delivered

        cpu = CpuMeter(self.broker_pid)
        # The client's own pauses are not the broker's latency: no cyclic garbage collection in
        # this process while it measures (its closures and lists would make full collections
        # longer as the run goes on).
        gc.collect()
        gc.disable()
        started = perf()
        sent = 0
        while (now := perf()) - started < seconds:
            due = int((now - started) * rate)
            while sent < due:
                producer.produce(
                    topic,
                    value=values[sent % 1_000],
                    partition=sent % self.partitions,
                    on_delivery=callback(perf()),
                )
                sent += 1
            producer.poll(0)
            pause = started + (sent + 1) / rate - perf()
            if pause > 0:
                time.sleep(min(pause, 0.001))  # pacing, not synchronisation
        assert producer.flush(60) == 0 and not errors, errors[:3]
        achieved = sent / (perf() - started)
        gc.enable()
        print(
            f"  produce acks={acks:<3} at {achieved:9,.0f} records/s"
            f" ({achieved * RECORD_BYTES / 1e6:5.1f} MB/s)  latency p50"
            f" {percentile(latencies, 0.5):6.2f} ms p99 {percentile(latencies, 0.99):6.2f} ms"
            f" max {max(latencies):7.2f} ms   ({sent:,} records, {seconds:.0f} s; {cpu})",
            flush=True,
        )
        return latencies

    def consume(self, topic: str, count: int) -> float:
        """Read ``count`` records of ``topic`` from offset 0: records/s."""
        consumer = Consumer(
            {
                **self.settings,
                "group.id": f"bench-{uuid.uuid4()}",
                "enable.auto.commit": False,
                "enable.auto.offset.store": False,
                "fetch.max.bytes": 8 * MIB,
                "max.partition.fetch.bytes": 8 * MIB,
            }
        )
        cpu = CpuMeter(self.broker_pid)
        started = time.perf_counter()
        consumer.assign([TopicPartition(topic, p, 0) for p in range(self.partitions)])
        read = 0
        value_bytes = 0
        deadline = time.monotonic() + 300
        try:
            while read < count and time.monotonic() < deadline:
                messages = consumer.consume(10_000, 1.0)
                for message in messages:
                    assert message.error() is None, message.error()
                    value_bytes += len(message.value())
                read += len(messages)
        finally:
            elapsed = time.perf_counter() - started
            consumer.close()
        assert read == count, f"read {read:,} of {count:,}"
        rate = count / elapsed
        print(
            f"  consume               {value_bytes / elapsed / 1e6:7.1f} MB/s"
            f" {rate:9,.0f} records/s   ({count:,} records, {elapsed:.1f} s; {cpu})",
            flush=True,
        )
        return rate


def start(cluster: ProcessCluster, brokers: int) -> None:
    """Format and start every node; wait until ``brokers`` brokers are unfenced."""
    cluster.format()
    cluster.start_all()
    cluster.wait_for_leader(timeout_s=30)
    with cluster.admin() as admin:
        wait_until(
            lambda: sum(not b.is_fenced for b in admin.describe_cluster().brokers) == brokers,
            60,
            f"{brokers} broker(s) unfenced",
        )


def failover(bench: Bench, cluster: ProcessCluster) -> tuple[float, float]:
    """kill -9 of the leader under a paced acks=all producer: seconds from the kill, and from
    the election, to the first acknowledgement of a record produced after the kill."""
    topic = bench.topic(f"failover-{uuid.uuid4().hex[:6]}")
    producer = Producer(
        {**bench.settings, "acks": "all", "linger.ms": 5, "message.timeout.ms": 60_000}
    )
    acknowledged: list[tuple[float, float]] = []  # (sent, acknowledged), monotonic seconds

    def callback(sent: float) -> Any:
        def delivered(error: Any, _message: Any) -> None:
            if error is None:
                acknowledged.append((sent, time.monotonic()))

        return delivered

    def leader() -> int | None:
        with cluster.admin() as admin:
            described = admin.describe_topics(TopicCollection.of_topic_names([topic]))
            return described.all_topic_names()[topic].partitions[0].leader

    old = leader()
    assert old is not None
    killed_at = elected_at = 0.0
    started = time.monotonic()
    sent = 0
    while True:
        now = time.monotonic()
        while sent < int((now - started) * 1_000):
            producer.produce(topic, value=bench.values[sent % 1_000], on_delivery=callback(now))
            sent += 1
        producer.poll(0.001)
        if not killed_at and now - started > 3:
            cluster.kill(old, signal.SIGKILL)
            killed_at = time.monotonic()
        if killed_at and not elected_at and leader() not in (old, None):
            elected_at = time.monotonic()
        if elected_at and any(s > killed_at for s, _ in acknowledged[-100:]):
            break
        if now - started > 60:
            raise SystemExit("no acknowledgement within 60 s of the kill")
    producer.flush(60)
    first = min(a for s, a in acknowledged if s > killed_at)
    return first - killed_at, first - elected_at


def replication(args: argparse.Namespace) -> int:
    print(f"data plane, 3 brokers, RF 3, {args.security}, 1,000-byte records; {load()}")
    with (
        tempfile.TemporaryDirectory(prefix="data-plane-bench-") as tmp,
        process_cluster(
            Path(tmp),
            brokers=3,
            security=args.security,
            kafka_listeners={"KAFKA": "SSL" if args.security == "ssl" else "PLAINTEXT"},
        ) as cluster,
    ):
        start(cluster, brokers=3)
        bench = Bench(cluster, args.security, args.partitions, replication_factor=3)
        _, rate_all, _ = bench.produce_max("all", args.records)
        from_kill_s, from_election_s = failover(bench, cluster)
        print(
            f"  kill -9 of the leader: first acks=all acknowledgement {from_kill_s:.2f} s after"
            f" the kill, {from_election_s:.2f} s after the election",
            flush=True,
        )
    produce_mbs = rate_all * RECORD_BYTES / 1e6
    print(f"floors on 2 cores ({load()}):")
    for label, held in (
        (f"RF 3 acks=all produce >= 30 MB/s: {produce_mbs:.1f}", produce_mbs >= 30),
        (
            f"kill -9 to the next acks=all acknowledgement <= 10 s: {from_kill_s:.2f}",
            from_kill_s <= 10,
        ),
        (f"goal, the same <= 1 s: {from_kill_s:.2f}", from_kill_s <= 1),
    ):
        print(f"  {'held  ' if held else 'MISSED'} {label}")
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=300_000)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--partitions", type=int, default=1)
    parser.add_argument("--security", choices=("ssl", "plaintext"), default="ssl")
    parser.add_argument("--replication", action="store_true")
    args = parser.parse_args()
    if args.replication:
        return replication(args)
    print(f"data plane, 1 broker, RF 1, {args.security}, 1,000-byte records; {load()}")
    with (
        tempfile.TemporaryDirectory(prefix="data-plane-bench-") as tmp,
        process_cluster(
            Path(tmp),
            brokers=1,
            security=args.security,
            kafka_listeners={"KAFKA": "SSL" if args.security == "ssl" else "PLAINTEXT"},
        ) as cluster,
    ):
        print("this machine, same run:")
        copy = loopback_rate()
        print(f"  loopback TCP copy     {copy:7.0f} MB/s (512 MiB, 1 MiB sends)", flush=True)
        cached, synced = disk_rates(Path(tmp))
        print(
            f"  sequential write      {synced:7.0f} MB/s to the fsync's end,"
            f" {cached:.0f} MB/s to the page cache (512 MiB, 1 MiB writes)",
            flush=True,
        )
        start(cluster, brokers=1)
        bench = Bench(cluster, args.security, args.partitions)
        print(f"confluent-kafka, {args.partitions} partition(s):", flush=True)
        topic, rate_1, _ = bench.produce_max("1", args.records)
        _, rate_all, _ = bench.produce_max("all", args.records)
        consume_rate = bench.consume(topic, args.records)
        half = rate_1 / 2
        print(f"at half the acks=1 maximum ({half:,.0f} records/s):", flush=True)
        paced_1 = bench.produce_paced("1", half, args.seconds)
        bench.produce_paced("all", half, args.seconds)
        assert "kafka_request_failed" not in cluster.logs(101)
    produce_mbs = min(rate_1, rate_all) * RECORD_BYTES / 1e6
    consume_mbs = consume_rate * RECORD_BYTES / 1e6
    p99 = percentile(paced_1, 0.99)
    print(f"floors on 2 cores ({load()}):")
    for label, held in (
        (f"produce >= {FLOOR_PRODUCE_MBS:.0f} MB/s: {produce_mbs:.1f}", produce_mbs >= 50),
        (f"consume >= {FLOOR_CONSUME_MBS:.0f} MB/s: {consume_mbs:.1f}", consume_mbs >= 150),
        (f"acks=1 p99 at half rate <= {FLOOR_P99_MS:.0f} ms: {p99:.2f}", p99 <= FLOOR_P99_MS),
        (
            f"goal, produce within 2x of the fsync'd disk rate ({synced:.0f} MB/s):"
            f" {produce_mbs:.1f}",
            produce_mbs * 2 >= synced,
        ),
    ):
        print(f"  {'held  ' if held else 'MISSED'} {label}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
