"""In-flight request tracking (quorum/raft/inflight.py)."""

from __future__ import annotations

from quorum.raft.inflight import InflightRequest, InflightRequests, RequestKind


def test_answers_are_matched_once_by_correlation_id() -> None:
    inflight = InflightRequests()
    request = InflightRequest(2, RequestKind.VOTE, 1, 100)
    inflight.add(7, request)
    assert inflight.has(RequestKind.VOTE) and not inflight.has(RequestKind.FETCH)
    assert inflight.pop(7) is request
    assert inflight.pop(7) is None
    assert len(inflight) == 0


def test_expired_requests_leave_in_the_order_sent() -> None:
    inflight = InflightRequests()
    inflight.add(1, InflightRequest(2, RequestKind.FETCH, 1, 50))
    inflight.add(2, InflightRequest(3, RequestKind.VOTE, 1, 10))
    inflight.add(3, InflightRequest(3, RequestKind.PRE_VOTE, 1, 90))
    expired = inflight.pop_expired(50)
    assert [(r.destination, r.kind) for r in expired] == [
        (2, RequestKind.FETCH),
        (3, RequestKind.VOTE),
    ]
    assert sorted(inflight.deadlines_ms()) == [90]


def test_a_new_epoch_keeps_only_fetches_of_that_epoch() -> None:
    inflight = InflightRequests()
    inflight.add(1, InflightRequest(2, RequestKind.FETCH, 1, 50))
    inflight.add(2, InflightRequest(2, RequestKind.FETCH, 2, 50))
    inflight.add(3, InflightRequest(3, RequestKind.BEGIN_QUORUM_EPOCH, 2, 50))
    inflight.retain_fetches_of(2)
    assert inflight.pop(1) is None and inflight.pop(3) is None
    assert inflight.pop(2) is not None


def test_kind_values_are_the_names_events_carry() -> None:
    assert [k.value for k in RequestKind] == [
        "vote",
        "pre_vote",
        "begin_epoch",
        "end_epoch",
        "fetch",
    ]
