"""One consumer group under Kafka's classic group protocol, pure (docs/groups.md#the-state-machine):
Kafka's ``ClassicGroup`` and the classic half of its ``GroupMetadataManager``, with time passed
in (``now_ms``, a monotonic clock's milliseconds) and no I/O.

States and their transitions (Kafka's ``ClassicGroupState``)::

    Empty               -> PreparingRebalance (a member joins) | Dead (deleted)
    PreparingRebalance  -> CompletingRebalance (every member rejoined, or the rebalance
                           timeout passed: the late ones are removed) | Empty (none left)
    CompletingRebalance -> Stable (the leader's SyncGroup persisted the assignment)
                           | PreparingRebalance (a member left, expired, or changed)
    Stable              -> PreparingRebalance (a member joined, left, expired or changed)
    Dead                -> (nothing: the group is gone)

A request that must wait (a JoinGroup until the rebalance completes, a SyncGroup until the
leader's assignment is persisted) leaves a ``waiter`` (any object of the shell's) with the
group; when it is answered, the answer is put in ``outbox`` as a ``Completion``. Whatever must
be written to ``__consumer_offsets`` is put there as a ``Persist``: the shell writes it and
calls ``persisted`` with the outcome. The shell drains ``outbox`` after every call.
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Final

from kio.schema.errors import ErrorCode as E

from broker.groups.records import GroupMetadataValue, MemberMetadata

__all__ = [
    "Completion",
    "Group",
    "GroupSettings",
    "GroupState",
    "JoinRequest",
    "Member",
    "Persist",
]

NO_GENERATION: Final = -1
CONSUMER_PROTOCOL_TYPE: Final = "consumer"


class GroupState(enum.Enum):
    """Kafka's names, as DescribeGroups and ListGroups answer them."""

    EMPTY = "Empty"
    PREPARING_REBALANCE = "PreparingRebalance"
    COMPLETING_REBALANCE = "CompletingRebalance"
    STABLE = "Stable"
    DEAD = "Dead"


@dataclass(frozen=True, slots=True)
class GroupSettings:
    """The broker's group configs (Kafka's names and defaults)."""

    min_session_timeout_ms: int = 6_000  # group.min.session.timeout.ms
    max_session_timeout_ms: int = 1_800_000  # group.max.session.timeout.ms
    initial_rebalance_delay_ms: int = 3_000  # group.initial.rebalance.delay.ms
    max_size: int = 2**31 - 1  # group.max.size
    # Kafka's classic new-member join timeout (5 minutes): a new member that does not rejoin
    # a rebalance it started is removed after this long.
    new_member_join_timeout_ms: int = 300_000


@dataclass(frozen=True, slots=True)
class JoinRequest:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    session_timeout_ms: int
    rebalance_timeout_ms: int
    protocol_type: str
    protocols: tuple[tuple[str, bytes], ...]
    require_known_member_id: bool  # JoinGroup v4+ without a group instance id


@dataclass(frozen=True, slots=True)
class Completion:
    """The answer to a request that waited: ``values`` by the response's field names."""

    waiter: Any
    values: dict[str, Any]


@dataclass(frozen=True, slots=True)
class Persist:
    """Write the group's metadata (``value``; None: a tombstone). ``generation`` names the
    SyncGroup that waits for it (-1: nobody waits); the shell calls ``Group.persisted``."""

    group_id: str
    value: GroupMetadataValue | None
    generation: int = NO_GENERATION


@dataclass(slots=True)
class Member:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    session_timeout_ms: int
    protocol_type: str
    protocols: tuple[tuple[str, bytes], ...]
    assignment: bytes = b""
    join_waiter: Any = None
    sync_waiter: Any = None
    heartbeat_deadline_ms: int = 0
    is_new: bool = False
    new_deadline_ms: int = 0

    def metadata(self, protocol: str | None) -> bytes:
        for name, data in self.protocols:
            if name == protocol:
                return data
        return b""

    def same_protocols(self, protocols: tuple[tuple[str, bytes], ...]) -> bool:
        return self.protocols == protocols


def _error_join(code: E, member_id: str) -> dict[str, Any]:
    return {
        "error_code": code,
        "generation_id": NO_GENERATION,
        "protocol_type": None,
        "protocol_name": None,
        "leader": "",
        "member_id": member_id,
        "members": [],
        "skip_assignment": False,
    }


def _error_sync(code: E) -> dict[str, Any]:
    return {"error_code": code, "protocol_type": None, "protocol_name": None, "assignment": b""}


@dataclass(slots=True)
class Group:
    group_id: str
    settings: GroupSettings
    new_member_id: Callable[[str], str]
    state: GroupState = GroupState.EMPTY
    generation: int = 0
    protocol_type: str | None = None
    protocol: str | None = None
    leader: str | None = None
    members: dict[str, Member] = field(default_factory=dict)
    static: dict[str, str] = field(default_factory=dict)  # group instance id -> member id
    pending: dict[str, int] = field(default_factory=dict)  # member id -> join deadline
    join_deadline_ms: int | None = None
    initial_delay: bool = False
    initial_remaining_ms: int = 0
    joined_during_delay: bool = False
    sync_deadline_ms: int | None = None
    state_timestamp_ms: int = -1
    outbox: list[Completion | Persist] = field(default_factory=list)

    # ----- what every request checks ----------------------------------------------------------

    def is_(self, *states: GroupState) -> bool:
        return self.state in states

    def _transition(self, state: GroupState) -> None:
        allowed = {
            GroupState.EMPTY: {GroupState.PREPARING_REBALANCE, GroupState.DEAD},
            GroupState.PREPARING_REBALANCE: {
                GroupState.COMPLETING_REBALANCE,
                GroupState.EMPTY,
                GroupState.DEAD,
            },
            GroupState.COMPLETING_REBALANCE: {
                GroupState.STABLE,
                GroupState.PREPARING_REBALANCE,
                GroupState.DEAD,
            },
            GroupState.STABLE: {GroupState.PREPARING_REBALANCE, GroupState.DEAD},
            GroupState.DEAD: {GroupState.DEAD},
        }
        assert state in allowed[self.state], f"{self.group_id}: {self.state} -> {state}"
        self.state = state

    def _static_error(self, member_id: str, instance_id: str | None) -> E | None:
        """Kafka's ``validateStaticMember``: an instance id must name this member."""
        if instance_id is None:
            return None
        known = self.static.get(instance_id)
        if known is None:
            return E.unknown_member_id
        if known != member_id:
            return E.fenced_instance_id
        return None

    def _member_error(self, member_id: str, instance_id: str | None) -> E | None:
        error = self._static_error(member_id, instance_id)
        if error is not None:
            return error
        if member_id not in self.members:
            return E.unknown_member_id
        return None

    # ----- JoinGroup ------------------------------------------------------------------------------

    def join(self, request: JoinRequest, waiter: Any, now_ms: int) -> dict[str, Any] | None:
        """Kafka's classic JoinGroup on an existing group (the shell made an Empty one for a
        new group id). The answer now, or None: ``waiter`` is answered through ``outbox``."""
        settings = self.settings
        if self.is_(GroupState.DEAD):
            return _error_join(E.coordinator_not_available, request.member_id)
        if not (
            settings.min_session_timeout_ms
            <= request.session_timeout_ms
            <= settings.max_session_timeout_ms
        ):
            return _error_join(E.invalid_session_timeout, request.member_id)
        if not self._supports(request.protocol_type, request.protocols):
            return _error_join(E.inconsistent_group_protocol, request.member_id)
        if request.member_id == "":
            return self._join_unknown(request, waiter, now_ms)
        return self._join_known(request, waiter, now_ms)

    def _supports(self, protocol_type: str, protocols: tuple[tuple[str, bytes], ...]) -> bool:
        if not protocol_type or not protocols:
            return False
        if not self.members:
            return True
        if protocol_type != self.protocol_type:
            return False
        names = {name for name, _ in protocols}
        return bool(names & self._candidates())

    def _candidates(self) -> set[str]:
        members = list(self.members.values())
        common = {name for name, _ in members[0].protocols} if members else set()
        for member in members[1:]:
            common &= {name for name, _ in member.protocols}
        return common

    def _join_unknown(
        self, request: JoinRequest, waiter: Any, now_ms: int
    ) -> dict[str, Any] | None:
        instance = request.group_instance_id
        if instance is not None and instance in self.static:
            return self._replace_static(request, waiter, now_ms)
        if len(self.members) + len(self.pending) >= self.settings.max_size:
            return _error_join(E.group_max_size_reached, "")
        member_id = self.new_member_id(request.client_id)
        if request.require_known_member_id and instance is None:
            # KIP-394: the member id is given first; the member joins with it.
            self.pending[member_id] = now_ms + request.session_timeout_ms
            return _error_join(E.member_id_required, member_id)
        self._add_member(member_id, request, waiter, now_ms)
        return None

    def _join_known(self, request: JoinRequest, waiter: Any, now_ms: int) -> dict[str, Any] | None:
        member_id = request.member_id
        if member_id in self.pending:
            del self.pending[member_id]
            if len(self.members) >= self.settings.max_size:
                return _error_join(E.group_max_size_reached, member_id)
            self._add_member(member_id, request, waiter, now_ms)
            return None
        error = self._member_error(member_id, request.group_instance_id)
        if error is not None:
            return _error_join(error, member_id)
        member = self.members[member_id]
        if self.is_(GroupState.PREPARING_REBALANCE):
            self._update_member(member, request, waiter, now_ms)
            self._maybe_complete_join(now_ms)
            return None
        if self.is_(GroupState.COMPLETING_REBALANCE):
            if member.same_protocols(request.protocols):
                return self._join_answer(member)  # a retry of a join already answered
            self._update_member(member, request, waiter, now_ms)
            self._prepare_rebalance(now_ms)
            return None
        if self.is_(GroupState.STABLE):
            if member_id == self.leader or not member.same_protocols(request.protocols):
                self._update_member(member, request, waiter, now_ms)
                self._prepare_rebalance(now_ms)
                return None
            return self._join_answer(member)
        # Empty with a known member cannot be: members leave an Empty group.
        return _error_join(E.unknown_member_id, member_id)

    def _replace_static(
        self, request: JoinRequest, waiter: Any, now_ms: int
    ) -> dict[str, Any] | None:
        """A static member rejoined without its member id (a restart): it gets a new one, the
        old id is fenced, and a Stable group keeps its assignment without a rebalance."""
        instance = request.group_instance_id
        assert instance is not None
        old_id = self.static[instance]
        old = self.members.pop(old_id)
        new_id = self.new_member_id(request.client_id)
        if old.join_waiter is not None:
            self.outbox.append(
                Completion(old.join_waiter, _error_join(E.fenced_instance_id, old_id))
            )
        if old.sync_waiter is not None:
            self.outbox.append(Completion(old.sync_waiter, _error_sync(E.fenced_instance_id)))
        old.join_waiter = old.sync_waiter = None
        old.member_id = new_id
        self.members[new_id] = old
        self.static[instance] = new_id
        if self.leader == old_id:
            self.leader = new_id
        unchanged = old.same_protocols(request.protocols)
        if self.is_(GroupState.STABLE) and unchanged and self.leader != new_id:
            old.client_id, old.client_host = request.client_id, request.client_host
            old.heartbeat_deadline_ms = now_ms + old.session_timeout_ms
            self.outbox.append(Persist(self.group_id, self.metadata_value()))
            return self._join_answer(old)
        self._update_member(old, request, waiter, now_ms)
        if self.is_(GroupState.PREPARING_REBALANCE):
            self._maybe_complete_join(now_ms)
        else:
            self._prepare_rebalance(now_ms)
        return None

    def _add_member(self, member_id: str, request: JoinRequest, waiter: Any, now_ms: int) -> None:
        if not self.members:
            self.protocol_type = request.protocol_type
        member = Member(
            member_id=member_id,
            group_instance_id=request.group_instance_id,
            client_id=request.client_id,
            client_host=request.client_host,
            rebalance_timeout_ms=request.rebalance_timeout_ms,
            session_timeout_ms=request.session_timeout_ms,
            protocol_type=request.protocol_type,
            protocols=request.protocols,
            join_waiter=waiter,
            heartbeat_deadline_ms=now_ms + request.session_timeout_ms,
            is_new=True,
            new_deadline_ms=now_ms + self.settings.new_member_join_timeout_ms,
        )
        self.members[member_id] = member
        if request.group_instance_id is not None:
            self.static[request.group_instance_id] = member_id
        if self.leader is None:
            self.leader = member_id
        if self.is_(GroupState.PREPARING_REBALANCE):
            if self.initial_delay:
                self.joined_during_delay = True
            self._maybe_complete_join(now_ms)
        else:
            self._prepare_rebalance(now_ms)

    def _update_member(
        self, member: Member, request: JoinRequest, waiter: Any, now_ms: int
    ) -> None:
        if member.join_waiter is not None and member.join_waiter is not waiter:
            # Kafka answers the older join of the same member with the newer's outcome; an
            # error tells that client to rejoin, which is what it is doing anyway.
            self.outbox.append(
                Completion(
                    member.join_waiter, _error_join(E.rebalance_in_progress, member.member_id)
                )
            )
        member.protocols = request.protocols
        member.protocol_type = request.protocol_type
        member.rebalance_timeout_ms = request.rebalance_timeout_ms
        member.session_timeout_ms = request.session_timeout_ms
        member.client_id, member.client_host = request.client_id, request.client_host
        member.join_waiter = waiter
        member.heartbeat_deadline_ms = now_ms + request.session_timeout_ms

    # ----- rebalances -----------------------------------------------------------------------------

    def _rebalance_timeout_ms(self) -> int:
        return max((m.rebalance_timeout_ms for m in self.members.values()), default=0)

    def _prepare_rebalance(self, now_ms: int) -> None:
        if self.is_(GroupState.COMPLETING_REBALANCE):
            self._reset_assignments(E.rebalance_in_progress)
        timeout = self._rebalance_timeout_ms()
        if self.is_(GroupState.EMPTY) and self.settings.initial_rebalance_delay_ms > 0:
            delay = min(self.settings.initial_rebalance_delay_ms, timeout)
            self.initial_delay = True
            self.joined_during_delay = False
            self.initial_remaining_ms = max(timeout - delay, 0)
            self.join_deadline_ms = now_ms + delay
        else:
            self.initial_delay = False
            self.join_deadline_ms = now_ms + timeout
        self.sync_deadline_ms = None
        self._transition(GroupState.PREPARING_REBALANCE)
        self.state_timestamp_ms = now_ms
        self._maybe_complete_join(now_ms)

    def _reset_assignments(self, code: E) -> None:
        for member in self.members.values():
            member.assignment = b""
            if member.sync_waiter is not None:
                self.outbox.append(Completion(member.sync_waiter, _error_sync(code)))
                member.sync_waiter = None

    def _all_joined(self) -> bool:
        return not self.pending and all(m.join_waiter is not None for m in self.members.values())

    def _maybe_complete_join(self, now_ms: int) -> None:
        if not self.is_(GroupState.PREPARING_REBALANCE) or self.initial_delay:
            return
        if self._all_joined():
            self._complete_join(now_ms)

    def _complete_join(self, now_ms: int) -> None:
        """Kafka's ``completeClassicGroupJoin``: late members are removed, the generation moves
        on, the protocol is chosen, and every waiting join is answered (the leader with every
        member's metadata)."""
        for member in [m for m in self.members.values() if m.join_waiter is None]:
            self._remove(member, E.unknown_member_id)
        self.join_deadline_ms = None
        self.generation += 1
        self.state_timestamp_ms = now_ms
        if not self.members:
            self.protocol = None
            self.leader = None
            self._transition(GroupState.EMPTY)
            self.outbox.append(Persist(self.group_id, self.metadata_value()))
            return
        self.protocol = self._select_protocol()
        if self.leader not in self.members:
            self.leader = next(iter(self.members))
        self._transition(GroupState.COMPLETING_REBALANCE)
        self.sync_deadline_ms = now_ms + self._rebalance_timeout_ms()
        for member in self.members.values():
            answer = self._join_answer(member)
            self.outbox.append(Completion(member.join_waiter, answer))
            member.join_waiter = None
            member.is_new = False
            member.heartbeat_deadline_ms = now_ms + member.session_timeout_ms

    def _select_protocol(self) -> str:
        candidates = self._candidates()
        assert candidates, "every member supports a common protocol (checked at join)"
        votes: dict[str, int] = {}
        for member in self.members.values():
            choice = next(name for name, _ in member.protocols if name in candidates)
            votes[choice] = votes.get(choice, 0) + 1
        most = max(votes.values())
        first = next(iter(self.members.values()))
        return next(n for n, _ in first.protocols if votes.get(n) == most)

    def _join_answer(self, member: Member) -> dict[str, Any]:
        leader = member.member_id == self.leader
        return {
            "error_code": E.none,
            "generation_id": self.generation,
            "protocol_type": self.protocol_type,
            "protocol_name": self.protocol,
            "leader": self.leader or "",
            "member_id": member.member_id,
            "skip_assignment": False,
            "members": [
                {
                    "member_id": m.member_id,
                    "group_instance_id": m.group_instance_id,
                    "metadata": m.metadata(self.protocol),
                }
                for m in self.members.values()
            ]
            if leader
            else [],
        }

    def _remove(self, member: Member, code: E) -> None:
        """A member leaves the group (left, expired, late, fenced); its waiting requests are
        answered ``code``."""
        if member.join_waiter is not None:
            self.outbox.append(Completion(member.join_waiter, _error_join(code, member.member_id)))
        if member.sync_waiter is not None:
            self.outbox.append(Completion(member.sync_waiter, _error_sync(code)))
        del self.members[member.member_id]
        if member.group_instance_id is not None:
            self.static.pop(member.group_instance_id, None)
        if self.leader == member.member_id:
            self.leader = next(iter(self.members), None)

    def _member_gone(self, now_ms: int) -> None:
        if self.is_(GroupState.STABLE, GroupState.COMPLETING_REBALANCE):
            self._prepare_rebalance(now_ms)
        elif self.is_(GroupState.PREPARING_REBALANCE):
            self._maybe_complete_join(now_ms)

    # ----- SyncGroup ------------------------------------------------------------------------------

    def sync(
        self,
        *,
        member_id: str,
        instance_id: str | None,
        generation: int,
        protocol_type: str | None,
        protocol_name: str | None,
        assignments: dict[str, bytes],
        waiter: Any,
    ) -> dict[str, Any] | None:
        if self.is_(GroupState.DEAD):
            return _error_sync(E.coordinator_not_available)
        error = self._member_error(member_id, instance_id)
        if error is not None:
            return _error_sync(error)
        if generation != self.generation:
            return _error_sync(E.illegal_generation)
        if (protocol_type is not None and protocol_type != self.protocol_type) or (
            protocol_name is not None and protocol_name != self.protocol
        ):
            return _error_sync(E.inconsistent_group_protocol)
        member = self.members[member_id]
        if self.is_(GroupState.PREPARING_REBALANCE):
            return _error_sync(E.rebalance_in_progress)
        if self.is_(GroupState.STABLE):
            return self._sync_answer(member)
        if self.is_(GroupState.COMPLETING_REBALANCE):
            if member.sync_waiter is not None and member.sync_waiter is not waiter:
                self.outbox.append(
                    Completion(member.sync_waiter, _error_sync(E.rebalance_in_progress))
                )
            member.sync_waiter = waiter
            if member_id == self.leader:
                for other in self.members.values():
                    other.assignment = assignments.get(other.member_id, b"")
                self.outbox.append(
                    Persist(self.group_id, self.metadata_value(), generation=self.generation)
                )
            return None
        return _error_sync(E.unknown_member_id)  # Empty

    def _sync_answer(self, member: Member) -> dict[str, Any]:
        return {
            "error_code": E.none,
            "protocol_type": self.protocol_type,
            "protocol_name": self.protocol,
            "assignment": member.assignment,
        }

    def persisted(self, generation: int, error: E | None, now_ms: int) -> None:
        """The leader's assignment of ``generation`` was written (``error`` None) or not."""
        if generation != self.generation or not self.is_(GroupState.COMPLETING_REBALANCE):
            return
        if error is not None:
            self._reset_assignments(error)
            self._prepare_rebalance(now_ms)
            return
        self._transition(GroupState.STABLE)
        self.state_timestamp_ms = now_ms
        self.sync_deadline_ms = None
        for member in self.members.values():
            if member.sync_waiter is not None:
                self.outbox.append(Completion(member.sync_waiter, self._sync_answer(member)))
                member.sync_waiter = None

    # ----- Heartbeat, LeaveGroup ------------------------------------------------------------------

    def heartbeat(self, member_id: str, instance_id: str | None, generation: int, now_ms: int) -> E:
        if self.is_(GroupState.DEAD):
            return E.coordinator_not_available
        error = self._member_error(member_id, instance_id)
        if error is not None:
            return error
        if generation != self.generation:
            return E.illegal_generation
        member = self.members[member_id]
        if self.is_(GroupState.EMPTY):
            return E.unknown_member_id
        member.heartbeat_deadline_ms = now_ms + member.session_timeout_ms
        if self.is_(GroupState.PREPARING_REBALANCE):
            return E.rebalance_in_progress
        return E.none

    def leave(self, member_id: str, instance_id: str | None, now_ms: int) -> tuple[E, str]:
        """One member of a LeaveGroup: (code, the member id it named)."""
        if self.is_(GroupState.DEAD):
            return E.coordinator_not_available, member_id
        if instance_id is not None:
            known = self.static.get(instance_id)
            if known is None:
                return E.unknown_member_id, member_id
            if member_id and known != member_id:
                return E.fenced_instance_id, member_id
            member_id = known
        if member_id in self.pending:
            del self.pending[member_id]
            self._maybe_complete_join(now_ms)
            return E.none, member_id
        member = self.members.get(member_id)
        if member is None:
            return E.unknown_member_id, member_id
        self._remove(member, E.unknown_member_id)
        self._member_gone(now_ms)
        return E.none, member_id

    # ----- OffsetCommit ---------------------------------------------------------------------------

    def commit_error(self, member_id: str, instance_id: str | None, generation: int) -> E | None:
        """Kafka's ``ClassicGroup.validateOffsetCommit``: None when the commit may be written."""
        if self.is_(GroupState.DEAD):
            return E.coordinator_not_available
        if generation < 0 and self.is_(GroupState.EMPTY):
            return None  # a simple (admin) commit, outside any generation
        error = self._static_error(member_id, instance_id)
        if error is not None:
            return error
        if member_id not in self.members:
            return E.unknown_member_id
        if generation != self.generation:
            return E.illegal_generation
        if self.is_(GroupState.COMPLETING_REBALANCE):
            return E.rebalance_in_progress
        return None

    # ----- timers ---------------------------------------------------------------------------------

    def poll(self, now_ms: int) -> int | None:
        """Expire what is due; the next deadline (None: none)."""
        if self.is_(GroupState.DEAD):
            return None
        for member_id, deadline in list(self.pending.items()):
            if now_ms >= deadline:
                del self.pending[member_id]
                self._maybe_complete_join(now_ms)
        for member in list(self.members.values()):
            if member.member_id not in self.members:
                continue
            if member.join_waiter is not None:
                expired = member.is_new and now_ms >= member.new_deadline_ms
            elif member.sync_waiter is not None:
                expired = False
            else:
                expired = now_ms >= member.heartbeat_deadline_ms
            if expired:
                self._remove(member, E.unknown_member_id)
                self._member_gone(now_ms)
        if self.join_deadline_ms is not None and now_ms >= self.join_deadline_ms:
            if self.initial_delay and self.joined_during_delay and self.initial_remaining_ms > 0:
                delay = min(self.settings.initial_rebalance_delay_ms, self.initial_remaining_ms)
                self.initial_remaining_ms -= delay
                self.joined_during_delay = False
                self.join_deadline_ms = now_ms + delay
            elif self.is_(GroupState.PREPARING_REBALANCE):
                self.initial_delay = False
                if self._all_joined():
                    self._complete_join(now_ms)
                else:
                    self.pending.clear()
                    self._complete_join(now_ms)
        if self.sync_deadline_ms is not None and now_ms >= self.sync_deadline_ms:
            self.sync_deadline_ms = None
            if self.is_(GroupState.COMPLETING_REBALANCE):
                for member in [m for m in self.members.values() if m.sync_waiter is None]:
                    self._remove(member, E.rebalance_in_progress)
                self._prepare_rebalance(now_ms)
        return self.next_deadline_ms()

    def next_deadline_ms(self) -> int | None:
        deadlines = [d for d in (self.join_deadline_ms, self.sync_deadline_ms) if d is not None]
        deadlines += self.pending.values()
        for member in self.members.values():
            if member.join_waiter is not None:
                if member.is_new:
                    deadlines.append(member.new_deadline_ms)
            elif member.sync_waiter is None:
                deadlines.append(member.heartbeat_deadline_ms)
        return min(deadlines, default=None)

    # ----- persistence ----------------------------------------------------------------------------

    def metadata_value(self, timestamp_ms: int = -1) -> GroupMetadataValue:
        return GroupMetadataValue(
            protocol_type=self.protocol_type or "",
            generation=self.generation,
            protocol=self.protocol,
            leader=self.leader if self.members else None,
            current_state_timestamp_ms=timestamp_ms,
            members=tuple(
                MemberMetadata(
                    member_id=m.member_id,
                    group_instance_id=m.group_instance_id,
                    client_id=m.client_id,
                    client_host=m.client_host,
                    rebalance_timeout_ms=m.rebalance_timeout_ms,
                    session_timeout_ms=m.session_timeout_ms,
                    subscription=m.metadata(self.protocol),
                    assignment=m.assignment,
                )
                for m in self.members.values()
            ),
        )

    def load(self, value: GroupMetadataValue, now_ms: int) -> None:
        """The group as a record left it (a new coordinator loading the partition): Stable
        with its members (their sessions start now), or Empty."""
        assert self.is_(GroupState.EMPTY) and not self.members
        self.generation = value.generation
        self.protocol_type = value.protocol_type or None
        self.protocol = value.protocol
        for stored in value.members:
            member = Member(
                member_id=stored.member_id,
                group_instance_id=stored.group_instance_id,
                client_id=stored.client_id,
                client_host=stored.client_host,
                rebalance_timeout_ms=stored.rebalance_timeout_ms,
                session_timeout_ms=stored.session_timeout_ms,
                protocol_type=value.protocol_type,
                protocols=((value.protocol or "", stored.subscription),),
                assignment=stored.assignment,
                heartbeat_deadline_ms=now_ms + stored.session_timeout_ms,
            )
            self.members[member.member_id] = member
            if member.group_instance_id is not None:
                self.static[member.group_instance_id] = member.member_id
        if self.members:
            self.leader = value.leader if value.leader in self.members else next(iter(self.members))
            self.state = GroupState.STABLE  # a load, not a transition
        self.state_timestamp_ms = now_ms

    def dead(self) -> None:
        """Deleted, or unloaded: every waiting request is told to find the coordinator again."""
        for member in list(self.members.values()):
            self._remove(member, E.not_coordinator)
        self.pending.clear()
        self.state = GroupState.DEAD
