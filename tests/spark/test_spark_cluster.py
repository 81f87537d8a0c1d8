"""The replay on a real Spark standalone cluster: a master and a worker started from pyspark's
own launcher (``bin/spark-class``, what ``sbin/start-master.sh`` / ``start-worker.sh`` run; the
pip wheel ships ``spark-class`` but not those two wrappers), bound to 127.0.0.1, in a clean
environment (as ``env -i``: only what Spark needs), so the worker's PATH holds no environment of
this project; its ``python3`` is a Python of this version with none of the project's packages,
as a worker machine has. One cluster for the module; the executors' environment is packed once
per test session (``spark_env_cache``).

- ``metaquorum replay --master spark://...`` ships its environment itself and writes the report,
  run from a directory without ``env/`` and with relative paths;
- with ``--no-ship-env`` the executors' ``python3`` lacks pyarrow, and the error says so in one
  line, with the executor's log (its URL and its path in the worker's work directory);
- the documented ``spark-submit`` recipe: ``metaquorum spark pack-env`` then ``spark-submit
  --archives env.tar.gz#env --conf spark.pyspark.python=./env/bin/python``."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from quorum.analytics.pack import CACHE_ENV
from quorum.harness import free_port, wait_until
from tests.spark.test_analytics_jobs import SCRIPT, A, C, D
from tests.spark.test_analytics_source import METADATA_DIR, history, read_rows, write_log

pytestmark = [pytest.mark.slow, pytest.mark.process]

VENV_BIN = Path(sys.executable).parent
JOB = """
import json, os, sys
from pyspark.sql import SparkSession
from quorum.analytics.source import load

spark = SparkSession.builder.getOrCreate()
df = load(spark, sys.argv[1])
counts = {r["record_type"]: r["count"] for r in df.groupBy("record_type").count().collect()}
def where(_):
    import msgspec, pyarrow  # what the source needs on an executor
    yield json.dumps({"python": sys.executable, "prefix": sys.prefix,
                      "path": os.environ.get("PATH", "")})
executor = json.loads(spark.sparkContext.parallelize([0], 1).mapPartitions(where).collect()[0])
print("RESULT " + json.dumps({"counts": counts, "executor": executor}))
spark.stop()
"""


def spark_home() -> Path:
    from pyspark.find_spark_home import _find_spark_home  # noqa: PLC0415

    return Path(_find_spark_home())


def accepts(port: int) -> bool:
    with socket.socket() as probe:
        probe.settimeout(0.2)
        return probe.connect_ex(("127.0.0.1", port)) == 0


def worker_python(root: Path) -> Path:
    """A directory with ``python3``: this Python's version (the executors must match the
    driver's), none of this project's packages (a virtual environment without pip)."""
    venv = root / "worker-python"
    subprocess.run(
        [sys.executable, "-m", "venv", "--without-pip", str(venv)],
        check=True, capture_output=True, timeout=120,
    )  # fmt: skip
    return venv / "bin"


def clean_env(root: Path, python_bin: Path) -> dict[str, str]:
    """What a worker machine has, as ``env -i`` plus what Spark needs: a system PATH with a
    bare Python of this version first, no virtualenv of this project, no PYSPARK_PYTHON."""
    env = {
        "PATH": f"{python_bin}:/usr/local/bin:/usr/bin:/bin",
        "HOME": str(root),
        "SPARK_HOME": str(spark_home()),
        "SPARK_LOCAL_IP": "127.0.0.1",
        "SPARK_LOG_DIR": str(root / "logs"),
        "LANG": "C.UTF-8",
    }
    if "JAVA_HOME" in os.environ:
        env["JAVA_HOME"] = os.environ["JAVA_HOME"]
    assert str(VENV_BIN) not in env["PATH"]
    return env


def stop(process: subprocess.Popen[bytes]) -> None:
    """By PID: SIGTERM, then SIGKILL if it lingers."""
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=10)


@dataclass(frozen=True)
class Standalone:
    """A running standalone cluster: the master's URL, the worker's work directory (one
    ``app-*/<executor>/`` per executor: its ``stderr``, the unpacked archives)."""

    url: str
    work_dir: Path

    def apps(self) -> set[Path]:
        return set(self.work_dir.glob("app-*")) if self.work_dir.exists() else set()


@pytest.fixture(scope="module")
def standalone(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Standalone]:
    """A master and one worker (1 core, 1 GiB) on 127.0.0.1, for the module's tests."""
    if shutil.which("java") is None:
        pytest.skip("no java on PATH: Spark needs Java 17")
    root = tmp_path_factory.mktemp("standalone")
    launcher = spark_home() / "bin" / "spark-class"
    env = clean_env(root, worker_python(root))
    port, master_ui, worker_ui = free_port(), free_port(), free_port()
    logs = root / "logs"
    logs.mkdir()
    started: list[subprocess.Popen[bytes]] = []

    def launch(name: str, *args: str) -> subprocess.Popen[bytes]:
        with (logs / f"{name}.out").open("wb") as out:
            process = subprocess.Popen(
                [str(launcher), *args], env=env, stdout=out, stderr=subprocess.STDOUT
            )
        started.append(process)
        return process

    try:
        launch("master", "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1",
               "--port", str(port), "--webui-port", str(master_ui))  # fmt: skip
        wait_until(lambda: accepts(port), 60, "the Spark master listening")
        url = f"spark://127.0.0.1:{port}"
        launch("worker", "org.apache.spark.deploy.worker.Worker", url, "--host", "127.0.0.1",
               "--webui-port", str(worker_ui), "--cores", "1", "--memory", "1g",
               "--work-dir", str(root / "work"))  # fmt: skip
        wait_until(
            lambda: "Registering worker" in (logs / "master.out").read_text(errors="replace"),
            60,
            "the worker registered with the master",
        )
        yield Standalone(url=url, work_dir=root / "work")
    except BaseException:
        for name in ("master", "worker"):
            path = logs / f"{name}.out"
            if path.exists():
                sys.stderr.write(f"---- {name} ----\n{path.read_text(errors='replace')[-3000:]}\n")
        raise
    finally:
        for process in reversed(started):
            stop(process)


# What a 1-core worker runs a small replay quickly with: few shuffle partitions (Spark's
# default of 200 means 200 tasks per shuffle on one core), a quick-starting JVM.
QUICK_JVM = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"
QUICK_CONF = (
    "spark.executor.memory=512m",
    "spark.cores.max=1",
    "spark.sql.shuffle.partitions=2",
    "spark.default.parallelism=2",
    f"spark.driver.extraJavaOptions={QUICK_JVM}",
    f"spark.executor.extraJavaOptions={QUICK_JVM}",
)


def driver_env(cache: Path) -> dict[str, str]:
    """The submitting user's environment, without this project's virtualenv activated (the
    command is run by its path) and without PYSPARK_PYTHON; the test session's cache."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYSPARK_PYTHON", "VIRTUAL_ENV")}
    env["PATH"] = os.pathsep.join(
        part for part in env.get("PATH", "").split(os.pathsep) if Path(part) != VENV_BIN
    )
    env["SPARK_LOCAL_IP"] = "127.0.0.1"
    env[CACHE_ENV] = str(cache)
    return env


def replay(
    standalone: Standalone, cache: Path, cwd: Path, *args: str
) -> subprocess.CompletedProcess[str]:
    """``metaquorum replay --master <the cluster> ARGS`` run from ``cwd``."""
    conf = [item for setting in QUICK_CONF for item in ("--conf", setting)]
    return subprocess.run(
        [str(VENV_BIN / "metaquorum"), "replay", "--master", standalone.url, *conf, *args],
        cwd=cwd, env=driver_env(cache), capture_output=True, text=True, timeout=240,
        check=False,
    )  # fmt: skip


def test_replay_ships_its_environment_to_a_standalone_cluster(
    standalone: Standalone, spark_env_cache: Path, tmp_path: Path
) -> None:
    write_log(tmp_path / "meta" / METADATA_DIR, SCRIPT)
    # Run from a directory with no env/ in it and with relative paths: replay makes them
    # absolute for the executors and needs no symlink to its virtualenv.
    cwd = tmp_path / "elsewhere"
    cwd.mkdir()
    before = standalone.apps()
    started = time.monotonic()
    result = replay(standalone, spark_env_cache, cwd, "--log-dir", "../meta", "--out", "../out")
    elapsed = time.monotonic() - started
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"| orders | 3 | {A}, {C}, {D} | 1, 2 | 10, 20 |" in result.stdout
    report = (tmp_path / "out" / "report.md").read_text()
    assert "| topic ids ever created | 4 |" in report
    # The archive came from the cache (packed by the first test of the session to need it).
    archive = re.search(r"(?:packed|reused) (\S+\.tar\.gz)", result.stdout)
    assert archive is not None, result.stdout
    assert Path(archive[1]).parent == spark_env_cache / "spark-env"
    # The executors ran the shipped environment: Spark unpacked it as env/ in their working
    # directory on the worker (whose own python3 lacks pyarrow: the next test).
    (app,) = standalone.apps() - before
    assert list(app.glob("*/env/pyvenv.cfg")), sorted(app.rglob("*"))[:20]
    assert not (cwd / "env").exists()
    print(f"metaquorum replay on the standalone cluster took {elapsed:.1f} s:\n{result.stdout}")


# timing: the failed task comes from the driver's REST API, asked with a 5 s timeout while the
# application runs (quorum/analytics/failure.py); beside replay --follow's JVMs on two busy
# cores it did not answer in time and the report named no executor (one failure).
@pytest.mark.timing
def test_replay_reports_an_executors_root_cause_and_its_log(
    standalone: Standalone, spark_env_cache: Path, tmp_path: Path
) -> None:
    log_dir = tmp_path / "meta" / METADATA_DIR
    write_log(log_dir, history(5))
    out = tmp_path / "out"
    started = time.monotonic()
    result = replay(
        standalone, spark_env_cache, tmp_path, "--no-ship-env", "--log-dir", str(log_dir),
        "--out", str(out),
    )  # fmt: skip
    print(f"the failing replay took {time.monotonic() - started:.1f} s:\n{result.stdout}")
    assert result.returncode == 1, result.stdout + result.stderr
    lines = result.stderr.splitlines()
    # One Error: line, the cause first: the last exception of the executor's traceback.
    errors = [line for line in lines if line.startswith("Error: ")]
    assert len(errors) == 1, result.stderr
    assert errors[0].startswith("Error: ModuleNotFoundError: No module named 'pyarrow'"), errors
    assert re.search(r"\(on executor \w+ at 127\.0\.0\.1: task ", errors[0]), errors
    assert "Traceback" not in result.stderr and "\tat org.apache" not in result.stderr
    assert any("run without --no-ship-env" in line for line in lines), result.stderr
    # Where the executor's log is: its path in the worker's work directory, its URL.
    on_disk = re.search(r"work directory .*: (app-[\w-]+/[\w-]+/stderr)$", result.stderr, re.M)
    assert on_disk is not None, result.stderr
    executor_log = (standalone.work_dir / on_disk[1]).read_text(errors="replace")
    assert "ModuleNotFoundError: No module named 'pyarrow'" in executor_log
    url = re.search(r"^The executor's log: (http://\S+)$", result.stderr, re.M)
    assert url is not None, result.stderr
    with urllib.request.urlopen(url[1], timeout=10) as page:
        assert "ModuleNotFoundError" in page.read().decode(errors="replace")
    whole = (out / "error.log").read_text()
    assert "Traceback (most recent call last):" in whole  # the Python side
    assert "\tat org.apache.spark." in whole  # and the JVM's
    assert str(out / "error.log") in result.stderr


def test_replay_source_runs_on_a_standalone_cluster_with_spark_submit(
    standalone: Standalone, tmp_path: Path
) -> None:
    """The recipe of docs/cli.md for spark-submit: pack-env, an env symlink where spark-submit
    runs (client mode), --archives and spark.pyspark.python."""
    log_dir = tmp_path / "meta" / METADATA_DIR
    write_log(log_dir, history(20))
    expected = Counter(row["record_type"] for row in read_rows(log_dir))
    archive = tmp_path / "metaquorum-env.tar.gz"
    packed = subprocess.run(
        [str(VENV_BIN / "metaquorum"), "spark", "pack-env", "--out", str(archive)],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert packed.returncode == 0, packed.stderr
    assert "--archives" in packed.stdout
    job = tmp_path / "job.py"
    job.write_text(JOB)
    driver_env = {
        **os.environ,
        "SPARK_LOCAL_IP": "127.0.0.1",
        "PYSPARK_DRIVER_PYTHON": sys.executable,
    }
    driver_env.pop("PYSPARK_PYTHON", None)
    # In client mode the driver also runs Python with spark.pyspark.python (to plan the Python
    # data source), so ./env must exist where spark-submit runs: the driver's own environment.
    submit_dir = tmp_path / "submit"
    submit_dir.mkdir()
    (submit_dir / "env").symlink_to(Path(sys.prefix))
    started = time.monotonic()
    submitted = subprocess.run(
        [
            str(VENV_BIN / "spark-submit"),
            "--master", standalone.url,
            "--archives", f"{archive}#env",
            "--conf", "spark.pyspark.python=./env/bin/python",
            "--conf", f"spark.pyspark.driver.python={sys.executable}",
            "--conf", "spark.driver.host=127.0.0.1",
            "--conf", "spark.driver.bindAddress=127.0.0.1",
            "--conf", "spark.ui.enabled=false",
            *(item for setting in QUICK_CONF for item in ("--conf", setting)),
            str(job), str(log_dir),
        ],
        cwd=submit_dir, env=driver_env, capture_output=True, text=True, timeout=300,
        check=False,
    )  # fmt: skip
    elapsed = time.monotonic() - started
    results = [line for line in submitted.stdout.splitlines() if line.startswith("RESULT ")]
    assert submitted.returncode == 0 and results, submitted.stderr[-4000:]
    result = json.loads(results[0].removeprefix("RESULT "))
    assert result["counts"] == dict(expected)
    executor = result["executor"]
    # The executor ran the shipped environment, unpacked in its work dir as env/, with a PATH
    # that has no virtualenv of this project on it.
    assert executor["python"].endswith("/env/bin/python"), executor
    assert str(standalone.work_dir) in executor["prefix"], executor
    assert str(VENV_BIN) not in executor["path"], executor
    print(f"spark-submit on the standalone cluster took {elapsed:.1f} s")
