"""``metaquorum spark pack-env``: the Python environment a Spark cluster's executors need, as
one archive to ship with the job (PySpark's "Python Package Management", the venv-pack way).

The executors run the data source's ``read()``: they import ``quorum`` and, through it,
msgpack, msgspec, crc32c and structlog, plus pyarrow and numpy (the Arrow batches). They do
not need PySpark itself (each worker puts its own ``pyspark.zip`` on the path) nor the driver's
analytics libraries (pandas, matplotlib). This packs exactly that: a virtual environment
layout (``bin/python``, ``pyvenv.cfg``, ``lib/pythonX.Y/site-packages``) holding the
installed files of those distributions and of their requirements, taken from the running
interpreter's environment, and this project's ``quorum`` package. Submitting::

    metaquorum spark pack-env --out metaquorum-env.tar.gz
    PYSPARK_DRIVER_PYTHON=$(which python) spark-submit --master spark://host:7077 \\
        --archives metaquorum-env.tar.gz#env \\
        --conf spark.pyspark.python=./env/bin/python \\
        quorum/analytics/replay.py --log-dir /shared/controller-1 --out /shared/replay-out

Spark unpacks the archive into each executor's working directory as ``env/``. As with
venv-pack, the environment is relocatable but not self-contained: ``bin/python`` is a copy of
the base interpreter this one was created from (``venv --copies``; a symlink to it would be
refused by Spark's unpacking, which keeps every entry inside the archive), which loads its
standard library and ``libpython`` from that installation, so the same Python at the same path
must exist on every worker; compiled extensions are those of this machine's platform.

The archive is a ``.tar.gz`` (or ``.tgz``), never a plain ``.tar``: Spark unpacks a ``.tar``
with a Java implementation that drops file permissions (SPARK-38632), so ``bin/python`` would
not be executable; a ``.tar.gz`` goes through ``tar`` and keeps them. Compression level 1: most
of the size reduction for a fraction of the time.

In client mode (the driver on the submitting machine) Spark also starts the driver's Python
workers, which plan the Python data source, with ``spark.pyspark.python``: ``./env`` must
exist in the directory spark-submit runs from too, e.g. a symlink to the driver's own virtual
environment (``ln -s "$VIRTUAL_ENV" env``).
"""

from __future__ import annotations

import os
import re
import sys
import tarfile
import tempfile
from collections.abc import Iterable, Iterator
from importlib.metadata import Distribution, PackageNotFoundError, distribution
from pathlib import Path
from typing import Final

__all__ = ["EXECUTOR_DISTRIBUTIONS", "PackError", "executor_distributions", "pack_env"]

# What the executors import (quorum.analytics.source, then pyarrow and numpy inside read());
# their requirements are added. Not pyspark / py4j: each worker ships its own.
EXECUTOR_DISTRIBUTIONS: Final = ("msgpack", "msgspec", "crc32c", "structlog", "pyarrow", "numpy")
_WORKER_PROVIDED: Final = frozenset({"pyspark", "py4j"})
# The project's packages the executors import (by module path inside site-packages).
_PROJECT_PACKAGES: Final = ("quorum",)


class PackError(Exception):
    """The environment cannot be packed; the message says what is missing."""


def _canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _requirement_name(requirement: str) -> str | None:
    """The distribution a ``Requires-Dist`` line names when it applies without extras."""
    if "extra ==" in requirement.replace('"', "").replace("'", ""):
        return None
    match = re.match(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)", requirement)
    return match.group(1) if match else None


def executor_distributions(names: Iterable[str] = EXECUTOR_DISTRIBUTIONS) -> list[Distribution]:
    """``names`` and everything they require (no extras), as installed here."""
    found: dict[str, Distribution] = {}
    todo = list(names)
    while todo:
        name = todo.pop()
        key = _canonical(name)
        if key in found or key in _WORKER_PROVIDED:
            continue
        try:
            dist = distribution(name)
        except PackageNotFoundError:
            raise PackError(
                f"{name} is not installed in this environment ({sys.prefix}); the executors "
                "need it: pip install 'metaquorum[analytics]'"
            ) from None
        found[key] = dist
        todo.extend(n for r in dist.requires or () if (n := _requirement_name(r)) is not None)
    return [found[key] for key in sorted(found)]


def _distribution_files(dist: Distribution) -> Iterator[tuple[Path, str]]:
    """(file on disk, path inside site-packages) of every file a distribution installed into
    site-packages (scripts and data outside it are left out)."""
    for file in dist.files or ():
        relative = Path(str(file))
        if (relative.parts and relative.parts[0] == "..") or "__pycache__" in relative.parts:
            continue
        source = Path(str(dist.locate_file(file)))
        if source.is_file():
            yield source, relative.as_posix()


def _project_files() -> Iterator[tuple[Path, str]]:
    """The ``quorum`` package's sources, wherever it is imported from (an editable checkout or
    an installed wheel)."""
    root = Path(__file__).resolve().parents[2]
    for package in _PROJECT_PACKAGES:
        for directory, dirs, files in os.walk(root / package):
            dirs[:] = [d for d in dirs if d != "__pycache__"]
            for name in files:
                if name.endswith((".py", ".pyi", ".typed")):
                    source = Path(directory) / name
                    yield source, source.relative_to(root).as_posix()


def pack_env(out: str | os.PathLike[str]) -> Path:
    """Write the executors' environment to ``out`` (``.tar.gz`` or ``.tgz``); returns the path.
    Raises ``PackError``."""
    path = Path(out)
    if not path.name.endswith((".tar.gz", ".tgz")):
        raise PackError(
            f"{out}: give a file name ending in .tar.gz or .tgz (Spark unpacks a plain .tar "
            "without file permissions, SPARK-38632, so bin/python would not run)"
        )
    base = Path(getattr(sys, "_base_executable", sys.executable))
    version = f"python{sys.version_info.major}.{sys.version_info.minor}"
    site = f"lib/{version}/site-packages"
    files = [
        *(item for dist in executor_distributions() for item in _distribution_files(dist)),
        *_project_files(),
    ]
    path.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as scratch:
        cfg = Path(scratch) / "pyvenv.cfg"
        cfg.write_text(
            f"home = {base.parent}\ninclude-system-site-packages = false\n"
            f"version = {sys.version_info.major}.{sys.version_info.minor}."
            f"{sys.version_info.micro}\n"
        )
        partial = path.with_name(path.name + ".partial")
        with tarfile.open(partial, "w:gz", compresslevel=1) as tar:
            tar.add(cfg, "pyvenv.cfg")
            # A copy of the interpreter, as `python -m venv --copies` makes: Spark refuses to
            # unpack a symlink that points outside the archive.
            tar.add(base.resolve(), "bin/python")
            for link in ("python3", version):
                info = tarfile.TarInfo(f"bin/{link}")
                info.type = tarfile.SYMTYPE
                info.linkname = "python"
                info.mode = 0o777
                tar.addfile(info)
            for source, relative in files:
                tar.add(source, f"{site}/{relative}", recursive=False)
        partial.replace(path)
    return path
