"""The building blocks of a node's metrics (docs/operating.md#metrics): Kafka's windowed
statistics (``WindowedStat``: ``*-avg``, ``*-max``, ``*-rate`` over ``metrics.num.samples``
windows of ``metrics.sample.window.ms``; NaN with no sample in the window, as Kafka reports it),
Yammer's histograms as the JMX exporter shows them (``Reservoir``, ``summary_family``), and the
one-value gauge and counter families every source renders."""

from __future__ import annotations

import math
import time
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Final

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, SummaryMetricFamily
from prometheus_client.samples import Sample

__all__ = [
    "LATENCY_BUCKETS_S",
    "QUANTILES",
    "Reservoir",
    "WindowedStat",
    "counter",
    "gauge",
    "quantile",
    "summary_family",
    "wall_ms",
]

# Kafka's metrics.sample.window.ms and metrics.num.samples defaults.
SAMPLE_WINDOW_MS: Final = 30_000
SAMPLES: Final = 2
# Samples a Kafka (Yammer) histogram keeps for its quantiles (its reservoir holds 1028).
RESERVOIR_SAMPLES_MAX: Final = 1028
# The quantiles Kafka's Yammer histograms publish (50thPercentile ... 999thPercentile).
QUANTILES: Final = (0.5, 0.75, 0.95, 0.98, 0.99, 0.999)
# Seconds: gRPC calls range from sub-millisecond reads to long-poll Fetches (500 ms).
LATENCY_BUCKETS_S: Final = (
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
)  # fmt: skip


def wall_ms() -> int:
    return time.time_ns() // 1_000_000


# ----- Kafka's windowed statistics ----------------------------------------------------------


class WindowedStat:
    """Kafka's ``SampledStat``: values recorded into ``samples`` windows of ``window_ms``;
    ``avg``/``max`` over the live windows and ``rate_per_s`` (Kafka's ``Rate``: the total over
    the elapsed time, at least ``samples - 1`` full windows)."""

    def __init__(self, window_ms: int = SAMPLE_WINDOW_MS, samples: int = SAMPLES) -> None:
        assert window_ms > 0
        assert samples >= 2
        self.window_ms = window_ms
        self.samples = samples
        # [window start ms, count, total, max], oldest first
        self._windows: deque[list[float]] = deque()

    def _live(self, now_ms: int) -> list[list[float]]:
        horizon = now_ms - self.window_ms * self.samples
        while self._windows and self._windows[0][0] <= horizon:
            self._windows.popleft()
        return list(self._windows)

    def record(self, value: float, now_ms: int) -> None:
        windows = self._windows
        if not windows or now_ms - windows[-1][0] >= self.window_ms:
            windows.append([float(now_ms), 0.0, 0.0, -math.inf])
            if len(windows) > self.samples:
                windows.popleft()
        window = windows[-1]
        window[1] += 1
        window[2] += value
        window[3] = max(window[3], value)

    def avg(self, now_ms: int) -> float:
        windows = self._live(now_ms)
        count = sum(w[1] for w in windows)
        return sum(w[2] for w in windows) / count if count else math.nan

    def max(self, now_ms: int) -> float:
        windows = [w for w in self._live(now_ms) if w[1]]
        return max(w[3] for w in windows) if windows else math.nan

    def rate_per_s(self, now_ms: int) -> float:
        windows = self._live(now_ms)
        if not windows:
            return 0.0
        elapsed_ms = now_ms - windows[0][0]
        full_windows = int(elapsed_ms // self.window_ms)
        if full_windows < self.samples - 1:
            elapsed_ms += (self.samples - 1 - full_windows) * self.window_ms
        return sum(w[2] for w in windows) / (elapsed_ms / 1000)


@dataclass
class Reservoir:
    """The last ``RESERVOIR_SAMPLES_MAX`` values of a Kafka (Yammer) histogram, with the count
    and sum of every value ever recorded."""

    values: deque[float] = field(default_factory=lambda: deque(maxlen=RESERVOIR_SAMPLES_MAX))
    count: int = 0
    total: float = 0.0

    def record(self, value: float) -> None:
        self.values.append(value)
        self.count += 1
        self.total += value

    def snapshot(self) -> tuple[tuple[float, ...], int, float]:
        return tuple(self.values), self.count, self.total


def quantile(sorted_values: Sequence[float], q: float) -> float:
    """Yammer's ``Snapshot.getValue``: linear interpolation between the closest ranks."""
    if not sorted_values:
        return math.nan
    position = q * (len(sorted_values) + 1)
    if position < 1:
        return sorted_values[0]
    if position >= len(sorted_values):
        return sorted_values[-1]
    lower = sorted_values[int(position) - 1]
    upper = sorted_values[int(position)]
    return lower + (position - math.floor(position)) * (upper - lower)


def summary_family(
    name: str, documentation: str, sample: tuple[tuple[float, ...], int, float]
) -> SummaryMetricFamily:
    """A Kafka histogram as the JMX exporter shows it: ``name{quantile="0.99"}`` over the
    reservoir, ``name_count`` and ``name_sum`` over every value."""
    values, count, total = sample
    ordered = sorted(values)
    family = SummaryMetricFamily(name, documentation, labels=())
    for q in QUANTILES:
        family.samples.append(Sample(name, {"quantile": str(q)}, quantile(ordered, q)))
    family.samples.append(Sample(f"{name}_count", {}, float(count)))
    family.samples.append(Sample(f"{name}_sum", {}, total))
    return family


def gauge(name: str, help_text: str, value: float) -> GaugeMetricFamily:
    return GaugeMetricFamily(name, help_text, value=value)


def counter(name: str, help_text: str, value: float) -> CounterMetricFamily:
    return CounterMetricFamily(name, help_text, value=value)
