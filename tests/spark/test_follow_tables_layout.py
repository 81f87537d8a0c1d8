"""The file layout of ``replay --follow``'s tables, without Spark
(``quorum.analytics.follow_tables``): what a restart removes after a crash, which versions a
swap keeps, what it refuses to overwrite. The tables themselves, end to end:
tests/spark/test_follow_tables.py."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

from quorum.analytics.follow_tables import (
    CURRENT,
    FRESHNESS,
    TABLE_NAMES,
    TABLES,
    OutError,
    TableRefresher,
    current_freshness,
    prepare_out,
)


def version(out: Path, name: str, up_to: int) -> None:
    root = out / TABLES / name
    for table in TABLE_NAMES:
        (root / table).mkdir(parents=True)
    fresh = {"up_to_offset": up_to, "records": up_to + 1, "refreshed_at": "t", "seconds": 1.0}
    (root / FRESHNESS).write_text(json.dumps({**fresh, "version": name}))


def test_a_restart_keeps_current_and_removes_what_a_crash_left(tmp_path: Path) -> None:
    prepare_out(tmp_path)
    assert all(os.readlink(tmp_path / t) == f"{CURRENT}/{t}" for t in TABLE_NAMES)
    assert current_freshness(tmp_path) is None
    assert not (tmp_path / "topic_lifecycle").exists()  # a dangling link: no table yet
    version(tmp_path, "00000000000000000009-1", 9)
    (tmp_path / CURRENT).symlink_to(f"{TABLES}/00000000000000000009-1")
    version(tmp_path, "00000000000000000020-2", 20)  # a refresh cut short before its swap
    (tmp_path / ".current.tmp").symlink_to(f"{TABLES}/00000000000000000020-2")
    prepare_out(tmp_path)  # the next start
    assert sorted(p.name for p in (tmp_path / TABLES).iterdir()) == ["00000000000000000009-1"]
    assert not (tmp_path / ".current.tmp").is_symlink()
    fresh = current_freshness(tmp_path)
    assert fresh is not None and fresh.up_to_offset == 9
    assert (tmp_path / "name_reuse").is_dir()  # through current


def test_a_swap_keeps_the_new_version_and_the_one_before(tmp_path: Path) -> None:
    prepare_out(tmp_path)
    refresher = TableRefresher(
        None, tmp_path, tmp_path, lambda: None, interval_s=1, stdout=sys.stdout
    )
    names = [f"{offset:020d}-{offset}" for offset in (3, 7, 11)]
    for offset, name in zip((3, 7, 11), names, strict=True):
        version(tmp_path, name, offset)
        refresher._swap(name)
        assert os.readlink(tmp_path / CURRENT) == f"{TABLES}/{name}"
    assert sorted(p.name for p in (tmp_path / TABLES).iterdir()) == names[1:]
    fresh = current_freshness(tmp_path)
    assert fresh is not None and fresh.up_to_offset == 11


@pytest.mark.parametrize("taken", ["state_as_of", "report.md"])
def test_a_name_taken_by_something_else_is_refused(tmp_path: Path, taken: str) -> None:
    (tmp_path / taken).write_text("a one-off replay's")
    with pytest.raises(OutError, match=f"{taken} exists and is not --follow's link"):
        prepare_out(tmp_path)
    assert (tmp_path / taken).read_text() == "a one-off replay's"
