"""The gRPC edge against hostile bytes, in-process: every service of a node answers a request
that does not decode with INVALID_ARGUMENT naming the method and the reason, and FetchSnapshot
answers impossible ids and positions with Kafka's error code instead of an internal error."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any, TypeVar

import grpc
import pytest

from broker.admin_service import BrokerAdminServicer
from quorum import limits
from quorum.controller.state_machine import ControllerStateMachine
from quorum.errors import ErrorCode
from quorum.ids import METADATA_TOPIC_ID
from quorum.metadata.records import NoOpRecord
from quorum.rpc.v1 import admin_pb2, admin_pb2_grpc, raft_pb2, raft_pb2_grpc
from quorum.server.admin_service import AdminServicer
from quorum.server.controller_admin import ControllerAdminServicer
from quorum.server.driver import OperationQueueFullError, TooManyWaitersError
from quorum.server.grpc_server import make_server
from quorum.server.quorum_service import CHUNK_BYTES_MAX, QuorumServicer
from quorum.storage.snapshots import snapshot_size, write_snapshot

CLUSTER_ID = "edge-test"
T = TypeVar("T")

# A string field (CreatableTopic.name inside CreateTopicsRequest.topics) holding invalid UTF-8.
BAD_UTF8_CREATE = b"\x0a\x03\x0a\x01\xff"
# Field 1 announced as 100 bytes long, 1 byte follows.
TRUNCATED = b"\x0a\x64\x00"


def fake_driver() -> Any:
    """A driver whose node leads and confirms every read at once (read index 0)."""
    node = SimpleNamespace(
        leader_id=1, epoch=3, node_id=1, is_leader=lambda: True, voters=frozenset({1})
    )

    async def read_index(_timeout_s: float) -> int:
        return 0

    return SimpleNamespace(node=node, read_index=read_index)


def serve(
    snapshot_dir: Path,
    body: Callable[[grpc.aio.Channel], Awaitable[T]],
    *,
    driver: Any = None,
    state_machine: ControllerStateMachine | None = None,
    image: Callable[[], Any] = lambda: SimpleNamespace(offset=5),
    broker_caught_up: Callable[[], str | None] | None = None,
) -> T:
    """Serve the Raft and admin services: a controller's with ``state_machine``, else a
    broker's (reads served from ``image``; without an offset once ``broker_caught_up``)."""

    async def main() -> T:
        server = make_server()
        nonlocal driver
        driver = driver or fake_driver()
        raft_pb2_grpc.add_QuorumServiceServicer_to_server(
            QuorumServicer(
                driver,
                cluster_id=CLUSTER_ID,
                endpoints={},
                leader_stub=lambda _node_id: None,
                snapshot_dir=snapshot_dir,
            ),
            server,
        )
        admin: AdminServicer
        if state_machine is not None:
            admin = ControllerAdminServicer(
                driver,
                state_machine,
                cluster_id=CLUSTER_ID,
                voters={},
                controller_ready=lambda: True,
            )
        else:
            admin = BrokerAdminServicer(
                driver,
                cluster_id=CLUSTER_ID,
                voters={},
                image=image,
                caught_up=broker_caught_up or (lambda: None),
            )
        admin_pb2_grpc.add_AdminServiceServicer_to_server(admin, server)
        port = server.add_insecure_port("127.0.0.1:0")
        await server.start()
        try:
            async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
                return await body(channel)
        finally:
            await server.stop(None)

    return asyncio.run(main())


async def raw_call(channel: grpc.aio.Channel, method: str, data: bytes) -> grpc.aio.AioRpcError:
    call = channel.unary_unary(method)  # no serializers: the bytes go as they are
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await call(data, timeout=10)
    return caught.value


@pytest.mark.parametrize(
    ("method", "data", "reason"),
    [
        ("/quorum.rpc.v1.AdminService/CreateTopics", BAD_UTF8_CREATE, "bad UTF-8"),
        ("/quorum.rpc.v1.AdminService/DeleteTopics", TRUNCATED, "Error parsing message"),
        ("/quorum.rpc.v1.AdminService/DescribeTopics", BAD_UTF8_CREATE, "bad UTF-8"),
        ("/quorum.rpc.v1.AdminService/RegisterBroker", TRUNCATED, "Error parsing message"),
        ("/quorum.rpc.v1.QuorumService/Vote", b"\x0a\x01\xff", "bad UTF-8"),
        ("/quorum.rpc.v1.QuorumService/Fetch", TRUNCATED, "Error parsing message"),
        ("/quorum.rpc.v1.QuorumService/FetchSnapshot", TRUNCATED, "Error parsing message"),
        ("/quorum.rpc.v1.QuorumService/DescribeQuorum", b"\x0a\x01\xff", "bad UTF-8"),
    ],
)
def test_undecodable_requests_are_invalid_argument(
    tmp_path: Path, method: str, data: bytes, reason: str
) -> None:
    error = serve(tmp_path, lambda channel: raw_call(channel, method, data))
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
    short = method.rsplit(".", maxsplit=1)[-1]  # AdminService/CreateTopics
    details = error.details() or ""
    assert details.startswith(f"request {short} could not be decoded: "), details
    assert reason in details
    assert f"({len(data)} bytes received)" in details


def test_decodable_requests_and_unknown_methods_are_unchanged(tmp_path: Path) -> None:
    async def body(channel: grpc.aio.Channel) -> None:
        # A valid request still reaches the servicer (a broker-like servicer: NOT_CONTROLLER).
        answer = await admin_pb2_grpc.AdminServiceStub(channel).CreateTopics(
            admin_pb2.CreateTopicsRequest(), timeout=10
        )
        assert answer.error_code == ErrorCode.NOT_CONTROLLER
        error = await raw_call(channel, "/quorum.rpc.v1.AdminService/NoSuchMethod", b"")
        assert error.code() == grpc.StatusCode.UNIMPLEMENTED

    serve(tmp_path, body)


def fetch_snapshot(
    *, end_offset: int = 10, epoch: int = 1, position: int = 0, max_bytes: int = 0
) -> raft_pb2.FetchSnapshotRequest:
    return raft_pb2.FetchSnapshotRequest(
        cluster_id=CLUSTER_ID,
        topic_id=METADATA_TOPIC_ID.bytes,
        partition_index=0,
        replica_id=2,
        current_leader_epoch=3,
        snapshot_id=raft_pb2.SnapshotId(end_offset=end_offset, epoch=epoch),
        position=position,
        max_bytes=max_bytes,
    )


def test_fetch_snapshot_positions_and_ids_get_kafka_error_codes(tmp_path: Path) -> None:
    snapshot = write_snapshot(tmp_path, 10, 1, [NoOpRecord()] * 3, 0)
    size = snapshot_size(tmp_path, snapshot)

    async def body(channel: grpc.aio.Channel) -> list[Any]:
        stub = raft_pb2_grpc.QuorumServiceStub(channel)
        requests = [
            fetch_snapshot(),
            fetch_snapshot(position=-1),
            fetch_snapshot(position=size),
            fetch_snapshot(position=2**63 - 1),
            fetch_snapshot(end_offset=-5),
            fetch_snapshot(epoch=-1),
            fetch_snapshot(end_offset=-(2**63), epoch=-(2**31)),
            fetch_snapshot(max_bytes=-1),
            fetch_snapshot(end_offset=11),
            fetch_snapshot(max_bytes=2**31 - 1),
        ]
        return [await stub.FetchSnapshot(r, timeout=10) for r in requests]

    answers = serve(tmp_path, body)
    codes = [ErrorCode(a.error_code) for a in answers]
    assert codes == [
        ErrorCode.NONE,
        ErrorCode.POSITION_OUT_OF_RANGE,
        ErrorCode.POSITION_OUT_OF_RANGE,
        ErrorCode.POSITION_OUT_OF_RANGE,
        ErrorCode.INVALID_REQUEST,
        ErrorCode.INVALID_REQUEST,
        ErrorCode.INVALID_REQUEST,
        ErrorCode.INVALID_REQUEST,
        ErrorCode.SNAPSHOT_NOT_FOUND,
        ErrorCode.NONE,
    ]
    assert len(answers[0].unaligned_records) == size <= CHUNK_BYTES_MAX
    assert "position -1 is negative" in answers[1].error_message
    assert f"position {size} is outside" in answers[2].error_message
    assert "end_offset -5" in answers[4].error_message
    assert "end_offset must be in [0," in answers[4].error_message
    assert "max_bytes -1 is negative" in answers[7].error_message
    assert answers[9].size == size


class OverloadedDriver:
    """A driver whose operation queue and waiting reads are full."""

    def __init__(self) -> None:
        self.node = fake_driver().node

    async def submit(
        self, operation: Any, *, from_client: bool = False, deadline_s: float | None = None
    ) -> Any:
        assert from_client
        raise OperationQueueFullError("1000 operations are already queued (at most 1000)")

    async def wait_for_offset(self, offset: int, applied: Any, timeout_s: float) -> bool:
        raise TooManyWaitersError("1000 reads already wait (at most 1000)")


def test_overload_is_resource_exhausted_and_names_the_bound(tmp_path: Path) -> None:
    async def body(channel: grpc.aio.Channel) -> list[grpc.aio.AioRpcError]:
        stub = admin_pb2_grpc.AdminServiceStub(channel)
        errors = []
        for call in (
            stub.CreateTopics(
                admin_pb2.CreateTopicsRequest(topics=[admin_pb2.CreatableTopic(name="t")]),
                timeout=10,
            ),
            stub.DescribeCluster(admin_pb2.DescribeClusterRequest(min_metadata_offset=10**15)),
        ):
            with pytest.raises(grpc.aio.AioRpcError) as caught:
                await call
            errors.append(caught.value)
        return errors

    errors = serve(
        tmp_path, body, driver=OverloadedDriver(), state_machine=ControllerStateMachine()
    )
    assert [e.code() for e in errors] == [grpc.StatusCode.RESOURCE_EXHAUSTED] * 2
    assert "operations are already queued" in (errors[0].details() or "")
    assert "reads already wait" in (errors[1].details() or "")


class SlowDriver:
    """A driver whose image never reaches the offset; records how long reads would wait."""

    def __init__(self) -> None:
        self.node = fake_driver().node
        self.waits_s: list[float] = []

    async def wait_for_offset(self, offset: int, applied: Any, timeout_s: float) -> bool:
        self.waits_s.append(timeout_s)
        return False


def test_a_read_waits_for_its_offset_a_bounded_time(tmp_path: Path) -> None:
    driver = SlowDriver()

    async def body(channel: grpc.aio.Channel) -> list[Any]:
        stub = admin_pb2_grpc.AdminServiceStub(channel)
        request = admin_pb2.DescribeClusterRequest(min_metadata_offset=10**15)
        return [
            await stub.DescribeCluster(request),  # no deadline
            await stub.DescribeCluster(request, timeout=3600),  # an hour
            await stub.DescribeCluster(request, timeout=2),
        ]

    answers = serve(tmp_path, body, driver=driver)
    assert [a.error_code for a in answers] == [ErrorCode.REQUEST_TIMED_OUT] * 3
    assert "not yet 1000000000000000" in answers[0].error_message
    bound_s = limits.METADATA_OFFSET_WAIT_MS_MAX / 1000
    assert driver.waits_s[0] == driver.waits_s[1] == bound_s
    assert 1 < driver.waits_s[2] < 2
