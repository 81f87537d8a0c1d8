"""A fault-injecting TCP proxy: network partitions, one-way loss, resets and delay between real
processes on a machine that has only loopback (docs/faults.md).

Every directed link "src -> dst" (the connections ``src`` opens to ``dst``) gets a listening
port of its own; the harness writes that port into ``src``'s ``controller.quorum.voters`` for
voter ``dst``. The proxy forwards bytes and never parses them (TLS stays end to end). A link is
in one of three modes, with optional delay:

- PASS: bytes flow, each chunk held ``delay_ms`` +- ``jitter_ms`` (order kept per connection);
- BLACKHOLE: bytes stop in both directions of the link's connections and new connections are
  accepted but not forwarded - to both peers it looks like packets vanishing: no error, only
  silence, so deadlines and Raft timeouts fire. The proxy stops reading, so TCP flow control
  holds what the peers keep sending; at most ``QUEUED_CHUNKS_MAX`` chunks per direction are
  buffered in the proxy;
- RESET: every connection of the link is closed at once with a TCP reset, and new ones are
  reset on accept - as a peer whose process died and whose OS answers.

When a blackholed link heals, its connections that saw the blackhole are reset rather than
delivering bytes seconds late (a peer would long have timed those requests out; gRPC simply
reconnects), so a heal is clean: what flows afterwards is new traffic.

A request/response protocol on a link only goes one way: "src -> dst blackholed" means src's
calls to dst get no answer, while dst's own calls to src (the link dst -> src) still work. That
is how one-way loss is modelled.

One daemon thread runs an asyncio loop for all links; every public method is thread-safe.
Randomness (jitter) comes from ``random.Random(seed)``.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import random
import socket
import struct
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from types import TracebackType

CHUNK_BYTES = 65_536
QUEUED_CHUNKS_MAX = 16  # per direction of one connection: at most 1 MiB held in the proxy
CONNECTIONS_PER_LINK_MAX = 256
CONNECT_TIMEOUT_S = 5.0
STOP_TIMEOUT_S = 5.0


class LinkMode(enum.StrEnum):
    PASS = "pass"
    BLACKHOLE = "blackhole"
    RESET = "reset"


@dataclass(frozen=True)
class LinkFaults:
    mode: LinkMode = LinkMode.PASS
    delay_ms: int = 0
    jitter_ms: int = 0


PASS = LinkFaults()


class _Reset(Exception):
    """The connection must die (RESET mode, or a heal after a blackhole)."""


@dataclass(eq=False)
class _Connection:
    link: Link
    downstream: asyncio.StreamWriter
    upstream: asyncio.StreamWriter | None = None
    blackholed: bool = False

    async def passable(self) -> None:
        """Return once bytes may flow; raise ``_Reset`` if the connection must die instead."""
        link = self.link
        while link.faults.mode is LinkMode.BLACKHOLE:
            self.blackholed = True
            await link.wait_changed()
        if self.blackholed or link.faults.mode is LinkMode.RESET:
            raise _Reset

    def abort(self) -> None:
        for writer in (self.downstream, self.upstream):
            if writer is not None:
                _reset(writer)


def _reset(writer: asyncio.StreamWriter) -> None:
    """Close with a TCP reset (SO_LINGER 0), not a graceful FIN."""
    sock = writer.get_extra_info("socket")
    if sock is not None:
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    writer.transport.abort()


@dataclass(eq=False)
class Link:
    """One directed link: listens on ``listen_port``, forwards to ``target``."""

    src: str
    dst: str
    listen_port: int
    target: tuple[str, int]
    faults: LinkFaults = PASS
    bytes_forwarded: int = 0
    connections: int = 0  # accepted so far
    _sock: socket.socket | None = None
    _open: set[_Connection] = field(default_factory=set)
    _changed: asyncio.Event | None = None
    _server: asyncio.Server | None = None

    async def wait_changed(self) -> None:
        assert self._changed is not None
        await self._changed.wait()

    def _notify(self) -> None:
        """Wake every pump waiting on this link (loop thread only)."""
        if self._changed is not None:
            self._changed.set()
            self._changed = asyncio.Event()


class FaultProxy:
    """The links of one cluster, served by one background thread."""

    def __init__(self, seed: int) -> None:
        self._rng = random.Random(seed)
        self._links: dict[tuple[str, str], Link] = {}
        self._lock = threading.Lock()
        self._timeline: list[tuple[float, str]] = []
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._tasks: set[asyncio.Task[None]] = set()

    # ----- set-up ---------------------------------------------------------------------------

    def add_link(self, src: str, dst: str, target_port: int) -> int:
        """A link ``src -> dst`` forwarding to 127.0.0.1:``target_port``; returns the port to
        give ``src`` for ``dst``. Binds at once (before ``start``), so the port is reserved."""
        with self._lock:
            existing = self._links.get((src, dst))
            if existing is not None:
                assert existing.target == ("127.0.0.1", target_port), (src, dst)
                return existing.listen_port
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind(("127.0.0.1", 0))
            sock.listen(64)
            port = int(sock.getsockname()[1])
            link = Link(src, dst, port, ("127.0.0.1", target_port), _sock=sock)
            self._links[(src, dst)] = link
            if self._loop is not None:
                asyncio.run_coroutine_threadsafe(self._serve_link(link), self._loop).result(5)
            return port

    def links(self) -> list[Link]:
        with self._lock:
            return list(self._links.values())

    def link(self, src: str, dst: str) -> Link:
        return self._links[(src, dst)]

    def start(self) -> None:
        assert self._thread is None, "already started"
        loop = asyncio.new_event_loop()
        self._loop = loop
        ready = threading.Event()

        def run() -> None:
            asyncio.set_event_loop(loop)
            loop.call_soon(ready.set)
            loop.run_forever()
            loop.close()

        self._thread = threading.Thread(target=run, name="fault-proxy", daemon=True)
        self._thread.start()
        ready.wait(STOP_TIMEOUT_S)
        for link in self.links():
            asyncio.run_coroutine_threadsafe(self._serve_link(link), loop).result(5)

    def stop(self) -> None:
        loop, thread = self._loop, self._thread
        if loop is None or thread is None:
            for link in self.links():
                if link._sock is not None:
                    link._sock.close()
            return
        with contextlib.suppress(Exception):
            asyncio.run_coroutine_threadsafe(self._shutdown(), loop).result(STOP_TIMEOUT_S)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(STOP_TIMEOUT_S)
        self._loop = None
        self._thread = None

    def __enter__(self) -> FaultProxy:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    # ----- faults ---------------------------------------------------------------------------

    def set(self, src: str, dst: str, faults: LinkFaults) -> None:
        """Put link ``src -> dst`` in ``faults`` now (existing and new connections)."""
        self._apply({(src, dst): faults}, f"{src}->{dst} {_describe(faults)}")

    def partition(self, *groups: Iterable[str]) -> None:
        """Links between different groups blackholed (both ways), links inside a group pass;
        links of nodes in no group keep their state."""
        member: dict[str, int] = {}
        for index, group in enumerate(groups):
            for node in group:
                member[node] = index
        changes: dict[tuple[str, str], LinkFaults] = {}
        for key in self._links:
            src, dst = key
            if src in member and dst in member:
                same = member[src] == member[dst]
                changes[key] = PASS if same else LinkFaults(LinkMode.BLACKHOLE)
        text = " | ".join(
            ",".join(sorted(n for n, i in member.items() if i == index))
            for index in range(len(groups))
        )
        self._apply(changes, f"partition {text}")

    def isolate(self, node: str) -> None:
        """Every link to and from ``node`` blackholed."""
        changes = {key: LinkFaults(LinkMode.BLACKHOLE) for key in self._links if node in key}
        self._apply(changes, f"isolate {node}")

    def one_way(self, src: str, dst: str) -> None:
        """``src -> dst`` blackholed; ``dst -> src`` untouched."""
        self._apply({(src, dst): LinkFaults(LinkMode.BLACKHOLE)}, f"drop {src}->{dst}")

    def reset(self, src: str, dst: str) -> None:
        self._apply({(src, dst): LinkFaults(LinkMode.RESET)}, f"reset {src}->{dst}")

    def heal(self) -> None:
        """Every link back to PASS without delay (connections that saw a blackhole reset)."""
        self._apply(dict.fromkeys(self._links, PASS), "heal")

    def timeline(self) -> list[tuple[float, str]]:
        with self._lock:
            return list(self._timeline)

    def _apply(self, changes: dict[tuple[str, str], LinkFaults], what: str) -> None:
        with self._lock:
            for key, faults in changes.items():
                self._links[key].faults = faults
            self._timeline.append((time.monotonic(), what))
            links = [self._links[key] for key in changes]
        loop = self._loop
        if loop is not None:
            asyncio.run_coroutine_threadsafe(self._changed(links), loop).result(5)

    async def _changed(self, links: list[Link]) -> None:
        for link in links:
            if link.faults.mode is LinkMode.RESET:
                for connection in list(link._open):
                    connection.abort()
            link._notify()

    # ----- the loop -------------------------------------------------------------------------

    async def _serve_link(self, link: Link) -> None:
        if link._server is not None:
            return
        link._changed = asyncio.Event()
        assert link._sock is not None
        link._server = await asyncio.start_server(
            lambda r, w: self._accept(link, r, w), sock=link._sock
        )

    async def _accept(
        self, link: Link, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        link.connections += 1
        if len(link._open) >= CONNECTIONS_PER_LINK_MAX or link.faults.mode is LinkMode.RESET:
            _reset(writer)
            return
        connection = _Connection(link, writer)
        link._open.add(connection)
        task = asyncio.current_task()
        if task is not None:
            self._tasks.add(task)
        try:
            await connection.passable()
            up_reader, up_writer = await asyncio.wait_for(
                asyncio.open_connection(*link.target), CONNECT_TIMEOUT_S
            )
            connection.upstream = up_writer
            pumps = [
                asyncio.create_task(self._pump(connection, reader, up_writer)),
                asyncio.create_task(self._pump(connection, up_reader, writer)),
            ]
            try:
                for finished in asyncio.as_completed(pumps):
                    await finished  # the first failure ends the connection
            finally:
                for pump in pumps:
                    pump.cancel()
                    with contextlib.suppress(BaseException):
                        await pump
        except (_Reset, OSError, TimeoutError, asyncio.IncompleteReadError):
            pass
        except asyncio.CancelledError:
            # The proxy shuts down. Ended, not cancelled: Python 3.11's start_server calls
            # task.exception() on the connection task, which a cancelled one raises (logged
            # as "Exception in callback ... CancelledError").
            pass
        finally:
            connection.abort()
            link._open.discard(connection)
            if task is not None:
                self._tasks.discard(task)

    async def _pump(
        self,
        connection: _Connection,
        source: asyncio.StreamReader,
        sink: asyncio.StreamWriter,
    ) -> None:
        """Forward one direction: chunks read, held for the link's delay, written in order.
        Any failure ends the whole connection (``_accept`` aborts both sides)."""
        link = connection.link
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue[tuple[float, bytes] | None] = asyncio.Queue(QUEUED_CHUNKS_MAX)

        async def read_side() -> None:
            while True:
                await connection.passable()
                data = await source.read(CHUNK_BYTES)
                if not data:
                    await queue.put(None)
                    return
                faults = link.faults
                delay_ms = faults.delay_ms
                if faults.jitter_ms:
                    delay_ms += self._rng.randint(-faults.jitter_ms, faults.jitter_ms)
                await queue.put((loop.time() + max(0, delay_ms) / 1000, data))

        async def write_side() -> None:
            while True:
                item = await queue.get()
                if item is None:
                    with contextlib.suppress(OSError):
                        sink.write_eof()
                    return
                due, data = item
                wait = due - loop.time()
                if wait > 0:
                    await asyncio.sleep(wait)
                await connection.passable()
                sink.write(data)
                await sink.drain()
                link.bytes_forwarded += len(data)

        reader_task = asyncio.create_task(read_side())
        writer_task = asyncio.create_task(write_side())
        try:
            done, _ = await asyncio.wait(
                {reader_task, writer_task}, return_when=asyncio.FIRST_EXCEPTION
            )
            for task in done:
                task.result()  # re-raise a failure: the connection ends
            await writer_task
        finally:
            for task in (reader_task, writer_task):
                task.cancel()
                with contextlib.suppress(BaseException):
                    await task

    async def _shutdown(self) -> None:
        for link in self.links():
            if link._server is not None:
                link._server.close()
            for connection in list(link._open):
                connection.abort()
            link._notify()
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        if tasks:  # let them end here, not be destroyed pending when the loop closes
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.gather(*tasks, return_exceptions=True), 2)
        for link in self.links():
            if link._server is not None:
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(link._server.wait_closed(), 1)


def _describe(faults: LinkFaults) -> str:
    text = str(faults.mode)
    if faults.delay_ms or faults.jitter_ms:
        text += f" delay {faults.delay_ms}+-{faults.jitter_ms} ms"
    return text
