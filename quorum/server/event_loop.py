"""The event loop a node runs on: uvloop's (libuv, in Cython) when it is installed, else
asyncio's own.

A node's loop turns over for every gRPC call and every future it resolves, and on the path of
one write it turns on three processes in a row (client call -> leader -> followers' Fetch ->
leader). uvloop makes each turn cheaper: sequential CreateTopics on a three-controller quorum
over mTLS, p50 3.08-3.26 ms with asyncio's loop and 2.76-2.95 ms with uvloop (three runs each,
alternated, scripts/bench/peers.py's client pattern); 64 in flight, 1,250-1,380 vs 1,330-1,400
CreateTopics/s. ``METAQUORUM_TEST_EVENT_LOOP=asyncio`` runs a node on asyncio's loop (to
compare, or to rule the loop out).
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Coroutine
from typing import Any, Final, TypeVar

T = TypeVar("T")

EVENT_LOOP_ENV: Final = "METAQUORUM_TEST_EVENT_LOOP"


def run(main: Coroutine[Any, Any, T]) -> T:
    """Run ``main`` to completion on the node's event loop (``asyncio.run`` semantics)."""
    if os.environ.get(EVENT_LOOP_ENV, "uvloop") != "asyncio":
        try:
            import uvloop  # noqa: PLC0415  (optional: asyncio's loop without it)
        except ImportError:
            pass
        else:
            return uvloop.run(main)
    return asyncio.run(main)
