"""A virtual clock and a heap of timed actions: the simulator's only notion of time."""

from __future__ import annotations

import heapq
from collections.abc import Callable
from dataclasses import dataclass, field


class SimulationError(AssertionError):
    """An invariant broke, a bound was hit, or the core raised: carries the seed and trace."""


@dataclass(order=True)
class _Event:
    at_ms: int
    sequence: int
    label: str = field(compare=False)
    action: Callable[[], None] = field(compare=False)


class EventScheduler:
    """Runs actions in virtual-time order; ties break by insertion order (deterministic)."""

    def __init__(self, events_max: int) -> None:
        self.now_ms = 0
        self.events_run = 0
        self.events_max = events_max
        self._heap: list[_Event] = []
        self._sequence = 0

    def at(self, at_ms: int, label: str, action: Callable[[], None]) -> None:
        self._sequence += 1
        heapq.heappush(self._heap, _Event(max(at_ms, self.now_ms), self._sequence, label, action))

    def after(self, delay_ms: int, label: str, action: Callable[[], None]) -> None:
        self.at(self.now_ms + delay_ms, label, action)

    def run_one(self) -> str | None:
        if not self._heap:
            return None
        if self.events_run >= self.events_max:
            raise SimulationError(f"event bound reached ({self.events_max} events)")
        event = heapq.heappop(self._heap)
        self.now_ms = event.at_ms
        self.events_run += 1
        event.action()
        return event.label

    def next_at_ms(self) -> int | None:
        return self._heap[0].at_ms if self._heap else None
