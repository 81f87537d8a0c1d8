"""IncarnationGuard's decisions (quorum/analytics/kafka_connector.py) from the ids brokers name,
without Spark or brokers: the ids are given as the brokers' answers would be. The real brokers
and Spark's connector are in tests/spark/test_spark_kafka_connector.py."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import pytest

from quorum.analytics.kafka_connector import (
    IncarnationGuard,
    TopicIncarnationChangedError,
    kafka_options,
)

OPTIONS = kafka_options("127.0.0.1:9092")


class Brokers:
    """What each broker names as each topic's id, changed by the test between checks."""

    def __init__(self, ids: dict[int, dict[str, str | None]]) -> None:
        self.ids = ids
        self.asked: list[list[str]] = []

    def __call__(
        self, options: Mapping[str, str], topics: Iterable[str]
    ) -> dict[int, dict[str, str | None]]:
        names = list(topics)
        self.asked.append(names)
        return {broker: {n: ids.get(n) for n in names} for broker, ids in self.ids.items()}


def guard(brokers: Brokers, state: Path, topics: tuple[str, ...] = ("orders",)) -> IncarnationGuard:
    return IncarnationGuard(OPTIONS, topics, state, ids=brokers)


def test_the_first_check_remembers_the_ids_and_later_ones_compare(tmp_path: Path) -> None:
    brokers = Brokers({101: {"orders": "A"}, 102: {"orders": "A"}})
    state = tmp_path / "checkpoint" / "topic-ids.json"
    assert guard(brokers, state).check() == {"orders": "A"}
    assert json.loads(state.read_text()) == {"topic_ids": {"orders": "A"}}
    assert guard(brokers, state).check() == {"orders": "A"}
    brokers.ids[102]["orders"] = "B"
    with pytest.raises(TopicIncarnationChangedError, match=r"id A -> B, seen on broker 102"):
        guard(brokers, state).check()
    assert json.loads(state.read_text()) == {"topic_ids": {"orders": "A"}}  # kept


def test_a_topic_a_broker_no_longer_knows_was_deleted(tmp_path: Path) -> None:
    brokers = Brokers({101: {"orders": "A"}})
    state = tmp_path / "ids.json"
    guard(brokers, state).check()
    brokers.ids[101]["orders"] = None
    with pytest.raises(TopicIncarnationChangedError, match=r"unknown to broker 101 .*id A"):
        guard(brokers, state).check()


def test_brokers_that_disagree_fail_the_first_check_too(tmp_path: Path) -> None:
    brokers = Brokers({101: {"orders": "A"}, 102: {"orders": "B"}})
    with pytest.raises(TopicIncarnationChangedError, match="different ids"):
        guard(brokers, tmp_path / "ids.json").check()
    assert not (tmp_path / "ids.json").exists()


def test_each_topic_is_checked(tmp_path: Path) -> None:
    brokers = Brokers({101: {"orders": "A", "payments": "P"}})
    state = tmp_path / "ids.json"
    checked = guard(brokers, state, ("payments", "orders")).check()
    assert checked == {"orders": "A", "payments": "P"}
    assert brokers.asked == [["orders", "payments"]]
    brokers.ids[101]["payments"] = "Q"
    with pytest.raises(TopicIncarnationChangedError, match="'payments'"):
        guard(brokers, state, ("payments", "orders")).check()


class Batch:
    """The part of a DataFrame the wrapper uses, recording the order of calls."""

    def __init__(self, calls: list[str]) -> None:
        self.calls = calls

    def persist(self) -> Batch:
        self.calls.append("persist")
        return self

    def count(self) -> int:
        self.calls.append("count")
        return 3

    def unpersist(self) -> None:
        self.calls.append("unpersist")


def test_a_batch_is_read_then_checked_then_written(tmp_path: Path) -> None:
    brokers = Brokers({101: {"orders": "A"}})
    state = tmp_path / "ids.json"
    the_guard = guard(brokers, state)
    the_guard.check()
    calls: list[str] = []

    def write(batch: Any, batch_id: int) -> None:
        calls.append(f"write {batch_id}")

    wrapped = the_guard.wrap(write)
    wrapped(Batch(calls), 7)
    assert calls == ["persist", "count", "write 7", "unpersist"]
    assert len(brokers.asked) == 2  # the check before the start, then this batch's

    calls.clear()
    brokers.ids[101]["orders"] = "B"
    with pytest.raises(TopicIncarnationChangedError):
        wrapped(Batch(calls), 8)
    assert calls == ["persist", "count", "unpersist"]  # never written


def test_kafka_options_for_mtls_and_plaintext(tmp_path: Path) -> None:
    ca, keystore = tmp_path / "ca.pem", tmp_path / "admin.pem"
    assert kafka_options("h:1") == {"kafka.bootstrap.servers": "h:1"}
    assert kafka_options("h:1", ca=ca, keystore=keystore) == {
        "kafka.bootstrap.servers": "h:1",
        "kafka.security.protocol": "SSL",
        "kafka.ssl.truststore.type": "PEM",
        "kafka.ssl.truststore.location": str(ca),
        "kafka.ssl.keystore.type": "PEM",
        "kafka.ssl.keystore.location": str(keystore),
    }
