"""The controller state machine's topic operations: every CreateTopics / DeleteTopics /
DescribeTopics rule and error code, each refusal checked to leave the state unchanged
(docs/invariants.md I15 and #bad-input)."""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from quorum.controller.placement import place_replicas
from quorum.controller.requests import (
    BrokerHeartbeatRequest,
    CreatableReplicaAssignment,
    CreatableTopic,
    CreateTopicResult,
    CreateTopicsRequest,
    CreateTopicsResponse,
    DeleteTopic,
    DeleteTopicsRequest,
    DeleteTopicsResponse,
    DescribeTopic,
    RegisterBrokerRequest,
)
from quorum.controller.result import ControllerResult
from quorum.controller.state_machine import ControllerConfig, ControllerStateMachine
from quorum.errors import ErrorCode
from quorum.ids import METADATA_TOPIC_ID, ZERO_UUID, Uuid
from quorum.limits import (
    CREATE_TOPICS_TOPICS_MAX,
    DELETE_TOPICS_TOPICS_MAX,
    RECORDS_PER_BATCH_MAX,
    TOPIC_CONFIGS_MAX,
)
from quorum.metadata.batch import DecodedBatch
from quorum.metadata.delta import replay_batches
from quorum.metadata.image import BrokerImage, MetadataImage
from quorum.metadata.records import (
    ConfigRecord,
    ConfigResourceType,
    LeaderChangeMessage,
    PartitionRecord,
    RemoveTopicRecord,
    TopicRecord,
)

T = TypeVar("T")


# ----- the harness (also used by the other controller tests) ----------------------------------


class Harness:
    """A controller state machine driven as the server's driver would: propose at the log end,
    replay_pending, then commit (replay_committed) unless told to hold the batch."""

    def __init__(
        self,
        racks: Sequence[str | None] = (None, None, None),
        *,
        seed: int = 0,
        config: ControllerConfig | None = None,
    ) -> None:
        self.rng = random.Random(seed)
        self.sm = ControllerStateMachine(
            config=config or ControllerConfig(), rng=random.Random(seed + 1)
        )
        self.next_offset = 0
        self.now_ms = 1_000
        self.committed_batches: list[DecodedBatch] = []
        self.held: list[DecodedBatch] = []
        self.drawn_ids: list[Uuid] = []
        for broker_id, rack in enumerate(racks):
            self.add_broker(broker_id, rack)

    def new_id(self) -> Uuid:
        topic_id = Uuid.random(self.rng)
        self.drawn_ids.append(topic_id)
        return topic_id

    def propose(self, result: ControllerResult[T], *, hold: bool = False) -> T:
        if result.records:
            batch = DecodedBatch(self.next_offset, 1, self.now_ms, False, result.records)
            self.sm.replay_pending(result.records, self.next_offset)
            self.next_offset += len(result.records)
            self.held.append(batch)
            if not hold:
                self.commit_held()
        return result.response

    def commit_held(self) -> None:
        for batch in self.held:
            self.sm.replay_committed(batch)
            self.committed_batches.append(batch)
        self.held.clear()

    def lose_leadership(self) -> None:
        """The held batches are truncated away; a new epoch starts with a LeaderChange."""
        self.held.clear()
        self.sm.reset_to_committed()
        self.next_offset = self.sm.committed_image.offset + 1
        batch = DecodedBatch(
            self.next_offset, 2, self.now_ms, True, (LeaderChangeMessage(1, 2, (1, 2, 3)),)
        )
        self.sm.replay_committed(batch)
        self.committed_batches.append(batch)
        self.next_offset += 1

    def add_broker(self, broker_id: int, rack: str | None = None, *, unfence: bool = True) -> int:
        incarnation = Uuid.random(self.rng)
        response = self.propose(
            self.sm.register_broker(
                RegisterBrokerRequest(broker_id, incarnation, rack=rack),
                next_offset=self.next_offset,
                now_ms=self.now_ms,
            )
        )
        assert response.error_code == ErrorCode.NONE, response
        if unfence:
            self.heartbeat(broker_id)
        return response.broker_epoch

    def heartbeat(self, broker_id: int, *, offset: int | None = None, hold: bool = False) -> Any:
        epoch = self.sm.latest_image.brokers[broker_id].broker_epoch
        applied = self.sm.committed_image.offset if offset is None else offset
        return self.propose(
            self.sm.broker_heartbeat(
                BrokerHeartbeatRequest(broker_id, epoch, applied),
                next_offset=self.next_offset,
                now_ms=self.now_ms,
            ),
            hold=hold,
        )

    def create_result(
        self, *topics: CreatableTopic, validate_only: bool = False
    ) -> ControllerResult[CreateTopicsResponse]:
        return self.sm.create_topics(
            CreateTopicsRequest(tuple(topics), validate_only=validate_only),
            next_offset=self.next_offset,
            new_topic_id=self.new_id,
        )

    def create(self, *topics: CreatableTopic, validate_only: bool = False) -> CreateTopicsResponse:
        return self.propose(self.create_result(*topics, validate_only=validate_only))

    def create_one(
        self, name: str, partitions: int = 1, rf: int = 1, **kw: Any
    ) -> CreateTopicResult:
        return self.create(CreatableTopic(name, partitions, rf, **kw)).topics[0]

    def delete_result(self, *entries: DeleteTopic) -> ControllerResult[DeleteTopicsResponse]:
        return self.sm.delete_topics(
            DeleteTopicsRequest(tuple(entries)), next_offset=self.next_offset
        )

    def delete(self, *entries: DeleteTopic) -> DeleteTopicsResponse:
        return self.propose(self.delete_result(*entries))

    def expect_refused(self, call: Callable[[], ControllerResult[T]]) -> T:
        """Run an operation that must refuse everything: no records, no state change."""
        latest, committed = self.sm.latest_image, self.sm.committed_image
        result = call()
        assert result.records == ()
        assert self.sm.latest_image is latest
        assert self.sm.committed_image is committed
        return result.response

    def check_replay(self) -> None:
        """The committed image equals a fresh replay of every committed batch."""
        assert (
            replay_batches(MetadataImage.EMPTY, self.committed_batches) == self.sm.committed_image
        )


def error_of(response: CreateTopicsResponse) -> tuple[ErrorCode, str]:
    (result,) = response.topics
    return result.error_code, result.error_message or ""


@pytest.fixture
def h() -> Harness:
    return Harness()


# ----- CreateTopics: names ----------------------------------------------------------------------

BAD_NAMES: list[tuple[str, str, ErrorCode, str]] = [
    ("empty", "", ErrorCode.INVALID_TOPIC_EXCEPTION, "can't be empty"),
    ("dot", ".", ErrorCode.INVALID_TOPIC_EXCEPTION, "cannot be"),
    ("dotdot", "..", ErrorCode.INVALID_TOPIC_EXCEPTION, "cannot be"),
    ("250 chars", "a" * 250, ErrorCode.INVALID_TOPIC_EXCEPTION, "longer than 249 characters"),
    ("255 chars", "b" * 255, ErrorCode.INVALID_TOPIC_EXCEPTION, "longer than 249"),
    ("4096 chars", "c" * 4096, ErrorCode.INVALID_TOPIC_EXCEPTION, "longer than 249"),
    ("1 MiB", "d" * (1 << 20), ErrorCode.INVALID_TOPIC_EXCEPTION, "longer than 249"),
    ("e acute", "caf\u00e9", ErrorCode.INVALID_TOPIC_EXCEPTION, "other than ASCII"),
    ("cyrillic a", "\u0430bc", ErrorCode.INVALID_TOPIC_EXCEPTION, "other than ASCII"),
    ("full-width a", "\uff41", ErrorCode.INVALID_TOPIC_EXCEPTION, "other than ASCII"),
    ("zero-width joiner", "a\u200db", ErrorCode.INVALID_TOPIC_EXCEPTION, "other than ASCII"),
    ("rtl override", "a\u202eb", ErrorCode.INVALID_TOPIC_EXCEPTION, "other than ASCII"),
    ("bom", "\ufeffa", ErrorCode.INVALID_TOPIC_EXCEPTION, "other than ASCII"),
    ("nul", "a\x00", ErrorCode.INVALID_TOPIC_EXCEPTION, "other than ASCII"),
    ("newline", "a\nb", ErrorCode.INVALID_TOPIC_EXCEPTION, "other than ASCII"),
    ("carriage return", "a\rb", ErrorCode.INVALID_TOPIC_EXCEPTION, "other than ASCII"),
    ("tab", "a\tb", ErrorCode.INVALID_TOPIC_EXCEPTION, "other than ASCII"),
    ("space", "a b", ErrorCode.INVALID_TOPIC_EXCEPTION, "other than ASCII"),
    ("lone surrogate", "a\ud800", ErrorCode.INVALID_TOPIC_EXCEPTION, "other than ASCII"),
    ("slash", "/", ErrorCode.INVALID_TOPIC_EXCEPTION, "other than ASCII"),
    ("backslash", "a\\b", ErrorCode.INVALID_TOPIC_EXCEPTION, "other than ASCII"),
    ("a/b", "a/b", ErrorCode.INVALID_TOPIC_EXCEPTION, "other than ASCII"),
    ("traversal", "../x", ErrorCode.INVALID_TOPIC_EXCEPTION, "other than ASCII"),
    ("percent", "%2e%2e", ErrorCode.INVALID_TOPIC_EXCEPTION, "other than ASCII"),
    ("colon", "a:b", ErrorCode.INVALID_TOPIC_EXCEPTION, "other than ASCII"),
    ("glob", "a*?", ErrorCode.INVALID_TOPIC_EXCEPTION, "other than ASCII"),
    ("shell", "$(rm)", ErrorCode.INVALID_TOPIC_EXCEPTION, "other than ASCII"),
    ("reserved prefix", "__x", ErrorCode.INVALID_TOPIC_EXCEPTION, "reserved"),
    ("system name case", "__Consumer_Offsets", ErrorCode.INVALID_TOPIC_EXCEPTION, "reserved"),
    ("metadata topic", "__cluster_metadata", ErrorCode.INVALID_REQUEST, "prohibited"),
]


@pytest.mark.parametrize(
    ("name", "code", "text"), [b[1:] for b in BAD_NAMES], ids=[b[0] for b in BAD_NAMES]
)
def test_create_refuses_bad_names(h: Harness, name: str, code: ErrorCode, text: str) -> None:
    response = h.expect_refused(lambda: h.create_result(CreatableTopic(name, 1, 1)))
    got_code, message = error_of(response)
    assert got_code == code
    assert text in message
    assert len(message) < 600  # huge or hostile names are quoted short
    assert "\n" not in message and "\x00" not in message and "\u202e" not in message


@pytest.mark.parametrize(
    "name", ["a" * 248, "a" * 249, "...", "-", "-leading", "a-b.c_d", "Z9", "foo-1"]
)
def test_create_accepts_legal_names(h: Harness, name: str) -> None:
    result = h.create_one(name)
    assert result.error_code == ErrorCode.NONE, result
    assert h.sm.committed_image.topics_by_name[name] == result.topic_id


def test_system_topic_names_are_creatable_and_internal(h: Harness) -> None:
    for name in ("__consumer_offsets", "__transaction_state", "__share_group_state"):
        result = h.create_one(name)
        assert result.error_code == ErrorCode.NONE
        assert h.sm.committed_image.topics_by_id[result.topic_id].internal
    code, _ = error_of(
        h.expect_refused(lambda: h.create_result(CreatableTopic("__consumer_offsets", 1, 1)))
    )
    assert code == ErrorCode.TOPIC_ALREADY_EXISTS


def test_internal_false_on_a_system_topic_is_refused(h: Harness) -> None:
    topic = CreatableTopic("__transaction_state", 1, 1, configs=(("internal", "false"),))
    code, message = error_of(h.expect_refused(lambda: h.create_result(topic)))
    assert code == ErrorCode.INVALID_CONFIG
    assert "always internal" in message


def test_existing_name_is_topic_already_exists(h: Harness) -> None:
    first = h.create_one("orders")
    code, message = error_of(h.expect_refused(lambda: h.create_result(CreatableTopic("orders"))))
    assert code == ErrorCode.TOPIC_ALREADY_EXISTS
    assert "'orders' already exists" in message and str(first.topic_id) in message


@pytest.mark.parametrize(
    ("existing", "new"), [("a_b", "a.b"), ("a.b", "a_b"), ("a.b_c", "a_b.c"), ("x_y_z", "x.y.z")]
)
def test_collisions_with_existing_topics(h: Harness, existing: str, new: str) -> None:
    h.create_one(existing)
    code, message = error_of(h.expect_refused(lambda: h.create_result(CreatableTopic(new))))
    assert code == ErrorCode.INVALID_TOPIC_EXCEPTION
    assert f"Topic '{new}' collides with existing topic: {existing}" in message


def test_collisions_within_one_request(h: Harness) -> None:
    response = h.create(CreatableTopic("a.b"), CreatableTopic("a_b"), CreatableTopic("c"))
    codes = [r.error_code for r in response.topics]
    assert codes == [ErrorCode.NONE, ErrorCode.INVALID_TOPIC_EXCEPTION, ErrorCode.NONE]
    assert "collides with topic a.b created earlier" in (response.topics[1].error_message or "")
    assert set(h.sm.committed_image.topics_by_name) == {"a.b", "c"}


def test_no_collision_once_the_other_topic_is_deleted_and_case_only_pairs_are_fine(
    h: Harness,
) -> None:
    h.create_one("a_b")
    h.delete(DeleteTopic("a_b"))
    assert h.create_one("a.b").error_code == ErrorCode.NONE
    h.create_one("Foo")
    assert h.create_one("foo").error_code == ErrorCode.NONE


def test_duplicate_names_in_one_request_are_invalid_request(h: Harness) -> None:
    response = h.expect_refused(lambda: h.create_result(CreatableTopic("x"), CreatableTopic("x")))
    assert [r.error_code for r in response.topics] == [ErrorCode.INVALID_REQUEST] * 2
    assert "Duplicate topic name" in (response.topics[0].error_message or "")


# ----- CreateTopics: partitions, replication factor, assignments -------------------------------

BAD_NUMBERS: list[tuple[str, int, int, ErrorCode, str]] = [
    ("0 partitions", 0, 1, ErrorCode.INVALID_PARTITIONS, "non-positive"),
    ("-2 partitions", -2, 1, ErrorCode.INVALID_PARTITIONS, "non-positive"),
    ("5001 partitions", 5001, 1, ErrorCode.INVALID_PARTITIONS, "more than the 5000"),
    ("2^31-1 partitions", 2**31 - 1, 1, ErrorCode.INVALID_PARTITIONS, "more than"),
    ("2^31 partitions", 2**31, 1, ErrorCode.INVALID_PARTITIONS, "more than"),
    ("rf 0", 1, 0, ErrorCode.INVALID_REPLICATION_FACTOR, "must be in 1..32767"),
    ("rf -2", 1, -2, ErrorCode.INVALID_REPLICATION_FACTOR, "must be in 1..32767"),
    ("rf 32768", 1, 32768, ErrorCode.INVALID_REPLICATION_FACTOR, "must be in 1..32767"),
    ("rf above brokers", 1, 4, ErrorCode.INVALID_REPLICATION_FACTOR, "only 3 unfenced broker"),
    ("rf 32767", 1, 32767, ErrorCode.INVALID_REPLICATION_FACTOR, "of 3 registered"),
]


@pytest.mark.parametrize(
    ("partitions", "rf", "code", "text"),
    [b[1:] for b in BAD_NUMBERS],
    ids=[b[0] for b in BAD_NUMBERS],
)
def test_create_refuses_bad_numbers(
    h: Harness, partitions: int, rf: int, code: ErrorCode, text: str
) -> None:
    response = h.expect_refused(lambda: h.create_result(CreatableTopic("t", partitions, rf)))
    got, message = error_of(response)
    assert got == code
    assert text in message


def test_replication_factor_message_counts_fenced_brokers() -> None:
    h = Harness(racks=(None, None, None))
    h.add_broker(3, unfence=False)
    code, message = error_of(h.expect_refused(lambda: h.create_result(CreatableTopic("t", 1, 4))))
    assert code == ErrorCode.INVALID_REPLICATION_FACTOR
    assert "3 unfenced broker(s) of 4 registered; fenced: [3]" in message


def test_no_brokers_means_no_topics() -> None:
    h = Harness(racks=())
    code, message = error_of(h.expect_refused(lambda: h.create_result(CreatableTopic("t"))))
    assert code == ErrorCode.INVALID_REPLICATION_FACTOR
    assert "0 unfenced broker(s) of 0 registered" in message


def test_minus_one_means_the_defaults() -> None:
    h = Harness(config=ControllerConfig(default_num_partitions=3, default_replication_factor=2))
    result = h.create(CreatableTopic("t")).topics[0]
    assert (result.num_partitions, result.replication_factor) == (3, 2)
    assert Harness().create(CreatableTopic("t")).topics[0].num_partitions == 1


def assign(
    *replicas: Sequence[int], indexes: Sequence[int] | None = None, name: str = "t"
) -> CreatableTopic:
    indexes = list(range(len(replicas))) if indexes is None else indexes
    return CreatableTopic(
        name,
        assignments=tuple(
            CreatableReplicaAssignment(i, tuple(r)) for i, r in zip(indexes, replicas, strict=True)
        ),
    )


BAD_ASSIGNMENTS: list[tuple[str, CreatableTopic, ErrorCode, str]] = [
    (
        "duplicate partition",
        assign([0], [1], indexes=[0, 0]),
        ErrorCode.INVALID_REPLICA_ASSIGNMENT,
        "multiple manual partition assignments for partition 0",
    ),
    (
        "gap",
        assign([0], [1], indexes=[0, 2]),
        ErrorCode.INVALID_REPLICA_ASSIGNMENT,
        "consecutive 0-based",
    ),
    (
        "negative index",
        assign([0], indexes=[-1]),
        ErrorCode.INVALID_REPLICA_ASSIGNMENT,
        "consecutive 0-based",
    ),
    ("empty replicas", assign([]), ErrorCode.INVALID_REPLICA_ASSIGNMENT, "is empty"),
    (
        "duplicate broker",
        assign([0, 0]),
        ErrorCode.INVALID_REPLICA_ASSIGNMENT,
        "includes broker 0 more than once",
    ),
    (
        "unknown broker",
        assign([0, 7]),
        ErrorCode.INVALID_REPLICA_ASSIGNMENT,
        "includes broker 7, but no such broker is registered",
    ),
    ("negative broker", assign([-1]), ErrorCode.INVALID_REPLICA_ASSIGNMENT, "no such broker"),
    (
        "inconsistent lengths",
        assign([0, 1], [2]),
        ErrorCode.INVALID_REPLICA_ASSIGNMENT,
        "not consistent with previous partitions",
    ),
    (
        "with num_partitions",
        CreatableTopic("t", 1, -1, (CreatableReplicaAssignment(0, (0,)),)),
        ErrorCode.INVALID_REQUEST,
        "Both cannot be used",
    ),
    (
        "with rf",
        CreatableTopic("t", -1, 1, (CreatableReplicaAssignment(0, (0,)),)),
        ErrorCode.INVALID_REQUEST,
        "Both cannot be used",
    ),
    (
        "too many partitions",
        assign(*([[0]] * 5001)),
        ErrorCode.INVALID_PARTITIONS,
        "5001 partitions",
    ),
]


@pytest.mark.parametrize(
    ("topic", "code", "text"), [b[1:] for b in BAD_ASSIGNMENTS], ids=[b[0] for b in BAD_ASSIGNMENTS]
)
def test_create_refuses_bad_assignments(
    h: Harness, topic: CreatableTopic, code: ErrorCode, text: str
) -> None:
    got, message = error_of(h.expect_refused(lambda: h.create_result(topic)))
    assert got == code
    assert text in message


def test_manual_assignment_with_fenced_brokers() -> None:
    h = Harness()
    h.add_broker(3, unfence=False)
    result = h.create(assign([3, 1], [2, 3])).topics[0]
    assert result.error_code == ErrorCode.NONE
    partitions = h.sm.committed_image.topics_by_id[result.topic_id].partitions
    assert (partitions[0].replicas, partitions[0].isr, partitions[0].leader) == ((3, 1), (1,), 1)
    assert (partitions[1].replicas, partitions[1].isr, partitions[1].leader) == ((2, 3), (2,), 2)
    code, message = error_of(h.expect_refused(lambda: h.create_result(assign([3], name="u"))))
    assert code == ErrorCode.INVALID_REPLICA_ASSIGNMENT
    assert "are fenced" in message


# ----- CreateTopics: configs ----------------------------------------------------------------------

BAD_CONFIGS: list[tuple[str, tuple[tuple[str, str | None], ...], str]] = [
    ("unknown key", (("retention.hours", "1"),), "Unknown topic config name: 'retention.hours'"),
    ("empty key", (("", "1"),), "may not be empty"),
    ("duplicate key", (("retention.ms", "1"), ("retention.ms", "2")), "more than once"),
    ("duplicate internal", (("internal", "true"), ("internal", "true")), "more than once"),
    ("null value", (("retention.ms", None),), "Null value not supported"),
    ("huge value", (("retention.ms", "1" * 257),), "257 characters; at most 256"),
    ("1 MiB value", (("cleanup.policy", "x" * (1 << 20)),), "at most 256"),
    ("not a number", (("retention.ms", "abc"),), "must be a long in [-1,"),
    ("below -1", (("retention.ms", "-2"),), "must be a long"),
    ("underscore digits", (("retention.ms", "1_000"),), "must be a long"),
    ("non-ascii digits", (("retention.ms", "\u0661\u0662"),), "must be a long"),
    ("long overflow", (("retention.bytes", str(2**63)),), "must be a long"),
    ("int overflow", (("segment.bytes", str(2**31)),), "must be an int"),
    ("segment too small", (("segment.bytes", "13"),), "must be an int in [14,"),
    ("bad policy", (("cleanup.policy", "forever"),), "delete and compact"),
    ("empty policy", (("cleanup.policy", ""),), "delete and compact"),
    ("repeated policy", (("cleanup.policy", "delete,delete"),), "must not repeat"),
    ("bad compression", (("compression.type", "brotli"),), "must be one of"),
    ("min isr 0", (("min.insync.replicas", "0"),), "must be an int in [1,"),
    ("min isr above rf", (("min.insync.replicas", "2"),), "more than the replication factor 1"),
    ("internal yes", (("internal", "yes"),), "must be true or false"),
    ("too many", tuple((f"k{i}", "v") for i in range(TOPIC_CONFIGS_MAX + 1)), "at most 64"),
]


@pytest.mark.parametrize(
    "configs,text", [b[1:] for b in BAD_CONFIGS], ids=[b[0] for b in BAD_CONFIGS]
)
def test_create_refuses_bad_configs(
    h: Harness, configs: tuple[tuple[str, str | None], ...], text: str
) -> None:
    topic = CreatableTopic("t", 1, 1, configs=configs)
    code, message = error_of(h.expect_refused(lambda: h.create_result(topic)))
    assert code == ErrorCode.INVALID_CONFIG
    assert text in message
    assert len(message) < 600


def test_configs_are_normalised_recorded_and_returned(h: Harness) -> None:
    configs = (
        ("retention.ms", "+100"),
        ("cleanup.policy", "Compact, delete"),
        ("compression.type", "ZSTD"),
        ("min.insync.replicas", "2"),
        ("internal", "TRUE"),
    )
    result = h.create(CreatableTopic("t", 2, 2, configs=configs)).topics[0]
    expected = (
        ("cleanup.policy", "compact,delete"),
        ("compression.type", "zstd"),
        ("min.insync.replicas", "2"),
        ("retention.ms", "100"),
    )
    assert result.configs == expected
    topic = h.sm.committed_image.topics_by_id[result.topic_id]
    assert topic.internal  # KIP-619: a user-defined internal topic
    assert tuple(sorted(topic.configs.items())) == expected  # "internal" lives in TopicRecord


# ----- CreateTopics: records, ids, offsets, limits ----------------------------------------------


def test_records_of_a_create_are_one_atomic_batch_in_order(h: Harness) -> None:
    start = h.next_offset
    result = h.create_result(
        CreatableTopic("a", 2, 2, configs=(("retention.ms", "5"), ("cleanup.policy", "compact"))),
        CreatableTopic("b", 1, 1),
    )
    assert result.is_atomic
    types = [type(r).__name__ for r in result.records]
    assert types == [
        "TopicRecord",
        "ConfigRecord",
        "ConfigRecord",
        "PartitionRecord",
        "PartitionRecord",
        "TopicRecord",
        "PartitionRecord",
    ]
    a, b = result.response.topics
    assert a.creation_offset == start and b.creation_offset == start + 5
    first = result.records[0]
    assert isinstance(first, TopicRecord) and first.topic_id == a.topic_id
    assert result.records[1] == ConfigRecord(
        ConfigResourceType.TOPIC, "a", "cleanup.policy", "compact"
    )
    p0 = result.records[3]
    assert isinstance(p0, PartitionRecord) and p0.isr == p0.replicas and p0.leader == p0.replicas[0]
    h.propose(result)
    image = h.sm.committed_image
    assert image.topics_by_id[a.topic_id].creation_offset == start
    assert image.topics_by_id[b.topic_id].creation_offset == start + 5


def test_validate_only_writes_nothing_and_draws_no_id(h: Harness) -> None:
    drawn = len(h.drawn_ids)
    response = h.expect_refused(
        lambda: h.create_result(CreatableTopic("t", 3, 2), validate_only=True)
    )
    (result,) = response.topics
    assert result.error_code == ErrorCode.NONE
    assert (result.topic_id, result.creation_offset) == (ZERO_UUID, -1)
    assert (result.num_partitions, result.replication_factor) == (3, 2)
    assert len(h.drawn_ids) == drawn
    bad = h.expect_refused(lambda: h.create_result(CreatableTopic(".", 1, 1), validate_only=True))
    assert bad.topics[0].error_code == ErrorCode.INVALID_TOPIC_EXCEPTION


def test_empty_request_and_too_many_topics(h: Harness) -> None:
    assert h.expect_refused(h.create_result).topics == ()
    many = [CreatableTopic(f"t{i}") for i in range(CREATE_TOPICS_TOPICS_MAX + 1)]
    response = h.expect_refused(lambda: h.create_result(*many))
    assert len(response.topics) == len(many)
    assert {r.error_code for r in response.topics} == {ErrorCode.INVALID_REQUEST}
    assert "at most 1000 topics" in (response.topics[0].error_message or "")
    ok = h.create(*many[:CREATE_TOPICS_TOPICS_MAX])
    assert {r.error_code for r in ok.topics} == {ErrorCode.NONE}


def test_records_per_batch_limit_is_a_policy_violation() -> None:
    h = Harness(racks=[None] * 3)
    response = h.create(*(CreatableTopic(f"big{i}", 5000, 1) for i in range(3)))
    codes = [r.error_code for r in response.topics]
    assert codes == [ErrorCode.NONE, ErrorCode.POLICY_VIOLATION, ErrorCode.POLICY_VIOLATION]
    assert f"more than {RECORDS_PER_BATCH_MAX} records" in (response.topics[1].error_message or "")
    assert len(h.committed_batches[-1].records) == 5001


def test_replica_slots_limit_is_a_policy_violation() -> None:
    h = Harness(racks=[None] * 20)
    response = h.create(CreatableTopic("a", 4000, 20), CreatableTopic("b", 2000, 20))
    assert [r.error_code for r in response.topics] == [ErrorCode.NONE, ErrorCode.POLICY_VIOLATION]
    assert "more than 100000" in (response.topics[1].error_message or "")


def test_topic_ids_are_redrawn_when_used_or_reserved(h: Harness) -> None:
    used = h.create_one("a").topic_id
    h.delete(DeleteTopic("a"))
    fresh = Uuid.random(random.Random(99))
    draws = iter([used, ZERO_UUID, METADATA_TOPIC_ID, fresh, fresh, Uuid.random(random.Random(98))])
    result = h.sm.create_topics(
        CreateTopicsRequest((CreatableTopic("b"), CreatableTopic("c"))),
        next_offset=h.next_offset,
        new_topic_id=lambda: next(draws),
    )
    b, c = result.response.topics
    assert b.topic_id == fresh
    assert c.topic_id not in (used, fresh, ZERO_UUID, METADATA_TOPIC_ID)


def test_a_broken_id_generator_is_a_bug(h: Harness) -> None:
    used = h.create_one("a").topic_id
    with pytest.raises(AssertionError, match="generator is broken"):
        h.sm.create_topics(
            CreateTopicsRequest((CreatableTopic("b"),)),
            next_offset=h.next_offset,
            new_topic_id=lambda: used,
        )


def test_proposals_are_validated_against_the_latest_image(h: Harness) -> None:
    first = h.propose(h.create_result(CreatableTopic("t")), hold=True)
    assert first.topics[0].error_code == ErrorCode.NONE
    # Not committed yet: describe does not show it, but a second create is refused.
    assert h.sm.describe_topics([DescribeTopic("t")])[0].error_code == (
        ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    )
    second = h.expect_refused(lambda: h.create_result(CreatableTopic("t")))
    assert second.topics[0].error_code == ErrorCode.TOPIC_ALREADY_EXISTS
    h.commit_held()
    assert h.sm.describe_topics([DescribeTopic("t")])[0].topic_id == first.topics[0].topic_id
    h.check_replay()


def test_reset_to_committed_forgets_uncommitted_proposals(h: Harness) -> None:
    h.propose(h.create_result(CreatableTopic("t")), hold=True)
    assert "t" in h.sm.latest_image.topics_by_name
    h.lose_leadership()
    assert "t" not in h.sm.latest_image.topics_by_name
    assert h.create_one("t").error_code == ErrorCode.NONE
    h.check_replay()


def test_committing_a_batch_the_leader_did_not_propose_is_a_bug(h: Harness) -> None:
    h.propose(h.create_result(CreatableTopic("t")), hold=True)
    foreign = DecodedBatch(
        h.sm.committed_image.offset + 1, 1, 0, False, (RemoveTopicRecord(Uuid.random(h.rng)),)
    )
    with pytest.raises(AssertionError):
        h.sm.replay_committed(foreign)


# ----- placement --------------------------------------------------------------------------------


def brokers_on(racks: Sequence[str | None]) -> list[BrokerImage]:
    return [
        BrokerImage(i, Uuid.random(random.Random(i)), i, (), rack, False)
        for i, rack in enumerate(racks)
    ]


def test_placement_spreads_leaders_and_replicas_round_robin() -> None:
    placement = place_replicas(
        brokers_on([None] * 4), num_partitions=8, replication_factor=3, start=1
    )
    assert [p[0] for p in placement] == [1, 2, 3, 0, 1, 2, 3, 0]
    assert all(len(set(p)) == 3 for p in placement)
    assert Counter(b for p in placement for b in p) == {0: 6, 1: 6, 2: 6, 3: 6}


def test_placement_is_rack_aware() -> None:
    brokers = brokers_on(["a", "a", "a", "a", "b", "c"])
    placement = place_replicas(brokers, num_partitions=12, replication_factor=3, start=0)
    rack = {b.broker_id: b.rack for b in brokers}
    assert all({rack[r] for r in p} == {"a", "b", "c"} for p in placement)
    two_racks = place_replicas(
        brokers_on(["a", "a", "a", "b"]), num_partitions=8, replication_factor=3, start=5
    )
    rack2 = {0: "a", 1: "a", 2: "a", 3: "b"}
    assert all({rack2[r] for r in p} == {"a", "b"} for p in two_racks)  # as far as possible


@settings(max_examples=80, deadline=None)
@given(
    st.lists(st.sampled_from([None, "r1", "r2", "r3"]), min_size=1, max_size=9),
    st.integers(1, 30),
    st.data(),
)
def test_placement_properties(
    racks: list[str | None], partitions: int, data: st.DataObject
) -> None:
    rf = data.draw(st.integers(1, len(racks)))
    start = data.draw(st.integers(0, 1000))
    brokers = brokers_on(racks)
    placement = place_replicas(
        brokers, num_partitions=partitions, replication_factor=rf, start=start
    )
    rack_of = {b.broker_id: b.rack for b in brokers}
    rack_count = len(set(racks))
    assert len(placement) == partitions
    leaders = Counter(p[0] for p in placement)
    assert max(leaders.values()) - min(leaders.get(b.broker_id, 0) for b in brokers) <= 1
    for replicas in placement:
        assert len(replicas) == rf == len(set(replicas))
        assert len({rack_of[r] for r in replicas}) == min(rf, rack_count)


def test_create_uses_only_unfenced_brokers() -> None:
    h = Harness()
    h.add_broker(3, unfence=False)
    result = h.create_one("t", 12, 3)
    partitions = h.sm.committed_image.topics_by_id[result.topic_id].partitions
    assert all(3 not in p.replicas for p in partitions.values())


# ----- DeleteTopics -----------------------------------------------------------------------------


def test_delete_by_name_and_by_id(h: Harness) -> None:
    a = h.create_one("a")
    b = h.create_one("b")
    result = h.delete_result(DeleteTopic("a"), DeleteTopic(topic_id=b.topic_id))
    assert result.records == (RemoveTopicRecord(a.topic_id), RemoveTopicRecord(b.topic_id))
    responses = h.propose(result).topics
    assert [(r.name, r.topic_id, r.error_code) for r in responses] == [
        ("a", a.topic_id, ErrorCode.NONE),
        ("b", b.topic_id, ErrorCode.NONE),
    ]
    assert not h.sm.committed_image.topics_by_name
    h.check_replay()


def test_deleted_name_is_reusable_at_once_with_a_new_id(h: Harness) -> None:
    old = h.create_one("t")
    h.delete(DeleteTopic("t"))
    new = h.create_one("t")
    assert new.error_code == ErrorCode.NONE
    assert new.topic_id != old.topic_id
    assert new.creation_offset > old.creation_offset
    gone = h.sm.describe_topics([DescribeTopic(topic_id=old.topic_id)])[0]
    assert gone.error_code == ErrorCode.UNKNOWN_TOPIC_ID
    assert "was deleted" in (gone.error_message or "")


DELETE_ERRORS: list[tuple[str, list[DeleteTopic], list[tuple[ErrorCode, str]]]] = [
    (
        "both",
        [DeleteTopic("a", topic_id=Uuid.random(random.Random(1)))],
        [(ErrorCode.INVALID_REQUEST, "You may not specify both topic name and topic id")],
    ),
    (
        "neither",
        [DeleteTopic()],
        [(ErrorCode.INVALID_REQUEST, "Neither topic name nor id were specified")],
    ),
    ("empty name", [DeleteTopic("")], [(ErrorCode.INVALID_REQUEST, "Neither topic name nor id")]),
    (
        "duplicate names",
        [DeleteTopic("a"), DeleteTopic("a")],
        [(ErrorCode.INVALID_REQUEST, "Duplicate topic name")] * 2,
    ),
    (
        "unknown name",
        [DeleteTopic("nope")],
        [(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, "'nope' does not exist")],
    ),
    (
        "unknown id",
        [DeleteTopic(topic_id=Uuid.random(random.Random(2)))],
        [(ErrorCode.UNKNOWN_TOPIC_ID, "No topic has id")],
    ),
    (
        "sentinel id",
        [DeleteTopic(topic_id=METADATA_TOPIC_ID)],
        [(ErrorCode.UNKNOWN_TOPIC_ID, "No topic has id")],
    ),
    (
        "expected with id",
        [DeleteTopic(topic_id=Uuid.random(random.Random(3)), expected_topic_id=ZERO_UUID)],
        [(ErrorCode.INVALID_REQUEST, "expected_topic_id")],
    ),
    (
        "expected mismatch",
        [DeleteTopic("a", expected_topic_id=Uuid.random(random.Random(4)))],
        [(ErrorCode.INCONSISTENT_TOPIC_ID, "not the expected")],
    ),
]


@pytest.mark.parametrize(
    ("entries", "expected"), [d[1:] for d in DELETE_ERRORS], ids=[d[0] for d in DELETE_ERRORS]
)
def test_delete_errors(
    h: Harness, entries: list[DeleteTopic], expected: list[tuple[ErrorCode, str]]
) -> None:
    h.create_one("a")
    response = h.expect_refused(lambda: h.delete_result(*entries))
    got = [(r.error_code, r.error_message or "") for r in response.topics]
    assert [code for code, _ in got] == [code for code, _ in expected]
    for (_, message), (_, text) in zip(got, expected, strict=True):
        assert text in message


def test_delete_duplicate_ids_and_one_topic_by_name_and_id(h: Harness) -> None:
    a = h.create_one("a")
    b = h.create_one("b")
    response = h.delete(
        DeleteTopic(topic_id=a.topic_id),
        DeleteTopic(topic_id=a.topic_id),
        DeleteTopic("b"),
        DeleteTopic(topic_id=b.topic_id),
        DeleteTopic("nope"),
    )
    codes = [r.error_code for r in response.topics]
    assert codes == [ErrorCode.INVALID_REQUEST] * 4 + [ErrorCode.UNKNOWN_TOPIC_OR_PARTITION]
    assert "Duplicate topic id" in (response.topics[0].error_message or "")
    assert "named more than once" in (response.topics[2].error_message or "")
    assert set(h.sm.committed_image.topics_by_name) == {"a", "b"}


def test_delete_with_a_matching_expected_id(h: Harness) -> None:
    a = h.create_one("a")
    response = h.delete(DeleteTopic("a", expected_topic_id=a.topic_id))
    assert response.topics[0].error_code == ErrorCode.NONE


def test_expected_id_protects_a_recreated_topic(h: Harness) -> None:
    old = h.create_one("a")
    h.delete(DeleteTopic("a"))
    new = h.create_one("a")
    response = h.expect_refused(
        lambda: h.delete_result(DeleteTopic("a", expected_topic_id=old.topic_id))
    )
    assert response.topics[0].error_code == ErrorCode.INCONSISTENT_TOPIC_ID
    assert str(new.topic_id) in (response.topics[0].error_message or "")
    by_old_id = h.expect_refused(lambda: h.delete_result(DeleteTopic(topic_id=old.topic_id)))
    assert by_old_id.topics[0].error_code == ErrorCode.UNKNOWN_TOPIC_ID
    assert "was deleted" in (by_old_id.topics[0].error_message or "")


def test_system_topics_cannot_be_deleted_but_user_internal_ones_can(h: Harness) -> None:
    h.propose(h.sm.metadata_topic_record(h.new_id, next_offset=h.next_offset))  # type: ignore[arg-type]
    for name in ("__consumer_offsets", "__transaction_state"):
        h.create_one(name)
    metadata_id = h.sm.committed_image.metadata_topic_id
    assert metadata_id is not None
    response = h.expect_refused(
        lambda: h.delete_result(
            DeleteTopic("__consumer_offsets"),
            DeleteTopic("__transaction_state"),
            DeleteTopic(topic_id=metadata_id),
        )
    )
    assert {r.error_code for r in response.topics} == {ErrorCode.TOPIC_DELETION_DISABLED}
    assert "system topic" in (response.topics[0].error_message or "")
    h.create_one("connect-offsets", configs=(("internal", "true"),))
    assert h.delete(DeleteTopic("connect-offsets")).topics[0].error_code == ErrorCode.NONE


def test_too_many_deletes(h: Harness) -> None:
    entries = [DeleteTopic(f"t{i}") for i in range(DELETE_TOPICS_TOPICS_MAX + 1)]
    response = h.expect_refused(lambda: h.delete_result(*entries))
    assert {r.error_code for r in response.topics} == {ErrorCode.INVALID_REQUEST}


# ----- DescribeTopics / ListTopics / the metadata topic ------------------------------------------


def test_describe_by_name_and_id_with_offline_replicas() -> None:
    h = Harness()
    result = h.create_one("t", 3, 3, configs=(("retention.ms", "9"),))
    by_name, by_id = h.sm.describe_topics(
        [DescribeTopic("t"), DescribeTopic(topic_id=result.topic_id)]
    )
    assert by_name == by_id
    assert by_name.name == "t" and by_name.topic_id == result.topic_id
    assert by_name.creation_offset == result.creation_offset
    assert by_name.replication_factor == 3 and not by_name.is_internal
    assert by_name.configs == (("retention.ms", "9"),)
    assert [p.partition for p in by_name.partitions] == [0, 1, 2]
    assert all(p.offline_replicas == () for p in by_name.partitions)
    # Fence broker 2 (its session expires): it is offline everywhere and leaves the ISRs.
    h.now_ms += 5_000
    for broker_id in (0, 1):
        h.heartbeat(broker_id)
    h.now_ms += 5_000
    assert h.propose(h.sm.fence_stale_brokers(now_ms=h.now_ms, next_offset=h.next_offset)) == (2,)
    (described,) = h.sm.describe_topics([DescribeTopic("t")])
    assert all(p.offline_replicas == (2,) for p in described.partitions)
    assert all(2 not in p.isr and p.leader != 2 for p in described.partitions)


DESCRIBE_ERRORS: list[tuple[str, DescribeTopic, ErrorCode, str]] = [
    ("unknown name", DescribeTopic("nope"), ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, "does not exist"),
    (
        "unknown id",
        DescribeTopic(topic_id=Uuid.random(random.Random(5))),
        ErrorCode.UNKNOWN_TOPIC_ID,
        "No topic has id",
    ),
    (
        "both",
        DescribeTopic("t", Uuid.random(random.Random(6))),
        ErrorCode.INVALID_REQUEST,
        "You may not specify both",
    ),
    ("neither", DescribeTopic(), ErrorCode.INVALID_REQUEST, "Neither topic name nor id"),
    ("zero id", DescribeTopic(topic_id=ZERO_UUID), ErrorCode.INVALID_REQUEST, "Neither"),
    (
        "sentinel id",
        DescribeTopic(topic_id=METADATA_TOPIC_ID),
        ErrorCode.UNKNOWN_TOPIC_ID,
        "No topic has id",
    ),
]


@pytest.mark.parametrize(
    ("entry", "code", "text"), [d[1:] for d in DESCRIBE_ERRORS], ids=[d[0] for d in DESCRIBE_ERRORS]
)
def test_describe_errors(h: Harness, entry: DescribeTopic, code: ErrorCode, text: str) -> None:
    (described,) = h.sm.describe_topics([entry])
    assert described.error_code == code
    assert text in (described.error_message or "")
    assert described.partitions == ()


def test_metadata_topic_record_and_listing(h: Harness) -> None:
    result = h.sm.metadata_topic_record(h.new_id, next_offset=h.next_offset)
    assert result is not None
    (record,) = result.records
    assert record == TopicRecord("__cluster_metadata", result.response, internal=True)
    h.propose(result)
    assert h.sm.committed_image.metadata_topic_id == result.response
    assert h.sm.metadata_topic_record(h.new_id, next_offset=h.next_offset) is None
    h.create_one("zeta")
    h.create_one("alpha", configs=(("internal", "true"),))
    listing = h.sm.list_topics()
    assert [(t.name, t.is_internal) for t in listing] == [
        ("__cluster_metadata", True),
        ("alpha", True),
        ("zeta", False),
    ]
    assert [t.name for t in h.sm.list_topics(include_internal=False)] == ["zeta"]
    (meta,) = h.sm.describe_topics([DescribeTopic("__cluster_metadata")])
    assert meta.is_internal and meta.topic_id == result.response and meta.partitions == ()
    h.check_replay()


def test_metadata_topic_record_is_not_proposed_twice_while_pending(h: Harness) -> None:
    first = h.sm.metadata_topic_record(h.new_id, next_offset=h.next_offset)
    assert first is not None
    h.propose(first, hold=True)
    assert h.sm.metadata_topic_record(h.new_id, next_offset=h.next_offset) is None


def test_operations_assert_next_offset_is_past_the_log(h: Harness) -> None:
    with pytest.raises(AssertionError):
        h.sm.delete_topics(DeleteTopicsRequest(()), next_offset=h.sm.latest_image.offset)
