"""The fetching side of a follower or observer: when its next Fetch may go, which voter an
observer that knows no leader asks next, the leader's snapshot being downloaded (KIP-630), and
a committed prefix found diverging (``quorum.raft.prefix_divergence``), which stops fetching
until the shell discarded the local log (an observer) or for good (a voter, which stops).

It belongs to the node rather than to one epoch state: a retry backoff, the observer's
round-robin position and a download under way all outlive a change of epoch or leader. Kafka
keeps its snapshot download in ``FollowerState`` because its client downloads in the core and
drops a download on a transition; here the shell downloads (``Ready.snapshot_to_fetch``),
replaces the log on disk and then always reports back (``install_snapshot`` or
``snapshot_fetch_failed``), whatever the node's role has become meanwhile (a vote for a new
candidate, a new leader). Until then the node must neither fetch (an answer could move the
high watermark past the snapshot it is about to install) nor ask for a second download, so
the download stays here. The behaviour (``quorum.raft.follower``) is in ``FollowerFetching``.
"""

from __future__ import annotations

from collections.abc import Collection

from quorum.raft.messages import SnapshotId
from quorum.raft.prefix_divergence import PrefixDivergence


class Fetcher:
    __slots__ = ("_observer_cursor", "diverged", "fetching_snapshot", "retry_at_ms")

    def __init__(self) -> None:
        # No Fetch before this time (a failed or answered one sets it).
        self.retry_at_ms = 0
        # The snapshot the driver is downloading; no Fetch goes out meanwhile.
        self.fetching_snapshot: SnapshotId | None = None
        # The committed prefix diverged from the leader's: no Fetch until the local log is
        # discarded (``RaftNode.discard_diverged_log``).
        self.diverged: PrefixDivergence | None = None
        self._observer_cursor = 0

    def retry_now(self, now_ms: int) -> None:
        self.retry_at_ms = now_ms

    def retry_after(self, now_ms: int, backoff_ms: int) -> None:
        self.retry_at_ms = now_ms + backoff_ms

    def paused(self) -> bool:
        """Whether fetching waits for the shell: a snapshot download, or a diverged log."""
        return self.fetching_snapshot is not None or self.diverged is not None

    def may_fetch(self, now_ms: int) -> bool:
        """Whether the backoff is over and fetching is not paused (a Fetch already in flight
        is the caller's to check)."""
        return now_ms >= self.retry_at_ms and not self.paused()

    def next_observer_target(self, voters: Collection[int]) -> int:
        """The voter an observer without a leader asks next: each voter in turn."""
        ordered = sorted(voters)
        target = ordered[self._observer_cursor % len(ordered)]
        self._observer_cursor += 1
        return target
