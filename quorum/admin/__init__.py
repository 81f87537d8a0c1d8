"""``AdminClient``: Kafka's Admin API over gRPC (docs/architecture.md#interfaces, KIP-516).

The client mirrors ``org.apache.kafka.clients.admin.Admin`` with Python names::

    with AdminClient("127.0.0.1:19091,127.0.0.1:19092,127.0.0.1:19093") as admin:
        created = admin.create_topics([NewTopic("orders", 3, 2, {"cleanup.policy": "compact"})])
        topic_id = created.topic_id("orders")  # raises TopicExistsError, ... for this topic
        described = admin.describe_topics(TopicCollection.of_topic_ids([topic_id]))
        print(described.all_topic_ids()[topic_id].partitions)
        admin.create_partitions({"orders": NewPartitions.increase_to(6)}).all()
        admin.delete_topics(TopicCollection.of_topic_ids([topic_id])).all()

Kafka's results are maps of futures; this client is synchronous, so its results hold one
already-completed ``TopicOutcome`` per topic: ``outcome.result()`` returns the value or raises the
topic's typed error, exactly where Kafka's ``future.get()`` would. Shortcuts raise the same way
(``CreateTopicsResult.topic_id(name)``, ``DescribeTopicsResult.all_topic_names()``, ...).

Errors (docs/conventions.md#errors; the classes live in ``quorum.errors``):

- ``KafkaError`` and its subclasses (Kafka's exception names with ``Error``: ``TopicExistsError``,
  ``UnknownTopicIdError``, ...) carry a Kafka ``ErrorCode``, the server's message and
  ``retriable``. ``error_for(code, message)`` builds the right one.
- ``AdminTransportError`` covers gRPC failures: ``AdminConnectionError`` when no node could be
  reached within the retries, ``AdminTimeoutError`` when the call's deadline passed (for a
  mutation, its outcome is then unknown: describe to find out, as with Kafka's
  ``TimeoutException``), and the base class for other gRPC statuses.
- ``UnknownServerError``: the server answered something this client cannot read (an error code
  it does not know, a malformed id, a result for a topic it did not ask about).

All of them derive from ``AdminError``. Bad arguments raise ``ValueError`` / ``TypeError``.

Routing. The client bootstraps from any controller (``"host:port,host:port"`` or a list). It
sends every call to the active controller once it knows it, and otherwise to the bootstrap
addresses in turn. A ``NOT_CONTROLLER`` answer names the active controller
(``controller_endpoint``), and the client goes there at once; without a name (an election is
under way) it backs off and tries the next address. ``UNAVAILABLE`` and ``RESOURCE_EXHAUSTED``
move on to the next address after a backoff. Each call makes at most ``1 + retries_max``
attempts and never outlives its deadline (``timeout_s``, per call or for the client), which is
also the gRPC deadline of each attempt. Backoff is exponential with 20 % jitter, from
``retry_backoff_s`` up to ``retry_backoff_max_s`` (Kafka's ``retry.backoff.ms`` /
``retry.backoff.max.ms``).

Read-your-writes. Every mutation's result has the ``metadata_offset`` that committed it; every
read takes ``min_metadata_offset`` and the server answers from an image that contains it. With
``read_your_writes=True`` (the default) the client also passes the highest offset its own
mutations returned, so a describe after a create sees the topic on any node.

Requests are split into chunks of ``TOPICS_PER_REQUEST_MAX`` topics (the server's bound); later
chunks of a read wait for the offset the earlier ones were served at, so one result never mixes
an older image into a newer one.

Security (docs/security.md#clients). ``config`` takes Kafka's client keys, as Kafka's
``Admin.create(Properties)`` does: ``security.protocol`` (PLAINTEXT, the default, or SSL),
``ssl.keystore.location`` (one PEM file: the client's key and certificate chain),
``ssl.keystore.type = PEM``, ``ssl.truststore.location`` (the CA bundle) ...;
``AdminClient.from_properties_file`` reads them from a ``client.properties`` file (relative
paths against its directory). Before each call the client checks whether its certificate files
changed and, if so, opens new channels, so a rotated client certificate is used from the next
call on.

Not thread-safe: use one client per thread (gRPC channels are cheap).

The package, by concern: ``types`` (the values calls take and return), ``results`` (the
``*Result`` classes), ``messages`` (those values as admin.proto messages and back), ``routing``
(addresses, redirects, retries, deadlines) and ``client`` (``AdminClient``). Everything a user
needs is importable from ``quorum.admin`` itself. The client imports nothing from the servers
(``quorum.server``): the codecs it shares with them are ``quorum.wire``'s.
"""

from __future__ import annotations

from quorum.admin.client import (
    RETRIES_MAX_DEFAULT,
    RETRY_BACKOFF_MAX_S_DEFAULT,
    RETRY_BACKOFF_S_DEFAULT,
    TIMEOUT_S_DEFAULT,
    TOPICS_PER_REQUEST_MAX,
    AdminClient,
)
from quorum.admin.messages import (
    ACL_ENTRIES_PER_REQUEST_MAX,
    NO_ID,
    NO_OFFSET,
)
from quorum.admin.results import (
    AlterConfigsResult,
    CreateAclsResult,
    CreatePartitionsResult,
    CreateTopicsResult,
    DeleteAclsResult,
    DeleteTopicsResult,
    DescribeTopicsResult,
    ElectLeadersResult,
    ListTopicsResult,
)
from quorum.admin.routing import (
    RETRY_BACKOFF_JITTER,
    parse_bootstrap,
)
from quorum.admin.types import (
    AlterConfigOp,
    AlterConfigOpType,
    BrokerNode,
    ClusterDescription,
    ControllerNode,
    DeletedTopic,
    NewPartitions,
    NewTopic,
    PartitionsCreated,
    TopicCollection,
    TopicDescription,
    TopicIdCollection,
    TopicListing,
    TopicMetadataAndConfig,
    TopicNameCollection,
    TopicOutcome,
    TopicPartition,
    TopicPartitionInfo,
)
from quorum.controller.requests import ElectionType
from quorum.errors import (
    AdminConnectionError,
    AdminError,
    AdminTimeoutError,
    AdminTransportError,
    BrokerNotAvailableError,
    DuplicateBrokerRegistrationError,
    ElectionNotNeededError,
    EligibleLeadersNotAvailableError,
    FencedLeaderEpochError,
    InconsistentClusterIdError,
    InconsistentTopicIdError,
    InconsistentVoterSetError,
    InvalidConfigError,
    InvalidPartitionsError,
    InvalidReplicaAssignmentError,
    InvalidReplicationFactorError,
    InvalidRequestError,
    InvalidTopicError,
    KafkaError,
    NotControllerError,
    NotLeaderOrFollowerError,
    PolicyViolationError,
    PositionOutOfRangeError,
    PreferredLeaderNotAvailableError,
    RecordListTooLargeError,
    RequestTimedOutError,
    ServerFailedError,
    SnapshotNotFoundError,
    StaleBrokerEpochError,
    TopicDeletionDisabledError,
    TopicExistsError,
    UnknownLeaderEpochError,
    UnknownServerError,
    UnknownTopicIdError,
    UnknownTopicOrPartitionError,
    UnsupportedVersionError,
    error_for,
)
from quorum.wire.quorum_description import (
    QuorumDescription,
    ReplicaDescription,
)

__all__ = [
    "ACL_ENTRIES_PER_REQUEST_MAX",
    "NO_ID",
    "NO_OFFSET",
    "RETRIES_MAX_DEFAULT",
    "RETRY_BACKOFF_JITTER",
    "RETRY_BACKOFF_MAX_S_DEFAULT",
    "RETRY_BACKOFF_S_DEFAULT",
    "TIMEOUT_S_DEFAULT",
    "TOPICS_PER_REQUEST_MAX",
    "AdminClient",
    "AdminConnectionError",
    "AdminError",
    "AdminTimeoutError",
    "AdminTransportError",
    "AlterConfigOp",
    "AlterConfigOpType",
    "AlterConfigsResult",
    "BrokerNode",
    "BrokerNotAvailableError",
    "ClusterDescription",
    "ControllerNode",
    "CreateAclsResult",
    "CreatePartitionsResult",
    "CreateTopicsResult",
    "DeleteAclsResult",
    "DeleteTopicsResult",
    "DeletedTopic",
    "DescribeTopicsResult",
    "DuplicateBrokerRegistrationError",
    "ElectLeadersResult",
    "ElectionNotNeededError",
    "ElectionType",
    "EligibleLeadersNotAvailableError",
    "FencedLeaderEpochError",
    "InconsistentClusterIdError",
    "InconsistentTopicIdError",
    "InconsistentVoterSetError",
    "InvalidConfigError",
    "InvalidPartitionsError",
    "InvalidReplicaAssignmentError",
    "InvalidReplicationFactorError",
    "InvalidRequestError",
    "InvalidTopicError",
    "KafkaError",
    "ListTopicsResult",
    "NewPartitions",
    "NewTopic",
    "NotControllerError",
    "NotLeaderOrFollowerError",
    "PartitionsCreated",
    "PolicyViolationError",
    "PositionOutOfRangeError",
    "PreferredLeaderNotAvailableError",
    "QuorumDescription",
    "RecordListTooLargeError",
    "ReplicaDescription",
    "RequestTimedOutError",
    "ServerFailedError",
    "SnapshotNotFoundError",
    "StaleBrokerEpochError",
    "TopicCollection",
    "TopicDeletionDisabledError",
    "TopicDescription",
    "TopicExistsError",
    "TopicIdCollection",
    "TopicListing",
    "TopicMetadataAndConfig",
    "TopicNameCollection",
    "TopicOutcome",
    "TopicPartition",
    "TopicPartitionInfo",
    "UnknownLeaderEpochError",
    "UnknownServerError",
    "UnknownTopicIdError",
    "UnknownTopicOrPartitionError",
    "UnsupportedVersionError",
    "error_for",
    "parse_bootstrap",
]
