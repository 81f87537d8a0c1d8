"""Data-plane fault scenarios on real processes (docs/faults.md#data-plane-scenarios): a broker
killed with kill -9 while producers write with acks=1 and with acks=all, its log dir full
(a 16 MiB tmpfs filled), and its appends failing with EIO (libfiu's pwrite). Each run starts
3 controllers and one broker over mTLS, a topic of two partitions led by that broker, and a
paced confluent-kafka producer on both partitions that records every record it sent and the
offset each acknowledged one was given. After the faults are undone, both partitions are read
back from offset 0 and checked by ``quorum.faults.data_checker``: every acknowledged record at
its offset byte for byte, the log dense, no record nobody sent. The disk scenarios also ask
over the raw wire while the fault lasts: a Produce is answered KAFKA_STORAGE_ERROR (56) naming
the error, the other partition and the failing one's acknowledged records are still served,
and the broker process never stops.

Randomness is seeded and the seed printed: ``FAULT_SEED=N`` replays a schedule (the
interleaving on a real machine still differs from run to run).
"""

from __future__ import annotations

import contextlib
import itertools
import os
import random
import signal
import socket
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from quorum.faults.data_checker import DataCheck, check_partition
from quorum.faults.disks import (
    PWRITE_POINT,
    fill,
    fiu_available,
    fiu_disable,
    fiu_enable,
    fiu_prefix,
    release,
    tmpfs,
    tmpfs_available,
)
from quorum.harness import ProcessCluster, wait_until
from tests.kafka_raw import RawConnection
from tests.record_batches import Record, decode_batches, encode_batch

BASE_SEED = 3000
BROKER = 101
TOPIC = "data"
PARTITIONS = 2
TMPFS_BYTES = 16 * 1024 * 1024
KAFKA_STORAGE_ERROR = 56


# ----- the workload ----------------------------------------------------------------------------


class ProduceWorkload:
    """One confluent-kafka producer in a thread of its own, paced to ``rate`` records/s over the
    partitions in turn. It records every value sent, and for each acknowledged one its offset
    and when the acknowledgement came; failed deliveries are counted by error name (unknown
    outcomes: such a record may or may not be in the log)."""

    def __init__(
        self,
        settings: dict[str, Any],
        acks: str,
        rng: random.Random,
        rate: float = 1_500,
        message_timeout_ms: int = 30_000,
    ) -> None:
        self.producer = Producer(
            {
                **settings,
                "acks": acks,
                "linger.ms": 5,
                "enable.idempotence": False,
                "message.timeout.ms": message_timeout_ms,
                "retry.backoff.ms": 100,
                "log_level": 2,  # the broker's restarts are expected: no connection errors printed
            }
        )
        self.rate = rate
        self.payload = rng.randbytes(4_096)
        self.tag = rng.getrandbits(32)
        self.sent: dict[int, list[bytes]] = {p: [] for p in range(PARTITIONS)}
        self.acknowledged: dict[int, dict[int, bytes]] = {p: {} for p in range(PARTITIONS)}
        self.ack_times: list[int] = []  # monotonic_ns of each acknowledgement
        self.failures: Counter[str] = Counter()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="produce-workload", daemon=True)
        self.lock = threading.Lock()

    def _delivered(self, error: Any, message: Any) -> None:
        with self.lock:
            if error is not None:
                self.failures[error.name()] += 1
                return
            previous = self.acknowledged[message.partition()].setdefault(
                message.offset(), message.value()
            )
            if previous != message.value():  # two records acknowledged at one offset
                self.failures["TWO_RECORDS_ONE_OFFSET"] += 1
            self.ack_times.append(time.monotonic_ns())

    def _run(self) -> None:
        started = time.monotonic()
        sequence = 0
        while not self._stop.is_set():
            due = int((time.monotonic() - started) * self.rate)
            while sequence < due and len(self.producer) < 20_000:
                partition = sequence % PARTITIONS
                start = sequence % 3_000
                value = b"%08x-%010d-" % (self.tag, sequence) + self.payload[start : start + 200]
                self.sent[partition].append(value)
                self.producer.produce(
                    TOPIC, value=value, partition=partition, on_delivery=self._delivered
                )
                sequence += 1
            self.producer.poll(0.002)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(30)
        self.producer.flush(40)

    def acks(self) -> int:
        with self.lock:
            return len(self.ack_times)


# ----- one run --------------------------------------------------------------------------------


@dataclass
class DataRun:
    cluster: ProcessCluster
    rng: random.Random
    workload: ProduceWorkload | None = None
    started: float = field(default_factory=time.monotonic)
    timeline: list[tuple[float, str]] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)

    def note(self, what: str) -> None:
        self.timeline.append((round(time.monotonic() - self.started, 3), what))

    def settings(self) -> dict[str, Any]:
        assert self.cluster.certs is not None
        keystore = str(self.cluster.certs.client_keystore("admin"))
        return {
            "bootstrap.servers": self.cluster.nodes[BROKER].kafka_address("KAFKA"),
            "security.protocol": "SSL",
            "ssl.ca.location": str(self.cluster.certs.ca),
            "ssl.certificate.location": keystore,
            "ssl.key.location": keystore,
        }

    def raw(self) -> RawConnection:
        assert self.cluster.certs is not None
        return RawConnection(
            self.cluster.nodes[BROKER].kafka_address("KAFKA"),
            (str(self.cluster.certs.ca), str(self.cluster.certs.client_keystore("admin"))),
        )

    def serving(self) -> None:
        """Wait until the broker's Kafka listener answers and the broker is unfenced."""
        host, port = self.cluster.nodes[BROKER].kafka_address("KAFKA").split(":")

        def listening() -> bool:
            try:
                socket.create_connection((host, int(port)), timeout=0.5).close()
            except OSError:
                return False
            return True

        wait_until(listening, 60, "the broker's Kafka listener")
        with self.cluster.admin() as admin:
            wait_until(
                lambda: any(not b.is_fenced for b in admin.describe_cluster().brokers),
                60,
                "the broker unfenced",
            )

    def more_acks(self, count: int, what: str) -> None:
        assert self.workload is not None
        target = self.workload.acks() + count
        workload = self.workload
        wait_until(lambda: workload.acks() >= target, 60, f"{count} more acknowledgements {what}")


def produce_raw(connection: RawConnection, partition: int, records: list[Record]) -> Any:
    answer = connection.ask(
        0,
        9,
        {
            "acks": 1,
            "timeout": 10_000,
            "topic_data": [
                {
                    "name": TOPIC,
                    "partition_data": [{"index": partition, "records": encode_batch(records)}],
                }
            ],
        },
    )
    return answer.responses[0].partition_responses[0]


def fetch_raw(connection: RawConnection, partition: int, offset: int = 0) -> Any:
    answer = connection.ask(
        1,
        12,
        {
            "max_wait": 0,
            "min_bytes": 1,
            "max_bytes": 1 << 20,
            "session_epoch": -1,
            "topics": [
                {
                    "topic": TOPIC,
                    "partitions": [
                        {
                            "partition": partition,
                            "fetch_offset": offset,
                            "partition_max_bytes": 1 << 20,
                        }
                    ],
                }
            ],
            "forgotten_topics_data": [],
        },
    )
    return answer.responses[0].partitions[0]


def read_back(run: DataRun, partition: int) -> list[tuple[int, bytes]]:
    """The partition's log from offset 0 to its end, read with confluent-kafka."""
    consumer = Consumer(
        {
            **run.settings(),
            "group.id": f"check-{uuid.uuid4()}",
            "enable.auto.commit": False,
            "enable.auto.offset.store": False,
        }
    )
    try:
        start, end = consumer.get_watermark_offsets(TopicPartition(TOPIC, partition), timeout=20)
        assert start == 0, f"partition {partition} starts at {start}"
        consumer.assign([TopicPartition(TOPIC, partition, OFFSET_BEGINNING)])
        read: list[tuple[int, bytes]] = []
        deadline = time.monotonic() + 60
        while (not read or read[-1][0] < end - 1) and end > 0 and time.monotonic() < deadline:
            for message in consumer.consume(5_000, 1.0):
                assert message.error() is None, message.error()
                read.append((message.offset(), message.value()))
        return read
    finally:
        consumer.close()


def run_data_scenario(
    name: str,
    seed: int,
    root: Path,
    inject: Callable[[DataRun], None],
    *,
    acks: str = "1",
    disk: bool = False,
    fiu: bool = False,
    settings: dict[str, Any] | None = None,
) -> tuple[DataRun, list[DataCheck]]:
    """Start the cluster, the topic and the workload; run ``inject``; undo; read back; check."""
    rng = random.Random(seed)
    with contextlib.ExitStack() as stack:
        cluster = ProcessCluster(
            root, brokers=1, kafka_listeners={"KAFKA": "SSL"}, settings=settings or {}
        )
        if disk:  # before formatting, as the admin-workload scenarios do
            stack.enter_context(tmpfs(cluster.nodes[BROKER].log_dir, TMPFS_BYTES))
        stack.callback(cluster.stop_all)
        cluster.format()
        for node_id in cluster.nodes:
            cluster.start(node_id, prefix=fiu_prefix() if fiu and node_id == BROKER else ())
        cluster.wait_for_leader(timeout_s=30)
        run = DataRun(cluster, rng)
        run.serving()
        admin = AdminClient(run.settings())
        topic = NewTopic(TOPIC, PARTITIONS, replica_assignment=[[BROKER]] * PARTITIONS)
        for future in admin.create_topics([topic]).values():
            future.result(timeout=30)
        run.workload = ProduceWorkload(run.settings(), acks, rng)
        run.workload.start()
        try:
            run.more_acks(1_000, "before the faults")
            run.note("workload running")
            inject(run)
            run.more_acks(500, "after the faults were undone")
        finally:
            run.workload.stop()
        checks = [
            check_partition(
                f"{TOPIC}-{p}",
                run.workload.acknowledged[p],
                run.workload.sent[p],
                read_back(run, p),
            )
            for p in range(PARTITIONS)
        ]
        if run.workload.failures["TWO_RECORDS_ONE_OFFSET"]:
            run.problems.append("two different records were acknowledged at one offset")
        times = run.workload.ack_times
        stall = max((b - a for a, b in itertools.pairwise(times)), default=0) / 1e9
        print(
            f"{name} seed={seed}: {sum(c.acknowledged for c in checks)} acknowledged records,"
            f" {sum(c.read for c in checks)} read back,"
            f" {sum(c.unknown_present for c in checks)} unacknowledged present,"
            f" {sum(c.duplicates for c in checks)} duplicates,"
            f" failed deliveries {dict(run.workload.failures) or 0},"
            f" longest wait between two acknowledgements {stall:.2f} s,"
            f" {sum(len(c.problems) for c in checks) + len(run.problems)} problems"
        )
        for at, what in run.timeline:
            print(f"  {at:8.3f}  {what}")
        assert "kafka_request_failed" not in cluster.logs(BROKER)
    return run, checks


def seed_for(index: int) -> int:
    value = int(os.environ.get("FAULT_SEED", BASE_SEED + index))
    print(f"FAULT_SEED={value}")
    return value


def assert_held(run: DataRun, checks: list[DataCheck]) -> None:
    problems = run.problems + [p for c in checks for p in c.problems]
    assert not problems, "\n".join(problems)
    assert all(c.acknowledged > 0 for c in checks), [c.summary() for c in checks]


# ----- kill -9 of the leader broker -----------------------------------------------------------


@pytest.mark.timeout(240)
@pytest.mark.parametrize("acks", ["1", "all"])
def test_kill_9_of_the_leader_broker_during_produce(acks: str, tmp_path: Path) -> None:
    """kill -9 of the partitions' leader at two random moments while the producer writes;
    restarted each time, it recovers its logs and every acknowledged record is read back at its
    offset."""

    def inject(run: DataRun) -> None:
        for _ in range(2):
            time.sleep(run.rng.uniform(0.2, 1.5))  # the schedule, not a synchronisation
            run.note(f"kill -9 {BROKER}")
            run.cluster.kill(BROKER, signal.SIGKILL)
            time.sleep(run.rng.uniform(0.2, 1.0))
            run.note(f"restart {BROKER}")
            run.cluster.start(BROKER)
            run.serving()
            run.more_acks(300, "after the restart")

    run, checks = run_data_scenario(
        f"kill-broker-produce-acks-{acks}",
        seed_for(0 if acks == "1" else 1),
        tmp_path,
        inject,
        acks=acks,
    )
    assert_held(run, checks)
    assert run.cluster.nodes[BROKER].starts == 3


# ----- a full disk and EIO ---------------------------------------------------------------------


def storage_error_while(run: DataRun, cause: str) -> None:
    """What the broker answers while its disk fails: KAFKA_STORAGE_ERROR for an append, naming
    ``cause``; reads of both partitions keep serving what was acknowledged; the process lives."""
    connection = run.raw()
    try:
        before = {p: int(fetch_raw(connection, p).high_watermark) for p in range(PARTITIONS)}
        probes = itertools.count()

        def probe() -> Any:
            """One record produced to partition 0; the disk may still hold room for it (the
            fill leaves what tmpfs rounds away), and then it is an acknowledged record the
            checker must find at its offset like the workload's."""
            assert run.workload is not None
            value = b"probe-%d-" % next(probes) + b"x" * 900
            with run.workload.lock:
                run.workload.sent[0].append(value)
            answer = produce_raw(connection, 0, [Record(b"k", value, 1, ())])
            if int(answer.error_code) == 0:
                with run.workload.lock:
                    run.workload.acknowledged[0][int(answer.base_offset)] = value
            return answer if int(answer.error_code) == KAFKA_STORAGE_ERROR else None

        answer = wait_until(probe, 10, "a Produce answered KAFKA_STORAGE_ERROR")
        run.note(f"Produce answered KAFKA_STORAGE_ERROR: {answer.error_message}")
        assert cause in str(answer.error_message), answer.error_message
        for partition in range(PARTITIONS):
            fetched = fetch_raw(connection, partition)
            assert int(fetched.error_code) == 0, fetched
            assert int(fetched.high_watermark) >= before[partition]
            values = [r.value for b in decode_batches(fetched.records) for r in b.records]
            assert values, f"partition {partition} served nothing"
            assert run.workload is not None
            acknowledged = run.workload.acknowledged[partition]
            for offset, value in enumerate(values):
                assert acknowledged.get(offset, value) == value
    finally:
        connection.close()
    process = run.cluster.nodes[BROKER].process
    assert process is not None and process.poll() is None, "the broker stopped"


@pytest.mark.timeout(240)
def test_a_full_log_dir_answers_storage_errors_and_loses_nothing(tmp_path: Path) -> None:
    if reason := tmpfs_available():
        pytest.skip(reason)
    log_dir = tmp_path / "broker-101" / "logs"

    def inject(run: DataRun) -> None:
        run.note("log dir full")
        fill(log_dir)
        storage_error_while(run, "No space left on device")
        time.sleep(run.rng.uniform(0.5, 1.5))  # the producer meets the full disk meanwhile
        run.note("log dir has room again")
        release(log_dir)

    run, checks = run_data_scenario(
        "broker-disk-full-produce", seed_for(2), tmp_path, inject, disk=True
    )
    assert_held(run, checks)
    assert run.cluster.nodes[BROKER].starts == 1, "the broker restarted"
    failed = run.cluster.events(BROKER, "partition_append_failed")
    assert failed and all(e["errno"] == 28 for e in failed), failed[:3]


@pytest.mark.timeout(240)
def test_eio_on_appends_answers_storage_errors_and_loses_nothing(tmp_path: Path) -> None:
    if reason := fiu_available():
        pytest.skip(reason)

    def inject(run: DataRun) -> None:
        process = run.cluster.nodes[BROKER].process
        assert process is not None
        run.note("pwrite fails with EIO")
        fiu_enable(process.pid, PWRITE_POINT)
        try:
            storage_error_while(run, "Input/output error")
            time.sleep(run.rng.uniform(0.5, 1.5))
        finally:
            run.note("pwrite works again")
            fiu_disable(process.pid, PWRITE_POINT)

    # libfiu fails pwrite in the whole process, and the broker's copy of the metadata log is
    # written with pwrite too: a failure there stops the broker on purpose (as Kafka stops on a
    # failed metadata log dir). The active controller's no-op records (one every 500 ms by
    # default) are spaced out past the fault, so it fails only the partitions' appends.
    run, checks = run_data_scenario(
        "broker-eio-produce",
        seed_for(3),
        tmp_path,
        inject,
        fiu=True,
        settings={"metadata.max.idle.interval.ms": 60_000},
    )
    assert_held(run, checks)
    assert run.cluster.nodes[BROKER].starts == 1, "the broker restarted"
    failed = run.cluster.events(BROKER, "partition_append_failed")
    assert failed and all(e["errno"] == 5 for e in failed), failed[:3]


# ----- negative control --------------------------------------------------------------------------


@pytest.mark.timeout(240)
def test_negative_control_a_lost_tail_is_caught(tmp_path: Path) -> None:
    """The checks must bite on a real log: with the broker down, the last 8 KiB of partition 0's
    active segment are cut (a disk that lost acknowledged writes); recovery then serves a
    shorter log, and the checker must report acknowledged records gone or overwritten there,
    and nothing on partition 1."""

    def inject(run: DataRun) -> None:
        run.note(f"kill -9 {BROKER}")
        run.cluster.kill(BROKER, signal.SIGKILL)
        directory = run.cluster.nodes[BROKER].log_dir / f"{TOPIC}-0"
        active = sorted(directory.glob("*.log"))[-1]
        size = active.stat().st_size
        with active.open("r+b") as segment:
            segment.truncate(max(0, size - 8_192))
        run.note(f"cut {min(size, 8_192)} bytes off {active.name} (the deliberate loss)")
        run.cluster.start(BROKER)
        run.serving()

    _, checks = run_data_scenario("negative-control-lost-tail", seed_for(4), tmp_path, inject)
    assert checks[1].ok, checks[1].problems
    assert not checks[0].ok, "the checker missed acknowledged records cut from the log"
    assert any(
        "is gone" in p or "another record than the one acknowledged" in p
        for p in checks[0].problems
    ), checks[0].problems
