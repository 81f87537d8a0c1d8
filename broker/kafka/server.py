"""The Kafka listener's network side: an asyncio server speaking Kafka's framing over TCP or TLS
(docs/kafka-listener.md).

Each connection is served one request at a time, in order, as a Kafka broker serves a
connection: read a size-prefixed frame, decode it (``protocol.decode_request``), answer it
(``apis.KafkaApis``), write the size-prefixed response, read the next. Clients that pipeline
get their answers in order. Everything a client sends is untrusted, and every bound is checked
before the work it protects (docs/kafka-listener.md#robustness):

- a new connection is counted against ``max.connections`` and ``max.connections.per.ip``
  (``broker/kafka/connections.py``) when it is accepted, before its TLS handshake; beyond a
  limit it is closed at once;
- the size prefix is checked before anything is read: below a request header or above
  ``KAFKA_REQUEST_BYTES_MAX``, the connection is closed (Kafka's socket.request.max.bytes);
  once the API key (the frame's first two bytes) is read, an API without a top-level array may
  have at most ``SMALL_REQUEST_BYTES_MAX``; the top-level array's count is checked against the
  API's bound before the request is decoded, and every array's count against the request's
  item budget (``protocol.py``);
- a frame larger than ``KAFKA_DECODE_ON_LOOP_BYTES_MAX`` is decoded in a thread of the
  listener's own, so one request never holds the listener's loop for long;
- a frame that does not decode, names an API key or version kio does not know, or has bytes
  after its end closes the connection;
- a connection idle for ``connections.max.idle.ms``, or sending one frame slower than
  ``KAFKA_FRAME_READ_MS_MAX``, or not reading its answers for ``KAFKA_RESPONSE_WRITE_MS_MAX``,
  or not finishing its TLS handshake within ``KAFKA_TLS_HANDSHAKE_MS_MAX``, is closed;
- each principal's requests are measured against the request quota (``broker/kafka/quota.py``):
  beyond it the answer carries ``throttle_time_ms`` and the connection is read again only
  after that time (Kafka mutes the channel);
- every close for cause is logged as ``kafka_request_malformed`` (peer, reason, bytes), every
  refused connection as ``kafka_connection_refused`` and every failed TLS handshake as
  ``tls_handshake_failed`` (peer, listener, reason), the first of each reason in full and then
  one line per 1,000 (``quorum.logs.LogThrottle``).

A handler that raises is a bug of ours: it is logged as ``kafka_request_failed`` with its
traceback and that connection is closed; the broker keeps serving every other one (nothing a
client sends stops a broker; the tests fail on any ``kafka_request_failed``).

TLS (``SSL`` in ``listener.security.protocol.map``) uses the node's own keystore and truststore
and ``ssl.client.auth``, and the caller's principal comes from its certificate exactly as on the
gRPC listener (``quorum.security.identity.CallerResolver``). The server's certificate is re-read
when its files change, at the next handshake (docs/security.md#rotation). The handshake runs
after the connection is counted (``loop.start_tls``), so a failed one is seen, logged
and counted (``tls_handshake_failures``, and the node's
``metaquorum_tls_handshake_failures_total{listener,reason}`` that the gRPC listener's failures
share).

On a broker the listeners run on an event loop of their own, in a thread of their own
(``broker/kafka/thread.py``), so the broker's heartbeats and metadata fetching never wait
behind client work.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import os
import ssl
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import structlog

from broker.kafka.apis import CLOSE_CONNECTION, NO_RESPONSE, KafkaApis, Session
from broker.kafka.connections import ConnectionLimits, client_address
from broker.kafka.protocol import (
    API_KEY_NAMES,
    HEADER_BYTES_MIN,
    ApiKey,
    MalformedRequestError,
    OversizedRequestError,
    Request,
    UnsupportedRequest,
    decode_request,
    encode_response,
    request_bytes_max,
    with_throttle_time,
)
from broker.kafka.quota import (
    CURRENT_COST,
    RequestCost,
    RequestQuota,
    awaited_elsewhere,
    byte_rate_quota,
)
from quorum.config import Listener, NodeConfig
from quorum.logs import LogThrottle
from quorum.metadata.client_quotas import (
    CONSUMER_BYTE_RATE,
    PRODUCER_BYTE_RATE,
    REQUEST_PERCENTAGE,
    quota_for,
)
from quorum.security.events import SECURITY_EVENTS
from quorum.security.identity import Caller, CallerResolver, peer_certificate_properties
from quorum.security.tls import Material, PemFiles

__all__ = [
    "KAFKA_DECODE_ON_LOOP_BYTES_MAX",
    "KAFKA_REQUEST_BYTES_MAX",
    "KafkaListenerServer",
    "KafkaTls",
    "ListenerLimits",
]

# The largest request frame accepted (Kafka's socket.request.max.bytes is 100 MiB, sized for
# Produce; the admin and metadata requests served here are small, and a CreateTopics at this
# project's bounds, 1,000 topics and 100,000 replica slots, is well under 1 MiB). As gRPC's
# default message bound on the other listener.
KAFKA_REQUEST_BYTES_MAX: Final = 4 * 1024 * 1024
# Frames up to this size are decoded on the listener's loop; larger ones in its decoding
# thread. kio decodes about a microsecond a byte at worst (measured: 3.3 MB of one-byte topic
# names in 3.3 s), so a frame decoded on the loop holds it for at most about 16 ms; nearly every
# request (ApiVersions, Metadata for a few topics, a CreateTopics of a few hundred) is smaller.
KAFKA_DECODE_ON_LOOP_BYTES_MAX: Final = 16 * 1024
# One frame, once its size arrived, must arrive within this (a client trickling bytes holds a
# connection, not the broker); its answer must be taken within the same time. Kafka's clients'
# request.timeout.ms default.
KAFKA_FRAME_READ_MS_MAX: Final = 30_000
KAFKA_RESPONSE_WRITE_MS_MAX: Final = 30_000
# A TLS handshake must finish within this (asyncio's default is 60 s).
KAFKA_TLS_HANDSHAKE_MS_MAX: Final = 10_000


def _now_ms() -> int:
    return time.monotonic_ns() // 1_000_000


def _user(principal: str) -> str:
    """The ``user`` quota entity name of a principal: its name without ``User:`` (Kafka's
    ``KafkaPrincipal.getName``)."""
    return principal.removeprefix("User:")


def _bucket_key(bucket: tuple[str, str]) -> str:
    """The usage key of a client quota bucket; apart from principals' keys (``User:...``)."""
    return f"quota\0{bucket[0]}\0{bucket[1]}"


def _config_default(name: str) -> Any:
    """The default of a ``NodeConfig`` field (Kafka's key ``name`` with dots for underscores)."""
    return NodeConfig.__dataclass_fields__[name].default


@dataclass(frozen=True)
class ListenerLimits:
    """What bounds a broker's Kafka listeners together: the connection limits and the request
    quota are shared by all of them (Kafka counts both per broker), the idle timeout applies to
    each connection."""

    connections: ConnectionLimits
    connection_idle_ms: int
    quota: RequestQuota | None
    # The byte-rate client quotas' usage (docs/kafka-listener.md#client-quotas): bytes produced
    # and fetched by bucket; None: not measured (the tests' listeners).
    produce_bytes: RequestQuota | None = None
    fetch_bytes: RequestQuota | None = None

    @classmethod
    def from_config(cls, config: NodeConfig) -> ListenerLimits:
        """The limits of ``config``; raises ``OverrideUnresolvableError`` for a host of
        ``max.connections.per.ip.overrides`` that does not resolve."""
        return cls(
            connections=ConnectionLimits(
                config.max_connections,
                config.max_connections_per_ip,
                config.max_connections_per_ip_overrides,
            ),
            connection_idle_ms=config.connections_max_idle_ms,
            quota=RequestQuota(
                config.quota_request_percentage_default,
                config.quota_window_num,
                config.quota_window_size_seconds * 1000,
            ),
            produce_bytes=byte_rate_quota(
                config.quota_window_num, config.quota_window_size_seconds * 1000
            ),
            fetch_bytes=byte_rate_quota(
                config.quota_window_num, config.quota_window_size_seconds * 1000
            ),
        )

    @classmethod
    def unquoted(cls) -> ListenerLimits:
        """The config's default connection limits and no request quota (the tests' listeners)."""
        return cls(
            connections=ConnectionLimits(
                _config_default("max_connections"), _config_default("max_connections_per_ip")
            ),
            connection_idle_ms=_config_default("connections_max_idle_ms"),
            quota=None,
        )


class _Held(asyncio.Protocol):
    """An accepted connection, reading nothing until the listener has counted it and, on an SSL
    listener, started its TLS handshake: a client's first bytes (its ClientHello) are then read
    by TLS, never by a plaintext stream."""

    def __init__(self, accepted: Callable[[asyncio.Transport], None]) -> None:
        self._accepted = accepted

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        transport.pause_reading()
        self._accepted(transport)


def _timed_decode(
    frame: bytes,
) -> tuple[Request | UnsupportedRequest | None, Exception | None, float]:
    """``decode_request`` in the decoding thread: the request or the refusal, and the thread
    time it took (the request quota charges it to the caller)."""
    started_s = time.thread_time()
    try:
        return decode_request(frame), None, time.thread_time() - started_s
    except MalformedRequestError as exc:
        return None, exc, time.thread_time() - started_s


class _PeerContext:
    """What ``CallerResolver`` reads from a gRPC call, for a Kafka connection: the peer's
    address and, if it presented one, its verified certificate (PEM) with the subject and URI
    names OpenSSL read from it (``peer_certificate_properties``)."""

    def __init__(
        self, peer: str, certificate_pem: bytes | None, certificate: Mapping[str, Any]
    ) -> None:
        self._peer = peer
        self._auth: dict[str, list[bytes]] = {}
        if certificate_pem is not None:
            self._auth = {
                "x509_pem_cert": [certificate_pem],
                **peer_certificate_properties(certificate),
            }

    def peer(self) -> str:
        return self._peer

    def auth_context(self) -> Mapping[str, Sequence[bytes]]:
        return self._auth


def _context(material: Material, protocol: ssl._SSLMethod) -> ssl.SSLContext:
    """A TLS context with the node's key, chain and trust store, TLS 1.2 at least."""
    assert material.key is not None
    assert material.chain is not None
    context = ssl.SSLContext(protocol)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    # The ssl module loads a key and chain from a file only: one private temporary file,
    # removed at once.
    with tempfile.TemporaryDirectory(prefix="metaquorum-tls-") as directory:
        path = Path(directory) / "keystore.pem"
        descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(descriptor, "wb") as file:
            file.write(material.key + b"\n" + material.chain)
        context.load_cert_chain(str(path))
    if material.ca is not None:
        context.load_verify_locations(cadata=material.ca.decode())
    return context


class KafkaTls:
    """The server side of an SSL Kafka listener: the node's keystore and truststore
    (``PemFiles``, re-read when they change) and ``ssl.client.auth``."""

    def __init__(self, files: PemFiles, client_auth: str) -> None:
        self._files = files
        self._verify_mode = {
            "required": ssl.CERT_REQUIRED,
            "requested": ssl.CERT_OPTIONAL,
            "none": ssl.CERT_NONE,
        }[client_auth]
        self._material = files.material
        self._current = self._build(self._material)
        self.context = self._build(self._material)
        self.context.sni_callback = self._on_client_hello

    def _build(self, material: Material) -> ssl.SSLContext:
        context = _context(material, ssl.PROTOCOL_TLS_SERVER)
        context.verify_mode = self._verify_mode
        return context

    def client_context(self) -> ssl.SSLContext:
        """The node as a TLS client of another broker's listener (its replica fetchers): the
        same key and chain, the same trust store, the peer's name checked against its
        certificate as Kafka's ``ssl.endpoint.identification.algorithm=https`` does."""
        material, _ = self._files.current()
        return _context(material, ssl.PROTOCOL_TLS_CLIENT)

    def _on_client_hello(
        self, connection: ssl.SSLObject, server_name: str | None, context: ssl.SSLContext
    ) -> None:
        """Every handshake: serve the files' current certificate (rotation)."""
        material, _ = self._files.current()
        if (material.key, material.chain, material.ca) != (
            self._material.key,
            self._material.chain,
            self._material.ca,
        ):
            try:
                self._current = self._build(material)
            except (ssl.SSLError, ValueError) as exc:
                structlog.get_logger("broker.kafka").warning(
                    "tls_files_unusable", problem=str(exc), kept="the previous files"
                )
            self._material = material
        connection.context = self._current


class KafkaListenerServer:
    """One Kafka listener of a broker (``listeners`` after the first entry)."""

    def __init__(
        self,
        listener: Listener,
        apis: KafkaApis,
        callers: CallerResolver,
        *,
        tls: KafkaTls | None,
        logger: Any,
        limits: ListenerLimits | None = None,
    ) -> None:
        self.listener = listener
        self._apis = apis
        self._callers = callers
        self._tls = tls
        self._limits = limits if limits is not None else ListenerLimits.unquoted()
        self._log = logger.bind(listener=listener.name)
        self._throttle = LogThrottle()
        self._server: asyncio.Server | None = None
        self._connections: set[asyncio.Task[None]] = set()
        # Large frames are decoded here, one at a time, off the listener's loop.
        self._decoder = concurrent.futures.ThreadPoolExecutor(
            max_workers=1, thread_name_prefix=f"kafka-decode-{listener.name}"
        )
        self.connections_served = 0
        self.connections_refused = 0
        self.requests_served = 0
        self.requests_throttled = 0
        self.closed_for_cause = 0
        self.tls_handshake_failures = 0
        self.failures = 0  # kafka_request_failed: bugs of ours (tests require none)

    @property
    def open_connections(self) -> int:
        return len(self._connections)

    @property
    def port(self) -> int:
        """The bound port (the configured one, or the one the system chose for port 0)."""
        assert self._server is not None
        port: int = self._server.sockets[0].getsockname()[1]
        return port

    def stats(self) -> dict[str, int]:
        """Counts for the broker's metrics (plain ints, read from any thread)."""
        return {
            "connections": self.open_connections,
            "connections_refused": self.connections_refused,
            "requests": self.requests_served,
            "requests_throttled": self.requests_throttled,
            "closed_for_cause": self.closed_for_cause,
            "tls_handshake_failures": self.tls_handshake_failures,
        }

    async def start(self) -> None:
        # TLS is not left to the server: each connection is held, reading nothing, until it is
        # counted, and then shakes hands in _serve, where a failed handshake can be seen.
        loop = asyncio.get_running_loop()
        self._server = await loop.create_server(
            lambda: _Held(self._accepted), self.listener.host, self.listener.port
        )
        self._log.info(
            "kafka_listener_started",
            address=f"{self.listener.host}:{self.port}",
            security_protocol="SSL" if self._tls is not None else "PLAINTEXT",
        )

    async def stop(self) -> None:
        if self._server is None:
            return
        self._server.close()
        for task in list(self._connections):
            task.cancel()
        await asyncio.gather(*self._connections, return_exceptions=True)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._server.wait_closed(), 5)
        self._server = None
        self._decoder.shutdown(wait=False, cancel_futures=True)

    # ----- logs for cause ----------------------------------------------------------------------

    def _closed_for_cause(self, peer: str, reason: str, detail: str, received: int) -> None:
        """Log (throttled) why a connection is closed; ``reason`` is the throttling key."""
        self.closed_for_cause += 1
        count = self._throttle.count(("kafka_request_malformed", reason))
        if count is not None:
            self._log.warning(
                "kafka_request_malformed",
                peer=peer,
                reason=reason,
                detail=detail,
                bytes_received=received,
                count=count,
                action="connection closed",
            )

    def _refused(self, peer: str, reason: str, detail: str) -> None:
        self.connections_refused += 1
        count = self._throttle.count(("kafka_connection_refused", reason))
        if count is not None:
            self._log.warning(
                "kafka_connection_refused",
                peer=peer,
                reason=reason,
                detail=detail,
                count=count,
                action="connection closed",
            )

    def _handshake_failed(self, peer: str, exc: BaseException) -> None:
        """Log (throttled by reason) and count a TLS handshake that did not complete. The
        reason is OpenSSL's, as the gRPC listener reports it (``WRONG_VERSION_NUMBER``: not TLS,
        ``PEER_DID_NOT_RETURN_A_CERTIFICATE``, ``TLSV1_ALERT_UNKNOWN_CA``, ...), or
        ``HANDSHAKE_TIMEOUT`` / ``CONNECTION_CLOSED``; the node's counter
        (``SECURITY_EVENTS``, docs/security.md#what-a-node-logs) is shared with it."""
        self.tls_handshake_failures += 1
        if isinstance(exc, TimeoutError):
            reason = "HANDSHAKE_TIMEOUT"
            detail = f"no handshake within {KAFKA_TLS_HANDSHAKE_MS_MAX} ms"
        elif isinstance(exc, ssl.SSLError):
            reason = str(exc.reason or type(exc).__name__).upper()
            detail = str(exc)
        else:
            reason = "CONNECTION_CLOSED"
            detail = str(exc) or type(exc).__name__
        SECURITY_EVENTS.handshake_failed(self.listener.name, reason)
        count = self._throttle.count(("tls_handshake_failed", reason))
        if count is not None:
            self._log.warning(
                "tls_handshake_failed",
                peer=peer,
                reason=reason,
                detail=repr(detail[:512]),
                count=count,
                action="connection closed",
            )

    # ----- one connection -----------------------------------------------------------------------

    def _caller(self, writer: asyncio.StreamWriter, peer: str) -> Caller:
        ssl_object = writer.get_extra_info("ssl_object")
        pem = None
        certificate: Mapping[str, Any] = {}
        if ssl_object is not None:
            der = ssl_object.getpeercert(binary_form=True)
            if der:
                pem = ssl.DER_cert_to_PEM_cert(der).encode()
                certificate = ssl_object.getpeercert() or {}
        return self._callers.caller(_PeerContext(peer, pem, certificate))

    def _accepted(self, transport: asyncio.Transport) -> None:
        task = asyncio.get_running_loop().create_task(self._serve(transport))
        self._connections.add(task)

    async def _serve(self, transport: asyncio.Transport) -> None:
        """One accepted connection: counted against the connection limits, its TLS handshake,
        then its requests."""
        task = asyncio.current_task()
        assert task is not None
        peername = transport.get_extra_info("peername")
        peer = f"{peername[0]}:{peername[1]}" if isinstance(peername, tuple) else str(peername)
        address = client_address(peername)
        limits = self._limits.connections
        refusal = limits.acquire(address)
        if refusal is not None:
            self._connections.discard(task)
            self._refused(peer, *refusal)
            transport.abort()
            return
        self.connections_served += 1
        loop = asyncio.get_running_loop()
        reader = asyncio.StreamReader(loop=loop)
        protocol = asyncio.StreamReaderProtocol(reader, loop=loop)
        try:
            if self._tls is not None:
                secured = await self._handshake(transport, protocol, peer)
                if secured is None:
                    return
                transport = secured
            else:
                transport.set_protocol(protocol)
                protocol.connection_made(transport)
                transport.resume_reading()
            writer = asyncio.StreamWriter(transport, protocol, reader, loop)
            await self._connection(reader, writer, peer)
        except (ConnectionError, ssl.SSLError, OSError):
            pass  # the peer went away or broke TLS: nothing to answer
        finally:
            limits.release(address)
            self._connections.discard(task)
            transport.close()

    async def _handshake(
        self, transport: asyncio.Transport, protocol: asyncio.Protocol, peer: str
    ) -> asyncio.Transport | None:
        """The server side of the TLS handshake on a held connection: its TLS transport, or
        None (logged and counted) when it failed or took longer than
        ``KAFKA_TLS_HANDSHAKE_MS_MAX``."""
        assert self._tls is not None
        timeout_s = KAFKA_TLS_HANDSHAKE_MS_MAX / 1000
        loop = asyncio.get_running_loop()
        try:
            # asyncio's own timeout is later, so ours is the one that fires and is named.
            secured = await asyncio.wait_for(
                loop.start_tls(
                    transport,
                    protocol,
                    self._tls.context,
                    server_side=True,
                    ssl_handshake_timeout=timeout_s + 5,
                ),
                timeout_s,
            )
        except (TimeoutError, OSError, EOFError) as exc:  # ssl.SSLError is an OSError
            self._handshake_failed(peer, exc)
            return None
        if secured is None:  # the connection closed as the handshake ended
            self._handshake_failed(peer, ConnectionResetError("closed during the handshake"))
            return None
        return secured

    async def _read_frame(self, reader: asyncio.StreamReader, peer: str) -> bytes | None:
        """The next request frame without its size, or None when the connection ends (closed
        by the client, idle, or for cause)."""
        idle_ms = self._limits.connection_idle_ms
        try:
            head = await asyncio.wait_for(reader.readexactly(4), idle_ms / 1000)
        except asyncio.IncompleteReadError as exc:
            if exc.partial:
                self._closed_for_cause(
                    peer, "truncated_size", "the connection ended inside a size prefix", 0
                )
            return None
        except TimeoutError:
            self._log.info(
                "kafka_connection_idle",
                peer=peer,
                idle_ms=idle_ms,
                action="connection closed (connections.max.idle.ms)",
            )
            return None
        size = int.from_bytes(head, "big", signed=True)
        if not HEADER_BYTES_MIN <= size <= KAFKA_REQUEST_BYTES_MAX:
            self._closed_for_cause(
                peer,
                "bad_size",
                f"a frame of {size} bytes; allowed: {HEADER_BYTES_MIN} to "
                f"{KAFKA_REQUEST_BYTES_MAX} (a TLS client on a PLAINTEXT listener, or not Kafka?)",
                4,
            )
            return None
        deadline_s = time.monotonic() + KAFKA_FRAME_READ_MS_MAX / 1000
        try:
            start = await asyncio.wait_for(reader.readexactly(4), KAFKA_FRAME_READ_MS_MAX / 1000)
            api_key = int.from_bytes(start[:2], "big", signed=True)
            bound = request_bytes_max(api_key, KAFKA_REQUEST_BYTES_MAX)
            if size > bound:
                self._closed_for_cause(
                    peer,
                    "request_too_large",
                    f"a {API_KEY_NAMES.get(api_key, f'API key {api_key}')} request of {size} "
                    f"bytes; allowed: at most {bound} for this API",
                    8,
                )
                return None
            rest = await asyncio.wait_for(
                reader.readexactly(size - 4), max(0.0, deadline_s - time.monotonic())
            )
            return start + rest
        except asyncio.IncompleteReadError as exc:
            self._closed_for_cause(
                peer,
                "truncated_frame",
                f"the connection ended inside a frame of {size} bytes",
                4 + len(exc.partial),
            )
        except TimeoutError:
            self._closed_for_cause(
                peer,
                "slow_frame",
                f"{size} bytes did not arrive within {KAFKA_FRAME_READ_MS_MAX} ms",
                4,
            )
        return None

    async def _decode(self, frame: bytes, cost: RequestCost) -> Request | UnsupportedRequest:
        """``decode_request``, on the loop for a small frame, else in the decoding thread."""
        if len(frame) <= KAFKA_DECODE_ON_LOOP_BYTES_MAX:
            return decode_request(frame)
        loop = asyncio.get_running_loop()
        request, error, used_s = await awaited_elsewhere(
            loop.run_in_executor(self._decoder, _timed_decode, frame)
        )
        cost.worker_s += used_s
        if error is not None:
            raise error
        assert request is not None
        return request

    def _charge(
        self, session: Session, cost: RequestCost, started_s: float, client_id: str | None = None
    ) -> int:
        """Record the thread time the request took since ``started_s`` against the caller's
        request quota: its client quota's ``request_percentage`` (user and client id, Kafka's
        precedence) when one applies, else the config's default; the throttle time it earned
        (0 without a quota)."""
        quota = self._limits.quota
        if quota is None:
            return 0
        used_s = time.thread_time() - started_s - cost.excluded_s + cost.worker_s
        used_s += session.unbilled_s
        session.unbilled_s = 0.0
        principal = session.caller.principal
        match = (
            None
            if session.caller.is_node  # brokers' own requests: no client quota (Kafka's rule)
            else quota_for(
                self._apis.client_quotas(), _user(principal), client_id or "", REQUEST_PERCENTAGE
            )
        )
        if match is None:
            return quota.record(principal, max(used_s, 0.0), _now_ms())
        return quota.record(
            _bucket_key(match.bucket), max(used_s, 0.0), _now_ms(), match.value / 100
        )

    def _charge_bytes(
        self, request: Request, session: Session, in_bytes: int, out_bytes: int
    ) -> int:
        """Record a Produce's request bytes against its ``producer_byte_rate``, a Fetch's
        answer bytes against its ``consumer_byte_rate`` (Kafka's measures); the throttle time
        earned (0 without such a client quota). Nodes (a follower's Fetch) are exempt, as
        Kafka's replication is from client quotas."""
        if request.api_key == ApiKey.PRODUCE:
            usage, key, amount = self._limits.produce_bytes, PRODUCER_BYTE_RATE, in_bytes
        elif request.api_key == ApiKey.FETCH:
            usage, key, amount = self._limits.fetch_bytes, CONSUMER_BYTE_RATE, out_bytes
        else:
            return 0
        quotas = self._apis.client_quotas()
        if usage is None or not quotas or session.caller.is_node:
            return 0  # a follower's Fetch, a node's request: replication is not a client's
        match = quota_for(quotas, _user(session.caller.principal), request.client_id or "", key)
        if match is None:
            return 0
        return usage.record(_bucket_key(match.bucket), float(amount), _now_ms(), match.value)

    async def answer(self, frame: bytes, session: Session) -> bytes | None:
        """The size-prefixed answer to one request frame, ``b""`` when none is due (Produce
        with acks=0), or None when the connection must be closed (the frame is malformed or
        refused, or answering it failed: all logged). Sets ``session.throttle_ms`` to the
        throttle time the answer carries."""
        cost = RequestCost()
        token = CURRENT_COST.set(cost)
        try:
            return await self._answer(frame, session, cost, time.thread_time())
        finally:
            CURRENT_COST.reset(token)

    async def _answer(
        self, frame: bytes, session: Session, cost: RequestCost, started_s: float
    ) -> bytes | None:
        session.throttle_ms = 0
        arrived_s = time.monotonic()
        try:
            request = await self._decode(frame, cost)
        except MalformedRequestError as exc:
            reason = exc.reason if isinstance(exc, OversizedRequestError) else "malformed_request"
            self._closed_for_cause(session.caller.peer, reason, str(exc), 4 + len(frame))
            self._charge(session, cost, started_s)
            return None
        try:
            if isinstance(request, UnsupportedRequest):
                count = self._throttle.count(
                    ("kafka_request_unsupported", request.api_key, request.api_version)
                )
                if count is not None:
                    self._log.info(
                        "kafka_request_unsupported",
                        peer=session.caller.peer,
                        api_key=request.api_key,
                        api=API_KEY_NAMES.get(request.api_key),
                        api_version=request.api_version,
                        answer="UNSUPPORTED_VERSION",
                        count=count,
                    )
                response = self._apis.unsupported(request)
            else:
                response = await self._apis.handle(request, session)
                if response is NO_RESPONSE or response is CLOSE_CONNECTION:
                    # Produce with acks=0: Kafka answers nothing, and closes the connection
                    # when a partition failed so the producer refreshes its metadata.
                    self._charge(session, cost, started_s)
                    self.requests_served += 1
                    if response is NO_RESPONSE:
                        self._timed(request, arrived_s)
                        return b""
                    self._closed_for_cause(
                        session.caller.peer,
                        "produce_failed_acks_0",
                        "a Produce with acks=0 failed for a partition (Kafka closes too)",
                        4 + len(frame),
                    )
                    return None
            client_id = None if isinstance(request, UnsupportedRequest) else request.client_id
            throttle_ms = self._charge(session, cost, started_s, client_id)
            if throttle_ms:
                self.requests_throttled += 1
                response = with_throttle_time(response, throttle_ms)
            encoding_s = time.thread_time()
            data = encode_response(request.correlation_id, response)
            bytes_throttle_ms = (
                0
                if isinstance(request, UnsupportedRequest)
                else self._charge_bytes(request, session, 4 + len(frame), len(data))
            )
            if bytes_throttle_ms > throttle_ms:
                # Over a byte-rate quota: the answer carries the longer throttle (encoded again).
                if not throttle_ms:
                    self.requests_throttled += 1
                throttle_ms = bytes_throttle_ms
                response = with_throttle_time(response, throttle_ms)
                data = encode_response(request.correlation_id, response)
            # Encoding is charged with the connection's next request (its throttle is set).
            session.unbilled_s = time.thread_time() - encoding_s
        except Exception:  # a bug of ours, not the client's: see the module docstring
            self.failures += 1
            self._log.exception(
                "kafka_request_failed",
                peer=session.caller.peer,
                api_key=request.api_key,
                api_version=request.api_version,
                action="connection closed",
            )
            return None
        session.throttle_ms = throttle_ms
        self.requests_served += 1
        if not isinstance(request, UnsupportedRequest):
            self._timed(request, arrived_s)
        return data

    def _timed(self, request: Request, arrived_s: float) -> None:
        """Kafka's ``TotalTimeMs`` by API, from the whole frame's arrival to the encoded
        answer (the time the answer takes to leave is not in it). Every Fetch here is a
        consumer's, so it counts as Kafka's ``FetchConsumer`` too."""
        elapsed_ms = (time.monotonic() - arrived_s) * 1000
        metrics = self._apis.data.metrics
        name = API_KEY_NAMES.get(request.api_key, str(request.api_key))
        metrics.request_time(name, elapsed_ms)
        if request.api_key == ApiKey.FETCH:
            metrics.request_time("FetchConsumer", elapsed_ms)

    async def _connection(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, peer: str
    ) -> None:
        session = Session(self._caller(writer, peer), self.listener.name)
        while True:
            frame = await self._read_frame(reader, peer)
            if frame is None:
                return
            data = await self.answer(frame, session)
            if data is None:
                return
            if not data:
                continue  # acks=0: nothing to answer
            writer.write(data)
            try:
                await asyncio.wait_for(writer.drain(), KAFKA_RESPONSE_WRITE_MS_MAX / 1000)
            except TimeoutError:
                self._closed_for_cause(
                    peer,
                    "slow_reader",
                    f"a {len(data)}-byte answer was not taken within "
                    f"{KAFKA_RESPONSE_WRITE_MS_MAX} ms",
                    0,
                )
                return
            if session.throttle_ms:
                # Kafka mutes a throttled client's channel: its next request is read only once
                # the throttle time is over (the request quota; the client waits, not us).
                await asyncio.sleep(session.throttle_ms / 1000)
