"""A failed Spark job reported by its root cause (``quorum.analytics.failure``): the last exception
of the last Python traceback, the task and executor that failed, what to do, and where the
executor's log is; from the error's text alone, and from the driver's REST API (a real HTTP
server on loopback answering as Spark's does). The end-to-end case, an executor without
pyarrow on a real standalone worker, is in test_spark_cluster.py."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, ClassVar

import pytest

from quorum.analytics.failure import (
    FailedTask,
    describe,
    executor_log_urls,
    failed_task,
    last_failed_task,
    root_cause,
)

# The shape of PySpark's captured PythonException from an executor: the worker's traceback,
# Spark's SQLSTATE suffix, then the JVM's frames.
WORKER_TRACEBACK = """An exception was thrown from the Python worker:
Traceback (most recent call last):
  File "/spark/python/lib/pyspark.zip/pyspark/worker.py", line 1884, in read_udfs
    read_single_udf(pickleSer, udf_info, eval_type, runner_conf, udf_index=udf_index)
  File "/spark/python/lib/pyspark.zip/pyspark/serializers.py", line 483, in loads
    return cloudpickle.loads(obj, encoding=encoding)
           ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^
ModuleNotFoundError: No module named 'pyarrow'
 SQLSTATE: 38000
\tat org.apache.spark.api.python.BasePythonRunner$ReaderIterator.handlePythonException(x:1)
\tat org.apache.spark.sql.execution.python.PythonArrowOutput$$anon$1.read(y:2)
"""

# The shape of a Py4JJavaError for a job aborted by an executor's failures.
JOB_ABORTED = """An error occurred while calling o91.collectToPython.
: org.apache.spark.SparkException: Job aborted due to stage failure: Task 0 in stage 1.0 \
failed 4 times, most recent failure: Lost task 0.3 in stage 1.0 (TID 7) (10.0.0.5 executor 2): \
org.apache.spark.api.python.PythonException: Traceback (most recent call last):
  File "/spark/python/lib/pyspark.zip/pyspark/worker.py", line 1884, in read_udfs
    f()
ModuleNotFoundError: No module named 'msgspec'

\tat org.apache.spark.api.python.BasePythonRunner$ReaderIterator.handlePythonException(x:1)
Driver stacktrace:
\tat org.apache.spark.scheduler.DAGScheduler.failJobAndIndependentStages(z:3)
"""


def test_root_cause_is_the_last_exception_of_the_traceback() -> None:
    assert root_cause(WORKER_TRACEBACK) == "ModuleNotFoundError: No module named 'pyarrow'"
    assert root_cause(JOB_ABORTED) == "ModuleNotFoundError: No module named 'msgspec'"


def test_root_cause_of_chained_exceptions_is_the_last_one() -> None:
    text = (
        "Traceback (most recent call last):\n  File 'a.py', line 1, in f\n"
        "KeyError: 'x'\n\nDuring handling of the above exception, another exception occurred:"
        "\n\nTraceback (most recent call last):\n  File 'a.py', line 3, in f\n"
        "quorum.analytics.log_files.LogReadError: corrupt batch at byte 40 of 0.log\n"
    )
    assert root_cause(text) == "LogReadError: corrupt batch at byte 40 of 0.log"


def test_root_cause_without_a_python_traceback_is_the_last_jvm_cause() -> None:
    text = (
        "org.apache.spark.SparkException: Job aborted due to stage failure\n"
        "\tat org.apache.spark.scheduler.DAGScheduler.abort(a:1)\n"
        "Caused by: org.apache.spark.SparkException: Python worker failed to connect back.\n"
        "\tat b(b:2)\n"
        'Caused by: java.io.IOException: Cannot run program "python3": error=2, No such file\n'
        "\tat c(c:3)\n"
    )
    assert root_cause(text) == (
        'java.io.IOException: Cannot run program "python3": error=2, No such file'
    )
    assert root_cause("\n  [PATH_NOT_FOUND] Path does not exist.\nmore\n") == (
        "[PATH_NOT_FOUND] Path does not exist."
    )
    assert root_cause("") == "unknown error (Spark gave no message)"


def test_failed_task_is_the_most_recent_failure() -> None:
    assert failed_task(JOB_ABORTED) == FailedTask("0.3", "1.0", "10.0.0.5", "2")
    assert failed_task(WORKER_TRACEBACK) is None


def test_describe_from_the_text_alone_names_the_executor_and_its_log() -> None:
    failure = describe(
        JOB_ABORTED, master="spark://m:7077", app_id="app-1-0001", ui_url=None, shipped=False
    )
    lines = failure.lines()
    assert lines[0] == (
        "Error: ModuleNotFoundError: No module named 'msgspec' (on executor 2 at 10.0.0.5: "
        "task 0.3 in stage 1.0, its last attempt)"
    )
    assert lines[1].startswith("What to do: the workers' Python (python3 on their PATH) lacks")
    assert "run without --no-ship-env" in lines[1]
    assert lines[2].endswith("app-1-0001/2/stderr")
    assert len(lines) == 3
    yarn = describe(JOB_ABORTED, master="yarn", app_id="application_1_2", ui_url=None, shipped=True)
    assert yarn.logs == [
        "The executor's log on its machine: yarn logs -applicationId application_1_2"
    ]
    assert "EXECUTOR_DISTRIBUTIONS" in yarn.advice  # shipped, yet missing: the pack's bug
    k8s = describe(JOB_ABORTED, master="k8s://https://h:6443", app_id="spark-a", ui_url=None,
                   shipped=True)  # fmt: skip
    assert "kubectl logs -l spark-app-selector=spark-a,spark-exec-id=2" in k8s.logs[0]


def test_describe_a_driver_side_failure() -> None:
    failure = describe(
        WORKER_TRACEBACK, master="local[*]", app_id="local-1", ui_url=None, shipped=False
    )
    assert failure.task is None and failure.logs == []
    assert failure.lines() == [
        "Error: ModuleNotFoundError: No module named 'pyarrow'",
        "What to do: install metaquorum[analytics] into the Python that runs replay",
    ]


# ----- the driver's REST API -------------------------------------------------------------------


class FakeSparkUI(BaseHTTPRequestHandler):
    """Answers the three REST paths ``failure`` asks, from ``routes``."""

    routes: ClassVar[dict[str, Any]] = {}

    def do_GET(self) -> None:
        body = self.routes.get(self.path)
        if body is None:
            self.send_error(404)
            return
        data = json.dumps(body).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, format: str, *args: Any) -> None:  # quiet: no line per request
        pass


@pytest.fixture
def spark_ui() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), FakeSparkUI)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


APP = "app-20260101000000-0007"
STDERR_URL = f"http://10.0.0.9:8081/logPage/?appId={APP}&executorId=3&logType=stderr"


def routes(error: str) -> dict[str, Any]:
    base = f"/api/v1/applications/{APP}"
    return {
        f"{base}/stages?status=failed": [
            {"stageId": 0, "attemptId": 0, "status": "FAILED"},
            {"stageId": 2, "attemptId": 1, "status": "FAILED"},
        ],
        f"{base}/stages/2/1/taskList?status=failed&length=1000": [
            {
                "taskId": 11,
                "index": 1,
                "attempt": 2,
                "host": "10.0.0.8",
                "executorId": "1",
                "errorMessage": error,
            },
            {
                "taskId": 12,
                "index": 0,
                "attempt": 3,
                "host": "10.0.0.9",
                "executorId": "3",
                "errorMessage": error,
            },
        ],
        f"{base}/allexecutors": [
            {"id": "driver", "executorLogs": {}},
            {"id": "3", "executorLogs": {"stdout": "http://o", "stderr": STDERR_URL}},
        ],
    }


def test_the_rest_api_names_the_failed_task_and_the_executors_log(spark_ui: str) -> None:
    FakeSparkUI.routes = routes(WORKER_TRACEBACK)
    assert last_failed_task(spark_ui, APP) == FailedTask(
        "0.3", "2.1", "10.0.0.9", "3", WORKER_TRACEBACK
    )
    assert executor_log_urls(spark_ui, APP, "3")["stderr"] == STDERR_URL
    assert executor_log_urls(spark_ui, APP, "9") == {}
    # PySpark's exception carries the traceback, not the task: the REST API gives the task.
    failure = describe(
        WORKER_TRACEBACK, master="spark://m:7077", app_id=APP, ui_url=spark_ui, shipped=False
    )
    assert failure.task is not None and failure.task.executor == "3"
    assert failure.logs[0] == f"The executor's log: {STDERR_URL}"
    assert failure.logs[1].endswith(f"{APP}/3/stderr")
    # A JVM-side wrapper without the traceback: the cause comes from the task's error.
    wrapped = describe(
        "org.apache.spark.SparkException: [TASK_WRITE_FAILED] Task failed while writing rows",
        master="spark://m:7077", app_id=APP, ui_url=spark_ui, shipped=False,
    )  # fmt: skip
    assert wrapped.cause == "ModuleNotFoundError: No module named 'pyarrow'"


def test_a_failed_stage_of_another_cause_is_not_blamed(spark_ui: str) -> None:
    """A stage that failed earlier for another reason (and was retried) is not this error's."""
    FakeSparkUI.routes = routes(WORKER_TRACEBACK)
    other = "Traceback (most recent call last):\n  File 'x', line 1\nValueError: bad offset\n"
    failure = describe(other, master="spark://m:7077", app_id=APP, ui_url=spark_ui, shipped=False)
    assert failure.cause == "ValueError: bad offset"
    assert failure.task is None and failure.logs == []


def test_no_ui_or_no_answer_gives_nothing() -> None:
    assert last_failed_task(None, APP) is None
    assert executor_log_urls(None, APP, "1") == {}
    assert last_failed_task("http://127.0.0.1:9", APP) is None  # nothing listens on port 9
