"""The controller's pure propose/replay state machine (docs/architecture.md#the-controller,
docs/conventions.md#propose-and-replay).

Kafka's ``QuorumController`` structure without its threads: an operation validates a request
against state and returns a ``ControllerResult`` (records + response); it never changes the
metadata. Only replay does. Because a proposal commits later, the active controller keeps two
images:

- ``committed_image``: every committed batch replayed (``replay_committed``); what reads are
  served from and what followers and restarted controllers have.
- ``latest_image``: the committed image plus the records this controller has proposed but not
  yet seen committed, replayed speculatively at proposal time (``replay_pending``). Operations
  validate against it, so two creates of one name in a row are told apart before either
  commits, and heartbeats do not propose the same unfencing twice.

The driver's contract (the asyncio shell in ``quorum/server``):

1. On every committed batch (leader or follower): ``replay_committed(batch)``.
2. As the active controller, only once ``committed_image.offset`` has reached the offset of
   its own epoch's ``LeaderChangeMessage`` (everything earlier epochs wrote is replayed, as
   Kafka's ``handleLeaderChange`` waits for): call an operation with ``next_offset`` = the
   offset its first record will get; append ``result.records`` back to back from there (one
   batch if ``is_atomic``); call ``replay_pending(result.records, next_offset)``; answer with
   ``result.response`` once the high watermark passes the last record.
3. On losing leadership (or a failed append): ``reset_to_committed()``, which drops the
   speculative image and the broker sessions.

Broker sessions (when each broker last heartbeated) are volatile state of the active controller,
not in the log: ``register_broker`` and ``broker_heartbeat`` update them, ``fence_stale_brokers``
reads them, and a newly active controller starts every unfenced broker with a fresh session.
"""

from __future__ import annotations

import random
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from quorum.controller import acls as acl_ops
from quorum.controller import alter_configs as alter_config_ops
from quorum.controller import alter_partition as alter_partition_ops
from quorum.controller import brokers as broker_ops
from quorum.controller import client_quotas as client_quota_ops
from quorum.controller import elections as election_ops
from quorum.controller import partitions as partition_ops
from quorum.controller import producer_ids as producer_id_ops
from quorum.controller import topics as topic_ops
from quorum.controller.acls import AclOutcome
from quorum.controller.broker_index import BrokerPartitionIndex
from quorum.controller.describe import describe_topics, list_topics
from quorum.controller.requests import (
    AllocateProducerIdsRequest,
    AllocateProducerIdsResponse,
    AlterPartitionRequest,
    AlterPartitionResponse,
    BrokerHeartbeatRequest,
    BrokerHeartbeatResponse,
    CreatePartitionsRequest,
    CreatePartitionsResponse,
    CreateTopicsRequest,
    CreateTopicsResponse,
    DeleteTopicsRequest,
    DeleteTopicsResponse,
    DescribeTopic,
    ElectionType,
    ElectLeadersRequest,
    ElectLeadersResponse,
    RegisterBrokerRequest,
    RegisterBrokerResponse,
    TopicDescription,
    TopicListing,
)
from quorum.controller.result import ControllerResult
from quorum.errors import ErrorCode
from quorum.ids import Uuid
from quorum.metadata.batch import DecodedBatch
from quorum.metadata.delta import MetadataDelta
from quorum.metadata.image import CLUSTER_METADATA_TOPIC_NAME, MetadataImage
from quorum.metadata.records import MetadataRecord, NoOpRecord, TopicRecord
from quorum.security.acls import AclBinding, AclBindingFilter

__all__ = ["ControllerConfig", "ControllerResult", "ControllerStateMachine"]


@dataclass(frozen=True, slots=True)
class ControllerConfig:
    """Kafka's defaults: ``broker.session.timeout.ms`` 9000, ``num.partitions`` 1,
    ``default.replication.factor`` 1, ``unclean.leader.election.enable`` false (what a topic
    that does not set it gets)."""

    broker_session_timeout_ms: int = 9_000
    default_num_partitions: int = 1
    default_replication_factor: int = 1
    unclean_leader_election_enable: bool = False


class ControllerStateMachine:
    def __init__(
        self,
        image: MetadataImage = MetadataImage.EMPTY,
        config: ControllerConfig = ControllerConfig(),
        *,
        rng: random.Random | None = None,
    ) -> None:
        """``rng`` picks where replica placement starts (the simulator passes a seeded one;
        None: a ``random.Random()`` seeded by the operating system)."""
        self._config = config
        self._rng = random.Random() if rng is None else rng
        self._defaults = topic_ops.TopicDefaults(
            num_partitions=config.default_num_partitions,
            replication_factor=config.default_replication_factor,
        )
        self._committed = image
        self._latest = image
        # (base offset, last offset, latest image after it) of each pending proposal
        self._pending: deque[tuple[int, int, MetadataImage]] = deque()
        self._sessions = broker_ops.BrokerSessions(config.broker_session_timeout_ms)
        # Which partitions each broker replicates in ``_latest`` (fencing and unfencing visit
        # a broker's own partitions): moved by every delta that changes ``_latest``.
        self._index = BrokerPartitionIndex(image)

    # ----- images -----------------------------------------------------------------------------

    @property
    def committed_image(self) -> MetadataImage:
        return self._committed

    @property
    def latest_image(self) -> MetadataImage:
        return self._latest

    @property
    def has_pending(self) -> bool:
        return bool(self._pending)

    def replay_committed(self, batch: DecodedBatch) -> None:
        """Replay a committed batch (raises ``MetadataReplayError`` on an impossible record)."""
        delta = MetadataDelta(self._committed)
        delta.replay_batch(batch)
        self._committed = delta.apply()
        pending = self._pending
        if not pending:  # the latest image is the committed one: its index moves too
            self._index.move(*delta.replica_moves())
        if pending and _changes_metadata(batch):
            # While proposals are pending, a committed batch that changes metadata must start
            # inside the oldest of them (one batch may carry several proposals, and a
            # non-atomic proposal may span several batches): this leader appended it.
            assert pending[0][0] <= batch.base_offset <= pending[0][1], (
                f"committed batch [{batch.base_offset}, {batch.last_offset}] does not start in "
                f"the oldest pending proposal {pending[0]}: the driver proposed before "
                "replaying everything committed, or appended records it did not replay_pending"
            )
        while pending and pending[0][1] <= batch.last_offset:
            pending.popleft()
        if not pending:
            self._latest = self._committed

    def commit_own(self, base_offset: int, last_offset: int) -> bool:
        """A batch committed whose offsets are exactly one or more whole pending proposals
        of this controller, from the oldest on (the caller checks that the batch is of the
        epoch it proposed them in, so it is the batch this controller appended): the image
        after the last of them, already built by ``replay_pending``, becomes the committed
        image, without decoding and replaying the batch again. Control records and NoOps
        between proposals only move the offset, so that image holds exactly what replaying
        the committed log gives. Returns False (nothing changed) if the batch is not such a
        run of proposals: the caller then calls ``replay_committed``."""
        pending = self._pending
        if not pending or pending[0][0] != base_offset or self._committed.offset >= base_offset:
            return False
        count = 0
        for _, last, _ in pending:
            count += 1
            if last == last_offset:
                break
            if last > last_offset:
                return False
        else:
            return False
        image = pending[count - 1][2]
        for _ in range(count):
            pending.popleft()
        self._committed = image
        if not pending:
            self._latest = image
        return True

    def replay_pending(self, records: Sequence[MetadataRecord], base_offset: int) -> None:
        """Replay records this controller just proposed at ``base_offset`` onto the latest image."""
        if not records:
            return
        assert base_offset > self._latest.offset, (base_offset, self._latest.offset)
        assert base_offset > self._committed.offset, (base_offset, self._committed.offset)
        delta = MetadataDelta(self._latest)
        for index, record in enumerate(records):
            delta.replay(record, base_offset + index)
        self._latest = delta.apply()
        self._index.move(*delta.replica_moves())
        self._pending.append((base_offset, base_offset + len(records) - 1, self._latest))

    def reset_to_image(self, image: MetadataImage) -> None:
        """Replace all state by ``image`` (a snapshot this node installed from the leader)."""
        self._committed = image
        self._latest = image
        self._pending.clear()
        self._sessions.clear()
        self._index.rebuild(image)

    def forget_broker_sessions(self) -> None:
        """A new term of leadership starts: heartbeats seen in an earlier term say nothing about
        now (Kafka's controller starts every broker's session afresh when it becomes active)."""
        self._sessions.clear()

    def reset_to_committed(self) -> None:
        """Forget uncommitted proposals and broker sessions (leadership lost or resigned)."""
        if self._latest is not self._committed:
            self._index.rebuild(self._committed)  # O(partitions), once per lost leadership
        self._latest = self._committed
        self._pending.clear()
        self._sessions.clear()

    # ----- topics -----------------------------------------------------------------------------

    def _check_next_offset(self, next_offset: int) -> None:
        assert next_offset > self._latest.offset, (next_offset, self._latest.offset)
        assert next_offset > self._committed.offset, (next_offset, self._committed.offset)

    def create_topics(
        self,
        request: CreateTopicsRequest,
        *,
        next_offset: int,
        new_topic_id: Callable[[], Uuid],
    ) -> ControllerResult[CreateTopicsResponse]:
        """See ``quorum.controller.topics.create_topics``; validates against the latest image.
        ``new_topic_id`` is called once per created topic (again on the astronomically unlikely
        collision with an id ever used); production passes ``Uuid.random``."""
        self._check_next_offset(next_offset)
        return topic_ops.create_topics(
            self._latest,
            request,
            next_offset=next_offset,
            new_topic_id=new_topic_id,
            rng=self._rng,
            defaults=self._defaults,
        )

    def create_partitions(
        self, request: CreatePartitionsRequest, *, next_offset: int
    ) -> ControllerResult[CreatePartitionsResponse]:
        """See ``quorum.controller.partitions.create_partitions``; validates against the latest
        image."""
        self._check_next_offset(next_offset)
        return partition_ops.create_partitions(self._latest, request, rng=self._rng)

    def delete_topics(
        self, request: DeleteTopicsRequest, *, next_offset: int
    ) -> ControllerResult[DeleteTopicsResponse]:
        """See ``quorum.controller.topics.delete_topics``; validates against the latest image."""
        self._check_next_offset(next_offset)
        return topic_ops.delete_topics(self._latest, request)

    def alter_configs(
        self, request: alter_config_ops.AlterConfigsRequest, *, next_offset: int
    ) -> ControllerResult[alter_config_ops.AlterConfigsResponse]:
        """See ``quorum.controller.alter_configs``; validates against the latest image."""
        self._check_next_offset(next_offset)
        return alter_config_ops.alter_configs(self._latest, request)

    def alter_client_quotas(
        self, request: client_quota_ops.AlterClientQuotasRequest, *, next_offset: int
    ) -> ControllerResult[client_quota_ops.AlterClientQuotasResponse]:
        """See ``quorum.controller.client_quotas``; validates against the latest image."""
        self._check_next_offset(next_offset)
        return client_quota_ops.alter_client_quotas(self._latest, request)

    def create_acls(
        self, bindings: Sequence[AclBinding], *, next_offset: int, new_acl_id: Callable[[], Uuid]
    ) -> ControllerResult[tuple[AclOutcome, ...]]:
        """See ``quorum.controller.acls.create_acls``; validates against the latest image."""
        self._check_next_offset(next_offset)
        return acl_ops.create_acls(self._latest, bindings, new_acl_id=new_acl_id)

    def delete_acls(
        self, filters: Sequence[AclBindingFilter], *, next_offset: int
    ) -> ControllerResult[tuple[AclOutcome, ...]]:
        """See ``quorum.controller.acls.delete_acls``; matches against the latest image."""
        self._check_next_offset(next_offset)
        return acl_ops.delete_acls(self._latest, filters)

    def describe_topics(self, topics: Sequence[DescribeTopic]) -> tuple[TopicDescription, ...]:
        """Read-only, from the committed image (never shows an uncommitted proposal)."""
        return describe_topics(self._committed, topics)

    def list_topics(self, *, include_internal: bool = True) -> tuple[TopicListing, ...]:
        return list_topics(self._committed, include_internal=include_internal)

    def metadata_topic_record(
        self, new_topic_id: Callable[[], Uuid], *, next_offset: int
    ) -> ControllerResult[Uuid] | None:
        """The ``TopicRecord`` giving ``__cluster_metadata`` its own id (KIP-516), or None if
        the latest image has it already. Proposed by a leader after its election."""
        self._check_next_offset(next_offset)
        image = self._latest
        if image.metadata_topic_id is not None:
            return None
        assert CLUSTER_METADATA_TOPIC_NAME not in image.topics_by_name, image.topics_by_name
        topic_id = topic_ops.draw_topic_id(new_topic_id, image, set())
        record = TopicRecord(name=CLUSTER_METADATA_TOPIC_NAME, topic_id=topic_id, internal=True)
        return ControllerResult((record,), topic_id)

    # ----- brokers ----------------------------------------------------------------------------

    def register_broker(
        self, request: RegisterBrokerRequest, *, next_offset: int, now_ms: int
    ) -> ControllerResult[RegisterBrokerResponse]:
        """See ``quorum.controller.brokers``. Codes: NONE, INVALID_REQUEST,
        DUPLICATE_BROKER_REGISTRATION."""
        self._check_next_offset(next_offset)
        return broker_ops.register_broker(
            self._latest,
            self._sessions,
            request,
            next_offset=next_offset,
            now_ms=now_ms,
            index=self._index,
            unclean_default=self._config.unclean_leader_election_enable,
        )

    def broker_heartbeat(
        self, request: BrokerHeartbeatRequest, *, next_offset: int, now_ms: int
    ) -> ControllerResult[BrokerHeartbeatResponse]:
        """See ``quorum.controller.brokers``. Codes: NONE, STALE_BROKER_EPOCH."""
        self._check_next_offset(next_offset)
        return broker_ops.broker_heartbeat(
            self._latest,
            self._sessions,
            request,
            now_ms=now_ms,
            index=self._index,
            unclean_default=self._config.unclean_leader_election_enable,
        )

    def fence_stale_brokers(
        self, *, now_ms: int, next_offset: int, max_brokers: int | None = None
    ) -> ControllerResult[tuple[int, ...]]:
        """Fence unfenced brokers silent for longer than the session timeout, at most
        ``max_brokers`` (the longest silent first; None: all) (response: their ids); their
        partitions lose them from ISRs and move leadership."""
        self._check_next_offset(next_offset)
        return broker_ops.fence_stale_brokers(
            self._latest,
            self._sessions,
            now_ms=now_ms,
            max_brokers=max_brokers,
            index=self._index,
            unclean_default=self._config.unclean_leader_election_enable,
        )

    def allocate_producer_ids(
        self, request: AllocateProducerIdsRequest, *, next_offset: int
    ) -> ControllerResult[AllocateProducerIdsResponse]:
        """See ``quorum.controller.producer_ids``; validates against the latest image, so two
        allocations in flight get distinct blocks. Codes: NONE, STALE_BROKER_EPOCH,
        UNKNOWN_SERVER_ERROR."""
        self._check_next_offset(next_offset)
        return producer_id_ops.allocate_producer_ids(self._latest, request)

    def alter_partition(
        self, request: AlterPartitionRequest, *, next_offset: int
    ) -> ControllerResult[AlterPartitionResponse]:
        """See ``quorum.controller.alter_partition``; validates against the latest image, so a
        second change of one partition in flight is checked against the first (its partition
        epoch moved)."""
        self._check_next_offset(next_offset)
        return alter_partition_ops.alter_partition(self._latest, request)

    def elect_leaders(
        self, request: ElectLeadersRequest, *, next_offset: int
    ) -> ControllerResult[ElectLeadersResponse]:
        """See ``quorum.controller.elections``; decides against the latest image."""
        self._check_next_offset(next_offset)
        return election_ops.elect_leaders(self._latest, request)

    def rebalance_leaders(
        self, *, next_offset: int, partitions_max: int = election_ops.ELECT_LEADERS_PARTITIONS_MAX
    ) -> ControllerResult[tuple[tuple[str, int], ...]]:
        """Kafka's ``auto.leader.rebalance.enable``: a preferred election for at most
        ``partitions_max`` of the partitions whose preferred replica is in the ISR and unfenced
        but does not lead (response: those elected, topic name and partition). Scans every
        partition of the latest image (O(partitions)), which is why the controller runs it only
        every ``leader.imbalance.check.interval.seconds``."""
        self._check_next_offset(next_offset)
        wanted = election_ops.preferred_imbalance(self._latest)[:partitions_max]
        if not wanted:
            return ControllerResult((), ())
        result = election_ops.elect_leaders(
            self._latest, ElectLeadersRequest(ElectionType.PREFERRED, wanted)
        )
        elected = tuple(
            (r.topic, r.partition)
            for r in result.response.results
            if r.error_code is ErrorCode.NONE
        )
        assert len(elected) == len(result.records), (elected, result.records)
        return ControllerResult(result.records, elected, is_atomic=False)

    def next_session_expiry_ms(self) -> int | None:
        """When ``fence_stale_brokers`` may next have work (None: no session to watch)."""
        return self._sessions.next_expiry_ms(self._latest)


def _changes_metadata(batch: DecodedBatch) -> bool:
    return not batch.control and any(type(r) is not NoOpRecord for r in batch.records)
