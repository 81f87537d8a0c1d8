"""``metaquorum controller start``: one controller process (a Raft voter) on its config.

Start-up refuses, with a message that says which and how to fix it: an unformatted metadata
directory, a cluster id or node id on disk that differs from the config, a voter set recorded in
``quorum-state`` that differs from ``controller.quorum.voters``, a corrupt log. SIGTERM or
SIGINT stops the node within a few seconds; a leader first hands over through EndQuorumEpoch.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import signal
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import grpc
import structlog
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection

from quorum import meta_properties
from quorum.config import NodeConfig
from quorum.controller.state_machine import ControllerConfig, ControllerStateMachine
from quorum.ids import Uuid
from quorum.metadata.batch import LogBatch, decode_batch
from quorum.metadata.image import MetadataImage
from quorum.metadata.records import MetadataRecord, Record
from quorum.raft.config import RaftConfig
from quorum.raft.messages import SnapshotId
from quorum.raft.node import NotLeaderError, Proposal, RaftNode, Ready
from quorum.raft.state import LeaderState
from quorum.rpc.v1 import admin_pb2, admin_pb2_grpc, raft_pb2, raft_pb2_grpc
from quorum.server.admin_service import AdminServicer
from quorum.server.driver import Clock, RaftDriver, ShuttingDownError
from quorum.server.service import (
    SERVER_OPTIONS,
    BindError,
    PeerClients,
    QuorumServicer,
    bind,
)
from quorum.server.snapshotting import (
    SnapshotStartupError,
    Snapshotter,
    fetch_and_install,
    load_at_startup,
)
from quorum.storage import ElectionStore, SegmentedLog

METADATA_PARTITION_DIR = "__cluster_metadata-0"
QUORUM_STATE_FILE = "quorum-state"
# A leader waits at most this long for a successor before it exits anyway.
RESIGN_WAIT_S = 2.0
SERVER_GRACE_S = 0.5
QUORUM_SERVICE = "quorum.rpc.v1.QuorumService"
ADMIN_SERVICE = "quorum.rpc.v1.AdminService"
# How often the active controller looks for brokers whose session expired.
FENCE_SWEEP_INTERVAL_S = 0.5


class StartupError(Exception):
    """The node cannot start; the message says why and what to do."""


def metadata_log_dir(config: NodeConfig) -> Path:
    return config.metadata_log_dir / METADATA_PARTITION_DIR


def raft_config(config: NodeConfig) -> RaftConfig:
    return RaftConfig(
        election_timeout_ms=config.controller_quorum_election_timeout_ms,
        fetch_timeout_ms=config.controller_quorum_fetch_timeout_ms,
        election_backoff_max_ms=config.controller_quorum_election_backoff_max_ms,
        request_timeout_ms=config.controller_quorum_request_timeout_ms,
        append_linger_ms=config.controller_quorum_append_linger_ms,
        idle_interval_ms=config.metadata_max_idle_interval_ms,
        fetch_max_wait_ms=min(500, config.controller_quorum_fetch_timeout_ms // 2),
    )


def endpoints_of(config: NodeConfig) -> dict[int, list[str]]:
    return {
        node_id: [f"CONTROLLER://{address.host}:{address.port}"]
        for node_id, address in config.controller_quorum_voters.items()
    }


class ControllerNode:
    """The wiring of one controller: storage, core, driver, gRPC server, health."""

    def __init__(self, config: NodeConfig) -> None:
        self.config = config
        self.log = structlog.get_logger("quorum.controller").bind(node_id=config.node_id)
        properties = meta_properties.check(config)
        self.cluster_id = str(properties[config.metadata_log_dir].cluster_id)
        directory = metadata_log_dir(config)
        self.segments = SegmentedLog.open(
            directory, segment_bytes_max=config.metadata_log_segment_bytes
        )
        self.election_store = ElectionStore(directory / QUORUM_STATE_FILE)
        election = self.election_store.read()
        voters = config.voter_ids
        if election is not None and election.voters != voters:
            self.segments.close()
            raise StartupError(
                f"controller.quorum.voters in {config.describe_source()} names voters "
                f"{sorted(voters)}, but {directory / QUORUM_STATE_FILE} was written by a "
                f"quorum of voters {sorted(election.voters)}. This version does not change "
                "the voter set: restore the original controller.quorum.voters, or format a "
                "new cluster."
            )
        self.clock = Clock()
        self.directory = directory
        try:
            loaded = load_at_startup(directory, self.segments, self.log)
        except SnapshotStartupError as exc:
            self.segments.close()
            raise StartupError(str(exc)) from exc
        self.node = RaftNode(
            node_id=config.node_id,
            voters=voters,
            cluster_id=self.cluster_id,
            config=raft_config(config),
            rng=random.Random(),
            now_ms=self.clock.now_ms(),
            election_state=election,
            batches=loaded.batches,
            snapshot=loaded.snapshot,
        )
        if loaded.image.metadata_topic_id is not None:
            self.node.set_metadata_topic_id(loaded.image.metadata_topic_id)
        self.peers = PeerClients(
            {
                nid: address
                for nid, address in config.controller_quorum_voters.items()
                if nid != config.node_id
            },
            config.controller_quorum_request_timeout_ms,
        )
        self.health = health.aio.HealthServicer()
        self._serving: bool | None = None
        self.state_machine = ControllerStateMachine(
            loaded.image,
            config=ControllerConfig(broker_session_timeout_ms=config.broker_session_timeout_ms),
        )
        # The epoch in which this node made the proposals the state machine holds as pending.
        self._proposing_epoch: int | None = None
        # The epoch this node leads (None: not the leader), as last seen by the loop.
        self._leading_epoch: int | None = None
        self._metadata_topic_task: asyncio.Task[None] | None = None
        self.driver = RaftDriver(
            node=self.node,
            log=self.segments,
            election_store=self.election_store,
            send_request=self.peers.send,
            clock=self.clock,
            on_committed=self._on_committed,
            on_ready=self._on_ready,
            on_proposed=self._on_proposed,
        )
        self.snapshotter = Snapshotter.for_node(
            config, directory=directory, log=self.segments, driver=self.driver, logger=self.log
        )
        self._background: set[asyncio.Task[None]] = set()
        self.server: grpc.aio.Server | None = None
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
        if self._proposing_epoch is None:
            return
        if leading != self._proposing_epoch:
            self.state_machine.reset_to_committed()
            self._proposing_epoch = None

    def _on_committed(self, batches: Sequence[LogBatch]) -> None:
        self._drop_stale_pending()
        sm = self.state_machine
        for batch in batches:
            sm.replay_committed(decode_batch(batch.data))
        self.snapshotter.on_committed(batches)
        topic_id = sm.committed_image.metadata_topic_id
        if topic_id is not None and self.node.metadata_topic_id != topic_id:
            self.node.set_metadata_topic_id(topic_id)
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

    def _spawn(self, coroutine: Any) -> None:
        task = asyncio.get_running_loop().create_task(coroutine)
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    def _on_ready(self, ready: Ready) -> None:
        self._drop_stale_pending()
        if self.snapshotter.due() and not self.state_machine.has_pending:
            self._spawn(self.snapshotter.take(self.state_machine.committed_image))
        if ready.snapshot_to_fetch is not None:
            self._spawn(self._fetch_snapshot(*ready.snapshot_to_fetch))
        serving = self.node.leader_id is not None
        if serving != self._serving:
            self._serving = serving
            status = (
                health_pb2.HealthCheckResponse.SERVING
                if serving
                else health_pb2.HealthCheckResponse.NOT_SERVING
            )
            for service in ("", QUORUM_SERVICE, ADMIN_SERVICE):
                asyncio.get_running_loop().create_task(self.health.set(service, status))
        if (
            self.controller_ready()
            and self.state_machine.latest_image.metadata_topic_id is None
            and (self._metadata_topic_task is None or self._metadata_topic_task.done())
        ):
            self._metadata_topic_task = asyncio.get_running_loop().create_task(
                self._assign_metadata_topic_id()
            )

    async def _fetch_snapshot(self, leader_id: int, snapshot: SnapshotId) -> None:
        """Behind the leader's log start: download its snapshot and install it."""
        address = self.config.controller_quorum_voters[leader_id]

        def on_image(image: MetadataImage) -> None:
            self.state_machine.reset_to_image(image)
            self._proposing_epoch = None

        await fetch_and_install(
            driver=self.driver,
            log=self.segments,
            directory=self.directory,
            address=f"{address.host}:{address.port}",
            snapshot=snapshot,
            cluster_id=self.cluster_id,
            on_image=on_image,
            logger=self.log,
        )

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
            now = self.clock.now_ms()

            def operation(next_offset: int, now: int = now) -> tuple[tuple[Record, ...], object]:
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
                self.log.warning("brokers_fenced", broker_ids=list(fenced))  # type: ignore[call-overload]

    async def start_server(self) -> None:
        server = grpc.aio.server(options=SERVER_OPTIONS)
        raft_pb2_grpc.add_QuorumServiceServicer_to_server(
            QuorumServicer(
                self.driver,
                cluster_id=self.cluster_id,
                endpoints=endpoints_of(self.config),
                leader_stub=self.peers.stub,
                snapshot_dir=self.directory,
            ),
            server,
        )
        admin_pb2_grpc.add_AdminServiceServicer_to_server(
            AdminServicer(
                self.driver,
                self.state_machine,
                cluster_id=self.cluster_id,
                voters=self.config.controller_quorum_voters,
                controller_ready=self.controller_ready,
            ),
            server,
        )
        health_pb2_grpc.add_HealthServicer_to_server(self.health, server)
        for service in ("", QUORUM_SERVICE, ADMIN_SERVICE):
            await self.health.set(service, health_pb2.HealthCheckResponse.NOT_SERVING)
        reflection.enable_server_reflection(
            (
                raft_pb2.DESCRIPTOR.services_by_name["QuorumService"].full_name,
                admin_pb2.DESCRIPTOR.services_by_name["AdminService"].full_name,
                health_pb2.DESCRIPTOR.services_by_name["Health"].full_name,
                reflection.SERVICE_NAME,
            ),
            server,
        )
        listener = self.config.listener
        try:
            address = bind(server, listener.host, listener.port)
        except BindError as exc:
            raise StartupError(str(exc)) from exc
        await server.start()
        self.server = server
        self.log.info("listening", address=address, cluster_id=self.cluster_id)

    async def run(self, stop: asyncio.Event) -> None:
        await self.start_server()
        driver_task = asyncio.create_task(self.driver.run(), name="raft-driver")
        fence_task = asyncio.create_task(self._fence_stale_brokers(), name="fence-sweep")
        stop_task = asyncio.create_task(stop.wait(), name="stop-signal")
        done, _ = await asyncio.wait(
            {driver_task, stop_task, fence_task}, return_when=asyncio.FIRST_COMPLETED
        )
        fence_task.cancel()
        if driver_task in done or fence_task in done:
            stop_task.cancel()
            self.driver.stop()
            await self._close()
            for task in (driver_task, fence_task):
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
        for task in list(self._background):
            task.cancel()
        if self.server is not None:
            await self.server.stop(SERVER_GRACE_S)
        await self.peers.close()
        self.segments.close()
        self.log.info("stopped")


async def run_controller(config: NodeConfig) -> int:
    node = ControllerNode(config)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await node.run(stop)
    return 0
