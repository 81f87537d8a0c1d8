"""The pure packages stay sans-I/O (docs/conventions.md#pure-core, Kafka's import-control): no
sockets, clocks, threads, files or gRPC in the Raft core, the record codec or the controller state
machine."""

from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
PURE_DIRS = ("quorum/raft", "quorum/metadata", "quorum/controller", "broker/groups")
PURE_FILES = (
    "quorum/ids.py",
    "quorum/errors.py",
    "quorum/limits.py",
    "broker/reconcile.py",
    "quorum/security/acls.py",
    "broker/log/batch.py",
    "broker/log/config.py",
    "broker/log/errors.py",
    "broker/kafka/fetch_sessions.py",
)
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


# ----- documents cited by the code live in the repository (docs/conventions.md#documents) -----

# Directories that are not the project's own text: the virtualenv, caches, run data and build
# output (the git-ignored names of .gitignore).
SKIPPED_DIRS = frozenset(
    {".git", ".venv", ".data", "__pycache__", ".mypy_cache", ".ruff_cache", ".pytest_cache"}
    | {".hypothesis", "build", "dist", "spark-warehouse", "metastore_db"}
)
CITING_SUFFIXES = (".py", ".pyi", ".proto", ".toml", ".sh")
# Markdown files the code writes (``replay``'s report), named in it but not cited as documents.
WRITTEN_MD_NAMES = frozenset({"report.md"})
# A Markdown path with an optional anchor: ``docs/architecture.md#the-raft-protocol``.
MD_CITATION = re.compile(r"(?<![\w/.-])((?:\.{1,2}/)*[\w.-]+(?:/[\w.-]+)*\.md)(?:#([\w-]+))?")
# The founders' notes outside the repository, however they are reached.
OUTSIDE_CITATION = re.compile(
    r"(?:\.\./)+shared\b|/work/share[d]\b|(?<![\w.-])/?\bshared/[\w./-]*\.md"
)


def citing_files(root: Path) -> list[Path]:
    """Every .py/.pyi/.proto/.toml/.sh file and every script (a file under scripts/ or .ci/
    starting with a shebang), outside the virtualenv and caches."""
    found: list[Path] = []
    for directory, subdirs, files in os.walk(root):
        # Never descend into them (nor into *.egg-info).
        subdirs[:] = [d for d in subdirs if d not in SKIPPED_DIRS and not d.endswith(".egg-info")]
        for name in files:
            path = Path(directory, name)
            parts = path.relative_to(root).parts
            is_script = parts[0] in ("scripts", ".ci") and path.read_bytes()[:2] == b"#!"
            if path.suffix in CITING_SUFFIXES or is_script:
                found.append(path)
    return sorted(found)


def heading_anchors(markdown: str) -> set[str]:
    """GitHub's anchors of a Markdown file's headings: lower case, punctuation dropped,
    spaces to hyphens."""
    anchors: set[str] = set()
    for line in markdown.splitlines():
        if line.startswith("#"):
            title = line.lstrip("#").strip().lower()
            anchors.add(re.sub(r"[^\w\- ]", "", title).replace(" ", "-"))
    return anchors


def citation_problems(path: Path, root: Path) -> list[str]:
    """The citations in ``path`` of Markdown documents that are not in the repository at
    ``root`` (or of an anchor the document lacks), and of the notes outside it."""
    text = path.read_text(errors="replace")
    where = path.relative_to(root)
    problems = [
        f"{where}:{text.count(chr(10), 0, m.start()) + 1}: cites {m.group(0)!r}, outside the "
        "repository"
        for m in OUTSIDE_CITATION.finditer(text)
    ]
    for m in MD_CITATION.finditer(text):
        cited, anchor = m.group(1), m.group(2)
        line = text.count("\n", 0, m.start()) + 1
        if Path(cited).name in WRITTEN_MD_NAMES or OUTSIDE_CITATION.search(cited):
            continue
        target = (root / cited).resolve()
        if not target.is_relative_to(root.resolve()):
            problems.append(f"{where}:{line}: cites {cited!r}, outside the repository")
        elif not target.is_file():
            problems.append(f"{where}:{line}: cites {cited!r}, which is not in the repository")
        elif anchor is not None and anchor not in heading_anchors(target.read_text()):
            problems.append(f"{where}:{line}: cites {cited}#{anchor}, a heading {cited} lacks")
    return problems


def test_there_are_citing_files_to_check() -> None:
    names = {str(p.relative_to(ROOT)) for p in citing_files(ROOT)}
    assert {"pyproject.toml", "proto/quorum/rpc/v1/raft.proto", "scripts/test"} <= names
    assert not any(name.startswith(".venv") for name in names)


def test_cited_documents_are_in_the_repository() -> None:
    problems = [p for path in citing_files(ROOT) for p in citation_problems(path, ROOT)]
    assert not problems, "\n".join(problems)


def test_checker_catches_a_missing_or_outside_document(tmp_path: Path) -> None:
    """The citation checker must bite: a missing document, a missing anchor, the notes outside
    the repository and a path escaping it are each reported; a present one and the report
    the code writes are not. (The names are assembled so this file cites none of them.)"""
    md, notes = ".md", "shared"
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / f"here{md}").write_text("# Title\n\n## The part\n")
    (tmp_path / "scripts").mkdir()
    script = tmp_path / "scripts" / "run"
    script.write_text(f"#!/bin/sh\n# see GONE{md}\n")
    module = tmp_path / "module.py"
    module.write_text(
        f'"""docs/here{md}#the-part is fine, docs/here{md}#nowhere not; ../{notes}/NOTES{md}"""\n'
        f"# writes out/report{md}; see ../elsewhere{md} and docs/here{md}\n"
        f"# the notes in /work/{notes} and in {notes}/STYLE{md}\n"
    )
    assert citing_files(tmp_path) == [module, script]
    problems = citation_problems(module, tmp_path) + citation_problems(script, tmp_path)
    assert [p.split(": cites ")[0] for p in problems] == [
        "module.py:1",
        "module.py:3",
        "module.py:3",
        "module.py:1",
        "module.py:2",
        "scripts/run:2",
    ], problems
    assert all(problems[i].endswith("outside the repository") for i in (0, 1, 2, 4))
    assert problems[3].endswith(f"a heading docs/here{md} lacks")
    assert problems[5].endswith("which is not in the repository")


# ----- every bound in quorum/limits.py is used (docs/conventions.md#limits) --------------------

LIMIT_USER_DIRS = ("quorum", "broker", "tests", "scripts")


def module_constants(path: Path) -> list[str]:
    """The upper-case names a module assigns at its top level."""
    names: list[str] = []
    for node in ast.parse(path.read_text(), filename=str(path)).body:
        target = node.target if isinstance(node, ast.AnnAssign) else None
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            target = node.targets[0]
        if isinstance(target, ast.Name) and target.id.isupper():
            names.append(target.id)
    return names


def unused_constants(limits: Path, users: list[Path]) -> list[str]:
    """The constants of ``limits`` that no file of ``users`` (other than ``limits``) names."""
    text = "\n".join(p.read_text(errors="replace") for p in users if p != limits)
    return [name for name in module_constants(limits) if not re.search(rf"\b{name}\b", text)]


def limit_users(root: Path) -> list[Path]:
    return [
        p
        for p in citing_files(root)
        if p.relative_to(root).parts[0] in LIMIT_USER_DIRS and p.suffix in ("", ".py")
    ]


def test_every_limit_is_used() -> None:
    unused = unused_constants(ROOT / "quorum/limits.py", limit_users(ROOT))
    assert not unused, f"quorum/limits.py defines {unused}, which nothing uses"


def test_checker_catches_an_unused_limit(tmp_path: Path) -> None:
    """The limits checker must bite: a bound only limits.py itself mentions is reported."""
    (tmp_path / "quorum").mkdir()
    limits = tmp_path / "quorum" / "limits.py"
    limits.write_text(
        "from typing import Final\n\nUSED_MAX: Final = 1\nUNUSED_MAX = 2\nlower = 3\n"
        "assert UNUSED_MAX > USED_MAX\n"
    )
    (tmp_path / "quorum" / "user.py").write_text("from quorum.limits import USED_MAX\n")
    assert module_constants(limits) == ["USED_MAX", "UNUSED_MAX"]
    assert unused_constants(limits, limit_users(tmp_path)) == ["UNUSED_MAX"]


# ----- modules talk through public names; brokers do not reach into the controller -----------

PROJECT_PACKAGES = ("quorum", "broker", "tests")


def project_python_files() -> list[Path]:
    files = [p for d in PROJECT_PACKAGES for p in sorted((ROOT / d).rglob("*.py"))]
    files += sorted((ROOT / "scripts").rglob("*.py"))
    return [p for p in files if "rpc" not in p.relative_to(ROOT).parts]


def private_imports(path: Path, root: Path = ROOT) -> list[str]:
    """``from <project module> import _name``: a private name used outside its module."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if (
            isinstance(node, ast.ImportFrom)
            and node.level == 0
            and node.module
            and node.module.split(".")[0] in PROJECT_PACKAGES
        ):
            found += [
                f"{path.relative_to(root)}:{node.lineno}: from {node.module} import {a.name}"
                for a in node.names
                if a.name.startswith("_") and not a.name.startswith("__")
            ]
    return found


def test_no_module_imports_a_private_name_of_another() -> None:
    problems = [p for path in project_python_files() for p in private_imports(path)]
    assert not problems, "\n".join(problems)


def test_private_import_checker_bites(tmp_path: Path) -> None:
    bad = tmp_path / "bad.py"
    bad.write_text("from quorum.storage.log import _helper\nfrom quorum.ids import Uuid\n")
    assert private_imports(bad, tmp_path) == ["bad.py:1: from quorum.storage.log import _helper"]


# ----- layers of the shells (docs/architecture.md#layers-and-packages) ------------------------

# A broker is a node of its own: what it shares with a controller lives in these modules of
# quorum.server; the controller's own (its process, its AdminService and QuorumService, the
# peer clients its servicer answers) are not a broker's business. The gRPC options a broker's
# channels use are in grpc_options, not in a servicer module.
BROKER_SHARED_SERVER_MODULES = frozenset(
    {
        "quorum.server.admin_service",  # the AdminService handlers both kinds of node serve
        "quorum.server.driver",
        "quorum.server.grpc_metrics",
        "quorum.server.grpc_options",
        "quorum.server.grpc_server",
        "quorum.server.metric_stats",
        "quorum.server.metrics",
        "quorum.server.raft_manager",
    }
)
# What the client (quorum/admin/) and the tools (quorum/tools/) may not import: a server. The
# codecs they share with the servers are quorum.wire's.
CLIENT_FORBIDDEN_PACKAGES = ("quorum.server",)
# What the codecs (quorum/wire/) may not import: they are pure translations, shared by servers,
# client and tools alike.
WIRE_FORBIDDEN_PACKAGES = (
    "quorum.server",
    "quorum.storage",
    "quorum.admin",
    "quorum.tools",
    "quorum.cli",
    "broker",
    "grpc",
)


def imported_names(path: Path) -> set[str]:
    """Every module ``path`` imports, anywhere in it (lazy imports too), with ``from a import b``
    also counted as ``a.b``: ``from quorum import server`` imports ``quorum.server``."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module)
            names.update(f"{node.module}.{alias.name}" for alias in node.names)
    return names


def _within(name: str, packages: tuple[str, ...] | frozenset[str]) -> bool:
    return any(name == p or name.startswith(f"{p}.") for p in packages)


def forbidden_imports(
    paths: list[Path], forbidden: tuple[str, ...], root: Path = ROOT
) -> list[str]:
    """``path imports module`` for each import of ``paths`` in (or under) ``forbidden``."""
    return [
        f"{path.relative_to(root)} imports {name}"
        for path in paths
        for name in sorted(imported_names(path))
        if _within(name, forbidden)
    ]


def server_modules_of_brokers(paths: list[Path], root: Path = ROOT) -> list[str]:
    """Imports of ``paths`` from quorum.server outside ``BROKER_SHARED_SERVER_MODULES`` (a name
    imported from a shared module, ``from quorum.server.driver import Clock``, is fine)."""
    return [
        f"{path.relative_to(root)} imports {name}"
        for path in paths
        for name in sorted(imported_names(path))
        if _within(name, ("quorum.server",))
        and name != "quorum.server"
        and not _within(name, BROKER_SHARED_SERVER_MODULES)
    ]


def python_files(root: Path, *dirs: str) -> list[Path]:
    return [p for d in dirs for p in sorted((root / d).rglob("*.py"))]


def test_there_are_clients_tools_codecs_and_brokers_to_check() -> None:
    assert len(python_files(ROOT, "quorum/admin")) >= 5
    assert len(python_files(ROOT, "quorum/tools")) >= 5
    assert len(python_files(ROOT, "quorum/wire")) >= 5
    assert len(python_files(ROOT, "broker")) >= 10


def test_the_client_and_the_tools_import_no_server() -> None:
    paths = python_files(ROOT, "quorum/admin", "quorum/tools")
    offenders = forbidden_imports(paths, CLIENT_FORBIDDEN_PACKAGES)
    assert not offenders, "\n".join(offenders)


def test_the_codecs_import_no_server_storage_client_or_grpc() -> None:
    offenders = forbidden_imports(python_files(ROOT, "quorum/wire"), WIRE_FORBIDDEN_PACKAGES)
    assert not offenders, "\n".join(offenders)


def test_brokers_take_only_the_shared_modules_of_the_server() -> None:
    """No broker module imports the controller, its services or its peer clients: in
    particular no servicer module for the gRPC options (quorum/server/grpc_options.py)."""
    offenders = server_modules_of_brokers(python_files(ROOT, "broker"))
    assert not offenders, "\n".join(offenders)


def test_checker_catches_a_layer_crossed(tmp_path: Path) -> None:
    """The layering checkers must bite: a client importing the server (directly, through
    ``from quorum import server`` and lazily inside a function), and a broker taking the gRPC
    options from the servicer module or the controller's admin service, are each reported;
    shared modules and names imported from them are not."""
    client = tmp_path / "client.py"
    client.write_text(
        "from quorum import server\n"
        "from quorum.wire.raft import request_to_proto\n"
        "def later():\n"
        "    from quorum.server.quorum_service import QuorumServicer\n"
    )
    assert forbidden_imports([client], CLIENT_FORBIDDEN_PACKAGES, tmp_path) == [
        "client.py imports quorum.server",
        "client.py imports quorum.server.quorum_service",
        "client.py imports quorum.server.quorum_service.QuorumServicer",
    ]
    codec = tmp_path / "codec.py"
    codec.write_text("import grpc\nfrom quorum.storage.snapshots import read_chunk\n")
    assert len(forbidden_imports([codec], WIRE_FORBIDDEN_PACKAGES, tmp_path)) == 3
    broker = tmp_path / "broker.py"
    broker.write_text(
        "from quorum.server.quorum_service import SERVER_OPTIONS\n"
        "from quorum.server import controller_admin\n"
        "from quorum.server.grpc_options import NODE_CHANNEL_OPTIONS\n"
        "from quorum.server.driver import ShuttingDownError\n"
    )
    assert server_modules_of_brokers([broker], tmp_path) == [
        "broker.py imports quorum.server.controller_admin",
        "broker.py imports quorum.server.quorum_service",
        "broker.py imports quorum.server.quorum_service.SERVER_OPTIONS",
    ]


# ----- module size -----------------------------------------------------------------------------

# A module a newcomer can read in one sitting (issue 29); generated code is exempt.
MODULE_LINES_MAX = 1_000


def oversized_modules(paths: list[Path], root: Path = ROOT) -> list[str]:
    found = []
    for path in paths:
        if "rpc" in path.relative_to(root).parts:
            continue  # generated by scripts/gen-proto
        lines = path.read_text().count("\n")
        if lines > MODULE_LINES_MAX:
            found.append(f"{path.relative_to(root)}: {lines} lines")
    return found


def test_no_module_is_over_a_thousand_lines() -> None:
    offenders = oversized_modules(python_files(ROOT, "quorum", "broker"))
    assert not offenders, "\n".join(offenders)


def test_checker_catches_an_oversized_module(tmp_path: Path) -> None:
    (tmp_path / "quorum" / "rpc").mkdir(parents=True)
    (tmp_path / "quorum" / "big.py").write_text("x = 1\n" * (MODULE_LINES_MAX + 1))
    (tmp_path / "quorum" / "small.py").write_text("x = 1\n" * MODULE_LINES_MAX)
    (tmp_path / "quorum" / "rpc" / "gen_pb2.py").write_text("x = 1\n" * 5_000)
    assert oversized_modules(python_files(tmp_path, "quorum"), tmp_path) == [
        "quorum/big.py: 1001 lines"
    ]


def test_a_node_loads_no_x509_library() -> None:
    """A running node leaves certificates to the TLS stack (gRPC's auth context, Python's ssl):
    loading cryptography's X.509 code costs every node about 11 MiB of resident memory. Only
    the tools that issue certificates (`metaquorum dev certs`) load it."""
    code = (
        "import sys, quorum.server.controller, broker.server, broker.kafka.server; "
        "print(sorted(m for m in sys.modules if m.split('.')[0] == 'cryptography'))"
    )
    loaded = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.strip()
    assert loaded == "[]", loaded
