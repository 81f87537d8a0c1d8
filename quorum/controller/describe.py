"""DescribeTopics and ListTopics: read-only views of an image (controllers and brokers alike).

Topics are named by id, or by name when the id is ``ZERO_UUID`` (KIP-516: the id is checked
first, and ``UNKNOWN_TOPIC_ID`` is answered before anything else). Possible codes per entry:

- INVALID_REQUEST: both a name and an id, or neither; more than 1,000 entries (all of them).
- UNKNOWN_TOPIC_ID: no live topic has the id (a deleted id says so).
- UNKNOWN_TOPIC_OR_PARTITION: no live topic has the name.

The metadata topic ``__cluster_metadata`` is described like any topic once its ``TopicRecord``
is written: internal, with no partitions here (its single partition is the Raft log, described
by DescribeQuorum). Offline replicas are those on brokers that are fenced or not registered.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Sequence

from quorum.controller.names import quote
from quorum.controller.requests import (
    DescribeTopic,
    PartitionDescription,
    TopicDescription,
    TopicListing,
)
from quorum.controller.topics import unknown_topic_id_message
from quorum.errors import ErrorCode
from quorum.ids import ZERO_UUID
from quorum.limits import DESCRIBE_TOPICS_TOPICS_MAX
from quorum.metadata.image import MetadataImage, TopicImage

__all__ = ["describe_topic", "describe_topics", "list_topics", "list_topics_page"]


def describe_topic(image: MetadataImage, topic: TopicImage) -> TopicDescription:
    brokers = image.brokers
    partitions = []
    for index in sorted(topic.partitions):
        state = topic.partitions[index]
        offline = tuple(
            replica
            for replica in state.replicas
            if (broker := brokers.get(replica)) is None or broker.fenced
        )
        partitions.append(
            PartitionDescription(
                partition=index,
                leader=state.leader,
                leader_epoch=state.leader_epoch,
                replicas=state.replicas,
                isr=state.isr,
                offline_replicas=offline,
            )
        )
    return TopicDescription(
        name=topic.name,
        topic_id=topic.topic_id,
        is_internal=topic.internal,
        creation_offset=topic.creation_offset,
        partitions=tuple(partitions),
        configs=tuple(sorted(topic.configs.items())),
    )


def describe_topics(
    image: MetadataImage, topics: Sequence[DescribeTopic]
) -> tuple[TopicDescription, ...]:
    """One description per entry, in request order (an entry named twice is described twice)."""
    if len(topics) > DESCRIBE_TOPICS_TOPICS_MAX:
        message = (
            f"A DescribeTopics request may name at most {DESCRIBE_TOPICS_TOPICS_MAX} topics; "
            f"this one names {len(topics)}: split it, or list topics"
        )
        return tuple(
            TopicDescription(t.name, t.topic_id, ErrorCode.INVALID_REQUEST, message) for t in topics
        )
    return tuple(_describe_one(image, entry) for entry in topics)


def _describe_one(image: MetadataImage, entry: DescribeTopic) -> TopicDescription:
    by_name = bool(entry.name)
    by_id = entry.topic_id != ZERO_UUID
    if by_id and by_name:
        return TopicDescription(
            entry.name,
            entry.topic_id,
            ErrorCode.INVALID_REQUEST,
            "You may not specify both topic name and topic id: name the topic by one",
        )
    if by_id:
        topic = image.topic(entry.topic_id)
        if topic is None:
            return TopicDescription(
                None,
                entry.topic_id,
                ErrorCode.UNKNOWN_TOPIC_ID,
                unknown_topic_id_message(image, entry.topic_id),
            )
        return describe_topic(image, topic)
    if not by_name or entry.name is None:
        return TopicDescription(
            entry.name,
            entry.topic_id,
            ErrorCode.INVALID_REQUEST,
            "Neither topic name nor id were specified: give one",
        )
    topic = image.topic_by_name(entry.name)
    if topic is None:
        return TopicDescription(
            entry.name,
            ZERO_UUID,
            ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
            f"Topic {quote(entry.name)} does not exist: list topics to see which do",
        )
    return describe_topic(image, topic)


def list_topics(image: MetadataImage, *, include_internal: bool = True) -> tuple[TopicListing, ...]:
    """Every live topic with its id, sorted by name (internal ones unless excluded)."""
    listings = [
        TopicListing(
            name=topic.name,
            topic_id=topic.topic_id,
            is_internal=topic.internal,
            creation_offset=topic.creation_offset,
        )
        for topic in image.topics_by_id.values()
        if include_internal or not topic.internal
    ]
    listings.sort(key=lambda listing: listing.name)
    return tuple(listings)


def list_topics_page(
    image: MetadataImage,
    *,
    include_internal: bool,
    cursor: str,
    topics_max: int,
    visible: Callable[[str], bool] | None = None,
) -> tuple[tuple[TopicListing, ...], str]:
    """One page of ``list_topics``: the first ``topics_max`` topics whose name is at least
    ``cursor`` (in name order), and the cursor of the next page, the name of the first topic
    left out ("" once the listing is complete). Kafka's DescribeTopicPartitions pages the same
    way, by a cursor naming the topic to resume at.

    ``visible``: whether the caller may see a topic (its DESCRIBE right); the page and the
    cursor are made of visible topics only, so neither names, nor counts, a topic the caller
    may not describe (docs/security.md#what-a-listing-shows). Candidates are taken in name
    order in rounds that double in size, so a caller who sees little costs O(topics x
    log(topics)) checks at most; one who sees all costs O(topics x log(topics_max))."""
    assert topics_max > 0, topics_max
    wanted = topics_max + 1  # one more than the page: it names the next page's cursor
    shown: list[TopicImage] = []
    after = cursor
    inclusive = True
    round_max = wanted
    while len(shown) < wanted:
        candidates = (
            topic
            for topic in image.topics_by_id.values()
            if (topic.name >= after if inclusive else topic.name > after)
            and (include_internal or not topic.internal)
        )
        batch = heapq.nsmallest(round_max, candidates, key=lambda topic: topic.name)
        shown.extend(t for t in batch if visible is None or visible(t.name))
        if len(batch) < round_max:
            break  # no topic left beyond this round
        after, inclusive = batch[-1].name, False
        round_max *= 2
    next_cursor = shown[topics_max].name if len(shown) > topics_max else ""
    page = tuple(
        TopicListing(
            name=topic.name,
            topic_id=topic.topic_id,
            is_internal=topic.internal,
            creation_offset=topic.creation_offset,
        )
        for topic in shown[:topics_max]
    )
    return page, next_cursor
