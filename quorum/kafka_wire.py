"""A raw Kafka-protocol connection, as a client: one request at a time, no retries, no metadata
cache. For the tools and benchmarks that must ask one chosen broker a request a client library
does not expose (a Fetch by a topic id the application kept, a Metadata probe of one broker):
``metaquorum dev up``'s KIP-516 story and ``scripts/bench/peers.py --peer kafka``.

Requests and answers are kio entities (the codec the brokers' Kafka listener uses,
docs/kafka-listener.md#the-codec); the request header's version follows the request's class.
"""

from __future__ import annotations

import io
import socket
import ssl
from pathlib import Path
from typing import Any

from kio.index import load_response_schema
from kio.serial import entity_reader, entity_writer

__all__ = ["FRAME_BYTES_MAX", "KafkaWire", "request_frame", "tls_context"]

# An answer larger than this is refused rather than buffered: the peer is a broker we chose,
# but a wrong port could send anything.
FRAME_BYTES_MAX = 64 * 1024 * 1024


class KafkaWire:
    """One connection speaking Kafka frames."""

    def __init__(
        self,
        address: str,
        context: ssl.SSLContext | None,
        *,
        client_id: str = "metaquorum",
        timeout_s: float = 10.0,
    ) -> None:
        host, port = address.rsplit(":", 1)
        sock = socket.create_connection((host, int(port)), timeout=timeout_s)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.sock = context.wrap_socket(sock, server_hostname=host) if context else sock
        self.client_id = client_id
        self.correlation_id = 0

    def ask(self, request: Any) -> Any:
        """Send a kio request entity; return its decoded answer."""
        api_key, version = int(request.__api_key__), int(request.__version__)
        self.correlation_id += 1
        frame = request_frame(request, self.correlation_id, self.client_id)
        self.sock.sendall(len(frame).to_bytes(4, "big") + frame)
        size = int.from_bytes(self._read(4), "big", signed=True)
        if not 0 < size <= FRAME_BYTES_MAX:
            raise ConnectionError(
                f"an answer of {size} bytes: a Kafka frame is 1 to {FRAME_BYTES_MAX} bytes"
            )
        data = self._read(size)
        response_type = load_response_schema(api_key, version)
        _, header_bytes = entity_reader(response_type.__header_schema__)(data, 0)
        response, _ = entity_reader(response_type)(data, header_bytes)
        return response

    def _read(self, size: int) -> bytes:
        chunks = bytearray()
        while len(chunks) < size:
            chunk = self.sock.recv(size - len(chunks))
            if not chunk:
                raise ConnectionError("closed by the peer")
            chunks += chunk
        return bytes(chunks)

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> KafkaWire:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def request_frame(request: Any, correlation_id: int, client_id: str | None) -> bytes:
    """The bytes of a kio request entity after the size prefix: its header (of the version
    the request's class names) and its body."""
    request_type = type(request)
    header_type = request_type.__header_schema__
    buffer = io.BytesIO()
    entity_writer(header_type)(
        buffer,
        header_type(
            request_api_key=int(request_type.__api_key__),
            request_api_version=int(request_type.__version__),
            correlation_id=correlation_id,
            client_id=client_id,
        ),
    )
    entity_writer(request_type)(buffer, request)
    return buffer.getvalue()


def tls_context(ca: Path, keystore: Path) -> ssl.SSLContext:
    """mTLS as the client whose key and certificate are in ``keystore`` (one PEM file)."""
    context = ssl.create_default_context(cafile=str(ca))
    context.load_cert_chain(str(keystore))
    return context
