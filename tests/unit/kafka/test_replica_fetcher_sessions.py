"""A follower's replica fetcher (broker/replica/fetcher.py) in a fetch session (KIP-227) with a
real leader: the Kafka listener of test_kafka_data's harness on a real socket, over real
partition logs on both sides. Round by round: a full fetch first, then only the partitions whose
position changed, forgotten partitions, and a full fetch again after the leader lost the session
or the connection dropped (docs/replication.md#fetch-sessions)."""

from __future__ import annotations

from pathlib import Path

import structlog

from broker import partition_metadata
from broker.kafka.data_plane import DataPlane
from broker.log.manager import LogManager
from broker.replica.fetcher import FetchSettings, ReplicaFetcher
from quorum.ids import Uuid
from quorum.metadata.delta import replay_records
from quorum.metadata.records import (
    BrokerEndpoint,
    PartitionRecord,
    RegisterBrokerRecord,
    TopicRecord,
)
from tests.unit.kafka.test_kafka_data import DataHarness, batch

PAIRS = Uuid.random()


def partition_dirs(root: Path) -> None:
    for index in (0, 1):
        directory = root / f"pairs-{index}"
        directory.mkdir(parents=True)
        (directory / "partition.metadata").write_bytes(partition_metadata.render(PAIRS))


def test_rounds_send_only_what_changed_and_start_over_when_the_session_is_lost(
    tmp_path: Path,
) -> None:
    partition_dirs(tmp_path / "leader")
    leader = DataHarness(tmp_path / "leader")
    partition_dirs(tmp_path / "follower")
    follower_logs = LogManager([tmp_path / "follower"], structlog.get_logger("test"))
    follower_data = DataPlane(follower_logs, broker_id=2)

    async def run() -> None:
        await leader.server.start()
        leader.image = replay_records(
            leader.image,
            enumerate(
                [
                    TopicRecord("pairs", PAIRS),
                    PartitionRecord(PAIRS, 0, (1, 2), (1, 2), 1, 3),
                    PartitionRecord(PAIRS, 1, (1, 2), (1, 2), 1, 3),
                    RegisterBrokerRecord(
                        1,
                        Uuid.random(),
                        7,
                        (BrokerEndpoint("KAFKA", "127.0.0.1", leader.server.port),),
                        None,
                        False,
                    ),
                ],
                start=1000,
            ),
        )
        topic = leader.image.topic(PAIRS)
        assert topic is not None
        fetcher = ReplicaFetcher(
            1,
            data=follower_data,
            broker_id=2,
            broker_epoch=lambda: 1,
            image=lambda: leader.image,
            listener_name="KAFKA",
            tls=None,
            settings=FetchSettings(wait_max_ms=0),
            logger=structlog.get_logger("test"),
        )
        cache = leader.apis.data.fetch_sessions
        assert cache is not None
        try:
            fetcher.follow(topic, 0, 3)
            fetcher.follow(topic, 1, 3)

            async def round_() -> None:
                await fetcher._round(list(fetcher.partitions.values()))

            await round_()  # full: every partition, and a session opened
            assert fetcher.last_sent == 2 and fetcher.session_id != 0
            assert fetcher.session_epoch == 1 and fetcher.rounds == 1
            first = fetcher.session_id

            produced = await leader.answer(
                0,
                11,
                {
                    "acks": 1,
                    "timeout": 1000,
                    "topic_data": [
                        {"name": "pairs", "partition_data": [{"index": 0, "records": batch(3)}]}
                    ],
                },
            )
            assert int(produced.responses[0].partition_responses[0].error_code) == 0
            answered = cache.partitions_answered
            await round_()  # nothing of ours changed: none named; the leader answers the batch
            assert fetcher.last_sent == 0 and fetcher.session_epoch == 2
            assert cache.partitions_answered == answered + 1
            log = fetcher.partitions[(PAIRS, 0)].log
            assert log is not None and log.log_end_offset == 3

            await round_()  # pairs-0's fetch offset moved: only it is named
            assert fetcher.last_sent == 1
            answered = cache.partitions_answered
            await round_()  # idle: nothing named, nothing answered
            assert fetcher.last_sent == 0 and cache.partitions_answered == answered
            assert fetcher.rounds == 4

            fetcher.forget((PAIRS, 1))
            await round_()  # forgotten: the leader's session keeps pairs-0 alone
            session = cache.get(first)
            assert session is not None and list(session.partitions) == [(PAIRS, 0)]

            cache.remove(first)  # the leader lost it: FETCH_SESSION_ID_NOT_FOUND
            await round_()
            assert fetcher.session_id == 0 and fetcher.session_epoch == 0
            await round_()  # full again, in a new session
            assert fetcher.last_sent == 1 and fetcher.session_id not in (0, first)
            second = fetcher.session_id

            await fetcher._disconnect()  # a lost connection: full, closing the old session
            assert fetcher.session_id == second and fetcher.session_epoch == 0
            await round_()
            assert fetcher.last_sent == 1 and cache.get(second) is None
            assert len(cache) == 1 and fetcher.session_id != 0
        finally:
            await fetcher.stop()
            await leader.server.stop()

    try:
        leader.loop.run_until_complete(run())
    finally:
        follower_data.close()
        follower_logs.close()
        leader.close()
