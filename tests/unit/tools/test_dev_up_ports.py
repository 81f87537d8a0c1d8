"""`metaquorum dev up` refuses at once when a node's port is taken (another cluster left running,
or another program), before it writes certificates, formats or wipes anything."""

from __future__ import annotations

import json
import socket
from pathlib import Path

from quorum.harness import free_port, run_cli


def write_deploy(directory: Path, ports: dict[str, int]) -> None:
    """A one-controller, one-broker deploy directory with absolute paths under ``directory``."""
    directory.mkdir()
    controller, broker = ports["controller-1"], ports["broker-1"]
    voters = json.dumps([f"1@127.0.0.1:{controller}"])
    (directory / "controller-1.toml").write_text(
        f'"node.id" = 1\n"process.roles" = ["controller"]\n'
        f'"controller.quorum.voters" = {voters}\n'
        f'"listeners" = ["CONTROLLER://127.0.0.1:{controller}"]\n'
        f'"metadata.log.dir" = "{directory / "data" / "controller-1"}"\n'
        f'"listener.security.protocol.map" = ["CONTROLLER:PLAINTEXT"]\n'
    )
    (directory / "broker-1.toml").write_text(
        f'"node.id" = 101\n"process.roles" = ["broker"]\n'
        f'"controller.quorum.voters" = {voters}\n'
        f'"listeners" = ["BROKER://127.0.0.1:{broker}"]\n'
        f'"log.dirs" = ["{directory / "data" / "broker-1"}"]\n'
        f'"listener.security.protocol.map" = ["BROKER:PLAINTEXT"]\n'
    )


def test_dev_up_refuses_a_taken_port_and_touches_nothing(tmp_path: Path) -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        taken = holder.getsockname()[1]
        deploy = tmp_path / "deploy"
        write_deploy(deploy, {"controller-1": free_port(), "broker-1": taken})
        data = tmp_path / "data-dir"
        result = run_cli(
            "dev", "up", "--no-story", "--deploy-dir", str(deploy), "--data-dir", str(data),
            check=False,
        )  # fmt: skip
    assert result.returncode != 0
    assert f"broker-1 (127.0.0.1:{taken})" in result.stderr
    assert "in use" in result.stderr and "nothing was started or wiped" in result.stderr
    assert "controller-1" not in result.stderr.split("in use")[0]
    assert not data.exists() and not (deploy / "data").exists()
