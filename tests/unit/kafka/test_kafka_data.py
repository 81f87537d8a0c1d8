"""The Kafka listener's data plane without processes (docs/kafka-listener.md#the-data-plane):
Produce, Fetch, ListOffsets and OffsetForLeaderEpoch through the real listener (decode, handle,
encode) over real partition logs on disk, at every served version, with every refusal Kafka's
clients can meet. Batches are encoded from the format's documented layout
(tests/record_batches.py)."""

from __future__ import annotations

import asyncio
import random
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import structlog
from kio.serial import entity_reader

from broker import partition_metadata
from broker.kafka.apis import KafkaApis, Session
from broker.kafka.data_plane import DataPlane
from broker.kafka.protocol import API_VERSIONS, build, schema_of
from broker.kafka.server import KafkaListenerServer
from broker.log.manager import LogManager
from quorum.config import Listener
from quorum.ids import Uuid
from quorum.kafka_wire import request_frame
from quorum.metadata.delta import replay_records
from quorum.metadata.image import MetadataImage
from quorum.metadata.records import (
    AccessControlEntryRecord,
    BrokerEndpoint,
    ConfigRecord,
    PartitionRecord,
    RegisterBrokerRecord,
    TopicRecord,
)
from quorum.security.authorization import RequestAuthorization
from quorum.security.identity import Caller, CallerResolver
from tests.record_batches import Record, decode_batches, encode_batch

LISTENER = Listener("KAFKA", "127.0.0.1", 0)
ORDERS = Uuid.random()
STRICT = Uuid.random()
STAMPED = Uuid.random()
ELSEWHERE = Uuid.random()
OFFSETS_TOPIC = Uuid.random()
TOPICS = {
    "orders": (ORDERS, 2, (1,), 1),
    "strict": (STRICT, 1, (1, 2), 1),
    "stamped": (STAMPED, 1, (1,), 1),
    "elsewhere": (ELSEWHERE, 1, (2,), 2),
    "__consumer_offsets": (OFFSETS_TOPIC, 1, (1,), 1),
}


def image(acls: list[AccessControlEntryRecord] | None = None) -> MetadataImage:
    records: list[Any] = [
        RegisterBrokerRecord(
            broker_id,
            Uuid.random(),
            broker_id - 1,
            (BrokerEndpoint("KAFKA", "127.0.0.1", 9000 + broker_id),),
            None,
            False,
        )
        for broker_id in (1, 2)
    ]
    for name, (topic_id, partitions, replicas, leader) in TOPICS.items():
        records.append(TopicRecord(name, topic_id))
        records += [
            PartitionRecord(topic_id, p, replicas, replicas, leader, 3) for p in range(partitions)
        ]
    records.append(ConfigRecord(2, "strict", "min.insync.replicas", "2"))
    records.append(ConfigRecord(2, "stamped", "message.timestamp.type", "LogAppendTime"))
    records += acls or []
    return replay_records(MetadataImage.EMPTY, enumerate(records))


class DataHarness:
    def __init__(
        self,
        root: Path,
        *,
        authorization: RequestAuthorization | None = None,
        more_log_dirs: tuple[Path, ...] = (),
    ) -> None:
        """The partitions of broker 1 are in ``root``; ``more_log_dirs`` are log dirs too."""
        self.root = root
        self.image = image()
        for name, (topic_id, partitions, replicas, _) in TOPICS.items():
            if 1 not in replicas:
                continue
            for p in range(partitions):
                directory = root / f"{name}-{p}"
                directory.mkdir(parents=True)
                (directory / "partition.metadata").write_bytes(partition_metadata.render(topic_id))
        self.logs = LogManager([root, *more_log_dirs], structlog.get_logger("test"))
        self.apis = KafkaApis(
            broker_id=1,
            cluster_id="MkU3OEVBNTcwNTJENDM2Qg",
            image=lambda: self.image,
            authorization=authorization or RequestAuthorization.disabled(),
            forwarder=None,  # type: ignore[arg-type]
            wait_applied=self._applied,
            data=DataPlane(self.logs, broker_id=1),
        )
        self.server = KafkaListenerServer(
            LISTENER, self.apis, CallerResolver(), tls=None, logger=structlog.get_logger()
        )
        self.correlation_id = 0
        self.loop = asyncio.new_event_loop()

    async def _applied(self, offset: int, timeout_s: float) -> bool:
        return True

    def close(self) -> None:
        self.apis.data.close()
        self.logs.close()
        self.loop.close()

    def frame(self, api_key: int, version: int, values: dict[str, Any]) -> bytes:
        request_type, _ = schema_of(api_key, version)
        self.correlation_id += 1
        return request_frame(build(request_type, values), self.correlation_id, "test")

    def session(self, principal: str = "User:ANONYMOUS") -> Session:
        return Session(Caller(principal, None, None, False, "127.0.0.1:1"), "KAFKA")

    async def answer(self, api_key: int, version: int, values: dict[str, Any], **kw: Any) -> Any:
        data = await self.server.answer(self.frame(api_key, version, values), self.session(**kw))
        if not data:
            return data
        _, response_type = schema_of(api_key, version)
        _, header_bytes = entity_reader(response_type.__header_schema__)(data, 4)
        response, _ = entity_reader(response_type)(data, 4 + header_bytes)
        return response

    def ask(self, api_key: int, version: int, values: dict[str, Any], **kw: Any) -> Any:
        return self.loop.run_until_complete(self.answer(api_key, version, values, **kw))

    # ----- the requests ---------------------------------------------------------------------

    def produce(
        self,
        topic: str,
        partition: int,
        records: bytes | None,
        *,
        version: int = 11,
        acks: int = 1,
        **kw: Any,
    ) -> Any:
        response = self.ask(
            0,
            version,
            {
                "acks": acks,
                "timeout": 30_000,
                "topic_data": [
                    {"name": topic, "partition_data": [{"index": partition, "records": records}]}
                ],
            },
            **kw,
        )
        if not response:
            return response
        return response.responses[0].partition_responses[0]

    def fetch_values(
        self,
        topic: str | Uuid,
        partition: int,
        offset: int,
        *,
        max_wait_ms: int = 0,
        min_bytes: int = 1,
        epoch: int = -1,
        session_epoch: int = -1,
        max_bytes: int = 1 << 20,
    ) -> dict[str, Any]:
        named: dict[str, Any] = {"topic": topic} if isinstance(topic, str) else {}
        if isinstance(topic, Uuid):
            named["topic_id"] = uuid.UUID(bytes=topic.bytes)
        return {
            "max_wait": max_wait_ms,
            "min_bytes": min_bytes,
            "max_bytes": max_bytes,
            "session_id": 0,
            "session_epoch": session_epoch,
            "topics": [
                {
                    **named,
                    "partitions": [
                        {
                            "partition": partition,
                            "fetch_offset": offset,
                            "partition_max_bytes": max_bytes,
                            "current_leader_epoch": epoch,
                        }
                    ],
                }
            ],
            "forgotten_topics_data": [],
        }

    def fetch(
        self, topic: str | Uuid, partition: int, offset: int, version: int = 17, **kw: Any
    ) -> Any:
        response = self.ask(1, version, self.fetch_values(topic, partition, offset, **kw))
        assert int(getattr(response, "error_code", 0)) == 0  # v7 on
        return response.responses[0].partitions[0]


@pytest.fixture
def harness(tmp_path: Path) -> Iterator[DataHarness]:
    made = DataHarness(tmp_path)
    yield made
    made.close()


def batch(count: int, *, seed: int = 0, timestamp: int | None = None, **kw: Any) -> bytes:
    rng = random.Random(seed)
    base = timestamp if timestamp is not None else time.time_ns() // 1_000_000
    return encode_batch(
        [
            Record(
                f"k{seed}-{i}".encode(),
                rng.randbytes(rng.randint(0, 300)),
                base + i,
                (("n", str(i).encode()),),
            )
            for i in range(count)
        ],
        **kw,
    )


def versions(api_key: int) -> list[int]:
    low, high = API_VERSIONS[api_key]
    return list(range(low, high + 1))


# ----- Produce then Fetch, every version --------------------------------------------------------


@pytest.mark.parametrize("produce_version", versions(0))
def test_every_produce_version_appends_at_dense_offsets(
    harness: DataHarness, produce_version: int
) -> None:
    first = harness.produce("orders", 0, batch(3), version=produce_version)
    second = harness.produce("orders", 0, batch(4, seed=1), version=produce_version)
    assert [int(first.error_code), int(second.error_code)] == [0, 0]
    assert (first.base_offset, second.base_offset) == (0, 3)
    if produce_version >= 5:
        assert second.log_start_offset == 0
    if produce_version >= 2:
        assert second.log_append_time is None  # CreateTime: -1 on the wire


@pytest.mark.parametrize("fetch_version", versions(1))
def test_every_fetch_version_reads_back_what_was_produced(
    harness: DataHarness, fetch_version: int
) -> None:
    sent = [batch(3, seed=s) for s in range(3)]
    for data in sent:
        assert int(harness.produce("orders", 1, data).error_code) == 0
    topic: str | Uuid = ORDERS if fetch_version >= 13 else "orders"
    partition = harness.fetch(topic, 1, 0, version=fetch_version)
    assert int(partition.error_code) == 0
    assert partition.high_watermark == 9
    if fetch_version >= 5:
        assert partition.log_start_offset == 0
    stored = decode_batches(partition.records)
    assert [b.base_offset for b in stored] == [0, 3, 6]
    for data, copy in zip(sent, stored, strict=True):
        assert copy.records == [
            Record(r.key, r.value, r.timestamp, r.headers, copy.base_offset + i)
            for i, r in enumerate(decode_batches(data)[0].records)
        ]
        assert copy.leader_epoch == 3  # the image's leader epoch


def test_log_append_time_topics_answer_the_append_time(harness: DataHarness) -> None:
    before = time.time_ns() // 1_000_000
    answer = harness.produce("stamped", 0, batch(2, timestamp=1_000))
    after = time.time_ns() // 1_000_000
    assert int(answer.error_code) == 0
    (stored,) = decode_batches(harness.fetch(STAMPED, 0, 0).records)
    (append_ms,) = {r.timestamp for r in stored.records}
    assert before <= append_ms <= after
    # kio's client-side reader keeps whole seconds of the answer's log_append_time
    assert int(answer.log_append_time.timestamp()) == append_ms // 1000


# ----- Produce's refusals ------------------------------------------------------------------------


def test_produce_refusals_carry_kafkas_codes(harness: DataHarness) -> None:
    good = batch(2)
    corrupt = bytearray(good)
    corrupt[-1] ^= 0xFF
    magic_one = good[:16] + b"\x01" + good[17:]
    cases = {
        "crc": ("orders", 0, bytes(corrupt), 2),
        "magic-1": ("orders", 0, magic_one, 87),
        "longer-than-sent": ("orders", 0, good[:-10], 87),
        "negative-length": ("orders", 0, good[:8] + b"\xff\xff\xff\xff" + good[12:], 2),
        "no-records": ("orders", 0, None, 87),
        "unknown-partition": ("orders", 9, good, 3),
        "unknown-topic": ("nope", 0, good, 3),
        "internal-topic": ("__consumer_offsets", 0, good, 17),
        # a producer id this partition does not know, not at sequence 0
        "unknown-producer": (
            "orders",
            0,
            batch(1, producer_id=5, producer_epoch=0, base_sequence=3),
            59,
        ),
        "transactional": (
            "orders",
            0,
            batch(1, producer_id=5, producer_epoch=0, base_sequence=0, attributes_extra=0x10),
            48,
        ),
    }
    for case, (topic, partition, records, code) in cases.items():
        answer = harness.produce(topic, partition, records)
        assert int(answer.error_code) == code, case
        assert answer.error_message, case
        assert answer.base_offset == -1, case
    # Nothing of that reached the log; what follows is at offset 0.
    assert harness.produce("orders", 0, good).base_offset == 0


def test_not_leader_names_the_current_leader_and_its_endpoint(harness: DataHarness) -> None:
    response = harness.ask(
        0,
        11,
        {
            "acks": 1,
            "timeout": 1000,
            "topic_data": [
                {"name": "elsewhere", "partition_data": [{"index": 0, "records": batch(1)}]}
            ],
        },
    )
    answer = response.responses[0].partition_responses[0]
    assert int(answer.error_code) == 6  # NOT_LEADER_OR_FOLLOWER
    assert (answer.current_leader.leader_id, answer.current_leader.leader_epoch) == (2, 3)
    assert [(e.node_id, e.port) for e in response.node_endpoints] == [(2, 9002)]


def test_acks(harness: DataHarness) -> None:
    assert int(harness.produce("orders", 0, batch(1), acks=-1).error_code) == 0
    # min.insync.replicas 2 and, without a replica manager, an ISR of the leader alone
    strict = harness.produce("strict", 0, batch(1), acks=-1)
    assert int(strict.error_code) == 19 and "min.insync.replicas" in strict.error_message
    assert int(harness.produce("strict", 0, batch(1), acks=1).error_code) == 0
    assert int(harness.produce("orders", 0, batch(1), acks=2).error_code) == 21
    # acks=0: no answer at all; a failure closes the connection
    assert harness.produce("orders", 0, batch(1), acks=0) == b""
    assert harness.produce("orders", 0, b"junk", acks=0) is None
    assert harness.fetch(ORDERS, 0, 0).high_watermark == 2  # acks=-1 and acks=0 appended


def test_produce_and_fetch_need_write_and_read(tmp_path: Path) -> None:
    acl = AccessControlEntryRecord(Uuid.random(), 2, "orders", 3, "User:writer", "*", 4, 3)
    harness = DataHarness(
        tmp_path, authorization=RequestAuthorization(enabled=True, cluster_id="c")
    )
    harness.image = image([acl])
    try:
        denied = harness.produce("orders", 0, batch(1), principal="User:other")
        assert int(denied.error_code) == 29
        assert int(harness.produce("nope", 0, batch(1), principal="User:other").error_code) == 29
        assert int(harness.produce("orders", 0, batch(1), principal="User:writer").error_code) == 0
        response = harness.ask(1, 12, harness.fetch_values("orders", 0, 0), principal="User:writer")
        assert int(response.responses[0].partitions[0].error_code) == 29  # WRITE is not READ
    finally:
        harness.close()


# ----- Fetch's rules ----------------------------------------------------------------------------


def test_fetch_errors_offsets_and_kip_516(harness: DataHarness) -> None:
    harness.produce("orders", 0, batch(5))
    out_of_range = harness.fetch(ORDERS, 0, 6)
    assert int(out_of_range.error_code) == 1
    assert (out_of_range.high_watermark, out_of_range.log_start_offset) == (5, 0)
    assert harness.fetch(ORDERS, 0, 5).records == b""  # at the end: nothing, no error
    assert int(harness.fetch(Uuid.random(), 0, 0).error_code) == 100  # UNKNOWN_TOPIC_ID
    assert int(harness.fetch(ORDERS, 0, 0, epoch=2).error_code) == 74  # FENCED_LEADER_EPOCH
    assert int(harness.fetch(ORDERS, 0, 0, epoch=4).error_code) == 75  # UNKNOWN_LEADER_EPOCH
    assert int(harness.fetch(ORDERS, 0, 0, epoch=3).error_code) == 0
    # The directory of orders-1 holds another incarnation's id: INCONSISTENT_TOPIC_ID by id,
    # NOT_LEADER_OR_FOLLOWER by name (retriable: reconciliation moves it aside); never served.
    directory = harness.root / "orders-1"
    (directory / "partition.metadata").write_bytes(partition_metadata.render(Uuid.random()))
    assert int(harness.fetch(ORDERS, 1, 0).error_code) == 103
    assert int(harness.fetch("orders", 1, 0, version=12).error_code) == 6


def test_fetch_session_epochs_at_the_listener(harness: DataHarness) -> None:
    """Full fetches are answered in full: epoch -1 with session id 0 (no session), epoch 0 with
    a new session's id; an incremental fetch of an id this broker does not have is refused
    (more in test_fetch_sessions_listener.py)."""
    harness.produce("orders", 0, batch(2))
    sessionless = harness.ask(1, 12, harness.fetch_values("orders", 0, 0, session_epoch=-1))
    assert int(sessionless.error_code) == 0 and sessionless.session_id == 0
    assert sessionless.responses[0].partitions[0].high_watermark == 2
    full = harness.ask(1, 12, harness.fetch_values("orders", 0, 0, session_epoch=0))
    assert int(full.error_code) == 0 and full.session_id != 0
    assert full.responses[0].partitions[0].high_watermark == 2
    incremental = harness.ask(1, 12, harness.fetch_values("orders", 0, 0, session_epoch=1))
    assert int(incremental.error_code) == 70  # FETCH_SESSION_ID_NOT_FOUND: session id 0 sent
    assert incremental.responses == () and incremental.session_id == 0


def test_a_long_poll_is_woken_by_a_produce(harness: DataHarness) -> None:
    async def run() -> tuple[Any, float]:
        started = time.monotonic()
        fetching = asyncio.ensure_future(
            harness.answer(1, 17, harness.fetch_values(ORDERS, 0, 0, max_wait_ms=10_000))
        )
        await asyncio.sleep(0.2)  # the fetch parks first (a test of timing, not a sync point)
        assert not fetching.done()
        produced = await harness.answer(
            0,
            11,
            {
                "acks": 1,
                "timeout": 1000,
                "topic_data": [
                    {"name": "orders", "partition_data": [{"index": 0, "records": batch(3)}]}
                ],
            },
        )
        assert int(produced.responses[0].partition_responses[0].error_code) == 0
        response = await fetching
        return response, time.monotonic() - started

    response, elapsed = harness.loop.run_until_complete(run())
    partition = response.responses[0].partitions[0]
    assert partition.high_watermark == 3 and len(decode_batches(partition.records)) == 1
    assert elapsed < 5, "the parked fetch waited for its max_wait instead of the append"


def test_a_long_poll_without_data_waits_max_wait(harness: DataHarness) -> None:
    started = time.monotonic()
    partition = harness.fetch(ORDERS, 0, 0, max_wait_ms=300)
    assert partition.records == b"" and 0.25 <= time.monotonic() - started < 5


def test_max_bytes_gives_whole_batches_and_always_the_first(harness: DataHarness) -> None:
    for seed in range(4):
        harness.produce("orders", 0, batch(20, seed=seed))
    whole = harness.fetch(ORDERS, 0, 0)
    sizes = [b.size for b in decode_batches(whole.records)]
    assert len(harness.fetch(ORDERS, 0, 0, max_bytes=sizes[0] + sizes[1] + 5).records) == sum(
        sizes[:2]
    )
    assert len(harness.fetch(ORDERS, 0, 0, max_bytes=1).records) == sizes[0]  # KIP-74


# ----- ListOffsets and OffsetForLeaderEpoch ------------------------------------------------------


def list_offsets(harness: DataHarness, timestamp: int, version: int = 9, **partition: Any) -> Any:
    response = harness.ask(
        2,
        version,
        {
            "replica_id": -1,
            "isolation_level": 0,
            "topics": [
                {
                    "name": "orders",
                    "partitions": [{"partition_index": 0, "timestamp": timestamp, **partition}],
                }
            ],
        },
    )
    return response.topics[0].partitions[0]


@pytest.mark.parametrize("version", versions(2))
def test_list_offsets(harness: DataHarness, version: int) -> None:
    for seed in range(3):
        harness.produce("orders", 0, batch(4, seed=seed, timestamp=10_000 + 100 * seed))
    earliest, latest = list_offsets(harness, -2, version), list_offsets(harness, -1, version)
    assert (earliest.offset, latest.offset) == (0, 12)
    by_time = list_offsets(harness, 10_102, version)
    assert (by_time.offset, by_time.timestamp) == (6, 10_102)
    assert list_offsets(harness, 99_999, version).offset == -1
    newest = list_offsets(harness, -3, version)
    if version >= 7:
        assert (newest.offset, newest.timestamp) == (11, 10_203)
    else:
        assert int(newest.error_code) == 35  # UNSUPPORTED_VERSION
    if version >= 4:
        assert latest.leader_epoch == 3
        assert int(list_offsets(harness, -1, version, current_leader_epoch=1).error_code) == 74


@pytest.mark.parametrize("version", versions(23))
def test_offset_for_leader_epoch(harness: DataHarness, version: int) -> None:
    harness.produce("orders", 0, batch(4))
    response = harness.ask(
        23,
        version,
        {
            "replica_id": -1,
            "topics": [
                {
                    "topic": "orders",
                    "partitions": [
                        {"partition": 0, "leader_epoch": epoch, "current_leader_epoch": -1}
                        for epoch in (3, 2, 9)
                    ],
                }
            ],
        },
    )
    answers = response.topics[0].partitions
    assert [int(a.error_code) for a in answers] == [0, 0, 0]
    assert [a.end_offset for a in answers] == [4, 0, -1]
    if version >= 1:
        assert [a.leader_epoch for a in answers] == [3, 2, -1]
