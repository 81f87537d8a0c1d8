"""Kafka messages at versions the codec library (kio) does not carry yet, written in its form
(frozen dataclasses whose fields name their Kafka types), so that kio's generic readers and
writers and ``protocol.build`` treat them as its own. Each follows Kafka 4.4's JSON schema of
the message field by field; ``protocol.schema_of`` looks here before asking kio.

- DescribeGroups v6 (KIP-1043): the same request as v5; the answer gains a per-group
  ``error_message``, and a group that does not exist is answered GROUP_ID_NOT_FOUND (v5 and
  older: state Dead without an error).

No ``from __future__ import annotations`` here: kio reads each field's ``type`` as a class.
"""

from dataclasses import dataclass, field
from typing import ClassVar

from kio.schema.errors import ErrorCode
from kio.schema.request_header.v2.header import RequestHeader
from kio.schema.response_header.v1.header import ResponseHeader
from kio.schema.types import GroupId
from kio.static.constants import EntityType
from kio.static.primitive import i16, i32, i32Timedelta

__all__ = ["LOCAL_SCHEMAS"]

_DESCRIBE_GROUPS = i16(15)


@dataclass(frozen=True, slots=True, kw_only=True)
class DescribeGroupsRequestV6:
    __type__: ClassVar = EntityType.request
    __version__: ClassVar[i16] = i16(6)
    __flexible__: ClassVar[bool] = True
    __api_key__: ClassVar[i16] = _DESCRIBE_GROUPS
    __header_schema__: ClassVar[type[RequestHeader]] = RequestHeader
    groups: tuple[GroupId, ...] = field(metadata={"kafka_type": "string"}, default=())
    include_authorized_operations: bool = field(metadata={"kafka_type": "bool"})


@dataclass(frozen=True, slots=True, kw_only=True)
class DescribedGroupMemberV6:
    __type__: ClassVar = EntityType.nested
    __version__: ClassVar[i16] = i16(6)
    __flexible__: ClassVar[bool] = True
    __api_key__: ClassVar[i16] = _DESCRIBE_GROUPS
    __header_schema__: ClassVar[type[ResponseHeader]] = ResponseHeader
    member_id: str = field(metadata={"kafka_type": "string"})
    group_instance_id: str | None = field(metadata={"kafka_type": "string"}, default=None)
    client_id: str = field(metadata={"kafka_type": "string"})
    client_host: str = field(metadata={"kafka_type": "string"})
    member_metadata: bytes = field(metadata={"kafka_type": "bytes"})
    member_assignment: bytes = field(metadata={"kafka_type": "bytes"})


@dataclass(frozen=True, slots=True, kw_only=True)
class DescribedGroupV6:
    __type__: ClassVar = EntityType.nested
    __version__: ClassVar[i16] = i16(6)
    __flexible__: ClassVar[bool] = True
    __api_key__: ClassVar[i16] = _DESCRIBE_GROUPS
    __header_schema__: ClassVar[type[ResponseHeader]] = ResponseHeader
    error_code: ErrorCode = field(metadata={"kafka_type": "error_code"})
    error_message: str | None = field(metadata={"kafka_type": "string"}, default=None)
    group_id: GroupId = field(metadata={"kafka_type": "string"})
    group_state: str = field(metadata={"kafka_type": "string"})
    protocol_type: str = field(metadata={"kafka_type": "string"})
    protocol_data: str = field(metadata={"kafka_type": "string"})
    members: tuple[DescribedGroupMemberV6, ...]
    authorized_operations: i32 = field(metadata={"kafka_type": "int32"}, default=i32(-2147483648))


@dataclass(frozen=True, slots=True, kw_only=True)
class DescribeGroupsResponseV6:
    __type__: ClassVar = EntityType.response
    __version__: ClassVar[i16] = i16(6)
    __flexible__: ClassVar[bool] = True
    __api_key__: ClassVar[i16] = _DESCRIBE_GROUPS
    __header_schema__: ClassVar[type[ResponseHeader]] = ResponseHeader
    throttle_time: i32Timedelta = field(metadata={"kafka_type": "timedelta_i32"})
    groups: tuple[DescribedGroupV6, ...]


# (API key, version) -> (request class, response class)
LOCAL_SCHEMAS: dict[tuple[int, int], tuple[type[object], type[object]]] = {
    (15, 6): (DescribeGroupsRequestV6, DescribeGroupsResponseV6),
}
