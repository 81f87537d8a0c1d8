"""A hostile outsider against a real three-controller quorum (issue #12; docs/invariants.md
I15, I16; docs/architecture.md#hostile-peers): with only the controllers' addresses it sends
the issue's one-RPC crashes and wedges, the rest of the QuorumService surface with
out-of-range, contradictory and repeated fields, and a seeded fuzzer over the proto fields for
a bounded time. Afterwards every controller is alive, a leader exists, a write commits and the
committed logs agree. Every process is killed by PID at the end. Replay the fuzzer's requests
with HOSTILE_FUZZ_SEED=<seed> (its timing still varies)."""

from __future__ import annotations

import os
import random
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import grpc
import pytest

from quorum.admin import AdminClient, NewTopic
from quorum.harness import (
    ProcessCluster,
    cluster_with_brokers,
    process_cluster,
    run_cli,
    wait_until,
)
from quorum.ids import METADATA_TOPIC_ID
from quorum.limits import EPOCH_MAX, INT32_MAX
from quorum.raft.election import ElectionState
from quorum.rpc.v1 import raft_pb2, raft_pb2_grpc
from quorum.storage import QUORUM_STATE_FILE_NAME, ElectionStore

pytestmark = [pytest.mark.slow]

FUZZ_S = 10.0
INT64_MAX = 2**63 - 1
TOPIC_ID = METADATA_TOPIC_ID.bytes


def stubs(cluster: ProcessCluster) -> dict[int, Any]:
    return {n: raft_pb2_grpc.QuorumServiceStub(cluster.channel(n)) for n in cluster.controller_ids}


def call(method: Callable[..., Any], request: Any) -> Any:
    """One raw RPC; a refusal by gRPC status (INVALID_ARGUMENT, DEADLINE_EXCEEDED, ...) is an
    answer too. Returns the response or the status code."""
    try:
        return method(request, timeout=2.0)
    except grpc.RpcError as exc:
        return exc.code()  # type: ignore[attr-defined]


def assert_all_alive(cluster: ProcessCluster, what: str) -> None:
    dead = [n for n in cluster.controller_ids if not cluster.nodes[n].alive]
    assert not dead, f"controllers {dead} died after {what}"


def fuzz_request(rng: random.Random, cluster_id: str) -> tuple[str, Any]:
    def i32() -> int:
        return rng.choice([-(2**31), -1, 0, 1, 2, 3, 4, EPOCH_MAX, EPOCH_MAX + 1, INT32_MAX])

    def i64() -> int:
        return rng.choice([-(2**63), -1, 0, 1, 5, 1_000_000, INT64_MAX])

    def small() -> int:
        return rng.choice([i32(), rng.randrange(-3, 8)])

    header = {
        "cluster_id": rng.choice([cluster_id, cluster_id, "", "x" * rng.randrange(300)]),
        "topic_id": rng.choice([TOPIC_ID, TOPIC_ID, b"", b"\x00" * 16, bytes(rng.randrange(40))]),
        "partition_index": rng.choice([0, 0, 0, small()]),
    }
    kind = rng.choice(
        ["Vote", "BeginQuorumEpoch", "EndQuorumEpoch", "Fetch", "DescribeQuorum", "FetchSnapshot"]
    )
    if kind == "Vote":
        return kind, raft_pb2.VoteRequest(
            **header, candidate_epoch=small(), candidate_id=small(), last_offset_epoch=small(),
            last_offset=i64(), pre_vote=rng.random() < 0.5, voter_id=small(),
        )  # fmt: skip
    if kind == "BeginQuorumEpoch":
        return kind, raft_pb2.BeginQuorumEpochRequest(
            **header, leader_id=small(), leader_epoch=small(), voter_id=small()
        )
    if kind == "EndQuorumEpoch":
        successors = [small() for _ in range(rng.choice([0, 1, 3, 5, 2000]))]
        return kind, raft_pb2.EndQuorumEpochRequest(
            **header, leader_id=small(), leader_epoch=small(), preferred_successors=successors
        )
    if kind == "Fetch":
        return kind, raft_pb2.FetchRequest(
            **header, replica_id=rng.choice([small(), 1000 + rng.randrange(10_000)]),
            current_leader_epoch=small(), fetch_offset=i64(), last_fetched_epoch=small(),
            max_wait_ms=rng.choice([0, 0, 10, -1, INT32_MAX]), max_bytes=small(),
            high_watermark=i64(),
        )  # fmt: skip
    if kind == "FetchSnapshot":
        return kind, raft_pb2.FetchSnapshotRequest(
            **header, replica_id=small(), current_leader_epoch=small(),
            snapshot_id=raft_pb2.SnapshotId(end_offset=i64(), epoch=small()),
            position=i64(), max_bytes=small(),
        )  # fmt: skip
    return kind, raft_pb2.DescribeQuorumRequest(**header)


def test_hostile_requests_neither_crash_nor_wedge_the_quorum(tmp_path: Path) -> None:
    # PLAINTEXT: nobody is authenticated, so every forged id reaches the Raft core; this is
    # the core's own defence (with mTLS the claims are refused before it, test_node_identity).
    with cluster_with_brokers(tmp_path, brokers=1, security="plaintext") as cluster:
        peers = stubs(cluster)
        voters = cluster.controller_ids
        leader, epoch, _ = cluster.wait_for_leader(timeout_s=30)
        # What an outsider learns: DescribeQuorum with an empty cluster id is the tools' path;
        # an unauthenticated caller sees the quorum, not the cluster id. Every request below
        # carries the real id (an attacker who guessed or stole it), so the core is exercised.
        described = peers[leader].DescribeQuorum(raft_pb2.DescribeQuorumRequest(), timeout=2)
        assert (described.cluster_id, described.leader_id) == ("", leader)
        cluster_id = cluster.cluster_id
        known = peers[leader].DescribeQuorum(
            raft_pb2.DescribeQuorumRequest(cluster_id=cluster_id), timeout=2
        )
        assert known.cluster_id == cluster_id
        # A wrong cluster id learns nothing.
        foreign = peers[leader].DescribeQuorum(
            raft_pb2.DescribeQuorumRequest(cluster_id="T3RoZXJDbHVzdGVySWQxMQ"), timeout=2
        )
        assert foreign.error_code == 104  # INCONSISTENT_CLUSTER_ID
        assert (foreign.cluster_id, foreign.leader_id, foreign.leader_epoch) == ("", -1, -1)
        header = {"cluster_id": cluster_id, "topic_id": TOPIC_ID, "partition_index": 0}

        # The one-RPC crash: BeginQuorumEpoch for the current epoch naming the
        # receiver, or another voter, as leader.
        for target, stub in peers.items():
            for named in voters:
                answer = call(
                    stub.BeginQuorumEpoch,
                    raft_pb2.BeginQuorumEpochRequest(
                        **header, leader_id=named, leader_epoch=epoch, voter_id=target
                    ),
                )
                if named != leader or target == leader:
                    assert answer.error_code in (42, 74), (target, named, answer)
        # The wedge: a Vote for epoch 2^31-1 (and just past EPOCH_MAX), then epoch+1 again and
        # again.
        for target, stub in peers.items():
            candidate = next(v for v in voters if v != target)
            for candidate_epoch in (INT32_MAX, EPOCH_MAX + 1):
                answer = call(
                    stub.Vote,
                    raft_pb2.VoteRequest(
                        **header, candidate_epoch=candidate_epoch, candidate_id=candidate,
                        last_offset_epoch=candidate_epoch, last_offset=INT64_MAX,
                        pre_vote=False, voter_id=target,
                    ),
                )  # fmt: skip
                assert answer.error_code == 42 and not answer.vote_granted, answer
        for _ in range(30):
            current = cluster.leader()
            for target, stub in peers.items():
                candidate = next(v for v in voters if v != target)
                e = (current[1] if current else epoch) + 1
                call(
                    stub.Vote,
                    raft_pb2.VoteRequest(
                        **header, candidate_epoch=e, candidate_id=candidate,
                        last_offset_epoch=e, last_offset=INT64_MAX, pre_vote=False,
                        voter_id=target,
                    ),
                )  # fmt: skip
        # Sticky leaders: the epoch+1 flood deposed nobody.
        still = cluster.leader()
        assert still is not None and still[:2] == (leader, epoch), (still, leader, epoch)
        assert_all_alive(cluster, "the issue's messages")

        # Spoofed ids within the rules: a voter's Fetch past the leader's log end diverges; an
        # EndQuorumEpoch in the leader's name forces an election at worst.
        follower = next(v for v in voters if v != leader)
        answer = call(
            peers[leader].Fetch,
            raft_pb2.FetchRequest(
                **header, replica_id=follower, current_leader_epoch=epoch,
                fetch_offset=INT64_MAX, last_fetched_epoch=epoch, max_wait_ms=0,
                max_bytes=1 << 20, high_watermark=0,
            ),
        )  # fmt: skip
        assert answer.HasField("diverging_epoch"), answer
        for target in voters:
            call(
                peers[target].EndQuorumEpoch,
                raft_pb2.EndQuorumEpochRequest(
                    **header, leader_id=leader, leader_epoch=epoch,
                    preferred_successors=[v for v in voters if v != leader],
                ),
            )  # fmt: skip
        # Observer-id flood: many distinct replica ids, bounded on the leader.
        current = cluster.wait_for_leader(timeout_s=30)
        for replica in range(5_000, 6_000):
            call(
                peers[current[0]].Fetch,
                raft_pb2.FetchRequest(
                    **header, replica_id=replica, current_leader_epoch=current[1],
                    fetch_offset=0, last_fetched_epoch=0, max_wait_ms=0, max_bytes=1024,
                ),
            )  # fmt: skip
        assert_all_alive(cluster, "spoofed ids and an observer flood")

        # A seeded fuzzer over every QuorumService request's fields, for a bounded time.
        seed = int(os.environ.get("HOSTILE_FUZZ_SEED", str(random.randrange(1 << 30))))
        rng = random.Random(seed)
        deadline = time.monotonic() + FUZZ_S
        sent = 0
        while time.monotonic() < deadline:
            kind, request = fuzz_request(rng, cluster_id)
            call(getattr(peers[rng.choice(voters)], kind), request)
            sent += 1
        assert sent > 50, sent
        assert_all_alive(cluster, f"{sent} fuzzed requests (seed {seed})")

        # Afterwards: a leader, a committed write, agreeing committed logs.
        cluster.wait_for_leader(timeout_s=30)
        address = ",".join(cluster.nodes[n].address for n in voters)
        with cluster.admin(address) as admin:
            created = wait_until(
                lambda: _try_create(admin), 60, f"a committed create after fuzz seed {seed}"
            )
        assert created is not None
        _, _, hw = wait_until(
            lambda: (found := cluster.leader()) is not None and found[2] > 0 and found,
            20,
            "a leader with a high watermark",
        )

        # Each voter's own log, not the leader's view of it: a fuzzed Fetch in a voter's name
        # (believed on PLAINTEXT, docs/security.md) can make the leader report a log end
        # offset that voter does not hold yet.
        def committed_prefixes() -> list[list[dict[str, Any]]] | None:
            dumps = [[r for r in cluster.log_dump(n) if int(r["offset"]) < hw] for n in voters]
            held = all(dump and int(dump[-1]["offset"]) == hw - 1 for dump in dumps)
            return dumps if held else None

        prefixes = wait_until(
            committed_prefixes, 20, f"every voter holding the committed log (fuzz seed {seed})"
        )
        assert all(p == prefixes[0] for p in prefixes), f"committed logs differ (seed {seed})"
        for n in voters:
            logs = cluster.logs(n)
            for bug in ("IllegalTransitionError", "AssertionError", "Traceback"):
                assert bug not in logs, f"controller {n} logged {bug} (seed {seed})"
        assert_all_alive(cluster, "the final checks")


def _try_create(admin: AdminClient) -> object | None:
    try:
        return admin.create_topics([NewTopic("after-the-attack", 1, 1)])
    except Exception as exc:  # retried until the deadline; the last error is in the log
        if "TOPIC_ALREADY_EXISTS" in repr(exc) or "already exists" in str(exc):
            return exc
        return None


def test_a_persisted_epoch_at_int32_max_refuses_to_start_and_says_what_to_do(
    tmp_path: Path,
) -> None:
    """A quorum-state pushed to 2^31-1 (by a forged Vote to an older version) leaves no room
    for an election: the node says so at start-up instead of running leaderless."""
    with process_cluster(tmp_path, voters=1) as cluster:
        cluster.format()
        node = cluster.nodes[1]
        node.metadata_dir.mkdir(parents=True, exist_ok=True)
        store = ElectionStore(node.metadata_dir / QUORUM_STATE_FILE_NAME)
        store.write(ElectionState(INT32_MAX, None, None, frozenset({1})))
        result = run_cli("controller", "start", "--config", str(node.config), check=False)
        assert result.returncode == 1
        assert f"epoch {INT32_MAX}" in result.stderr
        assert "format a new cluster" in result.stderr
