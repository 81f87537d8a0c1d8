"""The broker's link to the active controller: RegisterBroker and BrokerHeartbeat.

Any controller may be asked; one that does not lead answers NOT_CONTROLLER naming the leader's
address, which is tried next. Unreachable controllers are skipped. Every call has a deadline.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any

import grpc

from quorum.config import HostPort
from quorum.errors import ErrorCode
from quorum.rpc.v1 import admin_pb2_grpc
from quorum.server.service import GRPC_OPTIONS

CALL_TIMEOUT_S = 5.0


class ControllerUnavailableError(Exception):
    """No controller answered (all unreachable, or none leads right now). Retriable."""


class ControllerClient:
    def __init__(self, voters: Mapping[int, HostPort]) -> None:
        self._addresses = [f"{a.host}:{a.port}" for _, a in sorted(voters.items())]
        self._preferred: str | None = None
        self._channels: dict[str, grpc.aio.Channel] = {}

    def _stub(self, address: str) -> Any:
        channel = self._channels.get(address)
        if channel is None:
            channel = grpc.aio.insecure_channel(address, GRPC_OPTIONS)
            self._channels[address] = channel
        return admin_pb2_grpc.AdminServiceStub(channel)

    async def call(self, method: str, request: Any) -> Any:
        """Send to the active controller; returns its answer (whatever its error code, except
        NOT_CONTROLLER, which is followed)."""
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
                answer = await getattr(self._stub(address), method)(request, timeout=CALL_TIMEOUT_S)
            except grpc.aio.AioRpcError as exc:
                failures.append(f"{address}: {exc.code().name}")
                continue
            if answer.error_code == ErrorCode.NOT_CONTROLLER:
                failures.append(f"{address}: NOT_CONTROLLER")
                if answer.controller_endpoint and answer.controller_endpoint not in tried:
                    order.insert(0, answer.controller_endpoint)
                continue
            self._preferred = address
            return answer
        self._preferred = None
        raise ControllerUnavailableError("no active controller answered: " + "; ".join(failures))

    async def close(self) -> None:
        await asyncio.gather(*(c.close(grace=None) for c in self._channels.values()))
