"""The test command's own machinery (docs/testing.md#layout): ``scripts/test`` runs the process
layer with ``--dist loadgroup`` so that the tests sharing a module's cluster run on one worker
and the cluster starts once. pytest 9.2 moved a test's id out of the attribute pytest-xdist
3.8 rewrites to name a test's group, and the grouping silently stopped: every module's cluster
started once per worker (and groups tool's Kafka cluster twice, 35 s each). This checks it
end to end with the pinned versions: two grouped tests on two workers run on one of them."""

from __future__ import annotations

import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

GROUPED = textwrap.dedent(
    """
    import pytest

    @pytest.fixture(scope="module")
    def shared():
        return object()

    def test_first(shared):
        pass

    def test_second(shared):
        pass

    @pytest.mark.parametrize("n", range(4))
    def test_alone(n):
        pass
    """
)


@pytest.mark.timeout(120)
def test_tests_sharing_a_module_fixture_run_on_one_worker(tmp_path: Path) -> None:
    (tmp_path / "test_grouped.py").write_text(GROUPED)
    # The project's conftest gives the group (from the shared fixture), as in scripts/test.
    conftest = Path(__file__).resolve().parents[2] / "conftest.py"
    (tmp_path / "conftest.py").write_text(conftest.read_text())
    ran = subprocess.run(
        [sys.executable, "-m", "pytest", "-v", "-p", "no:cacheprovider", "-n", "2",
         "--dist", "loadgroup", "--no-loadscope-reorder", str(tmp_path / "test_grouped.py")],
        cwd=tmp_path, capture_output=True, text=True, timeout=110, check=False,
    )  # fmt: skip
    assert ran.returncode == 0, ran.stdout + ran.stderr
    workers = {
        match.group(2): match.group(1)
        for match in re.finditer(r"\[(gw\d)\].* PASSED \S*::(test_first|test_second)", ran.stdout)
    }
    assert set(workers) == {"test_first", "test_second"}, ran.stdout
    assert workers["test_first"] == workers["test_second"], ran.stdout
