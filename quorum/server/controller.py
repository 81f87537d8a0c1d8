"""``metaquorum controller start``: one controller process (a Raft voter) on its config.

Start-up refuses, with a message that says which and how to fix it: an unformatted metadata
directory, a cluster id or node id on disk that differs from the config, a voter set recorded in
``quorum-state`` that differs from ``controller.quorum.voters``, a corrupt log. SIGTERM or
SIGINT stops the node within a few seconds; a leader first hands over through EndQuorumEpoch.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Sequence
from typing import TYPE_CHECKING

import grpc
import structlog

from quorum.config import NodeConfig
from quorum.controller.elections import ELECT_LEADERS_PARTITIONS_MAX
from quorum.controller.state_machine import ControllerConfig, ControllerStateMachine
from quorum.ids import Uuid
from quorum.metadata.batch import LogBatch, decode_batch
from quorum.metadata.image import MetadataImage
from quorum.metadata.records import MetadataRecord, Record
from quorum.raft.node import NotLeaderError, Proposal, Ready
from quorum.raft.state import LeaderState
from quorum.rpc.v1 import admin_pb2_grpc, raft_pb2_grpc
from quorum.security.authorization import RequestAuthorization
from quorum.security.identity import CallerResolver
from quorum.server.controller_admin import ControllerAdminServicer
from quorum.server.driver import ShuttingDownError
from quorum.server.grpc_server import ADMIN_SERVICE, QUORUM_SERVICE, GrpcServer
from quorum.server.quorum_service import QuorumServicer
from quorum.server.raft_manager import RaftManager, stop_on_signals

if TYPE_CHECKING:
    from quorum.server.metrics import NodeMetrics

# A leader waits at most this long for a successor before it exits anyway.
RESIGN_WAIT_S = 2.0
# How often the active controller looks for brokers whose session expired.
FENCE_SWEEP_INTERVAL_S = 0.5


def endpoints_of(config: NodeConfig) -> dict[int, list[str]]:
    return {
        node_id: [f"CONTROLLER://{address.host}:{address.port}"]
        for node_id, address in config.controller_quorum_voters.items()
    }


class ControllerNode:
    """The wiring of one controller: the Raft side (``RaftManager``), the controller state
    machine, the gRPC server, health."""

    def __init__(self, config: NodeConfig) -> None:
        self.config = config
        self.log = structlog.get_logger("quorum.controller").bind(node_id=config.node_id)
        self.raft, image = RaftManager.open(
            config,
            voter=True,
            logger=self.log,
            on_committed=self._on_committed,
            on_ready=self._on_ready,
            on_proposed=self._on_proposed,
        )
        self.cluster_id = self.raft.cluster_id
        self.node = self.raft.node
        self.driver = self.raft.driver
        if image.metadata_topic_id is not None:
            self.node.set_metadata_topic_id(image.metadata_topic_id)
        # Prometheus metrics (metrics.listener; docs/operating.md#metrics). The module (and
        # prometheus_client, 12 MB of RSS) is imported only by nodes that serve them.
        self.metrics: NodeMetrics | None = None
        interceptors: tuple[grpc.aio.ServerInterceptor, ...] = ()
        if config.metrics_listener is not None:
            from quorum.server.grpc_metrics import GrpcMetricsInterceptor  # noqa: PLC0415
            from quorum.server.metrics import node_metrics  # noqa: PLC0415 - metrics only

            self.metrics = node_metrics(config, self.raft)
            assert self.metrics is not None  # metrics.listener is set
            interceptors = (GrpcMetricsInterceptor(self.metrics.grpc),)
        # Kafka's TimedOutBrokerHeartbeatCount and NewActiveControllersCount.
        self.timed_out_heartbeats = 0
        self.new_active_controllers = 0
        self.grpc = GrpcServer(
            config.listener,
            (QUORUM_SERVICE, ADMIN_SERVICE),
            self.log,
            security=self.raft.security,
            health_listener=config.health_listener,
            interceptors=interceptors,
        )
        self._serving: bool | None = None
        # The epoch this node last became the active controller in (logged once per epoch).
        self._active_epoch: int | None = None
        self.state_machine = ControllerStateMachine(
            image,
            config=ControllerConfig(
                broker_session_timeout_ms=config.broker_session_timeout_ms,
                default_num_partitions=config.num_partitions,
                default_replication_factor=config.default_replication_factor,
                unclean_leader_election_enable=config.unclean_leader_election_enable,
            ),
        )
        # The epoch in which this node made the proposals the state machine holds as pending.
        self._proposing_epoch: int | None = None
        # The epoch this node leads (None: not the leader), as last seen by the loop.
        self._leading_epoch: int | None = None
        self._metadata_topic_task: asyncio.Task[None] | None = None
        if self.metrics is not None:
            from quorum.server.controller_metrics import (  # noqa: PLC0415
                ControllerMetrics,
                controller_families,
            )
            from quorum.server.metric_stats import wall_ms  # noqa: PLC0415

            own = ControllerMetrics()
            self.driver.on_operation_timed = own.observe_operation
            self.metrics.add_source(
                lambda: {**self._read_metrics(), **own.read()},
                lambda data: controller_families(own, data, wall_ms()),
            )
        self.log.info(
            "controller_loaded",
            cluster_id=self.cluster_id,
            log_end_offset=self.node.log_end_offset,
            epoch=self.node.epoch,
            state=self.node.state.name,
        )

    # ----- the controller state machine ----------------------------------------------------

    def _drop_stale_pending(self) -> None:
        """Pending proposals belong to the epoch this node led when it made them; once it no
        longer leads that epoch, their fate is decided by the new leader's log. Broker sessions
        belong to one term of leadership: whenever the epoch this node leads changes (also
        after a term in which it proposed nothing), they start afresh, or brokers that
        heartbeated another leader meanwhile would be fenced at once."""
        node = self.node
        leading = node.epoch if node.is_leader() else None
        if leading != self._leading_epoch:
            self._leading_epoch = leading
            self.state_machine.forget_broker_sessions()
            if leading is not None:
                self.new_active_controllers += 1
        if self._proposing_epoch is None:
            return
        if leading != self._proposing_epoch:
            self.state_machine.reset_to_committed()
            self._proposing_epoch = None

    def _on_committed(self, batches: Sequence[LogBatch]) -> None:
        self._drop_stale_pending()
        sm = self.state_machine
        for batch in batches:
            # The leader's own proposals were replayed when proposed: their image is reused.
            if batch.epoch != self._proposing_epoch or not sm.commit_own(
                batch.base_offset, batch.last_offset
            ):
                sm.replay_committed(decode_batch(batch.data))
        topic_id = self.raft.after_replay(batches, sm.committed_image)
        if topic_id is not None:
            self.log.info("metadata_topic_id_assigned", topic_id=str(topic_id))

    def _on_proposed(self, records: object, proposal: Proposal) -> None:
        assert isinstance(records, list | tuple)
        metadata: list[MetadataRecord] = list(records)
        self._proposing_epoch = proposal.epoch
        self.state_machine.replay_pending(metadata, proposal.base_offset)

    def controller_ready(self) -> bool:
        """The active controller may propose once its committed image has replayed everything
        earlier epochs wrote, up to its own LeaderChangeMessage (Kafka's handleLeaderChange)."""
        state = self.node.state
        return (
            isinstance(state, LeaderState)
            and self.state_machine.committed_image.offset >= state.epoch_start_offset
        )

    def _read_metrics(self) -> dict[str, object]:
        """The controller's metric values (in the loop; the image is immutable)."""
        node = self.node
        return {
            "active": node.is_leader(),
            "committed_image": self.state_machine.committed_image,
            "last_committed_offset": node.high_watermark - 1,
            "metadata_errors": self.raft.metadata_load_errors + self.raft.snapshotter.failures,
            "timed_out_heartbeats": self.timed_out_heartbeats,
            "new_active_controllers": self.new_active_controllers,
        }

    def _on_ready(self, ready: Ready) -> None:
        if self.metrics is not None:
            self.metrics.raft.observe_ready(ready, self.raft.clock.now_ms())
        self._drop_stale_pending()
        if not self.state_machine.has_pending:
            self.raft.maybe_take_snapshot(self.state_machine.committed_image)
        if ready.snapshot_to_fetch is not None:
            self.raft.spawn(self.raft.fetch_snapshot(*ready.snapshot_to_fetch, self._on_image))
        if self._active_epoch != self.node.epoch and self.controller_ready():
            # Kafka's "becoming the active controller": the first moment a write is accepted
            # (what scripts/bench/handover.py reads as the end of an election).
            self._active_epoch = self.node.epoch
            self.log.info(
                "controller_activated",
                epoch=self.node.epoch,
                applied_offset=self.state_machine.committed_image.offset,
            )
        serving = self.node.leader_id is not None
        if serving != self._serving:
            self._serving = serving
            self.grpc.set_serving(serving)
        if (
            self.controller_ready()
            and self.state_machine.latest_image.metadata_topic_id is None
            and (self._metadata_topic_task is None or self._metadata_topic_task.done())
        ):
            self._metadata_topic_task = asyncio.get_running_loop().create_task(
                self._assign_metadata_topic_id()
            )

    def _on_image(self, image: MetadataImage) -> None:
        """A snapshot fetched from the leader replaces the state machine's image."""
        self.state_machine.reset_to_image(image)
        self._proposing_epoch = None

    async def _assign_metadata_topic_id(self) -> None:
        """KIP-516: after its election the leader gives __cluster_metadata its own id."""

        def operation(next_offset: int) -> tuple[tuple[Record, ...], Uuid | None]:
            result = self.state_machine.metadata_topic_record(Uuid.random, next_offset=next_offset)
            return (result.records, result.response) if result else ((), None)

        try:
            proposal, topic_id = await self.driver.submit(operation)
            if proposal is not None:
                await self.driver.wait_committed(proposal)
                self.log.info("metadata_topic_id_committed", topic_id=str(topic_id))
        except (NotLeaderError, ShuttingDownError):
            return

    async def _fence_stale_brokers(self) -> None:
        """The active controller fences brokers whose heartbeats stopped
        (``broker.session.timeout.ms``); their partitions lose them from ISRs and leaders."""
        fenced_one = False
        while True:
            if not fenced_one:  # after a fence, look for the next stale broker at once
                await asyncio.sleep(FENCE_SWEEP_INTERVAL_S)
            fenced_one = False
            if not self.controller_ready():
                continue
            now = self.raft.clock.now_ms()

            def operation(
                next_offset: int, now: int = now
            ) -> tuple[tuple[Record, ...], tuple[int, ...]]:
                result = self.state_machine.fence_stale_brokers(
                    now_ms=now, next_offset=next_offset, max_brokers=1
                )
                return result.records, result.response

            try:
                proposal, fenced = await self.driver.submit(operation)
            except (NotLeaderError, ShuttingDownError):
                continue
            if proposal is not None:
                fenced_one = True
                self.timed_out_heartbeats += len(fenced)
                self.log.warning("brokers_fenced", broker_ids=list(fenced))

    async def _rebalance_leaders(self) -> None:
        """Kafka's ``auto.leader.rebalance.enable``: every
        ``leader.imbalance.check.interval.seconds`` the active controller elects the preferred
        replica of each partition where it is in the ISR and unfenced but does not lead (in
        runs of at most 10,000 partitions, the next run at once while some are left). Unlike
        Kafka, no ``leader.imbalance.per.broker.percentage`` threshold: any such partition is
        elected."""
        interval_s = self.config.leader_imbalance_check_interval_seconds
        more = False
        while True:
            if not more:
                await asyncio.sleep(interval_s)
            more = False
            if not self.controller_ready():
                continue

            def operation(
                next_offset: int,
            ) -> tuple[tuple[Record, ...], tuple[tuple[str, int], ...]]:
                result = self.state_machine.rebalance_leaders(next_offset=next_offset)
                return result.records, result.response

            try:
                proposal, elected = await self.driver.submit(operation)
            except (NotLeaderError, ShuttingDownError):
                continue
            if proposal is not None:
                more = len(elected) >= ELECT_LEADERS_PARTITIONS_MAX
                self.log.info(
                    "preferred_leaders_elected",
                    partitions=len(elected),
                    first=[f"{t}-{p}" for t, p in elected[:10]],
                )

    def _add_servicers(self, server: grpc.aio.Server) -> None:
        raft = self.raft
        callers = CallerResolver(self.config.ssl_principal_mapping_rules)
        raft_pb2_grpc.add_QuorumServiceServicer_to_server(
            QuorumServicer(
                self.driver,
                cluster_id=self.cluster_id,
                endpoints=endpoints_of(self.config),
                leader_stub=raft.peers.stub,
                snapshot_dir=raft.directory,
                callers=callers,
                # KIP-853: leader endpoints, and who may add or remove voters.
                peers=raft.peers,
                authorization=RequestAuthorization.from_config(self.config, self.cluster_id),
                image=lambda: self.state_machine.committed_image,
            ),
            server,
        )
        admin_pb2_grpc.add_AdminServiceServicer_to_server(
            ControllerAdminServicer(
                self.driver,
                self.state_machine,
                cluster_id=self.cluster_id,
                voters=raft.peers.voter_addresses,  # live: the voter set may change (KIP-853)
                controller_ready=self.controller_ready,
                # Brokers forward their Kafka clients' writes with the client's principal
                # (KIP-590; docs/security.md#forwarded-requests): only a registered broker's
                # own certificate may name one.
                callers=CallerResolver(
                    self.config.ssl_principal_mapping_rules,
                    forwarding_cluster_id=self.cluster_id,
                    registered_broker=lambda broker_id: (
                        broker_id in self.state_machine.committed_image.brokers
                    ),
                ),
                authorization=RequestAuthorization.from_config(self.config, self.cluster_id),
            ),
            server,
        )

    async def run(self, stop: asyncio.Event) -> None:
        await self.grpc.start(self._add_servicers, cluster_id=self.cluster_id)
        if self.metrics is not None:
            from quorum.server.metrics import serve_metrics  # noqa: PLC0415

            serve_metrics(self.metrics, self.config, self.log)
        driver_task = asyncio.create_task(self.driver.run(), name="raft-driver")
        if self.config.controller_quorum_auto_join_enable:  # KIP-853 (Kafka 4.1)
            self.raft.spawn(self.raft.auto_join())
        fence_task = asyncio.create_task(self._fence_stale_brokers(), name="fence-sweep")
        timers = {fence_task}
        if self.config.auto_leader_rebalance_enable:
            timers.add(asyncio.create_task(self._rebalance_leaders(), name="leader-rebalance"))
        stop_task = asyncio.create_task(stop.wait(), name="stop-signal")
        done, _ = await asyncio.wait(
            {driver_task, stop_task, *timers}, return_when=asyncio.FIRST_COMPLETED
        )
        for timer in timers:
            timer.cancel()
        if driver_task in done or not timers.isdisjoint(done):
            stop_task.cancel()
            self.driver.stop()
            await self._close()
            for task in (driver_task, *timers):
                if task.done() and not task.cancelled():
                    task.result()  # a crash of the core is a crash of the process
            return
        self.log.info("shutting_down", state=self.node.state.name, epoch=self.node.epoch)
        if self.node.is_leader():
            handed_over = await self.driver.resign_and_wait(RESIGN_WAIT_S)
            self.log.info("resigned", successor_seen=handed_over, leader_id=self.node.leader_id)
        self.driver.stop()
        with contextlib.suppress(asyncio.CancelledError):
            await driver_task
        await self._close()

    async def _close(self) -> None:
        if self.metrics is not None:
            # shutdown() waits for the HTTP thread's poll (up to 0.5 s): not on the loop
            await asyncio.to_thread(self.metrics.stop)
        self.raft.cancel_background()
        await self.grpc.stop()
        await self.raft.close()
        self.log.info("stopped")


async def run_controller(config: NodeConfig) -> int:
    node = ControllerNode(config)
    await node.run(stop_on_signals())
    return 0
