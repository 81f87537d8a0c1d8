"""A second ``controller start`` / ``broker start`` on the directories of a live node exits 1,
names the directory and the live node's pid, and changes no byte of the directories
(``quorum/storage/dirlock.py``); the live node keeps serving.

The live node is paused (SIGSTOP, its flock stays held) while the second process runs, so that
its own writes (NoOps, fetched batches) cannot hide or fake a change; it is resumed afterwards.
"""

from __future__ import annotations

import signal
from pathlib import Path

import pytest

from quorum.harness import (
    ProcessCluster,
    directory_state,
    process_cluster,
    run_cli,
    wait_for_unfenced_broker,
    wait_until,
)

pytestmark = [pytest.mark.slow]


def second_start_is_refused(
    cluster: ProcessCluster, node_id: int, named_dir: Path, *extra: str
) -> None:
    node = cluster.nodes[node_id]
    assert node.process is not None
    pid = node.process.pid
    node.process.send_signal(signal.SIGSTOP)
    try:
        before = directory_state(node.data_dir)
        result = run_cli(
            node.role, "start", "--config", str(node.config), *extra, check=False, timeout_s=60
        )
        after = directory_state(node.data_dir)
    finally:
        node.process.send_signal(signal.SIGCONT)
    assert result.returncode == 1, (result.returncode, result.stdout, result.stderr)
    assert f"data directory {named_dir} is locked by process {pid}" in result.stderr, result.stderr
    assert after == before, "the refused start changed the directory"
    assert node.alive


def test_second_start_on_a_live_directory_exits_1_and_changes_nothing(tmp_path: Path) -> None:
    with process_cluster(tmp_path, voters=1, brokers=1) as cluster:
        cluster.format()
        cluster.start_all()
        cluster.wait_for_leader(timeout_s=30)
        admin = cluster.admin(cluster.nodes[1].address, timeout_s=30)
        wait_for_unfenced_broker(admin, "the broker registered and unfenced")
        controller = cluster.nodes[1]
        broker = cluster.nodes[101]

        second_start_is_refused(cluster, 1, controller.data_dir)
        second_start_is_refused(cluster, 101, broker.data_dir / "metadata")
        # Its log.dirs entry is locked too: with a free metadata.log.dir of its own, a second
        # broker still stops at the live broker's log dir.
        spare = tmp_path / "spare-metadata"
        spare.mkdir()
        second_start_is_refused(
            cluster, 101, broker.log_dir, "--override", f"metadata.log.dir={spare}"
        )

        # Both live nodes keep serving.
        _, _, hw = cluster.wait_for_leader(timeout_s=30)
        wait_until(lambda: cluster.wait_for_leader()[2] > hw, 30, "the high watermark moving again")
        wait_for_unfenced_broker(admin, "the broker still unfenced")
        assert controller.alive and broker.alive
        admin.close()
