"""The metadata image: the state of the cluster after replaying the log up to one offset.

Kafka's ``MetadataImage`` / ``TopicsImage`` / ``ClusterImage``, shared by the controller, the
brokers and the Spark "state at offset N" job so they cannot drift apart
(docs/conventions.md#images-and-deltas). An image is immutable;
``quorum.metadata.delta.MetadataDelta`` replays records on top of one and ``apply()`` returns the
next image.

Copy-on-write: every map in an image is a ``PersistentMap``, whose ``updated`` copies only the
shard(s) a change touches and shares the rest, so the next image shares every unchanged topic,
partition and broker with the previous one. Applying a delta that touched one topic of 100,000
costs microseconds, not a copy of the cluster.

Identity: a topic is the pair (``topic_id``, ``creation_offset``)
(docs/architecture.md#the-controller). Ids are never reused: the controller draws random 128-bit
ids and skips any id the image knows; ``deleted_topics`` remembers the ids of the most recent
``DELETED_TOPICS_RETAINED_MAX`` removals (``DeletedTopics``), and replay refuses a
``TopicRecord`` that would bring one of those back (docs/architecture.md#deleted-topic-ids).
"""

from __future__ import annotations

import itertools
from collections.abc import ItemsView, Iterable, Iterator, Mapping, ValuesView
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, ClassVar, Final, NamedTuple, TypeVar, cast, overload

from quorum.ids import Uuid
from quorum.metadata.records import NO_LEADER, BrokerEndpoint

if TYPE_CHECKING:
    from quorum.security.acls import AclBinding

__all__ = [
    "CLUSTER_METADATA_TOPIC_NAME",
    "NO_LEADER",
    "BrokerImage",
    "DeletedTopic",
    "DeletedTopics",
    "MetadataImage",
    "PartitionImage",
    "PersistentMap",
    "TopicImage",
    "empty_map",
    "has_collision_chars",
    "topic_collision_key",
]

CLUSTER_METADATA_TOPIC_NAME: Final = "__cluster_metadata"
"""The metadata log's own topic (KIP-500); its ``TopicRecord`` sets ``metadata_topic_id``."""

K = TypeVar("K")
V = TypeVar("V")
D = TypeVar("D")


# ----- the persistent map -----------------------------------------------------------------


def _shard_bits_for(length: int) -> int:
    """One shard up to 32 entries; beyond, about sqrt(n) shards of about sqrt(n) entries, so an
    update copies O(sqrt n) pointers and entries (100,000 entries: 512 shards of ~200)."""
    return 0 if length <= 32 else (length.bit_length() + 1) // 2


_ABSENT: Final = object()


class PersistentMap(Mapping[K, V]):
    """An immutable hash map whose ``updated`` shares everything it did not change.

    The keys are spread over ``2**bits`` plain dicts by ``hash(key)``; a shard dict is never
    mutated once a map holds it. ``updated`` copies the tuple of shards (about sqrt(n)
    pointers) and the shards it writes to (about sqrt(n) entries each), so one change to a map
    of 100,000 entries copies a few hundred pointers instead of 100,000. When the size drifts
    far from what the shard count suits, ``updated`` rebuilds with a fitting count (amortised
    O(1) per entry). Lookups are one ``hash`` and two indexings, close to a dict's.

    Iteration order is by shard, not by insertion: callers that show maps sort them.
    """

    __slots__ = ("_length", "_mask", "_shards")

    _length: int
    _mask: int
    _shards: tuple[dict[K, V], ...]

    def __init__(self, items: Mapping[K, V] | Iterable[tuple[K, V]] = ()) -> None:
        source = dict(items)
        bits = _shard_bits_for(len(source))
        if bits == 0:
            self._set((source,), len(source))
            return
        mask = (1 << bits) - 1
        lists: list[dict[K, V]] = [{} for _ in range(1 << bits)]
        for key, value in source.items():
            lists[hash(key) & mask][key] = value
        self._set(tuple(lists), len(source))

    def _set(self, shards: tuple[dict[K, V], ...], length: int) -> None:
        self._shards = shards
        self._mask = len(shards) - 1
        self._length = length

    @classmethod
    def _from_shards(cls, shards: tuple[dict[K, V], ...], length: int) -> PersistentMap[K, V]:
        result = cls.__new__(cls)
        result._set(shards, length)
        return result

    # ----- Mapping ----------------------------------------------------------------------------

    def __getitem__(self, key: K) -> V:
        return self._shards[hash(key) & self._mask][key]

    @overload
    def get(self, key: K, /) -> V | None: ...
    @overload
    def get(self, key: K, default: V | D, /) -> V | D: ...

    def get(self, key: K, default: object = None, /) -> object:
        return self._shards[hash(key) & self._mask].get(key, default)

    def __contains__(self, key: object) -> bool:
        try:
            return key in self._shards[hash(key) & self._mask]
        except TypeError:  # an unhashable probe is simply not a key
            return False

    def __iter__(self) -> Iterator[K]:
        return itertools.chain.from_iterable(self._shards)

    def __len__(self) -> int:
        return self._length

    def values(self) -> ValuesView[V]:
        return _Values(self)

    def items(self) -> ItemsView[K, V]:
        return _Items(self)

    def __eq__(self, other: object) -> bool:
        if self is other:
            return True
        if not isinstance(other, Mapping):
            return NotImplemented
        if len(self) != len(other):
            return False
        return all(key in other and other[key] == value for key, value in self.items())

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        shown = dict(itertools.islice(self.items(), 20))
        more = f", ... ({self._length} entries)" if self._length > len(shown) else ""
        return f"PersistentMap({shown!r}{more})"

    # ----- copy-on-write update ---------------------------------------------------------------

    def updated(self, puts: Mapping[K, V], removes: Iterable[K] = ()) -> PersistentMap[K, V]:
        """A map with ``puts`` set, then ``removes`` (absent keys are ignored) gone.

        Shares every shard it does not write to with ``self``; returns ``self`` when there is
        nothing to change.
        """
        removes = tuple(removes)
        if not puts and not removes:
            return self
        mask = self._mask
        shards = list(self._shards)
        copied: dict[int, dict[K, V]] = {}
        length = self._length
        for key, value in puts.items():
            index = hash(key) & mask
            shard = copied.get(index)
            if shard is None:
                shard = copied[index] = shards[index] = dict(shards[index])
            if key not in shard:
                length += 1
            shard[key] = value
        for key in removes:
            index = hash(key) & mask
            if key not in shards[index]:
                continue
            shard = copied.get(index)
            if shard is None:
                shard = copied[index] = shards[index] = dict(shards[index])
            del shard[key]
            length -= 1
        bits = mask.bit_length()
        wanted = _shard_bits_for(length)
        if abs(wanted - bits) >= 2 or (wanted == 0) != (bits == 0):
            # The size drifted far from what this shard count suits: rebuild (amortised).
            return PersistentMap(itertools.chain.from_iterable(s.items() for s in shards))
        return PersistentMap._from_shards(tuple(shards), length)

    def changed_keys(self, older: PersistentMap[K, V]) -> set[K]:
        """The keys whose value is not the same object in ``older`` (added, replaced or
        removed). Shards the two maps share are skipped, so a map ``updated`` from ``older``
        is compared in time proportional to what changed, not to its size (a rebuilt map, whose
        shards are all new, is compared entry by entry)."""
        if self is older:
            return set()
        changed: set[K] = set()
        if len(self._shards) == len(older._shards):
            pairs: Iterable[tuple[dict[K, V], dict[K, V]]] = zip(
                self._shards, older._shards, strict=True
            )
        else:
            pairs = ((dict(self.items()), dict(older.items())),)
        for mine, theirs in pairs:
            if mine is theirs:
                continue
            changed.update(k for k, v in mine.items() if theirs.get(k, _ABSENT) is not v)
            changed.update(key for key in theirs if key not in mine)
        return changed

    def shares_shards_with(self, other: PersistentMap[K, V]) -> int:
        """How many shard dicts the two maps share (for tests of copy-on-write)."""
        theirs = {id(shard) for shard in other._shards}
        return sum(1 for shard in self._shards if id(shard) in theirs)


class _Values(ValuesView[V]):
    """``values()`` iterating the shards directly (not a ``__getitem__`` per key)."""

    __slots__ = ("_shards",)

    def __init__(self, mapping: PersistentMap[K, V]) -> None:
        super().__init__(mapping)
        self._shards: tuple[dict[K, V], ...] = mapping._shards

    def __iter__(self) -> Iterator[V]:
        return itertools.chain.from_iterable(shard.values() for shard in self._shards)


class _Items(ItemsView[K, V]):
    """``items()`` iterating the shards directly (not a ``__getitem__`` per key)."""

    __slots__ = ("_shards",)

    def __init__(self, mapping: PersistentMap[K, V]) -> None:
        super().__init__(mapping)
        self._shards: tuple[dict[K, V], ...] = mapping._shards

    def __iter__(self) -> Iterator[tuple[K, V]]:
        return itertools.chain.from_iterable(shard.items() for shard in self._shards)


_EMPTY_MAP: Final[PersistentMap[object, object]] = PersistentMap()


def empty_map() -> PersistentMap[K, V]:
    """The shared empty ``PersistentMap``."""
    return cast("PersistentMap[K, V]", _EMPTY_MAP)


# ----- the image ----------------------------------------------------------------------------


class PartitionImage(NamedTuple):
    """One partition of a topic. A NamedTuple: there are millions and they are built in replay."""

    partition: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    leader: int
    leader_epoch: int
    partition_epoch: int


@dataclass(frozen=True, slots=True)
class TopicImage:
    name: str
    topic_id: Uuid
    internal: bool
    creation_offset: int
    """Offset of this topic's ``TopicRecord``: with ``topic_id``, the topic's identity."""
    partitions: Mapping[int, PartitionImage]
    configs: Mapping[str, str]

    @property
    def replication_factor(self) -> int:
        """The replica count of partition 0 (all partitions have the same at creation)."""
        first = self.partitions.get(0)
        return -1 if first is None else len(first.replicas)


@dataclass(frozen=True, slots=True)
class BrokerImage:
    broker_id: int
    incarnation_id: Uuid
    broker_epoch: int
    """The offset of the broker's ``RegisterBrokerRecord`` (KIP-631)."""
    endpoints: tuple[BrokerEndpoint, ...]
    rack: str | None
    fenced: bool


@dataclass(frozen=True, slots=True)
class DeletedTopic:
    """What the image remembers of a removed topic while it is among the most recent
    deletions (``DeletedTopics``), so its id is not reused and errors can say when it went."""

    name: str
    topic_id: Uuid
    creation_offset: int
    deletion_offset: int


_DELETION_ORDER_CHUNK_IDS: Final = 256
"""Ids per chunk of ``DeletedTopics``' deletion order: adding or dropping a few deletions
copies one chunk and the tuple of chunks (about 40 pointers at 10,000 retained)."""


def _deletion_key(deleted: DeletedTopic) -> tuple[int, int, Uuid]:
    return (deleted.deletion_offset, deleted.creation_offset, deleted.topic_id)


class DeletedTopics(Mapping[Uuid, DeletedTopic]):
    """``MetadataImage.deleted_topics``: removed topics by id, and their deletion order.

    Which ones an image keeps is a function of the log alone, so every node, a snapshot plus
    the log after it, and a replay of the whole log agree: the newest ``retained_max``
    deletions by (``deletion_offset``, ``creation_offset``, ``topic_id``), whatever batches
    and deltas the records came in (docs/architecture.md#deleted-topic-ids). The order is kept
    beside a ``PersistentMap`` by id, as a tuple of chunks of ids (oldest first), so
    ``with_deletions`` appends and drops the oldest in time proportional to the deletions
    added plus one chunk and the tuple of chunks, never a sort of what is retained.

    Iteration is in deletion order, oldest first.
    """

    __slots__ = ("_by_id", "_order")

    EMPTY: ClassVar[DeletedTopics]

    def __init__(
        self,
        by_id: PersistentMap[Uuid, DeletedTopic],
        order: tuple[tuple[Uuid, ...], ...],
    ) -> None:
        self._by_id = by_id
        self._order = order

    def __getitem__(self, key: Uuid) -> DeletedTopic:
        return self._by_id[key]

    def __contains__(self, key: object) -> bool:
        return key in self._by_id

    def __iter__(self) -> Iterator[Uuid]:
        return itertools.chain.from_iterable(self._order)

    def __len__(self) -> int:
        return len(self._by_id)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, DeletedTopics):
            return self._by_id == other._by_id  # the order follows from the contents
        return self._by_id == other

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"DeletedTopics({self._by_id!r})"

    def oldest(self) -> DeletedTopic | None:
        """The deletion that would be forgotten next, or None when there is none."""
        return self._by_id[self._order[0][0]] if self._order else None

    def newer_than(self, topic_id: Uuid) -> int:
        """How many retained deletions are newer than that of ``topic_id`` (which must be
        retained). Walks the order from the newest end: for the rare path of an id that comes
        back, not for every replay."""
        newer = 0
        for chunk in reversed(self._order):
            if topic_id in chunk:
                return newer + len(chunk) - 1 - chunk.index(topic_id)
            newer += len(chunk)
        raise KeyError(topic_id)

    def with_deletions(self, added: Iterable[DeletedTopic], retained_max: int) -> DeletedTopics:
        """These deletions plus ``added``, keeping the newest ``retained_max`` of them.

        Every deletion ``added`` must come after every one retained here (replay only moves
        forward: a delta's removals are at offsets past its image's); a violation is a bug and
        asserts. An id may appear twice only if its older deletion is among those dropped
        (the id was forgotten, then drawn again).
        """
        if retained_max < 0:
            raise ValueError(f"retained_max must be >= 0, got {retained_max}")
        new = sorted(added, key=_deletion_key)
        if not new and len(self) <= retained_max:
            return self
        if new and self._order:
            newest = self._by_id[self._order[-1][-1]]
            assert _deletion_key(newest) < _deletion_key(new[0]), (newest, new[0])
        chunks = list(self._order)
        ids = [deleted.topic_id for deleted in new]
        if chunks and len(chunks[-1]) < _DELETION_ORDER_CHUNK_IDS:
            room = _DELETION_ORDER_CHUNK_IDS - len(chunks[-1])
            chunks[-1] += tuple(ids[:room])
            ids = ids[room:]
        for start in range(0, len(ids), _DELETION_ORDER_CHUNK_IDS):
            chunks.append(tuple(ids[start : start + _DELETION_ORDER_CHUNK_IDS]))
        # The oldest go first: those retained here, then the oldest of ``new``.
        surplus = max(0, len(self) + len(new) - retained_max)
        first = 0
        left = surplus
        while left > 0 and left >= len(chunks[first]):
            left -= len(chunks[first])
            first += 1
        if left > 0:
            chunks[first] = chunks[first][left:]
        old_dropped = list(itertools.islice(iter(self), min(surplus, len(self))))
        # An id may come back after it was forgotten and go again (a 2**-122 chance per drawn
        # id): the newest deletion of it wins.
        puts = {d.topic_id: d for d in new[max(0, surplus - len(self)) :]}
        by_id = self._by_id.updated(puts, [i for i in old_dropped if i not in puts])
        assert len(by_id) == sum(map(len, chunks[first:])), "an id retained twice"
        return DeletedTopics(by_id, tuple(chunks[first:]))


DeletedTopics.EMPTY = DeletedTopics(empty_map(), ())


def topic_collision_key(name: str) -> str:
    """Kafka's ``Topic.unifyCollisionChars``: names that differ only by ``.``/``_`` collide."""
    return name.replace(".", "_")


def has_collision_chars(name: str) -> bool:
    return "." in name or "_" in name


@dataclass(frozen=True, slots=True, eq=True)
class MetadataImage:
    """The cluster's metadata after the record at ``offset`` (-1: nothing replayed yet)."""

    offset: int
    topics_by_id: Mapping[Uuid, TopicImage]
    topics_by_name: Mapping[str, Uuid]
    brokers: Mapping[int, BrokerImage]
    metadata_topic_id: Uuid | None
    """The id ``__cluster_metadata`` got from its ``TopicRecord`` (KIP-516), once written."""
    deleted_topics: Mapping[Uuid, DeletedTopic]
    """The most recently removed topics, by id (a ``DeletedTopics``: at most
    ``DELETED_TOPICS_RETAINED_MAX``, the oldest forgotten first)."""
    broker_configs: Mapping[str, Mapping[str, str]]
    """``ConfigRecord``s of resource type BROKER by resource name; ``""`` is the cluster default."""
    topic_names_by_collision_key: Mapping[str, frozenset[str]]
    """Live names containing ``.`` or ``_``, by ``topic_collision_key`` (Kafka's
    ``topicsWithCollisionChars``): the index that makes the collision check O(1)."""

    acls: Mapping[Uuid, AclBinding] = field(default_factory=empty_map)
    """Every ACL by id (``AccessControlEntryRecord``s, docs/authorization.md)."""

    client_quotas: Mapping[tuple[tuple[str, str | None], ...], Mapping[str, float]] = field(
        default_factory=empty_map
    )
    """Client quotas by entity (``ClientQuotaRecord``s, docs/kafka-listener.md#client-quotas):
    the entity as its ``(entity_type, entity_name)`` pairs sorted by type (a None name: the
    type's default), then quota key -> value. An entity with no key left is not here."""

    next_producer_id: int = 0
    """The first producer id of the next block the controller hands out (Kafka's
    ``ProducerIdsImage.nextProducerId``, from the last ``ProducerIdsRecord``): every id below it
    was given to some broker, so no id is handed out twice, across failover and snapshots."""

    EMPTY: ClassVar[MetadataImage]

    __hash__ = None  # type: ignore[assignment]

    # ----- lookups ----------------------------------------------------------------------------

    def topic(self, topic_id: Uuid) -> TopicImage | None:
        return self.topics_by_id.get(topic_id)

    def topic_by_name(self, name: str) -> TopicImage | None:
        topic_id = self.topics_by_name.get(name)
        return None if topic_id is None else self.topics_by_id[topic_id]

    def is_topic_id_used(self, topic_id: Uuid) -> bool:
        """True for the id of a live topic or of a retained deleted one (``deleted_topics``)."""
        return topic_id in self.topics_by_id or topic_id in self.deleted_topics

    def colliding_topic_name(self, name: str) -> str | None:
        """A live topic name other than ``name`` that equals it once ``.`` and ``_`` are
        equated (the smallest, for a stable message), or None."""
        if not has_collision_chars(name):
            return None
        others = self.topic_names_by_collision_key.get(topic_collision_key(name), frozenset())
        candidates = sorted(other for other in others if other != name)
        return candidates[0] if candidates else None

    def unfenced_broker_ids(self) -> tuple[int, ...]:
        return tuple(sorted(b.broker_id for b in self.brokers.values() if not b.fenced))

    @property
    def cluster_configs(self) -> Mapping[str, str]:
        """Cluster-wide broker config defaults (resource BROKER, name ``""``)."""
        return self.broker_configs.get("", empty_map())

    def partition_count(self) -> int:
        return sum(len(topic.partitions) for topic in self.topics_by_id.values())


MetadataImage.EMPTY = MetadataImage(
    offset=-1,
    topics_by_id=empty_map(),
    topics_by_name=empty_map(),
    brokers=empty_map(),
    metadata_topic_id=None,
    deleted_topics=DeletedTopics.EMPTY,
    broker_configs=empty_map(),
    topic_names_by_collision_key=empty_map(),
)
