"""structlog set-up shared by every process: console lines on a terminal, one JSON object per
line otherwise (``LOG_FORMAT=json|console`` overrides the guess, ``LOG_LEVEL`` sets the level)."""

from __future__ import annotations

import logging
import os
import sys

import structlog


def configure_logging(process: str) -> None:
    level_name = os.environ.get("LOG_LEVEL", "INFO").upper()
    level = logging.getLevelNamesMapping().get(level_name, logging.INFO)
    fmt = os.environ.get("LOG_FORMAT") or ("console" if sys.stderr.isatty() else "json")
    renderer: structlog.typing.Processor
    if fmt == "console":
        renderer = structlog.dev.ConsoleRenderer()
    else:
        renderer = structlog.processors.JSONRenderer()
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            structlog.processors.dict_tracebacks,
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(level),
        logger_factory=structlog.PrintLoggerFactory(file=sys.stderr),
        cache_logger_on_first_use=False,
    )
    structlog.contextvars.bind_contextvars(process=process)


class LogThrottle:
    """Which repeats of a warning to log, so a peer that floods a node with bad messages cannot
    flood its log: the first of each key in full, then every ``every``-th with the count so
    far. At most ``keys_max`` keys are remembered (all are forgotten past that: a flood of new
    keys logs again, boundedly)."""

    def __init__(self, every: int = 1_000, keys_max: int = 1_000) -> None:
        self.every = every
        self.keys_max = keys_max
        self._counts: dict[tuple[object, ...], int] = {}

    def count(self, key: tuple[object, ...]) -> int | None:
        """This occurrence's number if it should be logged, else None."""
        if key not in self._counts and len(self._counts) >= self.keys_max:
            self._counts.clear()
        count = self._counts[key] = self._counts.get(key, 0) + 1
        return count if count == 1 or count % self.every == 0 else None
