"""The Kafka Admin calls of ``metaquorum groups`` (``quorum/tools/groups.py``), made with
confluent-kafka's AdminClient: it finds each group's coordinator, retries what Kafka's clients
retry and speaks mTLS (librdkafka). Its answers become the plain values of ``groups.py``; its
errors become ``GroupsError`` named as Kafka's Java client names them.

Two things confluent-kafka 2.16 lacks are asked with one request of Kafka's protocol over
``quorum.kafka_wire`` (same TLS settings) to the coordinator ``describe_consumer_groups``
names: ``delete_consumer_group_offsets`` (librdkafka has the call, the Python binding does not
expose it), as OffsetDelete (API 47, v0); and a KIP-848 group's epochs (group, target
assignment, each member's) and its own state names (Assigning, Reconciling), as
ConsumerGroupDescribe (API 69, v0).
"""

from __future__ import annotations

import ssl
import tempfile
from collections.abc import Mapping, Sequence
from concurrent.futures import Future
from dataclasses import replace
from pathlib import Path
from typing import Any, Final

from confluent_kafka import (
    ConsumerGroupState,
    ConsumerGroupTopicPartitions,
    ConsumerGroupType,
    KafkaError,
    KafkaException,
    TopicCollection,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient
from confluent_kafka.admin import OffsetSpec as _OffsetSpec  # type: ignore[attr-defined]

from quorum.security.tls import ClientSecurity
from quorum.tools.groups import (
    KAFKA_MESSAGES,
    TP,
    GroupDescription,
    GroupListing,
    GroupsError,
    Member,
    kafka_error,
)
from quorum.tools.groups_options import STATE_NAMES

__all__ = ["ConfluentGroupsAdmin", "confluent_settings"]

# OffsetDelete's partition-level errors (the others fail the whole request).
_PARTITION_ERRORS: Final = frozenset(
    {"GROUP_SUBSCRIBED_TO_TOPIC", "TOPIC_AUTHORIZATION_FAILED", "UNKNOWN_TOPIC_OR_PARTITION"}
)
# librdkafka's error names where they differ from Kafka's.
_KAFKA_NAMES: Final = {"UNKNOWN_TOPIC_OR_PART": "UNKNOWN_TOPIC_OR_PARTITION"}
# confluent-kafka's state names where they differ from Kafka's.
_STATES: Final = {
    "PREPARING_REBALANCING": "PreparingRebalance",
    "COMPLETING_REBALANCING": "CompletingRebalance",
}


def confluent_settings(bootstrap: str, security: ClientSecurity) -> dict[str, str]:
    """librdkafka's settings for ``--command-config``'s Kafka client keys (PEM files)."""
    settings = {"bootstrap.servers": bootstrap}
    if security.files is None:
        return settings
    files = security.files
    settings["security.protocol"] = "SSL"
    if files.truststore is not None:
        settings["ssl.ca.location"] = str(files.truststore)
    keystore = files.keystore
    if keystore is not None and keystore.location is not None:
        settings["ssl.certificate.location"] = str(keystore.location)
        settings["ssl.key.location"] = str(keystore.location)
    elif keystore is not None and keystore.key_pem and keystore.chain_pem:
        settings["ssl.key.pem"] = keystore.key_pem
        settings["ssl.certificate.pem"] = keystore.chain_pem
    return settings


def _error(exc: BaseException) -> GroupsError:
    if isinstance(exc, KafkaException) and exc.args and isinstance(exc.args[0], KafkaError):
        error: KafkaError = exc.args[0]
        name = _KAFKA_NAMES.get(error.name(), error.name())
        return kafka_error(name, KAFKA_MESSAGES.get(name, error.str()))
    if isinstance(exc, GroupsError):
        return exc
    return GroupsError(type(exc).__name__, str(exc))


def _state(state: object) -> str:
    name = str(getattr(state, "name", state))
    return _STATES.get(name, STATE_NAMES.get(name, "Unknown"))


def _type(kind: object) -> str:
    return str(getattr(kind, "name", kind)).title()


def _tps(partitions: Sequence[TopicPartition] | None) -> tuple[TP, ...]:
    return tuple((tp.topic, tp.partition) for tp in partitions or ())


class ConfluentGroupsAdmin:
    """``GroupsAdmin`` over confluent-kafka's AdminClient; every call waits ``timeout_ms``."""

    def __init__(self, bootstrap: str, security: ClientSecurity, timeout_ms: int) -> None:
        self.settings = confluent_settings(bootstrap, security)
        self.security = security
        self.timeout_s = timeout_ms / 1000
        # librdkafka's warnings and errors on stderr, as Kafka's tool logs WARN and up; not its
        # notices (a purged background queue at exit).
        self.admin = AdminClient({**self.settings, "log_level": 4})

    def _wait(self, future: Future[Any]) -> Any:
        try:
            return future.result(timeout=self.timeout_s + 5)
        except KafkaException as exc:
            raise _error(exc) from None
        except TimeoutError:
            raise GroupsError(
                "org.apache.kafka.common.errors.TimeoutException",
                f"Timed out waiting for a node assignment. Call: {self.timeout_s * 1000:.0f} ms",
            ) from None

    def list_groups(
        self, states: Sequence[str] = (), types: Sequence[str] = ()
    ) -> list[GroupListing]:
        kwargs: dict[str, Any] = {"request_timeout": self.timeout_s}
        if states:
            by_name = {_state(s): s for s in ConsumerGroupState}
            kwargs["states"] = {by_name[s] for s in states if s in by_name}
            if not kwargs["states"]:  # only states librdkafka cannot name (Assigning, ...)
                return []
        if types:
            kwargs["types"] = {ConsumerGroupType[t.upper()] for t in types}
        result = self._wait(self.admin.list_consumer_groups(**kwargs))
        if result.errors:
            raise _error(KafkaException(result.errors[0]))
        return [
            GroupListing(
                g.group_id, _state(getattr(g, "state", None)), _type(getattr(g, "type", None))
            )
            for g in result.valid
        ]

    def describe_groups(self, group_ids: Sequence[str]) -> dict[str, GroupDescription]:
        if not group_ids:
            return {}
        futures = self.admin.describe_consumer_groups(
            list(dict.fromkeys(group_ids)), request_timeout=self.timeout_s
        )
        described = {}
        for group_id, future in futures.items():
            g = self._wait(future)
            members = tuple(
                Member(
                    consumer_id=m.member_id,
                    host=m.host,
                    client_id=m.client_id,
                    assignment=_tps(m.assignment.topic_partitions if m.assignment else None),
                    group_instance_id=m.group_instance_id or "",
                    target_assignment=_tps(
                        m.target_assignment.topic_partitions if m.target_assignment else None
                    ),
                )
                for m in g.members
            )
            description = GroupDescription(
                group_id=group_id,
                state=_state(g.state),
                coordinator_host=g.coordinator.host,
                coordinator_port=g.coordinator.port,
                coordinator_id=g.coordinator.id,
                partition_assignor=g.partition_assignor or "",
                members=members,
            )
            if getattr(g, "type", None) == ConsumerGroupType.CONSUMER:
                description = self._with_epochs(description)
            described[group_id] = description
        return described

    def _with_epochs(self, group: GroupDescription) -> GroupDescription:
        """A KIP-848 group's epochs and state, which confluent-kafka 2.16 does not report: one
        ConsumerGroupDescribe (API 69, v0) to its coordinator. Unchanged if that fails."""
        from kio.schema.consumer_group_describe.v0.request import (  # noqa: PLC0415
            ConsumerGroupDescribeRequest,
        )
        from kio.schema.types import GroupId  # noqa: PLC0415

        from quorum.kafka_wire import KafkaWire  # noqa: PLC0415

        request = ConsumerGroupDescribeRequest(
            group_ids=(GroupId(group.group_id),), include_authorized_operations=False
        )
        address = f"{group.coordinator_host}:{group.coordinator_port}"
        try:
            with KafkaWire(address, self._tls(), timeout_s=self.timeout_s) as wire:
                response = wire.ask(request)
        except (OSError, ConnectionError):
            return group
        answer = next((d for d in response.groups if d.group_id == group.group_id), None)
        if answer is None or answer.error_code != 0:
            return group
        epochs = {m.member_id: int(m.member_epoch) for m in answer.members}
        return replace(
            group,
            state=answer.group_state or group.state,
            group_epoch=int(answer.group_epoch),
            target_assignment_epoch=int(answer.assignment_epoch),
            members=tuple(
                replace(m, member_epoch=epochs.get(m.consumer_id)) for m in group.members
            ),
        )

    def committed_offsets(self, group_id: str) -> dict[TP, tuple[int, int | None]]:
        futures = self.admin.list_consumer_group_offsets(
            [ConsumerGroupTopicPartitions(group_id)], request_timeout=self.timeout_s
        )
        answer = self._wait(futures[group_id])
        committed: dict[TP, tuple[int, int | None]] = {}
        for tp in answer.topic_partitions or ():
            if tp.error is not None:
                raise _error(KafkaException(tp.error))
            if tp.offset >= 0:
                committed[(tp.topic, tp.partition)] = (tp.offset, tp.leader_epoch)
        return committed

    def topic_partitions(
        self, topics: Sequence[str]
    ) -> dict[str, list[tuple[int, bool]] | GroupsError]:
        if not topics:
            return {}
        futures = self.admin.describe_topics(
            TopicCollection(list(topics)), request_timeout=self.timeout_s
        )
        answers: dict[str, list[tuple[int, bool]] | GroupsError] = {}
        for topic, future in futures.items():
            try:
                described = self._wait(future)
            except GroupsError as exc:
                answers[topic] = exc
                continue
            answers[topic] = [(p.id, p.leader is not None) for p in described.partitions]
        return answers

    def list_offsets(self, partitions: Sequence[TP], spec: str | int) -> dict[TP, int]:
        if not partitions:
            return {}
        if spec == "earliest":
            offset_spec = _OffsetSpec.earliest()  # type: ignore[no-untyped-call]
        elif spec == "latest":
            offset_spec = _OffsetSpec.latest()  # type: ignore[no-untyped-call]
        else:
            assert isinstance(spec, int)
            offset_spec = _OffsetSpec.for_timestamp(spec)
        futures = self.admin.list_offsets(
            {TopicPartition(t, p): offset_spec for t, p in dict.fromkeys(partitions)},
            request_timeout=self.timeout_s,
        )
        return {(tp.topic, tp.partition): self._wait(f).offset for tp, f in futures.items()}

    def alter_offsets(self, group_id: str, offsets: Mapping[TP, int]) -> None:
        request = ConsumerGroupTopicPartitions(
            group_id, [TopicPartition(t, p, o) for (t, p), o in offsets.items()]
        )
        futures = self.admin.alter_consumer_group_offsets([request], request_timeout=self.timeout_s)
        answer = self._wait(futures[group_id])
        for tp in answer.topic_partitions or ():
            if tp.error is not None:
                raise _error(KafkaException(tp.error))

    def delete_groups(self, group_ids: Sequence[str]) -> dict[str, GroupsError | None]:
        if not group_ids:
            return {}
        futures = self.admin.delete_consumer_groups(
            list(dict.fromkeys(group_ids)), request_timeout=self.timeout_s
        )
        results: dict[str, GroupsError | None] = {}
        for group_id, future in futures.items():
            try:
                self._wait(future)
                results[group_id] = None
            except GroupsError as exc:
                results[group_id] = exc
        return results

    def delete_offsets(
        self, group_id: str, partitions: Sequence[TP]
    ) -> tuple[str | None, dict[TP, GroupsError | None]]:
        from kio.schema.errors import ErrorCode  # noqa: PLC0415 - only this call needs kio
        from kio.schema.offset_delete.v0.request import (  # noqa: PLC0415
            OffsetDeleteRequest,
            OffsetDeleteRequestPartition,
            OffsetDeleteRequestTopic,
        )
        from kio.schema.types import GroupId, TopicName  # noqa: PLC0415
        from kio.static.primitive import i32  # noqa: PLC0415

        from quorum.kafka_wire import KafkaWire  # noqa: PLC0415

        futures = self.admin.describe_consumer_groups([group_id], request_timeout=self.timeout_s)
        coordinator = self._wait(futures[group_id]).coordinator
        by_topic: dict[str, list[int]] = {}
        for topic, partition in dict.fromkeys(partitions):
            by_topic.setdefault(topic, []).append(partition)
        request = OffsetDeleteRequest(
            group_id=GroupId(group_id),
            topics=tuple(
                OffsetDeleteRequestTopic(
                    name=TopicName(topic),
                    partitions=tuple(
                        OffsetDeleteRequestPartition(partition_index=i32(p)) for p in ps
                    ),
                )
                for topic, ps in by_topic.items()
            ),
        )
        address = f"{coordinator.host}:{coordinator.port}"
        try:
            with KafkaWire(address, self._tls(), timeout_s=self.timeout_s) as wire:
                response = wire.ask(request)
        except (OSError, ConnectionError) as exc:
            raise GroupsError(
                "org.apache.kafka.common.errors.DisconnectException", str(exc)
            ) from exc

        def named(code: int) -> str:
            return ErrorCode(code).name.upper()

        top = None if response.error_code == 0 else named(response.error_code)
        results: dict[TP, GroupsError | None] = {}
        for topic in response.topics:
            for p in topic.partitions:
                code = p.error_code
                name = named(code)
                results[(topic.name, int(p.partition_index))] = (
                    None if code == 0 else kafka_error(name, KAFKA_MESSAGES.get(name, name))
                )
        if top is None:  # Kafka's Admin reports the first partition's error as the request's
            top = next((e.name for e in results.values() if e is not None), None)
        if top is not None and top not in _PARTITION_ERRORS:  # the group's: every partition
            error = kafka_error(top, KAFKA_MESSAGES.get(top, top))
            results = dict.fromkeys(dict.fromkeys(partitions), error)
        return top, results

    def _tls(self) -> ssl.SSLContext | None:
        files = self.security.files
        if files is None:
            return None
        context = ssl.create_default_context(
            cafile=str(files.truststore) if files.truststore else None
        )
        keystore = files.keystore
        if keystore is not None and keystore.location is not None:
            context.load_cert_chain(str(keystore.location))
        elif keystore is not None and keystore.key_pem and keystore.chain_pem:
            with tempfile.TemporaryDirectory() as directory:
                pem = Path(directory) / "keystore.pem"
                pem.write_text(keystore.key_pem + "\n" + keystore.chain_pem)
                pem.chmod(0o600)
                context.load_cert_chain(str(pem))
        return context
