"""Kafka's ``raft-metrics`` (``kafka_server_raftmetrics_*``, every node), measured in the driver
loop: ``RaftMetrics.observe_ready`` after every ``Ready`` (a few comparisons and appends),
``read`` when a scrape asks the loop, ``raft_families`` in the scrape thread
(docs/operating.md#metrics)."""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Iterator, Mapping
from typing import Final

from prometheus_client.core import GaugeMetricFamily, Metric

from quorum.raft.node import RaftNode, Ready
from quorum.raft.state import LeaderState, election_state_of
from quorum.server.metric_stats import WindowedStat, wall_ms

__all__ = ["RAFT_STATES", "RaftMetrics", "kafka_state", "raft_families"]

# Batches appended but not committed yet, kept for commit-latency (the oldest are dropped).
APPENDED_BATCHES_MAX: Final = 10_000
# Kafka's current-state values (KafkaRaftMetrics), one series each.
RAFT_STATES: Final = (
    "leader",
    "resigned",
    "candidate",
    "prospective",
    "voted",
    "unattached",
    "follower",
    "observer",
)


def kafka_state(node: RaftNode) -> str:
    """Kafka's ``current-state`` of ``node``."""
    name: str = node.state.name
    if name == "follower":
        return "follower" if node.is_voter else "observer"
    if name == "unattached":
        if not node.is_voter:
            return "observer"
        voted = election_state_of(node.state, node.voters, node.node_id).voted_id
        return "voted" if voted is not None else "unattached"
    return name


class RaftMetrics:
    """Kafka's ``raft-metrics``, measured in the driver loop: ``observe_ready`` after every
    ``Ready`` (a few comparisons and appends), ``read`` when a scrape asks.

    - commit-latency: the leader's time from appending a batch to the high watermark passing it;
    - election-latency: from becoming prospective or candidate to knowing a leader;
    - append-records-rate (leader) and fetch-records-rate (followers and observers): records
      appended to the local log per second;
    - poll-idle-ratio-avg: the share of each loop turn spent waiting for work;
    - the last applied record's timestamp: when its batch reached this node's log. Kafka uses
      the batch's own timestamp (the leader's wall-clock append time, as batches here carry
      too); the local arrival time is read without decoding the batch and differs from it
      by the replication delay (the lag still grows when the node stops receiving the
      leader's NoOps, as Kafka's does).
    """

    def __init__(
        self,
        node: RaftNode,
        idle_s: Callable[[], float],
        unknown_voters: Callable[[], int] = lambda: 0,
    ) -> None:
        """``unknown_voters``: how many voters of the set in force this node has no address
        for (the shell's address book knows)."""
        self.node = node
        self._idle_s = idle_s
        self._unknown_voters = unknown_voters
        self.commit_latency_ms = WindowedStat()
        self.election_latency_ms = WindowedStat()
        self.append_records = WindowedStat()
        self.fetch_records = WindowedStat()
        self.poll_idle_ratio = WindowedStat()
        # (last offset, monotonic ms, wall ms, appended as leader) per uncommitted batch
        self._appended: deque[tuple[int, int, int, bool]] = deque(maxlen=APPENDED_BATCHES_MAX)
        self._election_started_ms: int | None = None
        self._last_turn_s = time.perf_counter()
        self._last_idle_s = idle_s()
        self.last_applied_offset = -1
        self.last_applied_wall_ms = 0

    def observe_ready(self, ready: Ready, now_ms: int) -> None:
        node = self.node
        leader = node.is_leader()
        for event in ready.events:  # transitions since the last Ready, in order
            if event.name in ("became_prospective", "became_candidate"):
                if self._election_started_ms is None:
                    self._election_started_ms = now_ms
            elif (
                event.name in ("became_leader", "became_follower")
                and self._election_started_ms is not None
            ):
                self.election_latency_ms.record(now_ms - self._election_started_ms, now_ms)
                self._election_started_ms = None

        wall = wall_ms()
        appended = self._appended
        if ready.truncate_to is not None:
            while appended and appended[-1][0] >= ready.truncate_to:
                appended.pop()
        records = 0
        for batch in ready.entries_to_append:
            appended.append((batch.last_offset, now_ms, wall, leader))
            records += batch.record_count
        if records:
            (self.append_records if leader else self.fetch_records).record(records, now_ms)

        arrived_wall: int | None = None
        high_watermark = ready.high_watermark
        while appended and appended[0][0] < high_watermark:
            _, appended_ms, arrived_wall, as_leader = appended.popleft()
            if as_leader and leader:
                self.commit_latency_ms.record(now_ms - appended_ms, now_ms)
        if ready.committed_batches:
            self.last_applied_offset = ready.committed_batches[-1].last_offset
            # Batches read from disk at start-up arrived now, as far as this process knows.
            self.last_applied_wall_ms = arrived_wall if arrived_wall is not None else wall

        turn_s = time.perf_counter()
        idle_s = self._idle_s()
        elapsed_s = turn_s - self._last_turn_s
        if elapsed_s > 0:
            ratio = min(1.0, max(0.0, (idle_s - self._last_idle_s) / elapsed_s))
            self.poll_idle_ratio.record(ratio, now_ms)
        self._last_turn_s, self._last_idle_s = turn_s, idle_s

    def read(self, now_ms: int) -> dict[str, float]:
        """Kafka's raft-metrics now (in the loop)."""
        node = self.node
        voted = election_state_of(node.state, node.voters, node.node_id).voted_id
        leader = node.leader_id
        leader_state = node.state_as(LeaderState)
        latest_change = node.voter_history.latest_offset()
        return {
            "current_leader": -1 if leader is None else leader,
            "current_vote": -1 if voted is None or not node.is_voter else voted,
            "current_epoch": node.epoch,
            "high_watermark": node.high_watermark,
            "log_end_offset": node.log_end_offset,
            "log_end_epoch": node.log.last_fetched_epoch,
            "number_unknown_voter_connections": self._unknown_voters(),
            # KIP-853's: the voter set in force, the observers the leader tracks, and whether
            # a voter change is under way (the leader's pending AddRaftVoter or RemoveRaftVoter,
            # or a VotersRecord in this log not yet below the high watermark).
            "number_of_voters": len(node.voters),
            "number_of_observers": 0 if leader_state is None else len(leader_state.observers),
            "uncommitted_voter_change": int(
                (leader_state is not None and leader_state.voter_change is not None)
                or (latest_change is not None and latest_change >= node.high_watermark)
            ),
            "commit_latency_avg": self.commit_latency_ms.avg(now_ms),
            "commit_latency_max": self.commit_latency_ms.max(now_ms),
            "election_latency_avg": self.election_latency_ms.avg(now_ms),
            "election_latency_max": self.election_latency_ms.max(now_ms),
            "fetch_records_rate": self.fetch_records.rate_per_s(now_ms),
            "append_records_rate": self.append_records.rate_per_s(now_ms),
            "poll_idle_ratio_avg": self.poll_idle_ratio.avg(now_ms),
        }


RAFT_HELP: Final[Mapping[str, str]] = {
    "current_leader": "The current quorum leader's id; -1 indicates unknown",
    "current_vote": "The current voted leader's id; -1 indicates not voted for anyone",
    "current_epoch": "The current quorum epoch",
    "high_watermark": "The high watermark maintained on this member; -1 if it is unknown",
    "log_end_offset": "The current raft log end offset",
    "log_end_epoch": "The current raft log end epoch",
    "number_unknown_voter_connections": "Number of unknown voters whose connection "
    "information is not cached",
    "number_of_voters": "Number of voters for a KRaft topic partition",
    "number_of_observers": "Number of observers being tracked by the KRaft topic partition leader",
    "uncommitted_voter_change": "1 if there is a voter change that has not been committed, "
    "0 otherwise",
    "commit_latency_avg": "The average time in milliseconds to commit an entry in the raft log",
    "commit_latency_max": "The maximum time in milliseconds to commit an entry in the raft log",
    "election_latency_avg": "The average time in milliseconds spent on electing a new leader",
    "election_latency_max": "The maximum time in milliseconds spent on electing a new leader",
    "fetch_records_rate": "The average number of records fetched from the leader per second",
    "append_records_rate": "The average number of records appended per second by the leader",
    "poll_idle_ratio_avg": "The ratio of time the Raft loop is idle as opposed to doing work",
}


def raft_families(state: str, values: Mapping[str, float]) -> Iterator[Metric]:
    family = GaugeMetricFamily(
        "kafka_server_raftmetrics_current_state",
        "The current state of this member (Kafka's current-state): 1 for the state it is in",
        labels=("state",),
    )
    for name in RAFT_STATES:
        family.add_metric((name,), 1.0 if name == state else 0.0)
    yield family
    for key, help_text in RAFT_HELP.items():
        yield GaugeMetricFamily(f"kafka_server_raftmetrics_{key}", help_text, value=values[key])
