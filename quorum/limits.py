"""Bounds shared across modules, and the protocol's bounds (docs/conventions.md#limits).

What lives here: the int32 range of Kafka's fields, the Raft wire bounds (Fetch bytes, batch
bytes and records, long-poll wait, inbox size) and the limits of the admin operations, with the
Kafka figure each one comes from. A bound that only one module uses may live beside its code
(for example the log's segment sizes in ``quorum/storage/log.py`` or the directory-name bounds
in ``broker/reconcile.py``), still named ``*_max`` with units and qualifiers last.
``tests/unit/project/test_architecture.py`` fails on a constant here that nothing uses.
"""

from __future__ import annotations

from typing import Final

# Kafka's int32 fields (epochs, broker and node ids, partitions, record counts) end here.
INT32_MAX: Final = 2**31 - 1

# Kafka's KafkaRaftClient.MAX_FETCH_SIZE_BYTES and KRaft's MAX_BATCH_SIZE_BYTES: 8 MiB.
FETCH_RESPONSE_BYTES_MAX: Final = 8 * 1024 * 1024
BATCH_BYTES_MAX: Final = 8 * 1024 * 1024
# Kafka's QuorumController MAX_RECORDS_PER_USER_OP: an atomic batch holds at most this many.
RECORDS_PER_BATCH_MAX: Final = 10_000
# Kafka bounds a long-poll Fetch at 500 ms (KafkaRaftClient's fetchMaxWaitMs).
FETCH_MAX_WAIT_MS: Final = 500
INBOX_ENVELOPES_MAX: Final = 10_000

# ----- the controller's admin operations (quorum/controller) ----------------------------------
# Kafka's Topic.MAX_NAME_LENGTH: 249, so "{name}-{partition}" and the ".deleted"/"-stray"
# suffixes fit a 255-byte directory name.
TOPIC_NAME_CHARS_MAX: Final = 249
# An admin request holds at most 1,000 topics (our choice, docs/conventions.md#limits); Kafka has no
# such cap, only MAX_RECORDS_PER_USER_OP = 10,000 records, our RECORDS_PER_BATCH_MAX.
CREATE_TOPICS_TOPICS_MAX: Final = 1_000
# Resources one AlterConfigs / IncrementalAlterConfigs request may name (our choice, as above).
ALTER_CONFIGS_RESOURCES_MAX: Final = 1_000
DELETE_TOPICS_TOPICS_MAX: Final = 1_000
DESCRIBE_TOPICS_TOPICS_MAX: Final = 1_000
CREATE_PARTITIONS_TOPICS_MAX: Final = 1_000
# Topics in one ListTopics page (the client follows `next_cursor`): about 280 bytes a topic at
# most, so a full page stays under 3 MiB, inside gRPC's default 4 MiB message. Kafka's
# DescribeTopicPartitions pages by partitions, 2,000 by default.
LIST_TOPICS_PAGE_TOPICS_MAX: Final = 10_000
# ACLs (docs/authorization.md): creations or filters in one CreateAcls / DeleteAcls request, and
# ACLs a cluster holds in all (every request scans them; PREFIXED patterns keep the count low).
# Our choices; Kafka has no caps.
ACL_REQUEST_ENTRIES_MAX: Final = 1_000
ACLS_MAX: Final = 10_000
# A topic's TopicRecord, ConfigRecords and PartitionRecords share one atomic batch, so one topic
# must fit with room to spare; Kafka has no per-topic cap below that.
TOPIC_PARTITIONS_MAX: Final = 5_000
# Replication factor is an int16 in Kafka's CreateTopics request.
REPLICATION_FACTOR_MAX: Final = 32_767
# Config entries per created topic (only a small documented set of keys is accepted anyway).
TOPIC_CONFIGS_MAX: Final = 64
# A config name or value longer than these is refused before it is parsed or echoed
# (INVALID_CONFIG); the known names are all shorter than 32 characters.
TOPIC_CONFIG_NAME_CHARS_MAX: Final = 64
TOPIC_CONFIG_VALUE_CHARS_MAX: Final = 256
# Replica slots (partitions x replication factor) one CreateTopics request may place: bounds the
# bytes of its batch (each slot is written twice, in replicas and in the ISR).
CREATE_TOPICS_REPLICAS_MAX: Final = 100_000
# Deleted topics an image remembers (MetadataImage.deleted_topics): the newest this many
# deletions by (deletion offset, creation offset); older ones are forgotten in replay, the same
# way on every node and in snapshots (docs/architecture.md#deleted-topic-ids). Ten maximal
# DeleteTopics requests; about 3 MB of snapshot and memory at most. Our choice: Kafka's image
# keeps no deleted ids at all and relies on random 128-bit ids never colliding.
DELETED_TOPICS_RETAINED_MAX: Final = 10_000
# Draws of a fresh topic id before giving up: a collision is astronomically unlikely, so
# needing more than a few draws means the id generator is broken.
TOPIC_ID_DRAWS_MAX: Final = 100

assert TOPIC_PARTITIONS_MAX + TOPIC_CONFIGS_MAX + 1 <= RECORDS_PER_BATCH_MAX
assert DELETE_TOPICS_TOPICS_MAX <= DELETED_TOPICS_RETAINED_MAX
# Worst-case bytes of one CreateTopics batch: every record at most a topic name, a config name
# and a value (all ASCII once validated) plus 64 bytes of framing, plus 2 x 5 bytes per replica
# slot (msgpack int32).
assert (
    RECORDS_PER_BATCH_MAX
    * (TOPIC_NAME_CHARS_MAX + TOPIC_CONFIG_NAME_CHARS_MAX + TOPIC_CONFIG_VALUE_CHARS_MAX + 64)
    + CREATE_TOPICS_REPLICAS_MAX * 2 * 5
    <= BATCH_BYTES_MAX
)

# ----- the Kafka listener (broker/kafka; docs/kafka-listener.md#robustness) ---------------------
# Topics one Metadata, DescribeTopicPartitions or DescribeConfigs request may name, checked from
# the frame's array count before the request is decoded. Our choice, ten times the admin
# writes' 1,000: Kafka has no cap, and a client names every topic it knows when it refreshes
# them (librdkafka does), so reads get more room than writes; 10,000 names of at most 249 bytes
# fit in 2.5 MiB and are answered in well under a second.
METADATA_TOPICS_MAX: Final = 10_000
# Array items (every array of the request, nested ones included) one Kafka request may claim;
# each array's count is checked against what is left before its items are read. Decoding costs
# about 10 us an item (kio reads item by item in Python), so this bounds any request's decoding
# to about 3 s, in a worker thread. Our choice: the largest CreateTopics the controller accepts
# (1,000 topics with 64 configs each and 100,000 replica slots, each in an assignment) fits.
KAFKA_REQUEST_ITEMS_MAX: Final = 300_000

assert (
    CREATE_TOPICS_TOPICS_MAX * (1 + TOPIC_CONFIGS_MAX) + 2 * CREATE_TOPICS_REPLICAS_MAX
    <= KAFKA_REQUEST_ITEMS_MAX
)
assert METADATA_TOPICS_MAX <= KAFKA_REQUEST_ITEMS_MAX

# ----- the data plane: partition logs and their APIs (broker/log, broker/kafka/data_*.py) -----
# Partitions (array items, topics included) one Produce, Fetch, ListOffsets or
# OffsetForLeaderEpoch request may name, taken from the decoding budget instead of
# KAFKA_REQUEST_ITEMS_MAX: each costs a log lookup and an entry of the answer (tens of
# microseconds), so this bounds one request's handling to well under a second. Our choice:
# Kafka has no cap; a consumer fetches every partition it is assigned on a broker in one
# request, and brokers here lead far fewer.
KAFKA_DATA_REQUEST_ITEMS_MAX: Final = 20_000
# Partitions one incremental fetch session (KIP-227, broker/kafka/fetch_sessions.py) may hold,
# and all of a broker's sessions together. A session grows with every incremental request that
# names new partitions, so without a bound one client could fill the broker's memory a request
# at a time. Our choice: Kafka has neither; a session holds what one full fetch could name, and
# the cache about 200 bytes a partition, 40 MB at most. A session that would outgrow either is
# closed (FETCH_SESSION_ID_NOT_FOUND: the client sends a full fetch) and a full fetch beyond
# them is answered without a session (session id 0), as when the cache has no free slot.
FETCH_SESSION_PARTITIONS_MAX: Final = KAFKA_DATA_REQUEST_ITEMS_MAX
FETCH_SESSION_CACHE_PARTITIONS_MAX: Final = 200_000
# Groups one DescribeGroups or DeleteGroups request may name (checked from the frame). Our
# choice, as METADATA_TOPICS_MAX: Kafka has no cap; each costs a lookup and an entry.
GROUPS_PER_REQUEST_MAX: Final = 10_000
# Bytes one Fetch answer carries at most, whatever its max_bytes asks (Kafka's broker-side
# fetch.max.bytes, 55 MiB by default; ours is held per connection until written, so smaller).
# The first batch of the first partition with data is sent whole even if larger (KIP-74),
# which a produced batch never is: a Produce frame is at most 4 MiB (KAFKA_REQUEST_BYTES_MAX).
KAFKA_FETCH_RESPONSE_BYTES_MAX: Final = 8 * 1024 * 1024
# The longest a Fetch waits for min_bytes (its max_wait_ms is capped here): Kafka's clients'
# request.timeout.ms default (30 s), past which they would give up on the answer. Parked
# Fetches need no bound of their own: a connection has one request at a time, and connections
# are bounded by max.connections.
KAFKA_FETCH_WAIT_MS_MAX: Final = 30_000
# Idempotent producers one partition keeps state for (broker/log/producer_state.py): past it
# the producer heard from least recently is forgotten (its next batch at a non-zero sequence is
# UNKNOWN_PRODUCER_ID, as after Kafka's producer.id.expiration.ms). Any client may put any
# producer id in a batch, so without a bound a few thousand batches a second of made-up ids
# would grow the state (and every producer snapshot) for a day. Our choice: Kafka has none
# (KIP-936 proposes throttling instead); 50,000 producers of 5 retained batches are about 12 MB
# of snapshot and 30 MB of memory per partition, far beyond the producers a partition sees.
PRODUCER_STATE_ENTRIES_MAX: Final = 50_000
# An index file (.index, .timeindex) of a segment never grows past this: the segment is rolled
# first. Kafka's segment.index.bytes default (10 MiB: 1,310,720 offset entries, 873,813 time
# entries).
SEGMENT_INDEX_BYTES_MAX: Final = 10 * 1024 * 1024
# One read of a .log while recovering it or walking its batch headers: a batch larger than
# this is checksummed in reads of this size. Bounds the memory of recovery (our choice).
LOG_READ_CHUNK_BYTES_MAX: Final = 1024 * 1024
# The largest checkpoint file read (recovery-point-offset-checkpoint, log-start-offset-checkpoint,
# leader-epoch-checkpoint): a line is at most about 280 bytes (a 249-character topic name and
# two numbers), so 64 MiB holds over 200,000 partitions of one log dir. Larger is not a
# checkpoint this broker wrote, and is refused before it is parsed.
LOG_CHECKPOINT_BYTES_MAX: Final = 64 * 1024 * 1024
# Leader epochs one partition's leader-epoch cache keeps; past it the oldest is forgotten
# (its offsets then answer "no known epoch"). Each is a leader change that wrote; Kafka keeps
# them all. Our choice: decades of leader changes, a checkpoint of at most 300 KB.
LEADER_EPOCHS_MAX: Final = 10_000

# ----- the torn-tail rule's scan for a later valid frame (quorum/storage/frames.py) -------------
# One scan examines at most this many candidate positions (the magic byte, a possible length and
# non-negative fields) and checksums at most this many bytes; hostile bytes (megabytes of magic
# bytes and plausible lengths) would otherwise cost a CRC per position, quadratic in the file
# size. A torn tail holds a handful of candidates; a scan that reaches a bound has not ruled a
# valid frame out, so the damage counts as corruption (nothing is truncated).
FRAME_SCAN_CANDIDATES_MAX: Final = 100_000
FRAME_SCAN_CRC_BYTES_MAX: Final = 256 * 1024 * 1024

# ----- data-directory locks and the broker's partition.metadata reads (issue #12) ---------------
# Bytes read from a data directory's `.lock` file to name the process holding it (a pid and a
# newline: at most 11 bytes on Linux); anything longer is not a pid and is not echoed.
LOCK_FILE_BYTES_MAX: Final = 32
# Attempts to read a partition's `partition.metadata` when the read fails with an I/O error
# (EIO, EMFILE, ENOMEM, ...), PARTITION_METADATA_READ_BACKOFF_MS apart. A transient error (a
# descriptor or memory shortage) clears within that half second; a persistent one stops the
# broker naming the path and errno, because a partition whose id cannot be read must never be
# moved aside as stale (docs/architecture.md#brokers). This project's choice; Kafka marks the
# log dir offline at the first error.
PARTITION_METADATA_READ_ATTEMPTS_MAX: Final = 5
PARTITION_METADATA_READ_BACKOFF_MS: Final = 100

# ----- the gRPC edge and the driver loop (quorum/server) ---------------------------------------
# Reads waiting until this node has applied their min_metadata_offset (read-your-writes): past
# this many, a read is refused (RESOURCE_EXHAUSTED) instead of holding memory and a timer. Our
# choice, Kafka has no such wait; it matches gRPC's max_concurrent_streams of one connection.
METADATA_OFFSET_WAITERS_MAX: Final = 1_000
# The longest such a read waits, whatever its deadline (none: this long); Kafka's default
# request.timeout.ms.
METADATA_OFFSET_WAIT_MS_MAX: Final = 30_000
# Operations (CreateTopics, DeleteTopics, broker registrations and heartbeats) queued for the
# active controller's loop; past this many, RESOURCE_EXHAUSTED (retriable). Our choice: each
# holds a parsed request, and a full queue is minutes of work (Kafka's controller event queue
# is unbounded but throttles topic mutations per client, KIP-599).
CONTROLLER_OPERATIONS_QUEUED_MAX: Final = 1_000
# One loop turn runs queued operations only until this many records were proposed (at least one
# operation), then steps Fetch and heartbeats again. Our choice: proposing costs about 40 us per
# record (CreateTopics measured on one core), so a turn's operations stay near 40 ms; Kafka's
# controller likewise runs one event at a time.
CONTROLLER_OPERATION_RECORDS_PER_TURN_MAX: Final = 1_000

# ----- the Raft core's hostile-input bounds (quorum/raft; docs/architecture.md#hostile-peers) -----
# Epochs are int32 on the wire (Kafka's leaderEpoch). A message may move a node straight to any
# epoch up to EPOCH_MAX; above it, only one epoch at a time (the epoch a node already has, or
# the next one). So one forged message cannot strand the quorum at INT32_MAX, where no election
# is possible: the last million epochs stay for real elections (at one election per second,
# eleven days of continuous elections). Kafka has no such bound: it trusts its peers.
EPOCH_MAX: Final = INT32_MAX - 1_000_000
# How far above the highest epoch a node has seen (its own, or one a majority of voters vouched
# for in their answers) one peer's message may move it (issue 28; quorum/raft/epoch_bounds.py).
# A request beyond it is refused (INVALID_REQUEST, logged `epoch_jump_refused`); a response
# beyond it is dropped until a majority of voters answer with that epoch, which one voter whose
# key was stolen cannot make up alone. Honest epochs grow by about one per election: with
# pre-vote a node without a majority never raises its epoch, so only a real election (a leader
# lost, a resignation) or a split vote does, and each round waits an election timeout (1 s by
# default, Kafka's). 10,000 epochs are decades of a healthy cluster's failovers and rolling
# restarts, and almost three hours of back-to-back failed elections at the default timeout
# (a quorum that elects nobody that long commits nothing anyway); a node away that long still
# rejoins once a majority answers it. Against a stolen key: one message moves a node at most
# this far, so walking a quorum up to EPOCH_MAX takes some 214,000 accepted requests, each a
# persisted epoch and a log line. Our choice; Kafka trusts its peers.
EPOCH_JUMP_MAX: Final = 10_000
# Observers (brokers) a leader keeps progress for; past it the least recently heard one is
# dropped (it reappears on its next Fetch). Our choice: Kafka's largest clusters have a few
# thousand brokers; every observer costs one entry in DescribeQuorum.
OBSERVERS_TRACKED_MAX: Final = 10_000
# Observer Fetches a leader parks for the long poll at once; past it an observer's Fetch is
# answered at once (voters always park: there are few). Bounded like the inbox, since every
# parked Fetch also holds an open RPC handler in the driver.
FETCH_PURGATORY_MAX: Final = 1_000
# Preferred successors an EndQuorumEpoch may name (at most the other voters, who are fewer).
PREFERRED_SUCCESSORS_MAX: Final = 1_000
# How long the leader works on one AddRaftVoter / RemoveRaftVoter / UpdateRaftVoter (KIP-853):
# waiting for a new voter to catch up, then for the new VotersRecord to commit. The request
# asks for its own timeout (Kafka's AddRaftVoter ``timeout``); the leader caps it here. Our
# choice: a new controller catches a 100 MB log up in seconds on a LAN; ten minutes leaves room
# for a slow link without letting one forgotten request block every other change for long.
VOTER_CHANGE_TIMEOUT_MS_MAX: Final = 600_000
# Endpoints one voter may name in AddRaftVoter / UpdateRaftVoter (one per listener; Kafka has no
# bound, ours keeps a VotersRecord small).
VOTER_ENDPOINTS_MAX: Final = 16

assert 0 < EPOCH_MAX < INT32_MAX
assert 0 < EPOCH_JUMP_MAX < EPOCH_MAX
assert FETCH_PURGATORY_MAX <= INBOX_ENVELOPES_MAX
