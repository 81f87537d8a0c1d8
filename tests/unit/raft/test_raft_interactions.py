"""Scripted interactions with real ``RaftNode``s (``tests/unit/raft/testdata/*.txt``, run by
``tests/unit/raft/interaction.py``), in the style of etcd's datadriven ``testdata/`` scripts: each
case's output must be what the script says. ``REWRITE_TESTDATA=1`` writes the outputs anew."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.unit.raft.interaction import Interaction

TESTDATA = Path(__file__).parent / "testdata"


def parse(text: str) -> list[tuple[list[str], str, str]]:
    """The cases of a script: (comment and blank lines before it, command, expected output)."""
    cases: list[tuple[list[str], str, str]] = []
    lines = text.splitlines()
    before: list[str] = []
    index = 0
    while index < len(lines):
        line = lines[index]
        if not line.strip() or line.startswith("#"):
            before.append(line)
            index += 1
            continue
        command = line
        assert lines[index + 1] == "----", f"line {index + 2}: '----' expected after {command!r}"
        index += 2
        output: list[str] = []
        while index < len(lines) and lines[index].strip():
            output.append(lines[index])
            index += 1
        cases.append((before, command, "\n".join(output)))
        before = []
    return cases


def render(cases: list[tuple[list[str], str, str]]) -> str:
    parts: list[str] = []
    for before, command, output in cases:
        parts.extend(before)
        parts.extend([command, "----", output])
    return "\n".join(parts) + "\n"


def scripts() -> list[Path]:
    return sorted(TESTDATA.glob("*.txt"))


def test_there_are_scripts() -> None:
    assert len(scripts()) >= 4


@pytest.mark.parametrize("script", scripts(), ids=lambda p: p.stem)
def test_script(script: Path) -> None:
    cases = parse(script.read_text())
    interaction = Interaction()
    actual = [(before, command, interaction.run(command)) for before, command, _ in cases]
    if os.environ.get("REWRITE_TESTDATA"):
        script.write_text(render(actual))
        return
    for (_, command, expected), (_, _, got) in zip(cases, actual, strict=True):
        assert got == expected, (
            f"{script.name}: {command!r}\n--- expected\n{expected}\n--- got\n{got}"
        )
