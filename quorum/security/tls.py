"""TLS for every listener and every client: Kafka's ``ssl.*`` keys turned into gRPC credentials.

One protocol per node (docs/security.md#listeners-and-protocols): the node's listener speaks
``listener.security.protocol.map[<listener name>]``, SSL when the map does not name it, and the
node's own clients (Raft peers, a broker's controller client and FetchSnapshot) speak the same
protocol, presenting the node's own certificate as their client certificate.

Key material is PEM only (``ssl.keystore.type = "PEM"``): ``ssl.keystore.location`` is one file
holding the private key and the certificate chain (leaf first), or ``ssl.keystore.key`` and
``ssl.keystore.certificate.chain`` hold the same PEM text inline; ``ssl.truststore.location`` is
a CA bundle. ``PemFiles`` re-reads the files when their inode, size or modification time change
(certificate rotation without a restart, docs/security.md#rotation): the server asks on every
new handshake (``grpc.dynamic_ssl_server_credentials``), clients before every call, recreating
their channel when the files changed, so the next connection presents the new certificate.
New files that do not load (half written, a key that does not match the certificate) are
logged as ``tls_files_unusable`` and the previous material stays in use.

Clients outside a node (the AdminClient, the CLI) take Kafka's client properties:
``security.protocol`` (PLAINTEXT, Kafka's default, or SSL), ``ssl.keystore.*``,
``ssl.truststore.*`` (``ClientSecurity.from_properties``); ``load_properties`` reads a Java-style
``client.properties`` (``--command-config``).
"""

from __future__ import annotations

import asyncio
import os
import re
import ssl
import tempfile
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import grpc
import structlog

from quorum.config import (
    PLAINTEXT,
    SSL,
    ConfigError,
    NodeConfig,
)
from quorum.properties import parse_properties

__all__ = [
    "CLIENT_PROPERTY_KEYS",
    "DEV_CERTS_HINT",
    "PLAINTEXT",
    "SSL",
    "AioChannels",
    "ClientSecurity",
    "KeyStore",
    "Material",
    "NodeSecurity",
    "PemFiles",
    "SyncChannels",
    "load_properties",
]

DEV_CERTS_HINT: Final = (
    "`metaquorum dev certs --out DIR` writes a local CA, a certificate per node of "
    "deploy/local/ and an admin client certificate (docs/security.md#certificates)"
)
# How long a channel replaced after a rotation lets its calls in flight finish.
CHANNEL_CLOSE_GRACE_S: Final = 5.0
# A channel waiting out a reconnect backoff is replaced by a fresh one at most this often per
# address (``AioChannels``): a peer that stays down costs a refused connection per interval.
STALE_CHANNEL_REPLACE_S: Final = 0.1

_log = structlog.get_logger("quorum.security")

_PEM_BLOCK_RE: Final = re.compile(
    rb"-----BEGIN (?P<label>[A-Z0-9 ]+)-----\r?\n.*?-----END (?P=label)-----\r?\n?", re.DOTALL
)


@dataclass(frozen=True, slots=True)
class KeyStore:
    """Where a private key and its certificate chain come from: one PEM file, or inline PEM."""

    location: Path | None = None
    key_pem: str | None = None
    chain_pem: str | None = None

    def describe(self) -> str:
        return str(self.location) if self.location else "ssl.keystore.key/certificate.chain"


@dataclass(frozen=True, slots=True)
class Material:
    """Loaded PEM bytes, as gRPC takes them, and the file stamp they were read at."""

    key: bytes | None
    chain: bytes | None
    ca: bytes | None
    stamp: tuple[object, ...]
    serial: int | None = None
    """The serial number of the leaf certificate (rotation tests and logs)."""


def _pem_blocks(data: bytes) -> list[tuple[str, bytes]]:
    return [(m.group("label").decode(), m.group(0)) for m in _PEM_BLOCK_RE.finditer(data)]


def _read(path: Path, key: str) -> bytes:
    try:
        return path.read_bytes()
    except FileNotFoundError:
        raise ConfigError(f"{key}: {path} does not exist; {DEV_CERTS_HINT}", key=key) from None
    except OSError as exc:
        raise ConfigError(f"{key}: cannot read {path}: {exc}", key=key) from None


def load_keystore(keystore: KeyStore) -> tuple[bytes, bytes, int | None]:
    """(private key PEM, certificate chain PEM, leaf serial), checked: exactly one private key,
    at least one certificate, the key matching the first (leaf) certificate."""
    if keystore.location is not None:
        what = f"ssl.keystore.location {keystore.location}"
        key_name = "ssl.keystore.location"
        blocks = _pem_blocks(_read(keystore.location, key_name))
    else:
        what = "ssl.keystore.key / ssl.keystore.certificate.chain"
        key_name = "ssl.keystore.key"
        blocks = _pem_blocks((keystore.key_pem or "").encode()) + _pem_blocks(
            (keystore.chain_pem or "").encode()
        )
    keys = [pem for label, pem in blocks if label.endswith("PRIVATE KEY")]
    certs = [pem for label, pem in blocks if label == "CERTIFICATE"]
    if len(keys) != 1 or not certs:
        raise ConfigError(
            f"{what} holds {len(keys)} private keys and {len(certs)} certificates; allowed: one "
            "PEM private key and the PEM certificate chain, leaf first. "
            f"{DEV_CERTS_HINT}",
            key=key_name,
        )
    try:
        _check_key_pair(keys[0], b"".join(certs))
    except ssl.SSLError as exc:
        if exc.reason == "KEY_VALUES_MISMATCH":
            raise ConfigError(
                f"{what}: the private key does not belong to the first certificate (the leaf); "
                "put the node's own certificate first",
                key=key_name,
            ) from None
        raise ConfigError(
            f"{what} does not load: {exc.reason or exc} (encrypted keys are not supported)",
            key=key_name,
        ) from None
    return keys[0], b"".join(certs), _leaf_serial(certs[0])


def _check_key_pair(key: bytes, chain: bytes) -> None:
    """Load the key and the chain as the TLS stack will (OpenSSL, through Python's ``ssl``):
    every certificate must parse, the key must be unencrypted and match the first certificate.
    Raises ``ssl.SSLError``. The PEM text goes through anonymous in-memory files, never to
    disk; no X.509 library is loaded into a node's memory for this."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    key_fd = os.memfd_create("keystore-key", os.MFD_CLOEXEC)
    chain_fd = os.memfd_create("keystore-chain", os.MFD_CLOEXEC)
    try:
        for fd, data in ((key_fd, key), (chain_fd, chain)):
            view = memoryview(data)
            while view:  # each write writes at least one byte or raises
                view = view[os.write(fd, view) :]
        # A password, so an encrypted key fails instead of prompting on a terminal.
        context.load_cert_chain(
            f"/proc/self/fd/{chain_fd}", f"/proc/self/fd/{key_fd}", password=b""
        )
    finally:
        os.close(key_fd)
        os.close(chain_fd)


def _leaf_serial(pem: bytes) -> int | None:
    """The serial number of a certificate OpenSSL already loaded (for logs and rotation tests):
    Certificate = SEQUENCE { tbsCertificate = SEQUENCE { [0] version OPTIONAL, serialNumber
    INTEGER, ... } }, read from its DER; None if it is not where X.509 puts it."""
    try:
        der = ssl.PEM_cert_to_DER_cert(pem.decode("ascii"))

        def header(position: int) -> tuple[int, int, int]:
            tag, length = der[position], der[position + 1]
            position += 2
            if length & 0x80:
                size = length & 0x7F
                length = int.from_bytes(der[position : position + size], "big")
                position += size
            return tag, position, length

        _, position, _ = header(0)  # Certificate
        _, position, _ = header(position)  # tbsCertificate
        tag, start, length = header(position)
        if tag == 0xA0:  # [0] EXPLICIT version
            tag, start, length = header(start + length)
        if tag != 0x02 or not 0 < length <= 20 or start + length > len(der):
            return None
        return int.from_bytes(der[start : start + length], "big", signed=True)
    except (ValueError, IndexError, UnicodeDecodeError):
        return None


def load_truststore(path: Path) -> bytes:
    """The CA certificates of ``path`` (PEM), at least one."""
    blocks = _pem_blocks(_read(path, "ssl.truststore.location"))
    certs = [pem for label, pem in blocks if label == "CERTIFICATE"]
    if not certs:
        raise ConfigError(
            f"ssl.truststore.location {path} holds no PEM certificate; give the CA bundle",
            key="ssl.truststore.location",
        )
    try:
        ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT).load_verify_locations(
            cadata=b"".join(certs).decode("ascii")
        )
    except (ssl.SSLError, UnicodeDecodeError) as exc:
        raise ConfigError(
            f"ssl.truststore.location {path} does not load: {exc}", key="ssl.truststore.location"
        ) from None
    return b"".join(certs)


class PemFiles:
    """A keystore and a truststore, re-read when their files change. Thread-safe: gRPC's
    certificate fetcher runs on its own threads."""

    def __init__(self, keystore: KeyStore | None, truststore: Path | None) -> None:
        self.keystore = keystore
        self.truststore = truststore
        self._lock = threading.Lock()
        self._forced = False
        self._material = self._load(self.stamp())  # raises ConfigError at start-up

    def paths(self) -> list[Path]:
        paths = []
        if self.keystore is not None and self.keystore.location is not None:
            paths.append(self.keystore.location)
        if self.truststore is not None:
            paths.append(self.truststore)
        return paths

    def stamp(self) -> tuple[object, ...]:
        """What identifies the files' current contents: inode, size and mtime of each."""
        result: list[object] = []
        for path in self.paths():
            try:
                st = path.stat()
            except OSError:
                result.append((str(path), None))
                continue
            result.append((str(path), st.st_ino, st.st_size, st.st_mtime_ns))
        return tuple(result)

    def _load(self, stamp: tuple[object, ...]) -> Material:
        key = chain = ca = None
        serial = None
        if self.keystore is not None:
            key, chain, serial = load_keystore(self.keystore)
        if self.truststore is not None:
            ca = load_truststore(self.truststore)
        return Material(key, chain, ca, stamp, serial)

    def force_reload(self) -> None:
        """Re-read the files at the next use even if they look unchanged (SIGHUP)."""
        with self._lock:
            self._forced = True

    @property
    def material(self) -> Material:
        return self._material

    def current(self) -> tuple[Material, bool]:
        """The material, re-read first if the files changed; True when it was re-read."""
        stamp = self.stamp()
        with self._lock:
            if stamp == self._material.stamp and not self._forced:
                return self._material, False
            self._forced = False
            try:
                material = self._load(stamp)
            except ConfigError as exc:
                _log.warning("tls_files_unusable", problem=str(exc), kept="the previous files")
                # Do not retry on every handshake until the files change again.
                self._material = Material(
                    self._material.key,
                    self._material.chain,
                    self._material.ca,
                    stamp,
                    self._material.serial,
                )
                return self._material, False
            changed = material.key != self._material.key or material.ca != self._material.ca
            changed = changed or material.chain != self._material.chain
            self._material = material
        if changed:
            _log.info(
                "tls_files_reloaded",
                files=[str(p) for p in self.paths()],
                serial=None if material.serial is None else f"{material.serial:x}",
            )
        return material, changed


# ----- clients -------------------------------------------------------------------------------

# Kafka's client keys this project reads; anything else under ssl./security./sasl. is refused.
CLIENT_PROPERTY_KEYS: Final = (
    "security.protocol",
    "ssl.keystore.type",
    "ssl.keystore.location",
    "ssl.keystore.key",
    "ssl.keystore.certificate.chain",
    "ssl.truststore.type",
    "ssl.truststore.location",
    "ssl.endpoint.identification.algorithm",
)


class ClientSecurity:
    """How a client connects: PLAINTEXT, or SSL with a truststore and (for mTLS) a keystore."""

    def __init__(self, protocol: str = PLAINTEXT, files: PemFiles | None = None) -> None:
        assert protocol in (PLAINTEXT, SSL), protocol
        assert (files is None) == (protocol == PLAINTEXT)
        self.protocol = protocol
        self.files = files
        self._credentials: tuple[tuple[object, ...], grpc.ChannelCredentials] | None = None

    @classmethod
    def plaintext(cls) -> ClientSecurity:
        return cls(PLAINTEXT)

    @classmethod
    def ssl(cls, *, truststore: Path, keystore: KeyStore | None = None) -> ClientSecurity:
        return cls(SSL, PemFiles(keystore, truststore))

    @classmethod
    def from_properties(
        cls, properties: Mapping[str, str] | None, *, base_dir: Path | None = None
    ) -> ClientSecurity:
        """Kafka's client keys (``security.protocol``, ``ssl.*``); relative paths against
        ``base_dir`` (the properties file's directory). Raises ``ConfigError``."""
        props = {k.strip(): str(v).strip() for k, v in (properties or {}).items()}
        for key in props:
            if key.startswith(("ssl.", "security.", "sasl.")) and key not in CLIENT_PROPERTY_KEYS:
                raise ConfigError(
                    f"client property {key!r} is not supported; allowed: "
                    f"{', '.join(CLIENT_PROPERTY_KEYS)}",
                    key=key,
                )
        protocol = props.get("security.protocol", PLAINTEXT).upper()
        if protocol not in (PLAINTEXT, SSL):
            raise ConfigError(
                f"security.protocol: {protocol!r} is not supported; allowed: PLAINTEXT, SSL",
                key="security.protocol",
            )
        for key in ("ssl.keystore.type", "ssl.truststore.type"):
            if props.get(key, "PEM").upper() != "PEM":
                raise ConfigError(
                    f"{key}: {props[key]!r} is not supported; allowed: PEM (convert a JKS or "
                    "PKCS12 store with openssl or keytool)",
                    key=key,
                )
        if props.get("ssl.endpoint.identification.algorithm", "https").lower() != "https":
            raise ConfigError(
                "ssl.endpoint.identification.algorithm: only 'https' (the server's certificate "
                "must name the host connected to) is supported",
                key="ssl.endpoint.identification.algorithm",
            )
        if protocol == PLAINTEXT:
            return cls.plaintext()
        base = (base_dir or Path.cwd()).resolve()

        def path_of(key: str) -> Path | None:
            text = props.get(key)
            if not text:
                return None
            path = Path(text).expanduser()
            return path if path.is_absolute() else (base / path).resolve()

        truststore = path_of("ssl.truststore.location")
        if truststore is None:
            raise ConfigError(
                "security.protocol=SSL needs ssl.truststore.location (the CA bundle that signed "
                f"the servers' certificates); {DEV_CERTS_HINT}",
                key="ssl.truststore.location",
            )
        keystore = _keystore_of(
            path_of("ssl.keystore.location"),
            props.get("ssl.keystore.key") or None,
            props.get("ssl.keystore.certificate.chain") or None,
        )
        return cls.ssl(truststore=truststore, keystore=keystore)

    @classmethod
    def from_properties_file(cls, path: Path) -> ClientSecurity:
        """``--command-config FILE``: a Java-style properties file of Kafka client keys."""
        return cls.from_properties(load_properties(path), base_dir=path.expanduser().parent)

    def stamp(self) -> tuple[object, ...]:
        return () if self.files is None else self.files.stamp()

    def credentials(self) -> grpc.ChannelCredentials | None:
        """Channel credentials from the current files (None for PLAINTEXT)."""
        if self.files is None:
            return None
        material, _ = self.files.current()
        cached = self._credentials
        if cached is not None and cached[0] == material.stamp:
            return cached[1]
        credentials = grpc.ssl_channel_credentials(
            root_certificates=material.ca,
            private_key=material.key,
            certificate_chain=material.chain,
        )
        self._credentials = (material.stamp, credentials)
        return credentials

    def channel(
        self,
        address: str,
        options: Sequence[tuple[str, Any]] | None = None,
        server_name: str | None = None,
    ) -> grpc.Channel:
        """A synchronous channel to ``address`` with this client's security; ``server_name``:
        the name the server's certificate must carry instead of the host's (SSL only)."""
        credentials = self.credentials()
        if credentials is None:
            return grpc.insecure_channel(address, options=options)
        return grpc.secure_channel(
            address, credentials, options=_with_server_name(options, server_name)
        )

    def aio_channel(
        self,
        address: str,
        options: Sequence[tuple[str, Any]] | None = None,
        server_name: str | None = None,
    ) -> grpc.aio.Channel:
        """An asyncio channel to ``address`` with this client's security; ``server_name`` as
        for ``channel``."""
        credentials = self.credentials()
        if credentials is None:
            return grpc.aio.insecure_channel(address, options=options)
        return grpc.aio.secure_channel(
            address, credentials, options=_with_server_name(options, server_name)
        )


def _with_server_name(
    options: Sequence[tuple[str, Any]] | None, server_name: str | None
) -> list[tuple[str, Any]] | None:
    """``options`` plus the name the TLS handshake must find in the server's certificate
    instead of the host's: a node reaching a peer checks whom it reached, by the DNS name
    that says the peer's role and id (``quorum.security.identity.node_server_name``)."""
    if server_name is None:
        return None if options is None else list(options)
    return [*(options or ()), ("grpc.ssl_target_name_override", server_name)]


def _keystore_of(
    location: Path | None, key_pem: str | None, chain_pem: str | None
) -> KeyStore | None:
    if location is not None and (key_pem or chain_pem):
        raise ConfigError(
            "give either ssl.keystore.location or ssl.keystore.key with "
            "ssl.keystore.certificate.chain, not both",
            key="ssl.keystore.location",
        )
    if (key_pem is None) != (chain_pem is None):
        raise ConfigError(
            "ssl.keystore.key and ssl.keystore.certificate.chain go together: give both, or "
            "ssl.keystore.location",
            key="ssl.keystore.key",
        )
    if location is None and key_pem is None:
        return None
    return KeyStore(location=location, key_pem=key_pem, chain_pem=chain_pem)


class SyncChannels:
    """Synchronous channels by address, recreated when the client's files changed (the next
    connection then presents the rotated certificate)."""

    def __init__(
        self, security: ClientSecurity, options: Sequence[tuple[str, Any]] | None = None
    ) -> None:
        self.security = security
        self.options = options
        self._channels: dict[tuple[str, str | None], tuple[tuple[object, ...], grpc.Channel]] = {}

    def get(self, address: str, server_name: str | None = None) -> grpc.Channel:
        """The channel to ``address`` whose server must carry ``server_name`` (None: the
        host's name)."""
        stamp = self.security.stamp()
        key = (address, server_name)
        entry = self._channels.get(key)
        if entry is not None and entry[0] == stamp:
            return entry[1]
        if entry is not None:
            entry[1].close()
        channel = self.security.channel(address, self.options, server_name)
        self._channels[key] = (stamp, channel)
        return channel

    def close(self) -> None:
        channels, self._channels = self._channels, {}
        for _, channel in channels.values():
            channel.close()


@dataclass
class AioChannels:
    """``SyncChannels`` for asyncio: a replaced channel closes in the background, letting its
    calls in flight finish within ``CHANNEL_CLOSE_GRACE_S``."""

    security: ClientSecurity
    options: Sequence[tuple[str, Any]] | None = None
    _channels: dict[tuple[str, str | None], tuple[tuple[object, ...], grpc.aio.Channel]] = field(
        default_factory=dict
    )
    _closing: set[asyncio.Task[None]] = field(default_factory=set)
    _replaced_at: dict[tuple[str, str | None], float] = field(default_factory=dict)

    def get(self, address: str, server_name: str | None = None) -> grpc.aio.Channel:
        """The channel to ``address`` whose server must carry ``server_name`` (None: the
        host's name)."""
        stamp = self.security.stamp()
        key = (address, server_name)
        entry = self._channels.get(key)
        if (
            entry is not None
            and entry[0] == stamp
            and not self._waiting_to_reconnect(key, entry[1])
        ):
            return entry[1]
        if entry is not None:
            task = asyncio.get_running_loop().create_task(
                entry[1].close(grace=CHANNEL_CLOSE_GRACE_S)
            )
            self._closing.add(task)
            task.add_done_callback(self._closing.discard)
        channel = self.security.aio_channel(address, self.options, server_name)
        self._channels[key] = (stamp, channel)
        return channel

    def _waiting_to_reconnect(self, key: tuple[str, str | None], channel: grpc.aio.Channel) -> bool:
        """Whether to replace a channel that waits out a reconnect backoff: it fails every call
        at once with its last error (connection refused) even when the peer is back, so a
        node restarted a moment ago would look dead to a caller for the rest of the backoff.
        A fresh channel connects at once (and a peer still down refuses at once). At most
        every ``STALE_CHANNEL_REPLACE_S`` per address."""
        if channel.get_state() is not grpc.ChannelConnectivity.TRANSIENT_FAILURE:
            return False
        now = time.monotonic()
        if now - self._replaced_at.get(key, -STALE_CHANNEL_REPLACE_S) < STALE_CHANNEL_REPLACE_S:
            return False
        self._replaced_at[key] = now
        return True

    async def close(self) -> None:
        channels, self._channels = self._channels, {}
        await asyncio.gather(*(c.close(grace=None) for _, c in channels.values()))
        for task in list(self._closing):
            task.cancel()


# ----- nodes ---------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class SecurityWarning:
    """Something a node logs loudly at start-up (``event`` with ``message``)."""

    event: str
    message: str


def certificate_names(chain_pem: bytes) -> tuple[list[str], list[str]]:
    """(URI names, DNS names) of the first certificate of a PEM chain, read by Python's own
    TLS library (no X.509 package is loaded into a node for it). Raises ``ValueError``."""
    blocks = [block for kind, block in _pem_blocks(chain_pem) if kind == "CERTIFICATE"]
    if not blocks:
        raise ValueError("no certificate in the keystore's chain")
    # ssl's certificate decoder reads a file; the certificate is public, the key is not written.
    with tempfile.NamedTemporaryFile("wb", suffix=".pem") as leaf:
        leaf.write(blocks[0])
        leaf.flush()
        try:
            decoded = ssl._ssl._test_decode_cert(leaf.name)  # type: ignore[attr-defined]
        except ssl.SSLError as exc:
            raise ValueError(f"the keystore's certificate does not parse: {exc}") from exc
    names = decoded.get("subjectAltName", ())
    return (
        [str(value) for kind, value in names if kind == "URI"],
        [str(value) for kind, value in names if kind == "DNS"],
    )


def own_identity_problem(
    chain_pem: bytes, cluster_id: str, node_id: int, roles: Sequence[str]
) -> str | None:
    """Why a node may not serve with the certificate of ``chain_pem`` (None: it may): the
    certificate must name this node, of this cluster, in each of its ``roles``, with the DNS
    names its peers check (docs/security.md#node-identity)."""
    from quorum.security.identity import (  # noqa: PLC0415 - identity imports nothing of tls
        NODE_ROLES,
        node_of_uris,
        node_server_name,
        node_uri,
    )

    wanted = [role for role in NODE_ROLES if role in roles]
    expected = ", ".join(node_uri(cluster_id, role, node_id) for role in wanted)
    try:
        uris, dns = certificate_names(chain_pem)
    except ValueError as exc:
        return str(exc)
    node = node_of_uris(uris)
    if node is None:
        shown = ", ".join(uris) or "no URI name"
        return (
            f"the certificate names no node ({shown}), but this is {' and '.join(wanted)} "
            f"{node_id}: its certificate must name it as {expected} (a node URI names a role "
            "since this release; metaquorum dev certs writes such certificates)"
        )
    named_cluster, named_id, named_roles = node
    if (named_cluster, named_id) != (cluster_id, node_id) or set(wanted) - named_roles:
        return (
            f"the certificate names {' and '.join(sorted(named_roles))} {named_id} of cluster "
            f"{named_cluster}, but this is {' and '.join(wanted)} {node_id} of cluster "
            f"{cluster_id}: give the node its own certificate ({expected})"
        )
    missing = [
        name for role in wanted if (name := node_server_name(cluster_id, role, node_id)) not in dns
    ]
    if missing:
        return (
            f"the certificate lacks the DNS names its peers check: {', '.join(missing)} "
            "(docs/security.md#whom-a-node-connects-to); re-issue it"
        )
    return None


class NodeSecurity:
    """A node's listener protocol, server credentials and client security (built once at
    start-up from its config; raises ``ConfigError`` when an SSL listener lacks its files)."""

    def __init__(self, config: NodeConfig) -> None:
        listener = config.listener
        self.listener_name = listener.name
        self.protocol = config.listener_protocol
        self.client_auth = config.ssl_client_auth
        self.warnings: list[SecurityWarning] = []
        self.files: PemFiles | None = None
        if self.protocol == PLAINTEXT:
            self.warnings.append(
                SecurityWarning(
                    "listener_plaintext",
                    f"listener {listener} is PLAINTEXT (listener.security.protocol.map): "
                    "this node is INSECURE. Anyone who reaches the port can read all metadata "
                    "and act as any node or admin, and this node's own requests travel "
                    "unauthenticated. Use SSL (docs/security.md#listeners-and-protocols); "
                    + DEV_CERTS_HINT,
                )
            )
            self.client = ClientSecurity.plaintext()
            return
        source = config.describe_source()
        keystore = _keystore_of(
            config.ssl_keystore_location,
            config.ssl_keystore_key,
            config.ssl_keystore_certificate_chain,
        )
        if keystore is None:
            raise ConfigError(
                f"listener {listener} is SSL (the default for a listener that "
                "listener.security.protocol.map does not name) but no keystore is configured in "
                f"{source}: set ssl.keystore.location (a PEM file with the node's private key and "
                "certificate chain) and ssl.truststore.location (the CA bundle); "
                f"{DEV_CERTS_HINT}. To run without TLS (insecure), map the listener to PLAINTEXT: "
                f'"listener.security.protocol.map" = ["{listener.name}:PLAINTEXT"]',
                key="ssl.keystore.location",
            )
        if config.ssl_truststore_location is None:
            raise ConfigError(
                f"listener {listener} is SSL but ssl.truststore.location is not set in {source}: "
                "give the CA bundle that signed the other nodes' and clients' certificates; "
                + DEV_CERTS_HINT,
                key="ssl.truststore.location",
            )
        self.files = PemFiles(keystore, config.ssl_truststore_location)
        self.client = ClientSecurity(SSL, self.files)
        self._keystore = keystore
        if self.client_auth != "required":
            self.warnings.append(
                SecurityWarning(
                    "client_auth_not_required",
                    f"ssl.client.auth = {self.client_auth!r}: clients are not asked for a "
                    "certificate (gRPC offers 'required' or not asking; 'requested' is served "
                    "as 'none'), so every caller is User:ANONYMOUS and no node can prove its "
                    "id. Use 'required' (docs/security.md#listeners-and-protocols)",
                )
            )

    @property
    def is_ssl(self) -> bool:
        return self.files is not None

    def server_credentials(self) -> grpc.ServerCredentials | None:
        """Credentials whose certificate is fetched on every new handshake (rotation), or None
        for a PLAINTEXT listener."""
        files = self.files
        if files is None:
            return None

        def configuration(material: Material) -> Any:
            assert material.key is not None and material.chain is not None
            return grpc.ssl_server_certificate_configuration(
                [(material.key, material.chain)], root_certificates=material.ca
            )

        # What the server serves now: the node's clients share ``files`` and may have re-read
        # them first, so the server compares bytes rather than trusting "changed".
        served = [files.material]

        def fetch() -> Any:
            material, _ = files.current()
            last = served[0]
            if (material.key, material.chain, material.ca) == (last.key, last.chain, last.ca):
                return None
            served[0] = material
            return configuration(material)

        return grpc.dynamic_ssl_server_credentials(
            configuration(served[0]),
            fetch,
            require_client_authentication=self.client_auth == "required",
        )

    def identity_problem(self, cluster_id: str, node_id: int, roles: Sequence[str]) -> str | None:
        """Why this node may not start with its keystore (``own_identity_problem``), or None
        (also for PLAINTEXT, where no identity is presented)."""
        if self.files is None:
            return None
        chain = self.files.material.chain
        if chain is None:
            return f"the keystore {self._keystore.describe()} holds no certificate chain"
        problem = own_identity_problem(chain, cluster_id, node_id, roles)
        if problem is None:
            return None
        return f"ssl.keystore ({self._keystore.describe()}): {problem}"

    def reload(self) -> None:
        """SIGHUP: re-read the files at the next handshake even if they look unchanged."""
        if self.files is not None:
            self.files.force_reload()


# ----- Java properties ---------------------------------------------------------------------


def load_properties(path: Path) -> dict[str, str]:
    """Read a Java-style properties file (``client.properties``). Raises ``ConfigError``."""
    try:
        text = path.expanduser().read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"cannot read the client properties {path}: {exc}") from None
    return parse_properties(text)


def command_security(command_config: Path | None) -> ClientSecurity:
    """The client security of a CLI command: ``--command-config FILE`` or PLAINTEXT."""
    if command_config is None:
        return ClientSecurity.plaintext()
    return ClientSecurity.from_properties_file(command_config)
