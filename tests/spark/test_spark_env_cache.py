"""The executors' environment that ``replay --master URL`` ships (quorum/analytics/pack.py):
packed once and reused while its contents are the same (the interpreter, the installed
versions, the project's sources), written atomically, old archives evicted; the driver's
directory whose ``env`` is this interpreter's environment; the settings replay refuses before
starting anything. The archive is packed once per test session (``spark_env_cache``)."""

from __future__ import annotations

import io
import os
import subprocess
import sys
import tarfile
import time
from importlib.metadata import PathDistribution
from pathlib import Path

import pytest

from quorum.analytics import pack
from quorum.analytics.pack import CachedEnv, PackError, cached_env, driver_dir, env_key
from quorum.analytics.replay import run_replay


@pytest.fixture(scope="module")
def packed(spark_env_cache: Path) -> CachedEnv:
    return cached_env(spark_env_cache)


def test_the_archive_is_packed_once_and_then_reused(
    packed: CachedEnv, spark_env_cache: Path
) -> None:
    assert packed.path.parent == spark_env_cache / "spark-env"
    assert packed.path.name == f"{env_key()}.tar.gz"
    inode = packed.path.stat().st_ino
    started = time.monotonic()
    again = cached_env(spark_env_cache)
    assert again == CachedEnv(packed.path, reused=True)
    assert time.monotonic() - started < 2.0  # a hash of the sources, not a pack (about 4 s)
    assert packed.path.stat().st_ino == inode  # the same file, not rewritten
    leftovers = [p.name for p in packed.path.parent.iterdir() if p != packed.path]
    assert leftovers == []  # no partial archive beside it


def test_the_archive_holds_what_the_executors_import(packed: CachedEnv) -> None:
    with tarfile.open(packed.path) as tar:
        members = {member.name: member for member in tar.getmembers()}
        cfg = tar.extractfile("pyvenv.cfg")
        assert cfg is not None
        config = cfg.read().decode()
    site = f"lib/python{sys.version_info.major}.{sys.version_info.minor}/site-packages"
    for name in (
        "quorum/analytics/source.py",
        "quorum/analytics/arrow_batches.py",
        "quorum/metadata/records.py",
        "quorum/storage/frames.py",
        "pyarrow/__init__.py",
        "msgspec/__init__.py",
        "structlog/__init__.py",
    ):
        assert f"{site}/{name}" in members, name
    assert members["bin/python"].mode & 0o111  # executable once Spark unpacks it with tar
    assert members["bin/python3"].issym()
    assert "include-system-site-packages = false" in config
    assert not any(name.startswith(f"{site}/pyspark/") for name in members)  # the worker's own


def test_the_key_follows_the_sources_and_the_installed_versions(tmp_path: Path) -> None:
    source = tmp_path / "module.py"
    source.write_text("x = 1\n")

    def dist(version: str) -> PathDistribution:
        info = tmp_path / f"v{version}" / "lib-1.dist-info"
        info.mkdir(parents=True)
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: lib\nVersion: {version}\n")
        return PathDistribution(info)

    def key(version: PathDistribution) -> str:
        contents = pack.PackContents(
            interpreter=Path(sys.executable),
            distributions=[version],
            dist_files=[],
            project_files=[(source, "quorum/module.py")],
        )
        return env_key(contents)

    one, two = dist("1.0"), dist("2.0")
    first = key(one)
    assert key(one) == first  # stable
    assert key(two) != first  # another installed version
    source.write_text("x = 2\n")
    assert key(one) != first  # another source
    source.write_text("x = 1\n")
    assert key(one) == first


def test_a_failed_pack_leaves_nothing_behind(tmp_path: Path) -> None:
    contents = pack.PackContents(
        interpreter=Path(sys.executable),
        distributions=[],
        dist_files=[(tmp_path / "missing.py", "missing.py")],
        project_files=[],
    )
    target = tmp_path / "cache" / "env.tar.gz"
    with pytest.raises(FileNotFoundError):
        pack.write_archive(contents, target)
    assert list(target.parent.iterdir()) == []


def test_old_archives_are_evicted_but_not_the_recent_ones(tmp_path: Path) -> None:
    now = time.time()
    ages_h = {"a": 0, "b": 5, "c": 6, "d": 7, "e": 8}  # a: used now
    for name, hours in ages_h.items():
        path = tmp_path / f"{name}.tar.gz"
        path.write_bytes(b"x")
        os.utime(path, (now - hours * 3600, now - hours * 3600))
    stale = tmp_path / ".z.tar.gz.123.partial"
    stale.write_bytes(b"x")
    os.utime(stale, (now - 7200, now - 7200))
    fresh = tmp_path / ".y.tar.gz.456.partial"  # another replay packing right now
    fresh.write_bytes(b"x")
    pack.evict(tmp_path, keep=tmp_path / "a.tar.gz")
    left = sorted(p.name for p in tmp_path.iterdir())
    assert left == [".y.tar.gz.456.partial", "a.tar.gz", "b.tar.gz", "c.tar.gz"]


def test_the_drivers_env_is_this_interpreters_environment(spark_env_cache: Path) -> None:
    directory = driver_dir(spark_env_cache)
    assert directory == driver_dir(spark_env_cache)  # idempotent
    # What the driver's JVM runs for spark.pyspark.python=./env/bin/python, from its directory.
    probe = subprocess.run(
        ["./env/bin/python", "-c", "import sys, pyspark, quorum.analytics.pack; print(sys.prefix)"],
        cwd=directory, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert probe.returncode == 0, probe.stderr
    assert Path(probe.stdout.strip()).resolve() == Path(sys.prefix).resolve()


def test_an_unwritable_cache_is_an_error_naming_the_variable(tmp_path: Path) -> None:
    blocked = tmp_path / "file"
    blocked.write_text("not a directory")
    with pytest.raises(PackError, match=pack.CACHE_ENV):
        driver_dir(blocked)


def test_replay_refuses_its_own_python_setting_with_the_env_shipped(tmp_path: Path) -> None:
    stderr = io.StringIO()
    code = run_replay(
        tmp_path / "log", tmp_path / "out", master="spark://127.0.0.1:7077",
        conf={"spark.pyspark.python": "/opt/py/bin/python"}, stderr=stderr,
    )  # fmt: skip
    assert code == 1
    assert "add --no-ship-env" in stderr.getvalue()
    assert not (tmp_path / "out").exists()  # refused before anything was made


def test_conf_takes_key_value(tmp_path: Path) -> None:
    refused = subprocess.run(
        [str(Path(sys.executable).parent / "metaquorum"), "replay", "--log-dir", str(tmp_path),
         "--out", str(tmp_path / "out"), "--conf", "spark.executor.memory"],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert refused.returncode == 2
    assert "'spark.executor.memory' is not KEY=VALUE" in refused.stderr
