"""Plaintext ports serve only what they exist for (docs/security.md#plaintext-ports), on a real
mTLS cluster of three controllers and two brokers, each with a ``metrics.listener`` and a
plaintext ``health.listener``.

First every method of every service runs once on each node's TLS listener (that is what once
let the same method answer on the health port: an interceptor shared by both servers kept the
handlers it built by method name). Then every method of every service the project knows is
called on each plaintext port: the health port answers Health's Check and Watch and nothing
else (UNIMPLEMENTED, before any handler runs); the metrics port speaks no gRPC at all.
"""

from __future__ import annotations

from collections.abc import Iterator

import grpc
import pytest
from google.protobuf.descriptor import MethodDescriptor
from grpc_health.v1 import health_pb2
from grpc_reflection.v1alpha import reflection_pb2

from quorum.harness import ProcessCluster, process_cluster, wait_until
from quorum.rpc.v1 import admin_pb2, raft_pb2

pytestmark = [pytest.mark.slow]

SERVED_ON_HEALTH_PORT = frozenset({"/grpc.health.v1.Health/Check", "/grpc.health.v1.Health/Watch"})


def every_method() -> list[MethodDescriptor]:
    """Every method of every gRPC service a node has: ours, health and reflection."""
    files = (
        raft_pb2.DESCRIPTOR,
        admin_pb2.DESCRIPTOR,
        health_pb2.DESCRIPTOR,
        reflection_pb2.DESCRIPTOR,
    )
    methods = [m for f in files for s in f.services_by_name.values() for m in s.methods]
    assert len(methods) > 20, [m.full_name for m in methods]
    return methods


def path_of(method: MethodDescriptor) -> str:
    return f"/{method.containing_service.full_name}/{method.name}"


def call(channel: grpc.Channel, method: MethodDescriptor, timeout_s: float = 5) -> grpc.StatusCode:
    """Call ``method`` with an empty request (each message's default) and return the status;
    a stream sends one request and reads one answer."""
    path = path_of(method)
    try:
        if method.client_streaming or method.server_streaming:
            # Health/Watch is server-streaming; FetchStream and reflection are bidirectional.
            if method.client_streaming:
                responses = channel.stream_stream(path)(iter([b""]), timeout=timeout_s)
            else:
                responses = channel.unary_stream(path)(b"", timeout=timeout_s)
            next(iter(responses))
            responses.cancel()
        else:
            channel.unary_unary(path)(b"", timeout=timeout_s)
    except grpc.RpcError as exc:
        return exc.code()
    return grpc.StatusCode.OK


def logged_address(cluster: ProcessCluster, node_id: int, event: str) -> str | None:
    """The address a node logged with ``event`` (metrics_listening, health_listening)."""
    found = cluster.events(node_id, event)
    return str(found[0]["address"]) if found else None


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ProcessCluster]:
    side = {"metrics.listener": "http://127.0.0.1:0", "health.listener": "127.0.0.1:0"}
    with process_cluster(
        tmp_path_factory.mktemp("plaintext-ports"), brokers=2, node_settings=side
    ) as running:
        running.format()
        running.start_all()
        running.wait_for_leader(timeout_s=30)
        yield running


def test_the_health_port_answers_only_health_even_after_every_method_ran_over_tls(
    cluster: ProcessCluster,
) -> None:
    methods = every_method()
    health = {
        n: wait_until(lambda n=n: logged_address(cluster, n, "health_listening"), 30, f"{n} health")
        for n in cluster.nodes
    }
    # Every method once on every node's TLS listener, as the admin (what each answers does not
    # matter here: the handlers are built and, before the fix, cached by method name).
    for node_id in cluster.nodes:
        with cluster.channel(node_id) as channel:
            for method in methods:
                call(channel, method, timeout_s=2)
    for node_id, address in health.items():
        with grpc.insecure_channel(address) as channel:
            answered = {path_of(m): call(channel, m) for m in methods}
        served = {p: c for p, c in answered.items() if p in SERVED_ON_HEALTH_PORT}
        assert served == dict.fromkeys(SERVED_ON_HEALTH_PORT, grpc.StatusCode.OK), node_id
        others = {p: c for p, c in answered.items() if p not in SERVED_ON_HEALTH_PORT}
        wrong = {p: c for p, c in others.items() if c is not grpc.StatusCode.UNIMPLEMENTED}
        assert not wrong, f"node {node_id}'s health port answered: {wrong}"


def test_the_metrics_port_speaks_no_grpc(cluster: ProcessCluster) -> None:
    methods = every_method()
    metrics = {
        n: wait_until(
            lambda n=n: logged_address(cluster, n, "metrics_listening"), 30, f"{n} metrics"
        )
        for n in cluster.nodes
    }
    for node_id, url in metrics.items():
        address = url.removeprefix("http://").removesuffix("/metrics")
        with grpc.insecure_channel(address) as channel:
            answered = {path_of(m): call(channel, m, timeout_s=2) for m in methods}
        wrong = {p: c for p, c in answered.items() if c is grpc.StatusCode.OK}
        assert not wrong, f"node {node_id}'s metrics port answered gRPC: {wrong}"
