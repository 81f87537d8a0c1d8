"""Pure parts of the security layer: Kafka's principal mapping rules, client properties,
the ssl.* config keys (docs/security.md#principals)."""

from __future__ import annotations

import asyncio
import datetime
import ssl
from pathlib import Path
from typing import Any

import grpc
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from quorum.config import ConfigError, config_from_settings
from quorum.logs import LogThrottle
from quorum.rpc.v1 import admin_pb2, admin_pb2_grpc
from quorum.security.certs import Authority, write_private
from quorum.security.identity import (
    FORWARDED_CLIENT_KEY,
    FORWARDED_PRINCIPAL_KEY,
    ROLE_BROKER,
    ROLE_CONTROLLER,
    CallerResolver,
    MappingRuleError,
    PrincipalMapper,
    node_uri,
    parse_mapping_rules,
    peer_certificate_properties,
)
from quorum.security.node_identity import ANY_NODE, Claim, refuse_claim
from quorum.security.tls import ClientSecurity, NodeSecurity, parse_properties

BASE = {
    "node.id": 1,
    "process.roles": ["controller"],
    "controller.quorum.voters": ["1@127.0.0.1:9093"],
    "listeners": ["CONTROLLER://127.0.0.1:9093"],
    "metadata.log.dir": "/tmp/x",
}


def test_default_keeps_the_subject() -> None:
    assert PrincipalMapper("DEFAULT").name("CN=admin,OU=ops") == "CN=admin,OU=ops"


def test_rules_apply_in_order_with_case() -> None:
    mapper = PrincipalMapper(
        "RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/L, RULE:^CN=(.*?),OU=(.*?)$/$1@$2/U, DEFAULT"
    )
    assert mapper.name("CN=Kafka,OU=ServiceUsers,O=x") == "kafka"
    assert mapper.name("CN=bob,OU=ops") == "BOB@OPS"
    assert mapper.name("CN=admin") == "CN=admin"


def test_no_matching_rule_gives_no_name() -> None:
    assert PrincipalMapper("RULE:^CN=(.*)$/$1/").name("O=org") is None


def test_rules_parse_like_kafka() -> None:
    assert parse_mapping_rules("RULE:^CN=(.*?),OU=.*$/$1/L,DEFAULT") == (
        "RULE:^CN=(.*?),OU=.*$/$1/L",
        "DEFAULT",
    )
    with pytest.raises(MappingRuleError):
        parse_mapping_rules("RULE:^CN=(.*)$")
    with pytest.raises(MappingRuleError):
        parse_mapping_rules("whatever")


def test_properties_files_parse_the_java_way() -> None:
    text = "# comment\n! also\nsecurity.protocol = SSL\nssl.keystore.location: a.pem\nk v\\\n  w\n"
    assert parse_properties(text) == {
        "security.protocol": "SSL",
        "ssl.keystore.location": "a.pem",
        "k": "vw",
    }


def test_client_properties_are_checked(tmp_path: Path) -> None:
    assert ClientSecurity.from_properties(None).protocol == "PLAINTEXT"
    with pytest.raises(ConfigError, match="SASL_SSL"):
        ClientSecurity.from_properties({"security.protocol": "SASL_SSL"})
    with pytest.raises(ConfigError, match="allowed: PEM"):
        ClientSecurity.from_properties({"security.protocol": "SSL", "ssl.keystore.type": "JKS"})
    with pytest.raises(ConfigError, match=r"ssl\.truststore\.location"):
        ClientSecurity.from_properties({"security.protocol": "SSL"})
    with pytest.raises(ConfigError, match=r"ssl\.keystore\.password"):
        ClientSecurity.from_properties({"ssl.keystore.password": "x"})
    with pytest.raises(ConfigError, match="does not exist"):
        ClientSecurity.from_properties(
            {"security.protocol": "SSL", "ssl.truststore.location": "ca.pem"}, base_dir=tmp_path
        )


def test_ssl_keys_are_validated() -> None:
    config = config_from_settings(BASE)
    assert config.listener_protocol == "SSL"  # secure by default
    plain = config_from_settings({**BASE, "listener.security.protocol.map": "CONTROLLER:PLAINTEXT"})
    assert plain.listener_protocol == "PLAINTEXT"
    for key, value, message in [
        ("listener.security.protocol.map", ["CONTROLLER:SASL_SSL"], "SASL is not supported"),
        ("listener.security.protocol.map", ["CONTROLLER"], "NAME:PROTOCOL"),
        ("ssl.truststore.type", "JKS", "allowed: 'PEM'"),
        ("ssl.client.auth", "maybe", "allowed: 'required', 'requested', 'none'"),
        ("ssl.principal.mapping.rules", "RULE:x", "missing '/'"),
        ("ssl.keystore.key", "-----BEGIN", "go together"),
    ]:
        with pytest.raises(ConfigError, match=message):
            config_from_settings({**BASE, key: value})
    rules = config_from_settings(
        {**BASE, "ssl.principal.mapping.rules": "RULE:^CN=(.*)$/$1/,DEFAULT"}
    )
    assert rules.ssl_principal_mapping_rules == ("RULE:^CN=(.*)$/$1/", "DEFAULT")


def test_inline_keystore_and_a_mismatched_key(tmp_path: Path) -> None:
    authority = Authority.create()
    ca = tmp_path / "ca.pem"
    write_private(ca, authority.cert_pem, private=False)
    pem = authority.issue_node("MkU3OEVBNTcwNTJENDM2Qg", 1, [ROLE_CONTROLLER]).decode()
    key, _, rest = pem.partition("-----END PRIVATE KEY-----\n")
    key += "-----END PRIVATE KEY-----\n"
    inline = {
        **BASE,
        "ssl.keystore.key": key,
        "ssl.keystore.certificate.chain": rest,
        "ssl.truststore.location": str(ca),
    }
    security = NodeSecurity(config_from_settings(inline))
    assert security.is_ssl and security.server_credentials() is not None
    other_key = (
        authority.issue_node("MkU3OEVBNTcwNTJENDM2Qg", 2, [ROLE_CONTROLLER])
        .decode()
        .split("-----BEGIN CERTIFICATE")[0]
    )
    with pytest.raises(ConfigError, match="does not belong to the first certificate"):
        NodeSecurity(config_from_settings({**inline, "ssl.keystore.key": other_key}))
    with pytest.raises(ConfigError, match=r"ssl\.truststore\.location is not set"):
        NodeSecurity(config_from_settings({k: v for k, v in inline.items() if "trust" not in k}))


class FakeAuthContext:
    """What gRPC hands a handler: the peer address and, for a verified certificate, its PEM,
    its subject (RFC 2253) and its URI alternative names, as BoringSSL reads them."""

    def __init__(self, pem: bytes | None, **properties: list[bytes]) -> None:
        self._auth: dict[str, list[bytes]] = {}
        if pem is not None:
            self._auth["x509_pem_cert"] = [pem]
            try:
                cert = x509.load_pem_x509_certificate(pem)
            except ValueError:
                pass  # a test's garbled bytes: no other properties
            else:
                self._auth["x509_subject"] = [cert.subject.rfc4514_string().encode()]
                try:
                    san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName)
                except x509.ExtensionNotFound:
                    uris = []
                else:
                    uris = san.value.get_values_for_type(x509.UniformResourceIdentifier)
                if uris:
                    self._auth["peer_uri"] = [uri.encode() for uri in uris]
        self._auth.update(properties)

    def peer(self) -> str:
        return "ipv4:127.0.0.1:1"

    def auth_context(self) -> dict[str, list[bytes]]:
        return self._auth


def _certificate_only(pem: bytes) -> bytes:
    start = pem.index(b"-----BEGIN CERTIFICATE-----")
    return pem[start:]


def test_callers_fail_closed() -> None:
    """A verified certificate never turns into an unchecked (plaintext-like) caller: unparsed
    or unmapped, it has no name, and its node URI, if any, still binds it."""
    authority = Authority.create()
    node = _certificate_only(authority.issue_node("Y2x1c3Rlcg", 3, [ROLE_CONTROLLER]))
    admin = _certificate_only(authority.issue_client("admin"))
    resolver = CallerResolver()
    assert resolver.caller(FakeAuthContext(None)).authenticated is False
    by_node = resolver.caller(FakeAuthContext(node))
    assert (by_node.node_id, by_node.cluster_id, by_node.authenticated) == (3, "Y2x1c3Rlcg", True)
    assert by_node.roles == {ROLE_CONTROLLER}
    assert resolver.caller(FakeAuthContext(admin)).principal == "User:CN=admin"
    garbled = resolver.caller(FakeAuthContext(b"-----BEGIN CERTIFICATE-----\nAAAA\n"))
    assert (garbled.principal, garbled.node_id, garbled.authenticated) == (
        "User:ANONYMOUS",
        None,
        True,
    )
    strict = CallerResolver("RULE:^CN=nobody$/x/")
    unmapped = strict.caller(FakeAuthContext(node))
    assert (unmapped.principal, unmapped.node_id, unmapped.authenticated) == (
        "User:ANONYMOUS",
        3,
        True,
    )
    assert refuse_claim(unmapped, "Y2x1c3Rlcg", Claim("replica_id", 2, ANY_NODE)) is not None
    assert refuse_claim(garbled, "Y2x1c3Rlcg", Claim("replica_id", 2, ANY_NODE)) is not None
    # What the TLS stack says is read defensively: a subject that is not UTF-8, two node
    # names in one certificate, a node URI without a role (the earlier form) or with an
    # unknown one, name nobody (a fresh certificate each: identities are cached).
    for properties in (
        {"x509_subject": [b"CN=\xff"]},
        {"x509_subject": [b"CN=a", b"CN=b"]},
        {
            "peer_uri": [
                b"spiffe://metaquorum/Y2x1c3Rlcg/controller/1",
                b"spiffe://metaquorum/Y2x1c3Rlcg/controller/2",
            ]
        },
        {
            "peer_uri": [
                b"spiffe://metaquorum/Y2x1c3Rlcg/controller/1",
                b"spiffe://metaquorum/b3RoZXI/broker/1",
            ]
        },
        {"peer_uri": [b"spiffe://metaquorum/Y2x1c3Rlcg/node/1"]},
        {"peer_uri": [b"spiffe://metaquorum/Y2x1c3Rlcg/admin/1"]},
    ):
        odd = resolver.caller(
            FakeAuthContext(_certificate_only(authority.issue_client("x")), **properties)
        )
        assert odd.authenticated and odd.node_id is None and not odd.roles, properties
        assert odd.principal == "User:ANONYMOUS" or "peer_uri" in properties, properties
    # A combined node's certificate names one id in both roles.
    combined = resolver.caller(
        FakeAuthContext(
            _certificate_only(authority.issue_client("y")),
            peer_uri=[
                b"spiffe://metaquorum/Y2x1c3Rlcg/controller/1",
                b"spiffe://metaquorum/Y2x1c3Rlcg/broker/1",
            ],
        )
    )
    assert (combined.node_id, combined.roles) == (1, {ROLE_CONTROLLER, ROLE_BROKER})


class ForwardedContext(FakeAuthContext):
    """A call that names a forwarded principal in its metadata (KIP-590)."""

    def __init__(self, pem: bytes | None, principal: bytes) -> None:
        super().__init__(pem)
        self._metadata = ((FORWARDED_PRINCIPAL_KEY, principal), (FORWARDED_CLIENT_KEY, b"c:1"))

    def invocation_metadata(self) -> tuple[tuple[str, bytes], ...]:
        return self._metadata


def test_a_forwarded_principal_is_believed_from_a_registered_broker_of_this_cluster_only() -> None:
    """docs/security.md#forwarded-requests: from the certificate of a registered broker of this
    cluster the call acts as the forwarded client, without the broker's powers; from anyone
    else (a controller, a broker id the cluster does not know, another cluster, a client), as
    User:ANONYMOUS."""
    authority = Authority.create()
    broker = _certificate_only(authority.issue_node("Y2x1c3Rlcg", 101, [ROLE_BROKER]))
    unknown = _certificate_only(authority.issue_node("Y2x1c3Rlcg", 999, [ROLE_BROKER]))
    controller = _certificate_only(authority.issue_node("Y2x1c3Rlcg", 1, [ROLE_CONTROLLER]))
    foreign = _certificate_only(authority.issue_node("b3RoZXI", 101, [ROLE_BROKER]))
    admin = _certificate_only(authority.issue_client("admin"))
    resolver = CallerResolver(
        forwarding_cluster_id="Y2x1c3Rlcg", registered_broker=lambda broker_id: broker_id == 101
    )
    alice = resolver.caller(ForwardedContext(broker, b"User:CN=alice"))
    assert (alice.principal, alice.node_id, alice.forwarded_by) == ("User:CN=alice", None, 101)
    no_powers = Claim("broker_id", 101, ANY_NODE)
    assert refuse_claim(alice, "Y2x1c3Rlcg", no_powers) is not None
    for pem, claimed in [
        (unknown, b"User:CN=admin"),  # a broker id in no registration
        (controller, b"User:CN=admin"),  # a node, but not a broker
        (foreign, b"User:CN=admin"),  # a node of another cluster
        (admin, b"User:CN=admin"),  # a client, even the admin
        (None, b"User:CN=admin"),  # plaintext: the claim cannot be checked
        (broker, b"CN=admin"),  # not a principal
        (broker, b"User:CN=a\nb"),  # a control character
        (broker, b"User:" + b"x" * 2_000),  # too long
        (broker, b"User:\xff"),  # not UTF-8
    ]:
        refused = resolver.caller(ForwardedContext(pem, claimed))
        assert (refused.principal, refused.node_id, refused.forwarded_by) == (
            "User:ANONYMOUS",
            None,
            None,
        ), (pem, claimed)
    # A resolver without forwarding (brokers, QuorumService) believes no one.
    untrusting = CallerResolver().caller(ForwardedContext(broker, b"User:CN=admin"))
    assert untrusting.principal == "User:ANONYMOUS"


def test_log_throttle_logs_the_first_and_every_thousandth() -> None:
    throttle = LogThrottle(every=1_000, keys_max=3)
    logged = [n for n in (throttle.count(("a",)) for _ in range(2_500)) if n is not None]
    assert logged == [1, 1_000, 2_000]
    assert throttle.count(("b",)) == 1
    # Past keys_max distinct keys everything is forgotten: memory stays bounded.
    for key in ("c", "d"):
        throttle.count((key,))
    assert throttle.count(("a",)) == 1


def _certificate_with_subject(authority: Authority, attributes: list[tuple[Any, str]]) -> bytes:
    """A client key and certificate (PEM) whose subject has ``attributes`` (most general
    first, as certificates list them) and a node URI."""
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(oid, value) for oid, value in attributes]))
        .issuer_name(authority.cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(
            x509.SubjectAlternativeName(
                [
                    x509.UniformResourceIdentifier(node_uri("Y2x1c3Rlcg", ROLE_CONTROLLER, 7)),
                    x509.DNSName("a"),
                ]
            ),
            critical=False,
        )
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False)
        .sign(authority.key, hashes.SHA256())
    )
    key_pem = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    return key_pem + cert.public_bytes(serialization.Encoding.PEM)


def test_the_kafka_listener_names_a_certificate_as_grpc_does(tmp_path: Path) -> None:
    """The same client certificate, presented over gRPC (BoringSSL: the auth context's
    x509_subject and peer_uri) and to a Python ssl server (OpenSSL, as the brokers' Kafka
    listener reads it: ``peer_certificate_properties``), gives the same subject, URI names and
    so the same principal and node."""
    authority = Authority.create()
    server_pem = authority.issue("server", dns_names=["localhost"], ip_addresses=["127.0.0.1"])
    server_key, _, server_cert = server_pem.partition(b"-----BEGIN CERTIFICATE-----")
    server_cert = b"-----BEGIN CERTIFICATE-----" + server_cert
    client_pem = _certificate_with_subject(
        authority,
        [
            (NameOID.COUNTRY_NAME, "SE"),
            (NameOID.ORGANIZATION_NAME, "Acme, Inc."),
            (NameOID.ORGANIZATIONAL_UNIT_NAME, "ops+sre"),
            (NameOID.COMMON_NAME, ' alice "a" <b>;# é\\ \t\x7f '),
        ],
    )
    client_key, _, client_cert = client_pem.partition(b"-----BEGIN CERTIFICATE-----")
    client_cert = b"-----BEGIN CERTIFICATE-----" + client_cert

    async def through_grpc() -> dict[str, list[bytes]]:
        seen: dict[str, list[bytes]] = {}

        class Servicer(admin_pb2_grpc.AdminServiceServicer):  # type: ignore[misc]
            async def DescribeCluster(self, request: Any, context: Any) -> Any:
                seen.update({k: list(v) for k, v in context.auth_context().items()})
                return admin_pb2.DescribeClusterResponse()

        server = grpc.aio.server()
        admin_pb2_grpc.add_AdminServiceServicer_to_server(Servicer(), server)
        credentials = grpc.ssl_server_credentials(
            [(server_key, server_cert)], root_certificates=authority.cert_pem,
            require_client_auth=True,
        )  # fmt: skip
        port = server.add_secure_port("127.0.0.1:0", credentials)
        await server.start()
        try:
            channel_credentials = grpc.ssl_channel_credentials(
                authority.cert_pem, client_key, client_cert
            )
            async with grpc.aio.secure_channel(f"127.0.0.1:{port}", channel_credentials) as ch:
                stub = admin_pb2_grpc.AdminServiceStub(ch)
                await stub.DescribeCluster(admin_pb2.DescribeClusterRequest(), timeout=10)
        finally:
            await server.stop(0)
        return seen

    async def through_python_ssl() -> dict[str, list[bytes]]:
        (tmp_path / "server.pem").write_bytes(server_pem)
        (tmp_path / "client.pem").write_bytes(client_pem)
        server_context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        server_context.load_cert_chain(tmp_path / "server.pem")
        server_context.load_verify_locations(cadata=authority.cert_pem.decode())
        server_context.verify_mode = ssl.CERT_REQUIRED
        seen: dict[str, list[bytes]] = {}

        async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            ssl_object = writer.get_extra_info("ssl_object")
            seen.update(peer_certificate_properties(ssl_object.getpeercert()))
            writer.close()

        server = await asyncio.start_server(handle, "127.0.0.1", 0, ssl=server_context)
        port = server.sockets[0].getsockname()[1]
        client_context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        client_context.load_verify_locations(cadata=authority.cert_pem.decode())
        client_context.load_cert_chain(tmp_path / "client.pem")
        reader, writer = await asyncio.open_connection(
            "127.0.0.1", port, ssl=client_context, server_hostname="localhost"
        )
        await reader.read()
        writer.close()
        server.close()
        await server.wait_closed()
        return seen

    by_grpc = asyncio.run(through_grpc())
    by_ssl = asyncio.run(through_python_ssl())
    assert by_ssl["x509_subject"] == by_grpc["x509_subject"], (
        by_ssl["x509_subject"],
        by_grpc["x509_subject"],
    )
    assert (
        by_ssl["peer_uri"]
        == by_grpc["peer_uri"]
        == [node_uri("Y2x1c3Rlcg", ROLE_CONTROLLER, 7).encode()]
    )
    resolver = CallerResolver()
    grpc_caller = resolver.caller(FakeAuthContext(client_cert, **by_grpc))
    ssl_caller = CallerResolver().caller(FakeAuthContext(client_cert, **by_ssl))
    assert grpc_caller.principal == ssl_caller.principal
    assert grpc_caller.principal == (
        r"User:CN=\ alice \"a\" \<b\>\;# \C3\A9\\ \09\7F\ ,"
        r"OU=ops\+sre,O=Acme\, Inc.,C=SE"
    )
    assert (ssl_caller.node_id, ssl_caller.cluster_id) == (7, "Y2x1c3Rlcg")
