"""Fixtures of the Spark tests beyond the shared local session (tests/conftest.py)."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def spark_env_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """metaquorum's cache directory for the test session (``METAQUORUM_CACHE``): the
    executors' environment is packed into it once (about 4 s) and reused by every test of the
    session that ships it, in process or through the CLI."""
    return tmp_path_factory.mktemp("metaquorum-cache")
