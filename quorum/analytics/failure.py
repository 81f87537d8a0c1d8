"""Why a Spark job of ``replay`` failed, in one line, and where the whole story is.

A failure in a Python worker reaches the driver as a JVM exception whose message nests the
worker's traceback several times over (the task's error, the stage's, the driver's stack
trace), tens of lines of JVM frames around it. The cause a user needs is the last exception of
the last Python traceback (``ModuleNotFoundError: No module named 'pyarrow'``); the task that
failed (``Lost task 0.3 in stage 1.0 (TID 7) (10.0.0.5 executor 2)``) says where, and the
executor's log (its stderr, kept by the worker) is where the rest is. ``describe`` turns the
error's text into that report; it reads text only, so that it works on whatever PySpark wraps
the error in (a captured ``PythonException``, a ``Py4JJavaError``). PySpark's own exception for a
Python worker's failure carries the traceback but not the task, so the task comes from the
driver's monitoring REST API while the application runs (``last_failed_task``: the newest
failed stage's newest failed attempt), and so do the executor's log URLs
(``executor_log_urls``), which a standalone worker serves from its work directory; without the
UI, from Spark's ``Lost task ...`` line in the error's text.
"""

from __future__ import annotations

import json
import re
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Final

__all__ = [
    "FailedTask",
    "SparkFailure",
    "describe",
    "executor_log_urls",
    "failed_task",
    "last_failed_task",
    "log_location",
    "root_cause",
]

PYTHON_TRACEBACK: Final = "Traceback (most recent call last):"
# The line that ends a Python traceback: the exception's (dotted) class name and its message.
_EXCEPTION_LINE: Final = re.compile(r"^(?P<cls>[A-Za-z_][\w.]*)(?::\s?(?P<message>.*))?$")
# A JVM cause: "Caused by: java.io.IOException: Cannot run program ...".
_CAUSED_BY: Final = re.compile(r"^\s*Caused by: (?P<cause>\S.*)$", re.MULTILINE)
# Spark's description of the task attempt that failed last.
_LOST_TASK: Final = re.compile(
    r"Lost task (?P<task>[\d.]+) in stage (?P<stage>[\d.]+) \(TID \d+\) "
    r"\((?P<host>[^\s()]+) executor (?P<executor>[^\s()]+)\)"
)
_REST_TIMEOUT_S: Final = 5.0


@dataclass(frozen=True)
class FailedTask:
    """The task attempt that failed last: ``task`` (``0.3``: partition 0, fourth attempt),
    ``stage``, the executor's ``host`` and id, and its error as Spark recorded it (empty when
    only the job's message named the task)."""

    task: str
    stage: str
    host: str
    executor: str
    error: str = ""


@dataclass(frozen=True)
class SparkFailure:
    """A failed job, as ``describe`` reports it: the root ``cause``, the task that failed last
    (None: the driver failed), what to do about it (empty: nothing known) and the lines saying
    where the whole log is."""

    cause: str
    task: FailedTask | None = None
    advice: str = ""
    logs: list[str] = field(default_factory=list)

    def lines(self) -> list[str]:
        """The report: one ``Error:`` line, then what to do and where the logs are."""
        where = ""
        if self.task is not None:
            where = (
                f" (on executor {self.task.executor} at {self.task.host}: task "
                f"{self.task.task} in stage {self.task.stage}, its last attempt)"
            )
        report = [f"Error: {self.cause}{where}"]
        if self.advice:
            report.append(f"What to do: {self.advice}")
        return report + self.logs


def root_cause(text: str) -> str:
    """The last exception of the last Python traceback in ``text``, without its module path
    (``ModuleNotFoundError: No module named 'pyarrow'``); without one, the last JVM cause
    (``Caused by: ...``); without one either, the first line."""
    at = text.rfind(PYTHON_TRACEBACK)
    if at >= 0:
        for line in text[at + len(PYTHON_TRACEBACK) :].splitlines():
            if not line.strip() or line[0].isspace():
                continue  # the frames and their source lines are indented
            match = _EXCEPTION_LINE.match(line.rstrip())
            if match is not None:
                name = match["cls"].rsplit(".", 1)[-1]
                return f"{name}: {match['message']}" if match["message"] else name
            break
    causes = _CAUSED_BY.findall(text)
    if causes:
        return str(causes[-1]).strip()
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    return lines[0] if lines else "unknown error (Spark gave no message)"


def failed_task(text: str) -> FailedTask | None:
    """The task attempt Spark names as the job's most recent failure, if an executor failed."""
    at = text.find("most recent failure:")
    match = _LOST_TASK.search(text, at if at >= 0 else 0) or _LOST_TASK.search(text)
    if match is None:
        return None
    return FailedTask(match["task"], match["stage"], match["host"], match["executor"])


def _rest(ui_url: str, path: str) -> object:
    """A GET on the driver's monitoring REST API (None when it does not answer)."""
    url = f"{ui_url.rstrip('/')}/api/v1/{path}"
    try:
        with urllib.request.urlopen(url, timeout=_REST_TIMEOUT_S) as response:
            return json.load(response)
    except (OSError, ValueError):
        return None


def last_failed_task(ui_url: str | None, app_id: str) -> FailedTask | None:
    """The most recent failed task attempt of ``app_id``'s newest failed stage, as the driver's
    REST API knows it while the application runs (None: the UI is off, or no task failed:
    the driver itself failed)."""
    if not ui_url:
        return None
    stages = _rest(ui_url, f"applications/{app_id}/stages?status=failed")
    failed = [
        stage
        for stage in (stages if isinstance(stages, list) else ())
        if isinstance(stage, dict) and isinstance(stage.get("stageId"), int)
    ]
    if not failed:
        return None
    stage = max(failed, key=lambda s: (s["stageId"], s.get("attemptId", 0)))
    stage_id, attempt = stage["stageId"], stage.get("attemptId", 0)
    tasks = _rest(
        ui_url,
        f"applications/{app_id}/stages/{stage_id}/{attempt}/taskList?status=failed&length=1000",
    )
    attempts = [
        task
        for task in (tasks if isinstance(tasks, list) else ())
        if isinstance(task, dict) and isinstance(task.get("taskId"), int)
    ]
    if not attempts:
        return None
    task = max(attempts, key=lambda t: t["taskId"])
    return FailedTask(
        task=f"{task.get('index')}.{task.get('attempt')}",
        stage=f"{stage_id}.{attempt}",
        host=str(task.get("host", "?")),
        executor=str(task.get("executorId", "?")),
        error=str(task.get("errorMessage", "")),
    )


def executor_log_urls(ui_url: str | None, app_id: str, executor: str) -> Mapping[str, str]:
    """The log URLs (``stdout``, ``stderr``) the driver's REST API gives for ``executor`` of
    ``app_id``, or nothing when the UI is off or does not answer."""
    if not ui_url:
        return {}
    executors = _rest(ui_url, f"applications/{app_id}/allexecutors")
    for summary in executors if isinstance(executors, list) else ():
        if isinstance(summary, dict) and str(summary.get("id")) == executor:
            logs = summary.get("executorLogs")
            if isinstance(logs, dict):
                return {str(k): str(v) for k, v in logs.items()}
    return {}


def log_location(master: str | None, app_id: str, task: FailedTask) -> str:
    """Where the cluster manager keeps the failed executor's log, by the kind of master."""
    executor = task.executor
    if master is not None and master.startswith("spark://"):
        return (
            f"on {task.host}, in the standalone worker's work directory (SPARK_WORKER_DIR, "
            f"default $SPARK_HOME/work): {app_id}/{executor}/stderr"
        )
    if master == "yarn":
        return f"yarn logs -applicationId {app_id}"
    if master is not None and master.startswith("k8s://"):
        return f"kubectl logs -l spark-app-selector={app_id},spark-exec-id={executor}"
    return f"the stderr of executor {executor} of {app_id} on {task.host}"


def _advice(cause: str, task: FailedTask | None, *, shipped: bool, python: str | None) -> str:
    """What to do about the causes met in practice (empty: nothing known to say)."""
    missing_module = cause.startswith(("ModuleNotFoundError", "ImportError"))
    if missing_module and task is not None and shipped:
        return (
            "the environment replay shipped lacks that module: add its distribution to "
            "EXECUTOR_DISTRIBUTIONS in quorum/analytics/pack.py"
        )
    if missing_module and task is not None:
        return (
            f"the workers' Python ({python or 'python3 on their PATH'}) lacks a module the "
            "metaquorum data source imports: run without --no-ship-env (replay then ships "
            "this environment), or install metaquorum[analytics] into the workers' Python "
            "and name it with --conf spark.pyspark.python=PATH"
        )
    if missing_module:
        return "install metaquorum[analytics] into the Python that runs replay"
    if "PYTHON_VERSION_MISMATCH" in cause:
        return (
            "the workers' Python has another version than this one: run without --no-ship-env, "
            "or name a Python of this version with --conf spark.pyspark.python=PATH"
        )
    if "Cannot run program" in cause and task is not None:
        if shipped:
            return (
                "the shipped environment's bin/python did not start on the worker: every "
                "worker needs this Python installation at the same path (quorum/analytics/"
                "pack.py)"
            )
        return (
            f"the workers have no {python or 'python3'}: run without --no-ship-env, or name "
            "their Python with --conf spark.pyspark.python=PATH"
        )
    return ""


def describe(
    text: str,
    *,
    master: str | None,
    app_id: str | None,
    ui_url: str | None,
    shipped: bool,
    python: str | None = None,
) -> SparkFailure:
    """The report of a failed job from the error's ``text``: the root cause, the task, what to
    do, and where the executor's log is (its URL from the driver's REST API while the
    application still runs, and where its cluster manager keeps it). ``shipped``: replay
    shipped its environment; ``python``: the executors' Python, when replay chose it."""
    cause = root_cause(text)
    task = last_failed_task(ui_url, app_id) if app_id else None
    if task is not None and PYTHON_TRACEBACK in task.error:
        if PYTHON_TRACEBACK not in text:
            cause = root_cause(task.error)  # the driver's error is a JVM wrapper without it
        elif root_cause(task.error) != cause:
            task = None  # an earlier failure (a stage retried), not this one
    task = task or failed_task(text)
    logs: list[str] = []
    if task is not None and app_id:
        urls = executor_log_urls(ui_url, app_id, task.executor)
        if "stderr" in urls:
            logs.append(f"The executor's log: {urls['stderr']}")
        logs.append(f"The executor's log on its machine: {log_location(master, app_id, task)}")
    advice = _advice(cause, task, shipped=shipped, python=python)
    return SparkFailure(cause=cause, task=task, advice=advice, logs=logs)
