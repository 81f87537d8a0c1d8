"""The one gRPC server of a node process: its services, health per service, reflection.

Every node listens on its single ``listeners`` entry. Health reports NOT_SERVING for the
server ("") and each of the node's services until the node says otherwise (a controller once a
leader is known, a broker once caught up). A port that cannot be bound is a ``StartupError``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from typing import Any

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection

from quorum.config import Listener
from quorum.rpc.v1 import admin_pb2, raft_pb2
from quorum.server.raft_manager import StartupError
from quorum.server.service import SERVER_OPTIONS

QUORUM_SERVICE = raft_pb2.DESCRIPTOR.services_by_name["QuorumService"].full_name
ADMIN_SERVICE = admin_pb2.DESCRIPTOR.services_by_name["AdminService"].full_name
HEALTH_SERVICE = health_pb2.DESCRIPTOR.services_by_name["Health"].full_name
# How long calls in flight may take to finish once the server stops.
SERVER_GRACE_S = 0.5


def bind(server: grpc.aio.Server, host: str, port: int) -> str:
    """Listen on ``host:port`` (plaintext; see the README's security notes) or raise
    ``StartupError`` saying why."""
    address = f"{host}:{port}"
    try:
        bound = server.add_insecure_port(address)
    except RuntimeError as exc:
        raise StartupError(f"cannot listen on {address}: {exc}") from exc
    if bound == 0:
        raise StartupError(f"cannot listen on {address}: the port is in use")
    return address


class GrpcServer:
    """The node's gRPC server on ``listener``, serving ``services`` (their full names) plus
    health and reflection."""

    def __init__(self, listener: Listener, services: Sequence[str], logger: Any) -> None:
        self.listener = listener
        self.services = tuple(services)
        self.health = health.aio.HealthServicer()
        self.server: grpc.aio.Server | None = None
        self._log = logger

    def set_serving(self, serving: bool) -> None:
        """Report the server and each of the node's services as SERVING or NOT_SERVING."""
        status = (
            health_pb2.HealthCheckResponse.SERVING
            if serving
            else health_pb2.HealthCheckResponse.NOT_SERVING
        )
        for service in ("", *self.services):
            asyncio.get_running_loop().create_task(self.health.set(service, status))

    async def start(
        self, add_servicers: Callable[[grpc.aio.Server], None], *, cluster_id: str
    ) -> None:
        """Add the node's servicers (``add_servicers``), health (NOT_SERVING) and reflection,
        bind the listener and start serving. Raises ``StartupError``."""
        server = grpc.aio.server(options=SERVER_OPTIONS)
        add_servicers(server)
        health_pb2_grpc.add_HealthServicer_to_server(self.health, server)
        for service in ("", *self.services):
            await self.health.set(service, health_pb2.HealthCheckResponse.NOT_SERVING)
        reflection.enable_server_reflection(
            (*self.services, HEALTH_SERVICE, reflection.SERVICE_NAME), server
        )
        address = bind(server, self.listener.host, self.listener.port)
        await server.start()
        self.server = server
        self._log.info("listening", address=address, cluster_id=cluster_id)

    async def stop(self) -> None:
        if self.server is not None:
            await self.server.stop(SERVER_GRACE_S)
