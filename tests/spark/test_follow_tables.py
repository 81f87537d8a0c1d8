"""``metaquorum replay --follow`` keeps the analytics tables current: it follows a live
3-controller quorum through creations, deletions and the recreation of a name, is killed with
kill -9 while a refresh of its tables is in flight and started again, and once it has caught up
with the log every table it publishes (``OUT/topic_lifecycle``, ... through ``OUT/current``)
holds the same rows as a one-off ``replay`` of the same log.

The command runs as a user runs it (its own process, a local[2] master, refreshes every
second). Its first life streams the creations, the deletion and the recreation as the quorum
writes them and is killed during its first refresh; more changes follow while nothing follows
the log, the quorum stops (so that every reader sees the same final log), and the second life
catches up to the last offset (``--until-offset``, which ends with a refresh of every record).
The one-off replay runs in this process on the tests' session.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
from pathlib import Path
from typing import Any

import pytest

from quorum.admin import AdminClient, NewTopic, TopicCollection
from quorum.analytics.follow_tables import (
    CURRENT,
    FRESHNESS,
    TABLE_NAMES,
    TABLES,
    current_freshness,
)
from quorum.analytics.replay import run_replay
from quorum.analytics.stream import checkpointed_offset
from quorum.harness import METAQUORUM, REPO, FakeBrokers, process_cluster, wait_until
from tests.spark.test_replay_follow import group_gone

# Two lives of the command (a JVM each), about six table refreshes' worth of Spark jobs.
pytestmark = [pytest.mark.process, pytest.mark.slow, pytest.mark.timeout(600)]


def published(out: Path) -> int:
    fresh = current_freshness(out)
    return -1 if fresh is None else fresh.up_to_offset


class Follow:
    """One life of ``replay --follow`` in a session of its own (its JVM included)."""

    def __init__(self, log_dir: Path, out: Path, output: Path, *extra: str) -> None:
        self.output = output
        with output.open("w") as sink:
            self.process = subprocess.Popen(
                [
                    *METAQUORUM,
                    "replay",
                    "--follow",
                    "--log-dir",
                    str(log_dir),
                    "--out",
                    str(out),
                    "--master",
                    "local[2]",
                    "--trigger-interval",
                    "0.5",
                    *(extra or ("--refresh-interval", "1")),
                ],
                cwd=REPO,
                stdout=sink,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )

    def alive(self) -> bool:
        return self.process.poll() is None

    def text(self) -> str:
        return self.output.read_text()

    def end(self, sig: int) -> int:
        try:
            self.process.send_signal(sig)
            return self.process.wait(timeout=120)
        finally:
            if self.process.poll() is None:
                self.process.kill()
                self.process.wait()
            wait_until(lambda: group_gone(self.process.pid), 60, "the follow's JVM exits")


def rows(spark: Any, path: Path) -> Any:
    return spark.read.parquet(str(path))


def test_follow_keeps_every_table_equal_to_a_one_off_replay(spark: Any, tmp_path: Path) -> None:
    out, oneoff = tmp_path / "follow", tmp_path / "oneoff"
    records = out / "_checkpoints" / "records"
    with process_cluster(tmp_path / "cluster") as cluster:
        cluster.format()
        cluster.start_all()
        leader, _, _ = cluster.wait_for_leader(timeout_s=30)
        brokers = FakeBrokers(cluster, [101, 102, 103])
        brokers.register()
        wait_until(brokers.heartbeat_all, 20, "every test broker unfenced")
        directory = cluster.nodes[leader].metadata_dir
        try:
            with AdminClient(cluster.bootstrap, security=cluster.client_security()) as admin:

                def create(name: str) -> int:
                    return admin.create_topics([NewTopic(name, 2, 2)]).metadata_offset

                def delete(name: str) -> int:
                    deleted = admin.delete_topics(TopicCollection.of_topic_names([name]))
                    deleted.all()
                    return deleted.metadata_offset

                first = Follow(directory, out, tmp_path / "first.out")
                try:
                    create("orders")
                    create("payments")
                    delete("orders")
                    recreated = create("orders")  # the name again, a new topic id
                    wait_until(
                        lambda: (
                            (checkpointed_offset(records) or 0) > recreated or not first.alive()
                        ),
                        120,
                        f"the stream committed offset {recreated}",
                    )
                    # kill -9 while the first refresh of the tables is in flight: its version
                    # directory exists, current does not point to it yet.
                    wait_until(
                        lambda: any((out / TABLES).iterdir()) or not first.alive(),
                        120,
                        "a refresh under way",
                    )
                    assert first.alive(), first.text()
                finally:
                    first.end(signal.SIGKILL)
                kept = os.readlink(out / CURRENT) if (out / CURRENT).is_symlink() else None
                cut_short = {
                    p.name for p in (out / TABLES).iterdir() if f"{TABLES}/{p.name}" != kept
                }
                if kept is not None:  # the refresh ended before the kill
                    for name in TABLE_NAMES:
                        assert (out / name / FRESHNESS).is_file(), name
                else:  # no table rather than a half-written one
                    assert not (out / "topic_lifecycle").exists()

                delete("payments")  # while nothing follows
                create("audit")
        finally:
            brokers.stop()
        cluster.stop_all()  # the log is final from here
        last = cluster.log_dump(leader)[-1]["offset"]
    # Until the last offset: it stops the stream there and publishes the tables of every record
    # (no refresh before: the first would come one interval after the start).
    second = Follow(
        directory,
        out,
        tmp_path / "second.out",
        "--until-offset",
        str(last),
        "--refresh-interval",
        "600",
    )
    try:
        code = second.process.wait(timeout=240)
    finally:
        second.end(signal.SIGKILL)
    assert published(out) == last, second.text()

    text = second.text()
    assert code == 0, text
    assert f"tables: up to offset {last:,}" in text, text
    # The restart removed the version the kill cut short; current and the one before remain.
    versions = [p.name for p in (out / TABLES).iterdir()]
    assert len(versions) <= 2 and not cut_short & set(versions), (versions, cut_short)
    assert os.readlink(out / CURRENT).startswith(f"{TABLES}/{last:020d}-")
    fresh = json.loads((out / "topic_lifecycle" / FRESHNESS).read_text())
    assert fresh["table"] == "topic_lifecycle" and fresh["up_to_offset"] == last, fresh

    assert run_replay(directory, oneoff, master=None) == 0
    for name in TABLE_NAMES:
        followed, replayed = rows(spark, out / name), rows(spark, oneoff / name)
        assert followed.columns == replayed.columns, name
        # As multisets of rows (the tables are small): one job per side.
        assert sorted(map(repr, followed.collect())) == sorted(map(repr, replayed.collect())), name
    reuse = {r["name"]: r for r in rows(spark, out / "name_reuse").collect()}
    assert set(reuse) == {"orders"}, reuse
    assert reuse["orders"]["incarnations"] == 2, reuse
    lifecycle = rows(spark, out / "topic_lifecycle").where("NOT internal").collect()
    assert sorted(r["name"] for r in lifecycle) == ["audit", "orders", "orders", "payments"]
    alive = {r["name"] for r in rows(spark, out / "state_as_of").where("NOT internal").collect()}
    assert alive == {"audit", "orders"}, alive
    assert (out / "report.md").read_text().startswith("# Metadata log replay")
