"""AlterClientQuotas on the controller (quorum.controller.client_quotas): Kafka's validation
rules and messages, which records an accepted entry writes, validate_only."""

from __future__ import annotations

import re

import pytest

from quorum.controller.client_quotas import (
    CLIENT_QUOTA_ENTITY_NAME_CHARS_MAX,
    AlterClientQuotasEntry,
    AlterClientQuotasRequest,
    alter_client_quotas,
)
from quorum.errors import ErrorCode
from quorum.metadata.delta import replay_records
from quorum.metadata.image import MetadataImage
from quorum.metadata.records import ClientQuotaEntityData, ClientQuotaRecord

ALICE = (ClientQuotaEntityData("user", "CN=alice"),)
DEFAULT_CLIENT = (ClientQuotaEntityData("client-id", None),)


def entry(
    entity: tuple[ClientQuotaEntityData, ...], *ops: tuple[str, float | None]
) -> AlterClientQuotasEntry:
    return AlterClientQuotasEntry(entity, tuple(ops))


def alter(
    image: MetadataImage, *entries: AlterClientQuotasEntry, validate_only: bool = False
) -> tuple[MetadataImage, list[tuple[ErrorCode, str | None]], int]:
    """The image after the records, the (code, message) per entry, and how many records."""
    result = alter_client_quotas(image, AlterClientQuotasRequest(entries, validate_only))
    after = replay_records(image, enumerate(result.records, start=image.offset + 1))
    return (
        after,
        [(r.error_code, r.error_message) for r in result.response.results],
        len(result.records),
    )


def test_set_change_and_remove_quotas() -> None:
    image, answers, count = alter(
        MetadataImage.EMPTY,
        entry(ALICE, ("producer_byte_rate", 102400), ("request_percentage", 12.5)),
        entry(DEFAULT_CLIENT, ("consumer_byte_rate", 2048)),
    )
    assert answers == [(ErrorCode.NONE, None)] * 2
    assert count == 3
    assert dict(image.client_quotas[(("user", "CN=alice"),)]) == {
        "producer_byte_rate": 102400.0,
        "request_percentage": 12.5,
    }
    assert dict(image.client_quotas[(("client-id", None),)]) == {"consumer_byte_rate": 2048.0}
    # The same value again writes nothing; removing an absent key writes nothing.
    _, answers, count = alter(
        image, entry(ALICE, ("producer_byte_rate", 102400), ("consumer_byte_rate", None))
    )
    assert answers == [(ErrorCode.NONE, None)] and count == 0
    image, answers, count = alter(
        image, entry(ALICE, ("producer_byte_rate", None), ("request_percentage", 50))
    )
    assert answers == [(ErrorCode.NONE, None)] and count == 2
    assert dict(image.client_quotas[(("user", "CN=alice"),)]) == {"request_percentage": 50.0}
    image, _, _ = alter(image, entry(ALICE, ("request_percentage", None)))
    assert (("user", "CN=alice"),) not in image.client_quotas


def test_validate_only_answers_the_same_and_writes_nothing() -> None:
    result = alter_client_quotas(
        MetadataImage.EMPTY,
        AlterClientQuotasRequest(
            (
                entry(ALICE, ("producer_byte_rate", 1024)),
                entry(ALICE + ALICE, ("producer_byte_rate", 1024)),
            ),
            validate_only=True,
        ),
    )
    assert result.records == ()
    codes = [r.error_code for r in result.response.results]
    assert codes == [ErrorCode.NONE, ErrorCode.INVALID_REQUEST]


@pytest.mark.parametrize(
    ("entity", "ops", "message"),
    [
        ((), [("producer_byte_rate", 1.0)], "Invalid empty client quota entity"),
        (ALICE + ALICE, [("producer_byte_rate", 1.0)], "duplicate entity entry user"),
        (
            (ClientQuotaEntityData("group", "g"),),
            [("producer_byte_rate", 1.0)],
            "Unhandled client quota entity type: group",
        ),
        (
            (ClientQuotaEntityData("ip", "127.0.0.1"),),
            [("connection_creation_rate", 1.0)],
            "Entity type ip .* not supported .* user, client-id",
        ),
        ((ClientQuotaEntityData("user", ""),), [("producer_byte_rate", 1.0)], "Empty user"),
        (
            (ClientQuotaEntityData("user", "x" * (CLIENT_QUOTA_ENTITY_NAME_CHARS_MAX + 1)),),
            [("producer_byte_rate", 1.0)],
            "at most 1024",
        ),
        (ALICE, [("producer_byte_rate", 1.0), ("producer_byte_rate", 2.0)], "Duplicate quota"),
        (ALICE, [("producer.byte.rate", 1.0)], "Invalid configuration key producer.byte.rate"),
        (ALICE, [("controller_mutation_rate", 1.0)], "controller_mutation_rate is not supported"),
        (ALICE, [("producer_byte_rate", 1.5)], "must be a Long value"),
        (ALICE, [("consumer_byte_rate", 0.0)], "must be above 0"),
        (ALICE, [("request_percentage", -5.0)], "must be above 0"),
        (ALICE, [("request_percentage", float("nan"))], "must be a finite number"),
    ],
)
def test_bad_entries_are_invalid_request_and_change_nothing(
    entity: tuple[ClientQuotaEntityData, ...], ops: list[tuple[str, float]], message: str
) -> None:
    # A valid op beside the bad one is not written either.
    image, answers, count = alter(
        MetadataImage.EMPTY,
        entry(entity, ("request_percentage", 10.0), *ops)
        if not any(k == "request_percentage" for k, _ in ops)
        else entry(entity, *ops),
        entry(DEFAULT_CLIENT, ("producer_byte_rate", 1000)),
    )
    (code, text), second = answers
    assert code is ErrorCode.INVALID_REQUEST
    assert text is not None
    assert re.search(message, text), text
    assert second == (ErrorCode.NONE, None)  # the other entry goes ahead
    assert count == 1
    assert list(image.client_quotas) == [(("client-id", None),)]


def test_an_entity_named_twice_is_refused_the_second_time() -> None:
    reordered = (ClientQuotaEntityData("client-id", "app"), ClientQuotaEntityData("user", "u"))
    image, answers, _ = alter(
        MetadataImage.EMPTY,
        entry(reordered, ("producer_byte_rate", 1000)),
        entry(tuple(reversed(reordered)), ("producer_byte_rate", 2000)),
    )
    assert answers[0] == (ErrorCode.NONE, None)
    assert answers[1][0] is ErrorCode.INVALID_REQUEST
    assert answers[1][1] == "Ignoring duplicate entity client-id=app, user=u"
    assert dict(image.client_quotas[(("client-id", "app"), ("user", "u"))]) == {
        "producer_byte_rate": 1000.0
    }


def test_records_carry_the_entity_as_sent() -> None:
    result = alter_client_quotas(
        MetadataImage.EMPTY,
        AlterClientQuotasRequest((entry(ALICE + DEFAULT_CLIENT, ("producer_byte_rate", 5)),)),
    )
    assert result.records == (
        ClientQuotaRecord(ALICE + DEFAULT_CLIENT, "producer_byte_rate", 5.0, remove=False),
    )
    assert result.is_atomic
