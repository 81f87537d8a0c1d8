"""Where the AdminClient's calls go (the module docstring of ``quorum.admin`` says it for users):
the bootstrap addresses, the active controller once known, NOT_CONTROLLER redirects, bounded
retries with exponential backoff and jitter, one deadline per call, and the offset of the
client's own last write (read-your-writes). Each attempt gets the call's remaining time as its
gRPC deadline; sleeps, the clock and the jitter are injected, so tests record them.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from typing import Any, Final

import grpc

from quorum.admin.messages import NO_OFFSET, optional_id
from quorum.errors import (
    AdminConnectionError,
    AdminError,
    AdminTimeoutError,
    AdminTransportError,
    ErrorCode,
    NotControllerError,
    NotLeaderOrFollowerError,
    error_for,
    error_name,
)
from quorum.rpc.v1 import admin_pb2_grpc, raft_pb2_grpc
from quorum.security.tls import SyncChannels

__all__ = ["CHANNEL_OPTIONS", "RETRY_BACKOFF_JITTER", "Router", "parse_bootstrap"]

RETRY_BACKOFF_JITTER: Final = 0.2  # Kafka's ExponentialBackoff jitter
# gRPC statuses after which another attempt (on the next address) may succeed.
_RETRIABLE_STATUSES: Final = frozenset(
    {grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.RESOURCE_EXHAUSTED}
)
# The client's channels: answers up to 64 MiB (a listing of many topics), keepalive.
CHANNEL_OPTIONS: Final[list[tuple[str, Any]]] = [
    ("grpc.max_receive_message_length", 64 * 1024 * 1024),
    ("grpc.keepalive_time_ms", 30_000),
]
_VOTER_CHANGE_METHODS: Final = frozenset({"AddRaftVoter", "RemoveRaftVoter"})
_QUORUM_SERVICE_METHODS: Final = frozenset({"DescribeQuorum", *_VOTER_CHANGE_METHODS})


def parse_bootstrap(bootstrap: str | Sequence[str]) -> list[str]:
    """``"host:port,host:port"`` (or a list of them) as gRPC targets; ``[::1]:9093`` for IPv6.
    Raises ``ValueError`` naming a bad entry."""
    items = bootstrap.split(",") if isinstance(bootstrap, str) else list(bootstrap)
    addresses: list[str] = []
    for item in items:
        address = item.strip()
        host, _, port = address.rpartition(":")
        if not host or not port.isdigit() or not 0 < int(port) <= 65535:
            raise ValueError(f"{address!r} is not HOST:PORT (e.g. 127.0.0.1:19091)")
        if address not in addresses:
            addresses.append(address)
    if not addresses:
        raise ValueError("no bootstrap address given")
    return addresses


def _status_name(exc: grpc.RpcError) -> tuple[grpc.StatusCode | None, str]:
    code = getattr(exc, "code", None)
    details = getattr(exc, "details", None)
    status = code() if callable(code) else None
    text = details() if callable(details) else str(exc)
    return status, str(text or "")


class Router:
    """Sends one call to the right node, with redirects and bounded retries (``call``)."""

    def __init__(
        self,
        addresses: list[str],
        channels: SyncChannels,
        *,
        retries_max: int,
        retry_backoff_s: float,
        retry_backoff_max_s: float,
        clock: Callable[[], float],
        sleep: Callable[[float], None],
        rng: random.Random,
        security_protocol: str,
    ) -> None:
        """``addresses``: the bootstrap list (``parse_bootstrap``), to which learned addresses
        are added."""
        self.addresses = addresses
        self._channels = channels
        self._retries_max = retries_max
        self._retry_backoff_s = retry_backoff_s
        self._retry_backoff_max_s = retry_backoff_max_s
        self._clock = clock
        self._sleep = sleep
        self._rng = rng
        self._security_protocol = security_protocol
        self.controller: str | None = None  # the active controller's address, once known
        self._next_index = 0  # where the next call without a known controller starts
        self.written_offset = NO_OFFSET  # the highest metadata_offset of our own mutations

    def learn(self, address: str) -> None:
        if address not in self.addresses:
            self.addresses.append(address)

    def _invoke(self, address: str, method: str, request: Any, timeout_s: float) -> Any:
        channel = self._channels.get(address)
        if method in _QUORUM_SERVICE_METHODS:
            stub: Any = raft_pb2_grpc.QuorumServiceStub(channel)
        else:
            stub = admin_pb2_grpc.AdminServiceStub(channel)
        return getattr(stub, method)(request, timeout=timeout_s)

    def _first_address(self) -> str:
        if self.controller is not None:
            return self.controller
        return self.addresses[self._next_index % len(self.addresses)]

    def _after(self, address: str) -> str:
        """The address to try after ``address`` failed; also where the next call starts."""
        self._next_index = (self.addresses.index(address) + 1) % len(self.addresses)
        return self.addresses[self._next_index]

    def _backoff_s(self, retry: int) -> float:
        base = min(self._retry_backoff_max_s, self._retry_backoff_s * 2.0 ** min(retry, 30))
        jitter = 1 + RETRY_BACKOFF_JITTER * (2 * self._rng.random() - 1)
        return min(self._retry_backoff_max_s, base * jitter)

    def call(self, method: str, request: Any, deadline: float, *, mutation: bool) -> Any:
        """One RPC with redirects and bounded retries; returns a response whose request-level
        error_code is NONE, or raises ``AdminError``.

        At most ``retries_max + 1`` attempts, each with the call's remaining time as its gRPC
        deadline. Every retry backs off first, except the first redirect to a controller named
        by a NOT_CONTROLLER answer (so stale answers naming each other still back off).
        """
        address = self._first_address()
        failures: list[str] = []
        redirected_to: set[str] = set()
        last_status: str | None = None
        last_error: AdminError | None = None
        fresh_redirect = False
        for attempt in range(self._retries_max + 1):
            if attempt > 0 and not fresh_redirect:
                pause = self._backoff_s(attempt - 1)
                self._sleep(min(pause, max(0.0, deadline - self._clock())))
            fresh_redirect = False
            remaining = deadline - self._clock()
            if remaining <= 0:
                raise self._timed_out(method, mutation, failures)
            try:
                response = self._invoke(address, method, request, remaining)
            except grpc.RpcError as exc:
                status, details = _status_name(exc)
                last_status = status.name if status is not None else type(exc).__name__
                failures.append(f"{address}: {last_status} ({details})")
                if self.controller == address:
                    self.controller = None
                if status is grpc.StatusCode.DEADLINE_EXCEEDED:
                    raise self._timed_out(method, mutation, failures) from None
                if status not in _RETRIABLE_STATUSES:
                    raise AdminTransportError(
                        f"{method} failed at {address}: {last_status} ({details})",
                        status=last_status,
                        failures=failures,
                    ) from None
                last_error = None
                address = self._after(address)
                continue

            code = response.error_code
            message = response.error_message
            if method == "DescribeQuorum":
                if code == ErrorCode.NONE and response.leader_id >= 0:
                    return response
                if code not in (ErrorCode.NONE, ErrorCode.NOT_LEADER_OR_FOLLOWER):
                    raise error_for(code, message)
                # No leader known (an election is under way): back off, ask another node.
                message = message or "no leader is known"
                failures.append(f"{address}: NOT_LEADER_OR_FOLLOWER ({message})")
                last_error = NotLeaderOrFollowerError(message)
                address = self._after(address)
                continue
            if method in _VOTER_CHANGE_METHODS and code == ErrorCode.NOT_LEADER_OR_FOLLOWER:
                # Voter changes go to the Raft leader (the active controller): follow it.
                failures.append(f"{address}: NOT_LEADER_OR_FOLLOWER ({message})")
                last_error = NotLeaderOrFollowerError(message)
                endpoint = response.leader_endpoint or None
                if endpoint is not None and endpoint != address:
                    self.learn(endpoint)
                    fresh_redirect = endpoint not in redirected_to
                    redirected_to.add(endpoint)
                    address = endpoint
                else:
                    address = self._after(address)
                continue
            if code == ErrorCode.NONE:
                if method in _VOTER_CHANGE_METHODS:
                    return response
                if mutation:
                    # Only the active controller accepts mutations: remember it.
                    self.controller = address
                    self.written_offset = max(self.written_offset, response.metadata_offset)
                return response

            failures.append(f"{address}: {error_name(code)} ({message})")
            if code == ErrorCode.NOT_CONTROLLER:
                controller_id = optional_id(response.controller_id)
                endpoint = response.controller_endpoint or None
                last_error = NotControllerError(
                    message, controller_id=controller_id, controller_endpoint=endpoint
                )
                if self.controller == address:
                    self.controller = None
                if endpoint is not None and endpoint != address:
                    self.learn(endpoint)
                    self.controller = endpoint
                    fresh_redirect = endpoint not in redirected_to
                    redirected_to.add(endpoint)
                    address = endpoint
                else:
                    address = self._after(address)
                continue
            error = error_for(code, message)
            # A mutation that may have happened is not repeated (Kafka neither): only reads
            # retry a retriable request-level error such as REQUEST_TIMED_OUT, elsewhere.
            if mutation or not error.retriable:
                raise error
            last_error = error
            address = self._after(address)

        summary = "; ".join(failures)
        attempts = self._retries_max + 1
        if isinstance(last_error, NotControllerError):
            raise NotControllerError(
                f"no active controller accepted {method} in {attempts} attempts: {summary}",
                controller_id=last_error.controller_id,
                controller_endpoint=last_error.controller_endpoint,
            )
        if last_error is not None:
            raise last_error
        hint = (
            " (the client speaks PLAINTEXT; if the listeners are SSL, give "
            "security.protocol=SSL and the ssl.* keys, e.g. --command-config client.properties)"
            if self._security_protocol == "PLAINTEXT"
            else ""
        )
        raise AdminConnectionError(
            f"cannot reach a controller for {method} in {attempts} attempts: {summary}{hint}",
            status=last_status,
            failures=failures,
        )

    def call_at(self, address: str, method: str, request: Any, deadline: float) -> Any:
        """One read at ``address`` itself (a broker answering for itself, where Kafka's
        AdminClient sends a broker's resource): no redirect, no retry. Raises
        ``AdminTransportError`` (unreachable, not caught up) or the request-level error."""
        remaining = deadline - self._clock()
        if remaining <= 0:
            raise self._timed_out(method, False, [])
        try:
            response = self._invoke(address, method, request, remaining)
        except grpc.RpcError as exc:
            status, details = _status_name(exc)
            name = status.name if status is not None else type(exc).__name__
            failure = f"{address}: {name} ({details})"
            raise AdminTransportError(
                f"{method} failed at {failure}", status=name, failures=[failure]
            ) from None
        if response.error_code != ErrorCode.NONE:
            raise error_for(response.error_code, response.error_message)
        return response

    def _timed_out(self, method: str, mutation: bool, failures: Sequence[str]) -> AdminTimeoutError:
        message = f"{method} did not complete within its deadline"
        if failures:
            message += f" (attempts: {'; '.join(failures)})"
        if mutation:
            message += "; its outcome is unknown: describe the topics to find out"
        return AdminTimeoutError(message, status="DEADLINE_EXCEEDED", failures=failures)
