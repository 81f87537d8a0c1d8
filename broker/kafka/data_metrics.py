"""What the data plane counts for the broker's metrics (docs/operating.md#metrics): Kafka's
``BrokerTopicMetrics`` (``BytesInPerSec``, ``MessagesInPerSec``, ``BytesOutPerSec``, per topic
and for all topics) and ``RequestMetrics``' ``TotalTimeMs`` per API, rendered with the JMX
exporter's names by ``broker/metrics.py``.

Counting is per batch, never per record: a produced batch adds its bytes and the record count
of its header (the batch is never decoded for it), a Fetch adds the bytes of the batches it
answers. Appends count in the writer thread, reads on the listeners' loop, and a scrape reads
from the metrics thread, so every change and every snapshot takes one lock (a few hundred
nanoseconds a request). Nothing here imports ``prometheus_client``: brokers without a metrics
listener count all the same, and never render.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Container, Iterable
from dataclasses import dataclass, field
from typing import Final

__all__ = ["REQUEST_TIMES_MAX", "DataPlaneMetrics", "DataPlaneSnapshot", "RequestTimes"]

# Kafka's (Yammer's) histogram reservoir: the quantiles are over the last this many values.
REQUEST_TIMES_MAX: Final = 1028
# Topics counted at once; past it the per-topic counts start again (counters reset, which
# Prometheus handles), the all-topics ones never do (our choice: ten times METADATA_TOPICS_MAX).
TOPICS_MAX: Final = 100_000


@dataclass(slots=True)
class _Counts:
    bytes_in: int = 0
    messages_in: int = 0
    bytes_out: int = 0

    def values(self) -> tuple[int, int, int]:
        return self.bytes_in, self.messages_in, self.bytes_out


@dataclass(slots=True)
class RequestTimes:
    """One API's request times in ms: the newest ``REQUEST_TIMES_MAX``, and the count and sum
    of all of them."""

    values: deque[float] = field(default_factory=lambda: deque(maxlen=REQUEST_TIMES_MAX))
    count: int = 0
    total_ms: float = 0.0


@dataclass(frozen=True, slots=True)
class DataPlaneSnapshot:
    """The counts at one moment: (bytes in, messages in, bytes out) per topic and for all
    topics, and per API name (values, count, sum in ms)."""

    topics: dict[str, tuple[int, int, int]]
    all_topics: tuple[int, int, int]
    request_ms: dict[str, tuple[tuple[float, ...], int, float]]


class DataPlaneMetrics:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._topics: dict[str, _Counts] = {}
        self._all = _Counts()
        self._requests: dict[str, RequestTimes] = {}

    def _topic(self, name: str) -> _Counts:
        counts = self._topics.get(name)
        if counts is None:
            if len(self._topics) >= TOPICS_MAX:
                self._topics.clear()
            counts = self._topics[name] = _Counts()
        return counts

    def produced(self, topic: str, size_bytes: int, records: int) -> None:
        """One batch appended to a partition of ``topic``."""
        with self._lock:
            counts = self._topic(topic)
            counts.bytes_in += size_bytes
            counts.messages_in += records
            self._all.bytes_in += size_bytes
            self._all.messages_in += records

    def fetched(self, reads: Iterable[tuple[str, int]]) -> None:
        """The bytes of records one Fetch answers, per (topic, bytes) read."""
        with self._lock:
            for topic, size_bytes in reads:
                self._topic(topic).bytes_out += size_bytes
                self._all.bytes_out += size_bytes

    def request_time(self, api_name: str, ms: float) -> None:
        """A request answered ``ms`` after its frame arrived (Kafka's ``TotalTimeMs``)."""
        with self._lock:
            times = self._requests.get(api_name)
            if times is None:
                times = self._requests[api_name] = RequestTimes()
            times.values.append(ms)
            times.count += 1
            times.total_ms += ms

    def snapshot(self, live_topics: Container[str]) -> DataPlaneSnapshot:
        """The counts now; a topic not in ``live_topics`` (deleted) is forgotten, as Kafka
        removes a deleted topic's metrics."""
        with self._lock:
            for gone in [name for name in self._topics if name not in live_topics]:
                del self._topics[gone]
            return DataPlaneSnapshot(
                {name: counts.values() for name, counts in self._topics.items()},
                self._all.values(),
                {
                    name: (tuple(times.values), times.count, times.total_ms)
                    for name, times in self._requests.items()
                },
            )
