"""The one gRPC server of a node process: its services, health per service, reflection.

Every node listens on its single ``listeners`` entry. Health reports NOT_SERVING for the
server ("") and each of the node's services until the node says otherwise (a controller once a
leader is known, a broker once caught up). A port that cannot be bound is a ``StartupError``.

The listener speaks the node's security protocol (``NodeSecurity``, quorum/security/tls.py): SSL
with the certificate re-read on every new handshake when its files changed (SIGHUP forces a
re-read), client certificates required by default; or PLAINTEXT, logged as
``listener_plaintext`` at start-up because anyone reaching the port can then act as any node
or admin (docs/security.md#listeners-and-protocols).

Every byte that arrives is untrusted: a request whose bytes do not decode as the method's
protobuf message (truncated, a string field with invalid UTF-8, a wrong wire type) is answered
INVALID_ARGUMENT naming the method and what failed, for every service of the node
(``RequestDecodingInterceptor``, quorum/server/interceptors.py; gRPC alone would answer
UNKNOWN). docs/conventions.md#errors
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
from collections.abc import Callable, Sequence
from typing import Any

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection

from quorum.config import HostPort, Listener
from quorum.rpc.v1 import admin_pb2, raft_pb2
from quorum.security.tls import NodeSecurity
from quorum.server.grpc_options import SERVER_OPTIONS
from quorum.server.interceptors import (
    HEALTH_SERVICE,
    OnlyHealthInterceptor,
    RequestDecodingInterceptor,
)
from quorum.server.raft_manager import StartupError

QUORUM_SERVICE = raft_pb2.DESCRIPTOR.services_by_name["QuorumService"].full_name
ADMIN_SERVICE = admin_pb2.DESCRIPTOR.services_by_name["AdminService"].full_name
# How long calls in flight may take to finish once the server stops.
SERVER_GRACE_S = 0.5


def bind(
    server: grpc.aio.Server,
    host: str,
    port: int,
    credentials: grpc.ServerCredentials | None = None,
) -> str:
    """Listen on ``host:port`` with TLS ``credentials`` (None: plaintext) or raise
    ``StartupError`` saying why."""
    address = f"{host}:{port}"
    try:
        if credentials is None:
            bound = server.add_insecure_port(address)
        else:
            bound = server.add_secure_port(address, credentials)
    except RuntimeError as exc:
        raise StartupError(f"cannot listen on {address}: {exc}") from exc
    if bound == 0:
        raise StartupError(f"cannot listen on {address}: the port is in use")
    return address


def make_server(
    interceptors: Sequence[grpc.aio.ServerInterceptor] = (),
) -> grpc.aio.Server:
    """A gRPC server with the node's options, ``interceptors`` (outermost first, e.g. the
    metrics') and request decoding (no services yet)."""
    return grpc.aio.server(
        options=SERVER_OPTIONS, interceptors=[*interceptors, RequestDecodingInterceptor()]
    )


class GrpcServer:
    """The node's gRPC server on ``listener``, serving ``services`` (their full names) plus
    health and reflection."""

    def __init__(
        self,
        listener: Listener,
        services: Sequence[str],
        logger: Any,
        security: NodeSecurity | None = None,
        *,
        health_listener: HostPort | None = None,
        interceptors: Sequence[grpc.aio.ServerInterceptor] = (),
    ) -> None:
        self.listener = listener
        self.services = tuple(services)
        self.security = security
        self.health = health.aio.HealthServicer()
        self.server: grpc.aio.Server | None = None
        # ``health.listener``: the same health statuses, alone and in plaintext, for probes
        # that cannot present a client certificate (Kubernetes' grpc probe).
        self.health_listener = health_listener
        self.health_server: grpc.aio.Server | None = None
        self.health_port: int | None = None
        self._interceptors = tuple(interceptors)
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
        server = make_server(self._interceptors)
        add_servicers(server)
        health_pb2_grpc.add_HealthServicer_to_server(self.health, server)
        for service in ("", *self.services):
            await self.health.set(service, health_pb2.HealthCheckResponse.NOT_SERVING)
        reflection.enable_server_reflection(
            (*self.services, HEALTH_SERVICE, reflection.SERVICE_NAME), server
        )
        security = self.security
        credentials = None if security is None else security.server_credentials()
        for warning in () if security is None else security.warnings:
            self._log.warning(warning.event, message=warning.message)
        address = bind(server, self.listener.host, self.listener.port, credentials)
        await server.start()
        self.server = server
        if security is not None and security.is_ssl:
            # SIGHUP re-reads the certificate files at the next handshake (rotation).
            with contextlib.suppress(NotImplementedError, RuntimeError):
                asyncio.get_running_loop().add_signal_handler(signal.SIGHUP, self._reload)
        self._log.info(
            "listening",
            address=address,
            cluster_id=cluster_id,
            security_protocol="PLAINTEXT" if credentials is None else "SSL",
        )
        if self.health_listener is not None:
            await self._start_health_server(self.health_listener)

    async def _start_health_server(self, address: HostPort) -> None:
        """Serve ``grpc.health.v1.Health`` alone on ``address``, in plaintext: a status is
        no secret, and nothing else is reachable there.

        This server shares no interceptor with the node's listener: an interceptor that keeps
        the handlers it built by method name (the metrics' and the decoding one) would hand a
        method that once ran on the TLS listener to a plaintext caller here, unauthenticated
        and believed (docs/security.md#plaintext-ports). ``OnlyHealthInterceptor`` answers
        UNIMPLEMENTED for anything but Check and Watch, whatever else is registered."""
        server = grpc.aio.server(options=SERVER_OPTIONS, interceptors=[OnlyHealthInterceptor()])
        health_pb2_grpc.add_HealthServicer_to_server(self.health, server)
        try:
            port = server.add_insecure_port(str(address))
        except RuntimeError as exc:
            raise StartupError(f"health.listener: cannot listen on {address}: {exc}") from exc
        if port == 0:
            raise StartupError(f"health.listener: cannot listen on {address}: the port is in use")
        await server.start()
        self.health_server = server
        self.health_port = port
        self._log.info("health_listening", address=f"{address.host}:{port}")

    def _reload(self) -> None:
        assert self.security is not None
        self.security.reload()
        self._log.info("tls_reload_requested", signal="SIGHUP")

    async def stop(self) -> None:
        if self.health_server is not None:
            await self.health_server.stop(0)
        if self.server is not None:
            await self.server.stop(SERVER_GRACE_S)
