"""DescribeLogDirs (API key 35) on the Kafka listener (broker/kafka/log_dirs.py), through the real
listener over real partition logs: every log dir by its absolute path with the partitions in
it, their sizes (open logs and directories not opened yet), offset lag 0 and is_future false,
the volume's bytes (v4); a null topic list means all, a named one filters; a log dir that
cannot be read is KAFKA_STORAGE_ERROR; without DESCRIBE on the cluster,
CLUSTER_AUTHORIZATION_FAILED and no results."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import structlog

from broker.kafka.protocol import API_VERSIONS
from broker.log.manager import LogManager
from quorum.ids import Uuid
from quorum.metadata.records import AccessControlEntryRecord
from quorum.security.authorization import RequestAuthorization
from tests.unit.kafka.test_kafka_data import DataHarness, batch, image

DESCRIBE_LOG_DIRS = 35
KAFKA_STORAGE_ERROR = 56
CLUSTER_AUTHORIZATION_FAILED = 31


@pytest.fixture
def harness(tmp_path: Path) -> Iterator[DataHarness]:
    made = DataHarness(tmp_path)
    yield made
    made.close()


def describe(harness: DataHarness, version: int, topics: Any = None, **kw: Any) -> Any:
    return harness.ask(DESCRIBE_LOG_DIRS, version, {"topics": topics}, **kw)


def partitions(result: Any) -> dict[tuple[str, int], Any]:
    return {(t.name, p.partition_index): p for t in result.topics for p in t.partitions}


def test_served_from_v1_to_v4() -> None:
    assert API_VERSIONS[DESCRIBE_LOG_DIRS] == (1, 4)


@pytest.mark.parametrize("version", [1, 2, 3, 4])
def test_every_partition_of_the_log_dir_with_its_size(harness: DataHarness, version: int) -> None:
    produced = batch(3)
    assert int(harness.produce("orders", 0, produced).error_code) == 0
    response = describe(harness, version)
    if version >= 3:
        assert int(response.error_code) == 0
    (result,) = response.results
    assert int(result.error_code) == 0
    assert result.log_dir == os.path.abspath(harness.root)
    found = partitions(result)
    # The directories of broker 1's replicas, opened or not.
    assert set(found) == {
        ("orders", 0),
        ("orders", 1),
        ("strict", 0),
        ("stamped", 0),
        ("__consumer_offsets", 0),
    }
    assert found[("orders", 0)].partition_size == len(produced)  # an open log
    assert found[("orders", 1)].partition_size == 0
    assert all(p.offset_lag == 0 and not p.is_future_key for p in found.values())
    if version >= 4:
        volume = os.statvfs(harness.root)
        assert result.total_bytes == volume.f_blocks * volume.f_frsize
        assert 0 <= result.usable_bytes <= result.total_bytes


def test_a_log_not_opened_since_the_start_is_measured_by_its_segment_files(
    tmp_path: Path,
) -> None:
    first = DataHarness(tmp_path / "a")
    produced = batch(4)
    assert int(first.produce("strict", 0, produced).error_code) == 0
    first.close()
    # A broker started over the first one's log dir: its logs open on first use.
    restarted = DataHarness(tmp_path / "b")
    restarted.logs.close()
    restarted.logs = LogManager([tmp_path / "a"], structlog.get_logger("test"))
    restarted.apis.data.logs = restarted.logs
    try:
        (result,) = describe(restarted, 4).results
        assert result.log_dir == os.path.abspath(tmp_path / "a")
        assert partitions(result)[("strict", 0)].partition_size == len(produced)
        assert restarted.logs.open_logs() == []  # measured without opening (recovering) it
    finally:
        restarted.close()


def test_named_topics_and_partitions_only(harness: DataHarness) -> None:
    response = describe(
        harness,
        4,
        [{"topic": "orders", "partitions": [1, 7]}, {"topic": "nope", "partitions": [0]}],
    )
    (result,) = response.results
    assert set(partitions(result)) == {("orders", 1)}
    # A topic without any partition listed is left out; every log dir is still listed.
    assert describe(harness, 4, []).results[0].topics == ()


def test_a_log_dir_that_cannot_be_read_is_a_storage_error(tmp_path: Path) -> None:
    missing = tmp_path / "unmounted"
    harness = DataHarness(tmp_path / "disk", more_log_dirs=(missing,))
    try:
        good, bad = describe(harness, 4).results
        assert int(good.error_code) == 0
        assert (bad.log_dir, int(bad.error_code)) == (str(missing), KAFKA_STORAGE_ERROR)
        assert (bad.topics, bad.total_bytes, bad.usable_bytes) == ((), -1, -1)
    finally:
        harness.close()


def test_without_describe_on_the_cluster_nothing_is_listed(tmp_path: Path) -> None:
    harness = DataHarness(
        tmp_path, authorization=RequestAuthorization(enabled=True, cluster_id="c")
    )
    # DESCRIBE (8) on the cluster (4) for User:ops, ALLOW (3).
    acl = AccessControlEntryRecord(Uuid.random(), 4, "kafka-cluster", 3, "User:ops", "*", 8, 3)
    harness.image = image([acl])
    try:
        denied = describe(harness, 4, principal="User:other")
        assert int(denied.error_code) == CLUSTER_AUTHORIZATION_FAILED
        assert denied.results == ()
        assert describe(harness, 1, principal="User:other").results == ()  # v1: no code field
        allowed = describe(harness, 4, principal="User:ops")
        assert int(allowed.error_code) == 0
        assert len(allowed.results) == 1
    finally:
        harness.close()
