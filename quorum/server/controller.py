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
from pathlib import Path
from typing import Any

import grpc
import structlog
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection

from quorum import meta_properties
from quorum.config import NodeConfig
from quorum.metadata.batch import LogBatch
from quorum.raft.config import RaftConfig
from quorum.raft.node import RaftNode, Ready
from quorum.rpc.v1 import raft_pb2, raft_pb2_grpc
from quorum.server.driver import Clock, RaftDriver
from quorum.server.service import GRPC_OPTIONS, PeerClients, QuorumServicer
from quorum.storage import ElectionStore, SegmentedLog

METADATA_PARTITION_DIR = "__cluster_metadata-0"
QUORUM_STATE_FILE = "quorum-state"
# A leader waits at most this long for a successor before it exits anyway.
RESIGN_WAIT_S = 2.0
SERVER_GRACE_S = 0.5
QUORUM_SERVICE = "quorum.rpc.v1.QuorumService"


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
        batches = list(self.segments.read_all())
        self.node = RaftNode(
            node_id=config.node_id,
            voters=voters,
            cluster_id=self.cluster_id,
            config=raft_config(config),
            rng=random.Random(),
            now_ms=self.clock.now_ms(),
            election_state=election,
            batches=batches,
        )
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
        self.driver = RaftDriver(
            node=self.node,
            log=self.segments,
            election_store=self.election_store,
            send_request=self.peers.send,
            clock=self.clock,
            on_committed=self._on_committed,
            on_ready=self._on_ready,
        )
        self.server: grpc.aio.Server | None = None
        self.log.info(
            "controller_loaded",
            cluster_id=self.cluster_id,
            log_end_offset=self.node.log_end_offset,
            epoch=self.node.epoch,
            state=self.node.state.name,
        )

    def _on_committed(self, batches: tuple[LogBatch, ...] | Any) -> None:
        """Committed batches go to the controller state machine (added with the admin API)."""

    def _on_ready(self, ready: Ready) -> None:
        serving = self.node.leader_id is not None
        if serving != self._serving:
            self._serving = serving
            status = (
                health_pb2.HealthCheckResponse.SERVING
                if serving
                else health_pb2.HealthCheckResponse.NOT_SERVING
            )
            for service in ("", QUORUM_SERVICE):
                asyncio.get_running_loop().create_task(self.health.set(service, status))

    async def start_server(self) -> None:
        server = grpc.aio.server(options=GRPC_OPTIONS)
        raft_pb2_grpc.add_QuorumServiceServicer_to_server(
            QuorumServicer(
                self.driver,
                cluster_id=self.cluster_id,
                endpoints=endpoints_of(self.config),
                leader_stub=self.peers.stub,
            ),
            server,
        )
        health_pb2_grpc.add_HealthServicer_to_server(self.health, server)
        for service in ("", QUORUM_SERVICE):
            await self.health.set(service, health_pb2.HealthCheckResponse.NOT_SERVING)
        reflection.enable_server_reflection(
            (
                raft_pb2.DESCRIPTOR.services_by_name["QuorumService"].full_name,
                health_pb2.DESCRIPTOR.services_by_name["Health"].full_name,
                reflection.SERVICE_NAME,
            ),
            server,
        )
        listener = self.config.listener
        address = f"{listener.host}:{listener.port}"
        try:
            port = server.add_insecure_port(address)
        except RuntimeError as exc:
            raise StartupError(f"cannot listen on {address}: {exc}") from exc
        if port == 0:
            raise StartupError(f"cannot listen on {address}: the port is in use")
        await server.start()
        self.server = server
        self.log.info("listening", address=address, cluster_id=self.cluster_id)

    async def run(self, stop: asyncio.Event) -> None:
        await self.start_server()
        driver_task = asyncio.create_task(self.driver.run(), name="raft-driver")
        stop_task = asyncio.create_task(stop.wait(), name="stop-signal")
        done, _ = await asyncio.wait({driver_task, stop_task}, return_when=asyncio.FIRST_COMPLETED)
        if driver_task in done:
            stop_task.cancel()
            await self._close()
            driver_task.result()  # a crash of the core is a crash of the process
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
