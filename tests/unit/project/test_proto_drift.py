"""The committed generated code must be exactly what scripts/gen-proto writes (etcd's
``verify-genproto``): editing a .proto without regenerating, or hand-editing generated code,
fails here with the command that fixes it."""

from __future__ import annotations

import difflib
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[3]
GEN_PROTO = REPO_ROOT / "scripts" / "gen-proto"
PROTO_ROOT = REPO_ROOT / "proto"
GENERATED_SUFFIXES = ("_pb2.py", "_pb2_grpc.py", "_pb2.pyi")


def generated_names(proto: Path) -> list[Path]:
    """The files protoc writes for one .proto, relative to the output root."""
    relative = proto.relative_to(PROTO_ROOT).with_suffix("")
    return [relative.parent / f"{relative.name}{suffix}" for suffix in GENERATED_SUFFIXES]


PROTOS = sorted(PROTO_ROOT.rglob("*.proto"))


def regenerate(out_dir: Path) -> None:
    if shutil.which("bash") is None:  # pragma: no cover - every supported host has bash
        pytest.skip("bash is needed to run scripts/gen-proto")
    result = subprocess.run(
        ["bash", str(GEN_PROTO), str(out_dir)],
        cwd=REPO_ROOT,
        env={**os.environ, "PYTHON": sys.executable},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, f"scripts/gen-proto failed:\n{result.stderr}"


def test_there_is_a_raft_proto() -> None:
    assert PROTO_ROOT / "quorum" / "rpc" / "v1" / "raft.proto" in PROTOS


def test_there_is_an_admin_proto() -> None:
    assert PROTO_ROOT / "quorum" / "rpc" / "v1" / "admin.proto" in PROTOS


def test_generated_code_matches_the_proto_sources(tmp_path: Path) -> None:
    regenerate(tmp_path)
    problems: list[str] = []
    for proto in PROTOS:
        for name in generated_names(proto):
            fresh = tmp_path / name
            committed = REPO_ROOT / name
            assert fresh.is_file(), f"gen-proto did not write {name}"
            if not committed.is_file():
                problems.append(f"{name} is missing")
                continue
            fresh_text = fresh.read_text()
            committed_text = committed.read_text()
            if fresh_text != committed_text:
                diff = "".join(
                    list(
                        difflib.unified_diff(
                            committed_text.splitlines(keepends=True),
                            fresh_text.splitlines(keepends=True),
                            fromfile=f"committed/{name}",
                            tofile=f"regenerated/{name}",
                        )
                    )[:40]
                )
                problems.append(f"{name} differs from its source {proto.name}:\n{diff}")
    assert not problems, (
        "generated protobuf code is out of date. Run `scripts/gen-proto` and commit the result "
        "(if only the protoc version line changed, check grpcio-tools against constraints.txt).\n"
        + "\n".join(problems)
    )


def test_no_generated_file_is_left_without_a_proto() -> None:
    expected = {name for proto in PROTOS for name in generated_names(proto)}
    committed = {
        path.relative_to(REPO_ROOT)
        for suffix in GENERATED_SUFFIXES
        for path in (REPO_ROOT / "quorum").rglob(f"*{suffix}")
    }
    orphans = sorted(str(path) for path in committed - expected)
    assert not orphans, f"generated files with no .proto under proto/ (delete them): {orphans}"


@pytest.mark.parametrize("proto", PROTOS, ids=lambda p: p.name)
def test_generated_module_imports_by_package_path(proto: Path) -> None:
    """-Iproto with mirrored paths gives package imports, never a bare sibling import."""
    relative = proto.relative_to(PROTO_ROOT).with_suffix("")
    package = ".".join(relative.parent.parts)
    grpc_module = (REPO_ROOT / relative.parent / f"{relative.name}_pb2_grpc.py").read_text()
    assert f"from {package} import {relative.name}_pb2" in grpc_module
    assert f"\nimport {relative.name}_pb2" not in grpc_module


def test_every_proto_field_is_commented() -> None:
    """Every field says what it is, as Kafka's JSON schemas' "about" strings do
    (docs/conventions.md#wire):
    the line before each field declaration is a comment."""
    field = re.compile(r"^\s*(?:repeated |optional )?[\w.]+ \w+ = \d+;")
    missing: list[str] = []
    for proto in PROTOS:
        lines = proto.read_text().splitlines()
        for number, line in enumerate(lines):
            if field.match(line) and not lines[number - 1].strip().startswith("//"):
                missing.append(f"{proto.name}:{number + 1}: {line.strip()}")
    assert not missing, "fields without a comment:\n" + "\n".join(missing)
