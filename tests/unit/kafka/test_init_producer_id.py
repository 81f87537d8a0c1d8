"""InitProducerId through the real listener (decode, handle, encode) at every served version:
new ids at epoch 0 from the broker's block source, a KIP-360 re-init gets a new id, a
transactional id is refused (UNSUPPORTED_VERSION, never a hang), Kafka's ACL rule
(IDEMPOTENT_WRITE on the cluster or WRITE on some topic), and a retriable code while no block can
be had. Then an idempotent producer's batches through Produce: a retry answered with its
original offset."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import structlog

from broker.kafka.apis import KafkaApis
from broker.kafka.data_plane import DataPlane
from broker.kafka.protocol import API_VERSIONS
from broker.kafka.server import KafkaListenerServer
from broker.producer_ids import ProducerIdsUnavailableError
from quorum.ids import Uuid
from quorum.metadata.records import AccessControlEntryRecord
from quorum.security.authorization import RequestAuthorization
from quorum.security.identity import CallerResolver
from tests.unit.kafka.test_kafka_data import LISTENER, DataHarness, batch, image

INIT_PRODUCER_ID = 22


class IdHarness(DataHarness):
    def __init__(self, root: Path, **kw: Any) -> None:
        super().__init__(root, **kw)
        self.handed: list[int] = []
        self.unavailable = False
        self.apis = KafkaApis(
            broker_id=1,
            cluster_id="MkU3OEVBNTcwNTJENDM2Qg",
            image=lambda: self.image,
            authorization=self.apis._authorization,
            forwarder=None,  # type: ignore[arg-type]
            wait_applied=self._applied,
            data=DataPlane(self.logs, broker_id=1),
            next_producer_id=self._next_id,
        )
        self.server = KafkaListenerServer(
            LISTENER, self.apis, CallerResolver(), tls=None, logger=structlog.get_logger()
        )

    async def _next_id(self) -> int:
        if self.unavailable:
            raise ProducerIdsUnavailableError("no active controller")
        self.handed.append(7_000 + len(self.handed))
        return self.handed[-1]

    def init(self, version: int = 5, **values: Any) -> Any:
        body = {"transactional_id": None, "transaction_timeout": 60_000, **values}
        principal = body.pop("principal", "User:ANONYMOUS")
        return self.ask(INIT_PRODUCER_ID, version, body, principal=principal)


@pytest.fixture
def harness(tmp_path: Path) -> Iterator[IdHarness]:
    made = IdHarness(tmp_path)
    yield made
    made.close()


def test_advertised_at_kios_versions() -> None:
    assert API_VERSIONS[INIT_PRODUCER_ID] == (0, 5)


@pytest.mark.parametrize("version", range(6))
def test_new_ids_at_epoch_zero_at_every_version(harness: IdHarness, version: int) -> None:
    first = harness.init(version)
    second = harness.init(version)
    assert (int(first.error_code), first.producer_id, first.producer_epoch) == (0, 7_000, 0)
    assert (second.producer_id, second.producer_epoch) == (7_001, 0)


def test_a_re_init_with_the_old_id_gets_a_new_one(harness: IdHarness) -> None:
    first = harness.init()
    again = harness.init(producer_id=first.producer_id, producer_epoch=first.producer_epoch)
    assert int(again.error_code) == 0 and again.producer_id != first.producer_id
    assert again.producer_epoch == 0


def test_a_transactional_id_is_refused_at_once(harness: IdHarness) -> None:
    answer = harness.init(transactional_id="tx-1")
    assert int(answer.error_code) == 35  # UNSUPPORTED_VERSION
    assert (answer.producer_id, answer.producer_epoch) == (-1, -1)
    assert harness.handed == []


def test_no_block_is_retriable(harness: IdHarness) -> None:
    harness.unavailable = True
    answer = harness.init()
    assert int(answer.error_code) == 14  # COORDINATOR_LOAD_IN_PROGRESS: clients retry
    assert answer.producer_id == -1


@pytest.mark.parametrize(
    ("acls", "allowed"),
    [
        ([], False),
        ([(4, "kafka-cluster", 3, 12, 3)], True),  # IDEMPOTENT_WRITE on the cluster
        ([(2, "orders", 3, 4, 3)], True),  # WRITE on a topic
        ([(2, "ord", 4, 4, 3)], True),  # WRITE on a prefix
        ([(2, "orders", 3, 3, 3)], False),  # READ only
        ([(2, "orders", 3, 4, 3), (2, "*", 3, 4, 2)], False),  # denied on every topic
        ([(2, "ord", 4, 4, 3), (2, "or", 4, 4, 2)], False),  # the deny prefix covers it
        ([(2, "orders", 3, 4, 3), (2, "other", 3, 4, 2)], True),  # another topic denied
    ],
)
def test_idempotent_write_or_write_on_some_topic(
    tmp_path: Path, acls: list[tuple[int, str, int, int, int]], allowed: bool
) -> None:
    harness = IdHarness(tmp_path, authorization=RequestAuthorization(enabled=True, cluster_id="c"))
    records = [
        AccessControlEntryRecord(Uuid.random(), rtype, name, pattern, "User:p", "*", op, perm)
        for rtype, name, pattern, op, perm in acls
    ]
    # Someone else's ACL, so the resource types are never ACL-less.
    records.append(AccessControlEntryRecord(Uuid.random(), 2, "x", 3, "User:q", "*", 4, 3))
    harness.image = image(records)
    try:
        answer = harness.init(principal="User:p")
        assert int(answer.error_code) == (0 if allowed else 31), acls
    finally:
        harness.close()


def test_an_idempotent_producers_retry_is_answered_with_its_first_offset(
    harness: IdHarness,
) -> None:
    producer = harness.init()
    pid = producer.producer_id

    def send(seq: int, seed: int) -> Any:
        data = batch(2, seed=seed, producer_id=pid, producer_epoch=0, base_sequence=seq)
        return harness.produce("orders", 0, data)

    assert [send(0, 1).base_offset, send(2, 2).base_offset] == [0, 2]
    retried = send(0, 1)
    assert (int(retried.error_code), retried.base_offset) == (0, 0)
    gap = send(9, 3)
    assert int(gap.error_code) == 45 and "must start at 4" in gap.error_message
    assert send(4, 4).base_offset == 4
