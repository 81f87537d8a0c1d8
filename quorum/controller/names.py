"""Topic name rules (Kafka's ``Topic.java``) and the names this project reserves.

- Legal: 1..249 characters of ``[a-zA-Z0-9._-]``, except ``.`` and ``..`` (``...`` is legal,
  as in Kafka). A leading ``-`` is legal too (Kafka allows it; the CLI takes ``--topic=-x``).
- System topics: ``__consumer_offsets``, ``__transaction_state``, ``__share_group_state``
  (Kafka's coordinators create them) and ``__cluster_metadata`` (the metadata log itself).
  They are always internal and can never be deleted (KIP-619's table).
- The ``__`` prefix is reserved for them (docs/architecture.md#the-controller): creating any other
  ``__``-prefixed name is refused. Kafka only warns; a user who wants an internal topic sets
  ``internal=true`` instead (KIP-619). ``__cluster_metadata`` can never be created at all: its
  ``TopicRecord`` is written by the controller itself (``metadata_topic_record``).
"""

from __future__ import annotations

import re
from typing import Final

from quorum.limits import TOPIC_NAME_CHARS_MAX
from quorum.metadata.image import CLUSTER_METADATA_TOPIC_NAME

__all__ = [
    "CLUSTER_METADATA_TOPIC_NAME",
    "CREATABLE_SYSTEM_TOPIC_NAMES",
    "RESERVED_PREFIX",
    "SYSTEM_TOPIC_NAMES",
    "quote",
    "topic_name_error",
]

CREATABLE_SYSTEM_TOPIC_NAMES: Final = frozenset(
    {"__consumer_offsets", "__transaction_state", "__share_group_state"}
)
SYSTEM_TOPIC_NAMES: Final = CREATABLE_SYSTEM_TOPIC_NAMES | {CLUSTER_METADATA_TOPIC_NAME}
RESERVED_PREFIX: Final = "__"

_LEGAL_RE: Final = re.compile(r"[a-zA-Z0-9._-]+")
_QUOTE_CHARS_MAX: Final = 80


def quote(text: object) -> str:
    """``repr`` of untrusted text, cut to a readable length (no log or message injection)."""
    shown = repr(text)
    if len(shown) > _QUOTE_CHARS_MAX:
        length = f"{len(text)} characters" if isinstance(text, str) else "long"
        return f"{shown[: _QUOTE_CHARS_MAX - 20]}...' ({length})"
    return shown


def legal_name_error(name: str) -> str | None:
    """Why ``name`` breaks Kafka's topic name rules, or None. Messages follow ``Topic.validate``."""
    if not name:
        return "Topic name is illegal, it can't be empty"
    if name in (".", ".."):
        return 'Topic name cannot be "." or ".."'
    if len(name) > TOPIC_NAME_CHARS_MAX:
        return (
            f"Topic name is illegal, it can't be longer than {TOPIC_NAME_CHARS_MAX} characters, "
            f"got {len(name)}: {quote(name)}"
        )
    if not _LEGAL_RE.fullmatch(name):
        bad = sorted({c for c in name if not _LEGAL_RE.fullmatch(c)})
        shown = ", ".join(quote(c) for c in bad[:5])
        return (
            f"Topic name {quote(name)} is illegal, it contains a character other than ASCII "
            f"alphanumerics, '.', '_' and '-' ({shown})"
        )
    return None


def topic_name_error(name: str) -> str | None:
    """Why a new topic may not be called ``name`` (illegal or reserved), or None."""
    illegal = legal_name_error(name)
    if illegal is not None:
        return illegal
    if name.startswith(RESERVED_PREFIX) and name not in CREATABLE_SYSTEM_TOPIC_NAMES:
        system = ", ".join(sorted(CREATABLE_SYSTEM_TOPIC_NAMES))
        return (
            f"Topic name {quote(name)} is reserved: names starting with '__' belong to system "
            f"topics ({system}). Choose another name; for a user-defined internal topic set "
            "the config internal=true (KIP-619)"
        )
    return None
