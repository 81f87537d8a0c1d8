"""The I/O shell around the pure Raft core: one asyncio task owns the ``RaftNode``.

The loop is the one ``quorum.raft.node`` documents, in the order ``quorum.raft.ready_plan``
plans it (the simulator follows the same plan)::

    step every queued envelope -> poll -> plan_ready -> send what may leave early (a leader's
    Fetch responses) -> persist (fsync, off the event loop) -> send the rest -> apply
    -> advance -> sleep until next_poll_at_ms or the next envelope

gRPC handlers never touch the node: they enqueue an ``Envelope`` and await a future that the
loop resolves when the core answers. While an fsync runs in a worker thread, new requests and
proposals queue up and share the next batch and the next fsync (group commit).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import time
from collections.abc import Callable, Coroutine, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import grpc
import structlog

from quorum import limits
from quorum.metadata.batch import LogBatch
from quorum.metadata.records import Record
from quorum.raft.messages import Envelope, Message, RequestFailed
from quorum.raft.node import BatchTooLargeError, NotLeaderError, Proposal, RaftNode, Ready
from quorum.raft.ready_plan import ReadyPlan, plan_ready, propose_in_batches
from quorum.storage import ElectionStore, SegmentedLog

# Inbound requests get correlation ids from their own range, far from the core's outbound ids.
INBOUND_CORRELATION_BASE = 1 << 48


class Clock:
    """Monotonic milliseconds for the core; wall milliseconds for humans."""

    def now_ms(self) -> int:
        return time.monotonic_ns() // 1_000_000

    def to_wall_ms(self, monotonic_ms: int) -> int:
        return int(time.time() * 1000) - (self.now_ms() - monotonic_ms)


class ShuttingDownError(Exception):
    retriable = True


class InboxFullError(Exception):
    retriable = True


T = TypeVar("T")

# An operation of the active controller: given the offset its first record will get, it
# returns the records to append (possibly none) and the answer for its caller. It runs inside
# the driver loop, so operations are serialized against each other and against replay.
Operation = Callable[[int], tuple[Sequence[Record], T]]


@dataclass
class _Submitted:
    operation: Operation[Any]
    future: asyncio.Future[tuple[Proposal | None, Any]]


@dataclass
class _Commit:
    proposal: Proposal
    future: asyncio.Future[int]


SendRequest = Callable[[Envelope], Coroutine[Any, Any, Message]]


class RaftDriver:
    """Runs one node: owns its ``RaftNode``, its log and its quorum-state file."""

    def __init__(
        self,
        *,
        node: RaftNode,
        log: SegmentedLog,
        election_store: ElectionStore | None,
        send_request: SendRequest,
        clock: Clock,
        on_committed: Callable[[Sequence[LogBatch]], None] | None = None,
        on_ready: Callable[[Ready], None] | None = None,
        on_proposed: Callable[[Sequence[Record], Proposal], None] | None = None,
    ) -> None:
        self.node = node
        self.log = log
        self.election_store = election_store
        self._send_request = send_request
        self.clock = clock
        self._on_committed = on_committed
        self._on_ready = on_ready
        self._on_proposed = on_proposed
        self._inbox: asyncio.Queue[Envelope] = asyncio.Queue(maxsize=limits.INBOX_ENVELOPES_MAX)
        self._operations: list[_Submitted] = []
        self._calls: list[tuple[Callable[[], Any], asyncio.Future[Any]]] = []
        self._replies: dict[int, asyncio.Future[Message]] = {}
        self._commits: list[_Commit] = []
        self._inbound_ids = itertools.count(INBOUND_CORRELATION_BASE)
        self._wakeup = asyncio.Event()
        self._stopping = False
        self._resign_requested = False
        self._tasks: set[asyncio.Task[None]] = set()
        self.log_events = structlog.get_logger("quorum.raft").bind(node_id=node.node_id)
        # Observers of the loop (health, tests, metrics): called after each Ready.
        self.high_watermark = node.high_watermark
        self.ready_count = 0
        self._state_changed = asyncio.Condition()

    # ----- API for handlers ------------------------------------------------------------------

    async def request(self, source: int, message: Message, timeout_s: float) -> Message:
        """Hand an inbound request to the core; return its answer."""
        if self._stopping:
            raise ShuttingDownError("the node is shutting down")
        correlation_id = next(self._inbound_ids)
        future: asyncio.Future[Message] = asyncio.get_running_loop().create_future()
        self._replies[correlation_id] = future
        try:
            self._inbox.put_nowait(Envelope(source, self.node.node_id, correlation_id, message))
        except asyncio.QueueFull as exc:
            del self._replies[correlation_id]
            raise InboxFullError(f"inbox full ({limits.INBOX_ENVELOPES_MAX} envelopes)") from exc
        self._wakeup.set()
        try:
            return await asyncio.wait_for(future, timeout_s)
        finally:
            self._replies.pop(correlation_id, None)

    async def submit(self, operation: Operation[T]) -> tuple[Proposal | None, T]:
        """Run ``operation`` in the loop while this node leads; append its records as one
        atomic batch. Returns where they will land (None when there were none) and the
        operation's answer. Raises ``NotLeaderError`` when this node does not lead."""
        if self._stopping:
            raise ShuttingDownError("the node is shutting down")
        future: asyncio.Future[tuple[Proposal | None, Any]] = (
            asyncio.get_running_loop().create_future()
        )
        self._operations.append(_Submitted(operation, future))
        self._wakeup.set()
        proposal, answer = await future
        return proposal, answer

    async def call_in_loop(self, function: Callable[[], T]) -> T:
        """Run ``function`` in the loop between two Readies (when the node may be changed:
        compaction, installing a snapshot). Returns its result."""
        if self._stopping:
            raise ShuttingDownError("the node is shutting down")
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._calls.append((function, future))
        self._wakeup.set()
        result: T = await future
        return result

    async def propose(self, records: Sequence[Record]) -> Proposal:
        """Append ``records`` as one atomic batch; returns where they will land."""
        proposal, _ = await self.submit(lambda _offset: (records, None))
        assert proposal is not None
        return proposal

    async def wait_committed(self, proposal: Proposal) -> int:
        """Wait until the proposal is committed in its epoch. Returns the high watermark then.
        Raises ``NotLeaderError`` if leadership was lost before (the outcome is unknown)."""
        future: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        self._commits.append(_Commit(proposal, future))
        self._wakeup.set()
        return await future

    async def wait_for(self, condition: Callable[[], bool], timeout_s: float) -> bool:
        """Wait until ``condition()`` holds after some Ready; False on timeout."""
        async with self._state_changed:
            try:
                await asyncio.wait_for(self._state_changed.wait_for(condition), timeout_s)
            except TimeoutError:
                return False
        return True

    # ----- the loop --------------------------------------------------------------------------

    async def run(self) -> None:
        node = self.node
        while True:
            now = self.clock.now_ms()
            while not self._inbox.empty():
                node.step(self._inbox.get_nowait(), now)
            if self._resign_requested:
                self._resign_requested = False
                node.resign(now)
            calls, self._calls = self._calls, []
            for function, call_future in calls:
                if not call_future.done():
                    call_future.set_result(function())
            self._run_operations(now)
            ready = node.poll(now)
            plan = plan_ready(ready)
            self._dispatch(plan.send_before_flush)
            await self._persist(plan)
            self._dispatch(plan.send_after_flush)
            self._apply(plan)
            node.advance(ready)
            self.ready_count += 1
            self.high_watermark = ready.high_watermark
            self._log_events(ready)
            if self._on_ready is not None:
                self._on_ready(ready)
            async with self._state_changed:
                self._state_changed.notify_all()
            if self._stopping:
                return
            if not self._inbox.empty() or self._operations or self._calls:
                continue
            delay_s = max(0, ready.next_poll_at_ms - self.clock.now_ms()) / 1000
            self._wakeup.clear()
            if not self._inbox.empty() or self._operations or self._calls:
                continue
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wakeup.wait(), delay_s)

    def _run_operations(self, now: int) -> None:
        operations, self._operations = self._operations, []
        node = self.node
        for submitted in operations:
            future = submitted.future
            if future.done():
                continue
            if not node.is_leader():
                future.set_exception(NotLeaderError(node.leader_id, node.epoch))
                continue
            records, answer = submitted.operation(node.next_offset())
            proposal = None
            if records:
                try:
                    proposal = propose_in_batches(node, records, now)
                except BatchTooLargeError as exc:
                    future.set_exception(exc)
                    continue
                if self._on_proposed is not None:
                    self._on_proposed(records, proposal)
            future.set_result((proposal, answer))

    async def _persist(self, plan: ReadyPlan) -> None:
        """Make the plan's election state and entries durable (before ``send_after_flush``)."""
        if plan.election_to_persist is not None:
            assert self.election_store is not None, "an observer never persists election state"
            await asyncio.to_thread(self.election_store.write, plan.election_to_persist)
        if plan.truncate_to is not None:
            # The core checked the high watermark; storage checks again (I7).
            self.log.truncate_to(plan.truncate_to, high_watermark=0)
        if plan.entries_to_append:
            self.log.append(plan.entries_to_append)
            await asyncio.to_thread(self.log.flush)

    def _dispatch(self, envelopes: Sequence[Envelope]) -> None:
        for envelope in envelopes:
            future = self._replies.pop(envelope.correlation_id, None)
            if envelope.correlation_id >= INBOUND_CORRELATION_BASE:
                if future is not None and not future.done():
                    future.set_result(envelope.message)
                continue
            task = asyncio.create_task(self._send(envelope))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _send(self, envelope: Envelope) -> None:
        try:
            answer = await self._send_request(envelope)
        except (grpc.aio.AioRpcError, OSError, TimeoutError, ValueError) as exc:
            # ValueError: a peer's malformed answer (transport.MalformedMessageError) or a
            # request the wire cannot encode; a failed request, never a silently dead task.
            code = exc.code().name if isinstance(exc, grpc.aio.AioRpcError) else type(exc).__name__
            answer = RequestFailed(code)
        except asyncio.CancelledError:
            return
        reply = Envelope(envelope.destination, envelope.source, envelope.correlation_id, answer)
        with contextlib.suppress(asyncio.QueueFull):
            self._inbox.put_nowait(reply)
            self._wakeup.set()

    def _apply(self, plan: ReadyPlan) -> None:
        if plan.committed_batches and self._on_committed is not None:
            self._on_committed(plan.committed_batches)
        if not self._commits:
            return
        still: list[_Commit] = []
        node = self.node
        for commit in self._commits:
            proposal = commit.proposal
            if commit.future.done():
                continue
            if plan.high_watermark > proposal.last_offset:
                if node.log.epoch_of(proposal.last_offset) == proposal.epoch:
                    commit.future.set_result(plan.high_watermark)
                else:
                    commit.future.set_exception(NotLeaderError(node.leader_id, node.epoch))
            elif node.epoch != proposal.epoch or not node.is_leader():
                # Leadership moved on before the proposal committed: its fate is unknown.
                commit.future.set_exception(NotLeaderError(node.leader_id, node.epoch))
            else:
                still.append(commit)
        self._commits = still

    def _log_events(self, ready: Ready) -> None:
        if not ready.events:
            return
        node = self.node
        log = self.log_events.bind(epoch=node.epoch, state=node.state.name)
        for event in ready.events:
            fields = {k: v for k, v in event.fields.items() if k != "epoch"}
            if event.name.startswith(
                ("inconsistent_", "check_quorum", "request_rejected", "response_rejected", "epoch_")
            ):
                log.warning(event.name, **fields)
            else:
                log.info(event.name, **fields)

    # ----- shutdown --------------------------------------------------------------------------

    async def resign_and_wait(self, timeout_s: float) -> bool:
        """Graceful shutdown of a leader: EndQuorumEpoch, then wait (bounded) until another
        voter leads. Returns whether a successor was seen."""
        if not self.node.is_leader():
            return True
        self._resign_requested = True
        self._wakeup.set()
        node = self.node
        epoch = node.epoch
        return await self.wait_for(
            lambda: node.epoch > epoch and node.leader_id not in (None, node.node_id), timeout_s
        )

    def stop(self) -> None:
        self._stopping = True
        self._wakeup.set()
        for task in list(self._tasks):
            task.cancel()
        for future in self._replies.values():
            if not future.done():
                future.set_exception(ShuttingDownError("the node is shutting down"))
        for _, call_future in self._calls:
            if not call_future.done():
                call_future.set_exception(ShuttingDownError("the node is shutting down"))
        for submitted in self._operations:
            if not submitted.future.done():
                submitted.future.set_exception(ShuttingDownError("the node is shutting down"))
        for commit in self._commits:
            if not commit.future.done():
                commit.future.set_exception(ShuttingDownError("the node is shutting down"))
