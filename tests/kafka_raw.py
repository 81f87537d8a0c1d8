"""A raw Kafka client for the process tests of the Kafka listener's edge (tests/test_kafka_*):
size-prefixed frames built with kio, over TLS (a client certificate) or plaintext, from a
chosen source address, with no retries, caches or backoff of its own, so a test sees exactly
what the broker did: an answer, its throttle time, or a closed connection.

Also the load generator of tests/process/test_kafka_load_process.py, run as a process of its own
(``python -m tests.kafka_raw <kind> ...``): it stops by itself at its deadline and prints one
JSON line with what it sent and saw.
"""

from __future__ import annotations

import argparse
import io
import json
import socket
import ssl
import sys
import threading
import time
from pathlib import Path
from typing import Any

from kio.index import load_request_schema, load_response_schema
from kio.serial import entity_reader, entity_writer

from broker.kafka.protocol import build

# A client's read of one answer gives up after this (the broker's own bound on a frame is 30 s).
ANSWER_WAIT_S = 30.0


def request_frame(api_key: int, version: int, values: dict[str, Any], correlation_id: int) -> bytes:
    """One size-prefixed request frame of ``api_key`` at ``version`` built from ``values``."""
    request_type = load_request_schema(api_key, version)
    header_type = request_type.__header_schema__
    buffer = io.BytesIO()
    entity_writer(header_type)(
        buffer,
        header_type(
            request_api_key=api_key,
            request_api_version=version,
            correlation_id=correlation_id,
            client_id="kafka-raw",
        ),
    )
    entity_writer(request_type)(buffer, build(request_type, values))
    data = buffer.getvalue()
    return len(data).to_bytes(4, "big") + data


def decode_answer(api_key: int, version: int, data: bytes) -> Any:
    """The response entity in ``data`` (one frame without its size prefix)."""
    response_type = load_response_schema(api_key, version)
    _, header_bytes = entity_reader(response_type.__header_schema__)(data, 0)
    response, _ = entity_reader(response_type)(data, header_bytes)
    return response


class RawConnection:
    """One connection to a Kafka listener. ``tls``: (CA file, client keystore PEM) or None for
    plaintext; ``source``: the local address to connect from (any 127.0.0.0/8 address works on
    loopback)."""

    def __init__(
        self,
        address: str,
        tls: tuple[str, str] | None = None,
        *,
        source: str | None = None,
        timeout_s: float = ANSWER_WAIT_S,
    ) -> None:
        host, port = address.rsplit(":", 1)
        sock = socket.create_connection(
            (host, int(port)),
            timeout=timeout_s,
            source_address=(source, 0) if source is not None else None,
        )
        if tls is not None:
            ca, keystore = tls
            context = ssl.create_default_context(cafile=ca)
            context.load_cert_chain(keystore)
            context.check_hostname = False
            sock = context.wrap_socket(sock, server_hostname=host)
        self.sock = sock
        self.correlation_id = 0

    def send(self, frame: bytes) -> None:
        self.sock.sendall(frame)

    def ask(self, api_key: int, version: int, values: dict[str, Any]) -> Any:
        """Send one request and decode its answer; raises ``ConnectionError`` when the broker
        closed the connection instead."""
        self.correlation_id += 1
        self.send(request_frame(api_key, version, values, self.correlation_id))
        data = self.read_answer()
        if data is None:
            raise ConnectionError("the broker closed the connection without an answer")
        return decode_answer(api_key, version, data)

    def read_answer(self) -> bytes | None:
        """The next answer frame without its size, or None when the connection was closed."""
        head = self._read(4)
        if head is None:
            return None
        return self._read(int.from_bytes(head, "big"))

    def closed_by_peer(self) -> bool:
        """Whether the broker has closed the connection (reads its end, or waits for it)."""
        try:
            return self.sock.recv(1) == b""
        except (ConnectionError, ssl.SSLError):
            return True

    def _read(self, size: int) -> bytes | None:
        chunks = bytearray()
        while len(chunks) < size:
            try:
                chunk = self.sock.recv(size - len(chunks))
            except (ConnectionError, ssl.SSLError):
                return None
            if not chunk:
                return None
            chunks += chunk
        return bytes(chunks)

    def close(self) -> None:
        self.sock.close()


def metadata_values(topics: list[str] | None) -> dict[str, Any]:
    """Metadata v12 naming ``topics`` (None: every topic)."""
    if topics is None:
        return {"topics": None}
    return {"topics": [{"name": name, "topic_id": None} for name in topics]}


# ----- the load generator -----------------------------------------------------------------------


def _create_flood(args: argparse.Namespace, deadline: float, counts: dict[str, int]) -> None:
    """Send the big CreateTopics frame on fresh connections until the deadline."""
    frame = Path(args.frame).read_bytes()
    while time.monotonic() < deadline:
        try:
            connection = RawConnection(args.address, (args.ca, args.keystore))
        except OSError:
            counts["connect_failures"] += 1
            continue
        try:
            connection.send(frame)
            counts["sent"] += 1
            if connection.read_answer() is None:
                counts["closed"] += 1
            else:
                counts["answered"] += 1
        except OSError:
            counts["closed"] += 1
        finally:
            connection.close()


def _metadata_flood(args: argparse.Namespace, deadline: float, counts: dict[str, int]) -> None:
    """Ask for every topic's metadata, one request at a time, until the deadline."""
    connection: RawConnection | None = None
    while time.monotonic() < deadline:
        try:
            if connection is None:
                connection = RawConnection(args.address, (args.ca, args.keystore))
            answer = connection.ask(3, 12, metadata_values(None))
            counts["answered"] += 1
            if answer.throttle_time.total_seconds() > 0:
                counts["throttled"] += 1
        except OSError:
            counts["closed"] += 1
            if connection is not None:
                connection.close()
            connection = None
    if connection is not None:
        connection.close()


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.kafka_raw")
    parser.add_argument("kind", choices=("create", "metadata"))
    parser.add_argument("address")
    parser.add_argument("ca")
    parser.add_argument("keystore")
    parser.add_argument("seconds", type=float)
    parser.add_argument("--connections", type=int, default=1)
    parser.add_argument("--frame", help="the CreateTopics frame to send (create)")
    args = parser.parse_args(argv)
    deadline = time.monotonic() + args.seconds
    work = _create_flood if args.kind == "create" else _metadata_flood
    counts_per_thread = [
        {"sent": 0, "answered": 0, "closed": 0, "throttled": 0, "connect_failures": 0}
        for _ in range(args.connections)
    ]
    threads = [
        threading.Thread(target=work, args=(args, deadline, counts), daemon=True)
        for counts in counts_per_thread
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=args.seconds + 2 * ANSWER_WAIT_S)
    total = {key: sum(c[key] for c in counts_per_thread) for key in counts_per_thread[0]}
    print(json.dumps({"kind": args.kind, **total}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
