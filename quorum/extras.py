"""Optional extras of the ``metaquorum`` distribution, checked before a command needs them.

``metaquorum replay`` (and the Spark step of ``dev up``) need the ``analytics`` extra: PySpark
with pyarrow and pandas, matplotlib for the report's plots, msgspec for the data source's
decoder. Without it the command says in one line what to install, instead of failing with a
``ModuleNotFoundError`` traceback from deep inside an import.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Mapping, Sequence
from typing import Final

__all__ = ["EXTRAS", "MissingExtraError", "missing_modules", "require_extra"]

# extra -> the top-level modules it installs that the code imports.
EXTRAS: Final[Mapping[str, Sequence[str]]] = {
    "analytics": ("pyspark", "pyarrow", "pandas", "matplotlib", "msgspec"),
}


class MissingExtraError(Exception):
    """An optional extra is not installed; the message says what to install."""


def missing_modules(extra: str) -> list[str]:
    """The modules of ``extra`` that cannot be imported here (found without importing them)."""
    return [name for name in EXTRAS[extra] if importlib.util.find_spec(name) is None]


def require_extra(extra: str, what: str) -> None:
    """Raise ``MissingExtraError`` when ``what`` (e.g. ``metaquorum replay``) cannot run
    because modules of ``extra`` are missing."""
    missing = missing_modules(extra)
    if missing:
        raise MissingExtraError(
            f"{what} needs the {extra!r} extra, which is not installed (missing: "
            f"{', '.join(missing)}): pip install 'metaquorum[{extra}]'"
        )
