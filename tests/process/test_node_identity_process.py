"""A node speaks only for itself, on a real mTLS quorum (docs/security.md#what-a-node-may-claim):
a process holding one voter's certificate that claims another voter's replica id in Fetch, or
votes as it, is refused with CLUSTER_AUTHORIZATION_FAILED and the high watermark does not move,
even when that claim is the only thing that could advance it (both followers stopped)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from quorum.errors import ErrorCode
from quorum.harness import process_cluster, wait_until
from quorum.ids import METADATA_TOPIC_ID
from quorum.rpc.v1 import raft_pb2, raft_pb2_grpc


def leader_view(stub: Any) -> tuple[int, int, int, int]:
    """(leader id, epoch, high watermark, the leader's log end offset)."""
    answer = stub.DescribeQuorum(raft_pb2.DescribeQuorumRequest(), timeout=2)
    own = next(v for v in answer.current_voters if v.replica_id == answer.leader_id)
    return answer.leader_id, answer.leader_epoch, answer.high_watermark, own.log_end_offset


def test_a_voter_certificate_cannot_speak_for_another_voter(tmp_path: Path) -> None:
    with process_cluster(tmp_path) as cluster:
        cluster.format()
        cluster.start_all()
        leader, _, _ = cluster.wait_for_leader(timeout_s=30)
        holder, claimed = [n for n in cluster.controller_ids if n != leader]
        # The leader's NoOps keep its log growing; with both followers gone nothing commits.
        cluster.kill(holder)
        cluster.kill(claimed)
        with (
            cluster.channel(leader, cluster.node_security(holder)) as channel,
            cluster.channel(leader) as admin_channel,
        ):
            stub = raft_pb2_grpc.QuorumServiceStub(channel)
            admin_stub = raft_pb2_grpc.QuorumServiceStub(admin_channel)
            _, epoch, high_watermark, log_end = wait_until(
                lambda: (v := leader_view(admin_stub))[3] > v[2] and v,
                5,
                "the leader's log end past its high watermark",
            )
            header = {
                "cluster_id": cluster.cluster_id,
                "topic_id": METADATA_TOPIC_ID.bytes,
                "partition_index": 0,
            }
            # What the issue measured: a Fetch as `claimed` at the leader's log end would give
            # the leader a majority (itself + `claimed`) and commit what only it holds.
            forged = stub.Fetch(
                raft_pb2.FetchRequest(
                    **header, replica_id=claimed, current_leader_epoch=epoch,
                    fetch_offset=log_end, last_fetched_epoch=epoch, max_wait_ms=0,
                    max_bytes=1024,
                ),
                timeout=5,
            )  # fmt: skip
            assert forged.error_code == ErrorCode.CLUSTER_AUTHORIZATION_FAILED
            assert f"replica_id {claimed}" in forged.error_message
            assert f"names controller {holder}" in forged.error_message
            vote = stub.Vote(
                raft_pb2.VoteRequest(
                    **header, candidate_epoch=epoch + 1, candidate_id=claimed,
                    last_offset_epoch=epoch, last_offset=log_end, voter_id=leader,
                ),
                timeout=5,
            )  # fmt: skip
            assert vote.error_code == ErrorCode.CLUSTER_AUTHORIZATION_FAILED
            assert not vote.vote_granted
            after = leader_view(admin_stub)
            assert after[2] == high_watermark, "a refused Fetch moved the high watermark"
            assert after[1] == epoch, "a refused Vote moved the epoch"
        log = cluster.logs(leader)
        assert "request_refused" in log
