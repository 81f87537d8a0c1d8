"""The fault scenarios on real processes (docs/faults.md), each a pass/fail with its seed.

Every scenario starts a fresh 3-controller cluster over mTLS with every node-to-controller link
through a fault proxy, runs clients while it injects its faults, undoes them, and checks the
whole client history (quorum/faults/runner.py). A failure prints the seed, the fault timeline
and the minimal sub-history that is not linearizable; ``FAULT_SEED=N`` replays one seed (README:
"Fault scenarios"). The negative controls switch on a deliberate bug and must be caught.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from quorum.faults.disks import fiu_available, tmpfs_available
from quorum.faults.runner import Report, Scenario, run_scenario
from quorum.faults.scenarios import NEGATIVE_CONTROLS, SCENARIOS

BASE_SEED = 1400
NEGATIVE_CONTROL_TRIES = 3


def _seed(index: int) -> int:
    return int(os.environ.get("FAULT_SEED", BASE_SEED + index))


def _record(report: Report) -> None:
    """Append the scenario's figures to $FAULT_REPORT (the closing note's table), if set."""
    path = os.environ.get("FAULT_REPORT")
    if path:
        with Path(path).open("a") as out:
            out.write(report.summary() + "\n")


def _marks(scenario: Scenario) -> list[pytest.MarkDecorator]:
    """``timing`` for a scenario that must see no election (``Scenario.no_election``): a fetch
    timeout missed on a machine busy with other tests would depose the leader, which no fault
    caused; scripts/test runs these one at a time (docs/testing.md#layout)."""
    return [pytest.mark.timing] if scenario.no_election else []


@pytest.mark.timeout(120)
@pytest.mark.parametrize(
    ("index", "scenario"),
    [
        pytest.param(index, scenario, id=scenario.name, marks=_marks(scenario))
        for index, scenario in enumerate(SCENARIOS)
    ],
)
def test_scenario(index: int, scenario: Scenario, tmp_path: Path) -> None:
    if scenario.fiu and (reason := fiu_available()):
        pytest.skip(reason)
    if scenario.disk and (reason := tmpfs_available()):
        pytest.skip(reason)
    report = run_scenario(scenario, _seed(index), tmp_path)
    _record(report)
    print(report.summary())
    assert report.ok, report.failure_text()
    assert report.lost_writes == 0 and report.violations == 0
    assert report.acknowledged_writes > 0, "the workload acknowledged no write"


@pytest.mark.timing  # whether a run exposes the bug depends on timing (below)
@pytest.mark.timeout(360)
@pytest.mark.parametrize(
    ("index", "control"),
    list(enumerate(NEGATIVE_CONTROLS)),
    ids=[s.name for s in NEGATIVE_CONTROLS],
)
def test_negative_control_is_caught(index: int, control: Scenario, tmp_path: Path) -> None:
    """A deliberate bug (a test-only switch in the controllers) must make the checks fail,
    naming the offending operations.

    Whether a run exposes the bug depends on timing: the cut-off node must answer some client
    while it is cut off, and a machine loaded by other jobs can leave it answering nobody in
    that window (seen once in CI: 0 writes lost). So each control gets up to
    ``NEGATIVE_CONTROL_TRIES`` runs with different seeds and must be caught in one of them."""
    passed: list[str] = []
    for attempt in range(NEGATIVE_CONTROL_TRIES):
        report = run_scenario(
            control, _seed(100 + index) + 1000 * attempt, tmp_path / f"try-{attempt}"
        )
        _record(report)
        print(report.failure_text())
        if not report.ok:
            assert report.violations or report.lost_writes, report.failure_text()
            return
        passed.append(report.summary())
    pytest.fail(
        f"{control.name}: the checker missed the deliberate bug in {len(passed)} runs:\n"
        + "\n".join(passed)
    )
