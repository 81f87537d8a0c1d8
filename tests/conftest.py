"""Shared fixtures and the test layout (docs/testing.md#layout).

Tests are laid out by layer, and a test's markers come from its directory: ``tests/unit/<package>``
(no marker: in-process, no node started), ``tests/process`` (``process``: real node processes),
``tests/faults`` (``process``: fault scenarios on real processes), ``tests/sim`` (``sim``: the
deterministic simulator), ``tests/spark`` (``spark``: a local Spark session). So
``scripts/test -m "not process and not spark"`` is the quick run.

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


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        parts = item.path.resolve().relative_to(TESTS_DIR).parts
        marker = LAYER_MARKERS.get(parts[0]) if len(parts) > 1 else None
        if marker is not None and item.get_closest_marker(marker) is None:
            item.add_marker(marker)


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
