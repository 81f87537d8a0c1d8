"""Who is calling: the Kafka principal and node identity behind one gRPC call.

On a TLS listener with client authentication the caller presented a certificate our trust
store accepted; its subject gives the principal (``User:`` + the RFC 2253 distinguished name,
Kafka's default ``ssl.principal.mapping.rules = DEFAULT``), and a URI subject alternative name
``spiffe://metaquorum/<cluster-id>/<role>/<node-id>`` names a node and its role, ``controller``
or ``broker`` (a combined node carries both URIs, with one id). A URI of another form names no
node (the ``.../node/<id>`` of earlier releases among them: it says no role). On a plaintext
listener every caller is ``User:ANONYMOUS`` and names no node (docs/security.md#node-identity).

A node's certificate also carries DNS names that say who it is to the nodes that connect to it
(``node_server_name``): ``<role>-<id>.<cluster>.metaquorum`` and ``<role>.<cluster>.metaquorum``.
A node connecting to a peer checks that the peer's certificate carries the name of the node
and role it meant to reach, not only the host (docs/security.md#whom-a-node-connects-to).

Both come from the TLS stack itself, which parsed the certificate when it verified the chain:
gRPC's auth context names the subject (``x509_subject``, RFC 2253 as BoringSSL prints it) and
the URI alternative names (``peer_uri``). No certificate is parsed here (and no X.509 library
is loaded into a node's memory); what is there is still read defensively: anything unexpected
yields no name or no node identity, never an exception.

Forwarding (Kafka's KIP-590): a broker's Kafka listener forwards a client's writes to the active
controller over the admin gRPC, authenticated by the broker's own node certificate, and names
the client's principal in the call's metadata (``forwarding_metadata``). A resolver built with
``forwarding_cluster_id`` believes that name only from a node certificate of that cluster; the
call then acts as the client, with none of the node's own powers. From anyone else the claim
fails closed: the caller becomes ``User:ANONYMOUS`` (docs/security.md#forwarded-requests).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final, Protocol

import structlog

from quorum.logs import LogThrottle
from quorum.security.events import SECURITY_EVENTS

__all__ = [
    "ANONYMOUS",
    "FORWARDED_CLIENT_KEY",
    "FORWARDED_PRINCIPAL_KEY",
    "NODE_ROLES",
    "NODE_URI_PREFIX",
    "ROLE_BROKER",
    "ROLE_CONTROLLER",
    "Caller",
    "CallerResolver",
    "MappingRuleError",
    "PrincipalMapper",
    "forwarding_metadata",
    "node_of_uris",
    "node_server_name",
    "node_uri",
    "parse_mapping_rules",
    "parse_node_uri",
    "peer_certificate_properties",
]

ANONYMOUS: Final = "User:ANONYMOUS"
NODE_URI_PREFIX: Final = "spiffe://metaquorum/"
# gRPC metadata a broker sets on a forwarded request: the client's principal and address (UTF-8;
# "-bin" keys, since a distinguished name may hold any character).
FORWARDED_PRINCIPAL_KEY: Final = "metaquorum-forwarded-principal-bin"
FORWARDED_CLIENT_KEY: Final = "metaquorum-forwarded-client-bin"
# A forwarded principal or client address longer than this is not believed (our choice: a
# distinguished name of a real certificate is far shorter; Kafka bounds nothing here).
FORWARDED_VALUE_BYTES_MAX: Final = 1024

_log = structlog.get_logger("quorum.security")


ROLE_CONTROLLER: Final = "controller"
ROLE_BROKER: Final = "broker"
NODE_ROLES: Final = (ROLE_CONTROLLER, ROLE_BROKER)
# The DNS suffix of the names nodes know each other by (``node_server_name``): not a real
# domain, never looked up; only checked against certificates.
NODE_NAME_SUFFIX: Final = "metaquorum"


def node_uri(cluster_id: str, role: str, node_id: int) -> str:
    """The URI SAN that names node ``node_id`` of cluster ``cluster_id`` in ``role``."""
    assert role in NODE_ROLES, role
    return f"{NODE_URI_PREFIX}{cluster_id}/{role}/{node_id}"


def node_server_name(cluster_id: str, role: str, node_id: int | None = None) -> str:
    """The DNS name a node's certificate carries so that peers can check whom they reached:
    ``controller-3.<cluster>.metaquorum`` for node 3 as a controller, or (``node_id`` None)
    ``controller.<cluster>.metaquorum`` for any controller of the cluster (a bootstrap server
    whose id is not known yet). ``<cluster>`` is the cluster id's UTF-8 bytes in lower-case hex:
    a DNS label (a cluster id may hold '_' and upper case, which DNS names do not keep)."""
    assert role in NODE_ROLES, role
    cluster = cluster_id.encode().hex()
    head = role if node_id is None else f"{role}-{node_id}"
    return f"{head}.{cluster}.{NODE_NAME_SUFFIX}"


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
    forwarded_by: int | None = None
    """The node (a broker) that forwarded this caller's request (KIP-590), or None."""
    roles: frozenset[str] = frozenset()
    """The roles the certificate's node URIs name (``controller``, ``broker``); empty for
    clients and plaintext."""

    @property
    def is_node(self) -> bool:
        return self.node_id is not None

    @property
    def is_controller(self) -> bool:
        return ROLE_CONTROLLER in self.roles

    @property
    def is_broker(self) -> bool:
        return ROLE_BROKER in self.roles

    def describe_node(self) -> str:
        """``controller 3``, ``broker 101``, ``controller and broker 1`` (for messages)."""
        if self.node_id is None:
            return "no node"
        return f"{' and '.join(r for r in NODE_ROLES if r in self.roles)} {self.node_id}"


class _AuthContext(Protocol):
    def auth_context(self) -> Mapping[str, Sequence[bytes]]: ...

    def peer(self) -> str: ...


def parse_node_uri(uri: str) -> tuple[str, str, int] | None:
    """(cluster id, role, node id) of a node URI, or None when ``uri`` is not one (another
    scheme, a role other than ``controller`` or ``broker``, an id that is not an int32)."""
    if not uri.startswith(NODE_URI_PREFIX):
        return None
    parts = uri[len(NODE_URI_PREFIX) :].split("/")
    if len(parts) != 3 or parts[1] not in NODE_ROLES or not parts[0]:
        return None
    text = parts[2]
    if not text.isascii() or not text.isdigit() or len(text) > 10:
        return None
    node_id = int(text)
    if node_id > 2**31 - 1:
        return None
    return parts[0], parts[1], node_id


def node_of_uris(uris: Sequence[str]) -> tuple[str, int, frozenset[str]] | None:
    """(cluster id, node id, roles) that the node URIs among ``uris`` name together, or None:
    none names a node, or two name different nodes or clusters (a certificate with two
    identities has none)."""
    named = [parsed for parsed in map(parse_node_uri, uris) if parsed is not None]
    if not named or len({(cluster, node_id) for cluster, _, node_id in named}) != 1:
        return None
    cluster_id, _, node_id = named[0]
    return cluster_id, node_id, frozenset(role for _, role, _ in named)


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


# What a verified certificate says: (principal, node id, cluster id, roles).
_Identity = tuple[str, int | None, str | None, frozenset[str]]

# Certificates whose identity a CallerResolver keeps (bounds memory against clients that
# present many distinct certificates; each must still be signed by the trust store's CA).
IDENTITIES_CACHED_MAX = 1024


class CallerResolver:
    """Turns a call's auth context into a ``Caller``. One per server; cheap per call.

    ``mapping_rules``: ``ssl.principal.mapping.rules``, as Kafka's comma-separated string or
    one string per rule (``NodeConfig.ssl_principal_mapping_rules``)."""

    def __init__(
        self,
        mapping_rules: str | Sequence[str] = ("DEFAULT",),
        *,
        forwarding_cluster_id: str | None = None,
        registered_broker: Callable[[int], bool] | None = None,
    ) -> None:
        """``forwarding_cluster_id``: believe the principal that a broker certificate of this
        cluster forwards (an active controller's admin service); None: never believe one.
        ``registered_broker``: whether a broker id is registered in the metadata (a broker
        certificate of an id the cluster does not know forwards nothing); None: any id."""
        self._mapper = PrincipalMapper(mapping_rules)
        self.mapping_rules = self._mapper.rules
        # Parsing a certificate costs tens of microseconds, and every call of a connection
        # presents the same one: what a certificate's bytes map to (principal, node, cluster)
        # is kept, for at most IDENTITIES_CACHED_MAX certificates (oldest dropped first).
        self._identities: dict[bytes, _Identity] = {}
        self._forwarding_cluster_id = forwarding_cluster_id
        self._registered_broker = registered_broker
        self._refusals = LogThrottle()

    def principal_for_subject(self, subject_dn: str) -> str | None:
        """``User:`` + the mapped distinguished name (DEFAULT: the name unchanged); None when
        no rule matches (the caller then has no name: ``User:ANONYMOUS``, no node)."""
        name = self._mapper.name(subject_dn)
        return None if name is None else f"User:{name}"

    def caller(self, context: _AuthContext) -> Caller:
        direct = self._direct_caller(context)
        forwarded = _metadata_value(context, FORWARDED_PRINCIPAL_KEY)
        if forwarded is None:
            return direct
        return self._on_behalf(direct, forwarded, _metadata_value(context, FORWARDED_CLIENT_KEY))

    def _on_behalf(self, direct: Caller, principal: bytes, client: bytes | None) -> Caller:
        """The client a broker forwarded a request for, if the broker may say so; otherwise
        ``User:ANONYMOUS`` (fail closed: the claim cannot be checked)."""
        why_not = self._forwarder_problem(direct)
        name = _forwarded_text(principal)
        address = _forwarded_text(client) if client is not None else "unknown"
        if why_not is None and (name is None or not name.startswith("User:") or address is None):
            why_not = "the forwarded principal is not of the form User:<name>"
        if why_not is not None or name is None or address is None:
            reason = why_not or "unreadable forwarded principal"
            # The request goes on as User:ANONYMOUS: no Kafka error of its own.
            SECURITY_EVENTS.refused("forwarded_principal_refused", "NONE")
            count = self._refusals.count((direct.principal, reason))
            if count is not None:
                _log.warning(
                    "forwarded_principal_refused",
                    peer=direct.peer,
                    principal=direct.principal,
                    claimed=repr(principal[:FORWARDED_VALUE_BYTES_MAX]),
                    reason=reason,
                    acting_as=ANONYMOUS,
                    count=count,
                )
            return Caller(
                ANONYMOUS, None, None, authenticated=direct.authenticated, peer=direct.peer
            )
        return Caller(
            principal=name,
            node_id=None,
            cluster_id=None,
            # A forwarded caller never has its claims believed as a plaintext caller's are.
            authenticated=True,
            peer=f"{address} via broker {direct.node_id}",
            forwarded_by=direct.node_id,
        )

    def _forwarder_problem(self, direct: Caller) -> str | None:
        """Why ``direct`` may not forward a request (KIP-590), or None: only a broker
        certificate of this cluster, of a broker the metadata knows, may."""
        if self._forwarding_cluster_id is None:
            return "this service believes no forwarded principal"
        if not direct.authenticated or direct.node_id is None:
            return "only a broker's certificate may forward a request"
        if direct.cluster_id != self._forwarding_cluster_id:
            return "the forwarding certificate names another cluster"
        if not direct.is_broker:
            named = direct.describe_node()
            return f"only a broker may forward a request; the certificate names {named}"
        if self._registered_broker is not None and not self._registered_broker(direct.node_id):
            return f"broker {direct.node_id} is not registered in this cluster"
        return None

    def _direct_caller(self, context: _AuthContext) -> Caller:
        peer = context.peer()
        auth = context.auth_context()
        pems = auth.get("x509_pem_cert") or ()
        if not pems:
            return Caller(ANONYMOUS, None, None, authenticated=False, peer=peer)
        known = self._identities.get(pems[0])
        if known is None:
            known = self._identity(auth.get("x509_subject") or (), auth.get("peer_uri") or ())
            if len(self._identities) >= IDENTITIES_CACHED_MAX:
                del self._identities[next(iter(self._identities))]
            self._identities[pems[0]] = known
        principal, node_id, cluster_id, roles = known
        return Caller(principal, node_id, cluster_id, authenticated=True, peer=peer, roles=roles)

    def _identity(self, subjects: Sequence[bytes], uris: Sequence[bytes]) -> _Identity:
        """(principal, node id, cluster id, roles) of a certificate the TLS stack verified,
        from the subject and URI alternative names it read from it."""
        # From here on the TLS stack verified a client certificate: whatever goes wrong below
        # fails closed (an authenticated caller with no name and no node may claim nothing),
        # never open as a plaintext caller would (docs/security.md#what-a-node-may-claim).
        principal = None
        if len(subjects) == 1:
            subject = _text(subjects[0])
            if subject is not None:
                principal = self.principal_for_subject(subject)
        # Two node identities in one certificate name no node.
        node = node_of_uris([text for text in map(_text, uris) if text is not None])
        return (
            # No subject, or no mapping rule matched: no name (Kafka refuses the
            # authentication); the node identity comes from the URI SAN alone and stands.
            ANONYMOUS if principal is None else principal,
            None if node is None else node[1],
            None if node is None else node[0],
            frozenset() if node is None else node[2],
        )


# OpenSSL's long attribute names (Python's ``SSLSocket.getpeercert``) -> the short names an RFC
# 2253 distinguished name uses (gRPC's ``x509_subject`` and Kafka's principals print these).
_SHORT_ATTRIBUTE_NAMES: Final = {
    "commonName": "CN",
    "countryName": "C",
    "localityName": "L",
    "stateOrProvinceName": "ST",
    "organizationName": "O",
    "organizationalUnitName": "OU",
    "streetAddress": "street",
    "domainComponent": "DC",
    "userId": "UID",
}


def _escape_dn_value(value: str) -> str:
    """RFC 2253's escapes as BoringSSL makes them for gRPC's ``x509_subject``: the special
    characters anywhere, a space first or last, a leading ``#``, and every byte of a control
    or non-ASCII character's UTF-8 as ``\\XX``."""
    last = len(value) - 1
    out = []
    for i, c in enumerate(value):
        if c in ',+"\\<>;' or (c == " " and i in (0, last)) or (c == "#" and i == 0):
            out.append("\\" + c)
        elif ord(c) < 0x20 or ord(c) >= 0x7F:
            out.extend(f"\\{byte:02X}" for byte in c.encode())
        else:
            out.append(c)
    return "".join(out)


def peer_certificate_properties(certificate: Mapping[str, Any]) -> dict[str, list[bytes]]:
    """For a connection of Python's ``ssl`` (the brokers' Kafka listener): the properties gRPC's
    auth context gives for a verified peer certificate, from ``getpeercert()``'s dictionary:
    ``x509_subject`` (RFC 2253: the last relative name first, short attribute names, values
    escaped) and ``peer_uri`` (the URI alternative names)."""
    names = []
    for rdn in reversed(certificate.get("subject", ())):
        names.append(
            "+".join(
                f"{_SHORT_ATTRIBUTE_NAMES.get(str(key), str(key))}={_escape_dn_value(str(value))}"
                for key, value in rdn
            )
        )
    uris = [
        str(value).encode()
        for kind, value in certificate.get("subjectAltName", ())
        if kind == "URI"
    ]
    properties = {"x509_subject": [",".join(names).encode()]}
    if uris:
        properties["peer_uri"] = uris
    return properties


def _text(value: bytes) -> str | None:
    """A name from the TLS stack as text: UTF-8 without NUL, else None (no name)."""
    try:
        text = value.decode()
    except UnicodeDecodeError:
        return None
    return None if "\x00" in text else text


def forwarding_metadata(caller: Caller) -> tuple[tuple[str, bytes], ...]:
    """The gRPC metadata with which a broker forwards a request made by ``caller``."""
    return (
        (FORWARDED_PRINCIPAL_KEY, caller.principal.encode()),
        (FORWARDED_CLIENT_KEY, caller.peer.encode()),
    )


def _metadata_value(context: Any, key: str) -> bytes | None:
    """The value of metadata ``key`` of the call (the first if repeated), or None. A context
    without metadata (a test's) has none."""
    invocation_metadata = getattr(context, "invocation_metadata", None)
    if invocation_metadata is None:
        return None
    for entry_key, value in invocation_metadata() or ():
        if entry_key == key:
            return value if isinstance(value, bytes) else str(value).encode()
    return None


def _forwarded_text(value: bytes) -> str | None:
    """Forwarded text if it is short, UTF-8 and free of control characters, else None."""
    if len(value) > FORWARDED_VALUE_BYTES_MAX:
        return None
    try:
        text = value.decode()
    except UnicodeDecodeError:
        return None
    if not text or any(ord(c) < 0x20 or ord(c) == 0x7F for c in text):
        return None
    return text
