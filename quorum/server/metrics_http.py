"""The metrics listener (``metrics.listener``): a small HTTP server of this project's own in place
of ``prometheus_client``'s ``start_http_server``, serving the same registry output
(docs/operating.md#the-metrics-listener).

``prometheus_client``'s server answered any path and method and kept one thread per connection
for as long as the connection wanted: a thousand half-sent requests held a thousand threads.
This one answers ``GET /metrics`` (and ``HEAD``) and nothing else (404), bounds the time and
bytes of a request head and the connections open at once, and holds no thread while a
connection waits.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import gzip
import socket
import threading
import urllib.parse
from collections.abc import Sequence
from typing import Any, Final

from prometheus_client import CollectorRegistry
from prometheus_client.exposition import choose_encoder

from quorum.logs import LogThrottle

__all__ = [
    "METRICS_CONNECTIONS_MAX",
    "METRICS_REQUEST_HEAD_BYTES_MAX",
    "METRICS_REQUEST_READ_MS_MAX",
    "METRICS_RESPONSE_WRITE_MS_MAX",
    "MetricsHttpServer",
]

# A request's line and headers must arrive within this, or the connection is closed: Prometheus
# sends them in one packet, so a request still incomplete after it is a slow client or an
# attack (prometheus_client's own server waited forever, one thread per such request). Our
# choice, well under Prometheus' default scrape timeout of 10 s.
METRICS_REQUEST_READ_MS_MAX: Final = 5_000
# A request's line and headers may hold at most this many bytes (Prometheus sends a few hundred;
# http.server's default line bound is 64 KiB).
METRICS_REQUEST_HEAD_BYTES_MAX: Final = 16 * 1024
# Connections open at once. Past it, the oldest connection that has not sent its request yet is
# closed to make room (a scrape sends its request at once, so it is never the one closed); when
# none is waiting, the new connection is closed at once. Our choice: each connection costs a
# socket and a small buffer on one event loop, not a thread, and a node is scraped by a few
# Prometheus servers.
METRICS_CONNECTIONS_MAX: Final = 256
# The scraper must take the answer within this (a large cluster's exposition is some hundreds of
# KB); then the connection is closed. Prometheus' default scrape timeout.
METRICS_RESPONSE_WRITE_MS_MAX: Final = 10_000


def _http_response(
    status: str, headers: Sequence[tuple[str, str]], body: bytes, head: bool
) -> bytes:
    lines = [f"HTTP/1.1 {status}", *(f"{name}: {value}" for name, value in headers)]
    lines += [f"Content-Length: {len(body)}", "Connection: close", "", ""]
    return "\r\n".join(lines).encode("latin-1") + (b"" if head else body)


NOT_FOUND_BODY: Final = b"Not Found: this port serves GET /metrics only\n"


class MetricsHttpServer:
    """The metrics listener (``metrics.listener``): answers ``GET /metrics`` (and ``HEAD``)
    with the registry's exposition, in the format and encoding the scraper accepts
    (``prometheus_client``'s ``choose_encoder``, gzip when asked), and 404 to every other path
    or method; a request that is not a request line is 400. It serves only what it exists for
    (docs/security.md#plaintext-ports).

    One thread runs an event loop of its own: a request's line and headers must arrive within
    ``METRICS_REQUEST_READ_MS_MAX`` and hold at most ``METRICS_REQUEST_HEAD_BYTES_MAX``, else
    the connection is closed; at most ``METRICS_CONNECTIONS_MAX`` connections are open (see
    that bound for who is closed beyond it). A connection holds no thread while it waits for
    its request. Each answer closes its connection. The exposition is rendered in one more
    thread, one scrape at a time, since a scrape may wait up to ``SNAPSHOT_WAIT_S`` for the
    node's loop. Connections closed for cause are logged as ``metrics_connection_closed``
    (throttled, ``LogThrottle``) and counted in ``closed_for_cause``."""

    def __init__(
        self, registry: CollectorRegistry, host: str, port: int, *, logger: Any = None
    ) -> None:
        """Binds ``host:port`` at once (raises ``OSError``); ``start`` serves it."""
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        self._socket = socket.create_server((host, port), family=family)
        self._registry = registry
        self._log = logger
        self._throttle = LogThrottle()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stopping: asyncio.Event | None = None
        self._ready = threading.Event()
        self._thread: threading.Thread | None = None
        self._renderer = concurrent.futures.ThreadPoolExecutor(
            max_workers=1, thread_name_prefix="metrics-render"
        )
        self._connections: set[asyncio.Task[None]] = set()
        # Connections that have not sent their request yet, oldest first (a dict as an ordered
        # set): the ones closed first when the bound is reached.
        self._waiting: dict[asyncio.Task[None], None] = {}
        self._evicted: set[asyncio.Task[None]] = set()
        self.closed_for_cause = 0
        self.requests_served = 0

    @property
    def port(self) -> int:
        return int(self._socket.getsockname()[1])

    @property
    def open_connections(self) -> int:
        return len(self._connections)

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="metrics-http", daemon=True)
        self._thread.start()
        self._ready.wait(timeout=10)

    def stop(self) -> None:
        """Close the listener and every connection, and end the thread (blocking)."""
        loop, stopping, thread = self._loop, self._stopping, self._thread
        if loop is not None and stopping is not None:
            with contextlib.suppress(RuntimeError):  # the loop already ended
                loop.call_soon_threadsafe(stopping.set)
        if thread is not None:
            thread.join(timeout=10)
        self._renderer.shutdown(wait=False, cancel_futures=True)
        self._socket.close()

    def _run(self) -> None:
        asyncio.run(self._main())

    async def _main(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._stopping = asyncio.Event()
        server = await asyncio.start_server(
            self._serve, sock=self._socket, limit=METRICS_REQUEST_HEAD_BYTES_MAX
        )
        self._ready.set()
        try:
            await self._stopping.wait()
        finally:
            server.close()
            for task in list(self._connections):
                task.cancel()
            await asyncio.gather(*self._connections, return_exceptions=True)

    def _closed(self, peer: str, reason: str, detail: str) -> None:
        self.closed_for_cause += 1
        count = self._throttle.count(("metrics_connection_closed", reason))
        if self._log is not None and count is not None:
            self._log.info(
                "metrics_connection_closed", peer=peer, reason=reason, detail=detail, count=count
            )

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        address = writer.get_extra_info("peername")
        peer = f"{address[0]}:{address[1]}" if isinstance(address, tuple) else str(address)
        if len(self._connections) >= METRICS_CONNECTIONS_MAX:
            oldest = next(iter(self._waiting), None)
            if oldest is None:
                self._closed(
                    peer,
                    "too_many_connections",
                    f"{len(self._connections)} connections are being answered; allowed: "
                    f"{METRICS_CONNECTIONS_MAX}",
                )
                writer.close()
                return
            del self._waiting[oldest]
            self._evicted.add(oldest)
            oldest.cancel()  # its connection is closed by its own task
        self._connections.add(task)
        self._waiting[task] = None
        try:
            try:
                head = await asyncio.wait_for(
                    reader.readuntil(b"\r\n\r\n"), METRICS_REQUEST_READ_MS_MAX / 1000
                )
            except TimeoutError:
                self._closed(
                    peer,
                    "request_timeout",
                    f"no complete request within {METRICS_REQUEST_READ_MS_MAX} ms",
                )
                return
            except asyncio.LimitOverrunError:
                self._closed(
                    peer,
                    "request_too_large",
                    f"a request line and headers over {METRICS_REQUEST_HEAD_BYTES_MAX} bytes",
                )
                return
            except asyncio.CancelledError:
                if task not in self._evicted:
                    raise  # the listener stops
                self._evicted.discard(task)
                self._closed(
                    peer,
                    "too_many_connections",
                    "closed without a complete request to make room for a new connection "
                    f"({METRICS_CONNECTIONS_MAX} were open)",
                )
                return
            finally:
                self._waiting.pop(task, None)
            answer = await self._answer(head)
            writer.write(answer)
            await asyncio.wait_for(writer.drain(), METRICS_RESPONSE_WRITE_MS_MAX / 1000)
            self.requests_served += 1
        except (ConnectionError, TimeoutError, asyncio.IncompleteReadError):
            pass  # the scraper went away, or did not take its answer
        finally:
            self._connections.discard(task)
            writer.close()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(writer.wait_closed(), 1)

    async def _answer(self, head: bytes) -> bytes:
        """The whole HTTP answer to one request head."""
        lines = head.decode("latin-1").split("\r\n")
        parts = lines[0].split(" ")
        if len(parts) != 3 or not parts[2].startswith("HTTP/"):
            return _http_response("400 Bad Request", (), b"Bad Request\n", head=False)
        method, target, _ = parts
        headers: dict[str, str] = {}
        for line in lines[1:]:
            name, sep, value = line.partition(":")
            if sep:
                headers[name.strip().lower()] = value.strip()
        is_head = method == "HEAD"
        path = urllib.parse.urlsplit(target).path
        if method not in ("GET", "HEAD") or path != "/metrics":
            return _http_response(
                "404 Not Found", (("Content-Type", "text/plain"),), NOT_FOUND_BODY, head=is_head
            )
        loop = asyncio.get_running_loop()
        body, response_headers = await loop.run_in_executor(
            self._renderer,
            self._render,
            headers.get("accept", ""),
            headers.get("accept-encoding", ""),
        )
        return _http_response("200 OK", response_headers, body, head=is_head)

    def _render(self, accept: str, accept_encoding: str) -> tuple[bytes, list[tuple[str, str]]]:
        """The registry's exposition in the format and encoding the scraper accepts."""
        encoder, content_type = choose_encoder(accept)
        body = encoder(self._registry)
        headers = [("Content-Type", content_type)]
        if "gzip" in accept_encoding.lower():
            body = gzip.compress(body)
            headers.append(("Content-Encoding", "gzip"))
        return body, headers
