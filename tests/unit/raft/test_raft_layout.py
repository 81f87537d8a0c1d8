"""The Raft core stays small by concern (issue 29, docs/architecture.md#the-raft-protocol):
``quorum/raft/node.py`` keeps the driver API, the dispatch and the transitions in at most 900
lines, every other module of the core at most 700."""

from __future__ import annotations

from pathlib import Path

RAFT = Path(__file__).resolve().parents[3] / "quorum" / "raft"
NODE_LINES_MAX = 900
MODULE_LINES_MAX = 700


def oversized(directory: Path) -> list[str]:
    """The modules of ``directory`` longer than their bound, with their length."""
    found: list[str] = []
    for path in sorted(directory.glob("*.py")):
        lines = len(path.read_text().splitlines())
        bound = NODE_LINES_MAX if path.name == "node.py" else MODULE_LINES_MAX
        if lines > bound:
            found.append(f"{path.name}: {lines} lines (at most {bound})")
    return found


def test_raft_modules_stay_small() -> None:
    assert not oversized(RAFT)


def test_checker_catches_an_oversized_module(tmp_path: Path) -> None:
    (tmp_path / "node.py").write_text("x = 1\n" * NODE_LINES_MAX)
    (tmp_path / "voting.py").write_text("x = 1\n" * (MODULE_LINES_MAX + 1))
    assert oversized(tmp_path) == [f"voting.py: {MODULE_LINES_MAX + 1} lines (at most 700)"]
