"""The classic group protocol's membership APIs on the Kafka listener (docs/groups.md):
FindCoordinator (10), JoinGroup (11), Heartbeat (12), LeaveGroup (13), SyncGroup (14),
DescribeGroups (15), ListGroups (16), DeleteGroups (42). The offsets APIs are
``offset_apis.py``; the coordinator is ``groups.py`` over the state machine of
``broker/groups/``.

Each handler checks, in Kafka's order: the group id (INVALID_GROUP_ID when empty, or longer
than a record can hold), the ACL on the group (READ to be a member, DESCRIBE to find or
describe it, DELETE to delete it: GROUP_AUTHORIZATION_FAILED), this broker coordinating it
(NOT_COORDINATOR, COORDINATOR_LOAD_IN_PROGRESS), then the group's own rules. Sizes a client
controls are bounded before they are stored (``MEMBER_METADATA_BYTES_MAX``, ...).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, Final

from kio.schema.errors import ErrorCode as E

from broker.groups.group import JoinRequest
from broker.kafka.groups import GroupCoordinator
from broker.kafka.protocol import Request
from quorum.metadata.image import MetadataImage
from quorum.security.acls import AclOperation, ResourceType
from quorum.security.authorization import RequestAuthorization
from quorum.security.identity import Caller

__all__ = ["GroupApis", "group_id_error"]

# Kafka's record strings hold at most 32,767 bytes (int16 lengths): longer ids cannot be
# stored in __consumer_offsets, so they are refused up front.
GROUP_ID_BYTES_MAX: Final = 32_767
# Per member, the metadata of all its protocols, and its assignment (our bound: a consumer's
# subscription of thousands of topics is tens of KiB; Kafka bounds only the group's record).
MEMBER_METADATA_BYTES_MAX: Final = 1024 * 1024
MEMBER_ASSIGNMENT_BYTES_MAX: Final = 1024 * 1024
# Protocols one member may offer, and the length of a protocol's name or type.
JOIN_PROTOCOLS_MAX: Final = 64
PROTOCOL_NAME_CHARS_MAX: Final = 255
# A generated member id keeps at most this much of the client id (it is client id + UUID).
MEMBER_ID_CLIENT_CHARS_MAX: Final = 255
AUTHORIZED_OPERATIONS_OMITTED: Final = -(2**31)
GROUP_OPERATIONS: Final = (AclOperation.READ, AclOperation.DELETE, AclOperation.DESCRIBE)
KEY_TYPE_GROUP: Final = 0
KEY_TYPE_TRANSACTION: Final = 1
CLASSIC: Final = "classic"


def group_id_error(group_id: str | None) -> E | None:
    if not group_id or len(group_id.encode()) > GROUP_ID_BYTES_MAX:
        return E.invalid_group_id
    return None


def client_host(caller: Caller) -> str:
    """Kafka's ``clientHost`` ("/127.0.0.1") from the peer address ("ipv4:127.0.0.1:5000")."""
    peer = caller.peer
    for prefix in ("ipv4:", "ipv6:"):
        if peer.startswith(prefix):
            peer = peer[len(prefix) :]
    host = peer.rsplit(":", 1)[0] if ":" in peer else peer
    return "/" + host.strip("[]")[:255]


class GroupApis:
    def __init__(
        self,
        coordinator: GroupCoordinator,
        authorization: RequestAuthorization,
        read_image: Callable[[Any], Awaitable[MetadataImage]],
    ) -> None:
        self.coordinator = coordinator
        self._authorization = authorization
        self._read_image = read_image

    def allows(self, caller: Caller, image: MetadataImage, op: AclOperation, group: str) -> bool:
        return self._authorization.allows(caller, image, op, ResourceType.GROUP, group)

    # ----- FindCoordinator (10) ---------------------------------------------------------------

    async def find_coordinator(self, request: Request, session: Any) -> dict[str, Any]:
        """v0-3: one key; v4+: ``coordinator_keys``. A group's coordinator is its partition's
        leader; a TRANSACTION key is answered with this broker (it owns no transaction: no
        transactions here); other key types (SHARE) INVALID_REQUEST."""
        body = request.body
        image = await self._read_image(session)
        key_type = int(getattr(body, "key_type", KEY_TYPE_GROUP))
        keys = list(body.coordinator_keys) if request.api_version >= 4 else [body.key]
        found = [self._coordinator(key, key_type, image, session) for key in keys]
        if request.api_version >= 4:
            return {"coordinators": found}
        one = found[0]
        return {key: value for key, value in one.items() if key != "key"}

    def _coordinator(
        self, key: str, key_type: int, image: MetadataImage, session: Any
    ) -> dict[str, Any]:
        def refused(code: E, message: str) -> dict[str, Any]:
            return {
                "key": key,
                "error_code": code,
                "error_message": message,
                "node_id": -1,
                "host": "",
                "port": -1,
            }

        if key_type == KEY_TYPE_TRANSACTION:
            # No transaction coordinator runs here: the broker asked answers for every
            # transactional id as one that owns no transaction (transactions.py), so a
            # producer's InitProducerId is refused at once (UNSUPPORTED_VERSION) instead of
            # retrying FindCoordinator until it times out, and describeTransactions gets
            # TRANSACTIONAL_ID_NOT_FOUND. DESCRIBE on a transactional id as transactions.py
            # grants it (no TRANSACTIONAL_ID ACLs here).
            authorization = self._authorization
            if authorization.enabled and not (
                session.caller.principal in authorization.super_users
                or authorization.allow_everyone_if_no_acl_found
            ):
                return refused(
                    E.transactional_id_authorization_failed,
                    "DESCRIBE on the transactional id is not allowed",
                )
            leader = self.coordinator.broker_id
        elif key_type != KEY_TYPE_GROUP:
            return refused(E.invalid_request, f"key type {key_type} is not served (0: group)")
        else:
            if not self.allows(session.caller, image, AclOperation.DESCRIBE, key):
                return refused(E.group_authorization_failed, "DESCRIBE on the group is not allowed")
            if len(key.encode()) > GROUP_ID_BYTES_MAX:
                return refused(E.invalid_request, "the group id is too long")
            _, leader, error = self.coordinator.coordinator_of(key, image)
            if error != E.none:
                return refused(error, "the coordinator is not available yet; retry")
        broker = image.brokers.get(leader)
        endpoint = None
        if broker is not None:
            endpoint = next((e for e in broker.endpoints if e.name == session.listener_name), None)
        if endpoint is None:
            return refused(E.coordinator_not_available, f"broker {leader} has no such listener")
        return {
            "key": key,
            "error_code": E.none,
            "error_message": None,
            "node_id": leader,
            "host": endpoint.host,
            "port": endpoint.port,
        }

    # ----- JoinGroup (11) ---------------------------------------------------------------------

    async def join_group(self, request: Request, session: Any) -> dict[str, Any]:
        body = request.body
        version = request.api_version
        answer = await self._join(request, session)
        if version < 7 and answer.get("protocol_name") is None:
            answer["protocol_name"] = ""
        answer.setdefault("member_id", body.member_id)
        return answer

    async def _join(self, request: Request, session: Any) -> dict[str, Any]:
        body = request.body
        member_id = body.member_id

        def error(code: E) -> dict[str, Any]:
            return {"error_code": code, "generation_id": -1, "leader": "", "member_id": member_id}

        invalid = group_id_error(body.group_id)
        if invalid is not None:
            return error(invalid)
        image = await self._read_image(session)
        if not self.allows(session.caller, image, AclOperation.READ, body.group_id):
            return error(E.group_authorization_failed)
        protocols = tuple((p.name, bytes(p.metadata)) for p in body.protocols)
        if (
            len(protocols) > JOIN_PROTOCOLS_MAX
            or sum(len(m) for _, m in protocols) > MEMBER_METADATA_BYTES_MAX
            or len(body.protocol_type) > PROTOCOL_NAME_CHARS_MAX
            or any(len(name) > PROTOCOL_NAME_CHARS_MAX for name, _ in protocols)
        ):
            return error(E.inconsistent_group_protocol)
        instance = getattr(body, "group_instance_id", None)
        if instance is not None and (not instance or len(instance) > 249):
            return error(E.invalid_request)
        shard, code = self.coordinator.shard(body.group_id, image)
        if shard is None:
            return error(code)
        group = shard.group(body.group_id)
        created = group is None
        if group is None:
            if member_id:
                return error(E.unknown_member_id)
            group = shard.get_or_create(body.group_id)
        session_ms = int(body.session_timeout.total_seconds() * 1000)
        rebalance = getattr(body, "rebalance_timeout", None)
        rebalance_ms = session_ms if rebalance is None else int(rebalance.total_seconds() * 1000)
        waiter = self.coordinator.new_waiter()
        answer = group.join(
            JoinRequest(
                member_id=member_id,
                group_instance_id=instance,
                client_id=(request.client_id or "")[:MEMBER_ID_CLIENT_CHARS_MAX],
                client_host=client_host(session.caller),
                session_timeout_ms=session_ms,
                rebalance_timeout_ms=max(rebalance_ms, 0),
                protocol_type=body.protocol_type,
                protocols=protocols,
                require_known_member_id=request.api_version >= 4,
            ),
            waiter,
            self.coordinator.now_ms(),
        )
        self.coordinator.dispatch(shard)
        if answer is not None:
            if created and answer["error_code"] != E.none:
                shard.forget_if_unused(body.group_id)
            return answer
        return await self.coordinator.wait(waiter)

    # ----- SyncGroup (14) ---------------------------------------------------------------------

    async def sync_group(self, request: Request, session: Any) -> dict[str, Any]:
        body = request.body

        def error(code: E) -> dict[str, Any]:
            return {"error_code": code, "assignment": b""}

        invalid = group_id_error(body.group_id)
        if invalid is not None:
            return error(invalid)
        image = await self._read_image(session)
        if not self.allows(session.caller, image, AclOperation.READ, body.group_id):
            return error(E.group_authorization_failed)
        assignments = {a.member_id: bytes(a.assignment) for a in body.assignments}
        if any(len(a) > MEMBER_ASSIGNMENT_BYTES_MAX for a in assignments.values()):
            return error(E.invalid_request)
        shard, code = self.coordinator.shard(body.group_id, image)
        if shard is None:
            return error(code)
        group = shard.group(body.group_id)
        if group is None:
            return error(E.unknown_member_id)
        waiter = self.coordinator.new_waiter()
        answer = group.sync(
            member_id=body.member_id,
            instance_id=getattr(body, "group_instance_id", None),
            generation=body.generation_id,
            protocol_type=getattr(body, "protocol_type", None),
            protocol_name=getattr(body, "protocol_name", None),
            assignments=assignments,
            waiter=waiter,
        )
        self.coordinator.dispatch(shard)
        if answer is not None:
            return answer
        return await self.coordinator.wait(waiter)

    # ----- Heartbeat (12) ---------------------------------------------------------------------

    async def heartbeat(self, request: Request, session: Any) -> dict[str, Any]:
        body = request.body
        invalid = group_id_error(body.group_id)
        if invalid is not None:
            return {"error_code": invalid}
        image = await self._read_image(session)
        if not self.allows(session.caller, image, AclOperation.READ, body.group_id):
            return {"error_code": E.group_authorization_failed}
        shard, code = self.coordinator.shard(body.group_id, image)
        if shard is None:
            return {"error_code": code}
        group = shard.group(body.group_id)
        if group is None:
            return {"error_code": E.unknown_member_id}
        code = group.heartbeat(
            body.member_id,
            getattr(body, "group_instance_id", None),
            body.generation_id,
            self.coordinator.now_ms(),
        )
        self.coordinator.dispatch(shard)
        return {"error_code": code}

    # ----- LeaveGroup (13) --------------------------------------------------------------------

    async def leave_group(self, request: Request, session: Any) -> dict[str, Any]:
        """v0-2: one member id, its outcome the top-level code; v3+: members by member id or
        group instance id, each with its own code."""
        body = request.body
        batched = request.api_version >= 3
        identities = (
            [(m.member_id, m.group_instance_id) for m in body.members]
            if batched
            else [(body.member_id, None)]
        )
        invalid = group_id_error(body.group_id)
        if invalid is not None:
            return {"error_code": invalid, "members": []}
        image = await self._read_image(session)
        if not self.allows(session.caller, image, AclOperation.READ, body.group_id):
            return {"error_code": E.group_authorization_failed, "members": []}
        shard, code = self.coordinator.shard(body.group_id, image)
        if shard is None:
            return {"error_code": code, "members": []}
        group = shard.group(body.group_id)
        if group is None:
            return {"error_code": E.unknown_member_id, "members": []}
        now = self.coordinator.now_ms()
        members = []
        for member_id, instance in identities:
            outcome, _ = group.leave(member_id, instance, now)
            members.append(
                {"member_id": member_id, "group_instance_id": instance, "error_code": outcome}
            )
        self.coordinator.dispatch(shard)
        if not batched:
            return {"error_code": members[0]["error_code"], "members": []}
        return {"error_code": E.none, "members": members}

    # ----- ListGroups (16), DescribeGroups (15), DeleteGroups (42) ----------------------------

    async def list_groups(self, request: Request, session: Any) -> dict[str, Any]:
        """The groups this broker coordinates: all with DESCRIBE on the cluster, else those
        with DESCRIBE on the group. v4+ filter by state, v5+ by type (case-insensitive)."""
        body = request.body
        image = await self._read_image(session)
        caller = session.caller
        everything = self._authorization.allows(
            caller, image, AclOperation.DESCRIBE, ResourceType.CLUSTER
        )
        states = {s.lower() for s in getattr(body, "states_filter", ())}
        types = {t.lower() for t in getattr(body, "types_filter", ())}
        if types and CLASSIC not in types:
            return {"error_code": E.none, "groups": []}
        loading = self.coordinator.loading(image)
        groups = []
        for shard in self.coordinator.loaded_shards(image):
            for group_id, group in sorted(shard.groups.items()):
                state = group.state.value
                if states and state.lower() not in states:
                    continue
                if not everything and not self.allows(
                    caller, image, AclOperation.DESCRIBE, group_id
                ):
                    continue
                groups.append(
                    {
                        "group_id": group_id,
                        "protocol_type": group.protocol_type or "",
                        "group_state": state,
                        "group_type": CLASSIC,
                    }
                )
        code = E.coordinator_load_in_progress if loading else E.none
        return {"error_code": code, "groups": groups}

    async def describe_groups(self, request: Request, session: Any) -> dict[str, Any]:
        body = request.body
        image = await self._read_image(session)
        include = bool(getattr(body, "include_authorized_operations", False))
        # KIP-1043: from v6 a group that does not exist is an error (Kafka's message); before,
        # a Dead group without one.
        not_found = request.api_version >= 6
        return {
            "groups": [
                self._describe(g, image, session.caller, include, not_found) for g in body.groups
            ]
        }

    def _describe(
        self, group_id: str, image: MetadataImage, caller: Caller, include: bool, not_found: bool
    ) -> dict[str, Any]:
        def described(code: E, state: str = "") -> dict[str, Any]:
            return {
                "error_code": code,
                "group_id": group_id,
                "group_state": state,
                "protocol_type": "",
                "protocol_data": "",
                "members": [],
                "authorized_operations": AUTHORIZED_OPERATIONS_OMITTED,
            }

        if not self.allows(caller, image, AclOperation.DESCRIBE, group_id):
            return described(E.group_authorization_failed)
        invalid = group_id_error(group_id)
        if invalid is not None:
            return described(invalid)
        shard, code = self.coordinator.shard(group_id, image)
        if shard is None:
            return described(code)
        group = shard.group(group_id)
        if group is None:
            if not_found:
                return {
                    **described(E.group_id_not_found, "Dead"),
                    "error_message": f"Group {group_id} not found.",
                }
            return described(E.none, "Dead")
        stable = group.state.value == "Stable"
        operations = AUTHORIZED_OPERATIONS_OMITTED
        if include:
            operations = 0
            for operation in GROUP_OPERATIONS:
                if self.allows(caller, image, operation, group_id):
                    operations |= 1 << int(operation)
        return {
            "error_code": E.none,
            "group_id": group_id,
            "group_state": group.state.value,
            "protocol_type": group.protocol_type or "",
            "protocol_data": (group.protocol or "") if stable else "",
            "members": [
                {
                    "member_id": m.member_id,
                    "group_instance_id": m.group_instance_id,
                    "client_id": m.client_id,
                    "client_host": m.client_host,
                    "member_metadata": m.metadata(group.protocol) if stable else b"",
                    "member_assignment": m.assignment if stable else b"",
                }
                for m in group.members.values()
            ],
            "authorized_operations": operations,
        }

    async def delete_groups(self, request: Request, session: Any) -> dict[str, Any]:
        """Empty groups only (NON_EMPTY_GROUP); a group with neither members nor offsets is
        GROUP_ID_NOT_FOUND. Tombstones for its offsets and its metadata, written with acks=all."""
        body = request.body
        image = await self._read_image(session)
        results = []
        for group_id in dict.fromkeys(body.groups_names):
            results.append(
                {"group_id": group_id, "error_code": await self._delete(group_id, image, session)}
            )
        return {"results": results}

    async def _delete(self, group_id: str, image: MetadataImage, session: Any) -> E:
        if not self.allows(session.caller, image, AclOperation.DELETE, group_id):
            return E.group_authorization_failed
        invalid = group_id_error(group_id)
        if invalid is not None:
            return invalid
        shard, code = self.coordinator.shard(group_id, image)
        if shard is None:
            return code
        group = shard.group(group_id)
        if group is None:
            return E.group_id_not_found
        if group.state.value != "Empty":
            return E.non_empty_group
        records = shard.delete_group(group_id)
        return await self.coordinator.write(shard.partition, records)
