"""Kafka's request quota on the Kafka listener: a client that takes more than its share of the
listener's time is slowed down, not the broker (docs/kafka-listener.md#request-quota).

The form is Kafka's ``request_percentage`` quota: each principal may use
``quota.request.percentage.default`` percent of one thread's time, measured over
``quota.window.num`` windows of ``quota.window.size.seconds`` (Kafka's keys and defaults: 11
windows of 1 s). Kafka has no static key for a default request quota (it is set per user with
``kafka-configs``); this project's default is on, at 50 %: one principal, however many
connections it opens, leaves at least half of the listener's thread to everyone else.

What is measured is the CPU time of the thread doing the request's work
(``time.thread_time``): decoding (on the listener's loop, or in its decoding thread for a large
frame), the handler, and encoding. Time the request spends waiting for the broker's own loop
(a write forwarded to the controller, a read waiting for its write's offset) is not its cost:
``awaited_elsewhere`` takes that span out (``RequestCost.excluded_s``), since other
connections' work runs on the listener's loop meanwhile. Kafka also counts the network
threads' time; here TLS and socket work are not attributed to a principal.

Beyond the quota, the answer carries ``throttle_time_ms``: Kafka's ``QuotaUtils.throttleTime``,
the excess over the quota as a share of the quota times the measured span, at most one window
(Kafka's ``ClientRequestQuotaManager`` bound). The listener then reads nothing more from that
connection for that long (Kafka mutes the channel, KIP-219), so the client waits, not the
broker. Kafka's clients also wait by themselves when they read the field.

The quota is per principal, as Kafka's ``users`` quotas: on a PLAINTEXT listener every client
is ``User:ANONYMOUS`` and they share one quota, as in Kafka.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Awaitable
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Final, TypeVar

__all__ = [
    "CURRENT_COST",
    "QUOTA_PRINCIPALS_MAX",
    "RequestCost",
    "RequestQuota",
    "awaited_elsewhere",
    "byte_rate_quota",
]

T = TypeVar("T")

# Principals whose usage is kept at once; past it every usage is forgotten (a cache cleared when
# full, docs/conventions.md#limits). Our choice: a principal is one certificate's identity, and
# a broker serving more than 10,000 distinct ones within one quota window is far beyond what an
# admin and metadata listener sees; forgetting only lets each start afresh.
QUOTA_PRINCIPALS_MAX: Final = 10_000


@dataclass
class RequestCost:
    """The thread time one request took beyond what ``time.thread_time`` sees on the loop:
    ``worker_s`` spent in the decoding thread, ``excluded_s`` the loop's time while the
    request awaited other work (that time is other requests')."""

    worker_s: float = 0.0
    excluded_s: float = 0.0


# The request the running task is answering (each connection is one task, answering one request
# at a time), so awaits deep in a handler can leave their span out of its cost.
CURRENT_COST: ContextVar[RequestCost | None] = ContextVar("kafka_request_cost", default=None)


async def awaited_elsewhere(awaitable: Awaitable[T]) -> T:
    """Await ``awaitable`` (work done by another thread or loop), leaving the loop time that
    passes meanwhile out of the current request's cost."""
    cost = CURRENT_COST.get()
    before_s = time.thread_time()
    try:
        return await awaitable
    finally:
        if cost is not None:
            cost.excluded_s += time.thread_time() - before_s


class RequestQuota:
    """Per-key usage over a sliding set of windows (Kafka's ``SampledStat`` and ``Rate``) and
    the throttle time it earns. Used from one thread (the Kafka listeners' loop).

    A key is a principal under the config's default quota, or a client quota's bucket
    (``quorum.metadata.client_quotas.QuotaMatch``): ``record`` takes that quota's bound when
    one applies (docs/kafka-listener.md#client-quotas)."""

    def __init__(
        self, percentage: float, window_num: int, window_size_ms: int, *, throttle_windows: int = 1
    ) -> None:
        """``percentage``: the default bound, in percent of one unit per second (a thread's
        time for the request quota). ``throttle_windows``: the longest throttle, in windows
        (1 for request quotas, as Kafka's ``ClientRequestQuotaManager``; the byte rates allow
        the whole quota window)."""
        assert percentage > 0
        assert window_num >= 1
        assert window_size_ms > 0
        self.bound = percentage / 100  # a share of one thread's time
        self.window_num = window_num
        self.window_size_ms = window_size_ms
        self.throttle_ms_max = window_size_ms * throttle_windows
        # key -> [[window start ms, amount], ...], oldest first
        self._usage: dict[str, deque[list[float]]] = {}
        self.throttled_requests = 0
        self.throttle_ms_total = 0

    def _live(self, principal: str, now_ms: int) -> deque[list[float]] | None:
        """``principal``'s windows without those that ended before the quota window."""
        windows = self._usage.get(principal)
        horizon_ms = now_ms - self.window_size_ms * self.window_num
        while windows and windows[0][0] <= horizon_ms:
            windows.popleft()
        return windows

    def _span_ms(self, windows: deque[list[float]], now_ms: int) -> float:
        """Kafka's ``Rate.windowSize``: the span the windows cover, but at least
        ``window_num - 1`` full windows, so a short burst counts against the whole window."""
        elapsed_ms = now_ms - windows[0][0]
        full_windows = int(elapsed_ms // self.window_size_ms)
        if full_windows < self.window_num - 1:
            elapsed_ms += (self.window_num - 1 - full_windows) * self.window_size_ms
        return max(elapsed_ms, 1.0)

    def record(self, principal: str, used_s: float, now_ms: int, bound: float | None = None) -> int:
        """Add ``used_s`` (seconds of thread time, or bytes for a byte rate) to
        ``principal``'s usage; the throttle time in ms it has earned (0 within its quota).
        ``bound``: the quota, per second, when not the default."""
        if bound is None:
            bound = self.bound
        windows = self._live(principal, now_ms)
        if windows is None:
            if len(self._usage) >= QUOTA_PRINCIPALS_MAX:
                self._usage.clear()
            windows = self._usage[principal] = deque()
        if not windows or now_ms - windows[-1][0] >= self.window_size_ms:
            windows.append([float(now_ms), 0.0])
        windows[-1][1] += used_s
        span_ms = self._span_ms(windows, now_ms)
        share = sum(window[1] for window in windows) * 1000 / span_ms
        if share <= bound:
            return 0
        # Kafka's QuotaUtils.throttleTime, bounded (ClientRequestQuotaManager: one window).
        throttle_ms = min(round((share - bound) / bound * span_ms), self.throttle_ms_max)
        if throttle_ms <= 0:  # an excess worth less than half a millisecond
            return 0
        self.throttled_requests += 1
        self.throttle_ms_total += throttle_ms
        return throttle_ms

    def share(self, principal: str, now_ms: int) -> float:
        """The rate ``principal`` used over the quota window (a share of one thread, or bytes
        per second)."""
        windows = self._live(principal, now_ms)
        if not windows:
            return 0.0
        return sum(window[1] for window in windows) * 1000 / self._span_ms(windows, now_ms)


def byte_rate_quota(window_num: int, window_size_ms: int) -> RequestQuota:
    """The usage of ``producer_byte_rate`` or ``consumer_byte_rate`` quotas: bytes by bucket,
    over Kafka's windows, each bound given by the client quota that applies (no default: a
    client without one is not measured). The longest throttle is the whole quota window
    (Kafka's ``ClientQuotaManager``)."""
    return RequestQuota(100, window_num, window_size_ms, throttle_windows=window_num)
