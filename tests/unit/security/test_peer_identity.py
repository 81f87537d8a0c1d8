"""Whom a node connects to (docs/security.md#whom-a-node-connects-to): over real mutual TLS, a
node's peer client (``PeerClients``) and a broker's controller client (``ControllerClient``)
check that the server they reached carries the name of the node and role they meant, not only
the host. A server holding a broker's certificate, or another controller's, at a voter's address
(or at an endpoint a BeginQuorumEpoch taught) fails the handshake and sees no request; the
controller meant answers."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

import grpc
import pytest

from broker.controller_client import ControllerClient, ControllerUnavailableError
from quorum.config import HostPort
from quorum.errors import ErrorCode
from quorum.ids import METADATA_TOPIC_ID
from quorum.raft.messages import Envelope, FetchResponse
from quorum.rpc.v1 import admin_pb2, raft_pb2
from quorum.security.certs import Authority, write_private
from quorum.security.identity import ROLE_BROKER, ROLE_CONTROLLER
from quorum.security.tls import ClientSecurity, KeyStore
from quorum.server.peers import PeerClients
from quorum.wire import raft as transport

CLUSTER_ID = "cGVlci1pZGVudGl0eQ"
T = TypeVar("T")


class Pki:
    def __init__(self, directory: Path) -> None:
        self.authority = Authority.create("peer-identity-test-ca")
        self.directory = directory
        self.ca = directory / "ca.pem"
        write_private(self.ca, self.authority.cert_pem, private=False)

    def node_pem(self, node_id: int, role: str, cluster_id: str = CLUSTER_ID) -> bytes:
        return self.authority.issue_node(cluster_id, node_id, [role])

    def client(self, node_id: int, role: str) -> ClientSecurity:
        path = self.directory / f"client-{role}-{node_id}.pem"
        write_private(path, self.node_pem(node_id, role), private=True)
        return ClientSecurity.ssl(truststore=self.ca, keystore=KeyStore(location=path))


class CountingServer:
    """A QuorumService and AdminService on 127.0.0.1 that answer every Fetch and
    BrokerHeartbeat plainly and count them, serving ``pem``'s certificate."""

    def __init__(self, pki: Pki, pem: bytes) -> None:
        self.pki = pki
        self.pem = pem
        self.calls = 0
        self.server: grpc.aio.Server | None = None
        self.port = 0

    async def __aenter__(self) -> CountingServer:
        async def fetch(request: Any, context: Any) -> bytes:
            self.calls += 1
            answer = raft_pb2.FetchResponse(
                error_code=0,
                current_leader=raft_pb2.LeaderIdAndEpoch(leader_id=2, leader_epoch=1),
                high_watermark=0,
                log_start_offset=0,
            )
            return answer.SerializeToString()

        async def heartbeat(request: Any, context: Any) -> bytes:
            self.calls += 1
            return admin_pb2.BrokerHeartbeatResponse(error_code=0).SerializeToString()

        handlers = [
            grpc.method_handlers_generic_handler(
                "quorum.rpc.v1.QuorumService",
                {"Fetch": grpc.unary_unary_rpc_method_handler(fetch)},
            ),
            grpc.method_handlers_generic_handler(
                "quorum.rpc.v1.AdminService",
                {"BrokerHeartbeat": grpc.unary_unary_rpc_method_handler(heartbeat)},
            ),
        ]
        self.server = grpc.aio.server(handlers=handlers)
        split = self.pem.index(b"-----BEGIN CERTIFICATE-----")
        credentials = grpc.ssl_server_credentials(
            [(self.pem[:split], self.pem[split:])],
            root_certificates=self.pki.authority.cert_pem,
            require_client_auth=True,
        )
        self.port = self.server.add_secure_port("127.0.0.1:0", credentials)
        await self.server.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self.server is not None
        await self.server.stop(None)


def fetch_envelope(destination: int) -> Envelope:
    request = raft_pb2.FetchRequest(
        cluster_id=CLUSTER_ID,
        topic_id=METADATA_TOPIC_ID.bytes,
        partition_index=0,
        replica_id=1,
        current_leader_epoch=1,
        fetch_offset=0,
        last_fetched_epoch=0,
        max_wait_ms=0,
        max_bytes=1024,
    )
    return Envelope(1, destination, 7, transport.request_from_proto(request))


def run(body: Callable[[], Awaitable[T]]) -> T:
    return asyncio.run(body())


@pytest.fixture
def pki(tmp_path: Path) -> Pki:
    return Pki(tmp_path)


async def fetch_from(pki: Pki, server_pem: bytes, *, learned: bool = False) -> tuple[bool, int]:
    """Controller 1 fetches from ``node 2``, served with ``server_pem``: (answered, calls the
    server saw). ``learned``: node 2's address was taught by a BeginQuorumEpoch, not
    configured."""
    async with CountingServer(pki, server_pem) as server:
        address = HostPort("127.0.0.1", server.port)
        voters = {} if learned else {2: address}
        peers = PeerClients(voters, 2_000, pki.client(1, ROLE_CONTROLLER), cluster_id=CLUSTER_ID)
        if learned:
            peers.learn(2, f"127.0.0.1:{server.port}")
        try:
            answer = await peers.send(fetch_envelope(2))
        except grpc.aio.AioRpcError as exc:
            assert exc.code() is grpc.StatusCode.UNAVAILABLE, exc
            return False, server.calls
        finally:
            await peers.close()
        assert isinstance(answer, FetchResponse)
        assert answer.error_code is ErrorCode.NONE
        return True, server.calls


def test_a_voter_fetches_only_from_the_controller_it_meant(pki: Pki) -> None:
    assert run(lambda: fetch_from(pki, pki.node_pem(2, ROLE_CONTROLLER))) == (True, 1)
    # A broker's certificate names 127.0.0.1 too: the host check alone let it pass.
    assert run(lambda: fetch_from(pki, pki.node_pem(2, ROLE_BROKER))) == (False, 0)
    assert run(lambda: fetch_from(pki, pki.node_pem(3, ROLE_CONTROLLER))) == (False, 0)
    foreign = pki.node_pem(2, ROLE_CONTROLLER, cluster_id="b3RoZXJjbHVzdGVy")
    assert run(lambda: fetch_from(pki, foreign)) == (False, 0)


def test_a_learned_leader_endpoint_is_believed_only_if_it_proves_to_be_that_leader(
    pki: Pki,
) -> None:
    assert run(lambda: fetch_from(pki, pki.node_pem(2, ROLE_CONTROLLER), learned=True)) == (
        True,
        1,
    )
    impostor = pki.node_pem(101, ROLE_BROKER)
    assert run(lambda: fetch_from(pki, impostor, learned=True)) == (False, 0)


def test_a_broker_talks_only_to_controllers_of_its_cluster(pki: Pki) -> None:
    async def heartbeat(server_pem: bytes) -> tuple[bool, int]:
        async with CountingServer(pki, server_pem) as server:
            client = ControllerClient(
                {1: HostPort("127.0.0.1", server.port)},
                pki.client(101, ROLE_BROKER),
                cluster_id=CLUSTER_ID,
            )
            try:
                await client.call(
                    "BrokerHeartbeat", admin_pb2.BrokerHeartbeatRequest(broker_id=101), timeout_s=5
                )
            except ControllerUnavailableError:
                return False, server.calls
            finally:
                await client.close()
            return True, server.calls

    # Any controller of the cluster may answer (the broker may not know its id yet).
    assert run(lambda: heartbeat(pki.node_pem(3, ROLE_CONTROLLER))) == (True, 1)
    assert run(lambda: heartbeat(pki.node_pem(102, ROLE_BROKER))) == (False, 0)
