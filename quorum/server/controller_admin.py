"""The ``AdminService`` of a controller (the handlers are quorum/server/admin_service.py's).

Writes go to the active controller only: an operation of the pure ``ControllerStateMachine``
runs inside the driver loop (serialized, with the offset its records will get), its records are
appended as one batch, and the answer is sent once the high watermark passes them, carrying the
committing ``metadata_offset``. Any other controller answers NOT_CONTROLLER naming the leader
and its address. Reads that carry ``min_metadata_offset`` are served by every controller from
its committed image, after waiting (bounded by the deadline) until that image has applied the
offset (read-your-writes); reads without it go to the active controller, like writes, which
serves them linearizably: it first confirms with a majority of voters that it still leads
(``RaftDriver.read_index``), so a leader cut off from the quorum, or paused while another was
elected, never answers from a stale image (docs/architecture.md#linearizable-reads).

One deadline per request: the call's deadline (less ``DEADLINE_MARGIN_S``) is fixed when the
request arrives, and each wait of the request (the controller becoming ready, running and
committing the operation, confirming leadership, applying) gets what is left of it, so the
answer comes before the caller gives up.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import TypeVar

import grpc

from quorum.config import HostPort
from quorum.controller.state_machine import ControllerStateMachine
from quorum.errors import ErrorCode
from quorum.metadata.image import MetadataImage
from quorum.metadata.records import MetadataRecord
from quorum.raft.node import NotLeaderError
from quorum.security.authorization import RequestAuthorization
from quorum.security.identity import CallerResolver
from quorum.server.admin_service import (
    OUTCOME_UNKNOWN,
    UNSAFE_ACK_BEFORE_COMMIT_ENV,
    UNSAFE_STALE_READS_ENV,
    AdminServicer,
    RequestRejected,
    WriteOperation,
)
from quorum.server.driver import RaftDriver

__all__ = ["ControllerAdminServicer"]

T = TypeVar("T")


def _left_s(deadline_s: float) -> float:
    """What is left until ``deadline_s`` (``time.monotonic()`` seconds), never negative."""
    return max(0.0, deadline_s - time.monotonic())


class ControllerAdminServicer(AdminServicer):
    def __init__(
        self,
        driver: RaftDriver,
        state_machine: ControllerStateMachine,
        *,
        cluster_id: str,
        voters: Mapping[int, HostPort],
        controller_ready: Callable[[], bool],
        callers: CallerResolver | None = None,
        authorization: RequestAuthorization | None = None,
    ) -> None:
        """``controller_ready``: whether the active controller has replayed everything before
        its own epoch and may run operations."""
        super().__init__(
            driver,
            cluster_id=cluster_id,
            voters=voters,
            image=lambda: state_machine.committed_image,
            callers=callers,
            authorization=authorization,
        )
        self._sm = state_machine
        self._controller_ready = controller_ready
        # The negative controls (a broker has nothing they change).
        self._stale_reads = UNSAFE_STALE_READS_ENV in self._unsafe_switches
        self._ack_before_commit = UNSAFE_ACK_BEFORE_COMMIT_ENV in self._unsafe_switches

    def _write_image(self) -> MetadataImage:
        return self._sm.committed_image

    async def _write(
        self,
        context: grpc.aio.ServicerContext,
        operation: WriteOperation[T],
        *,
        linearizable: bool = True,
        timeout_s: float | None = None,
    ) -> tuple[T, int]:
        """Run ``operation`` as the active controller; wait until its records are committed.
        Returns the answer and the committing metadata offset.

        An operation that appends nothing (every topic refused: TOPIC_ALREADY_EXISTS, ...)
        was decided on the latest image, which may hold changes not committed yet; its answer
        waits like a linearizable read (``_linearizable_offset``) until the image it was
        decided on is committed, so a refusal never rests on a change that is then lost.
        Heartbeats (``linearizable`` False) are answered at once, as Kafka's are: a broker
        heartbeats again within its interval, and waiting would only delay its liveness."""
        driver = self._driver
        node = driver.node
        sm = self._sm

        budget = self._budget_s(context)
        if timeout_s is not None:
            budget = min(budget, max(0.0, timeout_s))
        # The request's one deadline: every wait below gets what is left of it. The driver
        # keeps it for running the operation and its commit (no loop timer per request: a busy
        # leader answers thousands per second).
        deadline_s = time.monotonic() + budget
        if not node.is_leader():
            raise self._not_controller()
        if not self._controller_ready():
            ready = await driver.wait_for(
                lambda: self._controller_ready() or not node.is_leader(), budget
            )
            if not ready or not node.is_leader():
                raise self._not_controller()

        decided_on: list[int] = []

        def run(next_offset: int) -> tuple[tuple[MetadataRecord, ...], T]:
            decided_on.append(next_offset)  # the latest image ends just before it
            result = operation(sm, next_offset)
            return result.records, result.response

        appended = False
        try:
            proposal, answer = await driver.submit(run, from_client=True, deadline_s=deadline_s)
            if proposal is not None and not self._ack_before_commit:
                appended = True
                await driver.wait_committed(proposal, deadline_s=deadline_s)
        except NotLeaderError:
            raise self._not_controller(appended=appended) from None
        except TimeoutError:
            raise RequestRejected(
                ErrorCode.REQUEST_TIMED_OUT,
                f"{OUTCOME_UNKNOWN}: the change was not "
                + ("committed" if appended else "run and committed")
                + " before the deadline (describe the topics to find out)",
            ) from None
        if proposal is not None:
            # Committed; or appended only, for the negative control UNSAFE_ACK_BEFORE_COMMIT_ENV.
            return answer, proposal.last_offset
        if not linearizable or self._ack_before_commit:
            # The negative control answers a refusal at once too, on an image that may hold
            # changes never committed.
            return answer, self._image().offset
        wanted = max(await self._linearizable_offset(_left_s(deadline_s)), decided_on[0] - 1)
        await self._wait_applied(wanted, _left_s(deadline_s))
        return answer, self._image().offset

    async def _read_newest(self, timeout_s: float) -> None:
        """A read that names no offset wants the newest state: only the active controller has
        it for sure, so any other controller redirects it (NOT_CONTROLLER) instead of answering
        stale, and the active controller first confirms it still leads
        (``RaftDriver.read_index``), then waits until its image has applied its high watermark
        at that moment: both within ``timeout_s``."""
        if self._stale_reads:
            return  # the negative control UNSAFE_STALE_READS_ENV: any controller, at once
        if not self._driver.node.is_leader():
            raise self._not_controller()
        deadline_s = time.monotonic() + timeout_s
        wanted = await self._linearizable_offset(timeout_s)
        await self._wait_applied(wanted, _left_s(deadline_s))

    async def _linearizable_offset(self, timeout_s: float) -> int:
        """The offset a linearizable read on this (leading) controller must have applied: its
        high watermark once a majority confirmed it still leads (``RaftDriver.read_index``),
        minus one."""
        try:
            return await self._driver.read_index(timeout_s) - 1
        except NotLeaderError:
            raise self._not_controller() from None
        except TimeoutError:
            raise RequestRejected(
                ErrorCode.REQUEST_TIMED_OUT,
                "this controller could not confirm with a majority of the voters that it "
                "still leads before the deadline (cut off from the quorum?); retry, or ask "
                "another controller",
            ) from None
