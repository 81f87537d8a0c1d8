"""Spark's own Kafka connector against the brokers, and the one thing it cannot see: a topic
deleted and created again under its name while a query reads it.

Spark's ``kafka`` source (spark-sql-kafka-0-10, fetched by ``scripts/kafka/fetch
spark-connector``) reads the brokers' Kafka listener like any Kafka client: ``kafka_options``
gives it the mTLS settings of a metaquorum client in Kafka's PEM form. It tracks partitions by
name and offset only. When ``orders`` is deleted and created again during a stream, the new
incarnation's log starts again at offset 0 (KIP-516: a new topic id), but the source's next
batch asks for the same name from the offset it reached: if the new log is shorter it reports
"offset was changed ... some data may have been missed" (``failOnDataLoss``), and if it is
longer it silently reads the new incarnation's records from that offset on, as if they followed
the old ones, having skipped the new incarnation's first records
(tests/spark/test_spark_kafka_connector.py shows both). Its Kafka client fetches by topic id
(Fetch v13+), but learns the new id from Metadata and goes on at the same offset.

``IncarnationGuard`` closes that gap for a ``foreachBatch`` sink. Each batch is materialized
first, then the topic ids of its topics are asked of every broker (Kafka's Metadata, v12, which
names each topic's id): if any broker no longer knows the id the query started with, the batch
fails before the sink sees a row, naming the old and new ids. Why that is sound: a topic id is
never reused, and a broker's image only moves forward, so a broker that names the starting id
*after* the rows were read could not have served a later incarnation's rows before; the rows
come from one of the brokers asked (the partition's leader). The ids the query started with are
kept in a small JSON file beside the query's checkpoint, so a query restarted from its
checkpoint after a recreation is stopped at its first batch too.
"""

from __future__ import annotations

import json
import os
import ssl
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any, Final

from quorum.errors import ErrorCode, error_name
from quorum.ids import Uuid

__all__ = [
    "CONNECTOR_JARS",
    "CONNECTOR_VERSION",
    "IncarnationGuard",
    "TopicIncarnationChangedError",
    "connector_jars",
    "connector_missing",
    "kafka_options",
    "topic_ids_on_brokers",
]

CONNECTOR_VERSION: Final = "4.2.0"
# What the connector needs beyond Spark's own jars (scripts/kafka/spark-connector/pom.xml pins
# these and the ones Spark already ships, which are left out of spark.jars).
CONNECTOR_JARS: Final = (
    f"spark-sql-kafka-0-10_2.13-{CONNECTOR_VERSION}.jar",
    f"spark-token-provider-kafka-0-10_2.13-{CONNECTOR_VERSION}.jar",
    "kafka-clients-3.9.2.jar",
    "commons-pool2-2.13.1.jar",
)
REPO: Final = Path(__file__).resolve().parents[2]
PINS: Final = REPO / "scripts" / "kafka" / "spark-connector" / "jars.sha256"
POM: Final = REPO / "scripts" / "kafka" / "spark-connector" / "pom.xml"
UNKNOWN_TOPIC_OR_PARTITION: Final = int(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
# The guard's question to each broker gives up after this long: a broker that cannot answer
# fails the batch rather than letting it through unchecked.
METADATA_TIMEOUT_S: Final = 10.0


def connector_home() -> Path:
    """Where ``scripts/kafka/fetch spark-connector`` keeps the jars (the cache of Kafka's)."""
    from quorum.kafka_peer import cache_root  # noqa: PLC0415

    return cache_root() / f"spark-kafka-{CONNECTOR_VERSION}"


def connector_missing() -> str | None:
    """Why the connector's jars are not at hand (one line), or None when they are."""
    import hashlib  # noqa: PLC0415

    stamp = connector_home() / ".verified"
    if not stamp.exists():
        return (
            f"Spark's Kafka connector {CONNECTOR_VERSION} is not fetched: run "
            f"scripts/kafka/fetch spark-connector (cache {connector_home()})"
        )
    want = hashlib.sha256(POM.read_bytes() + PINS.read_bytes()).hexdigest()
    if stamp.read_text().strip() != want:
        return (
            f"the connector cache {connector_home()} was verified for other pins: run "
            "scripts/kafka/fetch spark-connector"
        )
    return None


def connector_jars() -> str:
    """The ``spark.jars`` value that adds the connector to a Spark of the same Scala line."""
    return ",".join(str(connector_home() / "libs" / name) for name in CONNECTOR_JARS)


def kafka_options(
    bootstrap: str, *, ca: Path | None = None, keystore: Path | None = None
) -> dict[str, str]:
    """The ``kafka.*`` options of Spark's source for the brokers' Kafka listener: SSL with the
    client's PEM key and certificate (one file, as ``metaquorum dev certs`` writes them) and
    the cluster's CA, or plaintext without them."""
    options = {"kafka.bootstrap.servers": bootstrap}
    if ca is not None:
        options |= {
            "kafka.security.protocol": "SSL",
            "kafka.ssl.truststore.type": "PEM",
            "kafka.ssl.truststore.location": str(ca),
        }
        if keystore is not None:
            options |= {
                "kafka.ssl.keystore.type": "PEM",
                "kafka.ssl.keystore.location": str(keystore),
            }
    return options


class TopicIncarnationChangedError(RuntimeError):
    """A topic the query reads was deleted, or deleted and created again, since it started."""


def _context(options: Mapping[str, str]) -> ssl.SSLContext | None:
    if options.get("kafka.security.protocol", "PLAINTEXT").upper() != "SSL":
        return None
    context = ssl.create_default_context(cafile=options.get("kafka.ssl.truststore.location"))
    keystore = options.get("kafka.ssl.keystore.location")
    if keystore:
        context.load_cert_chain(keystore)
    return context


def topic_ids_on_brokers(
    options: Mapping[str, str], topics: Iterable[str]
) -> dict[int, dict[str, str | None]]:
    """Each broker's topic id for each of ``topics`` (None: the broker knows no such topic),
    by broker id, asked over Kafka's protocol of every broker the bootstrap broker lists."""
    from kio.schema.metadata.v12.request import (  # noqa: PLC0415
        MetadataRequest,
        MetadataRequestTopic,
    )
    from kio.schema.types import TopicName  # noqa: PLC0415

    from quorum.kafka_wire import KafkaWire  # noqa: PLC0415

    names = sorted(set(topics))
    request = MetadataRequest(
        topics=tuple(MetadataRequestTopic(topic_id=None, name=TopicName(n)) for n in names),
        allow_auto_topic_creation=False,
        include_topic_authorized_operations=False,
    )
    context = _context(options)

    def ask(address: str) -> Any:
        with KafkaWire(
            address, context, client_id="metaquorum-guard", timeout_s=METADATA_TIMEOUT_S
        ) as wire:
            return wire.ask(request)

    bootstrap = options["kafka.bootstrap.servers"].split(",")[0].strip()
    first = ask(bootstrap)
    answers: dict[int, dict[str, str | None]] = {}
    for broker in first.brokers:
        answer = ask(f"{broker.host}:{broker.port}")
        ids: dict[str, str | None] = {}
        for topic in answer.topics:
            code = int(topic.error_code)
            if code == UNKNOWN_TOPIC_OR_PARTITION:
                ids[str(topic.name)] = None
            elif code != 0 or topic.topic_id is None or topic.topic_id.int == 0:
                raise TopicIncarnationChangedError(
                    f"broker {broker.node_id} did not name the id of topic '{topic.name}' "
                    f"({error_name(code)}): the batch cannot be checked, so it is not written"
                )
            else:
                ids[str(topic.name)] = str(Uuid.from_bytes(topic.topic_id.bytes))
        answers[int(broker.node_id)] = {name: ids.get(name) for name in names}
    return answers


class IncarnationGuard:
    """Wraps a ``foreachBatch`` function so that no batch reaches it with records of another
    incarnation of a topic than the one the query started on (see the module's docstring).
    Call ``check()`` once before starting the query: it remembers the ids the query starts on
    (a query restarted from its checkpoint keeps the ids it remembered then).

    ``state``: the JSON file keeping the starting ids (beside the query's checkpoint).
    ``ids``: how the ids are asked (``topic_ids_on_brokers`` by default)."""

    def __init__(
        self,
        options: Mapping[str, str],
        topics: Iterable[str],
        state: Path,
        *,
        ids: Callable[[Mapping[str, str], Iterable[str]], dict[int, dict[str, str | None]]]
        | None = None,
    ) -> None:
        self.options = dict(options)
        self.topics = sorted(set(topics))
        self.state = state
        self._ids = ids or topic_ids_on_brokers

    def _started_on(self) -> dict[str, str] | None:
        try:
            stored = json.loads(self.state.read_text())
        except FileNotFoundError:
            return None
        return {str(k): str(v) for k, v in stored["topic_ids"].items()}

    def _remember(self, ids: dict[str, str]) -> None:
        self.state.parent.mkdir(parents=True, exist_ok=True)
        temporary = self.state.with_name(self.state.name + ".tmp")
        with open(temporary, "w") as handle:
            json.dump({"topic_ids": ids}, handle)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temporary, self.state)

    def check(self) -> dict[str, str]:
        """The ids every broker names now, checked against the starting ones (remembered on
        the first call). Raises ``TopicIncarnationChangedError``."""
        by_broker = self._ids(self.options, self.topics)
        started = self._started_on()
        now: dict[str, str] = {}
        for topic in self.topics:
            seen = {broker: ids.get(topic) for broker, ids in sorted(by_broker.items())}
            was = started.get(topic) if started is not None else None
            for broker, topic_id in seen.items():
                if topic_id is None:
                    raise TopicIncarnationChangedError(
                        f"topic '{topic}' is unknown to broker {broker}"
                        + (f" (the query started on id {was})" if was else "")
                        + ": it was deleted; nothing of this batch was written"
                    )
                if was is not None and topic_id != was:
                    raise TopicIncarnationChangedError(
                        f"topic '{topic}' was deleted and created again since the query "
                        f"started (topic id {was} -> {topic_id}, seen on broker {broker}): "
                        "this batch may hold the new incarnation's records, whose offsets "
                        "start again at 0, so nothing of it was written. Read the new "
                        "incarnation with a new query and a new checkpoint (from offset 0)"
                    )
            distinct = {topic_id for topic_id in seen.values() if topic_id is not None}
            if len(distinct) != 1:  # brokers disagree: a recreation under way
                raise TopicIncarnationChangedError(
                    f"the brokers name different ids for topic '{topic}' ({seen}): it is being "
                    "deleted or created again; nothing of this batch was written"
                )
            (now[topic],) = distinct
        if started is None:
            self._remember(now)
        return now

    def wrap(self, write: Callable[[Any, int], None]) -> Callable[[Any, int], None]:
        """The ``foreachBatch`` function: materialize the batch, check, then ``write`` it."""

        def guarded(batch: Any, batch_id: int) -> None:
            batch = batch.persist()
            try:
                batch.count()  # the rows are read from the brokers now, before the check
                self.check()
                write(batch, batch_id)
            finally:
                batch.unpersist()

        return guarded
