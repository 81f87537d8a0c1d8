"""The pure packages stay sans-I/O (docs/conventions.md#pure-core, Kafka's import-control): no
sockets, clocks, threads, files or gRPC in the Raft core, the record codec or the controller state
machine."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PURE_DIRS = ("quorum/raft", "quorum/metadata", "quorum/controller")
PURE_FILES = ("quorum/ids.py", "quorum/errors.py", "quorum/limits.py", "broker/reconcile.py")
FORBIDDEN_IN_CORE = frozenset(
    {
        "asyncio",
        "grpc",
        "os",
        "pathlib",
        "pyspark",
        "selectors",
        "shutil",
        "signal",
        "socket",
        "subprocess",
        "tempfile",
        "threading",
        "time",
        "datetime",
        "multiprocessing",
        "concurrent",
        "io",
        "structlog",
        "logging",
    }
)
# Packages of this project that do I/O: a pure module may not reach them either.
FORBIDDEN_PROJECT_PACKAGES = ("quorum.server", "quorum.storage", "quorum.rpc", "quorum.cli")


def pure_modules() -> list[Path]:
    paths = [p for d in PURE_DIRS for p in sorted((ROOT / d).rglob("*.py"))]
    paths += [ROOT / f for f in PURE_FILES if (ROOT / f).exists()]
    return paths


def imported_modules(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module)
        elif isinstance(node, ast.Call) and getattr(node.func, "id", None) in (
            "open",
            "__import__",
        ):
            names.add(f"<builtin {node.func.id}()>")  # type: ignore[attr-defined]
    return names


def test_there_are_pure_modules_to_check() -> None:
    assert len(pure_modules()) >= 8


@pytest.mark.parametrize("path", pure_modules(), ids=lambda p: str(p.relative_to(ROOT)))
def test_pure_module_does_no_io(path: Path) -> None:
    modules = imported_modules(path)
    forbidden = sorted(
        m
        for m in modules
        if m.split(".")[0] in FORBIDDEN_IN_CORE
        or m.startswith(FORBIDDEN_PROJECT_PACKAGES)
        or m.startswith("<builtin")
    )
    assert not forbidden, f"{path.relative_to(ROOT)} is pure but imports {forbidden}"


def test_checker_catches_a_forbidden_import(tmp_path: Path) -> None:
    """The checker itself must bite: a module importing time and calling open() is flagged."""
    bad = tmp_path / "bad.py"
    bad.write_text("import time\nfrom os import path\nx = open('f')\n")
    modules = imported_modules(bad)
    assert {"time", "os", "<builtin open()>"} <= modules
