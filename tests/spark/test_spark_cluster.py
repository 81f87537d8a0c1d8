"""The replay's data source on a real Spark standalone cluster, submitted the way data engineers
submit jobs: a master and a worker started from pyspark's own launcher (``bin/spark-class``,
what ``sbin/start-master.sh`` / ``start-worker.sh`` run; the pip wheel ships ``spark-class`` but
not those two wrappers), bound to 127.0.0.1, the worker's PATH without this project's
virtualenv. The job's Python environment travels with it: ``metaquorum spark pack-env`` then
``spark-submit --archives env.tar.gz#env --conf spark.pyspark.python=./env/bin/python``."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from quorum.harness import free_port, wait_until
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


def clean_env(tmp_path: Path) -> dict[str, str]:
    """What a worker machine has: system PATH, no virtualenv, no PYSPARK_PYTHON."""
    env = {
        "PATH": "/usr/local/bin:/usr/bin:/bin",
        "HOME": str(tmp_path),
        "SPARK_HOME": str(spark_home()),
        "SPARK_LOCAL_IP": "127.0.0.1",
        "SPARK_LOG_DIR": str(tmp_path / "logs"),
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


@pytest.fixture
def standalone(tmp_path: Path) -> Iterator[str]:
    """A master and one worker (1 core, 1 GiB) on 127.0.0.1; yields the master URL."""
    if shutil.which("java") is None:
        pytest.skip("no java on PATH: Spark needs Java 17")
    launcher = spark_home() / "bin" / "spark-class"
    env = clean_env(tmp_path)
    port, master_ui, worker_ui = free_port(), free_port(), free_port()
    logs = tmp_path / "logs"
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
               "--work-dir", str(tmp_path / "work"))  # fmt: skip
        wait_until(
            lambda: "Registering worker" in (logs / "master.out").read_text(errors="replace"),
            60,
            "the worker registered with the master",
        )
        yield url
    except BaseException:
        for name in ("master", "worker"):
            path = logs / f"{name}.out"
            if path.exists():
                sys.stderr.write(f"---- {name} ----\n{path.read_text(errors='replace')[-3000:]}\n")
        raise
    finally:
        for process in reversed(started):
            stop(process)


def test_replay_source_runs_on_a_standalone_cluster_with_a_shipped_env(
    standalone: str, tmp_path: Path
) -> None:
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
            "--master", standalone,
            "--archives", f"{archive}#env",
            "--conf", "spark.pyspark.python=./env/bin/python",
            "--conf", f"spark.pyspark.driver.python={sys.executable}",
            "--conf", "spark.driver.host=127.0.0.1",
            "--conf", "spark.driver.bindAddress=127.0.0.1",
            "--conf", "spark.ui.enabled=false",
            "--conf", "spark.executor.memory=512m",
            "--conf", "spark.cores.max=1",
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
    assert str(tmp_path / "work") in executor["prefix"], executor
    assert str(VENV_BIN) not in executor["path"], executor
    print(f"spark-submit on the standalone cluster took {elapsed:.1f} s")
