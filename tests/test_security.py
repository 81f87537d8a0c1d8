"""Pure parts of the security layer: Kafka's principal mapping rules, client properties,
the ssl.* config keys (docs/security.md#principals)."""

from __future__ import annotations

from pathlib import Path

import pytest
from cryptography import x509

from quorum.config import ConfigError, config_from_settings
from quorum.logs import LogThrottle
from quorum.security.certs import Authority, write_private
from quorum.security.identity import (
    FORWARDED_CLIENT_KEY,
    FORWARDED_PRINCIPAL_KEY,
    CallerResolver,
    MappingRuleError,
    PrincipalMapper,
    parse_mapping_rules,
)
from quorum.security.node_identity import refuse_claim
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
    pem = authority.issue_node("MkU3OEVBNTcwNTJENDM2Qg", 1).decode()
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
        authority.issue_node("MkU3OEVBNTcwNTJENDM2Qg", 2)
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
    node = _certificate_only(authority.issue_node("Y2x1c3Rlcg", 3))
    admin = _certificate_only(authority.issue_client("admin"))
    resolver = CallerResolver()
    assert resolver.caller(FakeAuthContext(None)).authenticated is False
    by_node = resolver.caller(FakeAuthContext(node))
    assert (by_node.node_id, by_node.cluster_id, by_node.authenticated) == (3, "Y2x1c3Rlcg", True)
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
    assert refuse_claim(unmapped, "Y2x1c3Rlcg", "replica_id", 2) is not None
    assert refuse_claim(garbled, "Y2x1c3Rlcg", "replica_id", 2) is not None
    # What the TLS stack says is read defensively: a subject that is not UTF-8, or two node
    # names in one certificate, name nobody (a fresh certificate each: identities are cached).
    for properties in (
        {"x509_subject": [b"CN=\xff"]},
        {"x509_subject": [b"CN=a", b"CN=b"]},
        {
            "peer_uri": [
                b"spiffe://metaquorum/Y2x1c3Rlcg/node/1",
                b"spiffe://metaquorum/Y2x1c3Rlcg/node/2",
            ]
        },
    ):
        odd = resolver.caller(
            FakeAuthContext(_certificate_only(authority.issue_client("x")), **properties)
        )
        assert odd.authenticated and odd.node_id is None, properties
        assert odd.principal == "User:ANONYMOUS" or "peer_uri" in properties, properties


class ForwardedContext(FakeAuthContext):
    """A call that names a forwarded principal in its metadata (KIP-590)."""

    def __init__(self, pem: bytes | None, principal: bytes) -> None:
        super().__init__(pem)
        self._metadata = ((FORWARDED_PRINCIPAL_KEY, principal), (FORWARDED_CLIENT_KEY, b"c:1"))

    def invocation_metadata(self) -> tuple[tuple[str, bytes], ...]:
        return self._metadata


def test_a_forwarded_principal_is_believed_from_a_node_of_this_cluster_only() -> None:
    """docs/security.md#forwarded-requests: from a node certificate of this cluster the call acts
    as the forwarded client, without the node's powers; from anyone else, as User:ANONYMOUS."""
    authority = Authority.create()
    broker = _certificate_only(authority.issue_node("Y2x1c3Rlcg", 101))
    foreign = _certificate_only(authority.issue_node("b3RoZXI", 101))
    admin = _certificate_only(authority.issue_client("admin"))
    resolver = CallerResolver(forwarding_cluster_id="Y2x1c3Rlcg")
    alice = resolver.caller(ForwardedContext(broker, b"User:CN=alice"))
    assert (alice.principal, alice.node_id, alice.forwarded_by) == ("User:CN=alice", None, 101)
    assert refuse_claim(alice, "Y2x1c3Rlcg", "broker_id", 101) is not None  # no node powers
    for pem, claimed in [
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
