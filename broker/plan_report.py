"""Reconciliation plans as people and tools read them: one JSON-ready row per action of a
``ReconcilePlan`` (``metaquorum broker pending-deletions``, the dry run) and the ISO times of
due deletions. Pure; ``broker/logdirs.py`` re-exports both."""

from __future__ import annotations

from datetime import UTC, datetime

from broker.reconcile import DELETING_DIR, ReconcilePlan

__all__ = ["describe_plan", "iso_time"]


def describe_plan(plan: ReconcilePlan) -> list[dict[str, object]]:
    """One JSON-ready dict per action and conflict of ``plan``, in execution order."""
    rows: list[dict[str, object]] = []
    for move in plan.move_aside:
        rows.append(
            {
                "action": "move_aside",
                "log_dir": move.log_dir,
                "dir": move.dir_name,
                "destination": f"{DELETING_DIR}/{move.destination}",
                "topic_id": str(move.topic_id) if move.topic_id is not None else None,
                "partition": move.partition,
                "reason": move.reason.value,
                "delete_at": iso_time(move.delete_at_ms),
                "delete_at_ms": move.delete_at_ms,
            }
        )
    for schedule in plan.schedules:
        rows.append(
            {
                "action": "schedule_deletion",
                "log_dir": schedule.log_dir,
                "dir": f"{DELETING_DIR}/{schedule.name}",
                "delete_at": iso_time(schedule.delete_at_ms),
                "delete_at_ms": schedule.delete_at_ms,
            }
        )
    for write in plan.write_metadata:
        rows.append(
            {
                "action": "write_partition_metadata",
                "log_dir": write.log_dir,
                "dir": write.dir_name,
                "topic_id": str(write.topic_id),
                "partition": write.partition,
            }
        )
    for create in plan.creates:
        rows.append(
            {
                "action": "create",
                "log_dir": create.log_dir,
                "dir": create.dir_name,
                "topic": create.topic_name,
                "topic_id": str(create.topic_id),
                "partition": create.partition,
            }
        )
    for delete in plan.deletes:
        rows.append(
            {
                "action": "delete",
                "log_dir": delete.log_dir,
                "dir": f"{DELETING_DIR}/{delete.name}",
                "delete_at": iso_time(delete.delete_at_ms),
                "delete_at_ms": delete.delete_at_ms,
            }
        )
    for conflict in plan.conflicts:
        rows.append(
            {
                "action": "conflict",
                "log_dir": conflict.log_dir,
                "dir": conflict.dir_name,
                "message": conflict.message,
            }
        )
    return rows


def iso_time(ms: int) -> str:
    """``2024-05-01T12:00:00.000+00:00`` for wall-clock milliseconds."""
    return datetime.fromtimestamp(ms / 1000, tz=UTC).isoformat(timespec="milliseconds")
