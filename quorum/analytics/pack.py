"""``metaquorum spark pack-env``: the Python environment a Spark cluster's executors need, as
one archive to ship with the job (PySpark's "Python Package Management", the venv-pack way).
``metaquorum replay --master URL`` ships it by itself (``cached_env``: packed once per
content, kept in the user's cache); ``pack-env`` writes it for ``spark-submit``.

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
of the size reduction for a fraction of the time. Written to a temporary name in the target
directory and renamed: a reader never sees half an archive, and two writers of the same
archive do not mix their bytes.

In client mode (the driver on the submitting machine) Spark also starts the driver's Python
workers, which plan the Python data source, with ``spark.pyspark.python``: ``./env`` must
exist in the directory spark-submit runs from too, e.g. a symlink to the driver's own virtual
environment (``ln -s "$VIRTUAL_ENV" env``). ``driver_dir`` makes such a directory in the cache,
which ``replay`` starts its JVM in.

The cache. ``cached_env`` names the archive by a hash of what goes into it: the pack format,
the interpreter (path, version, machine), the name and installed version of every packed
distribution (the lock the executors run on: what is installed, whichever constraints file
or resolver installed it) and the bytes of every project file packed. The same
installation reuses the archive; editing a source of ``quorum`` or upgrading a dependency
packs a new one. Its directory is ``$METAQUORUM_CACHE/spark-env`` (default
``${XDG_CACHE_HOME:-~/.cache}/metaquorum/spark-env``); the three archives used last are kept,
older ones are deleted once unused for an hour (not at once: a running application may still
serve one to an executor it starts late).
"""

from __future__ import annotations

import hashlib
import io
import os
import platform
import re
import sys
import tarfile
import tempfile
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from importlib.metadata import Distribution, PackageNotFoundError, distribution
from pathlib import Path
from typing import Final

__all__ = [
    "CACHE_ENV",
    "EXECUTOR_DISTRIBUTIONS",
    "CachedEnv",
    "PackContents",
    "PackError",
    "cache_root",
    "cached_env",
    "driver_dir",
    "env_key",
    "evict",
    "executor_distributions",
    "pack_contents",
    "pack_env",
    "write_archive",
]

# What the executors import (quorum.analytics.source, then pyarrow and numpy inside read());
# their requirements are added. Not pyspark / py4j: each worker ships its own.
EXECUTOR_DISTRIBUTIONS: Final = ("msgpack", "msgspec", "crc32c", "structlog", "pyarrow", "numpy")
_WORKER_PROVIDED: Final = frozenset({"pyspark", "py4j"})
# The project's packages the executors import (by module path inside site-packages).
_PROJECT_PACKAGES: Final = ("quorum",)
# Part of the cache key: bump it when the archive's layout changes.
PACK_FORMAT: Final = 1
# The environment variable naming metaquorum's cache directory.
CACHE_ENV: Final = "METAQUORUM_CACHE"
# Archives kept in the cache whatever their age (the ones used last), and how long an older
# one must have been unused before it is deleted.
_KEEP_ARCHIVES: Final = 3
_EVICT_UNUSED_S: Final = 3600


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
    an installed wheel), in a stable order."""
    root = Path(__file__).resolve().parents[2]
    for package in _PROJECT_PACKAGES:
        for directory, dirs, files in os.walk(root / package):
            dirs[:] = sorted(d for d in dirs if d != "__pycache__")
            for name in sorted(files):
                if name.endswith((".py", ".pyi", ".typed")):
                    source = Path(directory) / name
                    yield source, source.relative_to(root).as_posix()


@dataclass(frozen=True)
class PackContents:
    """What an archive holds: the base interpreter (copied as ``bin/python``, its directory the
    ``home`` of ``pyvenv.cfg``, as venv writes it), the distributions and their files and the
    project's files (on disk, path inside site-packages)."""

    interpreter: Path
    distributions: list[Distribution]
    dist_files: list[tuple[Path, str]]
    project_files: list[tuple[Path, str]]


def pack_contents() -> PackContents:
    """What this installation's archive holds. Raises ``PackError``."""
    dists = executor_distributions()
    return PackContents(
        interpreter=Path(getattr(sys, "_base_executable", sys.executable)),
        distributions=dists,
        dist_files=[item for dist in dists for item in _distribution_files(dist)],
        project_files=list(_project_files()),
    )


def env_key(contents: PackContents | None = None) -> str:
    """The cache key of the archive this installation packs (see the module docstring)."""
    contents = contents or pack_contents()
    digest = hashlib.sha256()

    def line(text: str) -> None:
        digest.update(text.encode() + b"\n")

    line(f"format {PACK_FORMAT}")
    line(f"python {contents.interpreter} {sys.version} {platform.machine()}")
    for dist in contents.distributions:
        line(f"dist {_canonical(dist.metadata['Name'])} {dist.version}")
    for source, relative in contents.project_files:
        data = source.read_bytes()
        line(f"file {relative} {len(data)}")
        digest.update(data)
    return digest.hexdigest()[:32]


def write_archive(contents: PackContents, path: Path) -> None:
    """The archive of ``contents`` at ``path``, written under a temporary name beside it and
    renamed (nothing is left behind if writing fails)."""
    version = f"python{sys.version_info.major}.{sys.version_info.minor}"
    site = f"lib/{version}/site-packages"
    path.parent.mkdir(parents=True, exist_ok=True)
    handle, partial_name = tempfile.mkstemp(
        prefix=f".{path.name}.", suffix=".partial", dir=path.parent
    )
    os.close(handle)
    partial = Path(partial_name)
    try:
        os.chmod(partial, 0o644)
        with tarfile.open(partial, "w:gz", compresslevel=1) as tar:
            cfg = (
                f"home = {contents.interpreter.parent}\ninclude-system-site-packages = false\n"
                f"version = {sys.version_info.major}.{sys.version_info.minor}."
                f"{sys.version_info.micro}\n"
            ).encode()
            info = tarfile.TarInfo("pyvenv.cfg")
            info.size, info.mode, info.mtime = len(cfg), 0o644, int(time.time())
            tar.addfile(info, io.BytesIO(cfg))
            # A copy of the interpreter, as `python -m venv --copies` makes: Spark refuses to
            # unpack a symlink that points outside the archive.
            tar.add(contents.interpreter.resolve(), "bin/python")
            for link in ("python3", version):
                info = tarfile.TarInfo(f"bin/{link}")
                info.type = tarfile.SYMTYPE
                info.linkname = "python"
                info.mode = 0o777
                tar.addfile(info)
            for source, relative in [*contents.dist_files, *contents.project_files]:
                tar.add(source, f"{site}/{relative}", recursive=False)
        partial.replace(path)
    except BaseException:
        partial.unlink(missing_ok=True)
        raise


def pack_env(out: str | os.PathLike[str]) -> Path:
    """Write the executors' environment to ``out`` (``.tar.gz`` or ``.tgz``); returns the path.
    Raises ``PackError``."""
    path = Path(out)
    if not path.name.endswith((".tar.gz", ".tgz")):
        raise PackError(
            f"{out}: give a file name ending in .tar.gz or .tgz (Spark unpacks a plain .tar "
            "without file permissions, SPARK-38632, so bin/python would not run)"
        )
    write_archive(pack_contents(), path)
    return path


def cache_root() -> Path:
    """metaquorum's cache directory: ``$METAQUORUM_CACHE``, else
    ``${XDG_CACHE_HOME:-~/.cache}/metaquorum``."""
    if configured := os.environ.get(CACHE_ENV):
        return Path(configured).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "metaquorum"


@dataclass(frozen=True)
class CachedEnv:
    """The executors' environment in the cache: ``path``, and whether it was already there."""

    path: Path
    reused: bool


def cached_env(cache: Path | None = None) -> CachedEnv:
    """The executors' environment of this installation, packed into ``cache/spark-env/`` (default
    ``cache_root()``) unless an archive with the same key is already there. Raises
    ``PackError``."""
    directory = (cache or cache_root()) / "spark-env"
    contents = pack_contents()
    path = directory / f"{env_key(contents)}.tar.gz"
    if path.is_file():
        os.utime(path)  # used now: the eviction keeps the archives used last
        return CachedEnv(path, reused=True)
    try:
        write_archive(contents, path)
    except OSError as exc:
        raise PackError(
            f"cannot write the executors' environment to {directory}: {exc}; set "
            f"{CACHE_ENV} to a writable directory"
        ) from exc
    evict(directory, keep=path)
    return CachedEnv(path, reused=False)


def evict(directory: Path, keep: Path) -> None:
    """Delete the archives (and abandoned partial ones) beyond the ``_KEEP_ARCHIVES`` used last
    that nothing has used for ``_EVICT_UNUSED_S``."""
    now = time.time()
    entries: list[tuple[float, Path]] = []
    for entry in directory.iterdir():
        try:
            entries.append((entry.stat().st_mtime, entry))
        except FileNotFoundError:
            continue  # another process evicted or renamed it meanwhile
    archives = sorted(
        ((mtime, entry) for mtime, entry in entries if entry.name.endswith(".tar.gz")),
        reverse=True,
    )
    partials = [(mtime, entry) for mtime, entry in entries if entry.name.endswith(".partial")]
    for mtime, entry in [*archives[_KEEP_ARCHIVES:], *partials]:
        if entry != keep and now - mtime > _EVICT_UNUSED_S:
            entry.unlink(missing_ok=True)


def driver_dir(cache: Path | None = None) -> Path:
    """A directory whose ``env`` is this interpreter's environment (``cache/driver/<hash of
    sys.prefix>/env``): the driver's JVM runs in it, so that ``./env/bin/python``, the
    executors' ``spark.pyspark.python`` for the shipped archive, is this interpreter for the
    Python workers the driver starts itself (in client mode they plan the data source). A
    virtual environment is linked whole (its ``pyvenv.cfg`` makes it one); another interpreter
    gets ``env/bin/python`` linked to it."""
    prefix = Path(sys.prefix)
    digest = hashlib.sha256(f"{prefix}\n{sys.executable}".encode()).hexdigest()[:16]
    directory = (cache or cache_root()) / "driver" / digest
    env = directory / "env"
    if sys.prefix != sys.base_prefix and (prefix / "bin" / "python").exists():
        link, target = env, prefix
    else:
        link, target = env / "bin" / "python", Path(sys.executable)
    if link.is_symlink() and Path(os.readlink(link)) == target:
        return directory
    try:
        link.parent.mkdir(parents=True, exist_ok=True)
        temporary = link.with_name(f".{link.name}.{os.getpid()}")
        temporary.unlink(missing_ok=True)
        temporary.symlink_to(target)
        temporary.replace(link)  # atomic: a concurrent replay sees the old link or the new one
    except OSError as exc:
        raise PackError(
            f"cannot make the driver's directory {directory}: {exc}; set {CACHE_ENV} to a "
            "writable directory"
        ) from exc
    return directory
