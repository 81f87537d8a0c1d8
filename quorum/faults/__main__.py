"""Soak mode: ``python -m quorum.faults`` runs the fault scenarios over and over with new seeds.

    FAULT_SEEDS=N      how many runs at most (default: unbounded, until FAULT_MINUTES)
    FAULT_MINUTES=M    stop starting new runs after M minutes (default 30)
    FAULT_SEED=S       the first seed (default: from the clock, printed); run k uses S + k
    FAULT_SCENARIO=X   only scenario X (a name from docs/faults.md); default: all, in turn

Each run prints one line of figures; a failure prints its seed, fault timeline and problems and
keeps its directory (node logs, history.jsonl). Exits 1 if any run failed.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

from quorum.faults.runner import Report, run_scenario
from quorum.faults.scenarios import BY_NAME, SCENARIOS


def table(reports: list[Report]) -> str:
    """Per scenario: runs, failures, operations, writes lost, violations, the worst fault to
    serving leader and heal to caught up, elections (a Markdown table)."""
    lines = [
        "| scenario | runs | failed | ops completed | acked writes | lost | violations | "
        "fault -> leader max | heal -> caught up max | elections |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    names = sorted({r.scenario for r in reports}, key=[r.scenario for r in reports].index)
    for name in names:
        runs = [r for r in reports if r.scenario == name]

        def worst(values: list[float | None]) -> str:
            present = [v for v in values if v is not None]
            return f"{max(present):.2f} s" if present else "-"

        lines.append(
            f"| {name} | {len(runs)} | {sum(not r.ok for r in runs)} | "
            f"{sum(r.operations for r in runs)} | {sum(r.acknowledged_writes for r in runs)} | "
            f"{sum(r.lost_writes for r in runs)} | {sum(r.violations for r in runs)} | "
            f"{worst([r.fault_to_leader_s for r in runs])} | "
            f"{worst([r.heal_to_caught_up_s for r in runs])} | {sum(r.elections for r in runs)} |"
        )
    return "\n".join(lines)


def main() -> int:
    seeds = int(os.environ.get("FAULT_SEEDS", "0")) or None
    minutes = float(os.environ.get("FAULT_MINUTES", "30"))
    first_seed = int(os.environ.get("FAULT_SEED", str(int(time.time()) % 100_000)))
    only = os.environ.get("FAULT_SCENARIO")
    if only is not None and only not in BY_NAME:
        print(f"unknown FAULT_SCENARIO {only!r}; one of: {', '.join(BY_NAME)}", file=sys.stderr)
        return 2
    scenarios = [BY_NAME[only]] if only else list(SCENARIOS)
    print(f"soak: first seed {first_seed}, {minutes} min, {seeds or 'unbounded'} runs")
    deadline = time.monotonic() + minutes * 60
    reports: list[Report] = []
    failed: list[Report] = []
    run = 0
    while time.monotonic() < deadline and (seeds is None or run < seeds):
        scenario = scenarios[run % len(scenarios)]
        seed = first_seed + run
        root = Path(tempfile.mkdtemp(prefix=f"fault-{scenario.name}-{seed}-"))
        try:
            report = run_scenario(scenario, seed, root)
        except Exception as exc:  # a run that could not even be checked is a failure too
            report = Report(scenario.name, seed, problems=[f"run failed: {exc!r}"])
        reports.append(report)
        print(report.summary(), flush=True)
        if report.ok:
            shutil.rmtree(root, ignore_errors=True)
        else:
            failed.append(report)
            print(report.failure_text(), flush=True)
            print(f"kept: {root}", flush=True)
        run += 1
    print(table(reports))
    ops = sum(r.operations for r in reports)
    lost = sum(r.lost_writes for r in reports)
    violations = sum(r.violations for r in reports)
    elections = sum(r.elections for r in reports)
    print(
        f"soak: {len(reports)} runs, {len(failed)} failed; {ops} operations completed, "
        f"{lost} acknowledged writes lost, {violations} linearizability violations, "
        f"{elections} elections"
    )
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
