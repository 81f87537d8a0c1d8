"""The data plane's metrics (docs/operating.md#metrics) through the real listener over real logs:
what Produce and Fetch count (per batch, refused batches not at all), the request times by API,
and the families ``broker/metrics.py`` renders from them with Kafka's JMX-exporter names."""

from __future__ import annotations

import math
from collections.abc import Iterator
from pathlib import Path

import pytest
from prometheus_client.core import Metric

from broker.kafka.data_metrics import REQUEST_TIMES_MAX, DataPlaneMetrics
from broker.metrics import data_plane_families
from tests.unit.kafka.test_kafka_data import ORDERS, DataHarness, batch


@pytest.fixture
def harness(tmp_path: Path) -> Iterator[DataHarness]:
    made = DataHarness(tmp_path)
    yield made
    made.close()


def samples(families: list[Metric]) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in families
        for s in family.samples
    }


def test_produce_and_fetch_count_bytes_and_records_per_batch(harness: DataHarness) -> None:
    sent = [batch(3, seed=1), batch(4, seed=2)]
    for data in sent:
        assert int(harness.produce("orders", 0, data).error_code) == 0
    assert int(harness.produce("orders", 1, batch(5, seed=3)).error_code) == 0
    # Refused batches count nothing: a corrupt one, and one for a partition that is not there.
    corrupt = bytearray(batch(2, seed=4))
    corrupt[-1] ^= 0xFF
    assert int(harness.produce("orders", 0, bytes(corrupt)).error_code) != 0
    assert int(harness.produce("orders", 9, batch(2, seed=5)).error_code) != 0
    fetched = harness.fetch(ORDERS, 0, 0)
    assert len(fetched.records) == len(sent[0]) + len(sent[1])
    assert harness.fetch(ORDERS, 0, 7).records == b""  # at the end: nothing out

    metrics = harness.apis.data.metrics
    snapshot = metrics.snapshot({"orders"})
    bytes_in = sum(map(len, sent)) + len(batch(5, seed=3))
    assert snapshot.topics == {"orders": (bytes_in, 12, len(fetched.records))}
    assert snapshot.all_topics == snapshot.topics["orders"]
    produce_values, produce_count, produce_ms = snapshot.request_ms["Produce"]
    assert produce_count == len(produce_values) == 5  # refused requests are timed too
    assert produce_ms == pytest.approx(sum(produce_values)) and produce_ms > 0
    assert snapshot.request_ms["Fetch"][1] == snapshot.request_ms["FetchConsumer"][1] == 2

    rendered = samples(list(data_plane_families(harness.apis.data, harness.image)))
    prefix = "kafka_server_brokertopicmetrics_"
    topic = (("topic", "orders"),)
    assert rendered[(prefix + "bytesin_total", topic)] == bytes_in
    assert rendered[(prefix + "bytesin_total", ())] == bytes_in
    assert rendered[(prefix + "messagesin_total", topic)] == 12
    assert rendered[(prefix + "bytesout_total", ())] == len(fetched.records)
    # The size of each open partition log is the bytes of its segments on disk.
    for partition in (0, 1):
        on_disk = sum(
            p.stat().st_size for p in (harness.root / f"orders-{partition}").glob("*.log")
        )
        labels = (("partition", str(partition)), ("topic", "orders"))
        assert rendered[("kafka_log_log_size", labels)] == on_disk > 0
    total_time = "kafka_network_requestmetrics_totaltimems"
    assert rendered[(total_time + "_count", (("request", "Produce"),))] == 5
    p99 = rendered[(total_time, (("quantile", "0.99"), ("request", "Produce")))]
    assert 0 < p99 <= max(produce_values)


def test_a_deleted_topic_s_counts_are_forgotten_and_all_topics_stay() -> None:
    metrics = DataPlaneMetrics()
    metrics.produced("gone", 100, 3)
    metrics.produced("kept", 50, 1)
    metrics.fetched([("gone", 40), ("kept", 10)])
    snapshot = metrics.snapshot({"kept"})
    assert snapshot.topics == {"kept": (50, 1, 10)}
    assert snapshot.all_topics == (150, 4, 50)


def test_request_times_keep_kafkas_reservoir_and_every_count() -> None:
    metrics = DataPlaneMetrics()
    for ms in range(REQUEST_TIMES_MAX + 100):
        metrics.request_time("Fetch", float(ms))
    values, count, total = metrics.snapshot(()).request_ms["Fetch"]
    assert count == REQUEST_TIMES_MAX + 100
    assert len(values) == REQUEST_TIMES_MAX and values[0] == 100.0  # the newest
    assert math.isclose(total, sum(range(REQUEST_TIMES_MAX + 100)))
