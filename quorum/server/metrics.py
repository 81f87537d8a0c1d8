"""Prometheus metrics of a node (``metrics.listener``), named as Kafka's come out of the
Prometheus JMX exporter, so dashboards and alerts written for KRaft work unchanged
(docs/operating.md#metrics). This module is the collector every node shares (``NodeMetrics``)
and its wiring; the families live with what they measure:

- ``kafka_server_raftmetrics_*``: Kafka's ``raft-metrics``, every node
  (quorum/server/raft_metrics.py);
- ``kafka_server_snapshotemitter_*``: the snapshots this node wrote, every node (here);
- ``metaquorum_grpc_*``, ``metaquorum_admin_*``: gRPC calls and admin outcomes, every node
  (quorum/server/grpc_metrics.py); ``metaquorum_tls_*``, ``metaquorum_requests_refused_*``:
  what it refused (quorum/server/security_metrics.py);
- ``kafka_controller_kafkacontroller_*`` and ``kafka_controller_controllereventmanager_*``:
  controllers (quorum/server/controller_metrics.py);
- ``kafka_server_brokermetadatametrics_*``, ``metaquorum_broker_*``, ``metaquorum_kafka_*``:
  brokers (broker/metrics.py).

``metaquorum_*`` are this project's own, in Prometheus' conventions (base units, ``_total``).
Kafka's windowed statistics and histograms are quorum/server/metric_stats.py's.

Threads: the metrics listener (``MetricsHttpServer``) serves HTTP from a thread of its own, with
an event loop of its own; it answers ``GET /metrics`` (and ``HEAD``) and 404 to everything else,
gives each request ``METRICS_REQUEST_READ_MS_MAX`` to arrive and keeps at most
``METRICS_CONNECTIONS_MAX`` connections (docs/operating.md#the-metrics-listener). The
exposition is rendered in one more thread. A scrape never touches the Raft core from there: it
asks the event loop for one snapshot of plain values and immutable images (``LoopReader``: one
``call_soon_threadsafe`` callback of a few microseconds), then renders it, and counts
partitions from the immutable image, in the scrape thread. If the loop does not answer within
``SNAPSHOT_WAIT_S`` (it is busy), the scrape serves the previous snapshot and counts
``metaquorum_metrics_stale_snapshots_total``. The loop itself only updates a few numbers per
``Ready`` (``RaftMetrics.observe_ready``); counters and histograms of ``prometheus_client`` are
thread-safe.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any, Final

from prometheus_client import CollectorRegistry, disable_created_metrics
from prometheus_client.core import Metric

from quorum.config import HostPort, NodeConfig
from quorum.raft.node import RaftNode
from quorum.server.grpc_metrics import GrpcMetrics
from quorum.server.metric_stats import counter, gauge, wall_ms
from quorum.server.metrics_http import MetricsHttpServer
from quorum.server.raft_manager import RaftManager, StartupError
from quorum.server.raft_metrics import RaftMetrics, kafka_state, raft_families
from quorum.server.security_metrics import read_security_events, security_families

# How long a scrape waits for the event loop's snapshot before serving the previous one.
SNAPSHOT_WAIT_S: Final = 1.0

# ----- the loop's snapshot -------------------------------------------------------------------


class LoopReader:
    """Runs ``read`` in the event loop on behalf of another thread, waiting at most
    ``SNAPSHOT_WAIT_S``; when the loop is busy (or gone) the previous result is returned and
    counted as stale."""

    def __init__(self, read: Callable[[], dict[str, Any]]) -> None:
        self._read = read
        self._loop: asyncio.AbstractEventLoop | None = None
        self._last: dict[str, Any] | None = None
        self.stale = 0
        self.wait_s = SNAPSHOT_WAIT_S
        self._lock = threading.Lock()

    def attach(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop

    def read(self) -> dict[str, Any] | None:
        with self._lock:  # one scrape at a time asks the loop
            loop = self._loop
            future: concurrent.futures.Future[dict[str, Any]] = concurrent.futures.Future()

            def fill() -> None:
                if future.set_running_or_notify_cancel():
                    try:
                        future.set_result(self._read())
                    except Exception as exc:  # reported to the scrape, never to the loop
                        future.set_exception(exc)

            try:
                if loop is None or loop.is_closed():
                    raise RuntimeError("no event loop")
                loop.call_soon_threadsafe(fill)
                self._last = future.result(timeout=self.wait_s)
            except (concurrent.futures.TimeoutError, RuntimeError):
                future.cancel()
                self.stale += 1
            return self._last


# ----- the node's collector ------------------------------------------------------------------


class NodeMetrics:
    """Every metric one node serves. The node wires it up: ``raft`` after each Ready, its
    role's sources (``add_source``), the gRPC interceptor on ``grpc``. ``serve`` starts the
    HTTP listener."""

    def __init__(
        self,
        *,
        node: RaftNode,
        idle_s: Callable[[], float],
        registry: CollectorRegistry | None = None,
        unknown_voters: Callable[[], int] = lambda: 0,
    ) -> None:
        # Counters without their _created series (Kafka's have none; dashboards never use
        # them). A process-wide switch of prometheus_client: a node has one registry.
        disable_created_metrics()  # type: ignore[no-untyped-call]
        self.node = node
        self.raft = RaftMetrics(node, idle_s, unknown_voters)
        self.registry = registry if registry is not None else CollectorRegistry()
        # Readers run in the loop: plain values and immutable objects for the scrape thread.
        self._readers: list[Callable[[], dict[str, Any]]] = []
        self._renderers: list[Callable[[dict[str, Any]], Iterable[Metric]]] = []
        self.loop_reader = LoopReader(self._read_in_loop)
        self.grpc = GrpcMetrics(self.registry)
        self.registry.register(self)
        self._server: MetricsHttpServer | None = None

    # ----- wiring ---------------------------------------------------------------------------

    def add_source(
        self,
        read: Callable[[], dict[str, Any]],
        render: Callable[[dict[str, Any]], Iterable[Metric]],
    ) -> None:
        """``read`` runs in the event loop at each scrape; ``render`` turns what it returned
        into metric families in the scrape thread."""
        self._readers.append(read)
        self._renderers.append(render)

    # ----- collection -----------------------------------------------------------------------

    def _read_in_loop(self) -> dict[str, Any]:
        now_ms = int(time.monotonic_ns() // 1_000_000)
        data: dict[str, Any] = {
            "raft_state": kafka_state(self.node),
            "raft": self.raft.read(now_ms),
            "last_applied_offset": self.raft.last_applied_offset,
            "last_applied_wall_ms": self.raft.last_applied_wall_ms,
        }
        for read in self._readers:
            data.update(read())
        return data

    def collect(self) -> Iterator[Metric]:
        """Called by prometheus_client in the scrape thread."""
        data = self.loop_reader.read()
        yield counter(
            "metaquorum_metrics_stale_snapshots",
            "Scrapes answered with an older snapshot because the event loop did not answer "
            f"within {SNAPSHOT_WAIT_S} s (a loop this busy is a problem of its own)",
            self.loop_reader.stale,
        )
        if data is None:
            return
        yield from raft_families(data["raft_state"], data["raft"])
        for render in self._renderers:
            yield from render(data)

    # ----- the HTTP listener ----------------------------------------------------------------

    def serve(
        self, host: str, port: int, loop: asyncio.AbstractEventLoop, logger: Any = None
    ) -> int:
        """Start serving ``/metrics`` on ``host:port`` (0: any free port); returns the port.
        Raises ``OSError`` when the address cannot be bound."""
        self.loop_reader.attach(loop)
        server = MetricsHttpServer(self.registry, host, port, logger=logger)
        server.start()
        self._server = server
        return server.port

    def stop(self) -> None:
        """Stop the HTTP listener (blocks until its thread ended: call it off the loop)."""
        server, self._server = self._server, None
        if server is not None:
            server.stop()


# ----- every node's sources ------------------------------------------------------------------


def snapshot_families(data: Mapping[str, Any], now_wall_ms: int) -> Iterator[Metric]:
    """``kafka_server_snapshotemitter_*``: the latest snapshot this process wrote."""
    generated_wall = data["snapshot_generated_wall_ms"]
    yield gauge(
        "kafka_server_snapshotemitter_latestsnapshotgeneratedbytes",
        "Size in bytes of the latest snapshot this node generated (0: none yet)",
        data["snapshot_generated_bytes"],
    )
    yield gauge(
        "kafka_server_snapshotemitter_latestsnapshotgeneratedagems",
        "Age in ms of the latest snapshot this node generated (since start-up when none)",
        max(0, now_wall_ms - generated_wall),
    )


# ----- wiring for a node ---------------------------------------------------------------------


def node_metrics(config: NodeConfig, raft: RaftManager) -> NodeMetrics | None:
    """The node's metrics when ``metrics.listener`` is set (None otherwise): Raft, snapshot
    emitter and gRPC; the node adds its role's source. Hooks the driver's idle time."""
    if config.metrics_listener is None:
        return None
    driver = raft.driver
    node, peers = raft.node, raft.peers

    def unknown_voters() -> int:
        return sum(1 for v in node.voters if v != node.node_id and peers.address_of(v) is None)

    metrics = NodeMetrics(
        node=node,
        idle_s=lambda: driver.idle_s_total,
        unknown_voters=unknown_voters,
    )
    snapshotter = raft.snapshotter

    def read_snapshots() -> dict[str, Any]:
        return {
            "snapshot_generated_bytes": snapshotter.latest_generated_bytes,
            "snapshot_generated_wall_ms": snapshotter.latest_generated_wall_ms,
        }

    metrics.add_source(read_snapshots, lambda data: snapshot_families(data, wall_ms()))
    # What the node refused: failed TLS handshakes, refused requests (every role).
    metrics.add_source(read_security_events, security_families)
    return metrics


def serve_metrics(metrics: NodeMetrics, config: NodeConfig, logger: Any) -> int:
    """Start the node's ``metrics.listener`` (in the running loop); returns its port. A port
    that cannot be bound is a ``StartupError``."""
    address = config.metrics_listener
    assert address is not None
    try:
        port = metrics.serve(address.host, address.port, asyncio.get_running_loop(), logger)
    except OSError as exc:
        raise StartupError(f"metrics.listener: cannot listen on {address}: {exc}") from exc
    logger.info("metrics_listening", address=f"http://{HostPort(address.host, port)}/metrics")
    return port


__all__ = [
    "LoopReader",
    "NodeMetrics",
    "node_metrics",
    "serve_metrics",
    "snapshot_families",
]
