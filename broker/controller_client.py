"""The broker's link to the active controller: RegisterBroker and BrokerHeartbeat, and the
writes its Kafka listener forwards (KIP-590; broker/kafka/forwarding.py), and the
DescribeQuorum requests a broker forwards (Kafka's brokers forward it to the controller).

Any controller may be asked; one that does not lead answers NOT_CONTROLLER naming the leader's
address, which is tried next. Unreachable controllers are skipped. Every call has a deadline.
Over SSL, whoever answers at an address must prove to be a controller of this cluster (its
certificate carries ``node_server_name(cluster_id, "controller")``): a broker's certificate, or
another cluster's, fails the handshake (docs/security.md#whom-a-node-connects-to).
"""

from __future__ import annotations

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
    ) -> Any:
        """Send to the active controller; returns its answer (whatever its error code, except
        NOT_CONTROLLER, which is followed). ``timeout_s`` bounds each attempt; ``metadata`` is
        sent with it (a forwarded client's principal)."""
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
