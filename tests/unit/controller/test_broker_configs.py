"""How a broker resolves the defaults of topic configs from its dynamic configs, the
cluster-wide ones and its file (quorum/controller/broker_configs.py), as Kafka merges them:
by key first (per broker over cluster-wide over static), then synonyms
(log.retention.ms over .minutes over .hours); and the log config a topic gets from them."""

from __future__ import annotations

from broker.log.config import LogConfig
from quorum.controller.broker_configs import merged_broker_configs, topic_defaults


def defaults(
    per_broker: dict[str, str] | None = None,
    cluster: dict[str, str] | None = None,
    static: dict[str, str] | None = None,
) -> dict[str, str]:
    configs = {"101": per_broker or {}, "": cluster or {}, "102": {"log.retention.ms": "9"}}
    return topic_defaults(merged_broker_configs(configs, 101, static or {}))


def test_kafka_s_defaults_without_any_broker_config() -> None:
    assert defaults() == {
        "retention.ms": "604800000",
        "retention.bytes": "-1",
        "segment.bytes": "1073741824",
        "min.insync.replicas": "1",
        "unclean.leader.election.enable": "false",
    }


def test_per_broker_beats_cluster_wide_beats_static() -> None:
    static = {"log.retention.ms": "3", "log.segment.bytes": "4096", "node.id": "101"}
    assert defaults(static=static)["retention.ms"] == "3"
    assert defaults(cluster={"log.retention.ms": "2"}, static=static)["retention.ms"] == "2"
    both = defaults({"log.retention.ms": "1"}, {"log.retention.ms": "2"}, static)
    assert (both["retention.ms"], both["segment.bytes"]) == ("1", "4096")
    # another broker's dynamic value is not this one's
    assert defaults()["retention.ms"] == "604800000"


def test_synonyms_resolve_after_the_merge_as_kafka_s() -> None:
    assert defaults(cluster={"log.retention.hours": "1"})["retention.ms"] == "3600000"
    assert defaults({"log.retention.minutes": "2"})["retention.ms"] == "120000"
    # A static log.retention.ms beats a dynamic log.retention.hours (Kafka's KafkaConfig).
    assert defaults({"log.retention.hours": "1"}, static={"log.retention.ms": "7"}) == defaults(
        static={"log.retention.ms": "7"}
    )
    assert defaults(cluster={"log.retention.hours": "-5"})["retention.ms"] == "-1"


def test_a_topic_s_own_config_beats_every_broker_level() -> None:
    broker = defaults({"log.retention.ms": "1", "min.insync.replicas": "2"})
    assert LogConfig.of({"retention.ms": "50"}, broker).retention_ms == 50
    config = LogConfig.of({}, broker)
    assert (config.retention_ms, config.min_insync_replicas) == (1, 2)
    assert LogConfig.of({}).retention_ms == 604_800_000
