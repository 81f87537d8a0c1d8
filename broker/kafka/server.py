"""The Kafka listener's network side: an asyncio server speaking Kafka's framing over TCP or TLS
(docs/kafka-listener.md).

Each connection is served one request at a time, in order, as a Kafka broker serves a
connection: read a size-prefixed frame, decode it (``protocol.decode_request``), answer it
(``apis.KafkaApis``), write the size-prefixed response, read the next. Clients that pipeline
get their answers in order. Everything a client sends is untrusted:

- the size prefix is checked before anything is read: below a request header or above
  ``KAFKA_REQUEST_BYTES_MAX``, the connection is closed (Kafka's socket.request.max.bytes);
- a frame that does not decode, names an API key or version kio does not know, or has bytes
  after its end closes the connection;
- a connection idle for ``KAFKA_CONNECTION_IDLE_MS_MAX``, or sending one frame slower than
  ``KAFKA_FRAME_READ_MS_MAX``, or not reading its answers for ``KAFKA_RESPONSE_WRITE_MS_MAX``,
  is closed; at most ``KAFKA_CONNECTIONS_MAX`` connections are open at once;
- every close for cause is logged as ``kafka_request_malformed`` (peer, reason, bytes), the
  first of each reason in full and then one line per 1,000 (``quorum.logs.LogThrottle``).

A handler that raises is a bug of ours: it is logged as ``kafka_request_failed`` with its
traceback and that connection is closed; the broker keeps serving every other one (nothing a
client sends stops a broker; the tests fail on any ``kafka_request_failed``).

TLS (``SSL`` in ``listener.security.protocol.map``) uses the node's own keystore and truststore
and ``ssl.client.auth``, and the caller's principal comes from its certificate exactly as on the
gRPC listener (``quorum.security.identity.CallerResolver``). The server's certificate is re-read
when its files change, at the next handshake (docs/security.md#rotation).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import ssl
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Final

import structlog

from broker.kafka.apis import KafkaApis, Session
from broker.kafka.protocol import (
    API_KEY_NAMES,
    HEADER_BYTES_MIN,
    MalformedRequestError,
    UnsupportedRequest,
    decode_request,
    encode_response,
)
from quorum.config import Listener
from quorum.logs import LogThrottle
from quorum.security.identity import Caller, CallerResolver, peer_certificate_properties
from quorum.security.tls import Material, PemFiles

__all__ = [
    "KAFKA_CONNECTIONS_MAX",
    "KAFKA_REQUEST_BYTES_MAX",
    "KafkaListenerServer",
    "KafkaTls",
]

# The largest request frame accepted (Kafka's socket.request.max.bytes is 100 MiB, sized for
# Produce; the admin and metadata requests served here are small, and a CreateTopics at this
# project's bounds, 1,000 topics and 100,000 replica slots, is well under 1 MiB). As gRPC's
# default message bound on the other listener.
KAFKA_REQUEST_BYTES_MAX: Final = 4 * 1024 * 1024
# Open connections at once; past it a new one is closed at once. With the frame bound, at most
# 2 GiB of frames in flight (our choice; Kafka's max.connections is unbounded by default).
KAFKA_CONNECTIONS_MAX: Final = 500
# Kafka's connections.max.idle.ms default: a connection with no request for this long is closed.
KAFKA_CONNECTION_IDLE_MS_MAX: Final = 600_000
# One frame, once its size arrived, must arrive within this (a client trickling bytes holds a
# connection, not the broker); its answer must be taken within the same time. Kafka's clients'
# request.timeout.ms default.
KAFKA_FRAME_READ_MS_MAX: Final = 30_000
KAFKA_RESPONSE_WRITE_MS_MAX: Final = 30_000
# A TLS handshake must finish within this (asyncio's default is 60 s).
KAFKA_TLS_HANDSHAKE_MS_MAX: Final = 10_000


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
        assert material.key is not None
        assert material.chain is not None
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
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
        context.verify_mode = self._verify_mode
        return context

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
    ) -> None:
        self.listener = listener
        self._apis = apis
        self._callers = callers
        self._tls = tls
        self._log = logger.bind(listener=listener.name)
        self._throttle = LogThrottle()
        self._server: asyncio.Server | None = None
        self._connections: set[asyncio.Task[None]] = set()
        self.connections_served = 0
        self.requests_served = 0
        self.closed_for_cause = 0
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

    async def start(self) -> None:
        self._server = await asyncio.start_server(
            self._serve,
            self.listener.host,
            self.listener.port,
            ssl=self._tls.context if self._tls is not None else None,
            ssl_handshake_timeout=KAFKA_TLS_HANDSHAKE_MS_MAX / 1000 if self._tls else None,
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

    # ----- one connection -------------------------------------------------------------------

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

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        address = writer.get_extra_info("peername")
        peer = f"{address[0]}:{address[1]}" if isinstance(address, tuple) else str(address)
        if len(self._connections) >= KAFKA_CONNECTIONS_MAX:
            self._closed_for_cause(
                peer, "too_many_connections", f"{KAFKA_CONNECTIONS_MAX} connections are open", 0
            )
            writer.close()
            return
        self._connections.add(task)
        self.connections_served += 1
        try:
            await self._connection(reader, writer, peer)
        except (ConnectionError, ssl.SSLError, OSError):
            pass  # the peer went away or broke TLS: nothing to answer
        finally:
            self._connections.discard(task)
            writer.close()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(writer.wait_closed(), 1)

    async def _read_frame(self, reader: asyncio.StreamReader, peer: str) -> bytes | None:
        """The next request frame without its size, or None when the connection ends (closed
        by the client, idle, or for cause)."""
        try:
            head = await asyncio.wait_for(
                reader.readexactly(4), KAFKA_CONNECTION_IDLE_MS_MAX / 1000
            )
        except asyncio.IncompleteReadError as exc:
            if exc.partial:
                self._closed_for_cause(
                    peer, "truncated_size", "the connection ended inside a size prefix", 0
                )
            return None
        except TimeoutError:
            self._log.info("kafka_connection_idle", peer=peer, action="connection closed")
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
        try:
            return await asyncio.wait_for(reader.readexactly(size), KAFKA_FRAME_READ_MS_MAX / 1000)
        except asyncio.IncompleteReadError as exc:
            self._closed_for_cause(
                peer,
                "truncated_frame",
                f"the connection ended after {len(exc.partial)} of {size} bytes",
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

    async def answer(self, frame: bytes, session: Session) -> bytes | None:
        """The size-prefixed answer to one request frame, or None when the connection must be
        closed (the frame is malformed, or answering it failed: both logged)."""
        try:
            request = decode_request(frame)
        except MalformedRequestError as exc:
            self._closed_for_cause(
                session.caller.peer, "malformed_request", str(exc), 4 + len(frame)
            )
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
            data = encode_response(request.correlation_id, response)
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
        self.requests_served += 1
        return data

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
