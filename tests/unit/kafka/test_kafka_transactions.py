"""ListTransactions (66) and DescribeTransactions (65) on the Kafka listener
(broker/kafka/transactions.py): this project has no transactions, so every broker answers as a
Kafka transaction coordinator that owns none: an empty list (unknown state filters echoed),
TRANSACTIONAL_ID_NOT_FOUND per id, INVALID_REQUEST for an empty id, and
TRANSACTIONAL_ID_AUTHORIZATION_FAILED when no ACL can grant DESCRIBE on it. Both are
advertised by ApiVersions, at the versions served."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from broker.kafka.protocol import API_VERSIONS
from quorum.security.authorization import RequestAuthorization
from tests.unit.kafka.test_kafka_data import DataHarness

DESCRIBE_TRANSACTIONS = 65
LIST_TRANSACTIONS = 66


@pytest.fixture
def harness(tmp_path: Path) -> Iterator[DataHarness]:
    made = DataHarness(tmp_path)
    yield made
    made.close()


def test_advertised_by_api_versions(harness: DataHarness) -> None:
    response = harness.ask(18, 3, {"client_software_name": "t", "client_software_version": "1"})
    advertised = {k.api_key: (k.min_version, k.max_version) for k in response.api_keys}
    for key in (35, 61, DESCRIBE_TRANSACTIONS, LIST_TRANSACTIONS):
        assert advertised[key] == API_VERSIONS[key]
    assert advertised[LIST_TRANSACTIONS] == (0, 1)
    assert advertised[DESCRIBE_TRANSACTIONS] == (0, 0)


@pytest.mark.parametrize("version", [0, 1])
def test_list_is_empty_and_echoes_unknown_states(harness: DataHarness, version: int) -> None:
    values: dict[str, object] = {
        "state_filters": ["Ongoing", "Sleeping"],
        "producer_id_filters": [7],
    }
    if version >= 1:
        values["duration_filter"] = 1_000
    response = harness.ask(LIST_TRANSACTIONS, version, values)
    assert int(response.error_code) == 0
    assert response.unknown_state_filters == ("Sleeping",)
    assert response.transaction_states == ()


def test_describe_finds_no_transactional_id(harness: DataHarness) -> None:
    response = harness.ask(DESCRIBE_TRANSACTIONS, 0, {"transactional_ids": ["payments", ""]})
    found = {s.transactional_id: s for s in response.transaction_states}
    assert int(found["payments"].error_code) == 105  # TRANSACTIONAL_ID_NOT_FOUND
    assert int(found[""].error_code) == 42  # INVALID_REQUEST
    assert (found["payments"].producer_id, found["payments"].topics) == (-1, ())


def test_describe_with_an_authorizer_needs_a_super_user(tmp_path: Path) -> None:
    authorization = RequestAuthorization(enabled=True, cluster_id="c", super_users=("User:admin",))
    harness = DataHarness(tmp_path, authorization=authorization)
    try:
        values = {"transactional_ids": ["payments"]}
        (denied,) = harness.ask(
            DESCRIBE_TRANSACTIONS, 0, values, principal="User:other"
        ).transaction_states
        assert int(denied.error_code) == 53  # TRANSACTIONAL_ID_AUTHORIZATION_FAILED
        (admin,) = harness.ask(
            DESCRIBE_TRANSACTIONS, 0, values, principal="User:admin"
        ).transaction_states
        assert int(admin.error_code) == 105
    finally:
        harness.close()
