"""Brokers as real processes: they fetch the metadata log as observers, keep topic name <-> id
state, and reconcile partition directories (the KIP-516 stale-partition flow)."""

from __future__ import annotations

import errno
import json
import os
import shutil
import signal
import subprocess
from pathlib import Path

import pytest

from quorum.admin import AdminClient, NewTopic, TopicCollection
from quorum.harness import (
    METAQUORUM,
    REPO,
    ProcessCluster,
    directory_state,
    process_cluster,
    run_cli,
    wait_for_unfenced_broker,
    wait_until,
)
from quorum.ids import Uuid
from quorum.limits import PARTITION_METADATA_READ_ATTEMPTS_MAX

pytestmark = [pytest.mark.slow]

DELETE_DELAY_MS = 3000


def bootstrap(cluster: ProcessCluster) -> str:
    return ",".join(cluster.nodes[n].address for n in cluster.controller_ids)


def partition_dirs(cluster: ProcessCluster, broker_id: int) -> dict[str, Uuid]:
    """Live partition directories of a broker: name -> topic id from partition.metadata."""
    found: dict[str, Uuid] = {}
    log_dir = cluster.nodes[broker_id].log_dir
    for entry in sorted(log_dir.iterdir()) if log_dir.exists() else []:
        meta = entry / "partition.metadata"
        if entry.is_dir() and entry.name != "deleting" and meta.exists():
            lines = dict(line.split(": ", 1) for line in meta.read_text().splitlines())
            found[entry.name] = Uuid.parse(lines["topic_id"])
    return found


def deleting(cluster: ProcessCluster, broker_id: int) -> set[str]:
    directory = cluster.nodes[broker_id].log_dir / "deleting"
    if not directory.exists():
        return set()
    return {p.name for p in directory.iterdir() if p.is_dir()}


def assigned(admin: AdminClient, broker_id: int) -> dict[str, Uuid]:
    """What the committed image assigns to the broker (docs/invariants.md I11)."""
    expected: dict[str, Uuid] = {}
    names = [t.name for t in admin.list_topics(exclude_internal=True).listings()]
    if not names:
        return expected
    for d in (
        admin.describe_topics(TopicCollection.of_topic_names(names)).all_topic_names().values()
    ):
        for p in d.partitions:
            if broker_id in p.replicas:
                expected[f"{d.name}-{p.partition}"] = d.topic_id
    return expected


def check_reconciled(cluster: ProcessCluster, admin: AdminClient) -> None:
    """I11: live directories on disk == partitions assigned to the broker in the image."""
    for broker_id in cluster.broker_ids:
        wait_until(
            lambda b=broker_id: partition_dirs(cluster, b) == assigned(admin, b),  # type: ignore[misc]
            20,
            f"broker {broker_id}'s directories matching the committed image",
        )


def start_cluster(cluster: ProcessCluster) -> AdminClient:
    cluster.format()
    cluster.start_all()
    cluster.wait_for_leader(timeout_s=30)
    admin = cluster.admin(bootstrap(cluster), timeout_s=30)
    wait_until(
        lambda: sum(1 for b in admin.describe_cluster().brokers if not b.is_fenced) == 2,  # type: ignore[attr-defined]
        30,
        "both brokers registered and unfenced",
    )
    return admin


def test_stale_state_scenario_of_the_seed(tmp_path: Path) -> None:
    """Broker down, topic deleted and recreated (new id), broker back: the old partitions end
    in deleting/ and are deleted after the delay; the new ones exist with the new id."""
    settings = {"delete.topic.delay.ms": DELETE_DELAY_MS}
    with process_cluster(tmp_path, brokers=2, broker_settings=settings) as cluster:
        admin = start_cluster(cluster)
        old_id = admin.create_topics([NewTopic("orders", 3, 2)]).topic_id("orders")
        for broker_id in cluster.broker_ids:
            wait_until(
                lambda b=broker_id: (
                    partition_dirs(cluster, b)  # type: ignore[misc]
                    == {f"orders-{p}": old_id for p in range(3)}
                ),
                20,
                f"broker {broker_id} creating the orders partitions",
            )
        # A crash: its session lives on for broker.session.timeout.ms, so the recreated topic
        # (RF 2 on 2 brokers) is placed on it too. (A SIGTERM would fence it at once:
        # controlled shutdown, below.)
        cluster.kill(102, signal.SIGKILL)
        admin.delete_topics(TopicCollection.of_topic_names(["orders"])).all()
        new_id = admin.create_topics([NewTopic("orders", 3, 2)]).topic_id("orders")
        assert new_id != old_id
        # The running broker moves the old partitions aside and creates the new ones at once.
        wait_until(
            lambda: partition_dirs(cluster, 101) == {f"orders-{p}": new_id for p in range(3)},
            20,
            "broker 101 following the recreation",
        )
        assert partition_dirs(cluster, 102) == {f"orders-{p}": old_id for p in range(3)}
        cluster.start(102)
        wait_until(
            lambda: partition_dirs(cluster, 102) == {f"orders-{p}": new_id for p in range(3)},
            30,
            "broker 102 reconciling after its restart",
        )
        moved = deleting(cluster, 102)
        assert {f"{old_id}_{p}" for p in range(3)} <= moved
        warnings = [
            json.loads(line)
            for line in cluster.logs(102).splitlines()
            if "partition_moved_aside" in line
        ]
        assert warnings and all(w["level"] == "warning" and w.get("delete_at") for w in warnings)
        # After the (test-sized) delay, deleting/ is empty on both brokers.
        for broker_id in cluster.broker_ids:
            wait_until(
                lambda b=broker_id: not deleting(cluster, b),  # type: ignore[misc]
                DELETE_DELAY_MS / 1000 + 15,
                f"broker {broker_id} deleting the stale partitions",
            )
        check_reconciled(cluster, admin)
        # The broker answers metadata reads from its own image, with its applied offset.
        with cluster.admin(cluster.nodes[102].address) as via_broker:
            described = via_broker.describe_topics(
                TopicCollection.of_topic_ids([new_id]), min_metadata_offset=0
            ).all_topic_ids()[new_id]
        assert described.name == "orders"
        # Controlled shutdown (SIGTERM): the controller fences the broker before it exits
        # (not 9 s later, when its session would expire), and its next incarnation registers
        # at once instead of being refused DUPLICATE_BROKER_REGISTRATION.
        refusals_before = cluster.logs(102).count("DUPLICATE_BROKER_REGISTRATION")
        cluster.kill(102, signal.SIGTERM)
        assert "controlled_shutdown" in cluster.logs(102)
        fenced = {b.broker_id: b.is_fenced for b in admin.describe_cluster().brokers}  # type: ignore[attr-defined]
        assert fenced[102] and not fenced[101], fenced
        cluster.start(102)
        wait_until(
            lambda: not {b.broker_id: b.is_fenced for b in admin.describe_cluster().brokers}[102],  # type: ignore[attr-defined]
            20,
            "broker 102 unfenced after its restart",
        )
        assert cluster.logs(102).count("DUPLICATE_BROKER_REGISTRATION") == refusals_before
        admin.close()


def test_restart_in_the_middle_of_a_pending_deletion(tmp_path: Path) -> None:
    settings = {"delete.topic.delay.ms": 6000}
    with process_cluster(tmp_path, brokers=2, broker_settings=settings) as cluster:
        admin = start_cluster(cluster)
        topic_id = admin.create_topics([NewTopic("short-lived", 1, 2)]).topic_id("short-lived")
        wait_until(lambda: "short-lived-0" in partition_dirs(cluster, 101), 20, "the partition")
        admin.delete_topics(TopicCollection.of_topic_ids([topic_id])).all()
        wait_until(lambda: f"{topic_id}_0" in deleting(cluster, 101), 20, "the move aside")
        cluster.kill(101, signal.SIGKILL)
        cluster.start(101)
        wait_until(lambda: not deleting(cluster, 101), 6 + 20, "the deletion after restart")
        # It did not happen early: the journal kept the due time across the restart.
        log = cluster.logs(101)
        assert "partition_deleted" in log or "deleted" in log
        check_reconciled(cluster, admin)
        admin.close()


def test_damaged_directories_do_not_stop_the_broker(tmp_path: Path) -> None:
    with process_cluster(tmp_path, brokers=2) as cluster:
        cluster.format()
        log_dir = cluster.nodes[101].log_dir
        (log_dir / "nometa-0").mkdir()
        (log_dir / "garbage-0").mkdir()
        (log_dir / "garbage-0" / "partition.metadata").write_bytes(b"\x00\xffnot metadata")
        (log_dir / "half-built-0.tmp-abcdefghij").mkdir()
        (log_dir / "no partition number").mkdir()
        cluster.start_all()
        cluster.wait_for_leader(timeout_s=30)
        admin = cluster.admin(bootstrap(cluster), timeout_s=30)
        wait_until(lambda: not (log_dir / "nometa-0").exists(), 30, "the stale dirs moved aside")
        remaining = {p.name for p in log_dir.iterdir()}
        for name in ("garbage-0", "half-built-0.tmp-abcdefghij", "no partition number"):
            assert name not in remaining
        assert len(deleting(cluster, 101)) == 4
        assert cluster.nodes[101].alive
        report = run_cli("broker", "pending-deletions", "--config", str(cluster.nodes[101].config))
        rows = [json.loads(line) for line in report.stdout.splitlines()]
        assert sum(1 for r in rows if r["kind"] == "pending_deletion") == 4
        admin.close()


def test_brokers_follow_a_new_leader_after_kill_9(tmp_path: Path) -> None:
    with process_cluster(tmp_path, brokers=2) as cluster:
        admin = start_cluster(cluster)
        admin.create_topics([NewTopic(f"t{i}", 2, 2) for i in range(5)]).all()
        leader, _, _ = cluster.wait_for_leader()
        applied: dict[int, list[int]] = {b: [] for b in cluster.broker_ids}

        def broker_offset(broker_id: int) -> int:
            with cluster.admin(cluster.nodes[broker_id].address, timeout_s=5) as one:
                return one.list_topics().metadata_offset  # type: ignore[attr-defined,no-any-return]

        for broker_id in cluster.broker_ids:
            applied[broker_id].append(broker_offset(broker_id))
        cluster.kill(leader, signal.SIGKILL)
        others = [n for n in cluster.controller_ids if n != leader]
        new_leader, _, _ = wait_until(lambda: cluster.leader(others), 20, "a new leader")
        admin.create_topics([NewTopic("after-failover", 1, 2)]).all()
        final = admin.list_topics().metadata_offset  # type: ignore[attr-defined]
        for broker_id in cluster.broker_ids:
            wait_until(
                lambda b=broker_id: applied[b].append(broker_offset(b)) or applied[b][-1] >= final,  # type: ignore[func-returns-value,misc]
                30,
                f"broker {broker_id} applying the new leader's writes",
            )
            assert applied[broker_id] == sorted(applied[broker_id]), "an applied offset went back"
        # Each broker's image equals the controllers' at the same offset: same topics, ids and
        # partitions (described through the broker and through the controller).
        names = sorted(t.name for t in admin.list_topics(exclude_internal=True).listings())
        controller_view = admin.describe_topics(
            TopicCollection.of_topic_names(names), min_metadata_offset=final
        ).all_topic_names()
        for broker_id in cluster.broker_ids:
            with cluster.admin(cluster.nodes[broker_id].address) as via_broker:
                broker_view = via_broker.describe_topics(
                    TopicCollection.of_topic_names(names), min_metadata_offset=final
                ).all_topic_names()
            assert {n: (d.topic_id, d.partitions) for n, d in broker_view.items()} == {
                n: (d.topic_id, d.partitions) for n, d in controller_view.items()
            }
        # The brokers' copies of the log equal the new leader's up to what they applied.
        leader_log = cluster.log_dump(new_leader)
        for broker_id in cluster.broker_ids:
            broker_log = cluster.log_dump(broker_id)
            common = min(len(broker_log), len(leader_log))
            assert broker_log[:common] == leader_log[:common]
        check_reconciled(cluster, admin)
        admin.close()


# ----- a real EIO on partition.metadata (libfiu, issue #12) -----------------------------------

FIU_RUN = shutil.which("fiu-run")
FIU_CTRL = shutil.which("fiu-ctrl")
# libfiu's POSIX preload wraps open()/open64() but not openat(): the broker's os.open of a
# partition directory (the first step of reading its partition.metadata) calls open(), while
# listing a log dir (opendir) and writing to already-open segments do not. failinfo is the errno.
FIU_OPEN_EIO = f"name=posix/io/oc/open,failinfo={errno.EIO}"


def fiu_ctrl(pid: int, command: str) -> None:
    assert FIU_CTRL is not None
    subprocess.run([FIU_CTRL, "-c", command, str(pid)], check=True, timeout=10)


@pytest.mark.skipif(
    FIU_RUN is None or FIU_CTRL is None,
    reason="needs Debian's fiu-utils (fiu-run, fiu-ctrl) for a real EIO; scripts/test installs "
    "it when run as root with apt-get available",
)
def test_a_real_eio_on_partition_metadata_stops_the_broker_and_moves_nothing(
    tmp_path: Path,
) -> None:
    """Before issue #12 an EIO reading partition.metadata made the live partition look stale
    and reconciliation moved it to deleting/. Now the read is retried, then the broker stops
    (exit 1) naming the path and errno, and its log dir is exactly as it was."""
    assert FIU_RUN is not None
    with process_cluster(tmp_path, voters=1, brokers=1) as cluster:
        cluster.format()
        cluster.start(1)
        broker = cluster.nodes[101]
        # cluster.start, under fiu-run -x (it execs the broker: the pid is the broker's).
        broker.starts += 1
        with broker.log_path.open("ab") as log:
            broker.process = subprocess.Popen(
                [FIU_RUN, "-x", *METAQUORUM, "broker", "start", "--config", str(broker.config)],
                cwd=REPO,
                stdout=log,
                stderr=subprocess.STDOUT,
                env={**os.environ, "LOG_FORMAT": "json", "PYTHONUNBUFFERED": "1"},
            )
        cluster.wait_for_leader(timeout_s=30)
        admin = cluster.admin(cluster.nodes[1].address, timeout_s=30)
        wait_for_unfenced_broker(admin, "the broker registered and unfenced")
        admin.create_topics([NewTopic("live", 1, 1)]).all()
        metadata = broker.log_dir / "live-0" / "partition.metadata"
        wait_until(metadata.exists, 30, "live-0 created by the broker")
        (broker.log_dir / "live-0" / "00000000000000000000.log").write_bytes(b"precious")
        before = directory_state(broker.log_dir)

        pid = broker.process.pid
        fiu_ctrl(pid, f"enable {FIU_OPEN_EIO}")
        try:
            # A delete and recreate of "live" makes the broker read live-0's file (a pass
            # reads the entries named like the partitions the change touched): read as missing,
            # the old incarnation's data would be adopted by the new topic id.
            admin.delete_topics(TopicCollection.of_topic_names(["live"])).all()
            admin.create_topics([NewTopic("live", 1, 1)]).all()
            wait_until(
                lambda: "partition_metadata_read_failed" in cluster.logs(101),
                30,
                "the broker giving up on partition.metadata after its retries",
            )
        finally:
            if broker.alive:
                fiu_ctrl(pid, "disable name=posix/io/oc/open")
        assert broker.process.wait(timeout=30) == 1
        events = [
            json.loads(line)
            for line in cluster.logs(101).splitlines()
            if line.startswith("{") and '"event"' in line
        ]
        retried = [e for e in events if e["event"] == "partition_metadata_read_retried"]
        assert len(retried) == PARTITION_METADATA_READ_ATTEMPTS_MAX - 1
        (failed,) = [e for e in events if e["event"] == "log_dir_failed"]
        assert failed["path"] == str(metadata) and failed["errno"] == errno.EIO
        assert f"Error: cannot read {metadata}" in cluster.logs(101)
        # Not moved, not rewritten, no deleting/.
        assert directory_state(broker.log_dir) == before
        assert cluster.nodes[1].alive
        admin.close()


def test_a_log_dir_that_cannot_be_scanned_at_start_stops_the_broker_with_a_message(
    tmp_path: Path,
) -> None:
    """The start-up scan fails safe too: exit 1 with one line naming the log dir, no traceback,
    and nothing moved (no controller needed: the scan runs before the broker connects)."""
    with process_cluster(tmp_path, voters=1, brokers=1) as cluster:
        cluster.format(101)
        log_dir = cluster.nodes[101].log_dir
        (log_dir / "deleting").write_bytes(b"not a directory")
        (log_dir / "t-0").mkdir()
        result = run_cli("broker", "start", "--config", str(cluster.nodes[101].config), check=False)
        assert result.returncode == 1, result
        assert f"Error: {log_dir / 'deleting'} is a regular file" in result.stderr, result.stderr
        assert "Traceback" not in result.stderr
        assert '"event": "log_dir_failed"' in result.stderr
        assert sorted(p.name for p in log_dir.iterdir()) == [
            ".lock",
            "deleting",
            "meta.properties",
            "t-0",
        ]
