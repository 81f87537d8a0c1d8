"""The gRPC server interceptors of a node, and the base they share.

``HandlerInterceptor`` is the one way this project wraps a method's handler: the handler of each
registered method is rebuilt once, on its first call, and kept by method name (so the cache is
bounded by the methods the server serves); every later call of the method gets the cached
handler, so a call costs one dictionary lookup here and whatever the wrapper itself does.
Subclasses say how to wrap a unary method (``wrap_unary``) and a bidirectional stream
(``wrap_stream``):

- ``RequestDecodingInterceptor`` (below): a request whose bytes do not decode is INVALID_ARGUMENT
  naming the method and what failed (docs/conventions.md#bounds-at-the-edge);
- ``GrpcMetricsInterceptor`` (quorum/server/grpc_metrics.py): times calls and counts admin
  outcomes.

``OnlyHealthInterceptor`` gates the plaintext health listener and wraps nothing.
"""

from __future__ import annotations

import inspect
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Final

import grpc
from google.protobuf.message import DecodeError
from grpc_health.v1 import health_pb2

__all__ = [
    "HEALTH_METHODS",
    "HEALTH_SERVICE",
    "HandlerInterceptor",
    "OnlyHealthInterceptor",
    "RequestDecodingInterceptor",
    "Undecodable",
    "undecodable_message",
]

HEALTH_SERVICE: Final = health_pb2.DESCRIPTOR.services_by_name["Health"].full_name
HEALTH_METHODS: Final = frozenset(
    f"/{HEALTH_SERVICE}/{method.name}"
    for method in health_pb2.DESCRIPTOR.services_by_name["Health"].methods
)

Continuation = Callable[[grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler]]


class HandlerInterceptor(grpc.aio.ServerInterceptor):  # type: ignore[misc]
    """Wraps each method's handler once and keeps the wrapped one per method (see the module
    docstring). A method whose handler is neither unary-unary nor stream-stream, or that
    ``wraps`` declines, is served as it is (and looked up again at its next call)."""

    def __init__(self) -> None:
        self._handlers: dict[str, grpc.RpcMethodHandler] = {}

    async def intercept_service(
        self, continuation: Continuation, handler_call_details: grpc.HandlerCallDetails
    ) -> grpc.RpcMethodHandler:
        method: str = handler_call_details.method
        cached = self._handlers.get(method)
        if cached is not None:
            return cached
        handler = await continuation(handler_call_details)
        if handler is None or not self.wraps(handler):
            return handler  # unknown methods stay UNIMPLEMENTED
        if handler.unary_unary is not None:
            wrapped = self.wrap_unary(method, handler)
        elif handler.stream_stream is not None:
            wrapped = self.wrap_stream(method, handler)
        else:
            return handler  # no such method is served: the others are grpc's own
        self._handlers[method] = wrapped
        return wrapped

    def wraps(self, handler: grpc.RpcMethodHandler) -> bool:
        """Whether to wrap ``handler`` at all (every handler unless a subclass says not)."""
        return True

    def wrap_unary(self, method: str, handler: grpc.RpcMethodHandler) -> grpc.RpcMethodHandler:
        raise NotImplementedError

    def wrap_stream(self, method: str, handler: grpc.RpcMethodHandler) -> grpc.RpcMethodHandler:
        raise NotImplementedError


# ----- requests that do not decode -----------------------------------------------------------


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


class RequestDecodingInterceptor(HandlerInterceptor):
    """Turns a request that does not decode into INVALID_ARGUMENT, for every unary method
    and every bidirectional stream (a stream ends at its first undecodable message).

    The method's handler is rebuilt with a request deserializer that catches ``DecodeError``
    and hands the behaviour an ``Undecodable`` marker, on which it aborts."""

    def wraps(self, handler: grpc.RpcMethodHandler) -> bool:
        return handler.request_deserializer is not None

    def wrap_unary(self, method: str, handler: grpc.RpcMethodHandler) -> grpc.RpcMethodHandler:
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

    def wrap_stream(self, method: str, handler: grpc.RpcMethodHandler) -> grpc.RpcMethodHandler:
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


# ----- the health listener's gate ------------------------------------------------------------


class OnlyHealthInterceptor(grpc.aio.ServerInterceptor):  # type: ignore[misc]
    """The health listener's gate: ``grpc.health.v1.Health`` Check and Watch pass, every other
    method is UNIMPLEMENTED before any handler is looked up (a plaintext port serves the one
    thing it exists for; docs/security.md#plaintext-ports). It wraps no handler, so it keeps
    none (``HandlerInterceptor``'s cache would outlive a method's first caller)."""

    async def intercept_service(
        self, continuation: Continuation, handler_call_details: grpc.HandlerCallDetails
    ) -> grpc.RpcMethodHandler | None:
        if handler_call_details.method not in HEALTH_METHODS:
            return None
        return await continuation(handler_call_details)
