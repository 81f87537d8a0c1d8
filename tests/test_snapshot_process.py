"""Snapshots with real processes (KIP-630): controllers snapshot and clean their logs, restart
from the snapshot, and a wiped broker is brought back by FetchSnapshot."""

from __future__ import annotations

import json
import shutil
import signal
from pathlib import Path

import pytest

from quorum.admin import AdminClient, NewTopic, TopicCollection
from tests.process_cluster import ProcessCluster, process_cluster, wait_until

pytestmark = [pytest.mark.process, pytest.mark.slow]

SMALL = {
    "metadata.log.max.record.bytes.between.snapshots": 20_000,
    "metadata.log.segment.bytes": 16_384,
}


def checkpoints(cluster: ProcessCluster, node_id: int) -> list[Path]:
    return sorted(cluster.nodes[node_id].metadata_dir.glob("*.checkpoint"))


def log_bytes(cluster: ProcessCluster, node_id: int) -> int:
    return sum(p.stat().st_size for p in cluster.nodes[node_id].metadata_dir.glob("*.log"))


def bootstrap(cluster: ProcessCluster) -> str:
    return ",".join(cluster.nodes[n].address for n in cluster.controller_ids)


def test_controllers_snapshot_clean_and_restart_from_snapshot(tmp_path: Path) -> None:
    with process_cluster(
        tmp_path, brokers=2, settings=SMALL, broker_settings={"delete.topic.delay.ms": 500}
    ) as cluster:
        cluster.format()
        cluster.start_all()
        cluster.wait_for_leader(timeout_s=30)
        admin = AdminClient(bootstrap(cluster), timeout_s=30)
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
            sizes.append(log_bytes(cluster, 1))
        for node_id in cluster.controller_ids:
            wait_until(lambda n=node_id: checkpoints(cluster, n), 30, f"a snapshot on {node_id}")  # type: ignore[misc]
        # The log is cleaned behind the snapshots: it does not grow with the history.
        assert max(sizes[-4:]) < 8 * 16_384, sizes
        expected = {t.name: t.topic_id for t in admin.list_topics(exclude_internal=True).listings()}
        assert len(expected) == 12 * 10
        # A controller restarted after all this starts from its snapshot plus the log after it.
        follower = next(n for n in cluster.controller_ids if cluster.leader()[0] != n)  # type: ignore[index]
        cluster.kill(follower, signal.SIGKILL)
        cluster.start(follower)
        wait_until(lambda: '"snapshot_loaded"' in cluster.logs(follower), 30, "snapshot load")
        final = admin.list_topics().metadata_offset  # type: ignore[attr-defined]
        with AdminClient(cluster.nodes[follower].address, timeout_s=30) as one:
            seen = one.list_topics(exclude_internal=True, min_metadata_offset=final)  # type: ignore[call-arg]
        assert {t.name: t.topic_id for t in seen.listings()} == expected
        admin.close()


def test_wiped_broker_is_brought_back_by_fetch_snapshot(tmp_path: Path) -> None:
    with process_cluster(
        tmp_path, brokers=2, settings=SMALL, broker_settings={"delete.topic.delay.ms": 500}
    ) as cluster:
        cluster.format()
        cluster.start_all()
        cluster.wait_for_leader(timeout_s=30)
        admin = AdminClient(bootstrap(cluster), timeout_s=30)
        wait_until(
            lambda: sum(1 for b in admin.describe_cluster().brokers if not b.is_fenced) == 2,  # type: ignore[attr-defined]
            30,
            "brokers unfenced",
        )
        cluster.kill(102, signal.SIGTERM)
        for round_ in range(10):
            admin.create_topics([NewTopic(f"w{round_}-{i}", 1, 2) for i in range(40)]).all()
        leader = cluster.leader()[0]  # type: ignore[index]
        wait_until(lambda: checkpoints(cluster, leader), 30, "a snapshot on the leader")
        wait_until(
            lambda: cluster.log_dump(leader)[0]["offset"] > 0, 30, "the leader's log cleaned"
        )
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
        admin.close()


def test_truncated_newest_checkpoint_is_reported(tmp_path: Path) -> None:
    """A truncated newest .checkpoint is reported; with the log before it cleaned away there is
    nothing to fall back on, so the controller refuses to start and says what to do."""
    from tests.process_cluster import run_cli  # noqa: PLC0415

    tiny = {
        "metadata.log.max.record.bytes.between.snapshots": 1500,
        "metadata.log.segment.bytes": 1024,
        "metadata.max.idle.interval.ms": 100,
    }
    with process_cluster(tmp_path, settings=tiny) as cluster:
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
        cluster.kill(victim, signal.SIGKILL)
        newest = checkpoints(cluster, victim)[-1]
        newest.write_bytes(newest.read_bytes()[:-7])
        result = run_cli(
            "controller", "start", "--config", str(cluster.nodes[victim].config), check=False,
            timeout_s=60,
        )  # fmt: skip
        assert result.returncode != 0
        assert newest.name in result.stdout + result.stderr
        assert "move the directory aside" in result.stderr
