"""One deadline per admin request (quorum/server/controller_admin.py): the waits of one request
(the controller becoming ready, running and committing the operation, confirming leadership,
applying) share what is left of the call's deadline, so the answer reaches the caller before it
gives up. Before, each wait got the whole budget again: a refusal that waited on every step
answered up to about four times after the caller's deadline, and the client reported the
decided refusal as an unknown outcome.

The driver here is a stand-in on a virtual clock: every wait succeeds just before the time it
is given runs out, the slowest a real one may be. Nothing sleeps."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

import pytest

from quorum.controller.state_machine import ControllerStateMachine
from quorum.errors import ErrorCode
from quorum.ids import Uuid
from quorum.metadata.delta import MetadataDelta
from quorum.metadata.image import MetadataImage
from quorum.metadata.records import PartitionRecord, TopicRecord
from quorum.rpc.v1 import admin_pb2
from quorum.server import controller_admin
from quorum.server.admin_service import DEADLINE_MARGIN_S, METADATA_OFFSET_WAIT_S_MAX
from quorum.server.controller_admin import ControllerAdminServicer

CALL_TIMEOUT_S = 10.0
# How much of the time it is given each wait of the stand-in driver uses.
WAIT_SHARE = 0.99


class VirtualClock:
    def __init__(self) -> None:
        self.now_s = 0.0

    def monotonic(self) -> float:
        return self.now_s


class JustInTimeDriver:
    """A driver whose node leads and whose every wait succeeds after ``WAIT_SHARE`` of the
    time it was given (on the virtual clock); records the timeouts it was given."""

    def __init__(self, clock: VirtualClock, high_watermark: int) -> None:
        self.clock_s = clock
        self.node = SimpleNamespace(
            leader_id=1, epoch=3, node_id=1, is_leader=lambda: True, voters=frozenset({1})
        )
        self.clock = SimpleNamespace(now_ms=lambda: 0)
        self.high_watermark = high_watermark
        # (what, when it began, until when it could wait) for every wait
        self.waits_s: list[tuple[str, float, float]] = []

    def _wait(self, what: str, timeout_s: float) -> None:
        self.waits_s.append((what, self.clock_s.now_s, self.clock_s.now_s + timeout_s))
        self.clock_s.now_s += WAIT_SHARE * timeout_s

    async def wait_for(self, condition: Any, timeout_s: float) -> bool:
        self._wait("controller ready", timeout_s)
        return True

    async def submit(
        self, operation: Any, *, from_client: bool = False, deadline_s: float | None = None
    ) -> tuple[None, Any]:
        assert deadline_s is not None
        if self.clock_s.now_s >= deadline_s:
            raise TimeoutError("the deadline passed")
        records, answer = operation(self.high_watermark)
        assert not records, "a refusal appends nothing"
        return None, answer

    async def read_index(self, timeout_s: float) -> int:
        self._wait("read index", timeout_s)
        return self.high_watermark

    async def wait_for_offset(self, offset: int, applied: Any, timeout_s: float) -> bool:
        self._wait("applied", timeout_s)
        return True


class Context:
    """A call that arrived ``CALL_TIMEOUT_S`` before its deadline, on the virtual clock."""

    def __init__(self, clock: VirtualClock) -> None:
        self._clock = clock
        self.deadline_s = clock.now_s + CALL_TIMEOUT_S

    def time_remaining(self) -> float:
        return self.deadline_s - self._clock.now_s

    def peer(self) -> str:
        return "ipv4:127.0.0.1:50000"

    def auth_context(self) -> dict[str, Any]:
        return {}

    def invocation_metadata(self) -> tuple[()]:
        return ()

    async def abort(self, code: Any, details: str) -> None:
        raise AssertionError(f"aborted {code}: {details}")


def image_with_orders() -> MetadataImage:
    delta = MetadataDelta(MetadataImage.EMPTY)
    topic_id = Uuid.random()
    delta.replay(TopicRecord(name="orders", topic_id=topic_id), 0)
    delta.replay(
        PartitionRecord(topic_id=topic_id, partition=0, replicas=(1,), isr=(1,), leader=1), 1
    )
    return delta.apply()


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> VirtualClock:
    """The virtual clock, as the controller's admin service reads ``time.monotonic``."""
    virtual = VirtualClock()
    monkeypatch.setattr(controller_admin, "time", SimpleNamespace(monotonic=virtual.monotonic))
    return virtual


def servicer(clock: VirtualClock, *, ready: bool) -> tuple[ControllerAdminServicer, Any]:
    image = image_with_orders()
    # The image ends at offset 1; the leader's high watermark is 3: reads wait to apply 2.
    driver = JustInTimeDriver(clock, high_watermark=3)
    service = ControllerAdminServicer(
        driver,  # type: ignore[arg-type]
        ControllerStateMachine(image),
        cluster_id="deadline-test",
        voters={},
        controller_ready=lambda: ready,
    )
    return service, driver


def test_a_refusal_waiting_at_every_step_answers_within_the_callers_deadline(
    clock: VirtualClock,
) -> None:
    """CreateTopics of an existing topic on a controller that becomes ready just in time: the
    refusal waits for its leadership to be confirmed and applied, within what is left."""
    service, driver = servicer(clock, ready=False)
    context = Context(clock)
    request = admin_pb2.CreateTopicsRequest(
        topics=[admin_pb2.CreatableTopic(name="orders", num_partitions=1, replication_factor=1)]
    )
    answer = asyncio.run(service.CreateTopics(request, context))  # type: ignore[arg-type]
    assert [t.error_code for t in answer.topics] == [ErrorCode.TOPIC_ALREADY_EXISTS]
    assert [what for what, _, _ in driver.waits_s] == ["controller ready", "read index", "applied"]
    budget_s = CALL_TIMEOUT_S - DEADLINE_MARGIN_S
    assert max(until_s for _, _, until_s in driver.waits_s) <= budget_s + 1e-9, driver.waits_s
    assert clock.now_s <= context.deadline_s - DEADLINE_MARGIN_S + 1e-9, (
        f"answered at {clock.now_s:.2f} s, the caller gave up at {context.deadline_s:.2f} s"
    )


def test_a_linearizable_read_confirms_and_applies_within_one_budget(clock: VirtualClock) -> None:
    """DescribeCluster without an offset: confirming leadership and applying share one
    budget (at most METADATA_OFFSET_WAIT_MS_MAX, or the deadline)."""
    service, driver = servicer(clock, ready=True)
    context = Context(clock)
    answer = asyncio.run(
        service.DescribeCluster(admin_pb2.DescribeClusterRequest(), context)  # type: ignore[arg-type]
    )
    assert answer.error_code == ErrorCode.NONE
    assert [what for what, _, _ in driver.waits_s] == ["read index", "applied"]
    budget_s = min(CALL_TIMEOUT_S - DEADLINE_MARGIN_S, METADATA_OFFSET_WAIT_S_MAX)
    assert max(until_s for _, _, until_s in driver.waits_s) <= budget_s + 1e-9, driver.waits_s
    assert clock.now_s <= context.deadline_s - DEADLINE_MARGIN_S + 1e-9
