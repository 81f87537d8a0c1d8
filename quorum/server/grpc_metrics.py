"""A node's gRPC metrics (docs/operating.md#metrics): every call timed
(``metaquorum_grpc_server_handling_seconds``), and admin requests and their per-entry outcomes
counted by Kafka error code (``metaquorum_admin_requests``, ``metaquorum_admin_results``), by an
interceptor (``GrpcMetricsInterceptor``, on the ``HandlerInterceptor`` base of
quorum/server/interceptors.py: a call costs a dictionary lookup there and the timing here)."""

from __future__ import annotations

import asyncio
import time
from collections import deque
from typing import Any, Final

import grpc
from prometheus_client import CollectorRegistry, Counter, Histogram

from quorum.errors import ErrorCode
from quorum.server.interceptors import HandlerInterceptor
from quorum.server.metric_stats import LATENCY_BUCKETS_S

__all__ = ["GrpcMetrics", "GrpcMetricsInterceptor", "count_admin_response", "error_name"]

ADMIN_SERVICE_PREFIX: Final = "/quorum.rpc.v1.AdminService/"


class GrpcMetrics:
    """The gRPC families of one node, registered on its registry."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.grpc_latency = Histogram(
            "metaquorum_grpc_server_handling_seconds",
            "Time this node took to answer a gRPC call, by service, method and status",
            ("grpc_service", "grpc_method", "grpc_code"),
            buckets=LATENCY_BUCKETS_S,
            registry=registry,
        )
        self.admin_requests = Counter(
            "metaquorum_admin_requests",
            "Admin requests answered, by RPC and the request's Kafka error code (a call that "
            "ended without an answer: its gRPC status, e.g. UNAVAILABLE)",
            ("rpc", "error_code"),
            registry=registry,
        )
        self.admin_results = Counter(
            "metaquorum_admin_results",
            "Per-entry outcomes of admin requests (one per topic or ACL), by RPC and Kafka "
            "error code, as Kafka's RequestMetrics ErrorsPerSec counts them",
            ("rpc", "error_code"),
            registry=registry,
        )


class GrpcMetricsInterceptor(HandlerInterceptor):
    """Times every unary call and every message of a bidirectional stream, and counts admin
    requests and their per-entry outcomes by Kafka error code."""

    def __init__(self, metrics: GrpcMetrics) -> None:
        super().__init__()
        self._metrics = metrics

    def wrap_unary(self, method: str, handler: grpc.RpcMethodHandler) -> grpc.RpcMethodHandler:
        service, _, rpc = method.lstrip("/").rpartition("/")
        behaviour = handler.unary_unary
        metrics = self._metrics
        is_admin = method.startswith(ADMIN_SERVICE_PREFIX)

        async def unary_unary(request: Any, context: grpc.aio.ServicerContext) -> Any:
            started = time.perf_counter()
            code = "OK"
            try:
                response = behaviour(request, context)
                if asyncio.iscoroutine(response):
                    response = await response
            except BaseException:
                code = _failure_code(context)
                if is_admin:
                    metrics.admin_requests.labels(rpc, code).inc()
                raise
            finally:
                metrics.grpc_latency.labels(service, rpc, code).observe(
                    time.perf_counter() - started
                )
            if is_admin:
                count_admin_response(metrics, rpc, response)
            return response

        return grpc.unary_unary_rpc_method_handler(
            unary_unary,
            request_deserializer=handler.request_deserializer,
            response_serializer=handler.response_serializer,
        )

    def wrap_stream(self, method: str, handler: grpc.RpcMethodHandler) -> grpc.RpcMethodHandler:
        """A bidirectional stream (FetchStream) is timed per message: from a request's arrival
        to its answer (answers come in order), the status for the one in flight if it ends."""
        service, _, rpc = method.lstrip("/").rpartition("/")
        behaviour = handler.stream_stream
        latency = self._metrics.grpc_latency

        async def stream_stream(requests: Any, context: grpc.aio.ServicerContext) -> Any:
            arrived: deque[float] = deque()

            async def timed() -> Any:
                async for request in requests:
                    arrived.append(time.perf_counter())
                    yield request

            try:
                async for response in behaviour(timed(), context):
                    if arrived:
                        latency.labels(service, rpc, "OK").observe(
                            time.perf_counter() - arrived.popleft()
                        )
                    yield response
            except BaseException:
                if arrived:
                    latency.labels(service, rpc, _failure_code(context)).observe(
                        time.perf_counter() - arrived.popleft()
                    )
                raise

        return grpc.stream_stream_rpc_method_handler(
            stream_stream,
            request_deserializer=handler.request_deserializer,
            response_serializer=handler.response_serializer,
        )


def _failure_code(context: grpc.aio.ServicerContext) -> str:
    """The status name of a call whose handler raised (UNKNOWN when none, or OK, was set)."""
    status = context.code()
    code = status.name if isinstance(status, grpc.StatusCode) else "UNKNOWN"
    return "UNKNOWN" if code == "OK" else code


def error_name(code: int) -> str:
    try:
        return ErrorCode(code).name
    except ValueError:
        return str(code)


def count_admin_response(metrics: GrpcMetrics, rpc: str, response: Any) -> None:
    """The request's error code, and every entry's (repeated fields with an error_code)."""
    code = getattr(response, "error_code", None)
    if not isinstance(code, int):
        return
    metrics.admin_requests.labels(rpc, error_name(code)).inc()
    for descriptor, value in response.ListFields():
        if descriptor.message_type is None or not _is_repeated(descriptor):
            continue
        if "error_code" not in descriptor.message_type.fields_by_name:
            continue
        for entry in value:
            metrics.admin_results.labels(rpc, error_name(entry.error_code)).inc()


def _is_repeated(descriptor: Any) -> bool:
    repeated = getattr(descriptor, "is_repeated", None)
    if isinstance(repeated, bool):
        return repeated
    return bool(descriptor.label == descriptor.LABEL_REPEATED)
