"""Java ``.properties`` text, as Kafka's tools and servers read it (``client.properties``,
``server.properties``). Pure: text in, entries out."""

from __future__ import annotations

import re

__all__ = ["parse_properties", "property_entries"]

_ENTRY_RE = re.compile(r"((?:\\.|[^\s=:\\])*)\s*[=:]?\s*(.*)", re.DOTALL)
_ESCAPES = {"t": "\t", "n": "\n", "r": "\r", "f": "\f"}


def property_entries(text: str) -> list[tuple[int, str, str]]:
    """Every ``(line number, key, value)`` in order, repeats kept: ``key=value``,
    ``key: value`` or ``key value``; ``#`` and ``!`` comments; a trailing backslash continues
    the line; ``\\t \\n \\\\`` escapes. The line number is where the entry starts (1-based)."""
    entries: list[tuple[int, str, str]] = []
    logical: list[str] = []
    start = 0
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.lstrip()
        if not logical:
            if not line or line[0] in "#!":
                continue
            start = number
        trailing = len(line) - len(line.rstrip("\\"))
        if trailing % 2 == 1:
            logical.append(line[:-1])
            continue
        logical.append(line)
        entry = "".join(logical)
        logical = []
        match = _ENTRY_RE.match(entry)
        assert match is not None
        key, value = _unescape(match.group(1)), _unescape(match.group(2))
        if key:
            entries.append((start, key, value))
    return entries


def parse_properties(text: str) -> dict[str, str]:
    """The entries of ``property_entries`` as a dict; a repeated key keeps its last value, as
    ``java.util.Properties`` does."""
    return {key: value for _, key, value in property_entries(text)}


def _unescape(text: str) -> str:
    return re.sub(r"\\(.)", lambda m: _ESCAPES.get(m.group(1), m.group(1)), text)
