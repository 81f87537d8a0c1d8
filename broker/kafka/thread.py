"""The broker's own work first: its Kafka listeners run on an event loop of their own, in a
thread of their own (docs/kafka-listener.md#the-brokers-own-work-first).

A broker's event loop runs what keeps it in the cluster: the Raft observer that fetches the
metadata log, the heartbeats to the active controller (miss ``broker.session.timeout.ms`` of
them and the broker is fenced), reconciliation and the gRPC listener. Kafka's clients are
served elsewhere, on the loop of ``KafkaListenerThread``, so however many requests they send
and however long one takes, nothing of theirs ever queues in front of a heartbeat or a Fetch:
the two loops only share the interpreter, which Python hands from a busy thread to a waiting
one every switch interval (5 ms, ``sys.getswitchinterval``). Kafka separates them the same way:
its network and request-handler threads are not the threads of its lifecycle manager and
metadata loader.

What a Kafka request needs from the broker's loop, it asks for there (``BrokerLoop.run``): a
forwarded write goes out on the broker's controller client (``ForwardingOnBrokerLoop``), and a
read that waits for its connection's write waits on the broker's driver. The image is read
directly: it is immutable and replaced by one reference assignment.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Coroutine, Sequence
from typing import Any, Final, TypeVar

from broker.kafka.apis import AdminForwarder
from broker.kafka.quota import awaited_elsewhere
from broker.kafka.server import KafkaListenerServer
from quorum.config import Listener
from quorum.security.identity import Caller

__all__ = ["BrokerLoop", "ForwardingOnBrokerLoop", "KafkaListenerThread", "ListenerStartError"]

T = TypeVar("T")

# How long stopping waits for the listeners' thread to end once its loop was asked to stop (the
# listeners close their connections first, each within a second).
THREAD_JOIN_MS_MAX: Final = 10_000


class ListenerStartError(OSError):
    """A Kafka listener could not open (its port is taken, its address not this host's)."""

    def __init__(self, listener: Listener, error: OSError) -> None:
        super().__init__(error.errno, str(error))
        self.listener = listener


class BrokerLoop:
    """Runs coroutines on the broker's own loop for code on the listeners' loop. Until it is
    attached (and on the broker's loop itself) a coroutine is simply awaited."""

    def __init__(self) -> None:
        self._loop: asyncio.AbstractEventLoop | None = None

    def attach(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop

    async def run(self, coroutine: Coroutine[Any, Any, T]) -> T:
        """The result of ``coroutine`` run on the broker's loop. Its time there is not the
        current Kafka request's cost (``awaited_elsewhere``); cancelling the caller cancels it."""
        loop = self._loop
        if loop is None or loop is asyncio.get_running_loop():
            return await coroutine
        future = asyncio.run_coroutine_threadsafe(coroutine, loop)
        return await awaited_elsewhere(asyncio.wrap_future(future))


class ForwardingOnBrokerLoop:
    """An ``AdminForwarder`` whose calls run on the broker's loop, where its controller client
    (gRPC channels bound to that loop) lives."""

    def __init__(self, forwarder: AdminForwarder, broker_loop: BrokerLoop) -> None:
        self._forwarder = forwarder
        self._broker_loop = broker_loop

    async def call(self, method: str, request: Any, caller: Caller, timeout_ms: int) -> Any:
        return await self._broker_loop.run(
            self._forwarder.call(method, request, caller, timeout_ms)
        )


class KafkaListenerThread:
    """Every Kafka listener of a broker, served by one event loop in one thread."""

    def __init__(self, servers: Sequence[KafkaListenerServer]) -> None:
        self.servers = list(servers)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None

    def _run(self, loop: asyncio.AbstractEventLoop) -> None:
        asyncio.set_event_loop(loop)
        try:
            loop.run_forever()
        finally:
            loop.run_until_complete(loop.shutdown_asyncgens())
            loop.close()

    async def start(self) -> None:
        """Start the thread and open every listener in it; raises ``ListenerStartError``."""
        loop = asyncio.new_event_loop()
        self._loop = loop
        self._thread = threading.Thread(
            target=self._run, args=(loop,), name="kafka-listeners", daemon=True
        )
        self._thread.start()
        await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(self._start_all(), loop))

    async def run(self, coroutine: Coroutine[Any, Any, T]) -> T:
        """The result of ``coroutine`` run on the listeners' loop (from the broker's loop)."""
        assert self._loop is not None, "the listeners' thread is not running"
        return await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(coroutine, self._loop))

    def call_soon(self, callback: Callable[..., object], *args: object) -> None:
        """Run ``callback(*args)`` on the listeners' loop soon (from any thread); nothing once
        the thread has stopped."""
        loop = self._loop
        if loop is not None and not loop.is_closed():
            loop.call_soon_threadsafe(callback, *args)

    async def _start_all(self) -> None:
        for server in self.servers:
            try:
                await server.start()
            except OSError as exc:
                raise ListenerStartError(server.listener, exc) from None

    async def _stop_all(self) -> None:
        await asyncio.gather(*(server.stop() for server in self.servers))

    async def stop(self) -> None:
        """Close every listener and its connections, then end the thread (from the broker's
        loop, which keeps running meanwhile: a connection may be waiting on it)."""
        loop, thread = self._loop, self._thread
        if loop is None or thread is None:
            return
        self._loop = self._thread = None
        try:
            await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(self._stop_all(), loop))
        finally:
            loop.call_soon_threadsafe(loop.stop)
            await asyncio.to_thread(thread.join, THREAD_JOIN_MS_MAX / 1000)
