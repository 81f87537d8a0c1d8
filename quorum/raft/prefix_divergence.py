"""A committed prefix that diverges from the leader's log (issue 28;
docs/architecture.md#a-committed-prefix-that-diverges).

In Raft this never happens: what a follower or observer learned is committed is on a majority
of voters, and every later leader holds it. It does happen when the quorum lost an acknowledged
write: a voter's key used to claim in a Fetch what that voter never stored (the leader then
counted it toward the high watermark), or a voter's disk that lost what it had acknowledged (a
failed fsync that lied, a static voter's wiped directory). The new leader's answer then asks
this node to truncate below its high watermark, which it must never do (I7).

Before, the node dropped that answer and fetched again, forever (two brokers logged about 1,000
refused answers per 20 s and kept serving a topic the quorum no longer had). Now:

- an **observer** (a broker, which keeps no election state) discards its local metadata log,
  snapshots and image and fetches everything again from the leader: its snapshot first when it
  has one, else its log from the start; the broker swaps in the rebuilt image, once the leader
  committed an entry of its own epoch, and reconciles FULL as after a snapshot load;
- a **voter** (a controller) stops: its votes and its fetch offsets promised a log that the
  quorum no longer agrees with, and its state machine applied records the leader lacks. The
  process exits 1 with one ``committed_prefix_diverged`` line saying what to do.

The core decides and reports; the shell carries it out (``quorum/server/raft_manager.py``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from quorum.raft.log import RaftLog
from quorum.raft.messages import FetchResponse


def committed_in_epoch(log: RaftLog, epoch: int, applied_offset: int) -> bool:
    """Whether everything up to the high watermark was handed out (``applied_offset``) and the
    high watermark passed an entry of ``epoch``: its leader then committed, so the committed
    log holds everything any earlier leader committed (the Raft paper's leader completeness).
    An observer that discarded a diverged log has rebuilt the quorum's committed state then."""
    hw = log.high_watermark
    if applied_offset < hw:
        return False
    if hw > log.log_start_offset:
        return log.epoch_of(hw - 1) == epoch
    return hw > 0 and log.snapshot_epoch == epoch


@dataclass(frozen=True, slots=True)
class PrefixDivergence:
    """The leader's answer that would cut this node's log below its high watermark."""

    leader_id: int
    leader_epoch: int
    leader_high_watermark: int
    # This node's log when the answer came.
    high_watermark: int
    log_end_offset: int
    last_fetched_epoch: int
    # Where the leader's answer would cut this node's log, and the epoch it named: a diverging
    # epoch, or the epoch of the snapshot it sent this node to.
    truncate_to: int
    diverging_epoch: int
    via_snapshot: bool
    # An observer recovers (discards its log and image, fetches again); a voter stops.
    recoverable: bool

    @classmethod
    def of_answer(
        cls,
        leader_id: int,
        answer: FetchResponse,
        log: RaftLog,
        truncate_to: int,
        diverging_epoch: int,
        *,
        via_snapshot: bool,
        recoverable: bool,
    ) -> PrefixDivergence:
        """The divergence ``answer`` from ``leader_id`` shows against this node's ``log``."""
        return cls(
            leader_id=leader_id,
            leader_epoch=answer.leader_epoch,
            leader_high_watermark=answer.high_watermark,
            high_watermark=log.high_watermark,
            log_end_offset=log.log_end_offset,
            last_fetched_epoch=log.last_fetched_epoch,
            truncate_to=truncate_to,
            diverging_epoch=diverging_epoch,
            via_snapshot=via_snapshot,
            recoverable=recoverable,
        )

    def action(self) -> str:
        if self.recoverable:
            return (
                "discarding the local metadata log, snapshots and image and fetching them again "
                f"from leader {self.leader_id}"
            )
        return "stopping this controller"

    def describe(self) -> str:
        """The one message a person reads: what happened, and what to do."""
        where = (
            f"its snapshot ending at {self.truncate_to} (epoch {self.diverging_epoch})"
            if self.via_snapshot
            else f"offset {self.truncate_to} (its epoch {self.diverging_epoch} ends there)"
        )
        text = (
            f"the metadata log's committed prefix diverged: leader {self.leader_id} of epoch "
            f"{self.leader_epoch} (high watermark {self.leader_high_watermark}) sends this node "
            f"back to {where}, below this node's high watermark {self.high_watermark} (log end "
            f"{self.log_end_offset}, last fetched epoch {self.last_fetched_epoch}): records this "
            "node saw committed are not in the quorum's log, so an acknowledged write was lost "
            "(a voter's certificate used to claim a Fetch it never made, or a voter's disk that "
            "lost acknowledged data)"
        )
        if self.recoverable:
            return f"{text}; {self.action()}"
        return (
            f"{text}. This controller stops: its votes and fetch offsets promised a log the "
            "quorum no longer holds. Keep its metadata log directory for investigation; restart "
            "it once to rejoin (it then truncates to the leader's log), and if it stops again "
            "the divergence lies inside its own snapshot: move the directory aside, format it "
            "again and restart it (a dynamic quorum: remove the old replica and add the new one, "
            "docs/operating.md)"
        )

    def fields(self) -> dict[str, Any]:
        """The fields of the ``committed_prefix_diverged`` event and log line."""
        return {
            "leader_id": self.leader_id,
            "leader_epoch": self.leader_epoch,
            "leader_high_watermark": self.leader_high_watermark,
            "high_watermark": self.high_watermark,
            "log_end_offset": self.log_end_offset,
            "last_fetched_epoch": self.last_fetched_epoch,
            "truncate_to": self.truncate_to,
            "diverging_epoch": self.diverging_epoch,
            "via_snapshot": self.via_snapshot,
            "action": self.action(),
            "message": self.describe(),
        }
