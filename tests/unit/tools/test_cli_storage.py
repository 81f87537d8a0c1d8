"""`metaquorum storage ...` as a real process, and quorum.meta_properties behind it."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path

import pytest

from quorum import meta_properties
from quorum.cli import main
from quorum.config import NodeConfig, config_from_settings, load_config
from quorum.ids import METADATA_TOPIC_ID, RESERVED_UUIDS, Uuid
from quorum.meta_properties import (
    MetaProperties,
    MetaPropertiesError,
    UnformattedDirectoryError,
)

REPO_ROOT = Path(__file__).resolve().parents[3]
CLUSTER_ID = "MkU3OEVBNTcwNTJENDM2Qg"
OTHER_CLUSTER_ID = "q1Sh-9_ISia_zwGINzRvyQ"


@dataclass(frozen=True)
class Run:
    returncode: int
    stdout: str
    stderr: str


def metaquorum(*args: str | Path, cwd: Path = REPO_ROOT) -> Run:
    """Run the CLI as its own process, the way a user does."""
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    result = subprocess.run(
        [sys.executable, "-m", "quorum.cli", *map(str, args)],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    return Run(result.returncode, result.stdout, result.stderr)


def write_controller_config(directory: Path, *, extra: str = "") -> Path:
    path = directory / "controller.toml"
    path.write_text(
        textwrap.dedent(
            """\
            "node.id" = 1
            "process.roles" = ["controller"]
            "controller.quorum.voters" = ["1@127.0.0.1:19191"]
            "listeners" = ["CONTROLLER://127.0.0.1:19191"]
            "metadata.log.dir" = "data/meta"
            """
        )
        + extra
    )
    return path


def write_combined_config(directory: Path) -> Path:
    path = directory / "combined.toml"
    path.write_text(
        textwrap.dedent(
            """\
            "node.id" = 2
            "process.roles" = ["broker", "controller"]
            "controller.quorum.voters" = ["2@127.0.0.1:19192"]
            "listeners" = ["CONTROLLER://127.0.0.1:19192"]
            "metadata.log.dir" = "data/meta"
            "log.dirs" = ["data/d1", "data/d2"]
            """
        )
    )
    return path


# Tests that start the CLI as its own process.
process = pytest.mark.process


# ----- random-uuid -------------------------------------------------------------------------------


@process
def test_random_uuid_prints_a_parseable_unreserved_id() -> None:
    first = metaquorum("storage", "random-uuid")
    second = metaquorum("storage", "random-uuid")
    assert first.returncode == 0, first.stderr
    lines = first.stdout.splitlines()
    assert len(lines) == 1
    parsed = Uuid.parse(lines[0])
    assert str(parsed) == lines[0]
    assert len(lines[0]) == 22
    assert parsed not in RESERVED_UUIDS
    assert not lines[0].startswith("-")
    assert second.stdout != first.stdout


# ----- format -------------------------------------------------------------------------------------


@process
def test_format_writes_meta_properties(tmp_path: Path) -> None:
    config = write_controller_config(tmp_path)
    run = metaquorum("storage", "format", "--config", config, "--cluster-id", CLUSTER_ID)
    assert run.returncode == 0, run.stderr
    directory = tmp_path / "data" / "meta"
    assert run.stdout == (f"Formatting metadata directory {directory} with metadata.version 1.\n")
    text = (directory / "meta.properties").read_text()
    assert "version=1\n" in text
    assert f"cluster.id={CLUSTER_ID}\n" in text
    assert "node.id=1\n" in text
    properties = meta_properties.read(directory)
    assert properties.cluster_id == Uuid.parse(CLUSTER_ID)
    assert properties.node_id == 1
    assert properties.directory_id is not None
    assert properties.directory_id not in RESERVED_UUIDS
    assert sorted(p.name for p in directory.iterdir()) == ["meta.properties"]
    # The node would start on it.
    assert meta_properties.check(load_config(config)) == {directory: properties}


@process
def test_format_writes_every_log_dir_with_its_own_directory_id(tmp_path: Path) -> None:
    config = write_combined_config(tmp_path)
    run = metaquorum("storage", "format", "-c", config, "-t", CLUSTER_ID)
    assert run.returncode == 0, run.stderr
    data = tmp_path / "data"
    assert run.stdout.splitlines() == [
        f"Formatting metadata directory {data / 'meta'} with metadata.version 1.",
        f"Formatting data directory {data / 'd1'} with metadata.version 1.",
        f"Formatting data directory {data / 'd2'} with metadata.version 1.",
    ]
    found = [meta_properties.read(data / name) for name in ("meta", "d1", "d2")]
    assert {p.cluster_id for p in found} == {Uuid.parse(CLUSTER_ID)}
    assert {p.node_id for p in found} == {2}
    assert len({p.directory_id for p in found}) == 3


@process
def test_format_accepts_the_dashed_form_and_writes_base64(tmp_path: Path) -> None:
    config = write_controller_config(tmp_path)
    dashed = str(Uuid.parse(CLUSTER_ID).to_uuid())
    run = metaquorum("storage", "format", "--config", config, "--cluster-id", dashed)
    assert run.returncode == 0, run.stderr
    assert f"cluster.id={CLUSTER_ID}\n" in (tmp_path / "data/meta/meta.properties").read_text()


@process
def test_format_refuses_a_formatted_directory(tmp_path: Path) -> None:
    config = write_controller_config(tmp_path)
    assert metaquorum("storage", "format", "-c", config, "-t", CLUSTER_ID).returncode == 0
    before = (tmp_path / "data/meta/meta.properties").read_text()

    run = metaquorum("storage", "format", "-c", config, "-t", OTHER_CLUSTER_ID)
    assert run.returncode == 1
    assert run.stdout == ""
    assert f"Log directory {tmp_path / 'data' / 'meta'} is already formatted." in run.stderr
    assert "Use --ignore-formatted" in run.stderr
    assert (tmp_path / "data/meta/meta.properties").read_text() == before


@process
def test_format_refuses_everything_if_one_directory_is_formatted(tmp_path: Path) -> None:
    config = write_combined_config(tmp_path)
    meta_properties.write(
        tmp_path / "data" / "d1",
        MetaProperties(cluster_id=Uuid.parse(CLUSTER_ID), node_id=2, directory_id=Uuid(5, 5)),
    )
    run = metaquorum("storage", "format", "-c", config, "-t", CLUSTER_ID)
    assert run.returncode == 1
    assert f"Log directory {tmp_path / 'data' / 'd1'} is already formatted." in run.stderr
    assert not (tmp_path / "data" / "meta" / "meta.properties").exists()
    assert not (tmp_path / "data" / "d2").exists()


@process
def test_ignore_formatted_skips_formatted_directories_and_formats_the_rest(
    tmp_path: Path,
) -> None:
    config = write_combined_config(tmp_path)
    kept = MetaProperties(cluster_id=Uuid.parse(CLUSTER_ID), node_id=2, directory_id=Uuid(5, 5))
    meta_properties.write(tmp_path / "data" / "d1", kept)

    run = metaquorum("storage", "format", "-c", config, "-t", CLUSTER_ID, "--ignore-formatted")
    assert run.returncode == 0, run.stderr
    assert run.stdout.splitlines() == [
        f"Skipping directory {tmp_path / 'data' / 'd1'}: it is already formatted.",
        f"Formatting metadata directory {tmp_path / 'data' / 'meta'} with metadata.version 1.",
        f"Formatting data directory {tmp_path / 'data' / 'd2'} with metadata.version 1.",
    ]
    assert meta_properties.read(tmp_path / "data" / "d1") == kept
    assert meta_properties.read(tmp_path / "data" / "d2").node_id == 2

    again = metaquorum("storage", "format", "-c", config, "-t", CLUSTER_ID, "-g")
    assert again.returncode == 0, again.stderr
    assert again.stdout.endswith("All of the log directories are already formatted.\n")
    assert meta_properties.read(tmp_path / "data" / "d1") == kept


@process
def test_ignore_formatted_warns_about_a_directory_of_another_cluster(tmp_path: Path) -> None:
    config = write_controller_config(tmp_path)
    assert metaquorum("storage", "format", "-c", config, "-t", OTHER_CLUSTER_ID).returncode == 0
    run = metaquorum("storage", "format", "-c", config, "-t", CLUSTER_ID, "-g")
    assert run.returncode == 0, run.stderr
    assert f"is formatted for cluster.id={OTHER_CLUSTER_ID}" in run.stderr
    assert "the node will refuse to start on it" in run.stderr
    properties = meta_properties.read(tmp_path / "data" / "meta")
    assert str(properties.cluster_id) == OTHER_CLUSTER_ID


@process
def test_format_refuses_a_non_empty_unformatted_directory(tmp_path: Path) -> None:
    config = write_controller_config(tmp_path)
    directory = tmp_path / "data" / "meta"
    directory.mkdir(parents=True)
    (directory / "00000000000000000000.log").write_bytes(b"old data")

    run = metaquorum("storage", "format", "-c", config, "-t", CLUSTER_ID)
    assert run.returncode == 1
    assert f"Log directory {directory} is not empty but has no meta.properties" in run.stderr
    assert not (directory / "meta.properties").exists()

    forced = metaquorum("storage", "format", "-c", config, "-t", CLUSTER_ID, "--ignore-formatted")
    assert forced.returncode == 0, forced.stderr
    assert meta_properties.read(directory).cluster_id == Uuid.parse(CLUSTER_ID)
    assert (directory / "00000000000000000000.log").read_bytes() == b"old data"


@process
def test_format_refuses_a_file_where_a_directory_should_be(tmp_path: Path) -> None:
    config = write_controller_config(tmp_path)
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "meta").write_text("not a directory")
    run = metaquorum("storage", "format", "-c", config, "-t", CLUSTER_ID, "-g")
    assert run.returncode == 1
    assert "exists and is not a directory" in run.stderr


@pytest.mark.parametrize(
    ("cluster_id", "fragment"),
    [
        ("not-a-uuid", "Cluster ID string 'not-a-uuid' does not appear to be a valid UUID"),
        ("MkU3OEVBNTcwNTJENDM2Qg==", "does not appear to be a valid UUID"),
        ("MkU3OEVBNTcwNTJENDM2Q", "does not appear to be a valid UUID"),
        (str(METADATA_TOPIC_ID), "is reserved"),
        ("AAAAAAAAAAAAAAAAAAAAAA", "is reserved"),
    ],
)
@process
def test_format_rejects_a_bad_cluster_id(tmp_path: Path, cluster_id: str, fragment: str) -> None:
    config = write_controller_config(tmp_path)
    run = metaquorum("storage", "format", "--config", config, "--cluster-id", cluster_id)
    assert run.returncode == 1
    assert fragment in run.stderr
    assert run.stderr.startswith("Error: ")
    assert not (tmp_path / "data").exists()


@process
def test_format_rejects_a_cluster_id_that_differs_from_the_config(tmp_path: Path) -> None:
    config = write_controller_config(tmp_path, extra=f'"cluster.id" = "{OTHER_CLUSTER_ID}"\n')
    run = metaquorum("storage", "format", "-c", config, "-t", CLUSTER_ID)
    assert run.returncode == 1
    assert f"--cluster-id {CLUSTER_ID} differs from cluster.id {OTHER_CLUSTER_ID}" in run.stderr
    assert not (tmp_path / "data").exists()


@process
def test_format_reports_a_bad_config_and_writes_nothing(tmp_path: Path) -> None:
    config = write_controller_config(tmp_path, extra='"controller.quorum.fetch.timeout" = 5\n')
    run = metaquorum("storage", "format", "-c", config, "-t", CLUSTER_ID)
    assert run.returncode == 1
    assert "unknown config key 'controller.quorum.fetch.timeout'" in run.stderr
    assert "did you mean 'controller.quorum.fetch.timeout.ms'?" in run.stderr
    assert not (tmp_path / "data").exists()


@process
def test_format_applies_overrides(tmp_path: Path) -> None:
    config = write_controller_config(tmp_path)
    run = metaquorum(
        "storage",
        "format",
        "-c",
        config,
        "-t",
        CLUSTER_ID,
        "--override",
        "metadata.log.dir=elsewhere",
        cwd=tmp_path,
    )
    assert run.returncode == 0, run.stderr
    assert meta_properties.read(tmp_path / "elsewhere").node_id == 1
    assert not (tmp_path / "data").exists()


@process
def test_format_without_cluster_id_is_a_usage_error(tmp_path: Path) -> None:
    config = write_controller_config(tmp_path)
    run = metaquorum("storage", "format", "--config", config)
    assert run.returncode == 2
    assert "--cluster-id" in run.stderr
    assert not (tmp_path / "data").exists()


@process
def test_missing_config_file(tmp_path: Path) -> None:
    run = metaquorum("storage", "format", "-c", tmp_path / "none.toml", "-t", CLUSTER_ID)
    assert run.returncode == 1
    assert "none.toml does not exist" in run.stderr


@process
def test_storage_info(tmp_path: Path) -> None:
    config = write_controller_config(tmp_path)
    unformatted = metaquorum("storage", "info", "-c", config)
    assert unformatted.returncode == 1
    assert "No meta.properties found" in unformatted.stdout
    assert "metaquorum storage format --config" in unformatted.stderr

    assert metaquorum("storage", "format", "-c", config, "-t", CLUSTER_ID).returncode == 0
    formatted = metaquorum("storage", "info", "-c", config)
    assert formatted.returncode == 0, formatted.stderr
    assert f"cluster.id={CLUSTER_ID} node.id=1" in formatted.stdout
    assert "OK: node 1 can start" in formatted.stdout


def test_main_returns_exit_codes_in_process(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--help"]) == 0
    assert "storage" in capsys.readouterr().out
    assert main(["storage"]) == 2
    assert main(["no-such-command"]) == 2
    assert main(["storage", "random-uuid"]) == 0
    Uuid.parse(capsys.readouterr().out.strip())


@process
def test_console_script_is_installed() -> None:
    script = Path(sys.executable).parent / "metaquorum"
    if not script.exists():
        pytest.skip("the metaquorum console script is not installed in this environment")
    result = subprocess.run(
        [str(script), "storage", "random-uuid"], capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stderr
    Uuid.parse(result.stdout.strip())


# ----- meta.properties and the startup check ----------------------------------------------------


def controller_config(directory: Path, **changes: object) -> NodeConfig:
    values: dict[str, object] = {
        "node.id": 1,
        "process.roles": "controller",
        "controller.quorum.voters": "1@127.0.0.1:19191",
        "listeners": "CONTROLLER://127.0.0.1:19191",
        "metadata.log.dir": str(directory / "meta"),
    }
    values.update({key.replace("_", "."): value for key, value in changes.items()})
    return config_from_settings(values)


def props(node_id: int = 1, cluster_id: str = CLUSTER_ID, directory_id: int = 7) -> MetaProperties:
    return MetaProperties(
        cluster_id=Uuid.parse(cluster_id), node_id=node_id, directory_id=Uuid(0, directory_id)
    )


def test_write_then_read_round_trips_and_leaves_no_temporary_file(tmp_path: Path) -> None:
    directory = tmp_path / "a" / "b"
    meta_properties.write(directory, props())
    assert meta_properties.read(directory) == props()
    assert [p.name for p in directory.iterdir()] == ["meta.properties"]
    meta_properties.write(directory, props(directory_id=8))
    assert meta_properties.read(directory) == props(directory_id=8)


def test_read_accepts_kafka_written_files(tmp_path: Path) -> None:
    (tmp_path / "meta.properties").write_text(
        "#\n#Thu Nov 21 06:00:00 UTC 2026\n! another comment\n\n"
        f"node.id=3\ndirectory.id=AAAAAAAAAAAAAAAAAAAABw\nversion=1\ncluster.id={CLUSTER_ID}\n"
    )
    assert meta_properties.read(tmp_path) == props(node_id=3)


def test_read_without_directory_id(tmp_path: Path) -> None:
    (tmp_path / "meta.properties").write_text(f"version=1\ncluster.id={CLUSTER_ID}\nnode.id=0\n")
    assert meta_properties.read(tmp_path).directory_id is None


def test_read_of_an_unformatted_directory(tmp_path: Path) -> None:
    with pytest.raises(UnformattedDirectoryError, match=re.escape("No meta.properties found in")):
        meta_properties.read(tmp_path)


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        (f"cluster.id={CLUSTER_ID}\nnode.id=1\n", "has no version line"),
        (f"version=0\ncluster.id={CLUSTER_ID}\nbroker.id=1\n", "has version=0"),
        ("version=1\nnode.id=1\n", "has no cluster.id line"),
        (f"version=1\ncluster.id={CLUSTER_ID}\n", "has no node.id line"),
        (f"version=1\ncluster.id={CLUSTER_ID}\nnode.id=x\n", "node.id 'x' is not an integer"),
        (f"version=1\ncluster.id={CLUSTER_ID}\nnode.id=-1\n", "node.id '-1' is not an integer"),
        ("version=1\ncluster.id=zzz\nnode.id=1\n", "cluster.id 'zzz' is not a Uuid"),
        ("version=1\ncluster.id=AAAAAAAAAAAAAAAAAAAAAA\nnode.id=1\n", "is reserved"),
        (f"version=1\ncluster.id={CLUSTER_ID}\nnode.id=1\nnode.id=2\n", "node.id is given twice"),
        (f"version=1\ncluster.id={CLUSTER_ID}\nnode.id=1\nfoo=bar\n", "unknown keys ['foo']"),
        (f"version=1\ncluster.id={CLUSTER_ID}\nnode.id 1\n", "is not a key=value line"),
    ],
)
def test_read_rejects_malformed_files(tmp_path: Path, text: str, fragment: str) -> None:
    (tmp_path / "meta.properties").write_text(text)
    with pytest.raises(MetaPropertiesError) as info:
        meta_properties.read(tmp_path)
    assert fragment in str(info.value)
    assert str(tmp_path / "meta.properties") in str(info.value)
    assert not isinstance(info.value, UnformattedDirectoryError)


def test_check_passes_on_matching_directories(tmp_path: Path) -> None:
    config = controller_config(tmp_path)
    meta_properties.write(tmp_path / "meta", props())
    assert meta_properties.check(config) == {tmp_path / "meta": props()}


def test_check_of_an_unformatted_directory_says_how_to_format(tmp_path: Path) -> None:
    config = write_controller_config(tmp_path)
    with pytest.raises(UnformattedDirectoryError) as info:
        meta_properties.check(load_config(config))
    message = str(info.value)
    assert f"No meta.properties found in {tmp_path / 'data' / 'meta'}" in message
    assert f"metaquorum storage format --config {config} --cluster-id" in message
    assert "metaquorum storage random-uuid" in message


def test_check_of_a_partly_formatted_node_suggests_ignore_formatted(tmp_path: Path) -> None:
    config = load_config(write_combined_config(tmp_path))
    meta_properties.write(tmp_path / "data" / "meta", props(node_id=2, directory_id=1))
    with pytest.raises(UnformattedDirectoryError) as info:
        meta_properties.check(config)
    assert str(tmp_path / "data" / "d1") in str(info.value)
    assert f"--cluster-id {CLUSTER_ID}" in str(info.value)
    assert "--ignore-formatted" in str(info.value)


def test_check_rejects_another_node_id(tmp_path: Path) -> None:
    config = load_config(write_controller_config(tmp_path))
    meta_properties.write(tmp_path / "data" / "meta", props(node_id=2))
    with pytest.raises(MetaPropertiesError) as info:
        meta_properties.check(config)
    message = str(info.value)
    assert "says node.id=2 but" in message
    assert "has node.id=1" in message
    assert f"fix node.id in {config.config_file}" in message
    assert "metaquorum storage format" in message


def test_check_rejects_a_cluster_id_other_than_the_configured_one(tmp_path: Path) -> None:
    config = controller_config(tmp_path, cluster_id=OTHER_CLUSTER_ID)
    meta_properties.write(tmp_path / "meta", props())
    with pytest.raises(MetaPropertiesError) as info:
        meta_properties.check(config)
    assert f"says cluster.id={CLUSTER_ID}" in str(info.value)
    assert f"has cluster.id={OTHER_CLUSTER_ID}" in str(info.value)


def test_check_rejects_directories_of_different_clusters(tmp_path: Path) -> None:
    config = load_config(write_combined_config(tmp_path))
    meta_properties.write(tmp_path / "data" / "meta", props(node_id=2, directory_id=1))
    meta_properties.write(tmp_path / "data" / "d1", props(node_id=2, directory_id=2))
    meta_properties.write(
        tmp_path / "data" / "d2", props(node_id=2, directory_id=3, cluster_id=OTHER_CLUSTER_ID)
    )
    with pytest.raises(MetaPropertiesError, match="all directories of one node belong to one"):
        meta_properties.check(config)


def test_check_rejects_copied_directory_ids(tmp_path: Path) -> None:
    config = load_config(write_combined_config(tmp_path))
    meta_properties.write(tmp_path / "data" / "meta", props(node_id=2, directory_id=1))
    meta_properties.write(tmp_path / "data" / "d1", props(node_id=2, directory_id=2))
    meta_properties.write(tmp_path / "data" / "d2", props(node_id=2, directory_id=2))
    with pytest.raises(MetaPropertiesError, match=re.escape("have the same directory.id")):
        meta_properties.check(config)


# ----- KIP-853 format modes -------------------------------------------------------------------


def write_dynamic_config(directory: Path) -> Path:
    path = directory / "dynamic.toml"
    path.write_text(
        textwrap.dedent(
            """\
            "node.id" = 1
            "process.roles" = ["controller"]
            "controller.quorum.bootstrap.servers" = ["127.0.0.1:19191"]
            "listeners" = ["CONTROLLER://127.0.0.1:19191"]
            "metadata.log.dir" = "data/meta"
            """
        )
    )
    return path


def test_format_modes_follow_kafkas_rules(tmp_path: Path) -> None:
    """--standalone writes this controller alone as the bootstrap voter set, with the metadata
    directory's own id; --initial-controllers gives this controller the listed directory id;
    a dynamic controller needs one of the three options, a static one takes none."""
    from quorum.storage.bootstrap import partition_dir_of, read_bootstrap  # noqa: PLC0415

    cluster_id = str(Uuid.random())
    static = write_controller_config(tmp_path)
    refused = metaquorum("storage", "format", "-c", static, "-t", cluster_id, "--standalone")
    assert refused.returncode == 1 and "controller.quorum.voters" in refused.stderr
    dynamic = write_dynamic_config(tmp_path)
    refused = metaquorum("storage", "format", "-c", dynamic, "-t", cluster_id)
    assert refused.returncode == 1 and "--no-initial-controllers" in refused.stderr

    done = metaquorum("storage", "format", "-c", dynamic, "-t", cluster_id, "--standalone")
    assert done.returncode == 0, done.stderr
    meta = tmp_path / "data" / "meta"
    properties = meta_properties.read(meta)
    found = read_bootstrap(partition_dir_of(meta))
    assert found is not None
    kraft_version, voters = found
    assert kraft_version == 1
    assert [str(k) for k in voters.voter_keys()] == [f"1:{properties.directory_id}"]

    directory_id = Uuid.random()
    other = tmp_path / "other"
    other.mkdir()
    initial = f"1@127.0.0.1:19191:{directory_id},2@127.0.0.1:19192:{Uuid.random()}"
    done = metaquorum(
        "storage", "format", "-c", write_dynamic_config(other), "-t", cluster_id,
        "--initial-controllers", initial,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert meta_properties.read(other / "data" / "meta").directory_id == directory_id
    found = read_bootstrap(partition_dir_of(other / "data" / "meta"))
    assert found is not None and found[1].ids == {1, 2}
    (tmp_path / "x").mkdir()
    bad = metaquorum(
        "storage", "format", "-c", write_dynamic_config(tmp_path / "x"), "-t", cluster_id,
        "--initial-controllers", "2@127.0.0.1:1:" + str(Uuid.random()),
    )  # fmt: skip
    assert bad.returncode == 1 and "does not name node.id 1" in bad.stderr
