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
