"""Timings and sizes of the Raft core, with Kafka's defaults and Kafka's key names."""

from __future__ import annotations

from dataclasses import dataclass

from quorum import limits


@dataclass(frozen=True, slots=True)
class RaftConfig:
    # controller.quorum.election.timeout.ms: election timeouts are drawn from [T, 2T).
    election_timeout_ms: int = 1000
    # controller.quorum.fetch.timeout.ms: a follower with no successful Fetch for this long
    # starts an election; a leader that has not heard a majority for 1.5x this resigns.
    fetch_timeout_ms: int = 2000
    # controller.quorum.election.backoff.max.ms: cap of the binary exponential backoff.
    election_backoff_max_ms: int = 1000
    # Base of the backoff (Kafka's retryBackoffMs for elections).
    election_backoff_base_ms: int = 100
    # controller.quorum.request.timeout.ms: an unanswered request counts as failed after this.
    request_timeout_ms: int = 2000
    # controller.quorum.retry.backoff.ms: pause before retrying a failed request.
    retry_backoff_ms: int = 20
    # controller.quorum.append.linger.ms: at most this long a proposal waits for company.
    append_linger_ms: int = 25
    # When true, a pending batch is sealed at the next poll instead of waiting for the linger:
    # the driver already groups every proposal that arrived during the previous fsync
    # (group commit), so lone requests are not taxed with the full linger.
    seal_batches_on_poll: bool = True
    # Adaptive batching: while an earlier batch of this leader is still uncommitted, the open
    # batch is not sealed at the next poll but grows until that batch commits (at most
    # append_linger_ms, or until it holds adaptive_batch_records_min records). An idle leader
    # seals at once as before, so a lone request pays nothing; under load a batch carries
    # what arrived during one replication round, and each Fetch round, fsync and loop turn
    # serves more requests.
    adaptive_batching: bool = True
    adaptive_batch_records_min: int = 1_000
    # Under load, a batch that waited for an earlier one is sealed no sooner than this after
    # its first record (once the earlier one commits): each replication round then carries
    # more, and followers pay for fewer rounds (64 in flight: 1,230-1,400 -> 1,580-1,660
    # writes/s, followers' CPU per write 180-220 -> 105-120 us). A lone request never waits
    # for it; a request arriving during another's round waits at most this long more.
    adaptive_batch_age_min_ms: int = 10
    # metadata.max.idle.interval.ms: the leader writes a NoOpRecord after this much silence.
    idle_interval_ms: int = 500
    # The long-poll bound a fetcher asks for, and the bound the leader honours.
    fetch_max_wait_ms: int = limits.FETCH_MAX_WAIT_MS
    fetch_max_bytes: int = limits.FETCH_RESPONSE_BYTES_MAX
    batch_bytes_max: int = limits.BATCH_BYTES_MAX
    records_per_batch_max: int = limits.RECORDS_PER_BATCH_MAX
    # Observers the leader has not heard from for this long disappear from DescribeQuorum.
    observer_expiry_ms: int = 300_000
    # Bounds on what hostile or merely numerous fetchers can make a leader keep
    # (quorum/limits.py): observers tracked (least recently heard dropped) and observer
    # Fetches parked for the long poll (past it, answered at once).
    observers_tracked_max: int = limits.OBSERVERS_TRACKED_MAX
    fetch_purgatory_max: int = limits.FETCH_PURGATORY_MAX
    # How far above the highest epoch this node has seen one peer's message may move it
    # (``quorum.raft.epoch_bounds``): limits.EPOCH_JUMP_MAX; the simulator sets it low to
    # exercise the majority-vouched rejoin of a node left far behind.
    epoch_jump_max: int = limits.EPOCH_JUMP_MAX
    # A follower whose Fetch finds the leader gone (``RequestFailed.peer_gone``: connection
    # refused or reset, the OS says so at once when a process dies) does not wait out the
    # fetch timeout: it starts a pre-vote after a random pause of at most
    # ``election_backoff_base_ms`` (so two followers seldom split the vote), once per epoch.
    # Voters that lost the leader the same way grant it; a voter still hearing the leader
    # does not (KIP-996), so a merely refused link cannot depose a live leader. No Kafka key:
    # false only to compare with the plain fetch timeout (tests/sim/test_sim.py).
    election_on_connection_loss: bool = True
    # In the first round of its own pre-vote, a voter refuses the pre-vote of a higher id
    # whose log ends where its own does (``quorum.raft.voting.campaigns_first``): of two
    # followers that lost the leader together the lower id goes first, instead of both
    # becoming candidates of one epoch and splitting the vote. No Kafka key: false only to compare
    # (tests/sim/test_sim.py).
    pre_vote_lower_id_first: bool = True
    # A parked Fetch whose only news would be a higher high watermark is answered this long
    # after the high watermark passed the one its fetcher knows, instead of at once: new data
    # that arrives sooner carries the high watermark along, so a follower costs one Fetch
    # round per commit, not two (data, then the high watermark that data made), under load
    # and for writes a few milliseconds apart alike. Fetchers learn the high watermark at
    # most this much later; a read fence (``RaftNode.read_barrier``) still answers at once.
    # No Kafka key; 0 answers at once, as Kafka does.
    high_watermark_notify_delay_ms: int = 5
    # At most this many committed records per Ready (at least one batch): a node that learns
    # of a long committed backlog (a restarted voter catching up, a broker) applies it over
    # several Readies, and between two it steps what arrived meanwhile (a pre-vote request, a
    # failed Fetch that says the leader died) instead of after the whole backlog (a restarted
    # controller replaying 40,000 records answered a pre-vote about 0.4 s late). About 40 ms
    # of replay on a controller. No Kafka key.
    committed_records_per_ready_max: int = 2_000

    # ----- test-only switches that break the protocol (negative controls) -------------------
    # They exist so the simulator can prove its checkers catch the bug each one introduces.
    # Never set in production: no configuration key reaches them (`quorum.config.raft_config`).
    unsafe_commit_previous_epoch: bool = False
    # The leader starts a voter change while the previous one is still uncommitted (two
    # changes in flight: two majorities that need not meet, KIP-853's one-at-a-time rule).
    unsafe_allow_concurrent_voter_changes: bool = False

    def __post_init__(self) -> None:
        assert self.election_timeout_ms > 0, self
        assert self.fetch_timeout_ms > 0, self
        assert self.fetch_max_wait_ms < self.fetch_timeout_ms, self
        assert self.election_backoff_base_ms > 0, self
        assert self.election_backoff_max_ms >= self.election_backoff_base_ms, self
        assert self.epoch_jump_max > 0, self

    @property
    def check_quorum_timeout_ms(self) -> int:
        return self.fetch_timeout_ms * 3 // 2

    @property
    def begin_quorum_epoch_resend_ms(self) -> int:
        return self.fetch_timeout_ms // 2
