"""Shared fixtures and the test layout (docs/testing.md#layout).

Tests are laid out by layer, and a test's markers come from its directory: ``tests/unit/<package>``
(no marker: in-process, no node started), ``tests/process`` (``process``: real node processes),
``tests/faults`` (``process``: fault scenarios on real processes), ``tests/sim`` (``sim``: the
deterministic simulator), ``tests/spark`` (``spark``: a local Spark session). So
``scripts/test -m "not process and not spark"`` is the quick run.

``timing`` (a mark a test gives itself): the test asserts a wall-clock bound (a failover, a
latency, a loop's turns, a timeout that must fire in time) that a machine busy with other tests
can miss; ``scripts/test`` runs these one at a time after the rest, which runs on both cores.

``spark``: one local Spark session for the whole test session (starting one costs ~5 s),
created only when a test asks for it (docs/conventions.md#tests)."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from hypothesis import settings

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


# The marker each layer's directory gives its tests.
LAYER_MARKERS = {"process": "process", "faults": "process", "sim": "sim", "spark": "spark"}
TESTS_DIR = Path(__file__).resolve().parent


# Fixtures shared by the tests of a module (a module's cluster) or more.
SHARED_SCOPES = frozenset({"class", "module", "package"})


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist reads the xdist_group marks (loadgroup)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        parts = item.path.resolve().relative_to(TESTS_DIR).parts
        marker = LAYER_MARKERS.get(parts[0]) if len(parts) > 1 else None
        if marker is not None and item.get_closest_marker(marker) is None:
            item.add_marker(marker)
        # With ``--dist loadgroup`` (scripts/test) the tests of a module that share a
        # module-scoped fixture go to one worker, so its cluster starts once, not once a worker.
        if _uses_shared_fixture(item) and item.get_closest_marker("xdist_group") is None:
            item.add_marker(
                pytest.mark.xdist_group(str(item.path.resolve().relative_to(TESTS_DIR)))
            )
    if os.environ.get("PYTEST_XDIST_WORKER"):
        # On two workers the longest tests start first, so that no worker is left running one
        # of them alone at the end: those that start Spark's JVMs (replay --follow's lives, a
        # standalone Spark cluster; a minute or more each). A stable sort: the rest keeps its
        # order, which ``--no-loadscope-reorder`` (scripts/test) keeps too.
        items.sort(key=lambda item: not _starts_spark(item))


def _starts_spark(item: pytest.Item) -> bool:
    return all(item.get_closest_marker(name) is not None for name in ("spark", "process"))


def _uses_shared_fixture(item: pytest.Item) -> bool:
    info = getattr(item, "_fixtureinfo", None)
    if info is None:
        return False
    return any(
        definitions[-1].scope in SHARED_SCOPES
        for definitions in info.name2fixturedefs.values()
        if definitions
    )


# CI runs every property test from a fixed seed, so a landing never depends on luck; a
# developer's run explores new examples (and prints any failing one with how to reproduce it).
settings.register_profile("ci", derandomize=True)
if os.environ.get("CI"):
    settings.load_profile("ci")


@pytest.fixture(scope="session")
def spark() -> Iterator[SparkSession]:
    # The Python workers must run this interpreter (the venv's, with pyarrow), and nothing may
    # bind beyond loopback.
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["SPARK_LOCAL_IP"] = "127.0.0.1"
    from pyspark.sql import SparkSession  # noqa: PLC0415 - only Spark tests pay for the import

    session = (
        SparkSession.builder.master("local[2]")
        .appName("metaquorum-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.default.parallelism", "2")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.driver.extraJavaOptions", "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    try:
        yield session
    finally:
        session.stop()
