"""``metaquorum dev up``: the local cluster of ``deploy/local/`` as real processes, and the
demo that ``scripts/run`` shows.

It formats every node's directory under ``.data/`` (wiping a previous demo's data unless told
to keep it), starts each node through the same CLI a user would type, waits for a leader with a
deadline, prints ``quorum describe --status`` and ``--replication``, and stops every process it
started when it ends or on Ctrl-C (SIGTERM, then SIGKILL after a bound).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from quorum.config import NodeConfig, load_config
from quorum.ids import Uuid

STOP_TIMEOUT_S = 10.0
LEADER_TIMEOUT_S = 30.0


@dataclass
class Managed:
    name: str
    config: NodeConfig
    config_path: Path
    log_path: Path
    process: subprocess.Popen[bytes] | None = None


def _cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "quorum.cli", *args]


def _say(text: str) -> None:
    print(text, flush=True)


class LocalCluster:
    def __init__(self, deploy_dir: Path, data_dir: Path) -> None:
        self.deploy_dir = deploy_dir
        self.data_dir = data_dir
        self.controllers: list[Managed] = []
        for path in sorted(deploy_dir.glob("controller-*.toml")):
            config = load_config(path)
            self.controllers.append(
                Managed(
                    path.stem,
                    config,
                    path,
                    data_dir / "logs" / f"{path.stem}.log",
                )
            )
        if not self.controllers:
            raise SystemExit(f"no controller-*.toml in {deploy_dir}")

    @property
    def bootstrap(self) -> str:
        return ",".join(
            f"{m.config.listener.host}:{m.config.listener.port}" for m in self.controllers
        )

    def format(self, cluster_id: Uuid, wipe: bool) -> None:
        if wipe and self.data_dir.exists():
            for managed in self.controllers:
                for directory in managed.config.data_dirs:
                    shutil.rmtree(directory, ignore_errors=True)
        for managed in self.controllers:
            subprocess.run(
                _cli(
                    "storage", "format", "--config", str(managed.config_path),
                    "--cluster-id", str(cluster_id), "--ignore-formatted",
                ),
                check=True,
            )  # fmt: skip

    def start(self, managed: Managed) -> None:
        managed.log_path.parent.mkdir(parents=True, exist_ok=True)
        with managed.log_path.open("ab") as log:
            managed.process = subprocess.Popen(
                _cli("controller", "start", "--config", str(managed.config_path)),
                stdout=log,
                stderr=subprocess.STDOUT,
                env={**os.environ, "LOG_FORMAT": "json"},
                start_new_session=True,  # Ctrl-C reaches us; we stop the children ourselves
            )
        _say(f"started {managed.name} (pid {managed.process.pid}), log: {managed.log_path}")

    def stop_all(self) -> None:
        running = [m for m in self.controllers if m.process and m.process.poll() is None]
        for managed in running:
            assert managed.process is not None
            managed.process.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + STOP_TIMEOUT_S
        for managed in running:
            assert managed.process is not None
            try:
                managed.process.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                managed.process.kill()
                managed.process.wait(timeout=STOP_TIMEOUT_S)
            _say(f"stopped {managed.name} (exit code {managed.process.returncode})")

    def describe(self, *flags: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            _cli("quorum", "describe", *flags, "--bootstrap-controller", self.bootstrap),
            capture_output=True,
            text=True,
            check=False,
            timeout=30,
        )

    def wait_for_leader(self, timeout_s: float) -> str:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            for managed in self.controllers:
                if managed.process is not None and managed.process.poll() is not None:
                    raise SystemExit(
                        f"{managed.name} exited with code {managed.process.returncode}; "
                        f"see {managed.log_path}"
                    )
            result = self.describe("--status")
            if result.returncode == 0 and "no leader" not in result.stdout:
                return result.stdout
            time.sleep(0.1)
        raise SystemExit(f"no leader within {timeout_s} s; see the logs in {self.data_dir}/logs")


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


@contextlib.contextmanager
def running(cluster: LocalCluster) -> Iterator[LocalCluster]:
    """Stop every process we started, however the block ends (SIGTERM included)."""
    previous = signal.getsignal(signal.SIGTERM)
    signal.signal(signal.SIGTERM, _interrupt)
    try:
        yield cluster
    finally:
        cluster.stop_all()
        signal.signal(signal.SIGTERM, previous)


def dev_up(deploy_dir: Path, data_dir: Path, *, keep_running: bool, wipe: bool) -> int:
    cluster = LocalCluster(deploy_dir, data_dir)
    cluster_id = Uuid.random()
    _say(f"== formatting {len(cluster.controllers)} controllers, cluster id {cluster_id}")
    cluster.format(cluster_id, wipe=wipe)
    with running(cluster):
        _say("== starting the controllers")
        started = time.monotonic()
        for managed in cluster.controllers:
            cluster.start(managed)
        status = cluster.wait_for_leader(LEADER_TIMEOUT_S)
        _say(f"== a leader was elected {time.monotonic() - started:.1f} s after start")
        _say("\n$ metaquorum quorum describe --status")
        _say(status.rstrip())
        replication = cluster.describe("--replication", "--human-readable")
        _say("\n$ metaquorum quorum describe --replication --human-readable")
        _say(replication.stdout.rstrip())
        if keep_running:
            _say(
                f"\n== the cluster keeps running; try:\n"
                f"   .venv/bin/metaquorum quorum describe --status "
                f"--bootstrap-controller {cluster.bootstrap}\n"
                "   Ctrl-C stops every process."
            )
            with contextlib.suppress(KeyboardInterrupt):
                while all(m.process and m.process.poll() is None for m in cluster.controllers):
                    time.sleep(0.5)
        _say("\n== stopping the cluster")
    return 0
