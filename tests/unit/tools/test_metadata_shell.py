"""`metaquorum metadata ls|cat|shell`: the image of a snapshot (+ the log after it) as a tree.

``ls`` and ``cat`` run as real processes; the interactive shell is driven through its
``cmd.Cmd`` API with scripted input."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from quorum.controller.requests import DeleteTopic
from quorum.metadata.batch import DecodedBatch, LogBatch, encode_batch
from quorum.metadata.delta import replay_batches, replay_records
from quorum.metadata.image import MetadataImage
from quorum.metadata.snapshot_records import image_to_records
from quorum.storage.log import SegmentedLog
from quorum.storage.snapshots import snapshot_path, write_snapshot
from quorum.tools.log_dump import dump_log
from quorum.tools.metadata_shell import (
    LoadedImage,
    MetadataShell,
    MetadataShellError,
    cat_paths,
    find_paths,
    load_image,
    ls_paths,
    tree_paths,
)
from tests.unit.controller.test_controller_topics import Harness
from tests.unit.metadata.test_snapshot_records import rich_image

REPO_ROOT = Path(__file__).resolve().parents[3]
SEGMENT_BYTES = 300  # several segments, so that cleaning has something to delete


@dataclass(frozen=True)
class Run:
    returncode: int
    stdout: str
    stderr: str


def metaquorum(*args: str | Path) -> Run:
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT), "LOG_FORMAT": "json"}
    result = subprocess.run(
        [sys.executable, "-m", "quorum.cli", *map(str, args)],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    return Run(result.returncode, result.stdout, result.stderr)


def encode(batch: DecodedBatch) -> LogBatch:
    return encode_batch(
        base_offset=batch.base_offset,
        epoch=batch.epoch,
        timestamp_ms=batch.timestamp_ms,
        records=batch.records,
        control=batch.control,
    )


@dataclass
class Cluster:
    """A controller history: its committed batches in a log directory, and its images."""

    directory: Path
    batches: list[DecodedBatch]

    @property
    def final(self) -> MetadataImage:
        return replay_batches(MetadataImage.EMPTY, self.batches)


def history() -> list[DecodedBatch]:
    h = Harness(racks=(None, "r1", "r2"))
    result = h.sm.metadata_topic_record(h.new_id, next_offset=h.next_offset)
    assert result is not None
    h.propose(result)
    h.create_one("orders", 3, 2, configs=(("cleanup.policy", "compact"),))
    h.create_one("payments", 1, 1)
    h.delete(DeleteTopic("orders"))
    h.create_one("orders", 2, 3)
    h.create_one("audit.log", 1, 1)
    return list(h.committed_batches)


@pytest.fixture
def cluster(tmp_path: Path) -> Cluster:
    directory = tmp_path / "__cluster_metadata-0"
    batches = history()
    with SegmentedLog.open(directory, segment_bytes_max=SEGMENT_BYTES) as log:
        log.append([encode(b) for b in batches])
        log.flush()
    return Cluster(directory, batches)


def snapshot_after(cluster: Cluster, batch_count: int) -> Path:
    """A snapshot of the image after the first ``batch_count`` batches, in the log directory."""
    image = replay_batches(MetadataImage.EMPTY, cluster.batches[:batch_count])
    snapshot_id = write_snapshot(cluster.directory, image.offset + 1, 1, image_to_records(image), 7)
    return snapshot_path(cluster.directory, snapshot_id)


def quiet(message: str) -> None:
    raise AssertionError(f"unexpected warning: {message}")


# ----- loading ----------------------------------------------------------------------------


def test_snapshot_plus_log_suffix_is_the_whole_log(cluster: Cluster) -> None:
    snapshot = snapshot_after(cluster, len(cluster.batches) // 2)
    loaded = load_image(snapshot, cluster.directory, quiet)
    assert loaded.image == cluster.final
    assert loaded.snapshot == snapshot
    assert loaded.log_records == sum(
        b.record_count for b in cluster.batches if b.base_offset >= int(snapshot.name[:20])
    )
    # The directory as --snapshot: its newest valid snapshot.
    assert load_image(cluster.directory, None, quiet).image == replay_batches(
        MetadataImage.EMPTY, cluster.batches[: len(cluster.batches) // 2]
    )
    # The log alone, from offset 0; or a directory without snapshots as --snapshot with --log.
    assert load_image(None, cluster.directory, quiet).image == cluster.final
    notes: list[str] = []
    plain = cluster.directory.parent / "plain"
    plain.mkdir()
    assert load_image(plain, cluster.directory, notes.append).image == cluster.final
    assert notes == [f"Note: {plain} holds no snapshot; replaying the log from offset 0"]
    # After cleaning, the snapshot and the rest of the log still add up.
    with SegmentedLog.open(cluster.directory, segment_bytes_max=SEGMENT_BYTES) as log:
        assert log.delete_before(int(snapshot.name[:20])) > 0
    assert load_image(snapshot, cluster.directory, quiet).image == cluster.final


def test_a_snapshot_inside_a_batch_replays_only_the_records_after_it(cluster: Cluster) -> None:
    big = max(cluster.batches, key=lambda b: b.record_count)
    assert big.record_count >= 3
    before = replay_batches(
        MetadataImage.EMPTY, [b for b in cluster.batches if b.end_offset <= big.base_offset]
    )
    middle = replay_records(
        before, [(big.base_offset + i, r) for i, r in enumerate(big.records[:2])]
    )
    write_snapshot(cluster.directory, middle.offset + 1, 1, image_to_records(middle), 0)
    assert load_image(cluster.directory, cluster.directory, quiet).image == cluster.final


def test_a_log_that_does_not_continue_the_snapshot_is_refused(
    cluster: Cluster, tmp_path: Path
) -> None:
    snapshot = snapshot_after(cluster, 2)
    later = tmp_path / "later"
    with SegmentedLog.open(later) as log:
        log.truncate_fully_and_start_at(cluster.batches[5].base_offset)
        log.append([encode(b) for b in cluster.batches[5:]])
    with pytest.raises(MetadataShellError, match="records in between are missing"):
        load_image(snapshot, later, quiet)
    with pytest.raises(MetadataShellError, match="records in between are missing"):
        load_image(None, later, quiet)
    with pytest.raises(MetadataShellError, match="give --snapshot, --log or both"):
        load_image(None, None, quiet)
    with pytest.raises(MetadataShellError, match="no valid snapshot"):
        load_image(tmp_path / "later", None, quiet)
    with pytest.raises(MetadataShellError, match="not a snapshot file name"):
        load_image(next(later.glob("*.log")), None, quiet)


def test_a_corrupt_newest_snapshot_is_skipped_with_a_warning(cluster: Cluster) -> None:
    snapshot_after(cluster, 3)
    newest = snapshot_after(cluster, 5)
    newest.write_bytes(newest.read_bytes()[:-3])
    warnings: list[str] = []
    loaded = load_image(cluster.directory, None, warnings.append)
    assert loaded.image == replay_batches(MetadataImage.EMPTY, cluster.batches[:3])
    (warning,) = warnings
    assert newest.name in warning


# ----- ls and cat as a process ------------------------------------------------------------


def test_ls_and_cat_through_the_cli(cluster: Cluster) -> None:
    snapshot = snapshot_after(cluster, len(cluster.batches))
    final = cluster.final
    run = metaquorum("metadata", "ls", "--snapshot", snapshot)
    assert run.returncode == 0, run.stderr
    assert run.stdout.split() == [
        "brokers",
        "configs",
        "deletedTopics",
        "image",
        "local",
        "metadataQuorum",
        "topicIds",
        "topics",
    ]
    run = metaquorum("metadata", "ls", "--snapshot", snapshot, "/topics")
    assert run.stdout.split() == sorted(final.topics_by_name)
    run = metaquorum("metadata", "ls", "--snapshot", snapshot, "/topics/orders")
    assert run.stdout.split() == ["0", "1", "configs", "creationOffset", "id", "internal", "name"]
    orders = final.topic_by_name("orders")
    assert orders is not None
    run = metaquorum(
        "metadata", "cat", "--snapshot", snapshot, "/topics/orders/1/data", "/topics/orders/id"
    )
    assert run.returncode == 0, run.stderr
    data_text, topic_id = run.stdout.rsplit("\n", 2)[0], run.stdout.split()[-1]
    state = orders.partitions[1]
    assert json.loads(data_text) == {
        "partitionId": 1,
        "topicId": str(orders.topic_id),
        "replicas": list(state.replicas),
        "isr": list(state.isr),
        "leader": state.leader,
        "leaderEpoch": state.leader_epoch,
        "partitionEpoch": state.partition_epoch,
    }
    assert topic_id == str(orders.topic_id)
    run = metaquorum(
        "metadata",
        "cat",
        "--snapshot",
        snapshot,
        f"/topicIds/{orders.topic_id}/name",
        f"/topicIds/{orders.topic_id}/creationOffset",
        "/metadataQuorum/offset",
        "/metadataQuorum/metadataTopicId",
    )
    assert run.stdout.split() == [
        "orders",
        str(orders.creation_offset),
        str(final.offset),
        str(final.metadata_topic_id),
    ]
    (gone,) = final.deleted_topics.values()
    run = metaquorum("metadata", "cat", "--snapshot", snapshot, f"/deletedTopics/{gone.topic_id}")
    assert json.loads(run.stdout) == {
        "name": "orders",
        "topicId": str(gone.topic_id),
        "creationOffset": gone.creation_offset,
        "deletionOffset": gone.deletion_offset,
    }


def test_kafkas_image_paths_and_the_log_dump_agree(cluster: Cluster) -> None:
    """/image/topics/byName|byId, /image/cluster/brokers: Kafka's current shell paths; each
    partition's JSON is the data `log dump` prints for the PARTITION_RECORD that made it."""
    final = cluster.final
    orders = final.topic_by_name("orders")
    assert orders is not None
    run = metaquorum("metadata", "ls", "--log", cluster.directory, "/image", "/image/topics")
    assert run.returncode == 0, run.stderr
    assert run.stdout.split("\n\n") == [
        "/image:\nacls\nclientQuotas\ncluster\nconfigs\nprovenance\ntopics",
        "/image/topics:\nbyId\nbyName\n",
    ]
    by_name = "/image/topics/byName/orders"
    by_id = f"/image/topics/byId/{orders.topic_id}"
    run = metaquorum("metadata", "ls", "--log", cluster.directory, by_name)
    assert run.stdout.split() == ["0", "1", "creationOffset", "id", "name"]
    run = metaquorum(
        "metadata", "cat", "--log", cluster.directory, f"{by_name}/1", f"{by_id}/1", f"{by_id}/name"
    )
    assert run.returncode == 0, run.stderr
    first, second = run.stdout.split("}\n")[:2]
    assert json.loads(first + "}") == json.loads(second + "}")
    assert run.stdout.split()[-1] == "orders"
    shown = json.loads(first + "}")
    out, err = io.StringIO(), io.StringIO()
    assert dump_log([cluster.directory], out, err) == 0
    dumped = [json.loads(line) for line in out.getvalue().splitlines()]
    made = [
        d["data"]
        for d in dumped
        if d["type"] == "PARTITION_RECORD"
        and d["data"]["topicId"] == str(orders.topic_id)
        and d["data"]["partitionId"] == 1
    ]
    assert made == [shown]
    topic = next(
        d for d in dumped if d["type"] == "TOPIC_RECORD" and d["data"]["name"] == "payments"
    )
    assert set(topic["data"]) == {"name", "topicId", "internal"}
    registration = next(d for d in dumped if d["type"] == "REGISTER_BROKER_RECORD")["data"]
    run = metaquorum(
        "metadata",
        "cat",
        "--log",
        cluster.directory,
        f"/image/cluster/brokers/{registration['brokerId']}",
    )
    assert {k: v for k, v in json.loads(run.stdout).items() if k != "fenced"} == {
        k: v for k, v in registration.items() if k != "fenced"
    }
    run = metaquorum(
        "metadata",
        "cat",
        "--log",
        cluster.directory,
        "/image/configs/TOPIC:orders/cleanup.policy",
        "/image/provenance/offset",
        "/local/version",
    )
    assert run.returncode == 1  # the second orders has no configs: the first one's are gone
    assert "cat: /image/configs/TOPIC:orders/cleanup.policy: No such file" in run.stderr
    assert run.stdout.split()[0] == str(final.offset)


def test_find_and_tree(cluster: Cluster) -> None:
    loaded = load_image(None, cluster.directory, quiet)
    orders = loaded.image.topic_by_name("orders")
    assert orders is not None
    out, err = io.StringIO(), io.StringIO()
    assert find_paths(loaded, ["/image/topics/byName/orders"], out, err) == 0
    assert out.getvalue().splitlines() == [
        f"/image/topics/byName/orders{suffix}"
        for suffix in ("", "/0", "/1", "/creationOffset", "/id", "/name")
    ]
    out = io.StringIO()
    assert tree_paths(loaded, ["/image/topics/byName/orders"], out, err) == 0
    lines = out.getvalue().splitlines()
    assert lines[0] == "orders:"
    assert lines[1].startswith('  0: {"topicId": ')
    assert json.loads(lines[1].split(": ", 1)[1])["partitionId"] == 0
    assert lines[3:] == [
        f"  creationOffset: {orders.creation_offset}",
        f"  id: {orders.topic_id}",
        "  name: orders",
    ]
    out = io.StringIO()
    assert tree_paths(loaded, ["/"], out, err) == 0
    every = out.getvalue().splitlines()
    assert every[0] == "/:"
    assert "  image:" in every and "      byName:" in every and "        orders:" in every
    out = io.StringIO()
    assert find_paths(loaded, ["/"], out, err) == 0
    found = out.getvalue().splitlines()
    assert len(found) == len(every)  # one line per node in both
    assert f"/topicIds/{orders.topic_id}/0/data" in found
    assert find_paths(loaded, ["/nope"], io.StringIO(), err) == 1
    assert "find: /nope: No such file or directory" in err.getvalue()
    run = metaquorum("metadata", "tree", "--log", cluster.directory, "/image/cluster")
    assert run.returncode == 0, run.stderr
    assert run.stdout.splitlines()[:2] == ["cluster:", "  brokers:"]
    run = metaquorum("metadata", "find", "--log", cluster.directory, "/local")
    assert run.stdout.splitlines() == ["/local", "/local/version"]


def test_cli_errors(cluster: Cluster, tmp_path: Path) -> None:
    snapshot = snapshot_after(cluster, len(cluster.batches))
    run = metaquorum(
        "metadata", "cat", "--snapshot", snapshot, "/topics", "/nope", "/topics/orders/id"
    )
    assert run.returncode == 1
    assert "cat: /topics: Is a directory" in run.stderr
    assert "cat: /nope: No such file or directory" in run.stderr
    assert len(run.stdout.split()) == 1  # the file that exists is printed all the same
    run = metaquorum("metadata", "ls", "--snapshot", snapshot, "/topics/nope")
    assert (run.returncode, run.stdout) == (1, "")
    run = metaquorum("metadata", "ls", "/")
    assert run.returncode == 1
    assert "needs --snapshot PATH, --log DIR or both" in run.stderr
    damaged = tmp_path / snapshot.name
    damaged.write_bytes(snapshot.read_bytes()[:-1])
    run = metaquorum("metadata", "ls", "--snapshot", damaged)
    assert run.returncode == 1
    assert "corrupt metadata snapshot" in run.stderr
    run = metaquorum("metadata", "ls", "--log", cluster.directory, "/topics")
    assert run.returncode == 0, run.stderr
    assert run.stdout.split() == sorted(cluster.final.topics_by_name)


# ----- ls and cat in process --------------------------------------------------------------


def loaded_rich() -> LoadedImage:
    return LoadedImage(rich_image(), None, None, 0)


def test_brokers_configs_and_listing_order() -> None:
    loaded = loaded_rich()
    image = loaded.image
    out, err = io.StringIO(), io.StringIO()
    assert ls_paths(loaded, ["/brokers", "/configs/broker", "/brokers/1"], out, err) == 0
    assert out.getvalue().split("\n\n") == [
        "/brokers:\n" + "\n".join(map(str, sorted(image.brokers))),
        "/configs/broker:\n2\n10\ndefault",
        "/brokers/1:\nisFenced\nregistration\n",
    ]
    out = io.StringIO()
    assert (
        cat_paths(
            loaded,
            [
                "/brokers/1/registration",
                "/brokers/0/isFenced",
                "/configs/broker/default/log.retention.ms",
            ],
            out,
            err,
        )
        == 0
    )
    text = out.getvalue()
    registration = json.loads(text[: text.index("}") + 1])
    broker = image.brokers[1]
    assert registration == {
        "brokerId": 1,
        "incarnationId": str(broker.incarnation_id),
        "brokerEpoch": broker.broker_epoch,
        "endPoints": [],
        "rack": "r1",
        "fenced": False,
    }
    assert text[text.index("}") + 1 :].split() == ["true", "1000"]
    out = io.StringIO()
    assert ls_paths(loaded, ["/topics/orders/0/data", "topics/../metadataQuorum/"], out, err) == 0
    assert out.getvalue().split("\n\n") == [
        "/topics/orders/0/data",
        "/metadataQuorum:\nmetadataTopicId\noffset\nsnapshot\n",
    ]
    # Kafka's names of config resources: BROKER (the default), BROKER:<id>, TOPIC:<name>.
    out = io.StringIO()
    assert ls_paths(loaded, ["/image/configs"], out, err) == 0
    assert {"BROKER", "BROKER:2", "BROKER:10"} <= set(out.getvalue().split())
    out = io.StringIO()
    assert cat_paths(loaded, ["/image/configs/BROKER/log.retention.ms"], out, err) == 0
    assert out.getvalue() == "1000\n"
    for bad in ("/brokers/01", "/brokers/x", "/topicIds/nope", "/topics/orders/00/data"):
        assert ls_paths(loaded, [bad], io.StringIO(), io.StringIO()) == 1


# ----- the interactive shell ----------------------------------------------------------------


def run_shell(loaded: LoadedImage, script: str) -> str:
    out = io.StringIO()
    shell = MetadataShell(loaded, stdin=io.StringIO(script), stdout=out)
    shell.cmdloop()
    return out.getvalue()


def test_the_shell_walks_the_tree() -> None:
    loaded = loaded_rich()
    orders = loaded.image.topic_by_name("orders")
    assert orders is not None
    output = run_shell(
        loaded,
        "pwd\nls\ncd topics\npwd\nls\ncd orders\ncat 0/data\ncat id name\ncd ..\ncd ../topicIds\n"
        f"cat {orders.topic_id}/creationOffset\ncd\npwd\n\nexit\nls\n",
    )
    lines = output.splitlines()
    assert lines[0].startswith("Loaded the metadata image at offset")
    assert lines[1] == "/"
    assert lines[2].split() == [
        "brokers",
        "configs",
        "deletedTopics",
        "image",
        "local",
        "metadataQuorum",
        "topicIds",
        "topics",
    ]
    assert lines[3] == "/topics"
    assert lines[4].split() == ["__cluster_metadata", "orders", "payments.v1"]
    data = json.loads("\n".join(lines[5:14]))
    assert data["topicId"] == str(orders.topic_id)
    assert data["partitionId"] == 0
    assert lines[14:16] == [str(orders.topic_id), "orders"]
    assert lines[16] == str(orders.creation_offset)
    assert lines[17] == "/"
    assert len(lines) == 18  # exit stopped the script: the last ls never ran
    tree = run_shell(loaded, "cd /image/topics\ntree byName/orders\nfind\n").splitlines()
    assert tree[1] == "orders:"
    assert "/image/topics/byId" in tree and "/image/topics/byName/orders/name" in tree


def test_the_shell_reports_mistakes_and_stops_at_end_of_input() -> None:
    output = run_shell(
        loaded_rich(),
        "cd /nope\ncd /metadataQuorum/offset\ncat /topics\ncat\nfrobnicate\ncd a b\n"
        "cat 'unterminated\nls /nope\nhelp\n",
    )
    assert "cd: /nope: No such file or directory" in output
    assert "cd: /metadataQuorum/offset: Not a directory" in output
    assert "cat: /topics: Is a directory" in output
    assert "cat: give a file" in output
    assert "unknown command: 'frobnicate'" in output
    assert "cd: too many arguments" in output
    assert "error: No closing quotation" in output
    assert "ls: /nope: No such file or directory" in output
    for command in ("ls", "cd", "cat", "find", "tree", "pwd", "exit"):
        assert command in output.split("Documented commands")[1]


def test_path_completion() -> None:
    shell = MetadataShell(loaded_rich(), stdin=io.StringIO(""), stdout=io.StringIO())
    assert shell.complete_cd("to", "cd /to", 4, 6) == ["topicIds/", "topics/"]
    assert shell.complete_cd("/to", "cd /to", 3, 6) == ["/topicIds/", "/topics/"]
    assert shell.complete_cat("o", "cat /topics/o", 12, 13) == ["orders/"]
    shell.do_cd("/topics/orders")
    assert shell.complete_cat("", "cat ", 4, 4) == [
        "0/",
        "configs/",
        "creationOffset",
        "id",
        "internal",
        "name",
    ]
    assert shell.complete_cat("cre", "cat cre", 4, 7) == ["creationOffset"]
    assert shell.complete_ls("x", "ls /nope/x", 9, 10) == []
