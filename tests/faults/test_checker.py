"""The history checker (quorum/faults/checker.py) on histories whose answer is known: it must
accept every linearizable one and reject, with the right minimal core, the classic violations
(stale read, lost acknowledged write, two creates without a delete, an id from nowhere)."""

from __future__ import annotations

import itertools
import random
from types import SimpleNamespace

import pytest

from quorum.faults.checker import (
    WitnessRecord,
    check_linearizable,
    check_lists,
    check_monotonic_reads,
    check_witness,
    describe_violation,
)
from quorum.faults.history import Kind, Operation, Status, from_jsonl, to_jsonl
from quorum.faults.runner import elections_in
from quorum.metadata.records import LeaderChangeMessage, NoOpRecord

_ids = itertools.count(1)


def op(
    kind: Kind,
    start: int,
    end: int | None,
    *,
    name: str = "t",
    status: Status = Status.OK,
    topic_id: str | None = None,
    error: str | None = None,
    client: int = 0,
    offset: int | None = None,
    listed: tuple[tuple[str, str], ...] | None = None,
    node: str | None = None,
) -> Operation:
    """An operation invoked at ``start`` ms and completed at ``end`` ms (None: unknown)."""
    return Operation(
        next(_ids),
        client,
        kind,
        start * 1_000_000,
        None if end is None else end * 1_000_000,
        Status.UNKNOWN if end is None else status,
        name=None if kind is Kind.LIST else name,
        topic_id=topic_id,
        error=error,
        offset=offset,
        listed=listed,
        node=node,
    )


def create(start: int, end: int | None, topic_id: str | None = "A", **kw: object) -> Operation:
    return op(Kind.CREATE, start, end, topic_id=topic_id, **kw)  # type: ignore[arg-type]


def exists(start: int, end: int, **kw: object) -> Operation:
    return op(Kind.CREATE, start, end, status=Status.ERROR, error="TOPIC_ALREADY_EXISTS", **kw)  # type: ignore[arg-type]


def delete(start: int, end: int | None, **kw: object) -> Operation:
    return op(Kind.DELETE_NAME, start, end, **kw)  # type: ignore[arg-type]


def describe(start: int, end: int, topic_id: str | None, **kw: object) -> Operation:
    if topic_id is None:
        return op(
            Kind.DESCRIBE_NAME,
            start,
            end,
            status=Status.ERROR,
            error="UNKNOWN_TOPIC_OR_PARTITION",
            **kw,  # type: ignore[arg-type]
        )
    return op(Kind.DESCRIBE_NAME, start, end, topic_id=topic_id, **kw)  # type: ignore[arg-type]


def linearizable(*ops: Operation) -> bool:
    return check_linearizable(ops).ok


# ----- known linearizable --------------------------------------------------------------------


def test_sequential_history_is_linearizable() -> None:
    assert linearizable(
        create(0, 1),
        describe(2, 3, "A"),
        exists(4, 5),
        delete(6, 7),
        describe(8, 9, None),
        create(10, 11, "B"),
        op(Kind.DESCRIBE_ID, 12, 13, topic_id="B"),
        op(Kind.DELETE_ID, 14, 15, topic_id="B"),
        op(Kind.DESCRIBE_ID, 16, 17, topic_id="B", status=Status.ERROR, error="UNKNOWN_TOPIC_ID"),
    )


@pytest.mark.parametrize("seen", ["A", None])
def test_a_read_overlapping_a_create_may_see_either_state(seen: str | None) -> None:
    assert linearizable(create(0, 10), describe(5, 6, seen, client=1))


def test_overlapping_creates_one_wins() -> None:
    assert linearizable(create(0, 10, "A"), exists(1, 9, client=1), describe(11, 12, "A"))


def test_an_unknown_create_that_happened_explains_a_later_read() -> None:
    assert linearizable(create(0, None, topic_id=None), describe(20, 21, "X", client=1))


def test_an_unknown_create_that_never_happened() -> None:
    assert linearizable(create(0, None, topic_id=None), describe(20, 21, None, client=1))


def test_an_unknown_create_may_take_effect_after_later_reads() -> None:
    """Unknown: at any moment after its invocation, so absent first, present later."""
    assert linearizable(
        create(0, None, topic_id=None),
        describe(5, 6, None, client=1),
        describe(20, 21, "X", client=1),
    )


@pytest.mark.parametrize("seen", ["A", None])
def test_an_unknown_delete_either_way(seen: str | None) -> None:
    assert linearizable(create(0, 1), delete(2, None), describe(10, 11, seen, client=1))


def test_delete_by_id_of_an_older_incarnation_does_not_touch_the_new_one() -> None:
    assert linearizable(
        create(0, 1, "A"),
        delete(2, 3),
        create(4, 5, "B"),
        op(Kind.DELETE_ID, 6, 7, topic_id="A", status=Status.ERROR, error="UNKNOWN_TOPIC_ID"),
        describe(8, 9, "B"),
    )


# ----- known violations ----------------------------------------------------------------------


def test_the_classic_stale_read_is_caught_with_its_two_operations() -> None:
    """A create acknowledged, then - strictly later - a read that does not see it."""
    noise = [describe(0, 1, None, client=2), create(40, 41, "O", client=3, name="other")]
    written = create(2, 3, "A", client=0)
    stale = describe(10, 11, None, client=1)
    result = check_linearizable([*noise, written, stale])
    assert not result.ok
    (violation,) = result.violations
    assert violation.name == "t"
    assert set(violation.minimal) == {written, stale}
    text = describe_violation(result)
    assert f"#{written.op_id}" in text and f"#{stale.op_id}" in text


def test_a_lost_acknowledged_write_is_caught() -> None:
    written = create(0, 1, "A")
    later = describe(50, 51, None, client=1)
    (violation,) = check_linearizable([written, describe(2, 3, "A"), later]).violations
    assert later in violation.minimal and written in violation.minimal


def test_two_acknowledged_creates_without_a_delete_between() -> None:
    first, second = create(0, 1, "A"), create(2, 3, "B", client=1)
    (violation,) = check_linearizable([first, second]).violations
    assert set(violation.minimal) == {first, second}


def test_a_delete_between_two_creates_is_not_dropped_to_fake_a_violation() -> None:
    """Minimisation never removes an acknowledged write: the core is the stale read only."""
    ops = [create(0, 1, "A"), delete(2, 3), create(4, 5, "B"), describe(10, 11, "A", client=1)]
    (violation,) = check_linearizable(ops).violations
    assert ops[3] in violation.minimal
    assert ops[2] in violation.minimal  # B was created, so A cannot be read afterwards


def test_an_id_nobody_created_is_caught() -> None:
    (violation,) = check_linearizable([describe(0, 1, "Z")]).violations
    assert [o.kind for o in violation.minimal] == [Kind.DESCRIBE_NAME]


def test_an_unknown_create_cannot_make_an_id_another_create_returned() -> None:
    """Ids are never reused: an unknown create cannot bring back A after A was deleted."""
    assert not linearizable(
        create(0, 1, "A"),
        delete(2, 3),
        create(4, None, topic_id=None, client=1),
        describe(10, 11, "A", client=2),
    )


def test_the_search_bound_is_reported_not_passed() -> None:
    ops = [create(0, None, topic_id=None, client=i) for i in range(12)]
    ops += [describe(100 + 2 * i, 101 + 2 * i, None, client=20 + i) for i in range(5)]
    result = check_linearizable(ops, steps_max=10)
    assert not result.ok and result.violations == ()
    assert "search bound" in describe_violation(result)


@pytest.mark.parametrize("seed", range(12))
def test_random_linearizable_histories_pass_and_corrupted_ones_fail(seed: int) -> None:
    """Run the model sequentially, give each operation an interval around its true moment,
    overlapping others: always linearizable. Then make one read see an id nobody created:
    never linearizable."""
    rng = random.Random(seed)
    value: str | None = None
    ops: list[Operation] = []
    created = 0
    for step in range(60):
        moment = step * 10
        start, end = moment - rng.randint(0, 25), moment + rng.randint(1, 25)
        client = step % 5
        choice = rng.random()
        if choice < 0.3:
            if value is None:
                created += 1
                value = f"id{created}"
                ops.append(create(start, end, value, client=client))
            else:
                ops.append(exists(start, end, client=client))
        elif choice < 0.5:
            ops.append(delete(start, end, client=client) if value else op(
                Kind.DELETE_NAME, start, end, status=Status.ERROR,
                error="UNKNOWN_TOPIC_OR_PARTITION", client=client,
            ))  # fmt: skip
            value = None
        elif choice < 0.6 and value is not None:
            ops.append(create(start, None, topic_id=None, client=client))  # a lost answer
        else:
            ops.append(describe(start, end, value, client=client))
    assert check_linearizable(ops).ok, f"seed {seed}: a linearizable history was rejected"
    reads = [i for i, o in enumerate(ops) if o.kind is Kind.DESCRIBE_NAME]
    corrupt = rng.choice(reads)
    ops[corrupt] = describe(
        ops[corrupt].invoke_ns // 1_000_000,
        (ops[corrupt].complete_ns or 0) // 1_000_000,
        "never-created",
        client=ops[corrupt].client,
    )
    assert not check_linearizable(ops).ok, f"seed {seed}: a corrupted read was accepted"


# ----- lists, monotonic reads, the witness ---------------------------------------------------


WITNESS = [
    WitnessRecord(3, "create", "t", "A"),
    WitnessRecord(5, "create", "u", "C"),
    WitnessRecord(8, "delete", "t", "A"),
    WitnessRecord(9, "create", "t", "B"),
]


def test_a_list_must_equal_the_image_at_its_offset() -> None:
    good = op(Kind.LIST, 20, 21, offset=6, listed=(("t", "A"), ("u", "C")))
    wrong = op(Kind.LIST, 20, 21, offset=8, listed=(("t", "A"), ("u", "C")))
    names = [create(0, 1, "A", offset=3), op(Kind.CREATE, 0, 1, name="u", topic_id="C", offset=5)]
    assert check_lists([*names, good], WITNESS) == []
    (problem,) = check_lists([*names, wrong], WITNESS)
    assert "image there" in problem


def test_a_list_may_not_miss_a_write_acknowledged_before_it_began() -> None:
    write = op(Kind.CREATE, 0, 1, topic_id="B", offset=9)
    stale = op(Kind.LIST, 5, 6, offset=6, listed=(("t", "A"),))
    problems = check_lists([write, stale], WITNESS)
    assert any("acknowledged before the list began" in p for p in problems)


def test_reads_on_one_node_never_go_back() -> None:
    first = describe(0, 1, "A", offset=9, node="broker-101")
    second = describe(2, 3, "A", offset=7, node="broker-101", client=1)  # another client
    elsewhere = describe(4, 5, "A", offset=3, node="broker-102")
    overlapping = describe(0, 5, "A", offset=2, node="broker-101", client=2)  # began first
    (problem,) = check_monotonic_reads([first, second, elsewhere, overlapping])
    assert "offset 7" in problem and f"#{first.op_id}" in problem


def test_every_acknowledged_write_is_in_every_log_exactly_once() -> None:
    acked = [create(0, 1, "A", offset=3), op(Kind.DELETE_ID, 2, 3, topic_id="A")]
    assert check_witness(acked, {"controller-1": WITNESS, "controller-2": WITNESS}) == []
    lost = WITNESS[:1]
    problems = check_witness(acked, {"controller-1": WITNESS, "controller-2": lost})
    assert any("controller-2" in p and "lost" in p for p in problems)
    twice = [*WITNESS, WitnessRecord(10, "create", "t", "A")]
    assert any("created 2 times" in p for p in check_witness([], {"c": twice}))


def test_histories_round_trip_through_json_lines() -> None:
    ops = [
        create(0, 1, "A", offset=3, node="controller-1"),
        create(2, None, topic_id=None, client=1),
        op(Kind.LIST, 4, 5, offset=3, listed=(("t", "A"),)),
    ]
    assert from_jsonl(to_jsonl(ops)) == ops


def test_elections_count_leaders_after_the_first_or_after_an_epoch() -> None:
    """A slow start-up may elect several leaders before the workload runs; a scenario that
    must not depose a live leader counts only those of later epochs than the one in force
    when the workload ran (quorum/faults/runner.py)."""

    def change(epoch: int) -> SimpleNamespace:
        return SimpleNamespace(epoch=epoch, record=LeaderChangeMessage(1, epoch, (1, 2, 3)))

    log = [change(2), SimpleNamespace(epoch=2, record=NoOpRecord()), change(3), change(5)]
    assert elections_in(log) == 2
    assert elections_in(log, after_epoch=3) == 1
    assert elections_in(log, after_epoch=5) == 0
    assert elections_in([]) == 0
