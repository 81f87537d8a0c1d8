"""What a driver does with one ``Ready``, in which order, and how it splits a large proposal.

Both drivers of the core follow this plan: the asyncio ``RaftDriver`` in production and the
simulator's node in tests, so the deterministic simulator crashes nodes at the very points the
production ordering creates (after the early sends, before the flush). The plan is pure data;
carrying it out is the driver's business::

    plan = plan_ready(node.poll(now_ms))
    send plan.send_before_flush
    persist plan.election_to_persist, truncate to plan.truncate_to,
        append plan.entries_to_append, fsync                       (when plan.needs_flush)
    send plan.send_after_flush
    apply plan.committed_batches
    node.advance(ready)

Everything a node says promises durability (a vote, an acknowledged epoch, a fetch offset)
except what a leader serves in Fetch responses: Raft lets the leader ship entries before its own
fsync, since its own log end counts toward the high watermark only once durable
(``RaftNode.advance``). Sending them first overlaps the leader's fsync with the followers'.
A Ready that also persists election state keeps everything for after the flush.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from quorum.metadata.batch import LogBatch
from quorum.metadata.records import Record
from quorum.raft.election import ElectionState
from quorum.raft.messages import Envelope, FetchResponse
from quorum.raft.node import Proposal, RaftNode, Ready

# ----- test-only switch that breaks the protocol (negative control) -----------------------------
# Lets every message leave before the flush: votes, BeginQuorumEpoch acknowledgements and a
# follower's fetch offsets then promise what a crash can still take back. It exists so the
# simulator can prove it runs this plan (tests/sim/test_sim.py); never set it in production.
UNSAFE_SEND_ALL_BEFORE_FLUSH = False


@dataclass(frozen=True, slots=True)
class ReadyPlan:
    """One ``Ready`` sorted into the driver's steps (see the module docstring)."""

    election_to_persist: ElectionState | None
    truncate_to: int | None
    entries_to_append: tuple[LogBatch, ...]
    send_before_flush: tuple[Envelope, ...]
    send_after_flush: tuple[Envelope, ...]
    committed_batches: tuple[LogBatch, ...]
    high_watermark: int

    @property
    def needs_flush(self) -> bool:
        """Whether anything must become durable: election state or a change of the log."""
        return (
            self.election_to_persist is not None
            or self.truncate_to is not None
            or bool(self.entries_to_append)
        )


def plan_ready(ready: Ready) -> ReadyPlan:
    """Sort ``ready`` into what to persist, what may be sent before the flush, what only after
    it, and what to apply."""
    messages = ready.messages_to_send
    early: tuple[Envelope, ...]
    later: tuple[Envelope, ...]
    if UNSAFE_SEND_ALL_BEFORE_FLUSH:
        early, later = messages, ()
    elif ready.election_to_persist is not None or not ready.needs_flush:
        early, later = (), messages
    else:
        early = tuple(e for e in messages if isinstance(e.message, FetchResponse))
        later = tuple(e for e in messages if not isinstance(e.message, FetchResponse))
    return ReadyPlan(
        election_to_persist=ready.election_to_persist,
        truncate_to=ready.truncate_to,
        entries_to_append=ready.entries_to_append,
        send_before_flush=early,
        send_after_flush=later,
        committed_batches=ready.committed_batches,
        high_watermark=ready.high_watermark,
    )


def propose_in_batches(node: RaftNode, records: Sequence[Record], now_ms: int) -> Proposal:
    """Propose ``records`` on the leader ``node``: one batch when they fit in one (atomic
    results always do); otherwise back-to-back batches of ``records_per_batch_max`` records,
    which only non-atomic results may produce. Returns where they will land, from the first
    record to the last. Raises what ``RaftNode.propose`` raises."""
    chunk = node.config.records_per_batch_max
    if len(records) <= chunk:
        return node.propose(records, now_ms)
    parts = [node.propose(records[i : i + chunk], now_ms) for i in range(0, len(records), chunk)]
    return Proposal(parts[-1].epoch, parts[0].base_offset, parts[-1].last_offset)
