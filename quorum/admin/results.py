"""What the AdminClient's calls return (Kafka's ``*Result`` classes, completed): per-topic
outcomes in request order, keyed as the request named each topic, with accessors that raise
the topic's typed error where Kafka's ``future.get()`` would, and the ``metadata_offset`` that
committed a write or served a read."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from quorum.admin.types import (
    DeletedTopic,
    PartitionsCreated,
    TopicDescription,
    TopicListing,
    TopicMetadataAndConfig,
    TopicOutcome,
    TopicPartition,
)
from quorum.errors import AdminError, KafkaError, UnknownServerError
from quorum.ids import Uuid
from quorum.security.acls import AclBinding, AclBindingFilter

__all__ = [
    "AlterConfigsResult",
    "CreateAclsResult",
    "CreatePartitionsResult",
    "CreateTopicsResult",
    "DeleteAclsResult",
    "DeleteTopicsResult",
    "DescribeTopicsResult",
    "ElectLeadersResult",
    "ListTopicsResult",
]

T = TypeVar("T")


def _first_error(outcomes: Iterable[TopicOutcome[Any]]) -> None:
    for outcome in outcomes:
        if outcome.error is not None:
            raise outcome.error


class CreateTopicsResult:
    """Per-topic outcomes of ``create_topics``, in request order (Kafka's
    ``CreateTopicsResult``). Accessors for one topic raise that topic's error."""

    def __init__(
        self, outcomes: Mapping[str, TopicOutcome[TopicMetadataAndConfig]], metadata_offset: int
    ) -> None:
        self._outcomes = dict(outcomes)
        self.metadata_offset = metadata_offset

    def values(self) -> dict[str, TopicOutcome[TopicMetadataAndConfig]]:
        return dict(self._outcomes)

    def all(self) -> dict[str, TopicMetadataAndConfig]:
        """Every topic's metadata; raises the first failure in request order."""
        _first_error(self._outcomes.values())
        return {name: outcome.result() for name, outcome in self._outcomes.items()}

    def errors(self) -> dict[str, AdminError]:
        return {n: o.error for n, o in self._outcomes.items() if o.error is not None}

    def _get(self, name: str) -> TopicMetadataAndConfig:
        try:
            outcome = self._outcomes[name]
        except KeyError:
            raise KeyError(f"topic {name!r} was not part of the request") from None
        return outcome.result()

    def topic_id(self, name: str) -> Uuid:
        return self._get(name).topic_id

    def creation_offset(self, name: str) -> int:
        return self._get(name).creation_offset

    def num_partitions(self, name: str) -> int:
        return self._get(name).num_partitions

    def replication_factor(self, name: str) -> int:
        return self._get(name).replication_factor

    def config(self, name: str) -> Mapping[str, str]:
        return self._get(name).configs

    def __repr__(self) -> str:
        return f"CreateTopicsResult({self._outcomes!r}, metadata_offset={self.metadata_offset})"


class CreatePartitionsResult:
    """Per-topic outcomes of ``create_partitions`` (Kafka's ``CreatePartitionsResult``), keyed
    as the request named each topic (a name, or a ``Uuid``)."""

    def __init__(
        self, outcomes: Mapping[str | Uuid, TopicOutcome[PartitionsCreated]], metadata_offset: int
    ) -> None:
        self._outcomes = dict(outcomes)
        self.metadata_offset = metadata_offset

    def values(self) -> dict[str | Uuid, TopicOutcome[PartitionsCreated]]:
        return dict(self._outcomes)

    def all(self) -> None:
        """Raises the first failure in request order; returns if every topic grew."""
        _first_error(self._outcomes.values())

    def errors(self) -> dict[str | Uuid, AdminError]:
        return {k: o.error for k, o in self._outcomes.items() if o.error is not None}

    def __repr__(self) -> str:
        return f"CreatePartitionsResult({self._outcomes!r}, metadata_offset={self.metadata_offset})"


class _ByNameOrId(Generic[T]):
    """Outcomes keyed by name or by id, as the request named them (Kafka's
    ``topicNameValues()`` / ``topicIdValues()``: the other one is None)."""

    def __init__(
        self,
        by_name: Mapping[str, TopicOutcome[T]] | None,
        by_id: Mapping[Uuid, TopicOutcome[T]] | None,
        metadata_offset: int,
    ) -> None:
        assert (by_name is None) != (by_id is None)
        self._by_name = None if by_name is None else dict(by_name)
        self._by_id = None if by_id is None else dict(by_id)
        self.metadata_offset = metadata_offset

    def topic_name_values(self) -> dict[str, TopicOutcome[T]] | None:
        return None if self._by_name is None else dict(self._by_name)

    def topic_id_values(self) -> dict[Uuid, TopicOutcome[T]] | None:
        return None if self._by_id is None else dict(self._by_id)

    def _outcomes(self) -> Iterable[TopicOutcome[T]]:
        outcomes = self._by_name if self._by_name is not None else self._by_id
        assert outcomes is not None
        return outcomes.values()

    def errors(self) -> list[AdminError]:
        return [o.error for o in self._outcomes() if o.error is not None]

    def _all_by_name(self) -> dict[str, T]:
        if self._by_name is None:
            raise ValueError("the topics were named by id: use the *_ids accessor")
        _first_error(self._by_name.values())
        return {name: outcome.result() for name, outcome in self._by_name.items()}

    def _all_by_id(self) -> dict[Uuid, T]:
        if self._by_id is None:
            raise ValueError("the topics were named by name: use the *_names accessor")
        _first_error(self._by_id.values())
        return {topic_id: outcome.result() for topic_id, outcome in self._by_id.items()}

    def __repr__(self) -> str:
        outcomes = self._by_name if self._by_name is not None else self._by_id
        return f"{type(self).__name__}({outcomes!r}, metadata_offset={self.metadata_offset})"


class DescribeTopicsResult(_ByNameOrId[TopicDescription]):
    """Per-topic outcomes of ``describe_topics`` (Kafka's ``DescribeTopicsResult``)."""

    def all_topic_names(self) -> dict[str, TopicDescription]:
        """Every description by name; raises the first failure. Only for a by-name request."""
        return self._all_by_name()

    def all_topic_ids(self) -> dict[Uuid, TopicDescription]:
        """Every description by id; raises the first failure. Only for a by-id request."""
        return self._all_by_id()


class DeleteTopicsResult(_ByNameOrId[DeletedTopic]):
    """Per-topic outcomes of ``delete_topics`` (Kafka's ``DeleteTopicsResult``)."""

    def all(self) -> None:
        """Raises the first failure in request order; returns if every topic was deleted."""
        _first_error(self._outcomes())


@dataclass(frozen=True, slots=True)
class CreateAclsResult:
    """``create_acls``: each binding with its error (None: created or already there)."""

    outcomes: tuple[tuple[AclBinding, KafkaError | UnknownServerError | None], ...]
    metadata_offset: int

    def all(self) -> None:
        """Raises the first failure in request order."""
        for _, error in self.outcomes:
            if error is not None:
                raise error


@dataclass(frozen=True, slots=True)
class DeleteAclsResult:
    """``delete_acls``: each filter with the ACLs it removed."""

    deleted: tuple[tuple[AclBindingFilter, tuple[AclBinding, ...]], ...]
    metadata_offset: int

    def all(self) -> list[AclBinding]:
        """Every ACL removed, in filter order."""
        return [binding for _, bindings in self.deleted for binding in bindings]


@dataclass(frozen=True, slots=True)
class ListTopicsResult:
    """``list_topics``: Kafka's ``ListTopicsResult``, completed, sorted by name."""

    topics: tuple[TopicListing, ...]
    metadata_offset: int

    def listings(self) -> list[TopicListing]:
        return list(self.topics)

    def names(self) -> set[str]:
        return {t.name for t in self.topics}

    def names_to_listings(self) -> dict[str, TopicListing]:
        return {t.name: t for t in self.topics}


class AlterConfigsResult:
    """Per-topic outcomes of ``incremental_alter_configs`` (Kafka's ``AlterConfigsResult``):
    ``values()`` maps each topic, in request order, to None (altered) or its error
    (``InvalidConfigurationError``, ``UnknownTopicOrPartitionError``, ...)."""

    def __init__(self, outcomes: Mapping[str, AdminError | None], metadata_offset: int) -> None:
        self._outcomes = dict(outcomes)
        self.metadata_offset = metadata_offset

    def values(self) -> dict[str, AdminError | None]:
        return dict(self._outcomes)

    def all(self) -> None:
        """Raises the first failure in order; returns if every topic was altered."""
        for error in self._outcomes.values():
            if error is not None:
                raise error

    def __repr__(self) -> str:
        return f"AlterConfigsResult({self._outcomes!r}, metadata_offset={self.metadata_offset})"


class ElectLeadersResult:
    """Per-partition outcomes of ``elect_leaders`` (Kafka's ``ElectLeadersResult``): the
    partitions asked for, in request order, or with all partitions those where an election ran
    or failed. ``partitions()`` maps each to None (elected) or its error
    (``ElectionNotNeededError``, ``PreferredLeaderNotAvailableError``, ...)."""

    def __init__(
        self,
        outcomes: Mapping[TopicPartition, tuple[AdminError | None, int | None]],
        metadata_offset: int,
    ) -> None:
        self._outcomes = dict(outcomes)
        self.metadata_offset = metadata_offset

    def partitions(self) -> dict[TopicPartition, AdminError | None]:
        return {tp: error for tp, (error, _) in self._outcomes.items()}

    def leaders(self) -> dict[TopicPartition, int | None]:
        """Each partition's leader once the answer was sent (None: no leader)."""
        return {tp: leader for tp, (_, leader) in self._outcomes.items()}

    def all(self) -> None:
        """Raises the first failure in order (as Kafka's ``all()``, ELECTION_NOT_NEEDED is a
        failure too); returns if every partition elected its leader."""
        for error, _ in self._outcomes.values():
            if error is not None:
                raise error

    def __repr__(self) -> str:
        return f"ElectLeadersResult({self._outcomes!r}, metadata_offset={self.metadata_offset})"
