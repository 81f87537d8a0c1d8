"""``metaquorum broker start``: a broker process.

A broker is a Raft observer of ``__cluster_metadata``: the same ``RaftNode`` the controllers
run, as a non-voter, keeps a local copy of the metadata log (Fetch keyed by the metadata topic
id, long-poll, following leader changes, truncating on divergence). Committed batches are
replayed into the same ``MetadataImage``/``MetadataDelta`` the controllers use. The broker
registers with the active controller, heartbeats with the offset it has applied, and is
unfenced once caught up.

Partition directories follow the image (docs/architecture.md#brokers): once the image has
caught up to the broker's own registration record (the high watermark it saw at start, Kafka's
``initialCatchUpFuture``), a FULL reconciliation runs; every later image that gives this broker
partitions or takes some away runs an INCREMENTAL one over just those. Nothing destructive
happens before that first catch-up.

Fail safe (docs/architecture.md#brokers): a log dir that cannot be listed, or a
``partition.metadata`` whose read keeps failing with an I/O error (EIO, EMFILE, ENOMEM, after
``PARTITION_METADATA_READ_ATTEMPTS_MAX`` attempts, ``broker/logdirs.py``), stops the broker: it
logs ``log_dir_failed`` at ERROR with the path and errno, shuts down, and the process exits 1
with the same message. It never reconciles against a view it could not read, so a read error
never moves a live partition aside. Every data directory is locked for the life of the process
(``quorum/storage/dirlock.py``, taken by ``RaftManager.open``).

A committed prefix that diverges from the leader's log (the quorum lost a write this broker
had applied, quorum/raft/prefix_divergence.py) is not a dead end: the broker discards its local
metadata log and snapshots, fetches everything again from the leader (its snapshot first),
rebuilds its image from empty beside the one it serves, swaps it in once complete and
reconciles FULL, as after a snapshot load. Reads without ``min_metadata_offset`` are refused
meanwhile (UNAVAILABLE, health NOT_SERVING).

Kafka listeners (``listeners`` after the first entry, docs/kafka-listener.md) open once the
broker has caught up, as a Kafka broker opens its client listeners only then, and serve Kafka's
own clients from the same image (``broker/kafka/``), and the records of the partitions this
broker leads from their logs (``broker/log/``, docs/architecture.md#partition-logs): the
partition directories reconciliation makes hold Kafka's segments, a directory's log is closed
before it moves to ``deleting/``, and a maintenance task writes the log dirs' checkpoints and
applies retention, in a worker thread. They run on an event loop of their own,
in a thread of their own (``broker/kafka/thread.py``): this process's loop, which fetches the
metadata log and heartbeats the controller, never waits behind a Kafka client's request.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import grpc
import structlog

from broker.admin_service import BrokerAdminServicer
from broker.alter_partition import AlterPartitionClient
from broker.controller_client import ControllerClient, ControllerUnavailableError
from broker.log.config import LogConfig
from broker.log.maintenance import maintain_logs
from broker.log.manager import LogManager
from broker.logdirs import (
    LogDirs,
    LogDirUnavailableError,
    PartitionMetadataReadError,
    scope_dir_names,
)
from broker.node_configs import node_config_entries, static_configs
from broker.producer_ids import ProducerIdManager
from broker.reconcile import ReconcileMode
from quorum.config import SSL, NodeConfig
from quorum.controller.broker_configs import merged_broker_configs, topic_defaults
from quorum.controller.describe_configs import Describer
from quorum.errors import ErrorCode
from quorum.ids import Uuid
from quorum.metadata.batch import LogBatch, decode_batch
from quorum.metadata.delta import MetadataDelta
from quorum.metadata.image import MetadataImage, TopicImage
from quorum.raft.messages import SnapshotId
from quorum.raft.node import Ready
from quorum.raft.prefix_divergence import PrefixDivergence
from quorum.rpc.v1 import admin_pb2, admin_pb2_grpc, raft_pb2, raft_pb2_grpc
from quorum.security.authorization import RequestAuthorization
from quorum.security.identity import CallerResolver
from quorum.security.tls import KeyStore, PemFiles
from quorum.server.grpc_server import ADMIN_SERVICE, QUORUM_SERVICE, GrpcServer
from quorum.server.raft_manager import RaftManager, StartupError, stop_on_signals

if TYPE_CHECKING:
    from prometheus_client import Counter, Histogram

    from broker.kafka.apis import KafkaApis
    from broker.kafka.data_plane import DataPlane
    from broker.kafka.groups import GroupCoordinator
    from broker.kafka.server import KafkaListenerServer, KafkaTls, ListenerLimits
    from broker.kafka.thread import BrokerLoop, KafkaListenerThread
    from broker.replica.manager import AlterOutcome, ReplicaManager
    from broker.replica.without_data import IsrExpansion
    from quorum.server.metrics import NodeMetrics

REGISTER_RETRY_S = 0.5
# Controlled shutdown (Kafka's): on a stop signal a registered broker asks the active
# controller to take it out of ISRs and leadership and to end its session, waiting at most
# this long for the answer; its next incarnation then registers at once.
CONTROLLED_SHUTDOWN_TIMEOUT_S = 5.0


class LogDirFailedError(StartupError):
    """A log dir failed (``LogDirUnavailableError``): the broker stopped. A ``StartupError`` so
    that ``metaquorum broker start`` prints the message and exits 1, at start-up or later."""


def wall_ms() -> int:
    """Due times of pending deletions must survive reboots: wall clock, not monotonic."""
    return time.time_ns() // 1_000_000


def assigned_partitions(image: MetadataImage, broker_id: int) -> dict[tuple[Uuid, int], str]:
    """(topic id, partition) -> topic name for every replica the image places on the broker."""
    return {
        (topic.topic_id, partition.partition): topic.name
        for topic in image.topics_by_id.values()
        for partition in topic.partitions.values()
        if broker_id in partition.replicas
    }


def hosted(image: MetadataImage, key: tuple[Uuid, int], broker_id: int) -> bool:
    """Whether the image places partition ``key`` on the broker."""
    topic = image.topics_by_id.get(key[0])
    state = None if topic is None else topic.partitions.get(key[1])
    return state is not None and broker_id in state.replicas


@dataclass
class ReconcileStats:
    runs: int = 0
    created: int = 0
    moved_aside: int = 0
    deleted: int = 0
    metadata_written: int = 0
    failures: list[str] = field(default_factory=list)
    # Actions of every run that failed (Kafka's metadata-apply-error-count).
    apply_errors: int = 0


class BrokerQuorumServicer(raft_pb2_grpc.QuorumServiceServicer):
    """A broker's QuorumService: only DescribeQuorum, forwarded to the controllers as Kafka's
    brokers forward it (``kafka-metadata-quorum --bootstrap-server`` names a broker). The Raft
    RPCs stay UNIMPLEMENTED: a broker is an observer, never asked to vote or serve fetches.
    As on a controller, the answer names the cluster id only to a caller that authenticated
    with a certificate or sent the id itself (docs/security.md#what-a-node-may-claim)."""

    def __init__(
        self,
        controllers: ControllerClient,
        *,
        leader_id: Callable[[], int | None],
        callers: CallerResolver,
    ) -> None:
        self._controllers = controllers
        self._leader_id = leader_id
        self._callers = callers

    async def DescribeQuorum(
        self, request: raft_pb2.DescribeQuorumRequest, context: grpc.aio.ServicerContext
    ) -> raft_pb2.DescribeQuorumResponse:
        asked_for = request.cluster_id
        try:
            answer = await self._controllers.describe_quorum(request, self._leader_id())
        except ControllerUnavailableError as exc:
            await context.abort(
                grpc.StatusCode.UNAVAILABLE, f"this broker could not reach a controller: {exc}"
            )
        if answer.cluster_id != asked_for and not self._callers.caller(context).authenticated:
            answer.cluster_id = ""
        return answer


class BrokerNode:
    def __init__(self, config: NodeConfig) -> None:
        self.config = config
        self.broker_id = config.node_id
        self.log = structlog.get_logger("broker").bind(node_id=config.node_id)
        self.raft, self.image = RaftManager.open(
            config,
            voter=False,
            logger=self.log,
            on_committed=self._on_committed,
            on_ready=self._on_ready,
        )
        self.cluster_id = self.raft.cluster_id
        self.driver = self.raft.driver
        self._full_requested = False
        # The image rebuilt from empty after a diverged metadata log was discarded; reads keep
        # ``image`` until it is complete (quorum/raft/prefix_divergence.py).
        self._rebuild: MetadataImage | None = None
        self.raft.on_log_discarded = self._log_discarded
        # The partition logs (records); reconciliation closes a directory's log before it
        # moves the directory to deleting/.
        self.partition_logs = LogManager(config.log_dirs, self.log)
        self.log_dirs = LogDirs(config.log_dirs, self.log, on_move_aside=self.partition_logs)
        self.controllers = ControllerClient(
            config.controller_quorum_voters
            or dict(enumerate(config.controller_quorum_bootstrap_servers)),
            self.raft.security.client,
            cluster_id=self.raft.cluster_id,
            voter_ids=bool(config.controller_quorum_voters),
        )
        self.incarnation_id = Uuid.random()
        self.broker_epoch = -1
        # InitProducerId's ids, from blocks the active controller hands out.
        self.producer_ids = ProducerIdManager(
            self.controllers, self.broker_id, lambda: self.broker_epoch
        )
        # The leaders' ISR changes (docs/replication.md), sent to the active controller.
        self.alter_partitions = AlterPartitionClient(
            self.controllers, self.broker_id, lambda: self.broker_epoch
        )
        self.replicas: ReplicaManager | None = None
        self._expanding: set[tuple[Uuid, int]] = set()
        self._background: set[asyncio.Task[None]] = set()
        self.registration_offset: int | None = None
        self.fenced = True
        self.caught_up = asyncio.Event()
        # Set when a heartbeat should go out before the interval is over: the broker has just
        # caught up and asks to be unfenced at once.
        self._heartbeat_now = asyncio.Event()
        self.image_changed = asyncio.Event()
        # The partitions this broker gained or lost since the last reconciliation pass, with
        # their topic names: what the next INCREMENTAL pass looks at.
        self._scope: dict[tuple[Uuid, int], str] = {}
        self.stats = ReconcileStats()
        # log dir -> (directories, bytes) in its deleting/, as of the last scan or run.
        self.pending_deletions: dict[str, tuple[int, int]] = {}
        # Prometheus metrics (metrics.listener; docs/operating.md#metrics). The module (and
        # prometheus_client, 12 MB of RSS) is imported only by nodes that serve them.
        self.metrics: NodeMetrics | None = None
        self._reconciliations: tuple[Counter, Histogram] | None = None
        interceptors: tuple[grpc.aio.ServerInterceptor, ...] = ()
        if config.metrics_listener is not None:
            from broker.metrics import broker_families, reconciliation_metrics  # noqa: PLC0415
            from quorum.server.grpc_metrics import GrpcMetricsInterceptor  # noqa: PLC0415
            from quorum.server.metrics import node_metrics  # noqa: PLC0415 - metrics only

            metrics = node_metrics(config, self.raft)
            assert metrics is not None  # metrics.listener is set
            self.metrics = metrics
            interceptors = (GrpcMetricsInterceptor(metrics.grpc),)
            self._reconciliations = reconciliation_metrics(metrics.registry)
            metrics.add_source(self._read_metrics, lambda data: broker_families(data, wall_ms()))
        self.grpc = GrpcServer(
            config.listener,
            (ADMIN_SERVICE, QUORUM_SERVICE),
            self.log,
            security=self.raft.security,
            health_listener=config.health_listener,
            interceptors=interceptors,
        )
        self.kafka_listeners: list[KafkaListenerServer] = []
        self._kafka_thread: KafkaListenerThread | None = None
        if config.kafka_listeners:
            # The Kafka codec (kio) is imported only by brokers with a Kafka listener.
            from broker.kafka.data_plane import DataPlane  # noqa: PLC0415
            from broker.kafka.server import KafkaListenerServer  # noqa: PLC0415
            from broker.kafka.thread import BrokerLoop  # noqa: PLC0415

            self._broker_loop: BrokerLoop = BrokerLoop()
            # One data plane (its writer and reader threads) for every Kafka listener.
            self.data_plane: DataPlane = DataPlane(
                self.partition_logs,
                broker_id=self.broker_id,
                image=lambda: self.image,
                static_configs=static_configs(config),
            )
            # One group coordinator too: the groups of a partition have one owner.
            self.group_coordinator = self._group_coordinator()
            limits = self._kafka_limits()
            self.kafka_listeners = [
                KafkaListenerServer(
                    listener,
                    self._kafka_apis(),
                    CallerResolver(config.ssl_principal_mapping_rules),
                    tls=self._kafka_tls() if config.protocol_of(listener) == SSL else None,
                    logger=self.log,
                    limits=limits,
                )
                for listener in config.kafka_listeners
            ]

    # ----- metadata -------------------------------------------------------------------------

    def _on_committed(self, batches: Sequence[LogBatch]) -> None:
        if self._rebuild is not None:
            rebuilding = MetadataDelta(self._rebuild)
            for batch in batches:
                rebuilding.replay_batch(decode_batch(batch.data))
            self._rebuild = rebuilding.apply()
            self.raft.after_replay(batches, self._rebuild)
            return
        delta = MetadataDelta(self.image)
        for batch in batches:
            delta.replay_batch(decode_batch(batch.data))
        changes = delta.local_changes(self.broker_id)
        before = self.image
        self.image = delta.apply()
        for changed in (*changes.creates.values(), *changes.deletes.values()):
            self._scope.update(((changed.topic_id, p), changed.name) for p in changed.partitions)
        if changes.creates or changes.deletes:
            self.image_changed.set()
        if self.image.topics_by_id is not before.topics_by_id or (
            self.image.brokers is not before.brokers
        ):
            self._publish_to_replicas()
        self.raft.after_replay(batches, self.image)
        self._check_caught_up()

    def _read_metrics(self) -> dict[str, object]:
        """The broker's metric values (in the loop; the image is immutable)."""
        return {
            "broker_id": self.broker_id,
            "image_offset": self.image.offset,
            "metadata_load_errors": self.raft.metadata_load_errors,
            "metadata_apply_errors": self.stats.apply_errors,
            "pending_deletions": dict(self.pending_deletions),
            "caught_up": self.caught_up.is_set(),
            # Plain ints the Kafka listeners' thread keeps (docs/operating.md#this-projects-own).
            "kafka_listeners": {s.listener.name: s.stats() for s in self.kafka_listeners},
            # Read in the scrape thread: the counts under their lock, the logs' sizes.
            "data_plane": self.data_plane if self.kafka_listeners else None,
            "group_coordinator": self.group_coordinator if self.kafka_listeners else None,
            "image": self.image,
        }

    def _count_pending_deletions(self) -> None:
        """Refresh ``pending_deletions`` (in the loop, while no reconciliation runs)."""
        counts = dict.fromkeys(self.log_dirs.log_dir_names, (0, 0))
        for pending in self.log_dirs.pending_deletions():
            count, size = counts.get(pending.log_dir, (0, 0))
            counts[pending.log_dir] = (count + 1, size + pending.size_bytes)
        self.pending_deletions = counts

    def _on_ready(self, ready: Ready) -> None:
        if self.metrics is not None:
            self.metrics.raft.observe_ready(ready, self.raft.clock.now_ms())
        if self._rebuild is not None and not self.raft.node.rebuilding_committed_prefix:
            self._rebuilt()
        self.raft.maybe_take_snapshot(self.image)
        if ready.snapshot_to_fetch is not None:
            self.raft.spawn(self._fetch_snapshot(*ready.snapshot_to_fetch))

    async def _fetch_snapshot(self, leader_id: int, snapshot: SnapshotId) -> None:
        """Behind the leader's log start (away too long, or wiped): load its snapshot. Every
        topic absent from it counts as deleted: the next reconciliation is FULL."""

        def on_image(image: MetadataImage) -> None:
            if self._rebuild is not None:
                self._rebuild = image  # served once the rebuild is complete
                return
            self.image = image
            self._full_requested = True
            self.image_changed.set()

        await self.raft.fetch_snapshot(leader_id, snapshot, on_image)
        self._check_caught_up()

    def _log_discarded(self, divergence: PrefixDivergence) -> None:
        """The local metadata log was discarded after its committed prefix diverged (in the
        driver loop): rebuild the image from empty while the old one is still served."""
        self._rebuild = MetadataImage.EMPTY
        self.grpc.set_serving(False)
        self.log.warning(
            "metadata_image_rebuilding",
            serving_offset=self.image.offset,
            leader_id=divergence.leader_id,
            leader_epoch=divergence.leader_epoch,
        )

    def _rebuilt(self) -> None:
        """The rebuilt image holds everything the quorum committed: serve it, reconcile FULL
        (topics the quorum lost are moved aside, as after a snapshot load)."""
        image, self._rebuild = self._rebuild, None
        assert image is not None
        lost = [
            topic.name
            for topic_id, topic in self.image.topics_by_id.items()
            if topic_id not in image.topics_by_id
        ]
        self.log.warning(
            "metadata_image_rebuilt",
            image_offset=image.offset,
            previous_image_offset=self.image.offset,
            topics=len(image.topics_by_id),
            topics_gone=len(lost),
            topics_gone_first=[repr(name) for name in sorted(lost)[:10]],
        )
        self.image = image
        self._scope = {}
        self._full_requested = True
        self.image_changed.set()
        if self.caught_up.is_set():
            self.grpc.set_serving(True)
        else:
            self._check_caught_up()

    def _not_caught_up(self) -> str | None:
        """Why this broker may not answer reads from its image yet (None: it may)."""
        if self._rebuild is not None:
            return (
                f"broker {self.broker_id} is fetching the metadata log again after its copy "
                "diverged from the quorum's (a lost write); it serves again once its image is "
                f"rebuilt (at offset {self._rebuild.offset} so far): retry shortly or ask "
                "another node"
            )
        if self.caught_up.is_set():
            return None
        target = (
            "its registration"
            if self.registration_offset is None
            else (f"offset {self.registration_offset}")
        )
        return (
            f"broker {self.broker_id} is catching up with the metadata log since it started "
            f"(applied offset {self.image.offset}, caught up at {target}); retry shortly or "
            "ask another node"
        )

    def _check_caught_up(self) -> None:
        if (
            not self.caught_up.is_set()
            and self.registration_offset is not None
            and self.image.offset >= self.registration_offset
        ):
            self.caught_up.set()
            self._heartbeat_now.set()
            self.log.info("caught_up", applied_offset=self.image.offset)
            self.grpc.set_serving(True)

    # ----- registration and heartbeats ------------------------------------------------------

    async def _register(self) -> None:
        answer = await self.controllers.call(
            "RegisterBroker",
            admin_pb2.RegisterBrokerRequest(
                cluster_id=self.cluster_id,
                broker_id=self.broker_id,
                incarnation_id=self.incarnation_id.bytes,
                # The gRPC listener first (what DescribeCluster shows), then the Kafka ones,
                # each at its advertised address.
                listeners=[
                    admin_pb2.BrokerListener(name=a.name, host=a.host, port=a.port)
                    for a in map(self.config.advertised, self.config.listeners)
                ],
                rack=self.config.broker_rack or "",
            ),
        )
        code = ErrorCode(answer.error_code)
        if code is ErrorCode.INCONSISTENT_CLUSTER_ID:
            raise StartupError(answer.error_message)
        if code is not ErrorCode.NONE:
            self.log.warning("registration_refused", error=code.name, message=answer.error_message)
            return
        self.broker_epoch = answer.broker_epoch
        if self.registration_offset is None:
            self.registration_offset = answer.metadata_offset
        self.log.info(
            "registered",
            broker_epoch=self.broker_epoch,
            catch_up_to_offset=self.registration_offset,
        )
        self._check_caught_up()

    async def _heartbeat(self) -> None:
        answer = await self.controllers.call(
            "BrokerHeartbeat",
            admin_pb2.BrokerHeartbeatRequest(
                broker_id=self.broker_id,
                broker_epoch=self.broker_epoch,
                current_metadata_offset=max(self.image.offset, 0),
            ),
        )
        code = ErrorCode(answer.error_code)
        if code is ErrorCode.STALE_BROKER_EPOCH:
            self.log.warning("registration_lost", message=answer.error_message)
            self.broker_epoch = -1
            return
        if code is not ErrorCode.NONE:
            self.log.warning("heartbeat_refused", error=code.name, message=answer.error_message)
            return
        if answer.is_fenced != self.fenced:
            self.fenced = answer.is_fenced
            self.log.info("fenced" if self.fenced else "unfenced", broker_epoch=self.broker_epoch)

    async def _controlled_shutdown(self) -> None:
        """Kafka's controlled shutdown: a heartbeat with ``want_shut_down``; the controller
        fences this broker (ISRs and leadership move away) and ends its session, so a restart
        registers at once instead of meeting DUPLICATE_BROKER_REGISTRATION until
        ``broker.session.timeout.ms`` has passed. Bounded by CONTROLLED_SHUTDOWN_TIMEOUT_S;
        if no controller answers, the session simply expires as after a crash."""
        if self.broker_epoch < 0:
            return
        request = admin_pb2.BrokerHeartbeatRequest(
            broker_id=self.broker_id,
            broker_epoch=self.broker_epoch,
            current_metadata_offset=max(self.image.offset, 0),
            want_shut_down=True,
        )
        try:
            answer = await asyncio.wait_for(
                self.controllers.call("BrokerHeartbeat", request), CONTROLLED_SHUTDOWN_TIMEOUT_S
            )
        except (ControllerUnavailableError, TimeoutError) as exc:
            self.log.warning("controlled_shutdown_failed", reason=str(exc) or type(exc).__name__)
            return
        code = ErrorCode(answer.error_code)
        if code is not ErrorCode.NONE or not answer.should_shut_down:
            self.log.warning(
                "controlled_shutdown_failed", error=code.name, message=answer.error_message
            )
            return
        self.log.info(
            "controlled_shutdown", broker_epoch=self.broker_epoch, fenced_at=answer.metadata_offset
        )

    async def lifecycle(self) -> None:
        interval_s = self.config.broker_heartbeat_interval_ms / 1000
        while True:
            try:
                if self.broker_epoch < 0:
                    await self._register()
                if self.broker_epoch >= 0:
                    await self._heartbeat()
                    if not self.kafka_listeners and not self.fenced and self.caught_up.is_set():
                        self._expand_without_data()  # retries a refused or lost expansion
            except ControllerUnavailableError as exc:
                self.log.debug("controller_unavailable", reason=str(exc))
            wait_s = interval_s if self.broker_epoch >= 0 else REGISTER_RETRY_S
            if self.fenced and self.caught_up.is_set():
                wait_s = min(wait_s, REGISTER_RETRY_S)  # ask to be unfenced soon
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._heartbeat_now.wait(), wait_s)
            self._heartbeat_now.clear()

    # ----- reconciliation -------------------------------------------------------------------

    async def reconcile_forever(self) -> None:
        await self.caught_up.wait()
        mode = ReconcileMode.FULL
        while True:
            self.image_changed.clear()
            if self._full_requested:  # a snapshot replaced the image: compare everything
                self._full_requested = False
                mode = ReconcileMode.FULL
            scope, self._scope = self._scope, {}
            image = self.image
            if mode is ReconcileMode.FULL:
                assigned = assigned_partitions(image, self.broker_id)
            else:
                assigned = {
                    k: name for k, name in scope.items() if hosted(image, k, self.broker_id)
                }
            removed = {key for key in scope if key not in assigned}
            started_s = time.perf_counter()
            try:
                plan, result = await asyncio.to_thread(
                    self.log_dirs.reconcile,
                    assigned=assigned,
                    mode=mode,
                    now_ms=wall_ms(),
                    delete_delay_ms=self.config.delete_topic_delay_ms,
                    removed=removed,
                    scope=None if mode is ReconcileMode.FULL else scope,
                )
            except LogDirUnavailableError as exc:
                raise self._log_dir_failed(exc) from exc
            if mode is ReconcileMode.INCREMENTAL and (unfinished := result.unfinished(plan)):
                # A failed create or move (ENOSPC, EACCES) is tried again by the next pass.
                retry = {
                    key: scope[key]
                    for name, key in scope_dir_names(scope).items()
                    if name in unfinished
                }
                self._scope = retry | self._scope
            if self._reconciliations is not None:
                runs, duration = self._reconciliations
                runs.labels(mode.name).inc()
                duration.observe(time.perf_counter() - started_s)
            self.stats.apply_errors += len(result.failures)
            self._count_pending_deletions()
            self.stats.runs += 1
            self.stats.created += len(plan.creates)
            self.stats.moved_aside += len(plan.move_aside)
            self.stats.deleted += len(plan.deletes)
            self.stats.metadata_written += len(plan.write_metadata)
            if not plan.is_empty or mode is ReconcileMode.FULL:
                self.log.info(
                    "reconciled",
                    mode=mode.name,
                    applied_offset=self.image.offset,
                    created=len(plan.creates),
                    moved_aside=len(plan.move_aside),
                    deleted=len(plan.deletes),
                    metadata_written=len(plan.write_metadata),
                    failures=len(result.failures),
                )
            mode = ReconcileMode.INCREMENTAL
            due = self.log_dirs.next_deletion_due_ms()
            timeout_s = None if due is None else max(0.0, (due - wall_ms()) / 1000) + 0.01
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.image_changed.wait(), timeout_s)

    # ----- Kafka listeners (docs/kafka-listener.md) -----------------------------------------

    def _kafka_apis(self) -> KafkaApis:
        """The handlers of one Kafka listener. They run on the listeners' loop; what they need
        from this process's loop (a forwarded write, a wait for an applied offset) runs here."""
        from broker.kafka.apis import KafkaApis  # noqa: PLC0415
        from broker.kafka.forwarding import Forwarder  # noqa: PLC0415
        from broker.kafka.thread import ForwardingOnBrokerLoop  # noqa: PLC0415

        broker_loop = self._broker_loop
        return KafkaApis(
            broker_id=self.broker_id,
            cluster_id=self.cluster_id,
            image=lambda: self.image,
            authorization=RequestAuthorization.from_config(self.config, self.cluster_id),
            forwarder=ForwardingOnBrokerLoop(Forwarder(self.controllers), broker_loop),
            wait_applied=lambda offset, timeout_s: broker_loop.run(
                self.driver.wait_for_offset(offset, lambda: self.image.offset, timeout_s)
            ),
            data=self.data_plane,
            describe_quorum=lambda request: broker_loop.run(self._describe_quorum(request)),
            # Read from the listeners' thread: one int the broker's loop replaces whole.
            kraft_version=lambda: self.driver.node.kraft_version,
            next_producer_id=lambda: broker_loop.run(self.producer_ids.next_id()),
            node_config=self.config,
            groups=self.group_coordinator,
        )

    def _group_coordinator(self) -> GroupCoordinator:
        """The broker's group coordinator (docs/groups.md), on the listeners' loop; it asks
        the controller for ``__consumer_offsets`` from this process's loop."""
        from broker.groups.group import GroupSettings  # noqa: PLC0415
        from broker.kafka.groups import CoordinatorSettings, GroupCoordinator  # noqa: PLC0415

        config = self.config
        broker_loop = self._broker_loop
        settings = CoordinatorSettings(
            groups=GroupSettings(
                min_session_timeout_ms=config.group_min_session_timeout_ms,
                max_session_timeout_ms=config.group_max_session_timeout_ms,
                initial_rebalance_delay_ms=config.group_initial_rebalance_delay_ms,
                max_size=config.group_max_size,
            ),
            num_partitions=config.offsets_topic_num_partitions,
            replication_factor=config.offsets_topic_replication_factor,
            segment_bytes=config.offsets_topic_segment_bytes,
            commit_timeout_ms=config.offsets_commit_timeout_ms,
            metadata_max_bytes=config.offset_metadata_max_bytes,
            retention_ms=config.offsets_retention_minutes * 60_000,
            retention_check_interval_ms=config.offsets_retention_check_interval_ms,
        )
        return GroupCoordinator(
            self.data_plane,
            lambda: self.image,
            broker_id=self.broker_id,
            settings=settings,
            create_topic=lambda partitions, replication, configs: broker_loop.run(
                self._create_offsets_topic(partitions, replication, configs)
            ),
        )

    async def _create_offsets_topic(
        self, partitions: int, replication_factor: int, configs: dict[str, str]
    ) -> None:
        """``__consumer_offsets``, created by the active controller at this broker's request,
        as this broker (its node certificate; docs/groups.md#the-offsets-topic)."""
        request = admin_pb2.CreateTopicsRequest()
        request.topics.add(
            name="__consumer_offsets",
            num_partitions=partitions,
            replication_factor=replication_factor,
            configs=[admin_pb2.TopicConfig(name=k, value=v) for k, v in sorted(configs.items())],
        )
        try:
            answer = await self.controllers.call("CreateTopics", request, timeout_s=10)
        except ControllerUnavailableError as exc:
            self.log.info("offsets_topic_create_failed", reason=str(exc))
            return
        for topic in answer.topics:
            self.log.info(
                "offsets_topic_create",
                error_code=topic.error_code,
                message=topic.error_message,
                partitions=partitions,
                replication_factor=replication_factor,
            )

    async def _describe_quorum(self, request: raft_pb2.DescribeQuorumRequest) -> object:
        """A DescribeQuorum a Kafka client sent, forwarded as the gRPC QuorumService's."""
        from broker.kafka.quorum_api import QuorumUnreachableError  # noqa: PLC0415

        try:
            return await self.controllers.describe_quorum(request, self.driver.node.leader_id)
        except ControllerUnavailableError as exc:
            raise QuorumUnreachableError(str(exc)) from None

    def _kafka_limits(self) -> ListenerLimits:
        """Connection limits and the request quota, shared by every Kafka listener."""
        from broker.kafka.connections import OverrideUnresolvableError  # noqa: PLC0415
        from broker.kafka.server import ListenerLimits  # noqa: PLC0415

        try:
            return ListenerLimits.from_config(self.config)
        except OverrideUnresolvableError as exc:
            raise StartupError(str(exc)) from None

    def _kafka_tls(self) -> KafkaTls:
        """The node's keystore and truststore serve its SSL Kafka listeners too."""
        from broker.kafka.server import KafkaTls  # noqa: PLC0415

        files = self.raft.security.files
        if files is None:  # the gRPC listener is PLAINTEXT: load them here
            config = self.config
            keystore = KeyStore(
                config.ssl_keystore_location,
                config.ssl_keystore_key,
                config.ssl_keystore_certificate_chain,
            )
            if keystore == KeyStore() or config.ssl_truststore_location is None:
                raise StartupError(
                    "a Kafka listener is SSL (listener.security.protocol.map) but "
                    "ssl.keystore.location or ssl.truststore.location is not set: give the "
                    "node's key and certificate chain and the CA bundle, or map the listener "
                    "to PLAINTEXT (docs/kafka-listener.md)"
                )
            files = PemFiles(keystore, config.ssl_truststore_location)
        return KafkaTls(files, self.config.ssl_client_auth)

    def _log_config(self, topic: TopicImage) -> LogConfig:
        """A topic's log config now: its configs over this broker's dynamic and static
        defaults (``DataPlane.config``, which caches; a broker without a Kafka listener
        resolves them at each retention check)."""
        if self.config.kafka_listeners:
            return self.data_plane.config(topic)
        merged = merged_broker_configs(
            self.image.broker_configs, self.broker_id, static_configs(self.config)
        )
        return LogConfig.of(topic.configs, topic_defaults(merged))

    async def serve_kafka(self) -> None:
        """Open the Kafka listeners once caught up, in their own thread; keep them until
        cancelled."""
        from broker.kafka.thread import KafkaListenerThread, ListenerStartError  # noqa: PLC0415

        await self.caught_up.wait()
        self._broker_loop.attach(asyncio.get_running_loop())
        self._kafka_thread = KafkaListenerThread(self.kafka_listeners)
        try:
            try:
                await self._kafka_thread.start()
            except ListenerStartError as exc:
                self.log.error("kafka_listener_failed", listener=str(exc.listener), error=str(exc))
                raise StartupError(
                    f"cannot open Kafka listener {exc.listener}: {exc} (is another "
                    "process using the port? see listeners in the broker's config)"
                ) from None
            await self._kafka_thread.run(self._start_replication())
            await asyncio.Event().wait()
        finally:
            replicas, self.replicas = self.replicas, None
            if replicas is not None:
                with contextlib.suppress(RuntimeError, AssertionError):
                    await self._kafka_thread.run(replicas.stop())
            await self._kafka_thread.stop()
            # No request is in flight any more: let the log threads finish their jobs.
            await asyncio.to_thread(self.data_plane.close)

    # ----- replication (docs/replication.md) -------------------------------------------------

    async def _start_replication(self) -> None:
        """On the listeners' loop: the replica manager, fed every new image from here on."""
        from broker.replica.fetcher import FetchSettings  # noqa: PLC0415
        from broker.replica.manager import ReplicaManager, ReplicationSettings  # noqa: PLC0415

        config = self.config
        listener = config.kafka_listeners[0]
        tls = None
        if config.protocol_of(listener) == SSL:
            tls = self._kafka_tls().client_context()
        manager = ReplicaManager(
            self.data_plane,
            self.broker_id,
            broker_epoch=lambda: self.broker_epoch,
            alter_partition=self._alter_partition,
            listener_name=listener.name,
            tls=tls,
            settings=ReplicationSettings(
                lag_time_max_ms=config.replica_lag_time_max_ms,
                fetch=FetchSettings(
                    wait_max_ms=config.replica_fetch_wait_max_ms,
                    max_bytes=config.replica_fetch_max_bytes,
                    response_max_bytes=config.replica_fetch_response_max_bytes,
                    backoff_ms=config.replica_fetch_backoff_ms,
                ),
            ),
            logger=self.log,
        )
        manager.start()
        manager.on_image(self.image)
        self.data_plane.replicas = manager
        self.replicas = manager

    async def _alter_partition(
        self,
        topic_id: Uuid,
        partition: int,
        leader_epoch: int,
        new_isr: tuple[int, ...],
        partition_epoch: int,
    ) -> AlterOutcome:
        """An AlterPartition from the listeners' loop, sent on this loop's controller client."""
        return await self._broker_loop.run(
            self.alter_partitions.alter(topic_id, partition, leader_epoch, new_isr, partition_epoch)
        )

    def _publish_to_replicas(self) -> None:
        replicas, thread = self.replicas, self._kafka_thread
        if replicas is not None and thread is not None:
            thread.call_soon(replicas.on_image, self.image)
            # The group coordinator loads the __consumer_offsets partitions this broker now
            # leads, and drops those it no longer leads (docs/groups.md#the-coordinator).
            thread.call_soon(self.group_coordinator.follow, self.image)
        elif not self.kafka_listeners and self.caught_up.is_set():
            self._expand_without_data()

    def _expand_without_data(self) -> None:
        """A broker without a Kafka listener holds no records: as a leader it adds every live
        replica back to the ISR (``broker/replica/without_data.py``), one AlterPartition per
        partition at a time."""
        from broker.replica.without_data import expansions  # noqa: PLC0415

        for change in expansions(self.image, self.broker_id):
            key = (change.topic_id, change.partition)
            if key in self._expanding:
                continue
            self._expanding.add(key)

            async def send(change: IsrExpansion = change, key: tuple[Uuid, int] = key) -> None:
                try:
                    result = await self.alter_partitions.alter(
                        change.topic_id,
                        change.partition,
                        change.leader_epoch,
                        change.new_isr,
                        change.partition_epoch,
                    )
                    if result.error_code:
                        self.log.info(
                            "alter_partition_refused",
                            topic_id=str(change.topic_id),
                            partition=change.partition,
                            error_code=int(result.error_code),
                            message=result.error_message,
                        )
                finally:
                    self._expanding.discard(key)

            task = asyncio.create_task(send())
            self._background.add(task)
            task.add_done_callback(self._background.discard)

    # ----- process --------------------------------------------------------------------------

    def _add_servicers(self, server: grpc.aio.Server) -> None:
        admin_pb2_grpc.add_AdminServiceServicer_to_server(
            BrokerAdminServicer(
                self.driver,
                cluster_id=self.cluster_id,
                voters=self.raft.peers.voter_addresses,
                image=lambda: self.image,
                callers=CallerResolver(self.config.ssl_principal_mapping_rules),
                authorization=RequestAuthorization.from_config(self.config, self.cluster_id),
                caught_up=self._not_caught_up,
                describer=Describer(self.broker_id, node_config_entries(self.config)),
            ),
            server,
        )
        raft_pb2_grpc.add_QuorumServiceServicer_to_server(
            BrokerQuorumServicer(
                self.controllers,
                leader_id=lambda: self.driver.node.leader_id,
                callers=CallerResolver(self.config.ssl_principal_mapping_rules),
            ),
            server,
        )

    def _log_dir_failed(self, exc: LogDirUnavailableError) -> LogDirFailedError:
        fields: dict[str, object] = {"log_dir": str(exc.log_dir), "error": str(exc)}
        if isinstance(exc, PartitionMetadataReadError):
            fields |= {"path": str(exc.path), "errno": exc.errno}
        self.log.error("log_dir_failed", action="stopping the broker", **fields)
        return LogDirFailedError(str(exc))

    async def run(self, stop: asyncio.Event) -> None:
        try:
            scan = await asyncio.to_thread(self.log_dirs.scan)
        except LogDirUnavailableError as exc:
            await self.raft.close()
            raise self._log_dir_failed(exc) from exc
        self.log.info(
            "log_dirs_scanned",
            partitions=len(scan.on_disk),
            pending_deletions=len(scan.pending_deletions),
        )
        self._count_pending_deletions()
        await self.grpc.start(self._add_servicers, cluster_id=self.cluster_id)
        if self.metrics is not None:
            from quorum.server.metrics import serve_metrics  # noqa: PLC0415

            serve_metrics(self.metrics, self.config, self.log)
        tasks = {
            asyncio.create_task(self.driver.run(), name="raft-observer"),
            asyncio.create_task(self.lifecycle(), name="lifecycle"),
            asyncio.create_task(self.reconcile_forever(), name="reconcile"),
            asyncio.create_task(
                maintain_logs(
                    self.partition_logs,
                    lambda: self.image,
                    self.broker_id,
                    self.caught_up,
                    config=self._log_config,
                    retention_check_interval_ms=self.config.log_retention_check_interval_ms,
                    cleaner_backoff_ms=(
                        self.config.log_cleaner_backoff_ms
                        if self.config.log_cleaner_enable
                        else None
                    ),
                ),
                name="maintain-logs",
            ),
            asyncio.create_task(stop.wait(), name="stop-signal"),
        }
        if self.kafka_listeners:
            tasks.add(asyncio.create_task(self.serve_kafka(), name="kafka-listeners"))
        done, _ = await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
        self.log.info("shutting_down", applied_offset=self.image.offset)
        for task in tasks:
            if task.get_name() == "lifecycle":
                task.cancel()  # no heartbeat may follow the controlled shutdown's
                await asyncio.gather(task, return_exceptions=True)
        if stop.is_set():
            await self._controlled_shutdown()
        self.driver.stop()
        for task in tasks:
            if task.get_name() != "raft-observer":
                task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        # Every log flushed, its recovery point its end, the checkpoints written: the next
        # start checks nothing (docs/architecture.md#partition-logs).
        await asyncio.to_thread(self.partition_logs.close)
        if self.metrics is not None:
            # shutdown() waits for the HTTP thread's poll (up to 0.5 s): not on the loop
            await asyncio.to_thread(self.metrics.stop)
        await self.grpc.stop()
        await self.controllers.close()
        await self.raft.close()
        self.log.info("stopped")
        for task in done:
            if task.get_name() != "stop-signal" and not task.cancelled():
                task.result()  # a crash of a broker task (a failed log dir) ends the process


async def run_broker(config: NodeConfig) -> int:
    node = BrokerNode(config)
    await node.run(stop_on_signals())
    return 0
