"""Certificates for newcomers: a local CA, node certificates and client certificates.

``metaquorum dev certs --out DIR`` and ``metaquorum dev up`` write, with EC P-256 keys (fast to
generate), into one directory (docs/security.md#certificates):

- ``ca.pem`` (the CA certificate: every node's and client's ``ssl.truststore.location``) and
  ``ca-key.pem`` (its key, kept to issue more certificates later);
- ``node-<id>.pem`` per node: the node's private key followed by its certificate (its
  ``ssl.keystore.location``). Subject ``CN=node-<id>``, a URI SAN per role of the node
  (``process.roles``), ``spiffe://metaquorum/<cluster-id>/<role>/<id>``
  (``quorum.security.identity.node_uri``), the DNS names its peers check
  (``<role>-<id>.<cluster>.metaquorum`` and ``<role>.<cluster>.metaquorum``,
  ``quorum.security.identity.node_server_name``), DNS ``localhost`` and the IP 127.0.0.1 plus
  the node's listener host, so clients verify it by host name; usable as server and as client
  certificate;
- ``admin.pem`` (``CN=admin``, client only) and ``client.properties``, the admin's
  ``--command-config``.

Files holding a private key are written with mode 0600; every file is written atomically (a
temporary file renamed over it). Existing files are kept unless ``force``: a second run only
adds what is missing, with the existing CA.
"""

from __future__ import annotations

import datetime
import ipaddress
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from quorum.security.identity import NODE_ROLES, node_server_name, node_uri

CA_FILE: Final = "ca.pem"
CA_KEY_FILE: Final = "ca-key.pem"
ADMIN_FILE: Final = "admin.pem"
CLIENT_PROPERTIES_FILE: Final = "client.properties"
# Development certificates are valid for a year; the CA for ten.
CERT_VALIDITY_DAYS: Final = 365
CA_VALIDITY_DAYS: Final = 3650
# Clock skew between the machine that issues and the ones that verify.
BACKDATE: Final = datetime.timedelta(hours=1)


def node_file(node_id: int) -> str:
    return f"node-{node_id}.pem"


@dataclass(frozen=True)
class Authority:
    """A CA: its key and certificate."""

    key: ec.EllipticCurvePrivateKey
    cert: x509.Certificate

    @property
    def cert_pem(self) -> bytes:
        return self.cert.public_bytes(serialization.Encoding.PEM)

    @classmethod
    def create(cls, common_name: str = "metaquorum dev CA") -> Authority:
        key = ec.generate_private_key(ec.SECP256R1())
        name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
        now = datetime.datetime.now(datetime.UTC)
        cert = (
            x509.CertificateBuilder()
            .subject_name(name)
            .issuer_name(name)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - BACKDATE)
            .not_valid_after(now + datetime.timedelta(days=CA_VALIDITY_DAYS))
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .add_extension(
                x509.KeyUsage(
                    digital_signature=True,
                    content_commitment=False,
                    key_encipherment=False,
                    data_encipherment=False,
                    key_agreement=False,
                    key_cert_sign=True,
                    crl_sign=True,
                    encipher_only=False,
                    decipher_only=False,
                ),
                critical=True,
            )
            .add_extension(
                x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False
            )
            .sign(key, hashes.SHA256())
        )
        return cls(key, cert)

    @classmethod
    def load(cls, cert_path: Path, key_path: Path) -> Authority:
        cert = x509.load_pem_x509_certificate(cert_path.read_bytes())
        key = serialization.load_pem_private_key(key_path.read_bytes(), password=None)
        if not isinstance(key, ec.EllipticCurvePrivateKey):
            raise ValueError(f"{key_path} is not an EC private key")
        return cls(key, cert)

    def key_pem(self) -> bytes:
        return _key_pem(self.key)

    def issue(
        self,
        common_name: str,
        *,
        uris: Sequence[str] = (),
        dns_names: Sequence[str] = (),
        ip_addresses: Sequence[str] = (),
        server: bool = True,
        client: bool = True,
        validity_days: int = CERT_VALIDITY_DAYS,
    ) -> bytes:
        """A new key and a certificate for it, as one PEM (key, then certificate)."""
        key = ec.generate_private_key(ec.SECP256R1())
        now = datetime.datetime.now(datetime.UTC)
        names: list[x509.GeneralName] = [x509.UniformResourceIdentifier(u) for u in uris]
        names += [x509.DNSName(d) for d in dns_names]
        names += [x509.IPAddress(ipaddress.ip_address(a)) for a in ip_addresses]
        usages = [ExtendedKeyUsageOID.SERVER_AUTH] if server else []
        usages += [ExtendedKeyUsageOID.CLIENT_AUTH] if client else []
        builder = (
            x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)]))
            .issuer_name(self.cert.subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - BACKDATE)
            .not_valid_after(now + datetime.timedelta(days=validity_days))
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(
                x509.KeyUsage(
                    digital_signature=True,
                    content_commitment=False,
                    key_encipherment=False,
                    data_encipherment=False,
                    key_agreement=False,
                    key_cert_sign=False,
                    crl_sign=False,
                    encipher_only=False,
                    decipher_only=False,
                ),
                critical=True,
            )
            .add_extension(x509.ExtendedKeyUsage(usages), critical=False)
            .add_extension(
                x509.AuthorityKeyIdentifier.from_issuer_public_key(self.key.public_key()),
                critical=False,
            )
        )
        if names:
            builder = builder.add_extension(x509.SubjectAlternativeName(names), critical=False)
        cert = builder.sign(self.key, hashes.SHA256())
        return _key_pem(key) + cert.public_bytes(serialization.Encoding.PEM)

    def issue_node(
        self,
        cluster_id: str,
        node_id: int,
        roles: Iterable[str],
        hosts: Iterable[str] = (),
    ) -> bytes:
        """A node's key and certificate: ``CN=node-<id>``, a node URI and the peers' DNS
        names per role in ``roles``, localhost, 127.0.0.1 and ``hosts`` (names or IP
        addresses), for server and client use."""
        ordered = [role for role in NODE_ROLES if role in set(roles)]
        assert ordered, f"node {node_id}: no role among {NODE_ROLES}"
        names = [
            name
            for role in ordered
            for name in (
                node_server_name(cluster_id, role, node_id),
                node_server_name(cluster_id, role),
            )
        ]
        dns, ips = split_hosts([*names, "localhost", "127.0.0.1", *hosts])
        return self.issue(
            f"node-{node_id}",
            uris=[node_uri(cluster_id, role, node_id) for role in ordered],
            dns_names=dns,
            ip_addresses=ips,
        )

    def issue_client(self, common_name: str) -> bytes:
        """A client's key and certificate (``CN=<common_name>``, client use only)."""
        return self.issue(common_name, server=False, client=True)


def _names_node(path: Path, cluster_id: str, node_id: int, roles: Iterable[str]) -> bool:
    """Whether the certificate in ``path`` carries exactly this node's URIs (one per role) and
    the DNS names its peers check."""
    try:
        cert = x509.load_pem_x509_certificates(path.read_bytes())[0]
        san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName)
    except (ValueError, OSError, x509.ExtensionNotFound):
        return False
    uris = san.value.get_values_for_type(x509.UniformResourceIdentifier)
    dns = set(san.value.get_values_for_type(x509.DNSName))
    ordered = [role for role in NODE_ROLES if role in set(roles)]
    return uris == [node_uri(cluster_id, role, node_id) for role in ordered] and all(
        node_server_name(cluster_id, role, node_id) in dns for role in ordered
    )


def split_hosts(hosts: Iterable[str]) -> tuple[list[str], list[str]]:
    """(DNS names, IP addresses) of ``hosts``, each once, in order."""
    dns: list[str] = []
    ips: list[str] = []
    for host in hosts:
        try:
            address = str(ipaddress.ip_address(host))
        except ValueError:
            if host and host not in dns:
                dns.append(host)
            continue
        if address not in ips:
            ips.append(address)
    return dns, ips


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


def write_private(path: Path, data: bytes, *, private: bool) -> None:
    """Write ``path`` atomically (a temporary file renamed over it), 0600 when ``private``."""
    tmp = path.with_name(f".{path.name}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600 if private else 0o644)
    try:
        os.fchmod(fd, 0o600 if private else 0o644)
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
    finally:
        os.close(fd)
    os.replace(tmp, path)


def client_properties(keystore: str, truststore: str) -> str:
    """A Kafka ``client.properties`` for mTLS with PEM files (paths relative to its file)."""
    return (
        "# Kafka client properties for metaquorum's admin tools: pass with --command-config\n"
        "# (paths relative to this file). docs/security.md#clients\n"
        "security.protocol=SSL\n"
        "ssl.keystore.type=PEM\n"
        f"ssl.keystore.location={keystore}\n"
        "ssl.truststore.type=PEM\n"
        f"ssl.truststore.location={truststore}\n"
    )


@dataclass(frozen=True)
class DevCertsResult:
    written: tuple[Path, ...]
    kept: tuple[Path, ...]


def write_dev_certs(
    out: Path,
    *,
    cluster_id: str,
    nodes: Sequence[tuple[int, Sequence[str], Sequence[str]]],
    clients: Sequence[str] = ("admin",),
    force: bool = False,
) -> DevCertsResult:
    """Write the CA (or reuse the one in ``out``), a certificate per ``(node id, roles,
    hosts)``, a
    client certificate per name in ``clients`` (``<name>.pem``) and ``client.properties`` for
    the first client. Existing files are kept unless ``force``."""
    out.mkdir(parents=True, exist_ok=True)
    written: list[Path] = []
    kept: list[Path] = []
    ca_path, ca_key_path = out / CA_FILE, out / CA_KEY_FILE
    if not force and ca_path.exists() and ca_key_path.exists():
        authority = Authority.load(ca_path, ca_key_path)
        kept += [ca_path, ca_key_path]
    else:
        authority = Authority.create()
        write_private(ca_key_path, authority.key_pem(), private=True)
        write_private(ca_path, authority.cert_pem, private=False)
        written += [ca_key_path, ca_path]
        force = True  # certificates of an older CA would no longer verify

    def emit(path: Path, make: bytes | str | None, *, private: bool) -> None:
        if path.exists() and not force:
            kept.append(path)
            return
        data = make.encode() if isinstance(make, str) else make
        assert data is not None
        write_private(path, data, private=private)
        written.append(path)

    for node_id, roles, hosts in nodes:
        path = out / node_file(node_id)
        if path.exists() and not force and _names_node(path, cluster_id, node_id, roles):
            kept.append(path)
        else:
            # A certificate of another cluster, or of the earlier form without a role, is
            # rewritten: a node refuses to start with it (docs/security.md#node-identity).
            emit(path, authority.issue_node(cluster_id, node_id, roles, hosts), private=True)
    for name in clients:
        path = out / f"{name}.pem"
        if path.exists() and not force:
            kept.append(path)
        else:
            emit(path, authority.issue_client(name), private=True)
    if clients:
        emit(
            out / CLIENT_PROPERTIES_FILE,
            client_properties(f"{clients[0]}.pem", CA_FILE),
            private=False,
        )
    for name in clients[1:]:
        emit(out / f"{name}.properties", client_properties(f"{name}.pem", CA_FILE), private=False)
    return DevCertsResult(tuple(written), tuple(kept))


CLUSTER_ID_FILE: Final = "cluster.id"
# `dev certs` clients: the admin (a super user in deploy/local/) and alice, a client with no
# ACLs until one is granted (the demo's refused-then-granted request, docs/authorization.md).
DEV_CLIENTS: Final = ("admin", "alice")


def cluster_id_for(out: Path, cluster_id: str | None) -> str:
    """The cluster id the node certificates of ``out`` name: ``cluster_id`` if given (and
    recorded in ``out/cluster.id``), else the one recorded there, else a new random id."""
    from quorum.ids import Uuid  # noqa: PLC0415

    recorded = out / CLUSTER_ID_FILE
    if cluster_id is None and recorded.exists():
        return str(Uuid.parse(recorded.read_text().strip()))
    chosen = str(Uuid.parse(cluster_id)) if cluster_id is not None else str(Uuid.random())
    out.mkdir(parents=True, exist_ok=True)
    if not recorded.exists() or recorded.read_text().strip() != chosen:
        write_private(recorded, f"{chosen}\n".encode(), private=False)
    return chosen


def deploy_nodes(deploy_dir: Path) -> list[tuple[int, list[str], list[str]]]:
    """(node id, its roles, [listener host]) of every ``*.toml`` node config in
    ``deploy_dir``."""
    from quorum.config import load_config  # noqa: PLC0415

    nodes: dict[int, tuple[list[str], list[str]]] = {}
    for path in sorted(deploy_dir.glob("*.toml")):
        config = load_config(path)
        roles: list[str] = [role for role in NODE_ROLES if role in config.process_roles]
        nodes[config.node_id] = (roles, [config.listener.host])
    return [(node_id, roles, hosts) for node_id, (roles, hosts) in sorted(nodes.items())]


def dev_certs(
    out: Path, *, deploy_dir: Path, cluster_id: str | None = None, force: bool = False
) -> tuple[str, DevCertsResult]:
    """``metaquorum dev certs``: the CA, one certificate per node of ``deploy_dir``, the admin
    certificate and ``client.properties``, alice's and ``alice.properties`` in ``out``;
    returns the cluster id they name. A new ``--cluster-id`` rewrites the node certificates
    (they name the cluster)."""
    chosen = cluster_id_for(out, cluster_id)
    result = write_dev_certs(
        out,
        cluster_id=chosen,
        nodes=deploy_nodes(deploy_dir),
        clients=DEV_CLIENTS,
        force=force,
    )
    return chosen, result
