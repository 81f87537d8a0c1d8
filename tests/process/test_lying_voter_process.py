"""Issue 28, part 5: a lying voter's damage is bounded, on a real mTLS quorum. A process holding
one controller's own certificate (so every identity check passes) cannot jump the epoch, and
the write it makes the leader lose is not kept by the brokers forever: they find their
committed prefix diverging from the new leader's log, discard their copy, fetch it again and
drop the lost topic (quorum/raft/epoch_bounds.py, quorum/raft/prefix_divergence.py)."""

from __future__ import annotations

import dataclasses
import json
import signal
import threading
from pathlib import Path
from typing import Any

import grpc
import pytest

from quorum.admin import NewTopic
from quorum.errors import ErrorCode
from quorum.harness import ProcessCluster, process_cluster, wait_until
from quorum.ids import METADATA_TOPIC_ID
from quorum.limits import EPOCH_JUMP_MAX
from quorum.rpc.v1 import raft_pb2, raft_pb2_grpc
from quorum.security.acls import (
    AclBinding,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourceType,
)

pytestmark = [pytest.mark.slow]

FAR = 2**30
LOST_ACL = AclBinding(
    ResourceType.TOPIC,
    "lost",
    PatternType.LITERAL,
    "User:CN=lost",
    "*",
    AclOperation.DESCRIBE,
    AclPermissionType.ALLOW,
)
INT64_MAX = 2**63 - 1


def header(cluster: ProcessCluster) -> dict[str, Any]:
    return {
        "cluster_id": cluster.cluster_id,
        "topic_id": METADATA_TOPIC_ID.bytes,
        "partition_index": 0,
    }


def log_events(cluster: ProcessCluster, node_id: int, name: str) -> list[dict[str, Any]]:
    events = []
    for line in cluster.logs(node_id).splitlines():
        if f'"{name}"' in line:
            try:
                event = json.loads(line)
            except json.JSONDecodeError:
                continue
            if event.get("event") == name:
                events.append(event)
    return events


def node_epoch(cluster: ProcessCluster, stub: Any, node_id: int, candidate: int) -> int:
    """The epoch node ``node_id`` is in: the answer to a pre-vote, which changes nothing."""
    answer = stub.Vote(
        raft_pb2.VoteRequest(
            **header(cluster), candidate_epoch=1, candidate_id=candidate,
            last_offset_epoch=0, last_offset=0, pre_vote=True, voter_id=node_id,
        ),
        timeout=5,
    )  # fmt: skip
    return int(answer.leader_epoch)


def test_a_controller_certificate_cannot_jump_the_epoch(tmp_path: Path) -> None:
    """The issue: one BeginQuorumEpoch from node 2's certificate moved the cluster to epoch
    2,146,483,648. Now a BeginQuorumEpoch or Vote 2^30 epochs ahead, sent with a voter's own
    certificate in its own name, is refused INVALID_REQUEST naming both epochs and the bound,
    logged as epoch_jump_refused, and no epoch moves."""
    with process_cluster(tmp_path) as cluster:
        cluster.format()
        cluster.start_all()
        leader, epoch, _ = cluster.wait_for_agreed_leader(timeout_s=30)
        holder, other = [n for n in cluster.controller_ids if n != leader]
        security = cluster.node_security(holder)
        answers = []
        for target in (other, leader):
            with cluster.channel(target, security) as channel:
                stub = raft_pb2_grpc.QuorumServiceStub(channel)
                answers.append(
                    stub.BeginQuorumEpoch(
                        raft_pb2.BeginQuorumEpochRequest(
                            **header(cluster), leader_id=holder, leader_epoch=epoch + FAR,
                            voter_id=target,
                        ),
                        timeout=5,
                    )
                )  # fmt: skip
                answers.append(
                    stub.Vote(
                        raft_pb2.VoteRequest(
                            **header(cluster), candidate_epoch=epoch + FAR, candidate_id=holder,
                            last_offset_epoch=epoch, last_offset=INT64_MAX, pre_vote=False,
                            voter_id=target,
                        ),
                        timeout=5,
                    )
                )  # fmt: skip
        for answer in answers:
            assert answer.error_code == ErrorCode.INVALID_REQUEST, answer
            assert answer.leader_epoch < epoch + EPOCH_JUMP_MAX, answer
            for text in (str(epoch + FAR), f"EPOCH_JUMP_MAX ({EPOCH_JUMP_MAX})"):
                assert text in answer.error_message, answer.error_message
        # Nothing moved: the same leader leads the same epoch, and every node is in it.
        assert wait_until(cluster.leader, 5, "a leader")[:2] == (leader, epoch)
        with cluster.channel(leader, security) as channel:
            stub = raft_pb2_grpc.QuorumServiceStub(channel)
            assert node_epoch(cluster, stub, leader, holder) == epoch
        with cluster.channel(other, security) as channel:
            stub = raft_pb2_grpc.QuorumServiceStub(channel)
            assert node_epoch(cluster, stub, other, holder) == epoch
        for target in (other, leader):
            refused = log_events(cluster, target, "epoch_jump_refused")
            assert refused and str(epoch + FAR) in refused[0]["reason"], cluster.logs(target)[
                -2000:
            ]
            assert refused[0]["source"] == holder


class ForgedFollower:
    """Fetches from the leader in voter ``holder``'s name with ``holder``'s certificate, as a
    follower would (echoing the read fences too), and claims to hold whatever it was sent: the
    leader counts it toward the high watermark and check-quorum while the real ``holder`` is
    down."""

    def __init__(self, cluster: ProcessCluster, leader: int, holder: int, epoch: int) -> None:
        self.cluster, self.leader, self.holder, self.epoch = cluster, leader, holder, epoch
        self.stop = threading.Event()
        self.fetches = 0
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, name="forged-follower", daemon=True)

    def __enter__(self) -> ForgedFollower:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join(timeout=10)

    def _run(self) -> None:
        offset, last_epoch, fence = 0, 0, 0
        try:
            with self.cluster.channel(
                self.leader, self.cluster.node_security(self.holder)
            ) as channel:
                stub = raft_pb2_grpc.QuorumServiceStub(channel)
                while not self.stop.is_set():
                    answer = stub.Fetch(
                        raft_pb2.FetchRequest(
                            **header(self.cluster), replica_id=self.holder,
                            current_leader_epoch=self.epoch, fetch_offset=offset,
                            last_fetched_epoch=last_epoch, max_wait_ms=100,
                            max_bytes=1 << 20, high_watermark=0, read_fence=fence,
                        ),
                        timeout=5,
                    )  # fmt: skip
                    self.fetches += 1
                    fence = max(fence, answer.read_fence)
                    if answer.HasField("diverging_epoch"):
                        offset = answer.diverging_epoch.end_offset
                        last_epoch = answer.diverging_epoch.epoch
                    elif answer.HasField("snapshot_id") and answer.snapshot_id.end_offset > 0:
                        offset = answer.snapshot_id.end_offset
                        last_epoch = answer.snapshot_id.epoch
                    elif answer.batches:
                        last = answer.batches[-1]
                        offset, last_epoch = last.base_offset + last.record_count, last.epoch
        except grpc.RpcError as exc:
            if not self.stop.is_set():
                self.error = exc


def broker_topics(cluster: ProcessCluster, broker_id: int) -> set[str] | None:
    """The topics broker ``broker_id`` serves from its image (None: it refuses to answer)."""
    with cluster.admin(cluster.nodes[broker_id].address, timeout_s=3) as via_broker:
        try:
            return {t.name for t in via_broker.list_topics().listings()}
        except Exception:  # UNAVAILABLE while it catches up or rebuilds
            return None


def test_brokers_drop_a_write_the_quorum_lost(tmp_path: Path) -> None:
    """The issue's lost write. Both followers are down; a process with follower `holder`'s
    certificate fetches in its name and claims what it was sent, so the leader acknowledges a
    CreateTopics only it holds, and both brokers apply it. The leader is killed; the followers
    come back and elect a leader whose log lacks the topic. Before: both brokers refused the
    new leader's answers forever (about 1,000 per 20 s) and kept listing the lost topic. Now
    each logs committed_prefix_diverged once, fetches the log again and drops the topic."""
    with process_cluster(tmp_path, brokers=2) as cluster:
        cluster.format()
        cluster.start_all()
        leader, epoch, _ = cluster.wait_for_agreed_leader(timeout_s=30)
        admin = cluster.admin(timeout_s=30)
        wait_until(
            lambda: sum(1 for b in admin.describe_cluster().brokers if not b.is_fenced) == 2,  # type: ignore[attr-defined]
            30,
            "both brokers registered and unfenced",
        )
        admin.create_topics([NewTopic("kept", 1, 2)]).all()
        for broker_id in cluster.broker_ids:
            wait_until(
                lambda b=broker_id: "kept" in (broker_topics(cluster, b) or ()),  # type: ignore[misc]
                30,
                f"broker {broker_id} listing the first topic",
            )
        holder, other = [n for n in cluster.controller_ids if n != leader]
        cluster.kill(other)
        cluster.kill(holder)
        with ForgedFollower(cluster, leader, holder, epoch) as forger:
            admin.create_topics([NewTopic("lost-topic", 1, 2)]).all()
            for broker_id in cluster.broker_ids:
                wait_until(
                    lambda b=broker_id: "lost-topic" in (broker_topics(cluster, b) or ()),  # type: ignore[misc]
                    30,
                    f"broker {broker_id} applying the write only the leader holds",
                )
                wait_until(
                    lambda b=broker_id: (cluster.nodes[b].log_dir / "lost-topic-0").is_dir(),  # type: ignore[misc]
                    30,
                    f"broker {broker_id} creating the lost topic's partition",
                )
            assert forger.error is None, forger.error
        admin.close()
        cluster.kill(leader, signal.SIGKILL)
        cluster.start(holder)
        cluster.start(other)
        new_leader, _, _ = cluster.wait_for_leader(timeout_s=30, among=[holder, other])
        assert new_leader != leader

        def converged(broker_id: int) -> bool:
            topics = broker_topics(cluster, broker_id)
            return topics is not None and "kept" in topics and "lost-topic" not in topics

        for broker_id in cluster.broker_ids:
            wait_until(
                lambda b=broker_id: converged(b),  # type: ignore[misc]
                60,
                f"broker {broker_id} dropping the topic the quorum lost",
            )
        for broker_id in cluster.broker_ids:
            # Reconciled FULL on the rebuilt image: the lost topic's partition is moved aside.
            live = cluster.nodes[broker_id].log_dir / "lost-topic-0"
            wait_until(
                lambda d=live: not d.exists(),  # type: ignore[misc]
                30,
                f"broker {broker_id} moving the lost topic's partition aside",
            )
        for broker_id in cluster.broker_ids:
            assert cluster.nodes[broker_id].alive, cluster.logs(broker_id)[-3000:]
            diverged = log_events(cluster, broker_id, "committed_prefix_diverged")
            assert len(diverged) == 1, diverged  # once: no loop of refused answers
            assert diverged[0]["level"] == "error" and diverged[0]["leader_id"] == new_leader
            assert diverged[0]["truncate_to"] < diverged[0]["high_watermark"]
            assert log_events(cluster, broker_id, "metadata_image_rebuilt")
            rejected = log_events(cluster, broker_id, "response_rejected")
            assert len(rejected) <= 2, rejected
        # They follow the new leader from then on.
        with cluster.admin(timeout_s=30) as after:
            after.create_topics([NewTopic("after", 1, 2)]).all()
            for broker_id in cluster.broker_ids:
                wait_until(
                    lambda b=broker_id: "after" in (broker_topics(cluster, b) or ()),  # type: ignore[misc]
                    30,
                    f"broker {broker_id} following the new leader",
                )


def test_a_controller_that_applied_the_lost_write_stops_with_one_message(tmp_path: Path) -> None:
    """The same lost write, seen by the controller that acknowledged it: it snapshots after
    every commit, so once the others elected a leader without the write, its restart finds
    its own committed prefix (in its snapshot) diverging. It cannot vote or serve on that log:
    it exits 1 after one committed_prefix_diverged line saying what to do. Before, it refused
    the new leader's answers forever."""
    settings = {"metadata.log.max.record.bytes.between.snapshots": 1}
    with process_cluster(tmp_path, settings=settings) as cluster:
        cluster.format()
        cluster.start_all()
        leader, epoch, _ = cluster.wait_for_agreed_leader(timeout_s=30)
        holder, other = [n for n in cluster.controller_ids if n != leader]
        cluster.kill(other)
        cluster.kill(holder)
        with ForgedFollower(cluster, leader, holder, epoch), cluster.admin(timeout_s=30) as admin:
            # Writes that need no broker: ACLs only the leader will have held, enough of them
            # that the new leader's own log and snapshot stay below them for a while (a
            # snapshot ending above what the old leader saw committed would simply replace
            # its state when it comes back: no divergence to see).
            for i in range(30):
                admin.create_acls([dataclasses.replace(LOST_ACL, resource_name=f"lost-{i}")]).all()
            high_watermark = wait_until(cluster.leader, 10, "the leader")[2]

            def snapshotted() -> bool:
                ends = [
                    int(path.name.split("-")[0])
                    for path in cluster.nodes[leader].metadata_dir.glob("*.checkpoint")
                ]
                return max(ends, default=0) >= high_watermark

            wait_until(snapshotted, 30, "the leader snapshotting the lost write")
        cluster.kill(leader, signal.SIGKILL)
        cluster.start(holder)
        cluster.start(other)
        cluster.wait_for_leader(timeout_s=30, among=[holder, other])
        node = cluster.start(leader)
        process = node.process
        assert process is not None
        wait_until(lambda: process.poll() is not None, 60, "the diverged controller stopping")
        assert process.returncode == 1
        diverged = log_events(cluster, leader, "committed_prefix_diverged")
        assert len(diverged) == 1, diverged
        assert diverged[0]["level"] == "error" and diverged[0]["action"] == (
            "stopping this controller"
        )
        assert "restart it once" in diverged[0]["message"]
        assert not log_events(cluster, leader, "response_rejected")
        # The others go on without it, and without the lost ACL.
        with cluster.admin(timeout_s=30) as admin:
            assert not [a for a in admin.describe_acls() if a.resource_name.startswith("lost")]
