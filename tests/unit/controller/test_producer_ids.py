"""Producer-id blocks (Kafka's AllocateProducerIds, KIP-730): the controller hands out blocks of
1,000 from the image's next block start, only to a registered broker at its epoch, and never the
same id twice: not for two allocations in flight, not after a failover that drops an uncommitted
one, not across a snapshot. Replay refuses a ProducerIdsRecord that does not move forward."""

from __future__ import annotations

import pytest

from quorum.controller.producer_ids import PRODUCER_ID_BLOCK_SIZE, allocate_producer_ids
from quorum.controller.requests import AllocateProducerIdsRequest
from quorum.errors import ErrorCode
from quorum.metadata.delta import MetadataDelta, MetadataReplayError, replay_records
from quorum.metadata.image import MetadataImage
from quorum.metadata.records import INT64_MAX, ProducerIdsRecord, decode_record, encode_record
from quorum.metadata.snapshot_records import image_from_records, image_to_records
from tests.unit.controller.test_controller_topics import Harness


def allocate(h: Harness, broker_id: int, *, hold: bool = False) -> tuple[int, int]:
    epoch = h.sm.latest_image.brokers[broker_id].broker_epoch
    result = h.sm.allocate_producer_ids(
        AllocateProducerIdsRequest(broker_id, epoch), next_offset=h.next_offset
    )
    answer = h.propose(result, hold=hold)
    assert answer.error_code is ErrorCode.NONE, answer.error_message
    return answer.producer_id_start, answer.producer_id_len


def test_blocks_are_consecutive_and_the_image_keeps_the_next_start() -> None:
    h = Harness()
    blocks = [allocate(h, broker_id) for broker_id in (0, 1, 2, 0)]
    assert blocks == [(i * PRODUCER_ID_BLOCK_SIZE, PRODUCER_ID_BLOCK_SIZE) for i in range(4)]
    assert h.sm.committed_image.next_producer_id == 4 * PRODUCER_ID_BLOCK_SIZE
    h.check_replay()


def test_the_record_names_the_broker_and_its_epoch() -> None:
    h = Harness()
    epoch = h.sm.latest_image.brokers[1].broker_epoch
    result = h.sm.allocate_producer_ids(
        AllocateProducerIdsRequest(1, epoch), next_offset=h.next_offset
    )
    assert result.records == (ProducerIdsRecord(1, epoch, PRODUCER_ID_BLOCK_SIZE),)
    record = result.records[0]
    assert decode_record(encode_record(record)) == record


def test_two_allocations_in_flight_get_distinct_blocks() -> None:
    h = Harness()
    first = allocate(h, 0, hold=True)
    second = allocate(h, 1, hold=True)
    assert first[0] != second[0]
    h.commit_held()
    assert h.sm.committed_image.next_producer_id == 2 * PRODUCER_ID_BLOCK_SIZE


def test_an_uncommitted_block_lost_in_a_failover_was_never_answered() -> None:
    """The answer goes out once the record is committed; a block whose record a failover
    truncated was never answered, so handing the same ids out again is safe. A committed one
    is never handed out again."""
    h = Harness()
    committed = allocate(h, 0)
    allocate(h, 1, hold=True)
    h.lose_leadership()
    again = allocate(h, 2)
    assert again[0] == committed[0] + PRODUCER_ID_BLOCK_SIZE
    h.check_replay()


@pytest.mark.parametrize(
    ("broker_id", "epoch_shift", "message"),
    [
        (7, 0, "broker 7 is not registered"),
        (1, 1, "register again to get the current epoch"),
    ],
)
def test_only_a_registered_broker_at_its_epoch_gets_a_block(
    broker_id: int, epoch_shift: int, message: str
) -> None:
    h = Harness()
    known = h.sm.latest_image.brokers.get(broker_id)
    epoch = (known.broker_epoch if known else 0) + epoch_shift
    result = h.sm.allocate_producer_ids(
        AllocateProducerIdsRequest(broker_id, epoch), next_offset=h.next_offset
    )
    assert result.records == ()
    assert result.response.error_code is ErrorCode.STALE_BROKER_EPOCH
    assert message in (result.response.error_message or "")
    assert result.response.producer_id_start == -1


def test_exhausted_ids_are_an_error_not_a_wrap() -> None:
    image = replay_records(
        Harness().sm.committed_image,
        [(10_000, ProducerIdsRecord(0, 0, INT64_MAX - PRODUCER_ID_BLOCK_SIZE + 1))],
    )
    result = allocate_producer_ids(image, AllocateProducerIdsRequest(0, 0))
    assert result.records == ()
    assert result.response.error_code is ErrorCode.UNKNOWN_SERVER_ERROR
    assert "exhausted" in (result.response.error_message or "")


def test_replay_refuses_a_block_start_that_does_not_grow() -> None:
    image = replay_records(MetadataImage.EMPTY, [(0, ProducerIdsRecord(0, 0, 2000))])
    for stale in (2000, 1000):
        with pytest.raises(MetadataReplayError, match="must move it forward"):
            replay_records(image, [(1, ProducerIdsRecord(0, 0, stale))])


def test_the_next_block_start_survives_a_snapshot() -> None:
    h = Harness()
    allocate(h, 0)
    allocate(h, 2)
    image = h.sm.committed_image
    records = list(image_to_records(image))
    written = [r for r in records if isinstance(r, ProducerIdsRecord)]
    assert written == [ProducerIdsRecord(-1, -1, 2 * PRODUCER_ID_BLOCK_SIZE)]
    loaded = image_from_records(records, end_offset=image.offset + 1)
    assert loaded == image
    assert loaded.next_producer_id == 2 * PRODUCER_ID_BLOCK_SIZE
    # A controller elected on the loaded image continues after it.
    result = allocate_producer_ids(
        loaded, AllocateProducerIdsRequest(0, loaded.brokers[0].broker_epoch)
    )
    assert result.response.producer_id_start == 2 * PRODUCER_ID_BLOCK_SIZE


def test_an_image_without_blocks_writes_no_record() -> None:
    assert not any(
        isinstance(r, ProducerIdsRecord) for r in image_to_records(Harness().sm.committed_image)
    )
    delta = MetadataDelta(MetadataImage.EMPTY, snapshot_end_offset=5)
    delta.replay(ProducerIdsRecord(-1, -1, 5000), 1)
    assert delta.apply().next_producer_id == 5000
