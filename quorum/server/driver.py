"""The I/O shell around the pure Raft core: one asyncio task owns the ``RaftNode``.

The loop is the one ``quorum.raft.node`` documents, in the order ``quorum.raft.ready_plan``
plans it (the simulator follows the same plan)::

    step every queued envelope -> poll -> plan_ready -> send what may leave early (a leader's
    Fetch responses) -> persist (fsync, off the event loop) -> send the rest -> apply
    -> advance -> sleep until next_poll_at_ms or the next envelope

gRPC handlers never touch the node: they enqueue an ``Envelope`` and await a future that the
loop resolves when the core answers. While an fsync runs in a worker thread, new requests and
proposals queue up and share the next batch and the next fsync (group commit).

Bounds at the edge (docs/conventions.md#bounds-at-the-edge): at most
``CONTROLLER_OPERATIONS_QUEUED_MAX`` operations wait for the loop (``OperationQueueFullError``
past it) and one turn runs operations only until ``CONTROLLER_OPERATION_RECORDS_PER_TURN_MAX``
records were proposed, so a burst of large CreateTopics cannot starve Fetch and heartbeats; at
most ``METADATA_OFFSET_WAITERS_MAX`` reads wait for an offset (``TooManyWaitersError``), each
woken only once its offset is applied. Committed batches are applied one at a time with the
event loop free between two. The longest stretch the loop holds the event loop (fsync and
yields excluded) is kept in ``longest_turn_ms``; one longer than a tenth of the fetch timeout
is logged as ``loop_turn_slow``, with the garbage collector's share. The long-lived heap (the
metadata images) is frozen out of the cyclic collector (``GC_FREEZE_RECORDS_MIN``), so no
collection walks it.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import heapq
import itertools
import time
from collections import deque
from collections.abc import Callable, Coroutine, Sequence

# asyncio.to_thread (every fsync) loads the thread pool, and with it the _queue C extension,
# on first use. Loaded here, at start-up: a node's first fsync pays no import, and no C
# extension is loaded while the node runs (under libfiu's preload such a late load once hung
# a controller for good, docs/faults.md).
from concurrent.futures import ThreadPoolExecutor  # noqa: F401
from dataclasses import dataclass, field
from typing import Any, ClassVar, TypeVar

import grpc
import structlog

from quorum import limits
from quorum.logs import LogThrottle
from quorum.metadata.batch import LogBatch
from quorum.metadata.records import Record
from quorum.raft.messages import Envelope, Message, RequestFailed
from quorum.raft.node import BatchTooLargeError, NotLeaderError, Proposal, RaftNode, Ready
from quorum.raft.ready_plan import ReadyPlan, plan_ready, propose_in_batches
from quorum.security.events import SECURITY_EVENTS
from quorum.storage import ElectionStore, SegmentedLog
from quorum.wire.raft import MalformedMessageError

# Inbound requests get correlation ids from their own range, far from the core's outbound ids.
INBOUND_CORRELATION_BASE = 1 << 48

# CPython collects its youngest generation every 700 allocations (net), and the whole heap
# (hundreds of milliseconds for a large metadata image) every 100 young collections once the
# long-lived objects grew by a quarter. A node's loop raises the first threshold to this (a young
# collection still takes a few milliseconds): a burst of 20 x 1,000 created topics measured
# 2.1 s of full collections inside loop turns with 700, 0.3-0.4 s with 20,000.
GC_YOUNG_THRESHOLD = 20_000
# ... and keeps the long-lived heap out of every collection: ``gc.freeze()`` moves every object
# alive into CPython's permanent generation, which no collection scans (refcounting still frees
# them). The loop freezes at start-up and, after at least this many records were proposed or
# applied since the last freeze, collects what is not frozen yet (a few milliseconds: only what
# those records built) and freezes again, in a stretch of its own. So a full collection scans
# the objects of at most about this many records, never the whole image. Replay leaves no
# reference cycles (quorum/metadata/delta.py), so frozen objects are freed as usual; what a
# freeze keeps for good is only an object that was alive then and later ends in a cycle (a
# request in flight at that moment), bounded by what was in flight per freeze.
GC_FREEZE_RECORDS_MIN = 2_000
# A loop turn lets handlers run (a yield) between operations, and between committed batches,
# once its current stretch has held the event loop this long (``_Turn.yield_if_long``).
YIELD_AFTER_S = 0.005
# Operations a busy leader gathers at most before it runs them (``_gather_until_ms``): well
# below CONTROLLER_OPERATIONS_QUEUED_MAX, so gathering never makes a client see a full queue.
OPERATIONS_GATHERED_MAX = 256
# The deadline heap (``_expire_at``) is pruned of answered callers once it holds this many
# entries and twice as many as the operations and commits still waiting.
DEADLINES_PRUNED_FROM = 1024


class Clock:
    """Monotonic milliseconds for the core; wall milliseconds for humans."""

    def now_ms(self) -> int:
        return time.monotonic_ns() // 1_000_000

    def to_wall_ms(self, monotonic_ms: int) -> int:
        return int(time.time() * 1000) - (self.now_ms() - monotonic_ms)

    def wall_offset_ms(self) -> int:
        """Wall-clock minus monotonic milliseconds (batch timestamps are wall-clock)."""
        return time.time_ns() // 1_000_000 - self.now_ms()


class ShuttingDownError(Exception):
    retriable: ClassVar[bool] = True


class InboxFullError(Exception):
    retriable: ClassVar[bool] = True


class OperationQueueFullError(Exception):
    """``CONTROLLER_OPERATIONS_QUEUED_MAX`` operations already wait for the loop."""

    retriable: ClassVar[bool] = True


class TooManyWaitersError(Exception):
    """``METADATA_OFFSET_WAITERS_MAX`` reads already wait for a metadata offset."""

    retriable: ClassVar[bool] = True


T = TypeVar("T")

# An operation of the active controller: given the offset its first record will get, it
# returns the records to append (possibly none) and the answer for its caller. It runs inside
# the driver loop, so operations are serialized against each other and against replay.
Operation = Callable[[int], tuple[Sequence[Record], T]]


@dataclass
class _Submitted:
    operation: Operation[Any]
    future: asyncio.Future[tuple[Proposal | None, Any]]
    # When it was queued (perf_counter seconds): its time in the queue is a metric.
    queued_s: float = field(default_factory=time.perf_counter)


@dataclass
class _Commit:
    proposal: Proposal
    future: asyncio.Future[int]


class _GcTimer:
    """Seconds the cyclic garbage collector ran in this process (``gc.callbacks``): a full
    collection of a large image takes hundreds of milliseconds, so slow turns say how much of
    them it was. Also the longest single collection, in wall and in CPU time of this thread
    (a collection descheduled by other processes is long in wall time only), and how many full
    (generation 2) collections ran."""

    def __init__(self) -> None:
        self.total_s = 0.0
        self.longest_s = 0.0
        self.longest_cpu_s = 0.0
        self.full_collections = 0
        self._started_s = 0.0
        self._cpu_started_s = 0.0

    def callback(self, phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            self._started_s = time.perf_counter()
            self._cpu_started_s = time.thread_time()
        else:
            pause_s = time.perf_counter() - self._started_s
            self.total_s += pause_s
            self.longest_s = max(self.longest_s, pause_s)
            self.longest_cpu_s = max(self.longest_cpu_s, time.thread_time() - self._cpu_started_s)
            if info.get("generation") == 2:
                self.full_collections += 1


class _Turn:
    """One loop turn's stretches of holding the event loop (between two awaits)."""

    def __init__(self, gc_timer: _GcTimer) -> None:
        self._gc_timer = gc_timer
        self.operations = 0
        self.records = 0
        self.longest_s = 0.0
        self.gc_s = 0.0  # the collector's share of the longest stretch
        self.longest_without_gc_s = 0.0
        # CPU seconds of this thread (other processes on the machine do not count)
        self.longest_cpu_without_gc_s = 0.0
        self.resume()

    def resume(self) -> None:
        self._started_s = time.perf_counter()
        self._cpu_started_s = time.thread_time()
        self._gc_started_s = self._gc_timer.total_s

    def pause(self) -> None:
        stretch_s = time.perf_counter() - self._started_s
        gc_s = self._gc_timer.total_s - self._gc_started_s
        if stretch_s > self.longest_s:
            self.longest_s = stretch_s
            self.gc_s = gc_s
        self.longest_without_gc_s = max(self.longest_without_gc_s, stretch_s - gc_s)
        cpu_s = time.thread_time() - self._cpu_started_s
        self.longest_cpu_without_gc_s = max(self.longest_cpu_without_gc_s, cpu_s - gc_s)

    def stretch_s(self) -> float:
        """How long the current stretch has held the event loop so far."""
        return time.perf_counter() - self._started_s

    async def yield_if_long(self) -> None:
        """End the stretch (let handlers run) if it has held the loop for ``YIELD_AFTER_S``:
        a yield is a whole event-loop iteration, too dear to pay after every small operation
        or batch under load, and pointless before the stretch is long."""
        if self.stretch_s() >= YIELD_AFTER_S:
            self.pause()
            await asyncio.sleep(0)
            self.resume()


class _Wakeup:
    """The loop's doorbell: ``set`` rings it, ``wait`` sleeps until it rings or a timeout.
    Resolves one future directly (asyncio.Event under asyncio.wait_for takes a task and three
    loop iterations per wake-up, on every turn of an idle or lightly loaded node)."""

    __slots__ = ("_rung", "_waiter")

    def __init__(self) -> None:
        self._rung = False
        self._waiter: asyncio.Future[None] | None = None

    def set(self) -> None:
        self._rung = True
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def clear(self) -> None:
        self._rung = False

    async def wait(self, timeout_s: float) -> None:
        if self._rung:
            return
        loop = asyncio.get_running_loop()
        waiter = self._waiter = loop.create_future()
        timer = loop.call_later(timeout_s, _ring, waiter)
        try:
            await waiter
        finally:
            timer.cancel()
            self._waiter = None


def _ring(waiter: asyncio.Future[None]) -> None:
    if not waiter.done():
        waiter.set_result(None)


@dataclass
class _ConditionWaiter:
    """A caller of ``RaftDriver.wait_for``."""

    condition: Callable[[], bool]
    future: asyncio.Future[None]


@dataclass(order=True)
class _OffsetWaiter:
    """A read waiting until ``applied_offset() >= offset`` (kept in a heap by offset)."""

    offset: int
    sequence: int
    applied_offset: Callable[[], int] = field(compare=False)
    future: asyncio.Future[None] = field(compare=False)


SendRequest = Callable[[Envelope], Coroutine[Any, Any, Message]]


def peer_gone(exc: BaseException) -> bool:
    """Whether a failed request says the peer is not there at all: its port refused the
    connection, or the connection was reset or closed while the request waited (the kernel
    closes a dead process's sockets at once). gRPC reports those as UNAVAILABLE; a TLS
    handshake that failed is UNAVAILABLE too, but someone answered, so it does not count.
    Deadlines (a slow or cut network) never count (``RequestFailed.peer_gone``)."""
    if isinstance(exc, ConnectionRefusedError | ConnectionResetError):
        return True
    if isinstance(exc, grpc.aio.AioRpcError) and exc.code() is grpc.StatusCode.UNAVAILABLE:
        details = (exc.details() or "").lower()
        return "handshake" not in details and "ssl" not in details
    return False


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
        self._operations: deque[_Submitted] = deque()
        self._offset_waiters: list[_OffsetWaiter] = []
        self._waiter_sequence = itertools.count()
        self._calls: list[tuple[Callable[[], Any], asyncio.Future[Any]]] = []
        self._replies: dict[int, asyncio.Future[Message]] = {}
        self._commits: list[_Commit] = []
        # Deadlines of callers' futures (``submit``, ``wait_committed``): a heap of (monotonic
        # seconds, sequence, future), failed with TimeoutError at the start of the first turn
        # after they pass (the loop's wait ends by the earliest). Kept here instead of an
        # asyncio.timeout per request, a loop timer set and cancelled each time: alternated
        # A/B at 64 CreateTopics in flight, leader CPU per write -7 and -29 us, throughput +2
        # and +6.5 % (11 of 15 pairs faster).
        self._deadlines: list[tuple[float, int, asyncio.Future[Any]]] = []
        self._deadline_sequence = itertools.count()
        # When the loop's current wait for its doorbell ends (None: it is not waiting).
        self._waiting_until_s: float | None = None
        self._inbound_ids = itertools.count(INBOUND_CORRELATION_BASE)
        self._wakeup = _Wakeup()
        # While the loop gathers operations (``_gather_until_ms``), a new one does not ring.
        self._gathering = False
        self._stopping = False
        self._resign_requested = False
        self._tasks: set[asyncio.Task[None]] = set()
        self.log_events = structlog.get_logger("quorum.raft").bind(node_id=node.node_id)
        self._rejections = LogThrottle()
        # Peers' answers lost to a full inbox (a metric), logged throttled by answer type.
        self.replies_dropped = 0
        self._dropped_replies = LogThrottle()
        # Observers of the loop (health, tests, metrics): called after each Ready.
        self.high_watermark = node.high_watermark
        self.ready_count = 0
        # The longest the loop held the event loop in one go (a stretch of a turn between two
        # awaits; the fsync runs off the loop), in milliseconds; a turn with a stretch over
        # ``slow_turn_ms`` is logged (loop_turn_slow), with the garbage collector's share.
        self.longest_turn_ms = 0.0
        self.longest_turn_without_gc_ms = 0.0
        self.longest_turn_cpu_without_gc_ms = 0.0
        self._gc_timer = _GcTimer()
        self._records_since_freeze = 0
        self.gc_freezes = 0
        self.slow_turn_ms = node.config.fetch_timeout_ms / 10
        # Callers of ``wait_for``: each condition is checked after every turn.
        self._condition_waiters: list[_ConditionWaiter] = []
        # Seconds the loop spent waiting for work (Kafka's poll-idle-ratio, docs/operating.md).
        self.idle_s_total = 0.0
        # Called with (ms queued, ms running) for each operation run (Kafka's
        # ControllerEventManager EventQueueTimeMs / EventQueueProcessingTimeMs).
        self.on_operation_timed: Callable[[float, float], None] | None = None

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

    async def submit(
        self,
        operation: Operation[T],
        *,
        from_client: bool = False,
        deadline_s: float | None = None,
    ) -> tuple[Proposal | None, T]:
        """Run ``operation`` in the loop while this node leads; append its records as one
        atomic batch. Returns where they will land (None when there were none) and the
        operation's answer. Raises ``NotLeaderError`` when this node does not lead and, for an
        operation ``from_client`` (an admin or broker RPC; the controller's own few operations
        are never refused), ``OperationQueueFullError`` when
        ``CONTROLLER_OPERATIONS_QUEUED_MAX`` operations are already queued. ``deadline_s``
        (``time.monotonic()`` seconds): ``TimeoutError`` if the operation has not run by then
        (it then never runs)."""
        if self._stopping:
            raise ShuttingDownError("the node is shutting down")
        if from_client and len(self._operations) >= limits.CONTROLLER_OPERATIONS_QUEUED_MAX:
            # Callers that gave up (deadline) leave done futures behind: drop them first.
            self._operations = deque(s for s in self._operations if not s.future.done())
            if len(self._operations) >= limits.CONTROLLER_OPERATIONS_QUEUED_MAX:
                raise OperationQueueFullError(
                    f"{len(self._operations)} operations are already queued on the active "
                    f"controller (at most {limits.CONTROLLER_OPERATIONS_QUEUED_MAX}); retry "
                    "with backoff"
                )
        future: asyncio.Future[tuple[Proposal | None, Any]] = (
            asyncio.get_running_loop().create_future()
        )
        self._operations.append(_Submitted(operation, future))
        if not self._gathering or len(self._operations) >= OPERATIONS_GATHERED_MAX:
            self._wakeup.set()
        if deadline_s is not None:
            self._expire_at(future, deadline_s)
        proposal, answer = await future
        return proposal, answer

    def _expire_at(self, future: asyncio.Future[Any], deadline_s: float) -> None:
        """Fail ``future`` with TimeoutError once ``deadline_s`` passes (if still pending)."""
        deadlines = self._deadlines
        if len(deadlines) >= DEADLINES_PRUNED_FROM and len(deadlines) >= 2 * (
            len(self._operations) + len(self._commits)
        ):
            # Most entries belong to callers answered long before their deadline: drop them
            # (amortised O(1) per entry: at least half of them go each time).
            self._deadlines = deadlines = [d for d in deadlines if not d[2].done()]
            heapq.heapify(deadlines)
        heapq.heappush(deadlines, (deadline_s, next(self._deadline_sequence), future))
        waiting_until_s = self._waiting_until_s
        if waiting_until_s is not None and deadline_s < waiting_until_s:
            self._wakeup.set()  # the loop would sleep past it: it waits less once woken

    def _expire_deadlines(self) -> float | None:
        """Fail the futures whose deadline passed; returns the next deadline (None: none)."""
        deadlines = self._deadlines
        now_s = time.monotonic()
        while deadlines:
            deadline_s, _, future = deadlines[0]
            if not future.done():
                if deadline_s > now_s:
                    return deadline_s
                future.set_exception(TimeoutError("the deadline passed"))
            heapq.heappop(deadlines)
        return None

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

    async def wait_committed(self, proposal: Proposal, *, deadline_s: float | None = None) -> int:
        """Wait until the proposal is committed in its epoch. Returns the high watermark then.
        Raises ``NotLeaderError`` if leadership was lost before (the outcome is unknown), and
        ``TimeoutError`` if ``deadline_s`` (``time.monotonic()`` seconds) passes first."""
        future: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        self._commits.append(_Commit(proposal, future))
        self._wakeup.set()
        if deadline_s is not None:
            self._expire_at(future, deadline_s)
        return await future

    async def read_index(self, timeout_s: float) -> int:
        """A linearizable read on the leader (Raft's ReadIndex, confirmed by read fences:
        ``RaftNode.read_barrier``): waits until a majority of voters confirmed this node still
        leads after the call began. Returns the high watermark then; a read served from an
        image that applied everything below it sees every write acknowledged before the call.
        Raises ``NotLeaderError`` (this node does not lead, or stopped leading meanwhile) and
        ``TimeoutError`` (no majority confirmed in ``timeout_s``: cut off from the quorum)."""
        node = self.node
        epoch, fence = await self.call_in_loop(node.read_barrier)
        found: list[int] = []

        def confirmed() -> bool:
            try:
                index = node.read_index(epoch, fence)
            except NotLeaderError:
                return True
            if index is not None:
                found.append(index)
            return index is not None

        if not await self.wait_for(confirmed, timeout_s):
            raise TimeoutError(f"leadership of epoch {epoch} not confirmed in {timeout_s} s")
        if not found:
            raise NotLeaderError(node.leader_id, node.epoch)
        return found[0]

    async def wait_for_offset(
        self, offset: int, applied_offset: Callable[[], int], timeout_s: float
    ) -> bool:
        """Wait until ``applied_offset()`` (a monotonic view of what this node applied, the
        same function for every caller) reaches ``offset``; False on timeout. The waiter sleeps
        in a heap by offset and is woken only once its offset is reached. Raises
        ``TooManyWaitersError`` past ``METADATA_OFFSET_WAITERS_MAX`` waiting reads."""
        if applied_offset() >= offset:
            return True
        if self._stopping:
            raise ShuttingDownError("the node is shutting down")
        if len(self._offset_waiters) >= limits.METADATA_OFFSET_WAITERS_MAX:
            raise TooManyWaitersError(
                f"{len(self._offset_waiters)} reads already wait for a metadata offset on this "
                f"node (at most {limits.METADATA_OFFSET_WAITERS_MAX}); retry with backoff or "
                "ask another node"
            )
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        waiter = _OffsetWaiter(offset, next(self._waiter_sequence), applied_offset, future)
        heapq.heappush(self._offset_waiters, waiter)
        try:
            await asyncio.wait_for(future, timeout_s)
        except TimeoutError:
            return False
        finally:
            if not future.done():
                future.cancel()
            if future.cancelled():  # still in the heap: at most WAITERS_MAX entries to scan
                with contextlib.suppress(ValueError):
                    self._offset_waiters.remove(waiter)
                    heapq.heapify(self._offset_waiters)
        return True

    def _wake_offset_waiters(self) -> None:
        waiters = self._offset_waiters
        while waiters:
            first = waiters[0]
            if not first.future.done() and first.applied_offset() < first.offset:
                return
            heapq.heappop(waiters)
            if not first.future.done():
                first.future.set_result(None)

    async def wait_for(self, condition: Callable[[], bool], timeout_s: float) -> bool:
        """Wait until ``condition()`` holds after some Ready; False on timeout. The loop checks
        every waiting condition after each turn, so a condition must be cheap; one that raises
        raises here. At most ``METADATA_OFFSET_WAITERS_MAX`` callers wait at once
        (``TooManyWaitersError``).

        A plain future per caller, not an ``asyncio.Condition`` (whose lock the loop had to take
        to notify): with one, a leader resumed after a SIGSTOP, when hundreds of queued reads
        time out at once, sometimes stopped turning for good, idle in ``select`` (the
        ``pause-leader`` fault scenario, docs/faults.md: 5 of about 24 runs; none in 33 runs
        since)."""
        if condition():
            return True
        if self._stopping:
            raise ShuttingDownError("the node is shutting down")
        waiters = self._condition_waiters
        if len(waiters) >= limits.METADATA_OFFSET_WAITERS_MAX:
            self._condition_waiters = waiters = [w for w in waiters if not w.future.done()]
            if len(waiters) >= limits.METADATA_OFFSET_WAITERS_MAX:
                raise TooManyWaitersError(
                    f"{len(waiters)} requests already wait on this node (at most "
                    f"{limits.METADATA_OFFSET_WAITERS_MAX}); retry with backoff or ask another "
                    "node"
                )
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        waiters.append(_ConditionWaiter(condition, future))
        self._wakeup.set()  # a turn soon, even on an idle node, checks the condition
        try:
            await asyncio.wait_for(future, timeout_s)
        except TimeoutError:
            return False
        return True

    def _wake_condition_waiters(self) -> None:
        still: list[_ConditionWaiter] = []
        for waiter in self._condition_waiters:
            future = waiter.future
            if future.done():
                continue  # its caller gave up
            try:
                holds = waiter.condition()
            except Exception as exc:  # the caller's to handle, not the loop's
                future.set_exception(exc)
                continue
            if holds:
                future.set_result(None)
            else:
                still.append(waiter)
        self._condition_waiters = still

    # ----- the loop --------------------------------------------------------------------------

    async def run(self) -> None:
        node = self.node
        gc.callbacks.append(self._gc_timer.callback)
        young, middle, old = gc.get_threshold()
        if 0 < young < GC_YOUNG_THRESHOLD:
            gc.set_threshold(GC_YOUNG_THRESHOLD, middle, old)
        if gc.isenabled():
            self._freeze_heap()
        try:
            while True:
                turn = _Turn(self._gc_timer)
                self._expire_deadlines()  # before operations run: an expired one never does
                now = self.clock.now_ms()
                node.wall_clock_offset_ms = self.clock.wall_offset_ms()
                while not self._inbox.empty():
                    node.step(self._inbox.get_nowait(), now)
                if self._resign_requested:
                    self._resign_requested = False
                    node.resign(now)
                calls, self._calls = self._calls, []
                for function, call_future in calls:
                    if not call_future.done():
                        try:
                            call_future.set_result(function())
                        except NotLeaderError as exc:  # the caller's to handle, not the loop's
                            call_future.set_exception(exc)
                turn.operations, turn.records = await self._run_operations(now, turn)
                ready = node.poll(now)
                plan = plan_ready(ready)
                self._dispatch(plan.send_before_flush)
                await self._persist(plan, turn)
                self._dispatch(plan.send_after_flush)
                if plan.send_after_flush and plan.committed_batches:
                    # What was made durable is acknowledged (a follower's next Fetch) before
                    # the committed batches are applied, not after: the leader's commit
                    # waits for that Fetch, and the apply can wait.
                    turn.pause()
                    await asyncio.sleep(0)
                    turn.resume()
                await self._apply(plan, turn)
                node.advance(ready)
                self.ready_count += 1
                self.high_watermark = ready.high_watermark
                self._log_events(ready)
                if self._on_ready is not None:
                    self._on_ready(ready)
                self._wake_offset_waiters()
                self._wake_condition_waiters()
                self._records_since_freeze += turn.records + sum(
                    batch.record_count for batch in plan.committed_batches
                )
                if self._records_since_freeze >= GC_FREEZE_RECORDS_MIN and gc.isenabled():
                    # A stretch of its own: handlers run first.
                    turn.pause()
                    await asyncio.sleep(0)
                    turn.resume()
                    self._freeze_heap()
                turn.pause()
                self._end_turn(turn, plan)
                if self._stopping:
                    return
                now = self.clock.now_ms()
                busy = not self._inbox.empty() or bool(self._calls)
                gather = None if busy else self._gather_until_ms(now)
                if busy or (self._operations and gather is None):
                    # Let handlers (Fetch, heartbeats) reach the inbox between two turns.
                    await asyncio.sleep(0)
                    continue
                deadline = (
                    ready.next_poll_at_ms if gather is None else min(ready.next_poll_at_ms, gather)
                )
                delay_s = max(0, deadline - now) / 1000
                # Again here: handlers may have added deadlines during the turn's awaits.
                next_deadline_s = self._expire_deadlines()
                if next_deadline_s is not None:
                    delay_s = min(delay_s, max(0.0, next_deadline_s - time.monotonic()))
                self._wakeup.clear()  # nothing ran since the checks above: no ring is lost
                idle_from_s = time.perf_counter()
                self._gathering = gather is not None
                self._waiting_until_s = time.monotonic() + delay_s
                try:
                    await self._wakeup.wait(delay_s)
                finally:
                    self._gathering = False
                    self._waiting_until_s = None
                self.idle_s_total += time.perf_counter() - idle_from_s
        finally:
            gc.callbacks.remove(self._gc_timer.callback)

    def _gather_until_ms(self, now: int) -> int | None:
        """When queued operations must run at the latest, if they may wait for more: while
        the leader's open batch waits anyway (an earlier batch is not committed yet, or it is
        held to its minimum age), operations run then still join it, so a busy leader runs
        many in one turn (and polls, plans and persists once) instead of one turn each.
        None: run them at once (no batch waiting, or too many queued). Also asked with none
        queued: one submitted while the loop waits then rings only if this is None."""
        queued = len(self._operations)
        if queued >= OPERATIONS_GATHERED_MAX:
            return None
        return self.node.open_batch_waits_until_ms(now, queued)

    def _freeze_heap(self) -> None:
        """Collect what is not frozen yet, then freeze everything alive (GC_FREEZE_RECORDS_MIN)."""
        started_s = time.perf_counter()
        collected = gc.collect()
        gc.freeze()
        self._records_since_freeze = 0
        self.gc_freezes += 1
        # Not gc.get_freeze_count(): it walks the whole frozen heap (1.7 % of a busy leader's
        # CPU, measured with perf), and a debug line is not worth that.
        self.log_events.debug(
            "gc_frozen",
            collect_ms=round((time.perf_counter() - started_s) * 1000, 1),
            collected=collected,
        )

    def _end_turn(self, turn: _Turn, plan: ReadyPlan) -> None:
        turn_ms = turn.longest_s * 1000
        without_gc_ms = turn.longest_without_gc_s * 1000
        cpu_ms = turn.longest_cpu_without_gc_s * 1000
        if (
            turn_ms > self.longest_turn_ms
            or without_gc_ms > self.longest_turn_without_gc_ms
            or cpu_ms > self.longest_turn_cpu_without_gc_ms
        ):
            self.longest_turn_ms = max(self.longest_turn_ms, turn_ms)
            self.longest_turn_without_gc_ms = max(self.longest_turn_without_gc_ms, without_gc_ms)
            self.longest_turn_cpu_without_gc_ms = max(self.longest_turn_cpu_without_gc_ms, cpu_ms)
            self.log_events.debug(
                "loop_turn_longest",
                turn_ms=round(turn_ms, 1),
                gc_ms=round(turn.gc_s * 1000, 1),
                turn_without_gc_ms=round(without_gc_ms, 1),
                turn_cpu_without_gc_ms=round(cpu_ms, 1),
                gc_pause_longest_ms=round(self._gc_timer.longest_s * 1000, 1),
                gc_pause_longest_cpu_ms=round(self._gc_timer.longest_cpu_s * 1000, 1),
                gc_full_collections=self._gc_timer.full_collections,
            )
        if turn_ms > self.slow_turn_ms:
            self.log_events.warning(
                "loop_turn_slow",
                turn_ms=round(turn_ms, 1),
                gc_ms=round(turn.gc_s * 1000, 1),
                slow_turn_ms=self.slow_turn_ms,
                operations=turn.operations,
                records_proposed=turn.records,
                batches_committed=len(plan.committed_batches),
            )

    async def _run_operations(self, now: int, turn: _Turn) -> tuple[int, int]:
        """Run queued operations until ``CONTROLLER_OPERATION_RECORDS_PER_TURN_MAX`` records
        were proposed (at least one operation); the rest wait for the next turn. Returns the
        operations run and the records they proposed.

        Replaying a proposal into the latest image (``on_proposed``) starts a stretch of its
        own once the current one is ``YIELD_AFTER_S`` long: an operation of 1,000 topics costs
        about 40 ms to validate and 15 ms to replay, one stretch is shorter. Handlers may run
        in between; they only enqueue, and nothing reads the latest image outside this loop."""
        queue = self._operations
        node = self.node
        ran = 0
        proposed = 0
        while queue and proposed < limits.CONTROLLER_OPERATION_RECORDS_PER_TURN_MAX:
            submitted = queue.popleft()
            future = submitted.future
            if future.done():
                continue
            if not node.is_leader():
                future.set_exception(NotLeaderError(node.leader_id, node.epoch))
                continue
            ran += 1
            started_s = time.perf_counter()
            queued_ms = (started_s - submitted.queued_s) * 1000
            records, answer = submitted.operation(node.next_offset())
            proposed += len(records)
            proposal = None
            if records:
                try:
                    proposal = propose_in_batches(node, records, now)
                except BatchTooLargeError as exc:
                    future.set_exception(exc)
                    continue
                if self._on_proposed is not None:
                    yielded_s = time.perf_counter()
                    await turn.yield_if_long()
                    started_s += time.perf_counter() - yielded_s  # not the handlers' time
                    self._on_proposed(records, proposal)
            if self.on_operation_timed is not None:
                self.on_operation_timed(queued_ms, (time.perf_counter() - started_s) * 1000)
            if not future.done():  # the caller may have given up meanwhile
                future.set_result((proposal, answer))
        return ran, proposed

    async def _persist(self, plan: ReadyPlan, turn: _Turn) -> None:
        """Make the plan's election state and entries durable (before ``send_after_flush``)."""
        if plan.election_to_persist is not None:
            assert self.election_store is not None, "an observer never persists election state"
            turn.pause()
            await asyncio.to_thread(self.election_store.write, plan.election_to_persist)
            turn.resume()
        if plan.truncate_to is not None:
            # The core never truncates below its high watermark; storage checks again (I7).
            self.log.truncate_to(plan.truncate_to, high_watermark=plan.high_watermark)
        if plan.entries_to_append:
            self.log.append(plan.entries_to_append)
            turn.pause()
            await asyncio.to_thread(self.log.flush)
            turn.resume()

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
        """Send one outbound request; the answer, or ``RequestFailed`` if there is none, goes
        back to the core. Nothing escapes this task: an unexpected failure is logged with the
        peer, the message kind and the exception, and the core retries as after a lost one."""
        try:
            answer = await self._send_request(envelope)
        except (grpc.aio.AioRpcError, OSError, TimeoutError) as exc:
            code = exc.code().name if isinstance(exc, grpc.aio.AioRpcError) else type(exc).__name__
            answer = RequestFailed(code, peer_gone=peer_gone(exc))
        except asyncio.CancelledError:
            return
        except MalformedMessageError as exc:
            # The peer's fault: its answer cannot become a core message.
            self.log_events.warning(
                "response_malformed",
                peer=envelope.destination,
                request=type(envelope.message).__name__,
                problem=str(exc),
            )
            answer = RequestFailed(type(exc).__name__)
        except Exception as exc:
            # Anything else (a request the wire cannot encode, a bug in the transport) is ours:
            # logged with its cause, and the core retries as after a lost request.
            self.log_events.error(
                "send_failed",
                peer=envelope.destination,
                request=type(envelope.message).__name__,
                error=repr(exc),
                exc_info=exc,
            )
            answer = RequestFailed(type(exc).__name__)
        reply = Envelope(envelope.destination, envelope.source, envelope.correlation_id, answer)
        try:
            self._inbox.put_nowait(reply)
        except asyncio.QueueFull:
            # Lost like a message on the wire: the core's request times out and is retried.
            self.replies_dropped += 1
            count = self._dropped_replies.count((type(answer).__name__,))
            if count is not None:
                self.log_events.warning(
                    "reply_dropped",
                    peer=envelope.destination,
                    response=type(answer).__name__,
                    reason=f"inbox full ({limits.INBOX_ENVELOPES_MAX} envelopes)",
                    dropped_so_far=count,
                )
            return
        self._wakeup.set()

    async def _apply(self, plan: ReadyPlan, turn: _Turn) -> None:
        """Apply the committed batches in order, one at a time, letting the event loop serve
        handlers between two once a stretch is ``YIELD_AFTER_S`` long (nothing else changes the
        node meanwhile); then answer the proposals they commit."""
        if plan.committed_batches and self._on_committed is not None:
            for index, batch in enumerate(plan.committed_batches):
                if index > 0:
                    await turn.yield_if_long()
                self._on_committed((batch,))
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
            if event.name in (
                "request_rejected",
                "response_rejected",
                "epoch_jump_refused",
                "metadata_topic_id_unknown",
            ):
                # A peer's bad messages, throttled per (event, message type, error) - not per
                # source or reason, which the sender chooses - so a flood of them cannot flood
                # the log (docs/architecture.md#hostile-peers).
                kind = fields.get("request", fields.get("response"))
                key = (event.name, kind, fields.get("error"))
                SECURITY_EVENTS.refused(event.name, str(fields.get("error", "NONE")))
                count = self._rejections.count(key)
                if count is not None:
                    log.warning(event.name, **fields, rejected_so_far=count)
            elif event.name == "committed_prefix_diverged":
                # An acknowledged write was lost (quorum/raft/prefix_divergence.py): once per
                # divergence, since the core stops fetching until it is dealt with.
                log.error(event.name, **fields)
            elif event.name.startswith(
                ("inconsistent_", "check_quorum", "epoch_", "diverged_", "committed_prefix_")
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
        for waiter in self._offset_waiters:
            if not waiter.future.done():
                waiter.future.set_exception(ShuttingDownError("the node is shutting down"))
        for condition_waiter in self._condition_waiters:
            if not condition_waiter.future.done():
                condition_waiter.future.set_exception(
                    ShuttingDownError("the node is shutting down")
                )
        for commit in self._commits:
            if not commit.future.done():
                commit.future.set_exception(ShuttingDownError("the node is shutting down"))
