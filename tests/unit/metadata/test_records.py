"""The metadata record codec: wire form, round trips, and every way a record can be refused."""

from __future__ import annotations

import dataclasses
import json
import pickle
import re
from typing import Any

import msgpack
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from quorum.ids import METADATA_TOPIC_ID, ZERO_UUID, Uuid
from quorum.metadata import record_fields
from quorum.metadata.records import (
    CONTROL_RECORD_TYPES,
    INT32_MAX,
    INT64_MAX,
    KAFKA_TYPE_NAMES,
    RECORD_CLASSES,
    AccessControlEntryRecord,
    BrokerEndpoint,
    ClientQuotaEntityData,
    ClientQuotaRecord,
    ConfigRecord,
    ConfigResourceType,
    FenceBrokerRecord,
    InvalidRecordError,
    KRaftVersionRecord,
    LeaderChangeMessage,
    NoOpRecord,
    PartitionChangeRecord,
    PartitionRecord,
    ProducerIdsRecord,
    Record,
    RecordDecodeError,
    RegisterBrokerRecord,
    RemoveAccessControlEntryRecord,
    RemoveTopicRecord,
    SnapshotFooter,
    SnapshotHeader,
    TopicRecord,
    UnfenceBrokerRecord,
    UnknownRecordTypeError,
    UnregisterBrokerRecord,
    UnsupportedRecordVersionError,
    VoterEntry,
    VotersRecord,
    decode_record,
    encode_record,
    is_control_record,
    pack_msgpack,
    record_from_wire,
    record_kafka_json,
    record_kafka_type,
    record_to_json_dict,
    record_to_wire,
    record_type_name,
    supported_versions,
)

TOPIC_ID = Uuid.parse("MnNdA8q3R0GGY6OHa-YcnQ")
OTHER_ID = Uuid.parse("e2wE0WAvR4q2BNDQTz0lzA")

# ----- strategies (also used by tests/unit/metadata/test_batch.py) ------------------------

uuids = st.builds(Uuid, st.integers(0, (1 << 64) - 1), st.integers(0, (1 << 64) - 1))
texts = st.text(max_size=12)
broker_ids = st.integers(0, INT32_MAX)
epochs = st.integers(0, INT32_MAX)
broker_epochs = st.integers(0, INT64_MAX)
id_tuples = st.lists(broker_ids, max_size=5).map(tuple)
endpoints = st.builds(BrokerEndpoint, texts, texts, st.integers(0, 65535))

metadata_records: st.SearchStrategy[Record] = st.one_of(
    st.builds(
        RegisterBrokerRecord,
        broker_ids,
        uuids,
        broker_epochs,
        st.lists(endpoints, max_size=3).map(tuple),
        st.none() | texts,
        st.booleans(),
    ),
    st.builds(UnregisterBrokerRecord, broker_ids, broker_epochs),
    st.builds(TopicRecord, texts, uuids, st.booleans()),
    st.builds(
        PartitionRecord,
        uuids,
        st.integers(0, INT32_MAX),
        id_tuples,
        id_tuples,
        st.integers(-1, INT32_MAX),
        epochs,
        epochs,
    ),
    st.builds(
        ConfigRecord,
        st.sampled_from([ConfigResourceType.TOPIC, ConfigResourceType.BROKER]),
        texts,
        texts,
        st.none() | texts,
    ),
    st.builds(
        PartitionChangeRecord,
        uuids,
        st.integers(0, INT32_MAX),
        st.none() | id_tuples,
        st.none() | st.integers(-1, INT32_MAX),
        st.none() | id_tuples,
        st.none() | epochs,
        st.none() | epochs,
    ),
    st.builds(FenceBrokerRecord, broker_ids, broker_epochs),
    st.builds(UnfenceBrokerRecord, broker_ids, broker_epochs),
    st.builds(RemoveTopicRecord, uuids),
    st.just(NoOpRecord()),
    st.builds(
        AccessControlEntryRecord,
        uuids,
        st.integers(0, 127),
        texts,
        st.integers(0, 127),
        texts,
        texts,
        st.integers(0, 127),
        st.integers(0, 127),
    ),
    st.builds(RemoveAccessControlEntryRecord, uuids),
    st.builds(
        ClientQuotaRecord,
        st.lists(
            st.builds(
                ClientQuotaEntityData, st.sampled_from(["user", "client-id"]), st.none() | texts
            ),
            max_size=2,
        ).map(tuple),
        texts,
        st.floats(allow_nan=False, allow_infinity=False),
        st.booleans(),
    ),
    st.builds(
        ProducerIdsRecord,
        st.integers(-1, INT32_MAX),
        st.integers(-1, INT64_MAX),
        st.integers(0, INT64_MAX),
    ),
)

control_records: st.SearchStrategy[Record] = st.one_of(
    st.builds(LeaderChangeMessage, broker_ids, epochs, id_tuples),
    st.builds(SnapshotHeader, st.integers(0, 32767), st.integers(0, INT64_MAX)),
    st.builds(SnapshotFooter, st.integers(0, 32767)),
    st.builds(KRaftVersionRecord, st.integers(0, 32767), st.integers(0, 32767)),
    st.builds(
        VotersRecord,
        st.integers(0, 32767),
        st.lists(
            st.builds(
                VoterEntry,
                broker_ids,
                uuids,
                st.lists(
                    st.builds(BrokerEndpoint, texts, texts, st.integers(0, 65535)), max_size=2
                ).map(tuple),
                st.just(0),
                st.integers(0, 1),
            ),
            max_size=5,
            unique_by=lambda v: v.voter_id,
        ).map(tuple),
    ),
)

all_records = metadata_records | control_records


def one_of_each() -> list[Record]:
    return [
        RegisterBrokerRecord(
            1, OTHER_ID, 42, (BrokerEndpoint("PLAINTEXT", "localhost", 9092),), "r1", False
        ),
        UnregisterBrokerRecord(1, 42),
        TopicRecord("orders", TOPIC_ID, internal=True),
        PartitionRecord(TOPIC_ID, 0, (1, 2, 3), (1, 2), 1, leader_epoch=4, partition_epoch=5),
        ConfigRecord(ConfigResourceType.TOPIC, "orders", "retention.ms", None),
        PartitionChangeRecord(TOPIC_ID, 3, isr=(2,), leader=-1),
        FenceBrokerRecord(2, 7),
        UnfenceBrokerRecord(2, 7),
        RemoveTopicRecord(TOPIC_ID),
        NoOpRecord(),
        AccessControlEntryRecord(TOPIC_ID, 2, "orders", 3, "User:CN=alice", "*", 8, 3),
        RemoveAccessControlEntryRecord(TOPIC_ID),
        ProducerIdsRecord(2, 7, 3000),
        ClientQuotaRecord(
            (ClientQuotaEntityData("user", "CN=alice"), ClientQuotaEntityData("client-id", None)),
            "producer_byte_rate",
            102400.0,
            remove=False,
        ),
        LeaderChangeMessage(1, 3, (1, 2, 3)),
        SnapshotHeader(0, 1_700_000_000_000),
        SnapshotFooter(0),
        KRaftVersionRecord(0, 1),
        VotersRecord(
            0,
            (
                VoterEntry(1, OTHER_ID, (BrokerEndpoint("CONTROLLER", "h1", 9093),), 0, 1),
                VoterEntry(2, ZERO_UUID, (), 0, 1),
            ),
        ),
    ]


def list_form(obj: Any) -> Any:
    """``obj`` with every tuple turned into a list, as ``record_to_wire`` writes arrays."""
    if isinstance(obj, tuple | list):
        return [list_form(element) for element in obj]
    return obj


# ----- the wire form ----------------------------------------------------------------------


def test_type_codes_are_kafkas() -> None:
    assert {code: cls.__name__ for code, cls in RECORD_CLASSES.items()} == {
        0: "RegisterBrokerRecord",
        1: "UnregisterBrokerRecord",
        2: "TopicRecord",
        3: "PartitionRecord",
        4: "ConfigRecord",
        5: "PartitionChangeRecord",
        6: "AccessControlEntryRecord",
        7: "FenceBrokerRecord",
        8: "UnfenceBrokerRecord",
        9: "RemoveTopicRecord",
        14: "ClientQuotaRecord",
        15: "ProducerIdsRecord",
        16: "RemoveAccessControlEntryRecord",
        20: "NoOpRecord",
        1002: "LeaderChangeMessage",
        1003: "SnapshotHeader",
        1004: "SnapshotFooter",
        1005: "KRaftVersionRecord",
        1006: "VotersRecord",
    }
    assert sorted(CONTROL_RECORD_TYPES) == [1002, 1003, 1004, 1005, 1006]
    assert (ConfigResourceType.TOPIC, ConfigResourceType.BROKER) == (2, 4)


def test_one_of_each_covers_every_type() -> None:
    assert sorted(record.TYPE for record in one_of_each()) == sorted(RECORD_CLASSES)


def test_wire_form_is_type_version_fields_in_declaration_order() -> None:
    assert record_to_wire(TopicRecord("orders", TOPIC_ID)) == [
        2,
        0,
        ["orders", TOPIC_ID.bytes, False],
    ]
    assert record_to_wire(PartitionRecord(TOPIC_ID, 7, (1, 2), (2,), 2, 3, 4)) == [
        3,
        0,
        [TOPIC_ID.bytes, 7, [1, 2], [2], 2, 3, 4],
    ]
    assert record_to_wire(
        RegisterBrokerRecord(5, OTHER_ID, 9, (BrokerEndpoint("INTERNAL", "h", 1),))
    ) == [0, 0, [5, OTHER_ID.bytes, 9, [["INTERNAL", "h", 1]], None, True]]
    assert record_to_wire(PartitionChangeRecord(TOPIC_ID, 1, replicas=(3,))) == [
        5,
        0,
        [TOPIC_ID.bytes, 1, None, None, [3], None, None],
    ]
    assert record_to_wire(NoOpRecord()) == [20, 0, []]


def test_standalone_bytes_are_msgpack_with_bin_uuid() -> None:
    data = encode_record(RemoveTopicRecord(METADATA_TOPIC_ID))
    # fixarray(3), 9, 0, fixarray(1), bin8 of 16 bytes
    assert data == bytes([0x93, 0x09, 0x00, 0x91, 0xC4, 0x10]) + METADATA_TOPIC_ID.bytes
    assert decode_record(data) == RemoveTopicRecord(METADATA_TOPIC_ID)


@pytest.mark.parametrize("record", one_of_each(), ids=record_type_name)
def test_each_type_round_trips(record: Record) -> None:
    assert decode_record(encode_record(record)) == record
    assert record_from_wire(record_to_wire(record)) == record


@settings(max_examples=300, deadline=None)
@given(all_records)
def test_round_trip_property(record: Record) -> None:
    decoded = decode_record(encode_record(record))
    assert decoded == record
    assert type(decoded) is type(record)
    assert record_from_wire(record_to_wire(record)) == record


def test_decoded_tuples_are_tuples() -> None:
    decoded = decode_record(encode_record(PartitionRecord(TOPIC_ID, 0, (1, 2), (1,), 1)))
    assert isinstance(decoded, PartitionRecord)
    assert type(decoded.replicas) is tuple
    assert type(decoded.isr) is tuple
    assert hash(decoded) == hash(PartitionRecord(TOPIC_ID, 0, (1, 2), (1,), 1))


def test_records_are_frozen() -> None:
    record = TopicRecord("orders", TOPIC_ID)
    with pytest.raises(AttributeError):
        record.name = "other"  # type: ignore[misc]


def test_record_to_wire_refuses_non_records() -> None:
    with pytest.raises(TypeError, match="not a metadata record"):
        record_to_wire(("orders", TOPIC_ID))  # type: ignore[arg-type]


# ----- versions and types this build cannot read ------------------------------------------


def test_unknown_type_is_reported_with_the_supported_types() -> None:
    data = pack_msgpack([99, 0, ["x"]])
    with pytest.raises(UnknownRecordTypeError) as info:
        decode_record(data)
    message = str(info.value)
    assert "type 99" in message
    assert "2 (TopicRecord)" in message
    assert "1004 (SnapshotFooter)" in message
    assert info.value.type_code == 99
    assert info.value.version == 0
    assert isinstance(info.value, RecordDecodeError)
    assert isinstance(info.value, ValueError)


def test_unknown_type_code_10_between_known_codes() -> None:
    # Kafka's DelegationTokenRecord: we do not have it, and must say so rather than skip it.
    with pytest.raises(UnknownRecordTypeError, match="type 10"):
        record_from_wire([10, 0, []])


def test_bool_type_code_is_not_read_as_an_int() -> None:
    # True == 1 in Python; it must not decode as UnregisterBrokerRecord.
    with pytest.raises(UnknownRecordTypeError, match="type True"):
        record_from_wire([True, 0, [1, 2]])


def test_unsupported_version_is_reported_with_the_supported_versions() -> None:
    with pytest.raises(UnsupportedRecordVersionError) as info:
        decode_record(pack_msgpack([2, 1, ["orders", TOPIC_ID.bytes, False]]))
    message = str(info.value)
    assert "version 1 of TopicRecord (type 2)" in message
    assert "versions [0]" in message
    assert (info.value.type_code, info.value.version) == (2, 1)
    assert isinstance(info.value, RecordDecodeError)


@pytest.mark.parametrize("version", [-1, 1, "0", None, False, 0.0])
def test_non_int_or_unknown_versions_are_refused(version: object) -> None:
    with pytest.raises(UnsupportedRecordVersionError):
        record_from_wire([9, version, [TOPIC_ID.bytes]])


def test_supported_versions() -> None:
    assert supported_versions(TopicRecord.TYPE) == {0}
    assert supported_versions(99) == frozenset()
    assert all(cls.VERSION in supported_versions(code) for code, cls in RECORD_CLASSES.items())


def test_with_context_keeps_the_class_and_attributes() -> None:
    with pytest.raises(UnsupportedRecordVersionError) as info:
        record_from_wire([2, 3, []])
    wrapped = info.value.with_context("record at offset 17")
    assert type(wrapped) is UnsupportedRecordVersionError
    assert str(wrapped).startswith("record at offset 17: unsupported version 3 of TopicRecord")
    assert (wrapped.type_code, wrapped.version) == (2, 3)


# ----- malformed input --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("wire", "fragment"),
    [
        ({"type": 2}, "array [type, version, fields]"),
        ([2, 0], "array [type, version, fields]"),
        ([2, 0, [], 1], "array [type, version, fields]"),
        (b"\x02\x00\x00", "array [type, version, fields]"),
        ([2, 0, "orders"], "TopicRecord v0 has 3 fields"),
        ([2, 0, ["orders", TOPIC_ID.bytes]], "TopicRecord v0 has 3 fields"),
        ([2, 0, ["orders", TOPIC_ID.bytes, False, 1]], "TopicRecord v0 has 3 fields"),
        ([20, 0, [None]], "NoOpRecord v0 has 0 fields"),
        ([20, 0, None], "NoOpRecord v0 has 0 fields"),
    ],
)
def test_malformed_arrays(wire: object, fragment: str) -> None:
    with pytest.raises(RecordDecodeError, match=fragment.replace("[", r"\[")):
        record_from_wire(wire)


@pytest.mark.parametrize(
    ("wire", "fragment"),
    [
        # a Uuid must be exactly a 16-byte bin
        ([2, 0, ["t", TOPIC_ID.bytes[:15], False]], "16-byte bin"),
        ([2, 0, ["t", str(TOPIC_ID), False]], "16-byte bin"),
        ([2, 0, ["t", None, False]], "16-byte bin"),
        # strings, bools and ints are not converted into each other
        ([2, 0, [b"t", TOPIC_ID.bytes, False]], "TopicRecord.name must be a str"),
        ([2, 0, ["t", TOPIC_ID.bytes, 0]], "TopicRecord.internal must be a bool"),
        ([1, 0, [True, 3]], "UnregisterBrokerRecord.broker_id must be an int"),
        ([1, 0, [1.0, 3]], "UnregisterBrokerRecord.broker_id must be an int"),
        ([1, 0, [1, -1]], "UnregisterBrokerRecord.broker_epoch must be an int in"),
        ([7, 0, [INT32_MAX + 1, 3]], "FenceBrokerRecord.broker_id must be an int in"),
        ([4, 0, [2, "t", "k", 5]], "ConfigRecord.value must be a str"),
        ([4, 0, [200, "t", "k", "v"]], "ConfigRecord.resource_type must be an int in"),
        # arrays are arrays, never bytes or strings that iterate
        ([3, 0, [TOPIC_ID.bytes, 0, b"\x01\x02", [1], 1, 0, 0]], "expected an array"),
        ([3, 0, [TOPIC_ID.bytes, 0, "12", [1], 1, 0, 0]], "expected an array"),
        ([3, 0, [TOPIC_ID.bytes, 0, [1, "2"], [1], 1, 0, 0]], "PartitionRecord.replicas"),
        ([3, 0, [TOPIC_ID.bytes, 0, [1], [1], -2, 0, 0]], "PartitionRecord.leader"),
        ([3, 0, [TOPIC_ID.bytes, -1, [1], [1], 1, 0, 0]], "PartitionRecord.partition"),
        ([5, 0, [TOPIC_ID.bytes, 0, 5, None, None, None, None]], "expected an array"),
        ([5, 0, [TOPIC_ID.bytes, 0, None, "1", None, None, None]], "PartitionChangeRecord.leader"),
        # nested endpoints
        ([0, 0, [1, OTHER_ID.bytes, 0, [["n", "h"]], None, True]], "BrokerEndpoint is the array"),
        ([0, 0, [1, OTHER_ID.bytes, 0, ["n"], None, True]], "BrokerEndpoint is the array"),
        ([0, 0, [1, OTHER_ID.bytes, 0, [["n", "h", 70000]], None, True]], "BrokerEndpoint.port"),
        ([0, 0, [1, OTHER_ID.bytes, 0, [], 5, True]], "RegisterBrokerRecord.rack"),
        ([1002, 0, [1, 2, None]], "expected an array"),
        ([1003, 0, [-1, 0]], "SnapshotHeader.version"),
    ],
)
def test_wrong_field_types_are_decode_errors(wire: list[object], fragment: str) -> None:
    with pytest.raises(RecordDecodeError) as info:
        record_from_wire(wire)
    assert fragment in str(info.value)
    assert info.value.type_code == wire[0]
    assert not isinstance(info.value, UnknownRecordTypeError | UnsupportedRecordVersionError)
    # the same through bytes
    with pytest.raises(RecordDecodeError):
        decode_record(pack_msgpack(wire))


@pytest.mark.parametrize("record", one_of_each(), ids=record_type_name)
def test_every_truncation_is_a_decode_error(record: Record) -> None:
    data = encode_record(record)
    for end in range(len(data)):
        with pytest.raises(RecordDecodeError, match="not valid msgpack"):
            decode_record(data[:end])


def test_trailing_bytes_are_a_decode_error() -> None:
    data = encode_record(NoOpRecord())
    with pytest.raises(RecordDecodeError, match="ExtraData"):
        decode_record(data + b"\x00")


@pytest.mark.parametrize(
    "data",
    [
        b"\xc1",  # never used in msgpack
        b"\xa2\xff\xfe",  # a str that is not UTF-8
        msgpack.packb({1: 2}),  # strict_map_key refuses int keys
        msgpack.packb(msgpack.ExtType(5, b"x")),
        b"\x91" * 5000 + b"\xc0",  # nesting deeper than msgpack's stack
    ],
)
def test_invalid_msgpack_is_a_decode_error(data: bytes) -> None:
    with pytest.raises(RecordDecodeError):
        decode_record(data)


wire_leaves = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(1 << 63), (1 << 64) - 1),
    st.floats(allow_nan=False),
    st.text(max_size=4),
    st.binary(max_size=4),
    st.binary(min_size=16, max_size=16),
)
wire_values = st.recursive(wire_leaves, lambda inner: st.lists(inner, max_size=7), max_leaves=20)
near_records = st.tuples(
    st.sampled_from([*RECORD_CLASSES, 6, 99]), st.sampled_from([0, 0, 0, 1]), wire_values
)


@settings(max_examples=500, deadline=None)
@given(near_records | wire_values)
def test_arbitrary_wire_values_decode_exactly_or_are_refused(wire: Any) -> None:
    """Documented outcomes only, and nothing is coerced: a decoded record re-encodes to the
    very same msgpack bytes (so a bool was never read as an int, nor bytes as an array)."""
    try:
        record = record_from_wire(wire)
    except RecordDecodeError:
        return
    assert pack_msgpack(record_to_wire(record)) == pack_msgpack(list_form(wire))


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=64))
def test_arbitrary_bytes_decode_or_are_refused(data: bytes) -> None:
    try:
        record = decode_record(data)
    except RecordDecodeError:
        return
    assert encode_record(record) == data


# ----- construction -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("cls", "args", "fragment"),
    [
        (TopicRecord, (5, TOPIC_ID), "TopicRecord.name must be a str, got 5"),
        (TopicRecord, ("t", str(TOPIC_ID)), "TopicRecord.topic_id must be a Uuid"),
        (TopicRecord, ("t", TOPIC_ID, 1), "TopicRecord.internal must be a bool, got 1"),
        (TopicRecord, ("bad\ud800", TOPIC_ID), "encodable as UTF-8"),
        (PartitionRecord, (TOPIC_ID, 0, [1], (1,), 1), "PartitionRecord.replicas must be a tuple"),
        (PartitionRecord, (TOPIC_ID, 0, (1,), (True,), 1), "PartitionRecord.isr"),
        (PartitionRecord, (TOPIC_ID, 0, (1,), (1,), 1, 1 << 31), "leader_epoch"),
        (PartitionChangeRecord, (TOPIC_ID, 0, None, -2), "leader must be an int in [-1,"),
        (RegisterBrokerRecord, (1, OTHER_ID, 0, [BrokerEndpoint("a", "b", 1)]), "endpoints"),
        (RegisterBrokerRecord, (1, OTHER_ID, 0, (("a", "b", 1),)), "endpoints"),
        (RegisterBrokerRecord, (1, OTHER_ID, 1 << 63, ()), "broker_epoch"),
        (BrokerEndpoint, ("a", "b", -1), "BrokerEndpoint.port"),
        (ConfigRecord, ("2", "t", "k", "v"), "ConfigRecord.resource_type"),
        (LeaderChangeMessage, (1, 2, (1, -3)), "LeaderChangeMessage.voters"),
        (SnapshotHeader, (1 << 15, 0), "SnapshotHeader.version"),
        (SnapshotFooter, (None,), "SnapshotFooter.version"),
    ],
)
def test_construction_validates_fields(
    cls: type[Any], args: tuple[Any, ...], fragment: str
) -> None:
    with pytest.raises(InvalidRecordError) as info:
        cls(*args)
    assert fragment in str(info.value)
    assert not isinstance(info.value, RecordDecodeError)


def test_construction_accepts_the_edges_of_each_range() -> None:
    PartitionRecord(TOPIC_ID, INT32_MAX, (), (), -1, INT32_MAX, 0)
    RegisterBrokerRecord(0, OTHER_ID, INT64_MAX, (BrokerEndpoint("", "", 65535),))
    PartitionChangeRecord(TOPIC_ID, 0)
    ConfigRecord(0, "", "", "")
    TopicRecord("ünïcode-тема", TOPIC_ID)


# ----- names, control records, JSON -------------------------------------------------------


def test_record_type_name() -> None:
    assert record_type_name(2) == "TopicRecord"
    assert record_type_name(1002) == "LeaderChangeMessage"
    assert record_type_name(TopicRecord("t", TOPIC_ID)) == "TopicRecord"
    assert record_type_name(NoOpRecord()) == "NoOpRecord"
    assert record_type_name(6) == "AccessControlEntryRecord"
    with pytest.raises(UnknownRecordTypeError, match="type 10"):
        record_type_name(10)
    with pytest.raises(TypeError):
        record_type_name(True)


def test_is_control_record() -> None:
    controls = [record for record in one_of_each() if is_control_record(record)]
    assert [type(record) for record in controls] == [
        LeaderChangeMessage,
        SnapshotHeader,
        SnapshotFooter,
        KRaftVersionRecord,
        VotersRecord,
    ]


def test_json_dicts() -> None:
    assert record_to_json_dict(TopicRecord("orders", TOPIC_ID, internal=True)) == {
        "name": "orders",
        "topic_id": "MnNdA8q3R0GGY6OHa-YcnQ",
        "internal": True,
    }
    assert record_to_json_dict(
        RegisterBrokerRecord(1, OTHER_ID, 42, (BrokerEndpoint("PLAINTEXT", "h", 9092),))
    ) == {
        "broker_id": 1,
        "incarnation_id": "e2wE0WAvR4q2BNDQTz0lzA",
        "broker_epoch": 42,
        "endpoints": [{"name": "PLAINTEXT", "host": "h", "port": 9092}],
        "rack": None,
        "fenced": True,
    }
    assert record_to_json_dict(PartitionChangeRecord(TOPIC_ID, 2, isr=(1, 3))) == {
        "topic_id": "MnNdA8q3R0GGY6OHa-YcnQ",
        "partition": 2,
        "isr": [1, 3],
        "leader": None,
        "replicas": None,
        "leader_epoch": None,
        "partition_epoch": None,
    }
    assert record_to_json_dict(NoOpRecord()) == {}
    with pytest.raises(TypeError):
        record_to_json_dict({"name": "t"})  # type: ignore[arg-type]


@settings(max_examples=200, deadline=None)
@given(all_records)
def test_json_dict_is_plain_json_with_every_field(record: Record) -> None:
    as_dict = record_to_json_dict(record)
    assert json.loads(json.dumps(as_dict, allow_nan=False)) == as_dict
    assert list(as_dict) == [field.name for field in dataclasses.fields(record)]


# ----- the topic id cache -----------------------------------------------------------------


def test_uuid_cache_stays_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(record_fields, "_UUID_CACHE_ENTRIES_MAX", 8)
    monkeypatch.setattr(record_fields, "_uuid_cache", {})
    ids = [Uuid(0, n) for n in range(2, 30)]
    for topic_id in ids:
        decoded = decode_record(encode_record(RemoveTopicRecord(topic_id)))
        assert decoded == RemoveTopicRecord(topic_id)
        assert len(record_fields._uuid_cache) <= 8


def test_decode_errors_survive_pickling() -> None:
    """Spark workers and process pools ship exceptions pickled; nothing may be lost."""
    with pytest.raises(UnsupportedRecordVersionError) as info:
        record_from_wire([2, 3, []])
    copy = pickle.loads(pickle.dumps(info.value))
    assert type(copy) is UnsupportedRecordVersionError
    assert str(copy) == str(info.value)
    assert (copy.type_code, copy.version) == (2, 3)


@pytest.mark.parametrize("record", one_of_each(), ids=record_type_name)
def test_kafka_json_names_every_type_and_field_as_kafka_does(record: Record) -> None:
    """log dump's shape: Kafka's UPPER_SNAKE type names, camelCase fields, JSON values."""
    kafka_type = record_kafka_type(record)
    assert re.fullmatch(r"[A-Z]+(_[A-Z]+)*", kafka_type), kafka_type
    assert KAFKA_TYPE_NAMES[record_type_name(record)] == kafka_type
    data = record_kafka_json(record)
    assert all(re.fullmatch(r"[a-z]+([A-Z][a-z]*)*", key) for key in data), data
    assert json.loads(json.dumps(data)) == data
    assert len(data) == len(dataclasses.fields(record))  # type: ignore[arg-type]


def test_kafka_names_of_the_records_kafka_has() -> None:
    assert KAFKA_TYPE_NAMES["TopicRecord"] == "TOPIC_RECORD"
    assert KAFKA_TYPE_NAMES["PartitionChangeRecord"] == "PARTITION_CHANGE_RECORD"
    assert KAFKA_TYPE_NAMES["RegisterBrokerRecord"] == "REGISTER_BROKER_RECORD"
    assert KAFKA_TYPE_NAMES["NoOpRecord"] == "NO_OP_RECORD"
    assert KAFKA_TYPE_NAMES["AccessControlEntryRecord"] == "ACCESS_CONTROL_ENTRY_RECORD"
    assert KAFKA_TYPE_NAMES["LeaderChangeMessage"] == "LEADER_CHANGE"
    assert KAFKA_TYPE_NAMES["SnapshotHeader"] == "SNAPSHOT_HEADER"
    partition = record_kafka_json(PartitionRecord(TOPIC_ID, 3, (1, 2), (1,), 1, 4, 5))
    assert partition == {
        "topicId": str(TOPIC_ID),
        "partitionId": 3,
        "replicas": [1, 2],
        "isr": [1],
        "leader": 1,
        "leaderEpoch": 4,
        "partitionEpoch": 5,
    }
