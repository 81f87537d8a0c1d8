"""The history the fault harness's clients record: one ``Operation`` per admin call, with its
invocation and completion (ok, a definite error, or unknown), for ``quorum.faults.checker``.

Pure: no I/O, no clocks (the workload stamps the times). JSON lines for keeping a failed run's
history next to its node logs.
"""

from __future__ import annotations

import enum
import json
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from typing import Any


class Kind(enum.StrEnum):
    CREATE = "create"
    DELETE_NAME = "delete_name"
    DELETE_ID = "delete_id"
    DESCRIBE_NAME = "describe_name"
    DESCRIBE_ID = "describe_id"
    LIST = "list"


# ``Operation.error`` of an acknowledged write the checker's minimisation treated as unknown.
RELAXED = "relaxed"

WRITES = frozenset({Kind.CREATE, Kind.DELETE_NAME, Kind.DELETE_ID})
READS = frozenset({Kind.DESCRIBE_NAME, Kind.DESCRIBE_ID, Kind.LIST})


class Status(enum.StrEnum):
    OK = "ok"
    ERROR = "error"  # a definite answer (e.g. TOPIC_ALREADY_EXISTS) the model must explain
    # Timed out, connection lost, outcome unknown: may or may not have happened (before
    # ``complete_ns`` if it has one: the checker's minimisation relaxes writes that way).
    UNKNOWN = "unknown"


@dataclass(frozen=True, slots=True)
class Operation:
    """One admin call. ``name`` is the topic it concerns (for the by-id kinds, the name the id
    belongs to: the workload only uses ids that a create or a describe of that name returned).
    ``topic_id`` is the argument of the by-id kinds, or the id a create or describe by name
    answered. An UNKNOWN operation has no completion time."""

    op_id: int
    client: int
    kind: Kind
    invoke_ns: int
    complete_ns: int | None
    status: Status
    name: str | None = None
    topic_id: str | None = None
    error: str | None = None
    offset: int | None = None
    listed: tuple[tuple[str, str], ...] | None = None
    node: str | None = None
    wall_invoke: float = 0.0
    wall_complete: float | None = None

    def __post_init__(self) -> None:
        if self.complete_ns is None and self.status is not Status.UNKNOWN:
            raise ValueError(f"operation {self.op_id}: only an unknown one has no completion")
        if self.kind is not Kind.LIST and self.name is None:
            raise ValueError(f"operation {self.op_id}: a {self.kind} needs the topic name")
        if self.kind in (Kind.DELETE_ID, Kind.DESCRIBE_ID) and self.topic_id is None:
            raise ValueError(f"operation {self.op_id}: a {self.kind} needs the topic id")

    def describe(self, origin_ns: int = 0) -> str:
        """One line for a person: who, what, on which node, with what result, when (ms)."""
        args = self.name or ""
        if self.kind in (Kind.DELETE_ID, Kind.DESCRIBE_ID):
            args = f"{self.topic_id} (of {self.name})"
        if self.status is Status.OK:
            result = "ok"
            if self.kind in (Kind.CREATE, Kind.DESCRIBE_NAME):
                result = f"ok {self.topic_id}"
            if self.kind is Kind.LIST:
                result = f"ok {list(self.listed or ())}"
        elif self.status is Status.ERROR:
            result = str(self.error)
        elif self.error == RELAXED:
            result = "ok, taken as unknown (its outcome does not matter here)"
        else:
            result = "unknown"
        start = (self.invoke_ns - origin_ns) / 1e6
        end = "inf" if self.complete_ns is None else f"{(self.complete_ns - origin_ns) / 1e6:.1f}"
        where = f" @{self.node}" if self.node else ""
        offset = f" offset {self.offset}" if self.offset is not None else ""
        return (
            f"#{self.op_id} client {self.client}{where}: {self.kind}({args}) -> {result}{offset}"
            f"  [{start:.1f} .. {end}] ms"
        )


def to_jsonl(operations: Iterable[Operation]) -> str:
    return "".join(json.dumps(_to_json(o), sort_keys=True) + "\n" for o in operations)


def from_jsonl(text: str) -> list[Operation]:
    return [_from_json(json.loads(line)) for line in text.splitlines() if line.strip()]


def _to_json(operation: Operation) -> dict[str, Any]:
    data = asdict(operation)
    data["kind"] = str(operation.kind)
    data["status"] = str(operation.status)
    return data


def _from_json(data: dict[str, Any]) -> Operation:
    listed = data.get("listed")
    return Operation(
        **{
            **data,
            "kind": Kind(data["kind"]),
            "status": Status(data["status"]),
            "listed": None if listed is None else tuple((n, i) for n, i in listed),
        }
    )
