"""The Markdown report of ``metaquorum replay`` and its plots (matplotlib, no display needed).

Everything here works on small, already-aggregated data (pandas DataFrames collected from the
jobs' results), so it can be tested and changed without Spark.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pandas as pd  # type: ignore[import-untyped]

__all__ = [
    "ReplaySummary",
    "format_name_reuse",
    "plot_leadership",
    "plot_partitions_per_broker",
    "plot_topics_alive",
    "topics_alive_steps",
    "write_report",
]

_FIGURE_SIZE_INCHES = (9.0, 4.0)
_FIGURE_DPI = 100


@dataclass(slots=True)
class ReplaySummary:
    """What the report says in words; the plots are files beside it."""

    log_dir: str
    records: int
    first_offset: int | None
    last_offset: int | None
    as_of_offset: int | None
    topic_ids: int
    topics_alive: int
    names_reused: int
    leader_changes: int
    brokers: int
    partition_elections: dict[str, int] = field(default_factory=dict)  # cause -> count
    outputs: list[str] = field(default_factory=list)  # Parquet directories, relative to out/
    plots: list[tuple[str, str]] = field(default_factory=list)  # (title, file name)
    snapshot_ends: list[int] = field(default_factory=list)  # snapshots read, by end offset
    stage_seconds: list[tuple[str, float]] = field(default_factory=list)


def topics_alive_steps(
    created_offsets: Sequence[int], deleted_offsets: Sequence[int | None]
) -> tuple[list[int], list[int]]:
    """(offsets, topics alive after each offset) from the lifecycle's creation and deletion
    offsets: a step function with one point per offset at which the count changes."""
    deltas: dict[int, int] = {}
    for offset in created_offsets:
        deltas[offset] = deltas.get(offset, 0) + 1
    for deleted in deleted_offsets:
        if deleted is not None:
            deltas[deleted] = deltas.get(deleted, 0) - 1
    offsets: list[int] = []
    alive: list[int] = []
    count = 0
    for offset in sorted(deltas):
        count += deltas[offset]
        offsets.append(offset)
        alive.append(count)
    return offsets, alive


def _figure() -> Any:
    from matplotlib.figure import Figure  # noqa: PLC0415 - no pyplot: no global state, no GUI

    figure = Figure(figsize=_FIGURE_SIZE_INCHES, dpi=_FIGURE_DPI, layout="constrained")
    return figure, figure.subplots()


def plot_topics_alive(offsets: Sequence[int], alive: Sequence[int], path: Path) -> None:
    figure, axes = _figure()
    axes.step(offsets, alive, where="post")
    axes.set_xlabel("offset")
    axes.set_ylabel("topics alive")
    axes.set_title("Topics alive over the log")
    axes.grid(True, alpha=0.3)
    figure.savefig(path)


def plot_partitions_per_broker(samples: pd.DataFrame, path: Path) -> None:
    """``samples``: broker_id, offset, partitions (already thinned to a few hundred offsets per
    broker)."""
    figure, axes = _figure()
    for broker_id, rows in samples.sort_values("offset").groupby("broker_id"):
        axes.step(rows["offset"], rows["partitions"], where="post", label=f"broker {broker_id}")
    axes.set_xlabel("offset")
    axes.set_ylabel("partition replicas hosted")
    axes.set_title("Partitions per broker")
    axes.grid(True, alpha=0.3)
    if samples["broker_id"].nunique() <= 16:
        axes.legend(fontsize="small", ncols=2)
    figure.savefig(path)


def plot_leadership(timeline: pd.DataFrame, last_offset: int, path: Path) -> None:
    """One bar per epoch, from its LeaderChangeMessage to the next (or the log end)."""
    figure, axes = _figure()
    ends = timeline["end_offset"].fillna(last_offset + 1)
    leaders = sorted(timeline["leader"].unique())
    for leader in leaders:
        rows = timeline["leader"] == leader
        spans = list(zip(timeline["offset"][rows], (ends - timeline["offset"])[rows], strict=True))
        axes.broken_barh(spans, (leader - 0.4, 0.8), label=f"leader {leader}")
    for _, row in timeline.iterrows():
        axes.annotate(f"e{row['epoch']}", (row["offset"], row["leader"] + 0.45), fontsize="x-small")
    axes.set_yticks(leaders)
    axes.set_xlabel("offset")
    axes.set_ylabel("quorum leader (node id)")
    axes.set_title("Leadership timeline (one bar per epoch)")
    axes.grid(True, axis="x", alpha=0.3)
    figure.savefig(path)


def format_name_reuse(rows: Sequence[dict[str, Any]], limit: int = 20) -> str:
    """A Markdown table of the name-reuse job (``rows``: its columns as dicts)."""
    lines = [
        "| name | incarnations | topic ids (creation order) | gaps (offsets) | gaps (ms) |",
        "| --- | ---: | --- | --- | --- |",
    ]
    for row in rows[:limit]:
        ids = ", ".join(row["topic_ids"])
        gaps = ", ".join("?" if g is None else f"{g:,}" for g in row["gap_offsets"])
        gaps_ms = ", ".join("?" if g is None else f"{g:,}" for g in row["gap_ms"])
        lines.append(f"| {row['name']} | {row['incarnations']} | {ids} | {gaps} | {gaps_ms} |")
    if len(rows) > limit:
        lines.append(f"| ... {len(rows) - limit:,} more names | | | | |")
    if not rows:
        lines.append("| (no name had more than one topic id) | | | | |")
    return "\n".join(lines)


def write_report(out: Path, summary: ReplaySummary, name_reuse_table: str) -> Path:
    """Write ``out/report.md``; returns its path."""

    def number(value: int | None) -> str:
        return "-" if value is None else f"{value:,}"

    lines = [
        "# Metadata log replay",
        "",
        f"Log: `{summary.log_dir}`: {summary.records:,} records, offsets "
        f"{number(summary.first_offset)} to {number(summary.last_offset)}.",
        "",
    ]
    if summary.snapshot_ends:
        ends = ", ".join(f"{end:,}" for end in summary.snapshot_ends)
        lines += [
            f"Snapshots read (end offsets): {ends}. Topics created before the log start come "
            "from them (without creation times).",
            "",
        ]
    lines += [
        "| figure | value |",
        "| --- | ---: |",
        f"| topic ids ever created | {summary.topic_ids:,} |",
        f"| topics alive at the end | {summary.topics_alive:,} |",
        f"| names used by more than one topic id | {summary.names_reused:,} |",
        f"| quorum leader changes (LeaderChangeMessage) | {summary.leader_changes:,} |",
        f"| brokers seen | {summary.brokers:,} |",
        f"| partition leader elections | {sum(summary.partition_elections.values()):,} |",
        *(
            f"| partition leader elections: {cause} | {count:,} |"
            for cause, count in sorted(summary.partition_elections.items())
        ),
        "",
        "## Name reuse",
        "",
        "A name recreated with a new topic id is the case KIP-516 topic ids exist for: a broker "
        "that missed the deletion must not take the new topic's partitions for the old ones. "
        "Gaps run from one incarnation's RemoveTopicRecord to the next TopicRecord.",
        "",
        name_reuse_table,
        "",
    ]
    for title, file_name in summary.plots:
        lines += [f"## {title}", "", f"![{title}]({file_name})", ""]
    lines += ["## Outputs (Parquet)", ""]
    lines += [f"- `{name}/`" for name in summary.outputs]
    if summary.as_of_offset is not None:
        lines += ["", f"`state_as_of/` is the image as of offset {summary.as_of_offset:,}."]
    lines += ["", "## Stages", "", "| stage | seconds |", "| --- | ---: |"]
    lines += [f"| {stage} | {seconds:.1f} |" for stage, seconds in summary.stage_seconds]
    path = out / "report.md"
    path.write_text("\n".join(lines) + "\n")
    return path
