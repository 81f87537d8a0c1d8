"""Kafka broker and controller keys that a KRaft config holds but that mean nothing here.

A ``server.properties`` written for Kafka carries keys for the parts of a Kafka node this
project does not have: the network and request threads, the parts of Kafka's partition logs
not built here (rolling by time, flushing, the cleaner), settings of replication it does not
have, the group, transaction and share coordinators and their internal topics, quotas, SASL,
JMX metrics reporters, ZooKeeper.
``quorum/config_load.py`` accepts every key listed here and ignores its value, and a node warns
once, naming them all, so an operator can start from the config they have
(docs/operating.md#kafka-configuration-compatibility); docs/operating.md#configuration-keys
lists them, written from this module by ``quorum/config_doc.py``.
Any other key that is not one of ours is still an error with a did-you-mean suggestion.

Each key maps to the part of Kafka it configures (what the warning says). The list is of key
names from Kafka's documentation of broker configs; it is deliberately explicit (no prefixes),
so a typo in a key that does apply (``log.dirz``) is still caught.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

__all__ = ["NOT_APPLICABLE_KEYS"]

_GROUPS: Final[Mapping[str, tuple[str, ...]]] = {
    "network and request threads (gRPC serves every request here)": (
        "num.network.threads",
        "num.io.threads",
        "num.replica.fetchers",
        "num.recovery.threads.per.data.dir",
        "background.threads",
        "queued.max.requests",
        "socket.send.buffer.bytes",
        "socket.receive.buffer.bytes",
        "socket.request.max.bytes",
        "socket.listen.backlog.size",
        "max.connection.creation.rate",
        "request.timeout.ms",
    ),
    "partition data (log settings this project's partition logs do not have)": (
        "log.segment.delete.delay.ms",
        "log.roll.hours",
        "log.roll.ms",
        "log.roll.jitter.hours",
        "log.flush.interval.messages",
        "log.flush.interval.ms",
        "log.flush.scheduler.interval.ms",
        "log.flush.offset.checkpoint.interval.ms",
        "log.flush.start.offset.checkpoint.interval.ms",
        "log.index.size.max.bytes",
        "log.index.interval.bytes",
        "log.preallocate",
        "log.message.timestamp.type",
        "log.message.timestamp.before.max.ms",
        "log.message.timestamp.after.max.ms",
        "log.cleanup.policy",
        "log.cleaner.threads",
        "log.cleaner.dedupe.buffer.size",
        "log.cleaner.delete.retention.ms",
        "log.cleaner.min.cleanable.ratio",
        "log.cleaner.min.compaction.lag.ms",
        "log.local.retention.ms",
        "log.local.retention.bytes",
        "message.max.bytes",
        "compression.type",
        "remote.log.storage.system.enable",
    ),
    "replication of partition data (settings this project does not have)": (
        "replica.fetch.min.bytes",
        "replica.socket.timeout.ms",
        "replica.socket.receive.buffer.bytes",
        "replica.high.watermark.checkpoint.interval.ms",
        "replica.selector.class",
        "leader.imbalance.per.broker.percentage",
    ),
    "group, transaction and share coordinators": (
        "transaction.state.log.replication.factor",
        "transaction.state.log.min.isr",
        "transaction.state.log.num.partitions",
        "transaction.state.log.segment.bytes",
        "transactional.id.expiration.ms",
        "transaction.max.timeout.ms",
        "group.coordinator.rebalance.protocols",
        "share.coordinator.state.topic.replication.factor",
        "share.coordinator.state.topic.min.isr",
        "share.coordinator.state.topic.num.partitions",
    ),
    "quotas and metrics reporters (metrics here: the Prometheus listener)": (
        "client.quota.callback.class",
        "metric.reporters",
        "metrics.num.samples",
        "metrics.recording.level",
        "metrics.sample.window.ms",
        "kafka.metrics.reporters",
        "kafka.metrics.polling.interval.secs",
    ),
    "SASL (only PLAINTEXT and SSL listeners are supported)": (
        "sasl.enabled.mechanisms",
        "sasl.mechanism.controller.protocol",
        "sasl.mechanism.inter.broker.protocol",
        "sasl.jaas.config",
        "sasl.kerberos.service.name",
        "sasl.server.callback.handler.class",
        "security.inter.broker.protocol",
    ),
    "TLS settings of JKS/PKCS12 stores and the JVM (PEM files are read as they are)": (
        "ssl.keystore.password",
        "ssl.key.password",
        "ssl.truststore.password",
        "ssl.endpoint.identification.algorithm",
        "ssl.enabled.protocols",
        "ssl.protocol",
        "ssl.cipher.suites",
        "ssl.secure.random.implementation",
    ),
    "ZooKeeper and migration (KRaft only)": (
        "zookeeper.connect",
        "zookeeper.connection.timeout.ms",
        "zookeeper.session.timeout.ms",
        "zookeeper.metadata.migration.enable",
        "inter.broker.protocol.version",
    ),
    "broker features this project does not have": (
        "reserved.broker.max.id",
        "controlled.shutdown.enable",
        "initial.broker.registration.timeout.ms",
        "metadata.log.max.record.bytes.between.snapshots.jitter",
    ),
}

NOT_APPLICABLE_KEYS: Final[Mapping[str, str]] = {
    key: part for part, keys in _GROUPS.items() for key in keys
}
assert len(NOT_APPLICABLE_KEYS) == sum(len(keys) for keys in _GROUPS.values()), "a key twice"
