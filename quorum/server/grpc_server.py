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
(``RequestDecodingInterceptor``; gRPC alone would answer UNKNOWN). docs/conventions.md#errors
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import signal
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, Final

import grpc
from google.protobuf.message import DecodeError
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection

from quorum.config import HostPort, Listener
from quorum.rpc.v1 import admin_pb2, raft_pb2
from quorum.security.tls import NodeSecurity
from quorum.server.raft_manager import StartupError
from quorum.server.service import SERVER_OPTIONS

QUORUM_SERVICE = raft_pb2.DESCRIPTOR.services_by_name["QuorumService"].full_name
ADMIN_SERVICE = admin_pb2.DESCRIPTOR.services_by_name["AdminService"].full_name
HEALTH_SERVICE = health_pb2.DESCRIPTOR.services_by_name["Health"].full_name
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


@dataclass(frozen=True)
class Undecodable:
    """Handed to a handler instead of a request whose bytes did not decode."""

    method: str
    reason: str
    size_bytes: int


def undecodable_message(method: str, reason: str, size_bytes: int) -> str:
    """``request AdminService/CreateTopics could not be decoded: <reason>``."""
    name = method.lstrip("/")
    service, _, rpc = name.rpartition("/")
    short = f"{service.rpartition('.')[2]}/{rpc}" if service else name
    return f"request {short} could not be decoded: {reason} ({size_bytes} bytes received)"


class RequestDecodingInterceptor(grpc.aio.ServerInterceptor):  # type: ignore[misc]
    """Turns a request that does not decode into INVALID_ARGUMENT, for every unary method
    and every bidirectional stream (a stream ends at its first undecodable message).

    The method's handler is rebuilt once (cached per registered method, so the cache is bounded
    by the methods the server serves) with a request deserializer that catches ``DecodeError``
    and hands the behaviour an ``Undecodable`` marker, on which it aborts."""

    def __init__(self) -> None:
        self._handlers: dict[str, grpc.RpcMethodHandler] = {}

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler]],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler:
        method: str = handler_call_details.method
        cached = self._handlers.get(method)
        if cached is not None:
            return cached
        handler = await continuation(handler_call_details)
        if handler is None or handler.request_deserializer is None:
            return handler  # unknown methods stay UNIMPLEMENTED
        if handler.unary_unary is not None:
            wrapped = _decoding_handler(method, handler)
        elif handler.stream_stream is not None:
            wrapped = _decoding_stream_handler(method, handler)
        else:
            return handler  # no such method is served: the others are grpc's own
        self._handlers[method] = wrapped
        return wrapped


def _tolerant(method: str, deserialize: Callable[[bytes], Any]) -> Callable[[bytes], Any]:
    """``deserialize`` that returns an ``Undecodable`` instead of raising ``DecodeError``."""

    def request_deserializer(data: bytes) -> Any:
        try:
            return deserialize(data)
        except DecodeError as exc:
            return Undecodable(method, str(exc) or type(exc).__name__, len(data))

    return request_deserializer


async def _refuse_undecodable(request: Any, context: grpc.aio.ServicerContext) -> None:
    if isinstance(request, Undecodable):
        await context.abort(
            grpc.StatusCode.INVALID_ARGUMENT,
            undecodable_message(request.method, request.reason, request.size_bytes),
        )


def _decoding_handler(method: str, handler: grpc.RpcMethodHandler) -> grpc.RpcMethodHandler:
    deserialize = handler.request_deserializer
    behaviour = handler.unary_unary
    assert deserialize is not None and behaviour is not None

    if inspect.iscoroutinefunction(behaviour):
        # Every call of the node passes here: no awaitable check, no coroutine for the
        # decoding check unless the request did not decode.
        async def unary_unary(request: Any, context: grpc.aio.ServicerContext) -> Any:
            if type(request) is Undecodable:
                await _refuse_undecodable(request, context)
            return await behaviour(request, context)

    else:

        async def unary_unary(request: Any, context: grpc.aio.ServicerContext) -> Any:
            await _refuse_undecodable(request, context)
            result = behaviour(request, context)
            if inspect.isawaitable(result):
                result = await result
            return result

    return grpc.unary_unary_rpc_method_handler(
        unary_unary,
        request_deserializer=_tolerant(method, deserialize),
        response_serializer=handler.response_serializer,
    )


def _decoding_stream_handler(method: str, handler: grpc.RpcMethodHandler) -> grpc.RpcMethodHandler:
    deserialize = handler.request_deserializer
    behaviour = handler.stream_stream
    assert deserialize is not None and behaviour is not None

    async def decoded(
        requests: AsyncIterator[Any], context: grpc.aio.ServicerContext
    ) -> AsyncIterator[Any]:
        async for request in requests:
            await _refuse_undecodable(request, context)
            yield request

    async def stream_stream(
        requests: AsyncIterator[Any], context: grpc.aio.ServicerContext
    ) -> AsyncIterator[Any]:
        async for response in behaviour(decoded(requests, context), context):
            yield response

    return grpc.stream_stream_rpc_method_handler(
        stream_stream,
        request_deserializer=_tolerant(method, deserialize),
        response_serializer=handler.response_serializer,
    )


HEALTH_METHODS: Final = frozenset(
    f"/{HEALTH_SERVICE}/{method.name}"
    for method in health_pb2.DESCRIPTOR.services_by_name["Health"].methods
)


class OnlyHealthInterceptor(grpc.aio.ServerInterceptor):  # type: ignore[misc]
    """The health listener's gate: ``grpc.health.v1.Health`` Check and Watch pass, every other
    method is UNIMPLEMENTED before any handler is looked up (a plaintext port serves the one
    thing it exists for; docs/security.md#plaintext-ports)."""

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler]],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler | None:
        if handler_call_details.method not in HEALTH_METHODS:
            return None
        return await continuation(handler_call_details)


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
