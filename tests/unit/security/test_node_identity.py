"""A node speaks only for itself, and only in its role (docs/security.md#what-a-node-may-claim):
over real mutual TLS, a Raft request whose claimed id differs from the caller's certificate, or
that the certificate's role may not send, is refused with Kafka's error code before the core
sees it; a certificate without a node name, or of another cluster, may send none."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any, TypeVar

import grpc
import pytest

from quorum.errors import ErrorCode
from quorum.ids import METADATA_TOPIC_ID
from quorum.raft.messages import FetchResponse, Message, VoteRequest, VoteResponse
from quorum.rpc.v1 import raft_pb2, raft_pb2_grpc
from quorum.security.certs import Authority
from quorum.security.identity import ANONYMOUS, ROLE_BROKER, ROLE_CONTROLLER, Caller, node_uri
from quorum.security.node_identity import (
    ANY_NODE,
    BROKER_ONLY,
    CONTROLLER_ONLY,
    Claim,
    claim_of,
    refuse_claim,
)
from quorum.server.grpc_server import make_server
from quorum.server.quorum_service import QuorumServicer
from quorum.wire import raft as transport

CLUSTER_ID = "aWRlbnRpdHktdGVzdA"
T = TypeVar("T")


# ----- the pure rule ----------------------------------------------------------------------------


def caller(
    node_id: int | None,
    cluster_id: str | None = CLUSTER_ID,
    roles: frozenset[str] = frozenset({ROLE_CONTROLLER}),
) -> Caller:
    return Caller(
        "User:CN=x",
        node_id,
        cluster_id,
        authenticated=True,
        peer="ipv4:1",
        roles=roles if node_id is not None else frozenset(),
    )


def test_a_node_may_claim_only_its_own_id() -> None:
    assert refuse_claim(caller(3), CLUSTER_ID, Claim("replica_id", 3, ANY_NODE)) is None
    refusal = refuse_claim(caller(3), CLUSTER_ID, Claim("replica_id", 2, ANY_NODE))
    assert refusal is not None
    assert refusal.error_code is ErrorCode.CLUSTER_AUTHORIZATION_FAILED
    assert "replica_id 2" in refusal.message and "controller 3" in refusal.message


def test_a_node_may_send_only_what_its_role_may() -> None:
    broker = caller(101, roles=frozenset({ROLE_BROKER}))
    refusal = refuse_claim(broker, CLUSTER_ID, Claim("leader_id", 101, CONTROLLER_ONLY))
    assert refusal is not None
    assert refusal.error_code is ErrorCode.CLUSTER_AUTHORIZATION_FAILED
    assert "only a controller may send" in refusal.message and "broker 101" in refusal.message
    controller = caller(1)
    refusal = refuse_claim(controller, CLUSTER_ID, Claim("broker_id", 1, BROKER_ONLY))
    assert refusal is not None and "only a broker may send" in refusal.message
    combined = caller(1, roles=frozenset({ROLE_BROKER, ROLE_CONTROLLER}))
    for roles in (BROKER_ONLY, CONTROLLER_ONLY, ANY_NODE):
        assert refuse_claim(combined, CLUSTER_ID, Claim("replica_id", 1, roles)) is None


def test_a_client_certificate_may_claim_no_node() -> None:
    refusal = refuse_claim(caller(None, None), CLUSTER_ID, Claim("candidate_id", 1, ANY_NODE))
    assert refusal is not None
    assert refusal.error_code is ErrorCode.CLUSTER_AUTHORIZATION_FAILED
    assert "is not a node" in refusal.message


def test_a_node_of_another_cluster_is_refused_without_learning_ours() -> None:
    refusal = refuse_claim(caller(3, "b3RoZXI"), CLUSTER_ID, Claim("leader_id", 3, ANY_NODE))
    assert refusal is not None
    assert refusal.error_code is ErrorCode.INCONSISTENT_CLUSTER_ID
    assert CLUSTER_ID not in refusal.message


def test_plaintext_callers_are_not_checked() -> None:
    anonymous = Caller(ANONYMOUS, None, None, authenticated=False, peer="ipv4:1")
    assert refuse_claim(anonymous, CLUSTER_ID, Claim("replica_id", 2, CONTROLLER_ONLY)) is None


def test_each_raft_request_names_its_sender_and_role() -> None:
    header = {"cluster_id": CLUSTER_ID, "topic_id": METADATA_TOPIC_ID.bytes}
    voters = frozenset({1, 2, 3})
    requests = {
        Claim("candidate_id", 2, CONTROLLER_ONLY): raft_pb2.VoteRequest(
            **header, candidate_epoch=1, candidate_id=2
        ),
        Claim("leader_id", 3, CONTROLLER_ONLY): raft_pb2.BeginQuorumEpochRequest(
            **header, leader_id=3, leader_epoch=1
        ),
        Claim("leader_id", 4, CONTROLLER_ONLY): raft_pb2.EndQuorumEpochRequest(
            **header, leader_id=4, leader_epoch=1
        ),
        # A voter's Fetch moves the high watermark: a controller's only; an observer's reads.
        Claim("replica_id", 2, CONTROLLER_ONLY): fetch(2),
        Claim("replica_id", 101, ANY_NODE): fetch(101),
    }
    for claim, request in requests.items():
        assert claim_of(transport.request_from_proto(request), voters) == claim
    describe = transport.request_from_proto(raft_pb2.DescribeQuorumRequest(**header))
    assert claim_of(describe, voters) is None


# ----- over real mutual TLS -------------------------------------------------------------------


class Pki:
    """A throwaway CA (``quorum.security.certs.Authority``) handing out (key, chain) pairs."""

    def __init__(self, name: str) -> None:
        self.authority = Authority.create(name)
        self.ca_pem = self.authority.cert_pem

    def issue(self, common_name: str, uri: str | None = None) -> tuple[bytes, bytes]:
        """(private key PEM, certificate PEM) for 127.0.0.1, with an optional URI SAN."""
        pem = self.authority.issue(
            common_name,
            uris=[uri] if uri else [],
            dns_names=["localhost"],
            ip_addresses=["127.0.0.1"],
        )
        split = pem.index(b"-----BEGIN CERTIFICATE-----")
        return pem[:split], pem[split:]


class RecordingDriver:
    """Stands in for the Raft driver: records what reached the core and answers plainly."""

    def __init__(self) -> None:
        self.node = SimpleNamespace(
            leader_id=1, epoch=5, node_id=1, is_leader=lambda: True, voters=frozenset({1, 2, 3})
        )
        self.reached: list[Message] = []

    async def request(self, source: int, message: Message, timeout_s: float) -> Message:
        self.reached.append(message)
        if isinstance(message, VoteRequest):
            return VoteResponse(ErrorCode.NONE, 1, 5, vote_granted=False)
        return FetchResponse(ErrorCode.NONE, 1, 5, 0, 0)


def serve_tls(pki: Pki, body: Callable[[int], Awaitable[T]], driver: RecordingDriver) -> T:
    async def main() -> T:
        server = make_server()
        raft_pb2_grpc.add_QuorumServiceServicer_to_server(
            QuorumServicer(
                driver,  # type: ignore[arg-type]
                cluster_id=CLUSTER_ID,
                endpoints={},
                leader_stub=lambda _node_id: None,
            ),
            server,
        )
        key, cert = pki.issue("node-1", node_uri(CLUSTER_ID, ROLE_CONTROLLER, 1))
        credentials = grpc.ssl_server_credentials(
            [(key, cert)], root_certificates=pki.ca_pem, require_client_auth=True
        )
        port = server.add_secure_port("127.0.0.1:0", credentials)
        await server.start()
        try:
            return await body(port)
        finally:
            await server.stop(None)

    return asyncio.run(main())


def fetch(replica_id: int) -> raft_pb2.FetchRequest:
    return raft_pb2.FetchRequest(
        cluster_id=CLUSTER_ID,
        topic_id=METADATA_TOPIC_ID.bytes,
        partition_index=0,
        replica_id=replica_id,
        current_leader_epoch=5,
        fetch_offset=0,
        last_fetched_epoch=0,
        max_wait_ms=0,
        max_bytes=1024,
    )


async def call_as(port: int, pki: Pki, identity: tuple[bytes, bytes], method: str, req: Any) -> Any:
    key, cert = identity
    credentials = grpc.ssl_channel_credentials(pki.ca_pem, key, cert)
    async with grpc.aio.secure_channel(f"127.0.0.1:{port}", credentials) as channel:
        stub = raft_pb2_grpc.QuorumServiceStub(channel)
        return await getattr(stub, method)(req, timeout=10)


@pytest.fixture(scope="module")
def pki() -> Pki:
    return Pki("identity-test-ca")


def test_node_3_claiming_replica_2_is_refused_before_the_core(pki: Pki) -> None:
    driver = RecordingDriver()
    node3 = pki.issue("node-3", node_uri(CLUSTER_ID, ROLE_CONTROLLER, 3))

    async def body(port: int) -> tuple[Any, Any]:
        forged = await call_as(port, pki, node3, "Fetch", fetch(2))
        honest = await call_as(port, pki, node3, "Fetch", fetch(3))
        return forged, honest

    forged, honest = serve_tls(pki, body, driver)
    assert forged.error_code == ErrorCode.CLUSTER_AUTHORIZATION_FAILED
    assert "replica_id 2" in forged.error_message
    assert "controller 3" in forged.error_message
    assert honest.error_code == ErrorCode.NONE
    # Only the honest Fetch reached the core: the forged one moved no progress.
    assert [m.replica_id for m in driver.reached] == [3]  # type: ignore[attr-defined]


def test_votes_and_leadership_claims_are_checked_too(pki: Pki) -> None:
    driver = RecordingDriver()
    node3 = pki.issue("node-3", node_uri(CLUSTER_ID, ROLE_CONTROLLER, 3))
    header = {"cluster_id": CLUSTER_ID, "topic_id": METADATA_TOPIC_ID.bytes}

    async def body(port: int) -> list[Any]:
        return [
            await call_as(
                port, pki, node3, "Vote",
                raft_pb2.VoteRequest(
                    **header, candidate_epoch=6, candidate_id=2, voter_id=1,
                    last_offset_epoch=0, last_offset=0,
                ),
            ),
            await call_as(
                port, pki, node3, "BeginQuorumEpoch",
                raft_pb2.BeginQuorumEpochRequest(**header, leader_id=2, leader_epoch=6, voter_id=1),
            ),
            await call_as(
                port, pki, node3, "EndQuorumEpoch",
                raft_pb2.EndQuorumEpochRequest(**header, leader_id=2, leader_epoch=5),
            ),
            await call_as(
                port, pki, node3, "FetchSnapshot",
                raft_pb2.FetchSnapshotRequest(**header, replica_id=2, current_leader_epoch=5),
            ),
        ]  # fmt: skip

    answers = serve_tls(pki, body, driver)
    assert [a.error_code for a in answers] == [ErrorCode.CLUSTER_AUTHORIZATION_FAILED] * 4
    assert driver.reached == []


def test_an_admin_certificate_and_a_foreign_node_may_not_fetch(pki: Pki) -> None:
    driver = RecordingDriver()
    admin = pki.issue("admin")
    foreign = pki.issue("node-2", node_uri("b3RoZXJjbHVzdGVy", ROLE_CONTROLLER, 2))

    async def body(port: int) -> list[Any]:
        return [
            await call_as(port, pki, admin, "Fetch", fetch(-1)),
            await call_as(port, pki, foreign, "Fetch", fetch(2)),
        ]

    by_admin, by_foreign = serve_tls(pki, body, driver)
    assert by_admin.error_code == ErrorCode.CLUSTER_AUTHORIZATION_FAILED
    assert "User:CN=admin is not a node" in by_admin.error_message
    assert by_foreign.error_code == ErrorCode.INCONSISTENT_CLUSTER_ID
    assert CLUSTER_ID not in by_foreign.error_message
    assert driver.reached == []


def test_a_certificate_of_another_ca_fails_the_handshake(pki: Pki, tmp_path: Path) -> None:
    other = Pki("another-ca")
    node2 = other.issue("node-2", node_uri(CLUSTER_ID, ROLE_CONTROLLER, 2))

    async def body(port: int) -> grpc.StatusCode:
        credentials = grpc.ssl_channel_credentials(pki.ca_pem, *node2)
        async with grpc.aio.secure_channel(f"127.0.0.1:{port}", credentials) as channel:
            stub = raft_pb2_grpc.QuorumServiceStub(channel)
            with pytest.raises(grpc.aio.AioRpcError) as caught:
                await stub.Fetch(fetch(2), timeout=5)
            return caught.value.code()

    assert serve_tls(pki, body, RecordingDriver()) == grpc.StatusCode.UNAVAILABLE


def test_a_broker_certificate_may_not_lead_vote_or_fetch_as_a_voter(pki: Pki) -> None:
    """What the review did with node-101's certificate: claim leadership of the next epoch,
    vote, and fetch as a voter (its own id or a voter's); only an observer's Fetch as itself
    reaches the core."""
    driver = RecordingDriver()
    broker = pki.issue("node-101", node_uri(CLUSTER_ID, ROLE_BROKER, 101))
    header = {"cluster_id": CLUSTER_ID, "topic_id": METADATA_TOPIC_ID.bytes}

    async def body(port: int) -> list[Any]:
        return [
            await call_as(
                port, pki, broker, "BeginQuorumEpoch",
                raft_pb2.BeginQuorumEpochRequest(
                    **header, leader_id=101, leader_epoch=6, voter_id=1
                ),
            ),
            await call_as(
                port, pki, broker, "Vote",
                raft_pb2.VoteRequest(
                    **header, candidate_epoch=6, candidate_id=101, voter_id=1,
                    last_offset_epoch=0, last_offset=0,
                ),
            ),
            await call_as(
                port, pki, broker, "EndQuorumEpoch",
                raft_pb2.EndQuorumEpochRequest(**header, leader_id=101, leader_epoch=5),
            ),
            await call_as(port, pki, broker, "Fetch", fetch(2)),
            await call_as(port, pki, broker, "Fetch", fetch(101)),
        ]  # fmt: skip

    *refused, observer = serve_tls(pki, body, driver)
    assert [a.error_code for a in refused] == [ErrorCode.CLUSTER_AUTHORIZATION_FAILED] * 4
    assert all("broker 101" in a.error_message for a in refused), refused
    assert observer.error_code == ErrorCode.NONE
    assert [m.replica_id for m in driver.reached] == [101]  # type: ignore[attr-defined]


def test_a_certificate_of_the_earlier_form_without_a_role_names_no_node(pki: Pki) -> None:
    driver = RecordingDriver()
    roleless = pki.issue("node-3", f"spiffe://metaquorum/{CLUSTER_ID}/node/3")

    async def body(port: int) -> Any:
        return await call_as(port, pki, roleless, "Fetch", fetch(3))

    answer = serve_tls(pki, body, driver)
    assert answer.error_code == ErrorCode.CLUSTER_AUTHORIZATION_FAILED
    assert "is not a node" in answer.error_message
    assert driver.reached == []
