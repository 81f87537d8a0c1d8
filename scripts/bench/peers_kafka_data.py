"""``peers.py --peer kafka --data``: the data half of the side by side with Apache Kafka (issue 33).

How the numbers are taken. After the metadata half (``--data``; ``--data-only`` skips it), each
side gets a fresh cluster of 3 controllers and 3 brokers on 127.0.0.1, one after the other
(Kafka first; never both at once), started as for the metadata half
(``peers_kafka.metaquorum_side``, ``quorum.kafka_peer.kafka_cluster``): mTLS on every listener
with ACLs on (``--security plaintext``: neither). Three brokers because the RF 3 workloads need
three live replicas on both sides. The client is the same against both clusters' brokers:
confluent-kafka, in this process, with ``scripts/bench/data_plane.py``'s producer and consumer
(its ``Bench``): 1,000-byte values without keys or headers from a pool of 1,000 random values,
a MB being 10^6 bytes of values, one partition per topic.

0. warm-up: ``--data-warm-up`` records (100,000) produced with acks=1 on an RF 1 topic, not
   measured (Kafka's JVM compiles its produce path during the first records). Both sides.
1. produce MB/s: one Producer (``linger.ms`` 5, ``batch.size`` 1 MB, idempotence off) produces
   ``--data-records`` records as fast as its queue takes them, to a new topic each time, with
   acks=1 and acks=all, on a topic of replication factor 1 and on one of replication factor 3
   (``min.insync.replicas`` 2); the rate is the records over the time from the first produce to
   the end of ``flush()``.
2. consume MB/s: one Consumer (``assign``, 8 MiB fetches) reads the RF 1, acks=1 topic's records
   from offset 0 to the end.
3. kill -9 of a leader broker: a producer paced at 1,000 records/s with acks=all
   (``message.timeout.ms`` 60 s) on a new topic of RF 3, ``min.insync.replicas`` 2; 3 s in, kill
   -9 of the partition's leader. The time from the kill to the first acknowledgement of a record
   produced after the kill; and from the new leader's appearance in the brokers' Metadata (an
   AdminClient of the same client library, on its own thread, asking every 50 ms) to that
   acknowledgement. Both clusters fence a broker whose session lapsed after
   ``broker.session.timeout.ms``, 9 s by default on both sides, so the first figure is mostly
   that timeout on both; the second is what each does once the controller has moved the
   leadership. It can be slightly negative: the producer may learn the new leader from its own
   metadata refresh before the poller's next ask.

Durability, as each side runs here: neither fsyncs a data partition per write. Kafka's
``log.flush.interval.messages`` (``Long.MAX_VALUE``) and ``log.flush.interval.ms`` (unset: the
flusher's ``log.flush.scheduler.interval.ms``, ``Long.MAX_VALUE``) are at their defaults, so a
segment is fsynced when it rolls and at a clean shutdown, and an acknowledged record relies on
replication and the page cache; metaquorum's broker does the same (fsync on a roll and on close,
recovery points in checkpoints). Both fsync their KRaft metadata log as in the metadata half.

The CPU figures printed beside each produce and consume (``data_plane.CpuMeter``) are those of
the first broker (node 101), which is not always the partition's leader. Ratios are metaquorum /
Kafka; the floors of issue 33 for produce and consume: >= 0.3x (goal >= 0.5x).
"""

from __future__ import annotations

import argparse
import os
import random
import signal
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import data_plane
from confluent_kafka import KafkaException, Producer
from confluent_kafka.admin import AdminClient
from peers_kafka import KafkaSide, Side, metaquorum_side

from quorum.kafka_peer import KAFKA_VERSION, kafka_cluster

PACED_RATE = 1_000  # records/s, the failover producer
KILL_AFTER_S = 3.0
LEADER_POLL_S = 0.05
FAILOVER_LIMIT_S = 60.0
FLOOR = 0.3
GOAL = 0.5


class SideBench(data_plane.Bench):
    """data_plane's producer and consumer, pointed at one side's three brokers."""

    def __init__(self, side: Side) -> None:
        self.side = side
        self.partitions = 1
        self.replication_factor = 1
        self.settings: dict[str, Any] = dict(side.client_config(",".join(side.brokers())))
        rng = random.Random(1)  # the pool data_plane.Bench makes
        self.values = [rng.randbytes(data_plane.RECORD_BYTES) for _ in range(1_000)]
        pids = side.pids()
        self.broker_pid = pids[min((n for n in pids if n.startswith("broker-")),
                                   key=lambda n: int(n.split("-")[1]))]  # fmt: skip

    def leader(self, admin: AdminClient, topic: str) -> int:
        """The partition's leader as the brokers' Metadata says it (-1: none, or no answer)."""
        try:
            metadata = admin.list_topics(topic, timeout=2)
        except KafkaException:
            return -1
        found = metadata.topics.get(topic)
        if found is None or found.error is not None or 0 not in found.partitions:
            return -1
        return int(found.partitions[0].leader)

    def failover(self) -> tuple[float, float, int, int]:
        """kill -9 of the leader under a paced acks=all producer: seconds from the kill, and
        from the new leader's appearance in Metadata, to the first acknowledgement of a record
        produced after the kill; the old and the new leader."""
        self.replication_factor = 3
        topic = self.topic(f"failover-{uuid.uuid4().hex[:6]}")
        quiet = {"log_level": 2}  # the dead broker's refused connections are expected
        admin = AdminClient({**self.settings, **quiet})
        old = self.leader(admin, topic)
        assert old >= 0, f"no leader for {topic}"
        producer = Producer(
            {
                **self.settings,
                **quiet,
                "acks": "all",
                "linger.ms": 5,
                "message.timeout.ms": 60_000,
            }
        )
        acknowledged: list[tuple[float, float]] = []  # (sent, acknowledged), monotonic seconds
        killed = threading.Event()
        stop = threading.Event()
        elected: list[tuple[float, int]] = []

        def callback(sent: float) -> Any:
            def delivered(error: Any, _message: Any) -> None:
                if error is None:
                    acknowledged.append((sent, time.monotonic()))

            return delivered

        def poll_leader() -> None:
            killed.wait()
            while not stop.is_set():
                leader = self.leader(admin, topic)
                if leader not in (old, -1):
                    elected.append((time.monotonic(), leader))
                    return
                stop.wait(LEADER_POLL_S)  # the poll interval, not synchronisation

        poller = threading.Thread(target=poll_leader, daemon=True)
        poller.start()
        killed_at = 0.0
        started = time.monotonic()
        sent = 0
        try:
            while True:
                now = time.monotonic()
                while sent < int((now - started) * PACED_RATE):
                    producer.produce(
                        topic, value=self.values[sent % 1_000], on_delivery=callback(now)
                    )
                    sent += 1
                producer.poll(0.001)
                if not killed_at and now - started > KILL_AFTER_S:
                    self.side.signal(old, signal.SIGKILL)
                    killed_at = time.monotonic()
                    killed.set()
                if elected and any(s > killed_at for s, _ in acknowledged[-100:]):
                    break
                if killed_at and now - killed_at > FAILOVER_LIMIT_S:
                    raise SystemExit(
                        f"{self.side.name}: no acknowledgement within"
                        f" {FAILOVER_LIMIT_S:.0f} s of the kill (new leader seen: {elected})"
                    )
        finally:
            stop.set()
            killed.set()
            poller.join(5)
        producer.flush(60)
        first = min(a for s, a in acknowledged if s > killed_at)
        elected_at, new = elected[0]
        return first - killed_at, first - elected_at, old, new


@contextmanager
def data_side(name: str, root: Path, security: str) -> Iterator[Side]:
    started = time.monotonic()
    if name == "kafka":
        with kafka_cluster(root, brokers=3, security=security) as cluster:
            side: Side = KafkaSide(cluster)
            print(f"  kafka: 3 controllers + 3 brokers ready in {time.monotonic() - started:.1f}"
                  f" s; {data_plane.load()}", flush=True)  # fmt: skip
            yield side
    else:
        with metaquorum_side(root, security) as ours:
            took = time.monotonic() - started
            print(
                f"  metaquorum: 3 controllers + 3 brokers ready in {took:.1f} s;"
                f" {data_plane.load()}",
                flush=True,
            )
            yield ours


def measure(side: Side, records: int, warm_up: int) -> dict[str, float]:
    bench = SideBench(side)
    figures: dict[str, float] = {}
    if warm_up:
        # Kafka's JVM compiles its produce path during the first records (a cold broker took
        # 3.4 s for 20,000); both sides get the same warm-up, not measured.
        print(f"  {side.name}: warm-up, not measured, RF 1", end="", flush=True)
        bench.produce_max("1", warm_up)
    consume_topic = ""
    for rf in (1, 3):
        bench.replication_factor = rf
        for acks in ("1", "all"):
            print(f"  {side.name}: RF {rf}", end="", flush=True)
            topic, rate, _ = bench.produce_max(acks, records)
            figures[f"produce MB/s, RF {rf}, acks={acks}"] = rate * data_plane.RECORD_BYTES / 1e6
            if rf == 1 and acks == "1":
                consume_topic = topic
    bench.replication_factor = 1
    print(f"  {side.name}: RF 1", end="", flush=True)
    rate = bench.consume(consume_topic, records)
    figures["consume MB/s, RF 1"] = rate * data_plane.RECORD_BYTES / 1e6
    from_kill, from_leader, old, new = bench.failover()
    print(f"  {side.name}: kill -9 of leader broker {old}: first acks=all acknowledgement "
          f"{from_kill * 1000:,.0f} ms after the kill, {from_leader * 1000:,.0f} ms after broker "
          f"{new} appeared as the leader in Metadata", flush=True)  # fmt: skip
    figures["kill -9 leader broker -> next acks=all ack, ms"] = from_kill * 1000
    figures["new leader in Metadata -> next acks=all ack, ms"] = from_leader * 1000
    return figures


def data_main(args: argparse.Namespace) -> int:
    records = args.data_records
    print(f"data half: 3 controllers + 3 brokers per side, {args.security}, 1,000-byte records, "
          f"{records:,} per produce run, one partition per topic; {data_plane.load()}",
          flush=True)  # fmt: skip
    print("  durability: no fsync per write on either side (Kafka's log.flush.interval.messages "
          "and log.flush.interval.ms at their defaults: a segment is fsynced when it rolls; "
          "metaquorum's broker the same)", flush=True)  # fmt: skip
    results: dict[str, dict[str, float]] = {}
    for name in ("kafka", "metaquorum"):
        if args.only == ("mq" if name == "kafka" else "kafka"):
            continue
        with (
            tempfile.TemporaryDirectory(prefix=f"peers-data-{name}-") as tmp,
            data_side(name, Path(tmp), args.security) as side,
        ):
            results[name] = measure(side, records, args.data_warm_up)
    ours, theirs = results.get("metaquorum", {}), results.get("kafka", {})
    print()
    print(f"{'data figure':48} {'metaquorum':>12} {'Kafka ' + KAFKA_VERSION:>12} {'ratio':>7}  "
          "floor (issue 33)")  # fmt: skip
    held: list[str] = []
    for figure in ours or theirs:
        a, b = ours.get(figure), theirs.get(figure)
        ratio = "" if a is None or not b else f"{a / b:.2f}x"
        floor = ""
        if a is not None and b and "MB/s" in figure:
            value = a / b
            floor = (f">= {FLOOR}x {'held' if value >= FLOOR else 'MISSED'}, goal >= {GOAL}x "
                     f"{'held' if value >= GOAL else 'missed'}")  # fmt: skip
            held.append(f"  {'held  ' if value >= FLOOR else 'MISSED'} {figure}: {value:.2f}x")
        print(f"{figure:48} {'-' if a is None else f'{a:,.1f}':>12} "
              f"{'-' if b is None else f'{b:,.1f}':>12} {ratio:>7}  {floor}")  # fmt: skip
    print("ratio = metaquorum / Kafka; higher is better for MB/s, lower for the kill -9 figures")
    if held:
        print(f"floors >= {FLOOR}x ({data_plane.load()}; {os.cpu_count()} cores):")
        print("\n".join(held))
    return 0
