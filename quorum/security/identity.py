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

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Final, Protocol

from cryptography import x509

__all__ = [
    "ANONYMOUS",
    "NODE_URI_PREFIX",
    "Caller",
    "CallerResolver",
    "MappingRuleError",
    "PrincipalMapper",
    "node_uri",
    "parse_mapping_rules",
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


class MappingRuleError(ValueError):
    """``ssl.principal.mapping.rules`` does not parse; the message says where."""


@dataclass(frozen=True, slots=True)
class _Rule:
    text: str
    pattern: re.Pattern[str] | None  # None: DEFAULT
    replacement: str = ""
    case: str = ""  # "", "L" or "U"

    def apply(self, subject: str) -> str | None:
        if self.pattern is None:
            return subject
        if self.pattern.fullmatch(subject) is None:
            return None
        result = self.pattern.sub(self.replacement, subject)
        if self.case == "L":
            return result.lower()
        if self.case == "U":
            return result.upper()
        return result


def _split_unescaped(text: str, start: int) -> tuple[str, int]:
    """The text from ``start`` to the next '/' not escaped by a backslash, and the index after
    that '/'."""
    i = start
    while i < len(text):
        if text[i] == "\\":
            i += 2
            continue
        if text[i] == "/":
            return text[start:i], i + 1
        i += 1
    raise MappingRuleError(f"rule at {start}: missing '/' in {text[start:]!r}")


def _java_replacement(replacement: str) -> str:
    """Java's ``$1`` group references as Python's ``\\g<1>``; other backslashes literal."""
    out: list[str] = []
    i = 0
    while i < len(replacement):
        c = replacement[i]
        if c == "$" and i + 1 < len(replacement) and replacement[i + 1].isdigit():
            j = i + 1
            while j < len(replacement) and replacement[j].isdigit():
                j += 1
            out.append(f"\\g<{replacement[i + 1 : j]}>")
            i = j
            continue
        if c == "\\" and i + 1 < len(replacement):
            out.append(replacement[i + 1].replace("\\", "\\\\"))
            i += 2
            continue
        out.append("\\\\" if c == "\\" else c)
        i += 1
    return "".join(out)


def _parse_rules(text: str) -> list[_Rule]:
    rules: list[_Rule] = []
    i = 0
    while True:
        while i < len(text) and text[i].isspace():
            i += 1
        if i >= len(text):
            break
        start = i
        if text.startswith("DEFAULT", i):
            i += len("DEFAULT")
            rules.append(_Rule("DEFAULT", None))
        elif text.startswith("RULE:", i):
            pattern, i = _split_unescaped(text, i + len("RULE:"))
            replacement, i = _split_unescaped(text, i)
            case = ""
            if i < len(text) and text[i] in "LU":
                case = text[i]
                i += 1
            try:
                compiled = re.compile(pattern)
            except re.error as exc:
                raise MappingRuleError(f"rule {text[start:i]!r}: bad pattern: {exc}") from None
            rules.append(_Rule(text[start:i], compiled, _java_replacement(replacement), case))
        else:
            raise MappingRuleError(
                f"{text[i:]!r} is not a rule; allowed: DEFAULT or RULE:pattern/replacement/ "
                "with an optional L or U after it, comma-separated"
            )
        while i < len(text) and text[i].isspace():
            i += 1
        if i < len(text):
            if text[i] != ",":
                raise MappingRuleError(
                    f"expected ',' between rules at {text[i:]!r}; allowed: DEFAULT or "
                    "RULE:pattern/replacement/[LU], comma-separated"
                )
            i += 1
    if not rules:
        raise MappingRuleError("no rule given; allowed: e.g. 'DEFAULT'")
    return rules


def parse_mapping_rules(text: str) -> tuple[str, ...]:
    """Kafka's ``ssl.principal.mapping.rules`` string as one string per rule, checked.
    Raises ``MappingRuleError``."""
    return tuple(rule.text for rule in _parse_rules(text))


class PrincipalMapper:
    """Kafka's ``SslPrincipalMapper``: the first rule whose pattern matches the whole subject
    gives the name (``RULE:^CN=(.*?),OU=.*$/$1/L``); DEFAULT gives the subject unchanged. No
    matching rule: no principal (Kafka fails the authentication)."""

    def __init__(self, rules: str | Sequence[str] = ("DEFAULT",)) -> None:
        text = rules if isinstance(rules, str) else ",".join(rules)
        self._rules = _parse_rules(text)

    @property
    def rules(self) -> tuple[str, ...]:
        """The rules, one string each, in the order they are tried."""
        return tuple(rule.text for rule in self._rules)

    def name(self, subject_dn: str) -> str | None:
        for rule in self._rules:
            result = rule.apply(subject_dn)
            if result is not None:
                return result
        return None


# Certificates whose identity a CallerResolver keeps (bounds memory against clients that
# present many distinct certificates; each must still be signed by the trust store's CA).
IDENTITIES_CACHED_MAX = 1024


class CallerResolver:
    """Turns a call's auth context into a ``Caller``. One per server; cheap per call.

    ``mapping_rules``: ``ssl.principal.mapping.rules``, as Kafka's comma-separated string or
    one string per rule (``NodeConfig.ssl_principal_mapping_rules``)."""

    def __init__(self, mapping_rules: str | Sequence[str] = ("DEFAULT",)) -> None:
        self._mapper = PrincipalMapper(mapping_rules)
        self.mapping_rules = self._mapper.rules
        # Parsing a certificate costs tens of microseconds, and every call of a connection
        # presents the same one: what a certificate's bytes map to (principal, node, cluster)
        # is kept, for at most IDENTITIES_CACHED_MAX certificates (oldest dropped first).
        self._identities: dict[bytes, tuple[str, int | None, str | None]] = {}

    def principal_for_subject(self, subject_dn: str) -> str | None:
        """``User:`` + the mapped distinguished name (DEFAULT: the name unchanged); None when
        no rule matches (the caller then has no name: ``User:ANONYMOUS``, no node)."""
        name = self._mapper.name(subject_dn)
        return None if name is None else f"User:{name}"

    def caller(self, context: _AuthContext) -> Caller:
        peer = context.peer()
        auth = context.auth_context()
        pems = auth.get("x509_pem_cert") or ()
        if not pems:
            return Caller(ANONYMOUS, None, None, authenticated=False, peer=peer)
        known = self._identities.get(pems[0])
        if known is None:
            known = self._identity(pems[0])
            if len(self._identities) >= IDENTITIES_CACHED_MAX:
                del self._identities[next(iter(self._identities))]
            self._identities[pems[0]] = known
        principal, node_id, cluster_id = known
        return Caller(principal, node_id, cluster_id, authenticated=True, peer=peer)

    def _identity(self, pem: bytes) -> tuple[str, int | None, str | None]:
        """(principal, node id, cluster id) of a certificate the TLS stack verified."""
        # From here on the TLS stack verified a client certificate: whatever goes wrong below
        # fails closed (an authenticated caller with no name and no node may claim nothing),
        # never open as a plaintext caller would (docs/security.md#what-a-node-may-claim).
        try:
            cert = x509.load_pem_x509_certificate(pem)
            subject = cert.subject.rfc4514_string()
        except ValueError:
            return ANONYMOUS, None, None
        node: tuple[str, int] | None = None
        try:
            san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName)
            uris = san.value.get_values_for_type(x509.UniformResourceIdentifier)
        except (x509.ExtensionNotFound, ValueError):
            uris = []
        named = [parsed for parsed in map(_parse_node_uri, uris) if parsed is not None]
        if len(named) == 1:  # two node names in one certificate name no node
            node = named[0]
        principal = self.principal_for_subject(subject)
        return (
            # No mapping rule matched: no name (Kafka refuses the authentication); the node
            # identity comes from the URI SAN alone and stands.
            ANONYMOUS if principal is None else principal,
            None if node is None else node[1],
            None if node is None else node[0],
        )
