"""Replica fetchers in incremental fetch sessions on real processes (KIP-227,
docs/replication.md#fetch-sessions): 3 controllers and 3 brokers over mTLS, each with a metrics
listener. Once an RF 3 topic is replicated and idle, the followers' rounds name no partition
and the leaders' answers carry none (the leaders' ``metaquorum_fetch_session_*`` counters), while
every follower partition stays in a session; a new record is still replicated, byte for byte.
"""

from __future__ import annotations

import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic
from prometheus_client.parser import text_string_to_metric_families

from quorum.harness import ProcessCluster, wait_until
from tests.process.test_replication_process import (
    BROKERS,
    client,
    log_bytes,
    replicating_cluster,
    wait_isr,
)

TOPIC = "idle-sessions"
PARTITIONS = 6
FETCHES = "metaquorum_fetch_session_incremental_fetches_total"
REQUESTED = "metaquorum_fetch_session_partitions_requested_total"
ANSWERED = "metaquorum_fetch_session_partitions_answered_total"
CACHED = "kafka_server_fetchsessioncache_numincrementalfetchpartitionscached"


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[ProcessCluster]:
    with replicating_cluster(tmp_path, **{"metrics.listener": "http://127.0.0.1:0"}) as cluster:
        yield cluster


def counts(cluster: ProcessCluster) -> dict[str, float]:
    """The session metrics summed over the brokers."""
    total: dict[str, float] = {FETCHES: 0, REQUESTED: 0, ANSWERED: 0, CACHED: 0}
    for broker_id in BROKERS:
        address = wait_until(
            lambda b=broker_id: [e["address"] for e in cluster.events(b, "metrics_listening")],
            30,
            f"broker {broker_id}'s metrics listener",
        )[0]
        with urllib.request.urlopen(str(address), timeout=5) as response:
            text = response.read().decode()
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                if sample.name in total:
                    total[sample.name] += sample.value
    return total


def produce(cluster: ProcessCluster, partition: int, value: bytes) -> None:
    producer = Producer({**client(cluster), "acks": "all"})
    delivered: list[Any] = []
    producer.produce(
        TOPIC, value, partition=partition, on_delivery=lambda e, m: delivered.append(e)
    )
    producer.flush(30)
    assert delivered == [None]


def replicas_equal(cluster: ProcessCluster, partition: int) -> bool:
    copies = {log_bytes(cluster, b, f"{TOPIC}-{partition}") for b in BROKERS}
    return len(copies) == 1 and b"" not in copies


@pytest.mark.timeout(240)
def test_idle_followers_rounds_carry_no_partitions(cluster: ProcessCluster) -> None:
    admin = AdminClient(client(cluster))
    for future in admin.create_topics([NewTopic(TOPIC, PARTITIONS, 3)]).values():
        future.result(timeout=30)
    wait_isr(cluster, TOPIC, set(BROKERS))
    for partition in range(PARTITIONS):
        produce(cluster, partition, f"first-{partition}".encode())
    for partition in range(PARTITIONS):
        wait_until(lambda p=partition: replicas_equal(cluster, p), 60, f"{TOPIC}-{partition}")

    # Idle: a window of at least 12 incremental fetches (about 2 rounds of each follower's
    # fetcher) in which no request named a partition and no answer carried one. The window
    # starts over whenever one did (the last high watermarks still travelling).
    window = [counts(cluster)]

    def idle_window() -> bool:
        now = counts(cluster)
        start = window[0]
        if now[REQUESTED] != start[REQUESTED] or now[ANSWERED] != start[ANSWERED]:
            window[0] = now
            return False
        return now[FETCHES] - start[FETCHES] >= 12

    wait_until(idle_window, 60, "12 incremental fetches naming and answering no partition")
    # every follower partition (6 partitions x 2 followers) is in a leader's session
    assert counts(cluster)[CACHED] == PARTITIONS * 2

    # a new record still travels, in the answers of the incremental fetches
    before = counts(cluster)
    produce(cluster, 3, b"second")
    wait_until(lambda: replicas_equal(cluster, 3), 60, f"{TOPIC}-3 replicated again")
    after = counts(cluster)
    assert after[ANSWERED] >= before[ANSWERED] + 2  # the record, to each of 2 followers
    assert after[REQUESTED] >= before[REQUESTED] + 2  # their new fetch offsets
