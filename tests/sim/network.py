"""The simulated network: per-link faults chosen by scenario, randomness from the seed.

Named fault modes (docs/invariants.md F1-F7): ``drop_probability`` (random loss), ``duplicate_
probability`` (a message delivered twice), ``delay_ms`` ranges (reordering follows from random
delays), ``isolate(node)``, ``partition(a_side, b_side)`` (split), and ``cut(a, b)`` for single
links, which builds a bridge (A-B, B-C, not A-C) when only A-C is cut.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field


@dataclass
class NetworkFaults:
    drop_probability: float = 0.0
    duplicate_probability: float = 0.0
    delay_ms_min: int = 1
    delay_ms_max: int = 5
    # Directed links that deliver nothing: (source, destination).
    blocked: set[tuple[int, int]] = field(default_factory=set)
    # Directed links whose requests are refused at once, as by a port nobody listens on or the
    # fault proxy's reset mode: the sender gets ``RequestFailed(peer_gone=True)``.
    refused: set[tuple[int, int]] = field(default_factory=set)

    def heal(self) -> None:
        self.drop_probability = 0.0
        self.duplicate_probability = 0.0
        self.delay_ms_min, self.delay_ms_max = 1, 5
        self.blocked.clear()
        self.refused.clear()

    def cut(self, a: int, b: int) -> None:
        self.blocked.add((a, b))
        self.blocked.add((b, a))

    def isolate(self, node: int, everyone: set[int]) -> None:
        for other in everyone - {node}:
            self.cut(node, other)

    def partition(self, a_side: set[int], b_side: set[int]) -> None:
        for a in a_side:
            for b in b_side:
                self.cut(a, b)

    def describe(self) -> str:
        cuts = sorted({tuple(sorted(link)) for link in self.blocked})
        return (
            f"drop={self.drop_probability:.2f} dup={self.duplicate_probability:.2f} "
            f"delay={self.delay_ms_min}-{self.delay_ms_max}ms cuts={cuts} "
            f"refused={sorted(self.refused)}"
        )


class Network:
    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self.faults = NetworkFaults()
        self.sent = 0
        self.dropped = 0

    def deliveries(self, source: int, destination: int) -> list[int]:
        """Delays (ms) after which copies of one message arrive; empty if it is lost."""
        self.sent += 1
        faults = self.faults
        if (source, destination) in faults.blocked:
            self.dropped += 1
            return []
        if faults.drop_probability and self.rng.random() < faults.drop_probability:
            self.dropped += 1
            return []
        copies = 1
        if faults.duplicate_probability and self.rng.random() < faults.duplicate_probability:
            copies = 2
        return [self.rng.randint(faults.delay_ms_min, faults.delay_ms_max) for _ in range(copies)]
