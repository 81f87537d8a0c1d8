"""The history checker of the fault harness (docs/faults.md): is what the clients saw explained
by one order of the operations that respects real time?

``check_linearizable`` is a Wing & Gong search with Lowe's memoisation, in the spirit of
Porcupine (the checker behind etcd's robustness tests). The model is one register per topic
name - absent (None) or a topic id - so the history is split by name first (registers are
independent: P-compositionality) and each part searched on its own.

An UNKNOWN operation (timed out, connection lost) may have taken effect at any moment after
its invocation, or never (etcd's "non-deterministic" model). The search runs over *sets* of
register values (the powerset construction): an unknown create from absent leads to {absent,
some id}, and later operations keep the values they can explain. Which id an unknown create
made is unknown too: any id observed for that name that no acknowledged create returned, or a
fresh one nobody observed.

Also here: ``check_lists`` (ListTopics and offset-carrying reads against the committed log),
``check_monotonic_reads`` (per client and node, offsets never go back) and ``check_witness``
(every acknowledged write is in every controller's committed log exactly once). Pure: no I/O.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from itertools import pairwise

from quorum.faults.history import READS, RELAXED, WRITES, Kind, Operation, Status

# The search gives up (and says so: neither pass nor fail) after this many steps per name.
CHECK_STEPS_MAX = 2_000_000
# Searches the minimisation of one violation may run (then it reports what it has).
MINIMIZE_SEARCHES_MAX = 600
# A value nobody observed: what an unknown create made if no read ever saw its id.
FRESH = "<an id nobody observed>"

State = frozenset[str | None]


@dataclass(frozen=True, slots=True)
class WitnessRecord:
    """A topic record of a committed metadata log: ``kind`` "create" (TopicRecord) or
    "delete" (RemoveTopicRecord)."""

    offset: int
    kind: str
    name: str
    topic_id: str


@dataclass(frozen=True)
class PartitionResult:
    name: str
    ok: bool | None  # None: the search bound was reached
    operations: tuple[Operation, ...]
    longest_prefix: tuple[Operation, ...] = ()  # the longest linearization found
    stuck_at: Operation | None = None  # the operation that could not come next
    # The core of the violation: operations whose outcomes cannot all hold together ...
    minimal: tuple[Operation, ...] = ()
    # ... even with these acknowledged writes taken as "may or may not have happened".
    relaxed: tuple[Operation, ...] = ()
    steps: int = 0


@dataclass(frozen=True)
class LinearizabilityResult:
    partitions: tuple[PartitionResult, ...] = field(default_factory=tuple)

    @property
    def ok(self) -> bool:
        """True when every name's history is linearizable; False on a violation or when the
        search bound was reached (the run proves nothing then)."""
        return all(p.ok for p in self.partitions)

    @property
    def violations(self) -> tuple[PartitionResult, ...]:
        return tuple(p for p in self.partitions if p.ok is False)


# ----- the model ------------------------------------------------------------------------------


def _step_one(operation: Operation, value: str | None, fresh: Sequence[str]) -> list[str | None]:
    """The register values after ``operation`` from ``value`` (empty: it cannot happen)."""
    kind, status, topic_id = operation.kind, operation.status, operation.topic_id
    unknown = status is Status.UNKNOWN
    if kind is Kind.CREATE:
        if status is Status.OK:
            return [topic_id] if value is None else []
        if status is Status.ERROR:
            return [value] if value is not None else []
        if value is not None:
            return [value]
        return [value, topic_id] if topic_id is not None else [value, *fresh]
    if kind is Kind.DELETE_NAME:
        if status is Status.OK:  # the answer names the id it deleted, when it carries one
            return [None] if value is not None and topic_id in (None, value) else []
        if status is Status.ERROR:
            return [None] if value is None else []
        return [value, None] if value is not None and topic_id in (None, value) else [value]
    if kind is Kind.DELETE_ID:
        if status is Status.OK:
            return [None] if value == topic_id else []
        if status is Status.ERROR:
            return [value] if value != topic_id else []
        return [value, None] if value == topic_id else [value]
    if kind is Kind.DESCRIBE_NAME:
        if status is Status.OK:
            return [value] if value == topic_id and value is not None else []
        if status is Status.ERROR:
            return [value] if value is None else []
    if kind is Kind.DESCRIBE_ID:
        if status is Status.OK:
            return [value] if value == topic_id else []
        if status is Status.ERROR:
            return [value] if value != topic_id else []
    assert unknown or kind is Kind.LIST, operation
    return [value]


def _step(operation: Operation, state: State, fresh: Sequence[str]) -> State:
    return frozenset(v for value in state for v in _step_one(operation, value, fresh))


def _observed_ids(operations: Sequence[Operation]) -> list[str]:
    """Ids an unknown create of this name may have made: observed, never acknowledged."""
    acknowledged = {
        o.topic_id for o in operations if o.kind is Kind.CREATE and o.status is Status.OK
    }
    seen: list[str] = []
    for o in operations:
        if o.status is not Status.OK or o.topic_id is None:
            continue
        if (
            o.kind in (Kind.DESCRIBE_NAME, Kind.DESCRIBE_ID, Kind.DELETE_ID, Kind.DELETE_NAME)
            and o.topic_id not in acknowledged
            and o.topic_id not in seen
        ):
            seen.append(o.topic_id)
    return [*seen, FRESH]


# ----- the search -----------------------------------------------------------------------------


@dataclass(eq=False, slots=True)
class _Entry:
    index: int  # the operation's position in the part
    is_call: bool
    time: float
    match: _Entry | None = None  # a call's return entry
    prev: _Entry | None = None
    next: _Entry | None = None


def _entries(operations: Sequence[Operation]) -> _Entry:
    """The doubly linked list of call and return events in time order (calls first on ties,
    the lenient choice); returns its head sentinel."""
    events: list[_Entry] = []
    for index, o in enumerate(operations):
        call = _Entry(index, True, float(o.invoke_ns))
        end = float("inf") if o.complete_ns is None else float(o.complete_ns)
        ret = _Entry(index, False, end)
        call.match = ret
        events += [call, ret]
    events.sort(key=lambda e: (e.time, not e.is_call, e.index))
    head = _Entry(-1, False, float("-inf"))
    previous = head
    for entry in events:
        previous.next = entry
        entry.prev = previous
        previous = entry
    return head


def _lift(call: _Entry) -> None:
    """Take a call and its return out of the list."""
    for entry in (call, call.match):
        assert entry is not None and entry.prev is not None
        entry.prev.next = entry.next
        if entry.next is not None:
            entry.next.prev = entry.prev


def _unlift(call: _Entry) -> None:
    for entry in (call.match, call):
        assert entry is not None and entry.prev is not None
        entry.prev.next = entry
        if entry.next is not None:
            entry.next.prev = entry


def _search(
    operations: Sequence[Operation], steps_max: int
) -> tuple[bool | None, list[int], int | None, int]:
    """(linearizable or None at the bound, longest linearized order, the index of the call
    stuck after it, steps)."""
    fresh = _observed_ids(operations)
    head = _entries(operations)
    state: State = frozenset({None})
    linearized = 0
    cache: set[tuple[int, State]] = set()
    stack: list[tuple[_Entry, State]] = []
    longest: list[int] = []
    stuck: int | None = None
    steps = 0
    entry = head.next
    while head.next is not None:
        steps += 1
        if steps > steps_max:
            return None, longest, stuck, steps
        assert entry is not None
        if entry.is_call:
            after = _step(operations[entry.index], state, fresh)
            if after:
                key = (linearized | (1 << entry.index), after)
                if key not in cache:
                    cache.add(key)
                    stack.append((entry, state))
                    state = after
                    linearized = key[0]
                    _lift(entry)
                    if len(stack) > len(longest):
                        longest = [e.index for e, _ in stack]
                        stuck = None
                    entry = head.next
                    continue
            entry = entry.next
            continue
        # A return whose call is not linearized yet: undo the last choice.
        if len(stack) == len(longest) and stuck is None:
            stuck = entry.index
        if not stack:
            return False, longest, stuck, steps
        call, state = stack.pop()
        linearized &= ~(1 << call.index)
        _unlift(call)
        entry = call.next
    return True, longest, stuck, steps


def _relaxed(operation: Operation) -> Operation:
    """An acknowledged write turned unknown - it may or may not have happened, before its
    completion - keeping the id it named: it no longer constrains the register but can still
    explain what others saw."""
    return replace(operation, status=Status.UNKNOWN, error=RELAXED)


def _shrink(
    items: list[Operation],
    change: Callable[[Operation], Operation | None],
    violates: Callable[[list[Operation]], bool],
) -> list[Operation]:
    """Delta debugging: apply ``change`` (None: drop the operation) to blocks of operations,
    halving the block size, keeping each change under which the history still violates."""
    block = max(1, len(items) // 2)
    while True:
        start = 0
        while start < len(items):
            end = min(start + block, len(items))
            changed = [change(o) for o in items[start:end]]
            if any(c is not o for c, o in zip(changed, items[start:end], strict=True)):
                candidate = [
                    *items[:start],
                    *(c for c in changed if c is not None),
                    *items[end:],
                ]
                if violates(candidate):
                    shrunk = len(candidate) < len(items)
                    items = candidate
                    if shrunk:
                        continue  # what follows moved up to ``start``: try it there
            start = end
        if block == 1:
            return items
        block //= 2


def _minimal(operations: Sequence[Operation], steps_max: int) -> list[Operation]:
    """A small sub-history that is still not linearizable, for people to read.

    Dropping an acknowledged write can create a violation of its own (drop the delete between
    two creates), so those are never dropped while acknowledged. Instead: cut the history after
    the shortest non-linearizable prefix (by invocation); drop reads and writes without effect
    (refused) while the rest still violates (they only constrain, so dropping them cannot cause
    a violation); turn acknowledged writes unknown (``_relaxed``: they may still explain what
    others saw, within their own time) where the rest still violates. What keeps its definite
    outcome is the core of the violation; unknown writes stay, since dropping one could."""
    budget = [MINIMIZE_SEARCHES_MAX]

    def violates(ops: list[Operation]) -> bool:
        if budget[0] <= 0:
            return False  # out of budget: keep what we have
        budget[0] -= 1
        return _search(ops, steps_max)[0] is False

    ops = list(operations)
    low, high = 1, len(ops)  # the shortest violating prefix: ops[:high] violates
    while low < high:
        middle = (low + high) // 2
        if violates(ops[:middle]):
            high = middle
        else:
            low = middle + 1
    kept = ops[:high]

    def without_effect(o: Operation) -> Operation | None:
        return None if o.kind in READS or o.status is Status.ERROR else o

    def relax(o: Operation) -> Operation | None:
        return _relaxed(o) if o.kind in WRITES and o.status is Status.OK else o

    kept = _shrink(kept, without_effect, violates)
    return _shrink(kept, relax, violates)


def check_linearizable(
    operations: Iterable[Operation], steps_max: int = CHECK_STEPS_MAX
) -> LinearizabilityResult:
    """Check the topic-register operations (LIST and unknown reads are left out)."""
    parts: dict[str, list[Operation]] = defaultdict(list)
    for o in operations:
        if o.kind is Kind.LIST or (o.kind in READS and o.status is Status.UNKNOWN):
            continue
        assert o.name is not None
        parts[o.name].append(o)
    results: list[PartitionResult] = []
    for name in sorted(parts):
        part = sorted(parts[name], key=lambda o: (o.invoke_ns, o.op_id))
        ok, longest, stuck, steps = _search(part, steps_max)
        if ok is False:
            kept = _minimal(part, steps_max)
            results.append(
                PartitionResult(
                    name,
                    False,
                    tuple(part),
                    tuple(part[i] for i in longest),
                    None if stuck is None else part[stuck],
                    tuple(o for o in kept if o.error != RELAXED),
                    tuple(o for o in kept if o.error == RELAXED),
                    steps,
                )
            )
        else:
            results.append(PartitionResult(name, ok, tuple(part), steps=steps))
    return LinearizabilityResult(tuple(results))


def describe_violation(result: LinearizabilityResult) -> str:
    """A report a person can read: per failing name, the minimal sub-history (times in ms
    from the first operation of the name) and how far a linearization got."""
    lines: list[str] = []
    for part in result.partitions:
        if part.ok is None:
            lines.append(f"topic {part.name!r}: search bound reached after {part.steps} steps")
            continue
        if part.ok:
            continue
        origin = min(o.invoke_ns for o in part.operations)
        lines.append(
            f"topic {part.name!r}: not linearizable ({len(part.operations)} operations); "
            f"these outcomes cannot all hold in any order that respects real time:"
        )
        lines.extend("  " + o.describe(origin) for o in part.minimal)
        if part.relaxed:
            lines.append(
                f"  (even taking {len(part.relaxed)} other acknowledged writes of this topic, "
                f"#{part.relaxed[0].op_id} to #{part.relaxed[-1].op_id}, as maybe-happened)"
            )
        lines.append(
            f"  (the longest linearization found orders {len(part.longest_prefix)} operations"
            + (f"; stuck before #{part.stuck_at.op_id})" if part.stuck_at else ")")
        )
    return "\n".join(lines)


# ----- reads against the committed log ---------------------------------------------------------


def _images(witness: Sequence[WitnessRecord]) -> tuple[list[int], list[dict[str, str]]]:
    """The live topics (name -> id) after each witness record, by offset."""
    offsets: list[int] = []
    images: list[dict[str, str]] = []
    live: dict[str, str] = {}
    for record in sorted(witness, key=lambda r: r.offset):
        if record.kind == "create":
            live[record.name] = record.topic_id
        else:
            for name, topic_id in list(live.items()):
                if topic_id == record.topic_id:
                    del live[name]
        offsets.append(record.offset)
        images.append(dict(live))
    return offsets, images


def _image_at(offsets: list[int], images: list[dict[str, str]], offset: int) -> dict[str, str]:
    from bisect import bisect_right  # noqa: PLC0415 - only this helper needs it

    position = bisect_right(offsets, offset)
    return images[position - 1] if position else {}


def check_lists(
    operations: Sequence[Operation], witness: Sequence[WitnessRecord], log_start: int = 0
) -> list[str]:
    """Each ListTopics answer (and each describe answer that carries an offset) equals the
    committed log's image at that offset, restricted to the names the workload uses; for a
    ListTopics, that offset is no older than a write acknowledged before the list began and
    older than every acknowledged write invoked after it completed. A ``witness`` log that
    starts at ``log_start`` (after a snapshot) says nothing about reads before it."""
    problems: list[str] = []
    offsets, images = _images(witness)
    names = {o.name for o in operations if o.name is not None}
    acknowledged = [
        o for o in operations if o.kind in WRITES and o.status is Status.OK and o.offset is not None
    ]
    for o in operations:
        if o.status is not Status.OK or o.offset is None or o.kind not in READS:
            continue
        if log_start > 0:
            continue  # the image before the log start is in a snapshot, not in the witness
        image = _image_at(offsets, images, o.offset)
        if o.kind is Kind.LIST:
            listed = dict(o.listed or ())
            wanted = {n: i for n, i in image.items() if n in names or n in listed}
            if listed != wanted:
                problems.append(
                    f"list #{o.op_id} at offset {o.offset} on {o.node} answered "
                    f"{sorted(listed.items())}, the log's image there is {sorted(wanted.items())}"
                )
            assert o.complete_ns is not None
            for w in acknowledged:
                assert w.complete_ns is not None and w.offset is not None
                if w.complete_ns < o.invoke_ns and w.offset > o.offset:
                    problems.append(
                        f"list #{o.op_id} at offset {o.offset} misses write #{w.op_id} "
                        f"(offset {w.offset}) acknowledged before the list began"
                    )
                if w.invoke_ns > o.complete_ns and w.offset <= o.offset:
                    problems.append(
                        f"list #{o.op_id} at offset {o.offset} includes write #{w.op_id} "
                        f"(offset {w.offset}) invoked after the list completed"
                    )
        elif o.kind is Kind.DESCRIBE_NAME:
            if image.get(o.name or "") != o.topic_id:
                problems.append(
                    f"describe #{o.op_id} of {o.name} at offset {o.offset} on {o.node} answered "
                    f"{o.topic_id}, the log's image there has {image.get(o.name or '')}"
                )
        elif o.kind is Kind.DESCRIBE_ID and image.get(o.name or "") != o.topic_id:
            problems.append(
                f"describe #{o.op_id} of id {o.topic_id} at offset {o.offset} on {o.node}: the "
                f"log's image there has {image.get(o.name or '')} for {o.name}"
            )
    return problems


def check_monotonic_reads(operations: Sequence[Operation]) -> list[str]:
    """Reads answered by one node never go back: a read invoked after another read on the same
    node completed (any client) sees at least its offset."""
    problems: list[str] = []
    by_node: dict[str, list[Operation]] = defaultdict(list)
    for o in operations:
        if o.kind in READS and o.status is not Status.UNKNOWN and o.offset is not None:
            by_node[o.node or ""].append(o)
    for node, reads in sorted(by_node.items()):
        completed = sorted(reads, key=lambda o: o.complete_ns or 0)
        newest: Operation | None = None  # the highest offset among reads completed so far
        index = 0
        for o in sorted(reads, key=lambda o: o.invoke_ns):
            while index < len(completed) and (completed[index].complete_ns or 0) < o.invoke_ns:
                done = completed[index]
                if newest is None or (done.offset or 0) > (newest.offset or 0):
                    newest = done
                index += 1
            if newest is not None and o.offset is not None and o.offset < (newest.offset or 0):
                problems.append(
                    f"{node}: read #{o.op_id} (client {o.client}) saw offset {o.offset} after "
                    f"read #{newest.op_id} (client {newest.client}) there had seen "
                    f"{newest.offset}"
                )
    return problems


def check_witness(
    operations: Sequence[Operation],
    witnesses: dict[str, list[WitnessRecord]],
    log_starts: dict[str, int] | None = None,
) -> list[str]:
    """Every acknowledged write is in every controller's committed log exactly once, no topic
    id is created twice, and the committed logs agree where they overlap. ``log_starts``: where
    each node's log begins (what is before lives in its snapshot, checked elsewhere: I13); a
    write acknowledged at an earlier offset is not looked for in that node's log."""
    problems: list[str] = []
    starts = log_starts or {}
    for node, witness in sorted(witnesses.items()):
        start = starts.get(node, 0)
        creates: dict[str, list[WitnessRecord]] = defaultdict(list)
        deletes: dict[str, list[WitnessRecord]] = defaultdict(list)
        for record in witness:
            (creates if record.kind == "create" else deletes)[record.topic_id].append(record)
        for topic_id, records in creates.items():
            if len(records) > 1:
                problems.append(f"{node}: topic id {topic_id} created {len(records)} times")
        for o in operations:
            if o.status is not Status.OK or o.kind not in WRITES:
                continue
            if o.offset is not None and o.offset < start:
                continue
            if o.kind is Kind.CREATE:
                found = creates.get(o.topic_id or "", [])
                if len(found) != 1 or found[0].name != o.name:
                    problems.append(
                        f"{node}: acknowledged create #{o.op_id} of {o.name} ({o.topic_id}) is "
                        f"in the committed log {len(found)} times - an acknowledged write lost"
                    )
                elif o.offset is not None and found[0].offset != o.offset:
                    problems.append(
                        f"{node}: create #{o.op_id} was acknowledged at offset {o.offset}, its "
                        f"record is at {found[0].offset}"
                    )
            else:
                found = deletes.get(o.topic_id or "", [])
                if len(found) != 1:
                    problems.append(
                        f"{node}: acknowledged {o.kind} #{o.op_id} of {o.name} ({o.topic_id}) "
                        f"is in the committed log {len(found)} times - an acknowledged write lost"
                    )
    common_start = max(starts.values(), default=0)
    # Names are left out: a log that starts after a topic's creation cannot name its delete.
    logs = sorted(
        (n, [(r.offset, r.kind, r.topic_id) for r in w if r.offset >= common_start])
        for n, w in witnesses.items()
    )
    for (node_a, a), (node_b, b) in pairwise(logs):
        common = min(len(a), len(b))
        if a[:common] != b[:common]:
            first = next(i for i in range(common) if a[i] != b[i])
            problems.append(
                f"{node_a} and {node_b} disagree at topic record {first}: {a[first]} vs {b[first]}"
            )
    return problems
