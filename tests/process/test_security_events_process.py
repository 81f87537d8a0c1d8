"""Failures nobody could see (docs/security.md#what-a-node-logs), on a real mTLS controller with
a metrics listener: failed TLS handshakes (a plaintext client on the TLS port, a TLS client
without a certificate, one signed by another CA) are logged and counted; a flood of forged and
unauthorized requests is counted in full and logged boundedly (the first of each kind, then one
line per 1,000)."""

from __future__ import annotations

import socket
import ssl
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from prometheus_client.parser import text_string_to_metric_families

from quorum.errors import ErrorCode
from quorum.harness import ProcessCluster, process_cluster, wait_until
from quorum.ids import METADATA_TOPIC_ID
from quorum.rpc.v1 import raft_pb2, raft_pb2_grpc
from quorum.security.certs import Authority, write_private
from quorum.security.tls import ClientSecurity, KeyStore

pytestmark = [pytest.mark.slow]

ATTEMPTS = 150
FORGED = 1_200


def counters(url: str, family: str) -> dict[tuple[tuple[str, str], ...], float]:
    with urllib.request.urlopen(url, timeout=5) as response:
        text = response.read().decode()
    return {
        tuple(sorted(s.labels.items())): s.value
        for f in text_string_to_metric_families(text)
        if f.name == family
        for s in f.samples
    }


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ProcessCluster]:
    with process_cluster(
        tmp_path_factory.mktemp("events"),
        voters=1,
        node_settings={"metrics.listener": "http://127.0.0.1:0"},
    ) as running:
        running.format()
        running.start_all()
        running.wait_for_leader(timeout_s=30)
        yield running


def metrics_url(cluster: ProcessCluster) -> str:
    def logged() -> str | None:
        found = cluster.events(1, "metrics_listening")
        return str(found[0]["address"]) if found else None

    return wait_until(logged, 30, "the metrics listener")


def test_failed_tls_handshakes_are_logged_and_counted(
    cluster: ProcessCluster, tmp_path: Path
) -> None:
    host, port = cluster.nodes[1].address.rsplit(":", 1)
    other = Authority.create("another CA")
    stranger = tmp_path / "stranger.pem"
    write_private(stranger, other.issue_client("stranger"), private=True)
    no_certificate = ssl.create_default_context(cafile=str(cluster.certs.ca))  # type: ignore[union-attr]
    no_certificate.check_hostname = False
    for _ in range(ATTEMPTS):
        # Not TLS at all: an HTTP/2 preface in plaintext.
        with socket.create_connection((host, int(port)), timeout=5) as plain:
            plain.sendall(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n")
            plain.recv(64)
        # TLS without a client certificate: with TLS 1.3 the client's side of the handshake
        # may finish before the server refuses; either way nothing is answered.
        with socket.create_connection((host, int(port)), timeout=5) as raw:
            try:
                with no_certificate.wrap_socket(raw) as tls:
                    tls.sendall(b"x")
                    assert tls.recv(64) == b""
            except (ssl.SSLError, OSError):
                pass
    # A client certificate of another CA, through gRPC itself.
    foreign = ClientSecurity.ssl(truststore=cluster.certs.ca, keystore=KeyStore(location=stranger))  # type: ignore[union-attr]
    with foreign.channel(cluster.nodes[1].address) as channel, pytest.raises(grpc.RpcError):
        raft_pb2_grpc.QuorumServiceStub(channel).DescribeQuorum(
            raft_pb2.DescribeQuorumRequest(), timeout=5
        )
    url = metrics_url(cluster)

    def failures() -> dict[str, float] | None:
        found = {
            dict(labels)["reason"]: value
            for labels, value in counters(url, "metaquorum_tls_handshake_failures").items()
            if dict(labels)["listener"] == "CONTROLLER"
        }
        wanted = ("WRONG_VERSION_NUMBER", "PEER_DID_NOT_RETURN_A_CERTIFICATE")
        done = all(found.get(r, 0) >= ATTEMPTS for r in wanted) and any(
            "CERTIFICATE_VERIFY_FAILED" in r or "UNKNOWN_CA" in r for r in found
        )
        return found if done else None

    found = wait_until(failures, 30, "every failed handshake counted")
    logged = cluster.events(1, "tls_handshake_failed")
    reasons = {str(e["reason"]) for e in logged}
    assert {"WRONG_VERSION_NUMBER", "PEER_DID_NOT_RETURN_A_CERTIFICATE"} <= reasons, logged
    # Logged boundedly: the first of each reason (and one per 1,000), not one per handshake.
    assert len(logged) <= 2 * len(found), logged


def test_a_flood_of_forged_requests_is_counted_and_logged_boundedly(
    cluster: ProcessCluster,
) -> None:
    header = {"cluster_id": cluster.cluster_id, "topic_id": METADATA_TOPIC_ID.bytes}
    forged = raft_pb2.FetchRequest(
        **header, replica_id=2, current_leader_epoch=1, fetch_offset=0, last_fetched_epoch=0,
        max_wait_ms=0, max_bytes=1024,
    )  # fmt: skip
    url = metrics_url(cluster)
    key = (("error_code", "CLUSTER_AUTHORIZATION_FAILED"), ("event", "request_refused"))
    before = counters(url, "metaquorum_requests_refused").get(key, 0)
    lines_before = len(cluster.events(1, "request_refused"))
    # A broker's certificate claiming another replica, then an admin's claiming a node.
    for security in (cluster.node_security(101), cluster.client_security()):
        with cluster.channel(1, security) as channel:
            stub = raft_pb2_grpc.QuorumServiceStub(channel)
            for _ in range(FORGED // 2):
                answer = stub.Fetch(forged, timeout=5)
                assert answer.error_code == ErrorCode.CLUSTER_AUTHORIZATION_FAILED
    wait_until(
        lambda: counters(url, "metaquorum_requests_refused").get(key, 0) - before >= FORGED,
        30,
        "every refusal counted",
    )
    lines = len(cluster.events(1, "request_refused"))
    # Two callers: the first of each, and the 1,000th of neither (600 each).
    assert lines - lines_before <= 2, lines - lines_before
