"""Broker registration, heartbeats, fencing and unfencing (KIP-631), as pure functions.

Each function validates against an image and returns records plus a response; none mutates
the image. The only state they touch is ``BrokerSessions``, the active controller's volatile
table of when each broker was last heard from (Kafka's ``BrokerHeartbeatManager``): it is not in
the log, and a newly active controller starts with an empty one.

Rules (docs/architecture.md#the-controller):

- ``RegisterBroker``: the broker epoch is the offset of its ``RegisterBrokerRecord``. The same
  id with another incarnation id while the old registration's session lives is
  ``DUPLICATE_BROKER_REGISTRATION``; the same incarnation (a retry) or an expired session is
  replaced by a new registration with a new epoch. Every registration starts fenced; if the
  replaced registration was unfenced, the broker also leaves ISRs and leadership first, as if
  fenced.
- Sessions: a broker's session lives while its last register/heartbeat is at most
  ``broker.session.timeout.ms`` old. A controller that has not heard from a registered,
  unfenced broker yet (it just became active) gives it a fresh session from the first time it
  looks; a fenced broker it has not heard from has no live session (so a restarted broker does
  not wait out a session nobody is using, as in Kafka, where fenced brokers have no session).
- Controlled shutdown (Kafka's): a heartbeat with ``want_shut_down`` fences the broker at once
  (it leaves ISRs and leadership moves, as below) and ends its session, and the answer says
  ``should_shut_down``. A broker restarted with a new incarnation then registers at once
  instead of waiting out the old session (DUPLICATE_BROKER_REGISTRATION).
- ``BrokerHeartbeat``: an unknown broker or a wrong epoch is ``STALE_BROKER_EPOCH``. The broker
  is caught up once its applied metadata offset reaches its own ``RegisterBrokerRecord``
  (Kafka's rule: ``currentMetadataOffset >= registerBrokerRecordOffset``), i.e. it has seen
  its own registration and everything before it. A fenced broker that is caught up is unfenced.
- Fencing (session expired, or re-registration): the broker leaves every ISR it is in, except
  that the last ISR member stays (Kafka keeps it so the partition can recover when it returns);
  where it led, the first replica (in replica order) that is in the new ISR and unfenced
  becomes leader, or none (-1). With ``unclean.leader.election.enable`` (the topic's config,
  else the controller's; ``configs.unclean_leader_election_enabled``), a partition that so
  loses its leader with no ISR member available elects its first unfenced, registered replica
  instead, with the ISR [it] (what only the old ISR held may be lost: that is what unclean
  means). Each change bumps the partition epoch, and a new leader the leader epoch.
- Unfencing: a broker's log may be behind when it returns, so it does not rejoin ISRs by
  itself: the partition's leader adds it back with AlterPartition once its copy has caught up
  (``alter_partition.py``). What unfencing does: a leaderless partition whose ISR holds the
  broker (fencing kept it as the last member: it has the committed data) elects it leader; a
  leaderless partition with unclean election enabled elects it if it is a replica, with the
  ISR [it]. Invariant: a fenced broker is in an ISR only as its sole member, and never leads.

Fencing and unfencing visit the broker's own partitions, from the active controller's
``BrokerPartitionIndex`` (Kafka's ``BrokersToIsrs``; without one, an index of the image is built
first, O(partitions)). The records
of one result are ordered so a split at any point leaves a safe state: partition changes before
``FenceBrokerRecord``, ``UnfenceBrokerRecord`` before partition changes.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable

from quorum.controller.broker_index import BrokerPartitionIndex
from quorum.controller.configs import unclean_leader_election_enabled
from quorum.controller.names import quote
from quorum.controller.requests import (
    BrokerHeartbeatRequest,
    BrokerHeartbeatResponse,
    RegisterBrokerRequest,
    RegisterBrokerResponse,
)
from quorum.controller.result import ControllerResult
from quorum.errors import ErrorCode
from quorum.ids import ZERO_UUID, Uuid
from quorum.limits import INT32_MAX
from quorum.metadata.image import NO_LEADER, MetadataImage, PartitionImage, TopicImage
from quorum.metadata.records import (
    FenceBrokerRecord,
    MetadataRecord,
    PartitionChangeRecord,
    RegisterBrokerRecord,
    UnfenceBrokerRecord,
)

__all__ = [
    "BrokerSessions",
    "broker_heartbeat",
    "fence_stale_brokers",
    "fencing_changes",
    "register_broker",
    "unfencing_changes",
]


class BrokerSessions:
    """When the active controller last heard from each broker (volatile, never in the log)."""

    def __init__(self, session_timeout_ms: int) -> None:
        assert session_timeout_ms > 0, session_timeout_ms
        self.session_timeout_ms = session_timeout_ms
        self._last_contact_ms: dict[int, int] = {}

    def touch(self, broker_id: int, now_ms: int) -> None:
        self._last_contact_ms[broker_id] = now_ms

    def last_contact_ms(self, broker_id: int) -> int | None:
        return self._last_contact_ms.get(broker_id)

    def is_expired(self, broker_id: int, now_ms: int) -> bool:
        last = self._last_contact_ms.get(broker_id)
        return last is not None and now_ms - last > self.session_timeout_ms

    def start_if_unknown(self, broker_id: int, now_ms: int) -> None:
        self._last_contact_ms.setdefault(broker_id, now_ms)

    def forget_absent(self, registered: Collection[int]) -> None:
        """Drop sessions of brokers no longer registered (bounds the table)."""
        for broker_id in [b for b in self._last_contact_ms if b not in registered]:
            del self._last_contact_ms[broker_id]

    def end(self, broker_id: int) -> None:
        """The broker shut down cleanly: it has no session any more."""
        self._last_contact_ms.pop(broker_id, None)

    def clear(self) -> None:
        self._last_contact_ms.clear()

    def next_expiry_ms(self, image: MetadataImage) -> int | None:
        """When the earliest live session of an unfenced broker expires, or None."""
        deadlines = [
            last + self.session_timeout_ms + 1
            for broker_id, last in self._last_contact_ms.items()
            if (broker := image.brokers.get(broker_id)) is not None and not broker.fenced
        ]
        return min(deadlines, default=None)


# ----- partition changes --------------------------------------------------------------------


def _elect(replicas: tuple[int, ...], isr: tuple[int, ...], unavailable: Collection[int]) -> int:
    """The first replica (preferred order) that is in ``isr`` and available, or -1."""
    for replica in replicas:
        if replica in isr and replica not in unavailable:
            return replica
    return NO_LEADER


def _change_record(
    topic_id: Uuid, old: PartitionImage, isr: tuple[int, ...], leader: int
) -> PartitionChangeRecord | None:
    if isr == old.isr and leader == old.leader:
        return None
    assert old.partition_epoch < INT32_MAX, old
    return PartitionChangeRecord(
        topic_id=topic_id,
        partition=old.partition,
        isr=None if isr == old.isr else isr,
        leader=None if leader == old.leader else leader,
        leader_epoch=old.leader_epoch + (1 if leader != old.leader else 0),
        partition_epoch=old.partition_epoch + 1,
    )


def _unclean(image: MetadataImage, topic: TopicImage, unclean_default: bool) -> bool:
    return unclean_leader_election_enabled(topic.configs, image.cluster_configs, unclean_default)


def _elect_unclean(
    image: MetadataImage, replicas: tuple[int, ...], unavailable: Collection[int]
) -> int:
    """The first replica (preferred order) that is registered and available, or -1."""
    for replica in replicas:
        if replica in image.brokers and replica not in unavailable:
            return replica
    return NO_LEADER


def fencing_changes(
    image: MetadataImage,
    broker_ids: Iterable[int],
    index: BrokerPartitionIndex | None = None,
    *,
    unclean_default: bool = False,
) -> list[PartitionChangeRecord]:
    """Changes taking ``broker_ids`` (in order) out of ISRs and leadership, one per partition.
    ``index``: the image's ``BrokerPartitionIndex`` (None: built here); ``unclean_default``:
    the controller's ``unclean.leader.election.enable``."""
    leaving = list(broker_ids)
    if not leaving:
        return []
    leaving_set = set(leaving)
    unavailable = {b.broker_id for b in image.brokers.values() if b.fenced} | leaving_set
    records: list[PartitionChangeRecord] = []
    index = BrokerPartitionIndex(image) if index is None else index
    for topic, state in index.partitions_of(image, leaving):
        if leaving_set.isdisjoint(state.isr):
            continue  # the leader is in the ISR (or -1): nothing to change here
        isr, leader = state.isr, state.leader
        for broker_id in leaving:
            if broker_id in isr:
                isr = tuple(r for r in isr if r != broker_id) or isr  # keep the last one
                if leader == broker_id:
                    leader = _elect(state.replicas, isr, unavailable)
        if (
            leader == NO_LEADER
            and state.leader != NO_LEADER
            and _unclean(image, topic, unclean_default)
        ):
            leader = _elect_unclean(image, state.replicas, unavailable)
            if leader != NO_LEADER:
                isr = (leader,)
        record = _change_record(topic.topic_id, state, isr, leader)
        if record is not None:
            records.append(record)
    return records


def unfencing_changes(
    image: MetadataImage,
    broker_id: int,
    index: BrokerPartitionIndex | None = None,
    *,
    unclean_default: bool = False,
) -> list[PartitionChangeRecord]:
    """Leaders for the leaderless partitions ``broker_id`` may lead now that it is unfenced
    (see the module docstring: it does not rejoin ISRs). ``index``: the image's
    ``BrokerPartitionIndex`` (None: built here); ``unclean_default``: the controller's
    ``unclean.leader.election.enable``."""
    unavailable = {b.broker_id for b in image.brokers.values() if b.fenced} - {broker_id}
    records: list[PartitionChangeRecord] = []
    index = BrokerPartitionIndex(image) if index is None else index
    for topic, state in index.partitions_of(image, [broker_id]):
        if state.leader != NO_LEADER:
            continue
        isr, leader = state.isr, _elect(state.replicas, state.isr, unavailable)
        if leader == NO_LEADER and _unclean(image, topic, unclean_default):
            isr, leader = (broker_id,), broker_id
        record = _change_record(topic.topic_id, state, isr, leader)
        if record is not None:
            records.append(record)
    return records


# ----- operations ---------------------------------------------------------------------------


def register_broker(
    image: MetadataImage,
    sessions: BrokerSessions,
    request: RegisterBrokerRequest,
    *,
    next_offset: int,
    now_ms: int,
    index: BrokerPartitionIndex | None = None,
    unclean_default: bool = False,
) -> ControllerResult[RegisterBrokerResponse]:
    """Possible codes: NONE, INVALID_REQUEST, DUPLICATE_BROKER_REGISTRATION."""
    broker_id = request.broker_id
    if type(broker_id) is not int or not 0 <= broker_id <= INT32_MAX:
        return _register_error(
            ErrorCode.INVALID_REQUEST,
            f"broker id must be an int in [0, {INT32_MAX}], got {quote(broker_id)}",
        )
    if request.incarnation_id == ZERO_UUID:
        return _register_error(
            ErrorCode.INVALID_REQUEST,
            "incarnation id must not be the zero id: draw a random one at each broker start",
        )
    if request.rack is not None and not request.rack:
        return _register_error(
            ErrorCode.INVALID_REQUEST, "rack must be a non-empty name, or omitted for no rack"
        )
    existing = image.brokers.get(broker_id)
    records: list[MetadataRecord] = []
    if existing is not None:
        if existing.incarnation_id != request.incarnation_id:
            last = sessions.last_contact_ms(broker_id)
            if last is None and not existing.fenced:
                sessions.start_if_unknown(broker_id, now_ms)
                last = now_ms
            if last is not None and now_ms - last <= sessions.session_timeout_ms:
                return _register_error(
                    ErrorCode.DUPLICATE_BROKER_REGISTRATION,
                    f"Broker {broker_id} is already registered with incarnation "
                    f"{existing.incarnation_id}, whose session is live (last heard from "
                    f"{now_ms - last} ms ago; broker.session.timeout.ms = "
                    f"{sessions.session_timeout_ms}). Another process may be using node.id "
                    f"{broker_id}: give each broker its own node.id, or retry once the old "
                    "session has expired",
                )
        if not existing.fenced:
            records.extend(
                fencing_changes(image, [broker_id], index, unclean_default=unclean_default)
            )
    broker_epoch = next_offset + len(records)
    records.append(
        RegisterBrokerRecord(
            broker_id=broker_id,
            incarnation_id=request.incarnation_id,
            broker_epoch=broker_epoch,
            endpoints=request.endpoints,
            rack=request.rack,
            fenced=True,
        )
    )
    sessions.touch(broker_id, now_ms)
    return ControllerResult(
        tuple(records), RegisterBrokerResponse(broker_epoch=broker_epoch), is_atomic=False
    )


def _register_error(code: ErrorCode, message: str) -> ControllerResult[RegisterBrokerResponse]:
    return ControllerResult((), RegisterBrokerResponse(error_code=code, error_message=message))


def broker_heartbeat(
    image: MetadataImage,
    sessions: BrokerSessions,
    request: BrokerHeartbeatRequest,
    *,
    now_ms: int,
    index: BrokerPartitionIndex | None = None,
    unclean_default: bool = False,
) -> ControllerResult[BrokerHeartbeatResponse]:
    """Possible codes: NONE, STALE_BROKER_EPOCH."""
    existing = image.brokers.get(request.broker_id)
    if existing is None:
        return ControllerResult(
            (),
            BrokerHeartbeatResponse(
                error_code=ErrorCode.STALE_BROKER_EPOCH,
                error_message=f"No broker registration found for broker {request.broker_id}: "
                "register the broker (again) before heartbeating",
            ),
        )
    if existing.broker_epoch != request.broker_epoch:
        return ControllerResult(
            (),
            BrokerHeartbeatResponse(
                error_code=ErrorCode.STALE_BROKER_EPOCH,
                error_message=f"Expected broker epoch {existing.broker_epoch} for broker "
                f"{request.broker_id}, but got broker epoch {request.broker_epoch}: the broker "
                "was registered again since; register again to get the current epoch",
            ),
        )
    caught_up = request.current_metadata_offset >= existing.broker_epoch
    if request.want_shut_down:
        sessions.end(request.broker_id)
        records: list[MetadataRecord] = []
        if not existing.fenced:
            records.extend(
                fencing_changes(image, [existing.broker_id], index, unclean_default=unclean_default)
            )
            records.append(
                FenceBrokerRecord(broker_id=existing.broker_id, broker_epoch=existing.broker_epoch)
            )
        return ControllerResult(
            tuple(records),
            BrokerHeartbeatResponse(is_caught_up=caught_up, is_fenced=True, should_shut_down=True),
            is_atomic=False,
        )
    sessions.touch(request.broker_id, now_ms)
    if not existing.fenced or not caught_up:
        return ControllerResult(
            (), BrokerHeartbeatResponse(is_caught_up=caught_up, is_fenced=existing.fenced)
        )
    records = [
        UnfenceBrokerRecord(broker_id=existing.broker_id, broker_epoch=existing.broker_epoch)
    ]
    records.extend(
        unfencing_changes(image, existing.broker_id, index, unclean_default=unclean_default)
    )
    return ControllerResult(
        tuple(records), BrokerHeartbeatResponse(is_caught_up=True, is_fenced=False), is_atomic=False
    )


def fence_stale_brokers(
    image: MetadataImage,
    sessions: BrokerSessions,
    *,
    now_ms: int,
    max_brokers: int | None = None,
    index: BrokerPartitionIndex | None = None,
    unclean_default: bool = False,
) -> ControllerResult[tuple[int, ...]]:
    """Fence unfenced brokers whose session expired, the longest silent first, at most
    ``max_brokers`` of them (None: all); the response lists them in id order. The active
    controller fences one per operation (Kafka's ``maybeFenceOneStaleBroker``): with a million
    partitions one fence is a large batch of partition changes, and many at once would stall
    the loop that must also answer fetches and heartbeats."""
    sessions.forget_absent(image.brokers.keys())
    stale: list[int] = []
    for broker_id in sorted(image.brokers):
        if image.brokers[broker_id].fenced:
            continue
        sessions.start_if_unknown(broker_id, now_ms)
        if sessions.is_expired(broker_id, now_ms):
            stale.append(broker_id)
    if not stale:
        return ControllerResult((), ())
    if max_brokers is not None:
        stale.sort(key=lambda b: (sessions.last_contact_ms(b), b))
        stale = sorted(stale[:max_brokers])
    records: list[MetadataRecord] = list(
        fencing_changes(image, stale, index, unclean_default=unclean_default)
    )
    records.extend(
        FenceBrokerRecord(broker_id=b, broker_epoch=image.brokers[b].broker_epoch) for b in stale
    )
    return ControllerResult(tuple(records), tuple(stale), is_atomic=False)
