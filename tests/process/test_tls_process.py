"""mTLS on real processes (docs/security.md): who gets through the handshake, certificate
rotation without a restart, PLAINTEXT's warning, start-up refusals, and ``dev certs``."""

from __future__ import annotations

import json
import os
import signal
import socket
import ssl
import stat
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from cryptography import x509

from quorum.admin import AdminClient, AdminConnectionError
from quorum.harness import ProcessCluster, process_cluster, run_cli, session_authority, wait_until
from quorum.rpc.v1 import raft_pb2, raft_pb2_grpc
from quorum.security.certs import Authority, write_private
from quorum.security.identity import ROLE_BROKER, ROLE_CONTROLLER, node_server_name, node_uri
from quorum.security.tls import ClientSecurity, KeyStore

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def one_voter(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ProcessCluster]:
    """One mTLS controller, shared by the handshake tests (they change nothing)."""
    with process_cluster(tmp_path_factory.mktemp("mtls"), voters=1) as cluster:
        cluster.format()
        cluster.start_all()
        cluster.wait_for_leader(timeout_s=30)
        yield cluster


def describe_with(cluster: ProcessCluster, security: ClientSecurity) -> object:
    with security.channel(cluster.nodes[1].address) as channel:
        stub = raft_pb2_grpc.QuorumServiceStub(channel)
        return stub.DescribeQuorum(raft_pb2.DescribeQuorumRequest(), timeout=5)


def test_the_admin_certificate_gets_through(one_voter: ProcessCluster) -> None:
    answer = describe_with(one_voter, one_voter.client_security())
    assert answer.leader_id == 1  # type: ignore[attr-defined]


def test_a_plaintext_client_fails_the_handshake(one_voter: ProcessCluster) -> None:
    with pytest.raises(grpc.RpcError) as caught:
        describe_with(one_voter, ClientSecurity.plaintext())
    assert caught.value.code() == grpc.StatusCode.UNAVAILABLE  # type: ignore[attr-defined]
    with (
        AdminClient(one_voter.bootstrap, timeout_s=3, retries_max=1) as admin,
        pytest.raises(AdminConnectionError, match="command-config"),
    ):
        admin.list_topics()


def test_a_client_certificate_of_another_ca_fails(
    one_voter: ProcessCluster, tmp_path: Path
) -> None:
    stranger = tmp_path / "stranger.pem"
    write_private(stranger, Authority.create("another CA").issue_client("admin"), private=True)
    assert one_voter.certs is not None
    security = ClientSecurity.ssl(
        truststore=one_voter.certs.ca, keystore=KeyStore(location=stranger)
    )
    with pytest.raises(grpc.RpcError) as caught:
        describe_with(one_voter, security)
    assert caught.value.code() == grpc.StatusCode.UNAVAILABLE  # type: ignore[attr-defined]


def test_a_server_of_another_ca_is_not_trusted(one_voter: ProcessCluster, tmp_path: Path) -> None:
    other_ca = tmp_path / "other-ca.pem"
    write_private(other_ca, Authority.create("another CA").cert_pem, private=False)
    assert one_voter.certs is not None
    security = ClientSecurity.ssl(
        truststore=other_ca, keystore=KeyStore(location=one_voter.certs.client_keystore())
    )
    with pytest.raises(grpc.RpcError):
        describe_with(one_voter, security)


def test_a_client_without_a_certificate_fails(one_voter: ProcessCluster) -> None:
    assert one_voter.certs is not None
    with pytest.raises(grpc.RpcError) as caught:
        describe_with(one_voter, ClientSecurity.ssl(truststore=one_voter.certs.ca))
    assert caught.value.code() == grpc.StatusCode.UNAVAILABLE  # type: ignore[attr-defined]


def test_the_cli_connects_with_command_config(one_voter: ProcessCluster) -> None:
    listed = one_voter.run_cli("topics", "--bootstrap-server", one_voter.bootstrap, "--list")
    assert listed.returncode == 0, listed.stderr
    described = one_voter.run_cli(
        "quorum", "describe", "--status", "--bootstrap-controller", one_voter.bootstrap
    )
    assert "LeaderId:               1" in described.stdout
    without = run_cli(
        "quorum", "describe", "--status", "--bootstrap-controller", one_voter.bootstrap,
        check=False,
    )  # fmt: skip
    assert without.returncode == 1
    assert "UNAVAILABLE" in without.stderr


def served_serial(address: str, ca: Path, keystore: Path) -> int:
    """The serial of the certificate a new TLS connection to ``address`` is served."""
    context = ssl.create_default_context(cafile=str(ca))
    context.load_cert_chain(str(keystore))
    context.set_alpn_protocols(["h2"])
    host, port = address.rsplit(":", 1)
    with (
        socket.create_connection((host, int(port)), timeout=5) as raw,
        context.wrap_socket(raw, server_hostname=host) as tls,
    ):
        der = tls.getpeercert(binary_form=True)
    assert der is not None
    return x509.load_der_x509_certificate(der).serial_number


def test_a_rotated_certificate_is_served_without_a_restart(tmp_path: Path) -> None:
    with process_cluster(tmp_path) as cluster:
        cluster.format()
        cluster.start_all()
        # The leader's: it calls nobody, so only a new handshake makes it re-read the files.
        node, _, _ = cluster.wait_for_leader(timeout_s=30)
        assert cluster.certs is not None
        keystore = cluster.certs.node_keystore(node)
        admin_pem = cluster.certs.client_keystore()
        address = cluster.nodes[node].address
        before = served_serial(address, cluster.certs.ca, admin_pem)
        assert before == x509.load_pem_x509_certificates(keystore.read_bytes())[0].serial_number

        # A new key and certificate from the same CA, renamed over the old file.
        fresh = session_authority().issue_node(
            cluster.cluster_id, node, cluster.certs.roles_of(node)
        )
        write_private(keystore, fresh, private=True)
        after = x509.load_pem_x509_certificates(fresh)[0].serial_number
        assert after != before
        # The next handshake is served the new certificate. The node's own peer clients (which
        # share the files with its server) may have re-read them first (a follower fetches all
        # the time; a leader calls nobody); the server must switch either way.
        assert served_serial(address, cluster.certs.ca, admin_pem) == after
        wait_until(lambda: "tls_files_reloaded" in cluster.logs(node), 10, "the reload logged")
        assert cluster.nodes[node].process is not None
        assert cluster.nodes[node].alive and cluster.nodes[node].starts == 1
        # The node keeps working (the admin's channel is new, the node's own clients too).
        assert describe_with(cluster, cluster.client_security()).error_code == 0  # type: ignore[attr-defined]
        # The quorum keeps committing with the new certificate on that node.
        _, _, hw = cluster.wait_for_leader()
        wait_until(
            lambda: (cluster.leader() or (0, 0, 0))[2] > hw + 2, 20, "the high watermark moving"
        )

        # SIGHUP forces a re-read even when the files look unchanged.
        cluster.nodes[node].process.send_signal(signal.SIGHUP)
        wait_until(lambda: "tls_reload_requested" in cluster.logs(node), 10, "SIGHUP handled")
        assert cluster.nodes[node].alive


def test_a_client_picks_up_its_rotated_certificate(one_voter: ProcessCluster) -> None:
    assert one_voter.certs is not None
    path = one_voter.certs.directory / "rotating.pem"
    write_private(path, session_authority().issue_client("rotating"), private=True)
    with AdminClient(
        one_voter.bootstrap,
        security=ClientSecurity.ssl(truststore=one_voter.certs.ca, keystore=KeyStore(path)),
    ) as admin:
        admin.list_topics()
        first = admin._channels.get(one_voter.bootstrap)
        write_private(path, session_authority().issue_client("rotating"), private=True)
        admin.list_topics()
        assert admin._channels.get(one_voter.bootstrap) is not first


def test_plaintext_mode_logs_that_it_is_insecure(tmp_path: Path) -> None:
    with process_cluster(tmp_path, voters=1, security="plaintext") as cluster:
        cluster.format()
        cluster.start_all()
        cluster.wait_for_leader(timeout_s=30)
        warnings = [
            json.loads(line)
            for line in cluster.logs(1).splitlines()
            if '"listener_plaintext"' in line
        ]
        assert warnings and warnings[0]["level"] == "warning"
        assert "INSECURE" in warnings[0]["message"]
        assert describe_with(cluster, ClientSecurity.plaintext()).leader_id == 1  # type: ignore[attr-defined]


def test_an_ssl_listener_without_a_keystore_is_refused(tmp_path: Path) -> None:
    cluster = ProcessCluster(tmp_path, voters=1, security="plaintext")
    config = str(cluster.nodes[1].config)
    result = run_cli(
        "controller", "start", "--config", config,
        "--override", 'listener.security.protocol.map=["CONTROLLER:SSL"]', check=False,
    )  # fmt: skip
    assert result.returncode == 1
    assert "no keystore" in result.stderr and "metaquorum dev certs" in result.stderr
    unmapped = run_cli(
        "controller", "start", "--config", config,
        "--override", "listener.security.protocol.map=[]", check=False,
    )  # fmt: skip
    assert unmapped.returncode == 1 and "SSL (the default" in unmapped.stderr
    wrong_type = run_cli(
        "controller", "start", "--config", config, "--override", "ssl.keystore.type=JKS",
        check=False,
    )  # fmt: skip
    assert wrong_type.returncode == 1
    assert "ssl.keystore.type: 'JKS' is not supported; allowed: 'PEM'" in wrong_type.stderr
    missing = run_cli(
        "controller", "start", "--config", config,
        "--override", 'listener.security.protocol.map=["CONTROLLER:SSL"]',
        "--override", f"ssl.keystore.location={tmp_path / 'nope.pem'}",
        "--override", f"ssl.truststore.location={tmp_path / 'nope-ca.pem'}", check=False,
    )  # fmt: skip
    assert missing.returncode == 1
    assert "nope.pem does not exist" in missing.stderr


def test_dev_certs_writes_a_verifiable_layout(tmp_path: Path) -> None:
    out = tmp_path / "certs"
    cluster_id = "MkU3OEVBNTcwNTJENDM2Qg"
    result = run_cli(
        "dev", "certs", "--out", str(out), "--deploy-dir", str(REPO / "deploy/local"),
        "--cluster-id", cluster_id,
    )  # fmt: skip
    assert f"cluster id {cluster_id}" in result.stdout
    ca = x509.load_pem_x509_certificate((out / "ca.pem").read_bytes())
    for node_id in (1, 2, 3, 101, 102):
        path = out / f"node-{node_id}.pem"
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
        cert = x509.load_pem_x509_certificates(path.read_bytes())[0]
        cert.verify_directly_issued_by(ca)
        san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
        role = ROLE_CONTROLLER if node_id < 100 else ROLE_BROKER
        assert san.get_values_for_type(x509.UniformResourceIdentifier) == [
            node_uri(cluster_id, role, node_id)
        ]
        dns = san.get_values_for_type(x509.DNSName)
        assert "localhost" in dns
        assert node_server_name(cluster_id, role, node_id) in dns
        assert node_server_name(cluster_id, role) in dns
        assert cert.subject.rfc4514_string() == f"CN=node-{node_id}"
    admin = x509.load_pem_x509_certificates((out / "admin.pem").read_bytes())[0]
    admin.verify_directly_issued_by(ca)
    assert admin.subject.rfc4514_string() == "CN=admin"
    for key_file in ("ca-key.pem", "admin.pem"):
        assert stat.S_IMODE((out / key_file).stat().st_mode) == 0o600
    properties = (out / "client.properties").read_text()
    assert "security.protocol=SSL" in properties
    assert ClientSecurity.from_properties_file(out / "client.properties").protocol == "SSL"
    # alice: a client with no ACLs, for the demo's refused-then-granted request.
    alice = x509.load_pem_x509_certificates((out / "alice.pem").read_bytes())[0]
    assert alice.subject.rfc4514_string() == "CN=alice"
    assert "alice.pem" in (out / "alice.properties").read_text()

    # A second run keeps everything; --force rewrites (a new CA).
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    again = run_cli("dev", "certs", "--out", str(out), "--deploy-dir", str(REPO / "deploy/local"))
    assert "wrote" not in again.stdout
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before
    run_cli(
        "dev", "certs", "--out", str(out), "--deploy-dir", str(REPO / "deploy/local"), "--force"
    )
    assert (out / "ca.pem").read_bytes() != before["ca.pem"]
    assert not [p for p in out.iterdir() if p.name.endswith(".tmp")]
    assert os.access(out / "client.properties", os.R_OK)


def test_a_server_certificate_must_name_the_host(tmp_path: Path) -> None:
    """Clients check the host name: a node whose certificate names another host is refused,
    though its CA is trusted."""
    cluster = ProcessCluster(tmp_path, voters=1)
    assert cluster.certs is not None
    elsewhere = cluster.certs.authority.issue(
        "node-1",
        uris=[node_uri(cluster.cluster_id, ROLE_CONTROLLER, 1)],
        dns_names=[node_server_name(cluster.cluster_id, ROLE_CONTROLLER, 1), "elsewhere.invalid"],
    )
    write_private(cluster.certs.node_keystore(1), elsewhere, private=True)
    try:
        cluster.format()
        cluster.start_all()
        wait_until(lambda: "listening" in cluster.logs(1), 30, "the node listening")
        with pytest.raises(grpc.RpcError) as caught:
            describe_with(cluster, cluster.client_security())
        assert caught.value.code() == grpc.StatusCode.UNAVAILABLE  # type: ignore[attr-defined]
        # The same certificate is accepted when the client asks for the host it names.
        with cluster.client_security().channel(
            cluster.nodes[1].address, [("grpc.ssl_target_name_override", "elsewhere.invalid")]
        ) as channel:
            stub = raft_pb2_grpc.QuorumServiceStub(channel)
            stub.DescribeQuorum(raft_pb2.DescribeQuorumRequest(), timeout=5)
    finally:
        cluster.stop_all()


def test_client_auth_none_serves_clients_without_certificates_and_warns(tmp_path: Path) -> None:
    with process_cluster(tmp_path, voters=1, node_settings={"ssl.client.auth": "none"}) as cluster:
        cluster.format()
        cluster.start_all()
        cluster.wait_for_leader(timeout_s=30)
        assert cluster.certs is not None
        anonymous = ClientSecurity.ssl(truststore=cluster.certs.ca)
        assert describe_with(cluster, anonymous).leader_id == 1  # type: ignore[attr-defined]
        assert '"client_auth_not_required"' in cluster.logs(1)
