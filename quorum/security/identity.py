"""Who is calling: the Kafka principal and node identity behind one gRPC call.

On a TLS listener with client authentication the caller presented a certificate our trust
store accepted; its subject gives the principal (``User:`` + the RFC 4514 distinguished name,
Kafka's default ``ssl.principal.mapping.rules = DEFAULT``), and a URI subject alternative name
``spiffe://metaquorum/<cluster-id>/node/<node-id>`` names a controller or broker
(docs/security.md). On a plaintext listener every caller is ``User:ANONYMOUS`` and names no node.

The certificate bytes come from the TLS stack after it verified the chain; they are still
parsed defensively: anything unexpected in them yields no node identity, never an exception.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Final, Protocol

from cryptography import x509

__all__ = [
    "ANONYMOUS",
    "NODE_URI_PREFIX",
    "Caller",
    "CallerResolver",
    "node_uri",
]

ANONYMOUS: Final = "User:ANONYMOUS"
NODE_URI_PREFIX: Final = "spiffe://metaquorum/"


def node_uri(cluster_id: str, node_id: int) -> str:
    """The URI SAN that names node ``node_id`` of cluster ``cluster_id``."""
    return f"{NODE_URI_PREFIX}{cluster_id}/node/{node_id}"


@dataclass(frozen=True, slots=True)
class Caller:
    """The authenticated identity of one call's peer."""

    principal: str
    """Kafka principal, e.g. ``User:CN=admin``; ``User:ANONYMOUS`` on plaintext."""
    node_id: int | None
    """The node the certificate names (URI SAN), or None for clients and plaintext."""
    cluster_id: str | None
    """The cluster the certificate's node URI names, or None."""
    authenticated: bool
    """True when the peer presented a certificate the trust store accepted."""
    peer: str
    """The transport address, for logs (``ipv4:127.0.0.1:53422``)."""

    @property
    def is_node(self) -> bool:
        return self.node_id is not None


class _AuthContext(Protocol):
    def auth_context(self) -> Mapping[str, Sequence[bytes]]: ...

    def peer(self) -> str: ...


def _parse_node_uri(uri: str) -> tuple[str, int] | None:
    if not uri.startswith(NODE_URI_PREFIX):
        return None
    parts = uri[len(NODE_URI_PREFIX) :].split("/")
    if len(parts) != 3 or parts[1] != "node" or not parts[0]:
        return None
    text = parts[2]
    if not text.isascii() or not text.isdigit() or len(text) > 10:
        return None
    node_id = int(text)
    if node_id > 2**31 - 1:
        return None
    return parts[0], node_id


class CallerResolver:
    """Turns a call's auth context into a ``Caller``. One per server; cheap per call."""

    def __init__(self, mapping_rules: Sequence[str] = ("DEFAULT",)) -> None:
        self.mapping_rules = tuple(mapping_rules)

    def principal_for_subject(self, subject_dn: str) -> str:
        """``User:`` + the mapped distinguished name (DEFAULT: the name unchanged)."""
        return f"User:{subject_dn}"

    def caller(self, context: _AuthContext) -> Caller:
        peer = context.peer()
        auth = context.auth_context()
        pems = auth.get("x509_pem_cert") or ()
        if not pems:
            return Caller(ANONYMOUS, None, None, authenticated=False, peer=peer)
        try:
            cert = x509.load_pem_x509_certificate(pems[0])
            subject = cert.subject.rfc4514_string()
        except ValueError:
            return Caller(ANONYMOUS, None, None, authenticated=False, peer=peer)
        node: tuple[str, int] | None = None
        try:
            san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName)
            uris = san.value.get_values_for_type(x509.UniformResourceIdentifier)
        except (x509.ExtensionNotFound, ValueError):
            uris = []
        named = [parsed for parsed in map(_parse_node_uri, uris) if parsed is not None]
        if len(named) == 1:  # two node names in one certificate name no node
            node = named[0]
        return Caller(
            principal=self.principal_for_subject(subject),
            node_id=None if node is None else node[1],
            cluster_id=None if node is None else node[0],
            authenticated=True,
            peer=peer,
        )
