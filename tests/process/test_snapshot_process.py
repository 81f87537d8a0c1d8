"""Snapshots with real processes (KIP-630): controllers snapshot and clean their logs, restart
from the snapshot, and a wiped broker is brought back by FetchSnapshot (ACLs included)."""

from __future__ import annotations

import contextlib
import json
import shutil
import signal
from pathlib import Path

import pytest

from quorum.admin import NewTopic, TopicCollection
from quorum.errors import TopicAuthorizationFailedError
from quorum.harness import FakeBrokers, ProcessCluster, process_cluster, wait_until
from quorum.security.acls import (
    AclBinding,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourceType,
)

pytestmark = [pytest.mark.slow]

SMALL = {
    "metadata.log.max.record.bytes.between.snapshots": 20_000,
    "metadata.log.segment.bytes": 16_384,
    "metadata.max.retention.bytes": 40_000,
}


def checkpoints(cluster: ProcessCluster, node_id: int) -> list[Path]:
    return sorted(cluster.nodes[node_id].metadata_dir.glob("*.checkpoint"))


def log_bytes(cluster: ProcessCluster, node_id: int) -> int:
    return sum(p.stat().st_size for p in cluster.nodes[node_id].metadata_dir.glob("*.log"))


def disk_bytes(cluster: ProcessCluster, node_id: int) -> int:
    """Log segments plus snapshots: what metadata.max.retention.bytes bounds."""
    return log_bytes(cluster, node_id) + sum(
        p.stat().st_size for p in checkpoints(cluster, node_id)
    )


def events(cluster: ProcessCluster, node_id: int, name: str) -> list[dict[str, object]]:
    found = []
    for line in cluster.logs(node_id).splitlines():
        if f'"{name}"' in line and line.startswith("{"):
            event = json.loads(line)
            if event.get("event") == name:
                found.append(event)
    return found


def bootstrap(cluster: ProcessCluster) -> str:
    return ",".join(cluster.nodes[n].address for n in cluster.controller_ids)


def test_controllers_snapshot_clean_and_restart_from_snapshot(tmp_path: Path) -> None:
    with process_cluster(
        tmp_path,
        brokers=2,
        settings=SMALL,
        broker_settings={**SMALL, "delete.topic.delay.ms": 500},
    ) as cluster:
        cluster.format()
        cluster.start_all()
        cluster.wait_for_leader(timeout_s=30)
        admin = cluster.admin(bootstrap(cluster), timeout_s=30)
        wait_until(
            lambda: sum(1 for b in admin.describe_cluster().brokers if not b.is_fenced) == 2,  # type: ignore[attr-defined]
            30,
            "brokers unfenced",
        )
        sizes: list[int] = []
        for round_ in range(12):
            names = [f"r{round_}-t{i}" for i in range(40)]
            admin.create_topics([NewTopic(n, 2, 2) for n in names]).all()
            admin.delete_topics(TopicCollection.of_topic_names(names[:30])).all()
            sizes.append(disk_bytes(cluster, 1))
        for node_id in [*cluster.controller_ids, *cluster.broker_ids]:
            wait_until(lambda n=node_id: checkpoints(cluster, n), 30, f"a snapshot on {node_id}")  # type: ignore[misc]
        # Log and snapshots are cleaned to metadata.max.retention.bytes (a soft limit: whole
        # segments, and the newest snapshot always stays): they do not grow with the history.
        assert max(sizes[-4:]) < 40_000 + 3 * 16_384, sizes
        assert cluster.log_dump(1)[0]["offset"] > 0
        # Brokers snapshot their copy too, and clean it the same way.
        for broker_id in cluster.broker_ids:
            wait_until(
                lambda b=broker_id: events(cluster, b, "snapshot_taken"),  # type: ignore[misc]
                30,
                f"a snapshot taken by broker {broker_id}",
            )
        expected = {t.name: t.topic_id for t in admin.list_topics(exclude_internal=True).listings()}
        assert len(expected) == 12 * 10
        # A controller restarted after all this starts from its snapshot plus the log after it.
        follower = next(n for n in cluster.controller_ids if cluster.leader()[0] != n)  # type: ignore[index]
        cluster.kill(follower, signal.SIGKILL)
        cluster.start(follower)
        wait_until(lambda: '"snapshot_loaded"' in cluster.logs(follower), 30, "snapshot load")
        final = admin.list_topics().metadata_offset  # type: ignore[attr-defined]
        with cluster.admin(cluster.nodes[follower].address, timeout_s=30) as one:
            seen = one.list_topics(exclude_internal=True, min_metadata_offset=final)  # type: ignore[call-arg]
        assert {t.name: t.topic_id for t in seen.listings()} == expected
        # So does a broker: its own snapshot plus the log after it, then the same topics.
        cluster.kill(101, signal.SIGKILL)
        cluster.start(101)
        wait_until(lambda: events(cluster, 101, "snapshot_loaded"), 30, "broker snapshot load")
        with cluster.admin(cluster.nodes[101].address, timeout_s=30) as one:
            seen = one.list_topics(exclude_internal=True, min_metadata_offset=final)  # type: ignore[call-arg]
        assert {t.name: t.topic_id for t in seen.listings()} == expected
        admin.close()


def test_controller_restarts_from_its_snapshot_after_50000_records(tmp_path: Path) -> None:
    settings = {"metadata.log.max.record.bytes.between.snapshots": 262_144}
    with process_cluster(tmp_path, settings=settings) as cluster:
        cluster.format()
        cluster.start_all()
        cluster.wait_for_leader(timeout_s=30)
        test_brokers = FakeBrokers(cluster, [201, 202, 203])
        test_brokers.register()
        wait_until(test_brokers.heartbeat_all, 20, "every test broker unfenced")
        with contextlib.ExitStack() as stack:
            stack.callback(test_brokers.stop)
            admin = stack.enter_context(cluster.admin(bootstrap(cluster), timeout_s=60))
            # 26 requests of 1,000 topics with one partition: 2 records each, 52,000 records.
            for round_ in range(26):
                admin.create_topics([NewTopic(f"big{round_}-{i}", 1, 3) for i in range(1000)]).all()
            final = admin.list_topics().metadata_offset  # type: ignore[attr-defined]
            assert final >= 52_000
            follower = next(n for n in cluster.controller_ids if cluster.leader()[0] != n)  # type: ignore[index]
            wait_until(
                lambda: any(
                    int(e["end_offset"]) > 40_000  # type: ignore[call-overload]
                    for e in events(cluster, follower, "snapshot_taken")
                ),
                60,
                "a snapshot past 40,000 records on the follower",
            )
            cluster.kill(follower, signal.SIGKILL)
            cluster.start(follower)
            wait_until(lambda: events(cluster, follower, "snapshot_loaded"), 60, "snapshot load")
            loaded = events(cluster, follower, "snapshot_loaded")[-1]
            assert int(loaded["end_offset"]) > 40_000, loaded  # type: ignore[call-overload]
            assert int(loaded["topics"]) > 20_000, loaded  # type: ignore[call-overload]
            # Only the log after the snapshot was replayed (a few MiB of batches at most).
            assert int(loaded["log_batches_after"]) < 1_000, loaded  # type: ignore[call-overload]
            with cluster.admin(cluster.nodes[follower].address, timeout_s=60) as one:
                seen = one.list_topics(exclude_internal=True, min_metadata_offset=final)  # type: ignore[call-arg]
            assert len(seen.listings()) == 26_000
            assert {t.name: t.topic_id for t in seen.listings()} == {
                t.name: t.topic_id for t in admin.list_topics(exclude_internal=True).listings()
            }


def test_wiped_broker_is_brought_back_by_fetch_snapshot(tmp_path: Path) -> None:
    with process_cluster(
        tmp_path, brokers=2, settings=SMALL, broker_settings={"delete.topic.delay.ms": 500}
    ) as cluster:
        cluster.format()
        cluster.start_all()
        cluster.wait_for_leader(timeout_s=30)
        admin = cluster.admin(bootstrap(cluster), timeout_s=30)
        wait_until(
            lambda: sum(1 for b in admin.describe_cluster().brokers if not b.is_fenced) == 2,  # type: ignore[attr-defined]
            30,
            "brokers unfenced",
        )
        cluster.kill(102, signal.SIGKILL)  # a crash: its session lives on, it keeps its placements
        for round_ in range(10):
            admin.create_topics([NewTopic(f"w{round_}-{i}", 1, 2) for i in range(40)]).all()
        # An ACL the wiped broker learns only from the snapshot (docs/authorization.md).
        admin.create_acls(
            [
                AclBinding(
                    ResourceType.TOPIC, "w0-0", PatternType.LITERAL, "User:CN=alice", "*",
                    AclOperation.DESCRIBE, AclPermissionType.ALLOW,
                )
            ]
        ).all()  # fmt: skip
        for round_ in range(2):  # and a snapshot after it
            admin.create_topics([NewTopic(f"x{round_}-{i}", 1, 2) for i in range(40)]).all()
        leader = cluster.leader()[0]  # type: ignore[index]
        # The leader keeps only the log after its newest snapshot in memory: a fetch from
        # offset 0 is answered with that snapshot's id, whatever retention keeps on disk.
        wait_until(lambda: checkpoints(cluster, leader), 30, "a snapshot on the leader")
        broker = cluster.nodes[102]
        shutil.rmtree(broker.metadata_dir)  # its copy of the metadata log is gone
        cluster.start(102)
        wait_until(lambda: '"snapshot_installed"' in cluster.logs(102), 60, "FetchSnapshot")
        expected = {f"w{r}-{i}-0" for r in range(10) for i in range(40)}
        wait_until(
            lambda: expected <= {p.name for p in broker.log_dir.iterdir()},
            60,
            "the wiped broker creating every partition after the snapshot",
        )
        events = [json.loads(line) for line in cluster.logs(102).splitlines() if "{" in line]
        assert any(e.get("event") == "reconciled" and e.get("mode") == "FULL" for e in events)
        # The broker's own reads enforce the ACL it got from the snapshot.
        with cluster.admin(broker.address, security=cluster.client_security("alice")) as alice:
            described = alice.describe_topics(
                TopicCollection.of_topic_names(["w0-0", "w0-1"])
            ).topic_name_values()
        assert described is not None
        assert described["w0-0"].ok
        assert isinstance(described["w0-1"].error, TopicAuthorizationFailedError)
        admin.close()


TINY = {
    "metadata.log.max.record.bytes.between.snapshots": 1500,
    "metadata.log.segment.bytes": 1024,
    "metadata.max.idle.interval.ms": 100,
}


def truncate_newest_checkpoint(cluster: ProcessCluster, victim: int) -> Path:
    cluster.kill(victim, signal.SIGKILL)
    newest = checkpoints(cluster, victim)[-1]
    newest.write_bytes(newest.read_bytes()[:-7])
    return newest


def test_truncated_newest_checkpoint_falls_back_to_the_previous_one(tmp_path: Path) -> None:
    """Retention keeps older snapshots and the log between them: a truncated newest .checkpoint
    is reported and the controller starts from the previous one plus the log."""
    with process_cluster(
        tmp_path, settings={**TINY, "metadata.max.retention.bytes": -1}
    ) as cluster:
        cluster.format()
        cluster.start_all()
        cluster.wait_for_leader(timeout_s=30)
        victim = next(n for n in cluster.controller_ids if cluster.leader()[0] != n)  # type: ignore[index]
        wait_until(lambda: len(checkpoints(cluster, victim)) >= 3, 60, "three snapshots")
        newest = truncate_newest_checkpoint(cluster, victim)
        previous = checkpoints(cluster, victim)[-2]
        cluster.start(victim)
        wait_until(lambda: events(cluster, victim, "snapshot_loaded"), 30, "snapshot load")
        skipped = events(cluster, victim, "corrupt_snapshot_skipped")
        assert skipped and newest.name in str(skipped[0]["problem"])
        loaded = events(cluster, victim, "snapshot_loaded")[-1]
        assert int(loaded["end_offset"]) == int(previous.name.split("-")[0])  # type: ignore[call-overload]
        # It catches up from there: it serves reads at the leader's current offset.
        with cluster.admin(bootstrap(cluster), timeout_s=30) as admin:
            final = admin.list_topics().metadata_offset  # type: ignore[attr-defined]
        assert final > int(newest.name.split("-")[0])
        with cluster.admin(cluster.nodes[victim].address, timeout_s=30) as one:
            seen = one.list_topics(min_metadata_offset=final)  # type: ignore[call-arg]
        assert seen.metadata_offset >= final  # type: ignore[attr-defined]


def test_truncated_newest_checkpoint_without_fallback_refuses_to_start(tmp_path: Path) -> None:
    """With retention cleaning everything before the newest snapshot there is nothing to fall
    back on: the controller refuses to start, names the file and says what to do."""
    from quorum.harness import run_cli  # noqa: PLC0415

    with process_cluster(tmp_path, settings={**TINY, "metadata.max.retention.bytes": 1}) as cluster:
        cluster.format()
        cluster.start_all()
        cluster.wait_for_leader(timeout_s=30)
        victim = next(n for n in cluster.controller_ids if cluster.leader()[0] != n)  # type: ignore[index]
        # NoOps alone fill the log; wait for a snapshot that cleaned it.
        wait_until(
            lambda: checkpoints(cluster, victim) and cluster.log_dump(victim)[0]["offset"] > 0,
            60,
            "a snapshot and a cleaned log",
        )
        newest = truncate_newest_checkpoint(cluster, victim)
        result = run_cli(
            "controller", "start", "--config", str(cluster.nodes[victim].config), check=False,
            timeout_s=60,
        )  # fmt: skip
        assert result.returncode != 0
        assert newest.name in result.stdout + result.stderr
        assert "move the directory aside" in result.stderr
