"""The classic group protocol's offsets APIs on the Kafka listener (docs/groups.md):
OffsetCommit (8), OffsetFetch (9) and OffsetDelete (47), over the coordinator of
``groups.py``. Offsets are stored by topic name, as Kafka's ``OffsetCommitKey`` does.

Kafka's order of checks: the group id (INVALID_GROUP_ID), the ACL on the group (READ to commit
or fetch, DELETE to delete: GROUP_AUTHORIZATION_FAILED), then per topic READ (commit, delete)
or DESCRIBE (fetch) on the topic (TOPIC_AUTHORIZATION_FAILED; a fetch of all the group's
offsets leaves unauthorized topics out), the topic and partition existing
(UNKNOWN_TOPIC_OR_PARTITION, commit and delete), the coordinator (NOT_COORDINATOR,
COORDINATOR_LOAD_IN_PROGRESS), then the group: a member's commit must name its generation
(ILLEGAL_GENERATION, UNKNOWN_MEMBER_ID, REBALANCE_IN_PROGRESS, FENCED_INSTANCE_ID); a commit
with generation -1 and no member id is a simple commit, allowed while the group is Empty.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from kio.schema.errors import ErrorCode as E

from broker.groups.group import CONSUMER_PROTOCOL_TYPE, GroupState
from broker.groups.records import OffsetCommitValue, subscription_topics
from broker.kafka.group_apis import group_id_error
from broker.kafka.groups import GroupCoordinator
from broker.kafka.protocol import Request
from quorum.metadata.image import MetadataImage
from quorum.security.acls import AclOperation, ResourceType
from quorum.security.authorization import RequestAuthorization
from quorum.security.identity import Caller

__all__ = ["OffsetApis"]


class OffsetApis:
    def __init__(
        self,
        coordinator: GroupCoordinator,
        authorization: RequestAuthorization,
        read_image: Callable[[Any], Awaitable[MetadataImage]],
    ) -> None:
        self.coordinator = coordinator
        self._authorization = authorization
        self._read_image = read_image

    def _allows_group(self, caller: Caller, image: MetadataImage, op: AclOperation, g: str) -> bool:
        return self._authorization.allows(caller, image, op, ResourceType.GROUP, g)

    def _allows_topic(self, caller: Caller, image: MetadataImage, op: AclOperation, t: str) -> bool:
        return self._authorization.allows_topic(caller, image, op, t)

    @staticmethod
    def _exists(image: MetadataImage, topic: str, partition: int) -> bool:
        found = image.topic_by_name(topic)
        return found is not None and partition in found.partitions

    # ----- OffsetCommit (8) -------------------------------------------------------------------

    async def offset_commit(self, request: Request, session: Any) -> dict[str, Any]:
        body = request.body
        caller = session.caller
        codes: dict[tuple[str, int], E] = {}
        order = [(t.name, p.partition_index) for t in body.topics for p in t.partitions]
        image = await self._read_image(session)
        group_error = group_id_error(body.group_id)
        if group_error is None and not self._allows_group(
            caller, image, AclOperation.READ, body.group_id
        ):
            group_error = E.group_authorization_failed
        max_bytes = self.coordinator.settings.metadata_max_bytes
        now_wall = self.coordinator.wall_ms()
        commits: list[tuple[str, int, OffsetCommitValue]] = []
        readable: dict[str, bool] = {}
        for topic in body.topics:
            if topic.name not in readable:
                readable[topic.name] = self._allows_topic(
                    caller, image, AclOperation.READ, topic.name
                )
            for partition in topic.partitions:
                tp = (topic.name, partition.partition_index)
                metadata = partition.committed_metadata or ""
                if group_error is not None:
                    codes[tp] = group_error
                elif not readable[topic.name]:
                    codes[tp] = E.topic_authorization_failed
                elif not self._exists(image, *tp):
                    codes[tp] = E.unknown_topic_or_partition
                elif len(metadata.encode()) > max_bytes:
                    codes[tp] = E.offset_metadata_too_large
                else:
                    commits.append(
                        (
                            topic.name,
                            partition.partition_index,
                            OffsetCommitValue(
                                offset=partition.committed_offset,
                                leader_epoch=getattr(partition, "committed_leader_epoch", -1),
                                metadata=metadata,
                                commit_timestamp_ms=now_wall,
                            ),
                        )
                    )
        if commits:
            code = await self._commit(body, request.api_version, image, commits)
            for topic_name, index, _ in commits:
                codes[(topic_name, index)] = code
        topics: dict[str, list[dict[str, Any]]] = {}
        for tp in order:
            topics.setdefault(tp[0], []).append({"partition_index": tp[1], "error_code": codes[tp]})
        return {"topics": [{"name": name, "partitions": parts} for name, parts in topics.items()]}

    async def _commit(
        self,
        body: Any,
        version: int,
        image: MetadataImage,
        commits: list[tuple[str, int, OffsetCommitValue]],
    ) -> E:
        shard, code = self.coordinator.shard(body.group_id, image)
        if shard is None:
            return code
        generation = body.generation_id_or_member_epoch if version >= 1 else -1
        instance = getattr(body, "group_instance_id", None)
        group = shard.group(body.group_id)
        if group is None:
            if generation >= 0 or body.member_id or instance is not None:
                return E.illegal_generation
            group = shard.get_or_create(body.group_id)
        error = group.commit_error(body.member_id, instance, generation)
        if error is not None:
            return error
        code = await self.coordinator.write(
            shard.partition, shard.commit_records(body.group_id, commits)
        )
        if code == E.none:
            shard.apply_commits(body.group_id, commits)
        return code

    # ----- OffsetFetch (9) --------------------------------------------------------------------

    async def offset_fetch(self, request: Request, session: Any) -> dict[str, Any]:
        """v0-7: one group (topics null: every offset it has, v2+); v8+: several groups, each
        answered with its own error code."""
        body = request.body
        version = request.api_version
        image = await self._read_image(session)
        if version >= 8:
            return {
                "groups": [
                    self._fetch(g.group_id, g.topics, image, session.caller) for g in body.groups
                ]
            }
        answer = self._fetch(body.group_id, body.topics, image, session.caller)
        if version < 2 and answer["error_code"] != E.none:
            for topic in answer["topics"]:
                for partition in topic["partitions"]:
                    partition["error_code"] = answer["error_code"]
        return {"topics": answer["topics"], "error_code": answer["error_code"]}

    def _fetch(
        self, group_id: str, topics: Any, image: MetadataImage, caller: Caller
    ) -> dict[str, Any]:
        def partition(index: int, code: E, value: OffsetCommitValue | None) -> dict[str, Any]:
            return {
                "partition_index": index,
                "committed_offset": -1 if value is None else value.offset,
                "committed_leader_epoch": -1 if value is None else value.leader_epoch,
                "metadata": "" if value is None else value.metadata,
                "error_code": code,
            }

        def failed(code: E) -> dict[str, Any]:
            listed = [
                {
                    "name": t.name,
                    "partitions": [partition(i, E.none, None) for i in t.partition_indexes],
                }
                for t in topics or ()
            ]
            return {"group_id": group_id, "topics": listed, "error_code": code}

        invalid = group_id_error(group_id)
        if invalid is not None:
            return failed(invalid)
        if not self._allows_group(caller, image, AclOperation.DESCRIBE, group_id):
            return failed(E.group_authorization_failed)
        shard, code = self.coordinator.shard(group_id, image)
        if shard is None:
            return failed(code)
        stored = shard.committed(group_id)
        allowed: dict[str, bool] = {}

        def describable(name: str) -> bool:
            if name not in allowed:
                allowed[name] = self._allows_topic(caller, image, AclOperation.DESCRIBE, name)
            return allowed[name]

        answered = []
        if topics is None:
            by_topic: dict[str, list[dict[str, Any]]] = {}
            for (name, index), value in sorted(stored.items()):
                if describable(name):
                    by_topic.setdefault(name, []).append(partition(index, E.none, value))
            answered = [{"name": n, "partitions": parts} for n, parts in by_topic.items()]
        else:
            for topic in topics:
                ok = describable(topic.name)
                answered.append(
                    {
                        "name": topic.name,
                        "partitions": [
                            partition(i, E.none, stored.get((topic.name, i)))
                            if ok
                            else partition(i, E.topic_authorization_failed, None)
                            for i in topic.partition_indexes
                        ],
                    }
                )
        return {"group_id": group_id, "topics": answered, "error_code": E.none}

    # ----- OffsetDelete (47) ------------------------------------------------------------------

    async def offset_delete(self, request: Request, session: Any) -> dict[str, Any]:
        """Offsets of partitions the group is not subscribed to (GROUP_SUBSCRIBED_TO_TOPIC for
        a topic a consumer member subscribes to; NON_EMPTY_GROUP for a group with members of
        another protocol type)."""
        body = request.body
        caller = session.caller
        image = await self._read_image(session)

        def answer(code: E, per: dict[tuple[str, int], E] | None = None) -> dict[str, Any]:
            return {
                "error_code": code,
                "topics": [
                    {
                        "name": t.name,
                        "partitions": [
                            {
                                "partition_index": p.partition_index,
                                "error_code": (per or {}).get((t.name, p.partition_index), E.none),
                            }
                            for p in t.partitions
                        ],
                    }
                    for t in body.topics
                ]
                if per is not None
                else [],
            }

        invalid = group_id_error(body.group_id)
        if invalid is not None:
            return answer(invalid)
        if not self._allows_group(caller, image, AclOperation.DELETE, body.group_id):
            return answer(E.group_authorization_failed)
        shard, code = self.coordinator.shard(body.group_id, image)
        if shard is None:
            return answer(code)
        group = shard.group(body.group_id)
        if group is None and not shard.committed(body.group_id):
            return answer(E.group_id_not_found)
        subscribed: set[str] = set()
        if group is not None and not group.is_(GroupState.EMPTY):
            if group.protocol_type != CONSUMER_PROTOCOL_TYPE:
                return answer(E.non_empty_group)
            for member in group.members.values():
                subscribed |= subscription_topics(member.metadata(group.protocol))
        per: dict[tuple[str, int], E] = {}
        deletable = []
        for topic in body.topics:
            readable = self._allows_topic(caller, image, AclOperation.READ, topic.name)
            for p in topic.partitions:
                tp = (topic.name, p.partition_index)
                if not readable:
                    per[tp] = E.topic_authorization_failed
                elif topic.name in subscribed:
                    per[tp] = E.group_subscribed_to_topic
                else:
                    deletable.append(tp)
        records = shard.delete_offsets(body.group_id, deletable)
        code = await self.coordinator.write(shard.partition, records)
        if code != E.none:
            return answer(code)
        return answer(E.none, per)
