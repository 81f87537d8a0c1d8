"""What an installed ``metaquorum`` tells its user: packaging metadata (PEP 639 license, PEP 561
``py.typed``), ``--version`` on every command, and one-line errors where a checkout or an
optional extra is missing instead of a traceback."""

from __future__ import annotations

import os
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from quorum.cli import build_parser, version_text

REPO_ROOT = Path(__file__).resolve().parents[3]


def test_pyproject_declares_an_spdx_license_classifiers_urls_and_typed_packages() -> None:
    pyproject = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())
    project = pyproject["project"]
    # The table form ({text = ...}) makes setuptools >= 77 print a deprecation banner on
    # every install; an SPDX string needs setuptools >= 77 to build.
    assert project["license"] == "Apache-2.0"
    assert project["license-files"] == ["LICENSE"]
    assert "Apache License" in (REPO_ROOT / "LICENSE").read_text()
    assert any(r.startswith("setuptools>=77") for r in pyproject["build-system"]["requires"])
    assert "Typing :: Typed" in project["classifiers"]
    assert not [c for c in project["classifiers"] if c.startswith("License ::")]  # PEP 639
    assert all(url.startswith("https://") for url in project["urls"].values())
    package_data = pyproject["tool"]["setuptools"]["package-data"]
    for package in ("quorum", "broker"):
        assert "py.typed" in package_data[package]
        assert (REPO_ROOT / package / "py.typed").is_file()
    assert "rpc/v1/*.pyi" in package_data["quorum"]


def every_parser_path() -> list[list[str]]:
    """The argv prefix of every command and subcommand of ``metaquorum``."""
    import argparse  # noqa: PLC0415

    paths: list[list[str]] = []

    def walk(parser: argparse.ArgumentParser, prefix: list[str]) -> None:
        paths.append(prefix)
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for name, sub in action.choices.items():
                    walk(sub, [*prefix, name])

    walk(build_parser(), [])
    return paths


@pytest.mark.parametrize("prefix", every_parser_path(), ids=lambda p: " ".join(p) or "metaquorum")
def test_version_everywhere(prefix: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        build_parser().parse_args([*prefix, "--version"])
    assert exit_info.value.code == 0
    assert capsys.readouterr().out == version_text() + "\n"
    assert version_text().startswith("metaquorum ")


def metaquorum(
    *args: str, hide: tuple[str, ...] = (), cwd: Path = REPO_ROOT
) -> subprocess.CompletedProcess[str]:
    """The CLI in a fresh interpreter; ``hide``: top-level modules made unimportable there, as
    in an install without the extra that provides them."""
    # A None entry in sys.modules is Python's own "not installed": import raises
    # ModuleNotFoundError and importlib.util.find_spec returns None.
    blocker = (
        "import sys\n"
        f"sys.modules.update(dict.fromkeys({list(hide)!r}))\n"
        "from quorum.cli import main\n"
        "sys.exit(main(sys.argv[1:]))\n"
    )
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    return subprocess.run(
        [sys.executable, "-c", blocker, *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_replay_without_the_analytics_extra_says_what_to_install(tmp_path: Path) -> None:
    run = metaquorum(
        "replay", "--log-dir", str(tmp_path), "--out", str(tmp_path / "o"), hide=("pyspark",)
    )
    assert run.returncode == 1
    assert run.stderr == (
        "Error: metaquorum replay needs the 'analytics' extra, which is not installed (missing: "
        "pyspark): pip install 'metaquorum[analytics]'\n"
    )
    assert "Traceback" not in run.stderr


def test_dev_up_outside_a_checkout_says_it_needs_one(tmp_path: Path) -> None:
    run = metaquorum("dev", "up", "--no-story", cwd=tmp_path)
    assert run.returncode == 1
    assert "deploy/local does not exist here" in run.stderr
    assert "a checkout of the metaquorum repository" in run.stderr
    assert "Traceback" not in run.stderr
    assert list(tmp_path.iterdir()) == []  # nothing was written
