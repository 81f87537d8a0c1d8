"""The asyncio driver around the core, in-process with a real log on disk (one voter), and the
pure per-Ready plan it shares with the simulator (``quorum.raft.ready_plan``)."""

from __future__ import annotations

import asyncio
import random
import time
from pathlib import Path
from typing import Any

import grpc
import pytest
from structlog.testing import capture_logs

from quorum import limits
from quorum.errors import ErrorCode
from quorum.ids import METADATA_TOPIC_ID
from quorum.metadata.batch import LogBatch, decode_batch, encode_batch
from quorum.metadata.records import ConfigRecord, ConfigResourceType, NoOpRecord, Record
from quorum.raft import ready_plan
from quorum.raft.config import RaftConfig
from quorum.raft.election import ElectionState
from quorum.raft.messages import (
    DivergingEpoch,
    Envelope,
    FetchRequest,
    FetchResponse,
    Message,
    RequestHeader,
    VoteRequest,
    VoteResponse,
)
from quorum.raft.node import Proposal, RaftNode, Ready
from quorum.raft.ready_plan import plan_ready, propose_in_batches
from quorum.server import driver as driver_module
from quorum.server.driver import (
    Clock,
    Operation,
    OperationQueueFullError,
    RaftDriver,
    ShuttingDownError,
    TooManyWaitersError,
    peer_gone,
)
from quorum.storage import ElectionStore, SegmentedLog
from quorum.wire.scalars import MalformedMessageError

HEADER = RequestHeader("driver-test", METADATA_TOPIC_ID, 0)


async def _no_peers(envelope: Envelope) -> Message:
    raise OSError("single-voter test: no peers")


def make_driver(directory: Path, config: RaftConfig | None = None) -> RaftDriver:
    log = SegmentedLog.open(directory)
    store = ElectionStore(directory / "quorum-state")
    clock = Clock()
    node = RaftNode(
        node_id=1,
        voters=frozenset({1}),
        cluster_id="driver-test",
        config=config
        or RaftConfig(election_timeout_ms=50, fetch_timeout_ms=200, fetch_max_wait_ms=100),
        rng=random.Random(1),
        now_ms=clock.now_ms(),
        election_state=store.read(),
        batches=list(log.read_all()),
    )
    return RaftDriver(node=node, log=log, election_store=store, send_request=_no_peers, clock=clock)


def records(n: int, tag: str) -> list[Record]:
    return [ConfigRecord(ConfigResourceType.TOPIC, f"{tag}-{i}", "k", str(i)) for i in range(n)]


async def run_session(directory: Path, proposals: int) -> tuple[int, int, int]:
    """Start, wait for leadership, make ``proposals`` concurrent proposals, wait for all to
    commit; returns (batches appended for them, log end offset, high watermark)."""
    driver = make_driver(directory)
    task = asyncio.create_task(driver.run())
    assert await driver.wait_for(driver.node.is_leader, 5)
    placed = await asyncio.gather(*(driver.propose(records(2, f"p{i}")) for i in range(proposals)))
    await asyncio.gather(*(driver.wait_committed(p) for p in placed))
    batch_count = len({driver.node.log.batch_index(p.base_offset) for p in placed})
    end, hw = driver.node.log_end_offset, driver.node.high_watermark
    driver.stop()
    await task
    driver.log.close()
    return batch_count, end, hw


def test_concurrent_proposals_share_batches_and_survive_restart(tmp_path: Path) -> None:
    batch_count, end, hw = asyncio.run(run_session(tmp_path, proposals=200))
    assert hw == end
    # Group commit: 200 proposals arriving together go out in far fewer batches.
    assert batch_count < 200
    reopened = SegmentedLog.open(tmp_path)
    stored = list(reopened.read_all())
    reopened.close()
    assert stored[-1].end_offset >= end
    values = {
        r.resource_name
        for b in stored
        for r in decode_batch(b.data).records
        if isinstance(r, ConfigRecord)
    }
    assert {f"p{i}-{j}" for i in range(200) for j in range(2)} <= values
    # A restart keeps the log and the epoch moves on.
    _, end_again, _ = asyncio.run(run_session(tmp_path, proposals=1))
    assert end_again > end


# ----- the per-Ready plan ---------------------------------------------------------------------

FETCH_ANSWER = Envelope(1, 2, 7, FetchResponse(ErrorCode.NONE, 1, 3, 0, 0))
VOTE_ANSWER = Envelope(1, 3, 8, VoteResponse(ErrorCode.NONE, None, 3, True))
ENTRY = LogBatch(0, 3, 1, b"x")


def ready_of(*, election: ElectionState | None = None, entries: tuple[LogBatch, ...] = ()) -> Ready:
    return Ready(
        election_to_persist=election,
        truncate_to=None,
        entries_to_append=entries,
        messages_to_send=(FETCH_ANSWER, VOTE_ANSWER),
        committed_batches=(),
        high_watermark=0,
        next_poll_at_ms=0,
        events=(),
    )


def test_plan_sends_only_fetch_responses_before_a_log_flush() -> None:
    plan = plan_ready(ready_of(entries=(ENTRY,)))
    assert plan.needs_flush
    assert plan.send_before_flush == (FETCH_ANSWER,)
    assert plan.send_after_flush == (VOTE_ANSWER,)
    assert plan.entries_to_append == (ENTRY,)


def test_plan_keeps_everything_after_persisting_election_state() -> None:
    election = ElectionState(3, None, 1, frozenset({1, 2, 3}))
    plan = plan_ready(ready_of(election=election, entries=(ENTRY,)))
    assert plan.needs_flush and plan.election_to_persist == election
    assert plan.send_before_flush == ()
    assert plan.send_after_flush == (FETCH_ANSWER, VOTE_ANSWER)


def test_plan_without_anything_to_persist_sends_everything_at_once() -> None:
    plan = plan_ready(ready_of())
    assert not plan.needs_flush
    assert plan.send_before_flush + plan.send_after_flush == (FETCH_ANSWER, VOTE_ANSWER)


def test_unsafe_switch_is_off_and_sends_everything_early(monkeypatch: pytest.MonkeyPatch) -> None:
    assert ready_plan.UNSAFE_SEND_ALL_BEFORE_FLUSH is False
    monkeypatch.setattr(ready_plan, "UNSAFE_SEND_ALL_BEFORE_FLUSH", True)
    plan = plan_ready(ready_of(entries=(ENTRY,)))
    assert plan.send_before_flush == (FETCH_ANSWER, VOTE_ANSWER)
    assert plan.send_after_flush == ()


def test_propose_in_batches_splits_only_what_does_not_fit_in_one_batch() -> None:
    node = RaftNode(
        node_id=1,
        voters=frozenset({1}),
        cluster_id="plan-test",
        config=RaftConfig(records_per_batch_max=2, adaptive_batching=False),
        rng=random.Random(1),
        now_ms=0,
        election_state=None,
        batches=[],
    )
    now = 0
    while not node.is_leader():
        now += 100
        node.advance(node.poll(now))
    start = node.next_offset()
    one = propose_in_batches(node, records(2, "one"), now)
    assert (one.base_offset, one.last_offset) == (start, start + 1)
    many = propose_in_batches(node, records(5, "many"), now)
    assert (many.epoch, many.base_offset, many.last_offset) == (node.epoch, start + 2, start + 6)
    ready = node.poll(now)
    sizes = [b.record_count for b in ready.entries_to_append if b.base_offset >= start]
    assert sizes == [2, 2, 2, 1]
    node.advance(ready)


# ----- bounds at the edge: queued operations, waiting reads, send failures ----------------------


async def leading_driver(
    directory: Path, config: RaftConfig | None = None
) -> tuple[RaftDriver, asyncio.Task[None]]:
    driver = make_driver(directory, config)
    task = asyncio.create_task(driver.run())
    assert await driver.wait_for(driver.node.is_leader, 5)
    return driver, task


async def stop(driver: RaftDriver, task: asyncio.Task[None]) -> None:
    driver.stop()
    await task
    driver.log.close()


def test_one_turn_runs_operations_only_up_to_the_record_budget(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(limits, "CONTROLLER_OPERATION_RECORDS_PER_TURN_MAX", 10)

    async def main() -> list[int]:
        driver, task = await leading_driver(tmp_path)
        turns: list[int] = []

        def operation(tag: str) -> Operation[None]:
            def run(_next_offset: int) -> tuple[list[Record], None]:
                turns.append(driver.ready_count)
                return records(6, tag), None

            return run

        placed = await asyncio.gather(
            *(driver.submit(operation(f"op{i}"), from_client=True) for i in range(8))
        )
        await asyncio.gather(*(driver.wait_committed(p) for p, _ in placed if p is not None))
        await stop(driver, task)
        return turns

    turns = asyncio.run(main())
    assert len(turns) == 8
    # 6 records each and a budget of 10: two operations per turn (the second passes it).
    per_turn = [turns.count(t) for t in sorted(set(turns))]
    assert per_turn == [2, 2, 2, 2], turns


def test_a_busy_leader_gathers_operations_while_its_open_batch_waits(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """While the open batch waits anyway (the core says until when), operations submitted one
    by one are run together in one turn instead of one turn each; without a waiting batch
    each runs at once; and a queue of OPERATIONS_GATHERED_MAX runs without waiting more."""
    monkeypatch.setattr(driver_module, "OPERATIONS_GATHERED_MAX", 6)

    async def main() -> None:
        driver, task = await leading_driver(tmp_path)
        waits_until: list[int | None] = [None]
        monkeypatch.setattr(
            driver.node, "open_batch_waits_until_ms", lambda _now, _queued=0: waits_until[0]
        )
        turns: list[int] = []

        def operation(_next_offset: int) -> tuple[list[Record], None]:
            turns.append(driver.ready_count)
            return [], None

        async def submit_one_by_one(count: int) -> list[asyncio.Future[Any]]:
            submitted = []
            for _ in range(count):
                submitted.append(asyncio.ensure_future(driver.submit(operation, from_client=True)))
                for _ in range(10):  # the loop gets every chance to turn in between
                    await asyncio.sleep(0)
            return submitted

        await asyncio.gather(*await submit_one_by_one(4))
        assert len(set(turns)) == 4, turns  # no batch waits: one turn each
        turns.clear()
        waits_until[0] = driver.clock.now_ms() + 60_000
        pending = await submit_one_by_one(5)
        # The first rang the idle loop; the others wait to be gathered (a turn the node's
        # own timers ask for in between may run some of them).
        assert 1 <= len(turns) < 5, turns
        assert not all(f.done() for f in pending)
        pending += await submit_one_by_one(6)  # the queue reaches the bound: run at once
        await asyncio.wait_for(asyncio.gather(*pending), 5)
        assert len(set(turns)) <= 4, turns  # 11 operations, far fewer turns
        await stop(driver, task)

    asyncio.run(main())


# timing: after a 50 ms sleep the loop must still have more than 500 ms to wait; in the second
# full scripts/test (load average up to 12, other worktrees' suites) the sleep took ~800 ms.
@pytest.mark.timing
def test_deadlines_are_kept_by_the_loop_even_while_it_sleeps(tmp_path: Path) -> None:
    """A caller's deadline (``submit``, ``wait_committed``) fails its future with TimeoutError
    once passed, even when the loop would otherwise sleep far longer (a leader with nothing
    to do for about a second); an operation whose deadline passed never runs; and the
    deadlines of callers answered long before theirs do not pile up."""

    async def main() -> None:
        quiet = RaftConfig(election_timeout_ms=50, idle_interval_ms=60_000)
        driver, task = await leading_driver(tmp_path, quiet)
        ran: list[int] = []

        def operation(next_offset: int) -> tuple[list[Record], None]:
            ran.append(next_offset)
            return [], None

        # Many callers answered at once, each with a deadline a minute away.
        far = time.monotonic() + 60
        for _ in range(3 * driver_module.DEADLINES_PRUNED_FROM):
            await driver.submit(operation, from_client=True, deadline_s=far)
        assert len(driver._deadlines) <= driver_module.DEADLINES_PRUNED_FROM + 1
        ran.clear()

        # A deadline already passed: the operation is refused before it runs.
        with pytest.raises(TimeoutError):
            await driver.submit(operation, from_client=True, deadline_s=time.monotonic() - 1)
        assert ran == []

        # A commit that never comes, while the loop has nothing to do for about a second.
        await asyncio.sleep(0.05)
        assert driver._waiting_until_s is not None
        assert driver._waiting_until_s - time.monotonic() > 0.5
        never = Proposal(driver.node.epoch, 10**9, 10**9)  # far beyond the log end
        started = time.monotonic()
        with pytest.raises(TimeoutError):
            await driver.wait_committed(never, deadline_s=started + 0.05)
        assert 0.04 <= time.monotonic() - started < 0.45
        await driver.submit(operation, from_client=True)  # the loop goes on
        assert len(ran) == 1
        await stop(driver, task)

    asyncio.run(main())


def test_a_follower_acknowledges_before_it_applies(tmp_path: Path) -> None:
    """A follower's next Fetch says what it made durable, and the leader's commit (so the
    client's answer) waits for it: the follower sends it before it applies the batches the
    previous answer committed, not after."""
    events: list[str] = []
    leader_batches = [
        encode_batch(base_offset=i, epoch=1, timestamp_ms=0, records=[NoOpRecord()])
        for i in range(2)
    ]
    done = asyncio.Event()

    async def leader(envelope: Envelope) -> Message:
        request = envelope.message
        assert isinstance(request, FetchRequest), request
        offset = request.fetch_offset
        events.append(f"fetch {offset}")
        if offset >= len(leader_batches):
            await done.wait()  # parked: nothing new
            offset = len(leader_batches) - 1
        # One batch per answer; the high watermark is what the follower had when it asked.
        return FetchResponse(
            ErrorCode.NONE, 1, 1, request.fetch_offset, 0, batches=(leader_batches[offset],)
        )

    async def main() -> None:
        log = SegmentedLog.open(tmp_path)
        clock = Clock()
        voters = frozenset({1, 2, 3})
        node = RaftNode(
            node_id=2,
            voters=voters,
            cluster_id="driver-test",
            config=RaftConfig(),
            rng=random.Random(1),
            now_ms=clock.now_ms(),
            election_state=ElectionState(epoch=1, leader_id=1, voted_id=None, voters=voters),
            batches=[],
        )
        driver = RaftDriver(
            node=node,
            log=log,
            election_store=ElectionStore(tmp_path / "quorum-state"),
            send_request=leader,
            clock=clock,
            on_committed=lambda batches: events.extend(f"apply {b.base_offset}" for b in batches),
        )
        task = asyncio.create_task(driver.run())
        reached = await driver.wait_for(lambda: "fetch 2" in events and "apply 0" in events, 5)
        assert reached, (events, node.state)
        done.set()
        await stop(driver, task)

    asyncio.run(main())
    assert events[:4] == ["fetch 0", "fetch 1", "fetch 2", "apply 0"], events


def test_a_truncation_carries_the_cores_high_watermark_to_the_log(tmp_path: Path) -> None:
    """I7 holds in production: the driver truncates with the high watermark of the Ready
    (docs/architecture.md#fetch-and-the-high-watermark), so the log refuses a truncation below
    it and says where it stood. It passed 0, which switched that refusal off (and logged 0)."""
    fetches: list[tuple[int, int]] = []
    done = asyncio.Event()

    async def leader(envelope: Envelope) -> Message:
        request = envelope.message
        assert isinstance(request, FetchRequest), request
        fetches.append((request.fetch_offset, request.last_fetched_epoch))
        if len(fetches) == 1:  # the high watermark: offsets 0 and 1, of epoch 1
            return FetchResponse(ErrorCode.NONE, 1, 3, 2, 0)
        if len(fetches) == 2:  # the deposed leader's epoch 2 is not in the leader's log
            return FetchResponse(ErrorCode.NONE, 1, 3, 2, 0, DivergingEpoch(1, 2))
        await done.wait()  # parked: nothing new
        return FetchResponse(ErrorCode.NONE, 1, 3, 2, 0)

    async def main() -> list[dict[str, Any]]:
        log = SegmentedLog.open(tmp_path)
        log.append(
            [
                encode_batch(base_offset=i, epoch=epoch, timestamp_ms=0, records=[NoOpRecord()])
                for i, epoch in enumerate((1, 1, 2, 2))
            ]
        )
        log.flush()
        clock = Clock()
        voters = frozenset({1, 2, 3})
        node = RaftNode(
            node_id=2,
            voters=voters,
            cluster_id="driver-test",
            config=RaftConfig(),
            rng=random.Random(1),
            now_ms=clock.now_ms(),
            election_state=ElectionState(epoch=3, leader_id=1, voted_id=None, voters=voters),
            batches=list(log.read_all()),
        )
        driver = RaftDriver(
            node=node,
            log=log,
            election_store=ElectionStore(tmp_path / "quorum-state"),
            send_request=leader,
            clock=clock,
        )
        with capture_logs() as logs:
            task = asyncio.create_task(driver.run())
            assert await driver.wait_for(lambda: len(fetches) >= 3, 5), fetches
            done.set()
            await stop(driver, task)
        return [e for e in logs if e["event"] == "log_truncated"]

    truncated = asyncio.run(main())
    assert fetches == [(4, 2), (4, 2), (2, 1)]
    assert [(e["log_end_offset"], e["high_watermark"]) for e in truncated] == [(2, 2)]


def test_replies_dropped_by_a_full_inbox_are_logged_throttled_and_counted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A peer's answer that finds the inbox full is lost (the core retries after its request
    timeout, as after a lost message); it is counted, and logged: the first, then one per
    thousand (``quorum.logs.LogThrottle``)."""
    monkeypatch.setattr(limits, "INBOX_ENVELOPES_MAX", 2)

    async def peer(envelope: Envelope) -> Message:
        return VoteResponse(ErrorCode.NONE, None, 1, True, False)

    async def main() -> tuple[RaftDriver, list[dict[str, Any]]]:
        driver = make_driver(tmp_path)
        driver._send_request = peer
        vote = VoteRequest(HEADER, 2, 1, 0, 0, False, 2, None, None)
        while not driver._inbox.full():  # no loop runs to empty it
            driver._inbox.put_nowait(Envelope(2, 1, 1 << 50, vote))
        with capture_logs() as logs:
            for correlation_id in range(1_001):
                await driver._send(Envelope(1, 2, correlation_id, vote))
        driver.log.close()
        return driver, [e for e in logs if e["event"] == "reply_dropped"]

    driver, logged = asyncio.run(main())
    assert driver.replies_dropped == 1_001
    assert [e["dropped_so_far"] for e in logged] == [1, 1_000]
    assert {(e["peer"], e["response"], e["log_level"]) for e in logged} == {
        (2, "VoteResponse", "warning")
    }


def test_a_full_operation_queue_refuses_clients_but_not_the_controller(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(limits, "CONTROLLER_OPERATIONS_QUEUED_MAX", 3)

    async def main() -> None:
        driver, task = await leading_driver(tmp_path)
        noop: Operation[None] = lambda _offset: ((), None)  # noqa: E731
        # The loop does not run between these calls: all of them are queued at once.
        queued = [asyncio.ensure_future(driver.submit(noop, from_client=True)) for _ in range(3)]
        await asyncio.sleep(0)
        with pytest.raises(OperationQueueFullError, match="at most 3"):
            await driver.submit(noop, from_client=True)
        internal = asyncio.ensure_future(driver.submit(noop))  # the controller's own: accepted
        assert [await f for f in queued] == [(None, None)] * 3
        assert await internal == (None, None)
        # Drained: clients are accepted again.
        assert await driver.submit(noop, from_client=True) == (None, None)
        await stop(driver, task)

    asyncio.run(main())


def test_waiting_reads_wake_by_offset_and_are_bounded(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(limits, "METADATA_OFFSET_WAITERS_MAX", 3)

    async def main() -> None:
        driver, task = await leading_driver(tmp_path)
        applied = [10]
        far = asyncio.ensure_future(driver.wait_for_offset(10**15, lambda: applied[0], 60))
        near = asyncio.ensure_future(driver.wait_for_offset(20, lambda: applied[0], 60))
        soon = asyncio.ensure_future(driver.wait_for_offset(15, lambda: applied[0], 0.05))
        await asyncio.sleep(0)
        assert await driver.wait_for_offset(10, lambda: applied[0], 0)  # reached: no wait
        with pytest.raises(TooManyWaitersError, match="at most 3"):
            await driver.wait_for_offset(11, lambda: applied[0], 60)
        assert await soon is False  # timed out, and it left the heap
        assert len(driver._offset_waiters) == 2
        applied[0] = 20
        await driver.propose(records(1, "wake"))  # a Ready wakes the waiters reached
        assert await near is True
        assert not far.done()
        driver.stop()
        with pytest.raises(ShuttingDownError):
            await far
        await task
        driver.log.close()

    asyncio.run(main())


def test_hundreds_of_waiters_timing_out_together_leave_the_loop_running(tmp_path: Path) -> None:
    """Reads queued at a leader that was paused all time out at once when it resumes. The loop
    must keep turning: linearizable reads (``read_index``) and later waits still complete, and
    the waiters that gave up are gone."""

    async def main() -> None:
        driver, task = await leading_driver(tmp_path)
        never = [
            asyncio.ensure_future(driver.wait_for(lambda: False, 0.05 + (i % 7) / 1000))
            for i in range(500)
        ]
        reads = [asyncio.ensure_future(driver.read_index(5)) for _ in range(50)]
        assert not any(await asyncio.gather(*never))
        indexes = await asyncio.gather(*reads)
        assert all(index == driver.node.high_watermark for index in indexes)
        flag = [False]
        later = asyncio.ensure_future(driver.wait_for(lambda: flag[0], 5))
        await asyncio.sleep(0.01)
        flag[0] = True
        await driver.propose(records(1, "after"))
        assert await later is True
        await driver.propose(records(1, "tick"))  # one more turn drops the waiters that left
        assert driver._condition_waiters == []
        with pytest.raises(ValueError, match="boom"):
            await driver.wait_for(lambda: (_ for _ in ()).throw(ValueError("boom")), 1)
        await stop(driver, task)

    asyncio.run(main())


@pytest.mark.parametrize(
    ("failure", "event", "level", "text"),
    [
        (RuntimeError("serializer exploded"), "send_failed", "error", "serializer exploded"),
        (
            MalformedMessageError("VoteResponse", "leader_epoch", "is negative"),
            "response_malformed",
            "warning",
            "leader_epoch",
        ),
    ],
)
def test_a_failing_send_is_logged_with_its_cause_and_the_node_carries_on(
    tmp_path: Path, failure: Exception, event: str, level: str, text: str
) -> None:
    async def broken(envelope: Envelope) -> Message:
        raise failure

    async def main() -> list[dict[str, object]]:
        log = SegmentedLog.open(tmp_path)
        store = ElectionStore(tmp_path / "quorum-state")
        clock = Clock()
        node = RaftNode(
            node_id=1,
            voters=frozenset({1, 2, 3}),
            cluster_id="driver-test",
            config=RaftConfig(election_timeout_ms=50, fetch_timeout_ms=200, fetch_max_wait_ms=100),
            rng=random.Random(1),
            now_ms=clock.now_ms(),
            election_state=store.read(),
            batches=[],
        )
        driver = RaftDriver(
            node=node, log=log, election_store=store, send_request=broken, clock=clock
        )
        with capture_logs() as logs:
            task = asyncio.create_task(driver.run())
            # The candidate keeps asking for votes: every send fails, the loop goes on.
            assert await driver.wait_for(lambda: len(failures(logs)) >= 4, 10)
            assert not task.done()
        await stop(driver, task)
        return failures(logs)

    def failures(logs: list[dict[str, object]]) -> list[dict[str, object]]:
        return [e for e in logs if e["event"] == event]

    logged = asyncio.run(main())
    assert {e["peer"] for e in logged} <= {2, 3}
    assert {e["request"] for e in logged} == {"VoteRequest"}
    assert all(text in str(e.get("error", e.get("problem"))) for e in logged)
    assert all(e["log_level"] == level for e in logged)


def _rpc_error(code: grpc.StatusCode, details: str) -> grpc.aio.AioRpcError:
    return grpc.aio.AioRpcError(code, grpc.aio.Metadata(), grpc.aio.Metadata(), details)


@pytest.mark.parametrize(
    ("error", "gone"),
    [
        (ConnectionRefusedError(), True),
        (ConnectionResetError(), True),
        (TimeoutError(), False),
        (_rpc_error(grpc.StatusCode.UNAVAILABLE, "failed to connect: Connection refused"), True),
        (_rpc_error(grpc.StatusCode.UNAVAILABLE, "Socket closed"), True),
        (_rpc_error(grpc.StatusCode.UNAVAILABLE, "Ssl handshake failed"), False),
        (_rpc_error(grpc.StatusCode.DEADLINE_EXCEEDED, "Deadline Exceeded"), False),
        (_rpc_error(grpc.StatusCode.RESOURCE_EXHAUSTED, "inbox full"), False),
    ],
    ids=lambda v: str(v)[:40],
)
def test_peer_gone_only_for_refused_or_reset_connections(error: BaseException, gone: bool) -> None:
    """What makes a follower start a pre-vote early (RequestFailed.peer_gone): only the OS
    saying nobody is there, never a deadline or an answer from a live peer."""
    assert peer_gone(error) is gone
