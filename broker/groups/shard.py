"""The groups and committed offsets of one ``__consumer_offsets`` partition, pure
(docs/groups.md#the-state-machine): what its coordinator holds in memory, rebuilt from the
partition's records when a broker becomes its leader (``replay``), and the records each change
is written as (Kafka's ``GroupCoordinatorShard``)."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from broker.groups.group import Completion, Group, GroupSettings, GroupState, Persist
from broker.groups.records import (
    GroupMetadataKey,
    GroupMetadataValue,
    OffsetCommitKey,
    OffsetCommitValue,
    RecordKey,
    RecordValue,
    encode_key,
    encode_value,
)

__all__ = ["GroupShard", "Record"]

Record = tuple[bytes, bytes | None]
TopicPartition = tuple[str, int]


def offset_record(
    group_id: str, topic: str, partition: int, value: OffsetCommitValue | None
) -> Record:
    key = encode_key(OffsetCommitKey(group_id, topic, partition))
    return key, None if value is None else encode_value(value)


def group_record(group_id: str, value: GroupMetadataValue | None) -> Record:
    return encode_key(GroupMetadataKey(group_id)), None if value is None else encode_value(value)


@dataclass
class GroupShard:
    partition: int
    settings: GroupSettings
    new_member_id: Callable[[str], str]
    groups: dict[str, Group] = field(default_factory=dict)
    offsets: dict[str, dict[TopicPartition, OffsetCommitValue]] = field(default_factory=dict)

    # ----- loading ------------------------------------------------------------------------------

    def replay(self, key: RecordKey, value: RecordValue | None, now_ms: int) -> None:
        """One record of the partition, in log order (a later record of a key replaces it)."""
        if isinstance(key, OffsetCommitKey):
            tp = (key.topic, key.partition)
            if value is None:
                self.offsets.get(key.group, {}).pop(tp, None)
                if not self.offsets.get(key.group, True):
                    del self.offsets[key.group]
                return
            assert isinstance(value, OffsetCommitValue)
            self.offsets.setdefault(key.group, {})[tp] = value
            self.get_or_create(key.group)
            return
        if value is None:
            self.groups.pop(key.group, None)
            return
        assert isinstance(value, GroupMetadataValue)
        group = Group(key.group, self.settings, self.new_member_id)
        group.load(value, now_ms)
        self.groups[key.group] = group

    def loaded(self) -> None:
        """After the last record: every group with committed offsets exists (an Empty group
        when its metadata was never written, as a group of simple commits)."""
        for group_id in self.offsets:
            self.get_or_create(group_id)

    # ----- groups -------------------------------------------------------------------------------

    def group(self, group_id: str) -> Group | None:
        group = self.groups.get(group_id)
        return None if group is None or group.is_(GroupState.DEAD) else group

    def get_or_create(self, group_id: str) -> Group:
        group = self.group(group_id)
        if group is None:
            group = Group(group_id, self.settings, self.new_member_id)
            self.groups[group_id] = group
        return group

    def forget_if_unused(self, group_id: str) -> None:
        """Drop a group made for a JoinGroup that failed: no member, none pending, no offsets
        (Kafka does not keep a group a refused join created)."""
        group = self.groups.get(group_id)
        if group is None or group.members or group.pending or group.generation:
            return
        if group_id not in self.offsets:
            del self.groups[group_id]

    def delete_group(self, group_id: str) -> list[Record]:
        """The tombstones of a group and its offsets; the group is Dead and gone at once."""
        group = self.groups.pop(group_id, None)
        if group is not None:
            group.dead()
        records = [
            offset_record(group_id, topic, partition, None)
            for topic, partition in sorted(self.offsets.pop(group_id, {}))
        ]
        records.append(group_record(group_id, None))
        return records

    # ----- offsets ------------------------------------------------------------------------------

    def committed(self, group_id: str) -> dict[TopicPartition, OffsetCommitValue]:
        return self.offsets.get(group_id, {})

    def commit_records(
        self, group_id: str, commits: Iterable[tuple[str, int, OffsetCommitValue]]
    ) -> list[Record]:
        return [offset_record(group_id, t, p, v) for t, p, v in commits]

    def apply_commits(
        self, group_id: str, commits: Iterable[tuple[str, int, OffsetCommitValue]]
    ) -> None:
        """Written: now they are the committed offsets (an OffsetFetch reads them)."""
        stored = self.offsets.setdefault(group_id, {})
        for topic, partition, value in commits:
            stored[(topic, partition)] = value
        self.get_or_create(group_id)  # a simple commit's group, as a load would make it

    def delete_offsets(self, group_id: str, partitions: Iterable[TopicPartition]) -> list[Record]:
        stored = self.offsets.get(group_id, {})
        records = []
        for topic, partition in partitions:
            if stored.pop((topic, partition), None) is not None:
                records.append(offset_record(group_id, topic, partition, None))
        if not stored:
            self.offsets.pop(group_id, None)
        return records

    def delete_topic_offsets(self, topics: set[str]) -> list[Record]:
        """The offsets of deleted topics (Kafka removes them when a topic is deleted)."""
        records = []
        for group_id in list(self.offsets):
            gone = [tp for tp in self.offsets[group_id] if tp[0] in topics]
            records += self.delete_offsets(group_id, gone)
        return records

    def expire_offsets(self, now_ms: int, wall_ms: int, retention_ms: int) -> list[Record]:
        """Offsets retention (Kafka's ``cleanupGroupMetadata``, KIP-211): the tombstones of the
        offsets that expired, and of the groups left Empty without offsets (then Dead and
        gone). An offset expires at its own expire timestamp when it has one (v1 commits);
        else ``retention_ms`` after the group became Empty (a group that had members: its
        state timestamp, on the coordinator's clock ``now_ms``; it restarts when a coordinator
        loads the group) or after its commit (a group of simple commits, without a protocol
        type: ``wall_ms``). A group in another state keeps its offsets (Kafka also expires
        a Stable consumer group's offsets of topics it no longer subscribes to: not done)."""
        records: list[Record] = []
        for group_id in sorted(set(self.offsets) | set(self.groups)):
            group = self.group(group_id)
            if group is None or not group.is_(GroupState.EMPTY) or group.pending:
                continue
            stored = self.offsets.get(group_id, {})
            for tp, value in sorted(stored.items()):
                if value.expire_timestamp_ms >= 0:
                    expired = wall_ms >= value.expire_timestamp_ms
                elif group.protocol_type is not None and group.state_timestamp_ms >= 0:
                    expired = group.state_timestamp_ms + retention_ms <= now_ms
                else:
                    expired = value.commit_timestamp_ms + retention_ms <= wall_ms
                if expired:
                    del stored[tp]
                    records.append(offset_record(group_id, tp[0], tp[1], None))
            if stored:
                continue
            self.offsets.pop(group_id, None)
            records.append(group_record(group_id, None))
            self.groups.pop(group_id, None)
            group.dead()
        return records

    # ----- timers and effects -------------------------------------------------------------------

    def poll(self, now_ms: int) -> int | None:
        deadlines = [g.poll(now_ms) for g in self.groups.values()]
        # A group that never had a generation and has no member, none pending and no offsets
        # (its only joiner was told MEMBER_ID_REQUIRED and never came back) was never
        # written: forget it, so that group ids a client makes up do not pile up here.
        for group_id in [
            g.group_id
            for g in self.groups.values()
            if g.generation == 0 and not g.members and not g.pending and not g.outbox
        ]:
            if group_id not in self.offsets:
                del self.groups[group_id]
        return min((d for d in deadlines if d is not None), default=None)

    def drain(self) -> list[Completion | Persist]:
        out: list[Completion | Persist] = []
        for group in self.groups.values():
            if group.outbox:
                out += group.outbox
                group.outbox.clear()
        return out

    def unload(self) -> list[Completion | Persist]:
        """This broker no longer coordinates the partition: every waiting request is answered
        NOT_COORDINATOR and the state is dropped."""
        out: list[Completion | Persist] = []
        for group in self.groups.values():
            group.dead()
            out += [item for item in group.outbox if isinstance(item, Completion)]
            group.outbox.clear()
        self.groups.clear()
        self.offsets.clear()
        return out
