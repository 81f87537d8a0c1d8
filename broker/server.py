"""``metaquorum broker start``: a broker process.

A broker is a Raft observer of ``__cluster_metadata``: the same ``RaftNode`` the controllers
run, as a non-voter, keeps a local copy of the metadata log (Fetch keyed by the metadata topic
id, long-poll, following leader changes, truncating on divergence). Committed batches are
replayed into the same ``MetadataImage``/``MetadataDelta`` the controllers use. The broker
registers with the active controller, heartbeats with the offset it has applied, and is
unfenced once caught up.

Partition directories follow the image (docs/architecture.md#brokers): once the image has
caught up to the broker's own registration record (the high watermark it saw at start, Kafka's
``initialCatchUpFuture``), a FULL reconciliation runs; every later image change runs an
INCREMENTAL one. Nothing destructive happens before that first catch-up.

Fail safe (docs/architecture.md#brokers): a log dir that cannot be listed, or a
``partition.metadata`` whose read keeps failing with an I/O error (EIO, EMFILE, ENOMEM, after
``PARTITION_METADATA_READ_ATTEMPTS_MAX`` attempts, ``broker/logdirs.py``), stops the broker: it
logs ``log_dir_failed`` at ERROR with the path and errno, shuts down, and the process exits 1
with the same message. It never reconciles against a view it could not read, so a read error
never moves a live partition aside. Every data directory is locked for the life of the process
(``quorum/storage/dirlock.py``, taken by ``RaftManager.open``).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import grpc
import structlog

from broker.controller_client import ControllerClient, ControllerUnavailableError
from broker.logdirs import LogDirs, LogDirUnavailableError, PartitionMetadataReadError
from broker.reconcile import ReconcileMode
from quorum.config import NodeConfig
from quorum.errors import ErrorCode
from quorum.ids import Uuid
from quorum.metadata.batch import LogBatch, decode_batch
from quorum.metadata.delta import MetadataDelta
from quorum.metadata.image import MetadataImage
from quorum.raft.messages import SnapshotId
from quorum.raft.node import Ready
from quorum.rpc.v1 import admin_pb2, admin_pb2_grpc, raft_pb2_grpc
from quorum.security.authorization import RequestAuthorization
from quorum.security.identity import CallerResolver
from quorum.server.admin_service import AdminServicer
from quorum.server.grpc_server import ADMIN_SERVICE, QUORUM_SERVICE, GrpcServer
from quorum.server.raft_manager import RaftManager, StartupError, stop_on_signals

REGISTER_RETRY_S = 0.5


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


@dataclass
class ReconcileStats:
    runs: int = 0
    created: int = 0
    moved_aside: int = 0
    deleted: int = 0
    metadata_written: int = 0
    failures: list[str] = field(default_factory=list)


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

    async def DescribeQuorum(self, request: Any, context: grpc.aio.ServicerContext) -> Any:
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
        self.log_dirs = LogDirs(config.log_dirs, self.log)
        self.controllers = ControllerClient(
            config.controller_quorum_voters, self.raft.security.client
        )
        self.incarnation_id = Uuid.random()
        self.broker_epoch = -1
        self.registration_offset: int | None = None
        self.fenced = True
        self.caught_up = asyncio.Event()
        self.image_changed = asyncio.Event()
        self._removed: set[tuple[Uuid, int]] = set()
        self.stats = ReconcileStats()
        self.grpc = GrpcServer(
            config.listener,
            (ADMIN_SERVICE, QUORUM_SERVICE),
            self.log,
            security=self.raft.security,
        )

    # ----- metadata -------------------------------------------------------------------------

    def _on_committed(self, batches: Sequence[LogBatch]) -> None:
        delta = MetadataDelta(self.image)
        for batch in batches:
            delta.replay_batch(decode_batch(batch.data))
        changes = delta.local_changes(self.broker_id)
        before = self.image
        self.image = delta.apply()
        for lost in changes.deletes.values():
            self._removed.update((lost.topic_id, p) for p in lost.partitions)
        if self.image.topics_by_id is not before.topics_by_id or changes.creates or changes.deletes:
            self.image_changed.set()
        self.raft.after_replay(batches, self.image)
        self._check_caught_up()

    def _on_ready(self, ready: Ready) -> None:
        self.raft.maybe_take_snapshot(self.image)
        if ready.snapshot_to_fetch is not None:
            self.raft.spawn(self._fetch_snapshot(*ready.snapshot_to_fetch))

    async def _fetch_snapshot(self, leader_id: int, snapshot: SnapshotId) -> None:
        """Behind the leader's log start (away too long, or wiped): load its snapshot. Every
        topic absent from it counts as deleted: the next reconciliation is FULL."""

        def on_image(image: MetadataImage) -> None:
            self.image = image
            self._full_requested = True
            self.image_changed.set()

        await self.raft.fetch_snapshot(leader_id, snapshot, on_image)
        self._check_caught_up()

    def _not_caught_up(self) -> str | None:
        """Why this broker may not answer reads from its image yet (None: it may)."""
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
            self.log.info("caught_up", applied_offset=self.image.offset)
            self.grpc.set_serving(True)

    # ----- registration and heartbeats ------------------------------------------------------

    async def _register(self) -> None:
        listener = self.config.advertised_listener
        answer = await self.controllers.call(
            "RegisterBroker",
            admin_pb2.RegisterBrokerRequest(
                cluster_id=self.cluster_id,
                broker_id=self.broker_id,
                incarnation_id=self.incarnation_id.bytes,
                listeners=[
                    admin_pb2.BrokerListener(
                        name=listener.name, host=listener.host, port=listener.port
                    )
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

    async def lifecycle(self) -> None:
        interval_s = self.config.broker_heartbeat_interval_ms / 1000
        while True:
            try:
                if self.broker_epoch < 0:
                    await self._register()
                if self.broker_epoch >= 0:
                    await self._heartbeat()
            except ControllerUnavailableError as exc:
                self.log.debug("controller_unavailable", reason=str(exc))
            wait_s = interval_s if self.broker_epoch >= 0 else REGISTER_RETRY_S
            if self.fenced and self.caught_up.is_set():
                wait_s = min(wait_s, REGISTER_RETRY_S)  # ask to be unfenced soon
            await asyncio.sleep(wait_s)

    # ----- reconciliation -------------------------------------------------------------------

    async def reconcile_forever(self) -> None:
        await self.caught_up.wait()
        mode = ReconcileMode.FULL
        while True:
            self.image_changed.clear()
            if self._full_requested:  # a snapshot replaced the image: compare everything
                self._full_requested = False
                mode = ReconcileMode.FULL
            removed, self._removed = self._removed, set()
            assigned = assigned_partitions(self.image, self.broker_id)
            try:
                plan, result = await asyncio.to_thread(
                    self.log_dirs.reconcile,
                    assigned=assigned,
                    mode=mode,
                    now_ms=wall_ms(),
                    delete_delay_ms=self.config.delete_topic_delay_ms,
                    removed=removed,
                )
            except LogDirUnavailableError as exc:
                raise self._log_dir_failed(exc) from exc
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

    # ----- process --------------------------------------------------------------------------

    def _add_servicers(self, server: grpc.aio.Server) -> None:
        admin_pb2_grpc.add_AdminServiceServicer_to_server(
            AdminServicer(
                self.driver,
                None,
                cluster_id=self.cluster_id,
                voters=self.config.controller_quorum_voters,
                controller_ready=lambda: False,
                image=lambda: self.image,
                serve_reads_without_offset=True,
                callers=CallerResolver(self.config.ssl_principal_mapping_rules),
                authorization=RequestAuthorization.from_config(self.config, self.cluster_id),
                caught_up=self._not_caught_up,
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
        await self.grpc.start(self._add_servicers, cluster_id=self.cluster_id)
        tasks = {
            asyncio.create_task(self.driver.run(), name="raft-observer"),
            asyncio.create_task(self.lifecycle(), name="lifecycle"),
            asyncio.create_task(self.reconcile_forever(), name="reconcile"),
            asyncio.create_task(stop.wait(), name="stop-signal"),
        }
        done, _ = await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
        self.log.info("shutting_down", applied_offset=self.image.offset)
        self.driver.stop()
        for task in tasks:
            if task.get_name() != "raft-observer":
                task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
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
