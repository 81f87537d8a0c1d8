"""The tables of configuration keys in docs/operating.md#configuration-keys, written from the
table of keys (``quorum/config_keys.py``) and Kafka's ignored keys (``quorum/config_kafka.py``)::

    python -m quorum.config_doc           # print the tables
    python -m quorum.config_doc --write   # replace them in docs/operating.md
    python -m quorum.config_doc --check   # exit 1 if docs/operating.md differs

``tests/unit/config/test_config_doc.py`` fails when the document and the table differ.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Final

from quorum.config_kafka import NOT_APPLICABLE_KEYS
from quorum.config_keys import SPECS, NodeConfig
from quorum.config_values import KeySpec, key_name

DOCUMENT: Final = Path(__file__).resolve().parent.parent / "docs/operating.md"
START: Final = (
    "<!-- Written by `python -m quorum.config_doc --write` from quorum/config_keys.py and "
    "quorum/config_kafka.py: edit those, not this table. -->"
)
END: Final = "<!-- End of the tables written by quorum.config_doc. -->"

# Units shown beside a large default, by the key's unit suffix (docs/conventions.md#units-last).
_MS_UNITS: Final = ((86_400_000, "d"), (3_600_000, "h"), (60_000, "min"))
_BYTE_UNITS: Final = ((1 << 30, "GiB"), (1 << 20, "MiB"))


def tables() -> str:
    """The Markdown of both tables, between the markers."""
    lines = [START, "", "| key | default | allowed | meaning |", "| --- | --- | --- | --- |"]
    for field in dataclasses.fields(NodeConfig):
        name = key_name(field.name)
        spec = SPECS.get(name)
        if spec is None:
            continue
        cells = (f"`{name}`", _default(name, spec, field), spec.kind.shape, spec.doc)
        lines.append("| " + " | ".join(_cell(text) for text in cells) + " |")
    lines += [
        "",
        "Kafka's keys that mean nothing here, accepted and ignored (a node names those it was "
        "given in one `config_keys_ignored` warning at start-up):",
        "",
        "| part of Kafka | keys |",
        "| --- | --- |",
    ]
    parts: dict[str, list[str]] = {}
    for name, part in NOT_APPLICABLE_KEYS.items():
        parts.setdefault(part, []).append(f"`{name}`")
    lines += [f"| {_cell(part)} | {', '.join(names)} |" for part, names in parts.items()]
    return "\n".join([*lines, "", END])


def _default(name: str, spec: KeySpec, field: dataclasses.Field[object]) -> str:
    if spec.required:
        return "required"
    if spec.default_doc:
        return spec.default_doc
    if field.default_factory is not dataclasses.MISSING:
        value: object = field.default_factory()
    else:
        value = field.default
    if value is None or value in ((), {}):
        return "none"
    if isinstance(value, bool):
        return f"`{str(value).lower()}`"
    if isinstance(value, int):
        return f"{value}{_in_units(name, value)}"
    if isinstance(value, tuple):
        return ", ".join(f"`{item}`" for item in value)
    return f"`{value}`"


def _in_units(name: str, value: int) -> str:
    units = _MS_UNITS if name.endswith(".ms") else _BYTE_UNITS if name.endswith(".bytes") else ()
    for size, unit in units:
        if value >= size and value % size == 0:
            return f" ({value // size} {unit})"
    return ""


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def with_tables(document: str) -> str:
    """``document`` with the text between the markers replaced by ``tables()``."""
    start, end = document.find(START), document.find(END)
    if start < 0 or end < start:
        raise ValueError(f"{DOCUMENT} has no markers {START!r} ... {END!r}")
    return document[:start] + tables() + document[end + len(END) :]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m quorum.config_doc", description=__doc__)
    action = parser.add_mutually_exclusive_group()
    action.add_argument("--write", action="store_true", help=f"replace the tables in {DOCUMENT}")
    action.add_argument("--check", action="store_true", help=f"exit 1 if {DOCUMENT} differs")
    args = parser.parse_args(argv)
    if not (args.write or args.check):
        print(tables())
        return 0
    current = DOCUMENT.read_text(encoding="utf-8")
    wanted = with_tables(current)
    if args.check:
        if current != wanted:
            print(f"{DOCUMENT} differs from the table of keys: run {parser.prog} --write")
            return 1
        return 0
    if current != wanted:
        DOCUMENT.write_text(wanted, encoding="utf-8")
        print(f"wrote {DOCUMENT}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
