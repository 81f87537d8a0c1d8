"""Every bound of the system in one place (TigerStyle: units and qualifiers last)."""

from __future__ import annotations

from typing import Final

# Kafka's KafkaRaftClient.MAX_FETCH_SIZE_BYTES and KRaft's MAX_BATCH_SIZE_BYTES: 8 MiB.
FETCH_RESPONSE_BYTES_MAX: Final = 8 * 1024 * 1024
BATCH_BYTES_MAX: Final = 8 * 1024 * 1024
# Kafka's QuorumController MAX_RECORDS_PER_USER_OP: an atomic batch holds at most this many.
RECORDS_PER_BATCH_MAX: Final = 10_000
# Kafka bounds a long-poll Fetch at 500 ms (KafkaRaftClient's fetchMaxWaitMs).
FETCH_MAX_WAIT_MS: Final = 500
VOTERS_MAX: Final = 7
# Observers the leader remembers in DescribeQuorum; older ones are dropped first.
OBSERVERS_TRACKED_MAX: Final = 1_000
INBOX_ENVELOPES_MAX: Final = 10_000
