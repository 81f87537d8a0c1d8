"""The broker's link to the active controller: RegisterBroker and BrokerHeartbeat, and the
writes its Kafka listener forwards (KIP-590; broker/kafka/forwarding.py), and the
DescribeQuorum requests a broker forwards (Kafka's brokers forward it to the controller).

Any controller may be asked; one that does not lead answers NOT_CONTROLLER naming the leader's
address, which is tried next. Unreachable controllers are skipped. Every call has a deadline.
While no controller leads (the election after the active controller resigned or died), a
forwarded write is asked again after a short backoff until its deadline rather than refused at
once, as Kafka's brokers hold a forwarded request until a controller is active: the client
would otherwise wait its own retry backoff (librdkafka's ``retry.backoff.ms``, 100 ms) after
an election of some tens of milliseconds.
Over SSL, whoever answers at an address must prove to be a controller of this cluster (its
certificate carries ``node_server_name(cluster_id, "controller")``): a broker's certificate, or
another cluster's, fails the handshake (docs/security.md#whom-a-node-connects-to).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping
from typing import Any, cast

import grpc

from quorum.config import HostPort
from quorum.errors import ErrorCode
from quorum.rpc.v1 import admin_pb2_grpc, raft_pb2, raft_pb2_grpc
from quorum.security.identity import ROLE_CONTROLLER, node_server_name
from quorum.security.tls import AioChannels, ClientSecurity
from quorum.server.grpc_options import NODE_CHANNEL_OPTIONS

CALL_TIMEOUT_S = 5.0
# While no controller leads, the first retry of a call waits this long, each next one twice as
# long, up to the bound (Kafka's brokers look for a new controller every 100 ms, their
# ``retry.backoff.ms``; an election here takes some tens of milliseconds, hence the short start).
RETRY_BACKOFF_MS_INITIAL = 10
RETRY_BACKOFF_MS_MAX = 100


class ControllerUnavailableError(Exception):
    """No controller answered (all unreachable, or none leads right now). Retriable."""


class ControllerClient:
    def __init__(
        self,
        voters: Mapping[int, HostPort],
        security: ClientSecurity | None = None,
        *,
        cluster_id: str | None = None,
        voter_ids: bool = True,
    ) -> None:
        """``voters``: controller id -> address (``controller.quorum.voters``); with
        ``voter_ids`` False the keys are not controller ids (bootstrap servers) and a
        NOT_CONTROLLER answer is followed to the endpoint it names."""
        self._voters = dict(voters) if voter_ids else {}
        self._server_name = (
            None if cluster_id is None else node_server_name(cluster_id, ROLE_CONTROLLER)
        )
        self._addresses = [f"{a.host}:{a.port}" for _, a in sorted(voters.items())]
        self._preferred: str | None = None
        # The broker's own certificate is its client certificate; channels are recreated when
        # its files change (docs/security.md#rotation).
        self._channels = AioChannels(security or ClientSecurity.plaintext(), NODE_CHANNEL_OPTIONS)

    def _stub(self, address: str) -> Any:
        return admin_pb2_grpc.AdminServiceStub(self._channels.get(address, self._server_name))

    async def call(
        self,
        method: str,
        request: Any,
        *,
        metadata: tuple[tuple[str, bytes], ...] = (),
        timeout_s: float = CALL_TIMEOUT_S,
        retry_until_s: float | None = None,
    ) -> Any:
        """Send to the active controller; returns its answer (whatever its error code, except
        NOT_CONTROLLER, which is followed). ``timeout_s`` bounds each attempt; ``metadata`` is
        sent with it (a forwarded client's principal). ``retry_until_s`` (``time.monotonic()``
        seconds): while no controller leads, ask every controller again after a backoff
        (``RETRY_BACKOFF_MS_INITIAL``, doubling up to ``RETRY_BACKOFF_MS_MAX``) until then;
        without it, the first round that finds none raises ``ControllerUnavailableError``."""
        backoff_s = RETRY_BACKOFF_MS_INITIAL / 1000
        while True:
            try:
                return await self._call_once(method, request, metadata, timeout_s)
            except ControllerUnavailableError:
                if retry_until_s is None or time.monotonic() + backoff_s >= retry_until_s:
                    raise
            # A retry backoff, not synchronisation: nothing tells a broker when an election ends.
            await asyncio.sleep(backoff_s)
            backoff_s = min(2 * backoff_s, RETRY_BACKOFF_MS_MAX / 1000)

    async def _call_once(
        self,
        method: str,
        request: Any,
        metadata: tuple[tuple[str, bytes], ...],
        timeout_s: float,
    ) -> Any:
        """One round over the controllers: the preferred one, then the others, following
        NOT_CONTROLLER's hints. Raises ``ControllerUnavailableError`` when none answered as the
        active controller."""
        order = ([self._preferred] if self._preferred else []) + [
            a for a in self._addresses if a != self._preferred
        ]
        failures: list[str] = []
        tried: set[str] = set()
        while order:
            address = order.pop(0)
            if address in tried:
                continue
            tried.add(address)
            try:
                answer = await getattr(self._stub(address), method)(
                    request, timeout=timeout_s, metadata=metadata or None
                )
            except grpc.aio.AioRpcError as exc:
                failures.append(f"{address}: {exc.code().name}")
                continue
            if answer.error_code == ErrorCode.NOT_CONTROLLER:
                failures.append(f"{address}: NOT_CONTROLLER")
                # The leader as this node reaches it: its configured voter address when the
                # answer names a voter id (the network path this node was given, e.g. through
                # a proxy), else the endpoint the answer gives.
                known = self._voters.get(getattr(answer, "controller_id", -1))
                hint = f"{known.host}:{known.port}" if known else answer.controller_endpoint
                if hint and hint not in tried:
                    order.insert(0, hint)
                continue
            self._preferred = address
            return answer
        self._preferred = None
        raise ControllerUnavailableError("no active controller answered: " + "; ".join(failures))

    async def describe_quorum(
        self, request: raft_pb2.DescribeQuorumRequest, leader_id: int | None
    ) -> raft_pb2.DescribeQuorumResponse:
        """Forward a DescribeQuorum to the leader this broker knows (``leader_id``), else to
        each controller in turn; a controller that does not lead forwards it to the leader
        itself. The first answer is returned, whatever its error code."""
        leader = self._voters.get(leader_id) if leader_id is not None else None
        first = [f"{leader.host}:{leader.port}"] if leader is not None else []
        failures: list[str] = []
        for address in dict.fromkeys([*first, *self._addresses]):
            channel = self._channels.get(address, self._server_name)
            stub = raft_pb2_grpc.QuorumServiceStub(channel)
            try:
                answer = await stub.DescribeQuorum(request, timeout=CALL_TIMEOUT_S)
                return cast(raft_pb2.DescribeQuorumResponse, answer)
            except grpc.aio.AioRpcError as exc:
                failures.append(f"{address}: {exc.code().name}")
        raise ControllerUnavailableError("no controller answered: " + "; ".join(failures))

    async def close(self) -> None:
        await self._channels.close()
