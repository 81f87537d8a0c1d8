"""Kafka's error codes, shared by the Raft core, the controller, the admin API and the CLI.

Numbers and names are Kafka's (``org.apache.kafka.common.protocol.Errors``) so a Kafka engineer
recognises them in responses, logs and CLI output. ``ErrorCode.retriable`` follows Kafka's
classification: a client may retry the same request (possibly elsewhere) and expect it to succeed.

Error classes, one per condition. Each Kafka error code has exactly one exception class here
(``TopicExistsError`` for TOPIC_ALREADY_EXISTS, ``SnapshotNotFoundError`` for
SNAPSHOT_NOT_FOUND, ...); the server raises it where it detects the condition (e.g. the snapshot
store) and the ``AdminClient`` builds the same class from a code on the wire (``error_for``).

``retriable``, in one way everywhere in this project: a class attribute
``retriable: ClassVar[bool]`` of the error class (Kafka's model, where retriability is a property
of the exception class, ``RetriableException``). A ``KafkaError`` subclass takes it from its
code's ``ErrorCode.retriable``; other error classes (the Raft core's ``NotLeaderError``, the
driver's overload errors, ``StorageError``) set it explicitly.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar, Final


class ErrorCode(enum.IntEnum):
    UNKNOWN_SERVER_ERROR = -1
    NONE = 0
    UNKNOWN_TOPIC_OR_PARTITION = 3
    NOT_LEADER_OR_FOLLOWER = 6
    REQUEST_TIMED_OUT = 7
    BROKER_NOT_AVAILABLE = 8
    INVALID_TOPIC_EXCEPTION = 17
    RECORD_LIST_TOO_LARGE = 18
    TOPIC_AUTHORIZATION_FAILED = 29
    CLUSTER_AUTHORIZATION_FAILED = 31
    UNSUPPORTED_VERSION = 35
    TOPIC_ALREADY_EXISTS = 36
    INVALID_PARTITIONS = 37
    INVALID_REPLICATION_FACTOR = 38
    INVALID_REPLICA_ASSIGNMENT = 39
    INVALID_CONFIG = 40
    NOT_CONTROLLER = 41
    INVALID_REQUEST = 42
    POLICY_VIOLATION = 44
    SECURITY_DISABLED = 54
    TOPIC_DELETION_DISABLED = 73
    FENCED_LEADER_EPOCH = 74
    UNKNOWN_LEADER_EPOCH = 75
    STALE_BROKER_EPOCH = 77
    PREFERRED_LEADER_NOT_AVAILABLE = 80
    ELIGIBLE_LEADERS_NOT_AVAILABLE = 83
    ELECTION_NOT_NEEDED = 84
    INCONSISTENT_VOTER_SET = 94
    INVALID_UPDATE_VERSION = 95
    UNKNOWN_TOPIC_ID = 100
    DUPLICATE_BROKER_REGISTRATION = 101
    INCONSISTENT_TOPIC_ID = 103
    INCONSISTENT_CLUSTER_ID = 104
    INELIGIBLE_REPLICA = 107
    POSITION_OUT_OF_RANGE = 99
    SNAPSHOT_NOT_FOUND = 98
    INVALID_VOTER_KEY = 125
    DUPLICATE_VOTER = 126
    VOTER_NOT_FOUND = 127

    @property
    def retriable(self) -> bool:
        return self in _RETRIABLE


_RETRIABLE = frozenset(
    {
        ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
        ErrorCode.NOT_LEADER_OR_FOLLOWER,
        ErrorCode.REQUEST_TIMED_OUT,
        ErrorCode.BROKER_NOT_AVAILABLE,
        ErrorCode.NOT_CONTROLLER,
        ErrorCode.FENCED_LEADER_EPOCH,
        ErrorCode.UNKNOWN_LEADER_EPOCH,
        ErrorCode.UNKNOWN_TOPIC_ID,
        # Kafka's InvalidMetadataException subclasses: the next election may find a leader.
        ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE,
        ErrorCode.ELIGIBLE_LEADERS_NOT_AVAILABLE,
    }
)


def error_name(code: int) -> str:
    try:
        return ErrorCode(code).name
    except ValueError:
        return f"UNKNOWN_ERROR_CODE({code})"


# ----- error classes: one per Kafka error code, plus the client's own ----------------------------


class AdminError(Exception):
    """The root of these classes: everything ``AdminClient`` raises for a call that did not
    succeed (server code raises only the ``KafkaError`` subclasses)."""

    # True if the same call may succeed when tried again later.
    retriable: ClassVar[bool] = False


class KafkaError(AdminError):
    """An error with a Kafka error code (for a request or one topic): raised where the condition
    is found (e.g. the snapshot store) and rebuilt by the client from the code on the wire.

    ``str(error)`` is ``"<ERROR_NAME>: <message>"``; ``message`` is the server's message alone.
    """

    default_error_code: ClassVar[ErrorCode | None] = None

    def __init__(self, message: str = "", *, error_code: ErrorCode | None = None) -> None:
        code = error_code if error_code is not None else type(self).default_error_code
        if code is None or code is ErrorCode.NONE:
            raise TypeError(f"{type(self).__name__} needs an error code other than NONE")
        self.error_code: ErrorCode = code
        self.message = message or f"the server reported {code.name} without a message"
        super().__init__(f"{code.name}: {self.message}")

    @property
    def error_name(self) -> str:
        return self.error_code.name

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if cls.default_error_code is not None:
            cls.retriable = cls.default_error_code.retriable

    def __reduce__(self) -> tuple[Any, ...]:
        return (_rebuild_kafka_error, (type(self), self.message, self.error_code))


def _rebuild_kafka_error(cls: type[KafkaError], message: str, code: ErrorCode) -> KafkaError:
    return cls(message, error_code=code)


class UnknownTopicOrPartitionError(KafkaError):
    """UNKNOWN_TOPIC_OR_PARTITION (3): no topic has this name."""

    default_error_code = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


class NotLeaderOrFollowerError(KafkaError):
    """NOT_LEADER_OR_FOLLOWER (6): the node does not lead the quorum (DescribeQuorum)."""

    default_error_code = ErrorCode.NOT_LEADER_OR_FOLLOWER


class RequestTimedOutError(KafkaError):
    """REQUEST_TIMED_OUT (7): the server gave up before the request's deadline (e.g. its image
    did not reach ``min_metadata_offset`` in time)."""

    default_error_code = ErrorCode.REQUEST_TIMED_OUT


class BrokerNotAvailableError(KafkaError):
    """BROKER_NOT_AVAILABLE (8)."""

    default_error_code = ErrorCode.BROKER_NOT_AVAILABLE


class InvalidTopicError(KafkaError):
    """INVALID_TOPIC_EXCEPTION (17): the name breaks Kafka's topic name rules, or is reserved."""

    default_error_code = ErrorCode.INVALID_TOPIC_EXCEPTION


class RecordListTooLargeError(KafkaError):
    """RECORD_LIST_TOO_LARGE (18): the request's records do not fit in one batch."""

    default_error_code = ErrorCode.RECORD_LIST_TOO_LARGE


class TopicAuthorizationFailedError(KafkaError):
    """TOPIC_AUTHORIZATION_FAILED (29): the caller may not act on this topic (whether or not
    it exists)."""

    default_error_code = ErrorCode.TOPIC_AUTHORIZATION_FAILED


class ClusterAuthorizationFailedError(KafkaError):
    """CLUSTER_AUTHORIZATION_FAILED (31): the caller may not perform this cluster action."""

    default_error_code = ErrorCode.CLUSTER_AUTHORIZATION_FAILED


class TopicExistsError(KafkaError):
    """TOPIC_ALREADY_EXISTS (36)."""

    default_error_code = ErrorCode.TOPIC_ALREADY_EXISTS


class InvalidPartitionsError(KafkaError):
    """INVALID_PARTITIONS (37)."""

    default_error_code = ErrorCode.INVALID_PARTITIONS


class InvalidReplicationFactorError(KafkaError):
    """INVALID_REPLICATION_FACTOR (38): e.g. more replicas than unfenced brokers."""

    default_error_code = ErrorCode.INVALID_REPLICATION_FACTOR


class InvalidReplicaAssignmentError(KafkaError):
    """INVALID_REPLICA_ASSIGNMENT (39)."""

    default_error_code = ErrorCode.INVALID_REPLICA_ASSIGNMENT


class InvalidConfigError(KafkaError):
    """INVALID_CONFIG (40): Kafka's InvalidConfigurationException."""

    default_error_code = ErrorCode.INVALID_CONFIG


class NotControllerError(KafkaError):
    """NOT_CONTROLLER (41): raised once the retries could not find the active controller.
    ``controller_id`` / ``controller_endpoint`` are what the last node answered, or None."""

    default_error_code = ErrorCode.NOT_CONTROLLER

    def __init__(
        self,
        message: str = "",
        *,
        error_code: ErrorCode | None = None,
        controller_id: int | None = None,
        controller_endpoint: str | None = None,
    ) -> None:
        super().__init__(message, error_code=error_code)
        self.controller_id = controller_id
        self.controller_endpoint = controller_endpoint


class InvalidRequestError(KafkaError):
    """INVALID_REQUEST (42): e.g. a topic named by both name and id, or repeated."""

    default_error_code = ErrorCode.INVALID_REQUEST


class PolicyViolationError(KafkaError):
    """POLICY_VIOLATION (44)."""

    default_error_code = ErrorCode.POLICY_VIOLATION


class SecurityDisabledError(KafkaError):
    """SECURITY_DISABLED (54): no authorizer is configured, so there are no ACLs to manage."""

    default_error_code = ErrorCode.SECURITY_DISABLED


class TopicDeletionDisabledError(KafkaError):
    """TOPIC_DELETION_DISABLED (73)."""

    default_error_code = ErrorCode.TOPIC_DELETION_DISABLED


class FencedLeaderEpochError(KafkaError):
    """FENCED_LEADER_EPOCH (74)."""

    default_error_code = ErrorCode.FENCED_LEADER_EPOCH


class UnknownLeaderEpochError(KafkaError):
    """UNKNOWN_LEADER_EPOCH (75)."""

    default_error_code = ErrorCode.UNKNOWN_LEADER_EPOCH


class StaleBrokerEpochError(KafkaError):
    """STALE_BROKER_EPOCH (77): the broker must register again."""

    default_error_code = ErrorCode.STALE_BROKER_EPOCH


class InconsistentVoterSetError(KafkaError):
    """INCONSISTENT_VOTER_SET (94)."""

    default_error_code = ErrorCode.INCONSISTENT_VOTER_SET


class SnapshotNotFoundError(KafkaError):
    """SNAPSHOT_NOT_FOUND (98)."""

    default_error_code = ErrorCode.SNAPSHOT_NOT_FOUND


class PositionOutOfRangeError(KafkaError):
    """POSITION_OUT_OF_RANGE (99)."""

    default_error_code = ErrorCode.POSITION_OUT_OF_RANGE


class UnknownTopicIdError(KafkaError):
    """UNKNOWN_TOPIC_ID (100): no topic has this id (it may have been deleted)."""

    default_error_code = ErrorCode.UNKNOWN_TOPIC_ID


class DuplicateBrokerRegistrationError(KafkaError):
    """DUPLICATE_BROKER_REGISTRATION (101)."""

    default_error_code = ErrorCode.DUPLICATE_BROKER_REGISTRATION


class InconsistentTopicIdError(KafkaError):
    """INCONSISTENT_TOPIC_ID (103)."""

    default_error_code = ErrorCode.INCONSISTENT_TOPIC_ID


class InconsistentClusterIdError(KafkaError):
    """INCONSISTENT_CLUSTER_ID (104)."""

    default_error_code = ErrorCode.INCONSISTENT_CLUSTER_ID


class InvalidVoterKeyError(KafkaError):
    """INVALID_VOTER_KEY (125): the voter key (node id, directory id) a request is addressed to
    is not the receiver's (KIP-853)."""

    default_error_code = ErrorCode.INVALID_VOTER_KEY


class DuplicateVoterError(KafkaError):
    """DUPLICATE_VOTER (126): the node id is already a voter (KIP-853)."""

    default_error_code = ErrorCode.DUPLICATE_VOTER


class VoterNotFoundError(KafkaError):
    """VOTER_NOT_FOUND (127): no voter has this node id and directory id (KIP-853)."""

    default_error_code = ErrorCode.VOTER_NOT_FOUND


class ServerFailedError(KafkaError):
    """UNKNOWN_SERVER_ERROR (-1): the server failed in a way it could not classify."""

    default_error_code = ErrorCode.UNKNOWN_SERVER_ERROR


class UnsupportedVersionError(KafkaError):
    """UNSUPPORTED_VERSION (35)."""

    default_error_code = ErrorCode.UNSUPPORTED_VERSION


class PreferredLeaderNotAvailableError(KafkaError):
    """PREFERRED_LEADER_NOT_AVAILABLE (80): a preferred election whose first replica is not in
    the ISR or is fenced."""

    default_error_code = ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE


class EligibleLeadersNotAvailableError(KafkaError):
    """ELIGIBLE_LEADERS_NOT_AVAILABLE (83): an unclean election with no unfenced replica."""

    default_error_code = ErrorCode.ELIGIBLE_LEADERS_NOT_AVAILABLE


class ElectionNotNeededError(KafkaError):
    """ELECTION_NOT_NEEDED (84): the partition already has the leader the election would
    choose."""

    default_error_code = ErrorCode.ELECTION_NOT_NEEDED


class InvalidUpdateVersionError(KafkaError):
    """INVALID_UPDATE_VERSION (95): an AlterPartition from an older (or newer) partition epoch."""

    default_error_code = ErrorCode.INVALID_UPDATE_VERSION


class IneligibleReplicaError(KafkaError):
    """INELIGIBLE_REPLICA (107): an AlterPartition adding a fenced or unregistered broker to
    the ISR."""

    default_error_code = ErrorCode.INELIGIBLE_REPLICA


_ERROR_CLASSES: Final[Mapping[ErrorCode, type[KafkaError]]] = {
    cls.default_error_code: cls
    for cls in (
        ServerFailedError,
        UnsupportedVersionError,
        InvalidVoterKeyError,
        DuplicateVoterError,
        VoterNotFoundError,
        UnknownTopicOrPartitionError,
        NotLeaderOrFollowerError,
        RequestTimedOutError,
        BrokerNotAvailableError,
        TopicAuthorizationFailedError,
        ClusterAuthorizationFailedError,
        InvalidTopicError,
        RecordListTooLargeError,
        TopicExistsError,
        InvalidPartitionsError,
        InvalidReplicationFactorError,
        InvalidReplicaAssignmentError,
        InvalidConfigError,
        NotControllerError,
        InvalidRequestError,
        PolicyViolationError,
        SecurityDisabledError,
        TopicDeletionDisabledError,
        FencedLeaderEpochError,
        UnknownLeaderEpochError,
        StaleBrokerEpochError,
        InconsistentVoterSetError,
        SnapshotNotFoundError,
        PositionOutOfRangeError,
        UnknownTopicIdError,
        DuplicateBrokerRegistrationError,
        InconsistentTopicIdError,
        InconsistentClusterIdError,
        PreferredLeaderNotAvailableError,
        EligibleLeadersNotAvailableError,
        ElectionNotNeededError,
        InvalidUpdateVersionError,
        IneligibleReplicaError,
    )
    if cls.default_error_code is not None
}


class UnknownServerError(AdminError):
    """The server answered something this client cannot read. ``code`` is the unknown error
    code when that was the problem, else None."""

    def __init__(self, message: str, *, code: int | None = None) -> None:
        super().__init__(message)
        self.code = code


class AdminTransportError(AdminError):
    """A gRPC-level failure. ``status`` is the gRPC status name of the last attempt (None if
    there was none); ``failures`` lists every failed attempt as ``"address: STATUS (details)"``."""

    def __init__(
        self, message: str, *, status: str | None = None, failures: Sequence[str] = ()
    ) -> None:
        super().__init__(message)
        self.status = status
        self.failures = tuple(failures)


class AdminConnectionError(AdminTransportError):
    """No node could be reached (UNAVAILABLE / RESOURCE_EXHAUSTED) within the retries."""

    retriable = True


class AdminTimeoutError(AdminTransportError):
    """The call's deadline passed. For a mutation the outcome is unknown."""

    retriable = True


def error_for(code: int, message: str = "") -> KafkaError | UnknownServerError:
    """The typed error for a Kafka error code from the wire (not NONE).

    Known codes give their ``KafkaError`` subclass (a plain ``KafkaError`` for a known code
    without one); a code this build does not know gives ``UnknownServerError``.
    """
    try:
        error_code = ErrorCode(code)
    except ValueError:
        return UnknownServerError(f"{error_name(code)}: {message or 'no message'}", code=int(code))
    if error_code is ErrorCode.NONE:
        raise ValueError("error_for(NONE): NONE is not an error")
    cls = _ERROR_CLASSES.get(error_code, KafkaError)
    return cls(message, error_code=error_code)


assert set(_ERROR_CLASSES) == set(ErrorCode) - {ErrorCode.NONE}, "every Kafka code has its class"
