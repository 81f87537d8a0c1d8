"""A Spark driver with Spark's Kafka connector on its classpath, run as its own process by
tests/spark/test_spark_kafka_connector.py (the tests' shared session was built without the
connector, and a JVM's jars are fixed when it starts). One JSON argument says what to do; the
last line printed is a JSON result.

- ``{"mode": "batch", "options": {...}, "topic": T}``: read partition 0 of T from the earliest
  offset, print every record (offset, key, value, headers, timestamp).
- ``{"mode": "stream", "options": {...}, "topic": T, "checkpoint": DIR, "out": DIR,
  "guard": bool, "check_first": bool, "fail_on_data_loss": bool, "stop": FILE, "timeout_s":
  S}``: a streaming query of partition 0 of T into Parquet under ``out`` through
  ``foreachBatch`` (guarded by ``IncarnationGuard`` or not; ``check_first``: the guard checks
  before the query starts, else only in its batches), until the query fails, ``stop``
  appears, or ``timeout_s`` passes; prints the query's exception, if any.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import Any

from quorum.analytics.kafka_connector import (
    IncarnationGuard,
    TopicIncarnationChangedError,
    connector_jars,
)


def session() -> Any:
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["SPARK_LOCAL_IP"] = "127.0.0.1"
    from pyspark.sql import SparkSession  # noqa: PLC0415

    spark = (
        SparkSession.builder.master("local[2]")
        .appName("metaquorum-kafka-connector")
        .config("spark.jars", connector_jars())
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.sql.session.timeZone", "UTC")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def reader_options(job: dict[str, Any]) -> dict[str, str]:
    return {
        **job["options"],
        "assign": json.dumps({job["topic"]: [0]}),
        "startingOffsets": "earliest",
        "includeHeaders": "true",
        "failOnDataLoss": "true" if job.get("fail_on_data_loss", True) else "false",
    }


def batch(job: dict[str, Any]) -> dict[str, Any]:
    spark = session()
    frame = spark.read.format("kafka").options(**reader_options(job)).load()
    rows = frame.orderBy("offset").collect()
    return {
        "records": [
            {
                "offset": row.offset,
                "key": None if row.key is None else bytes(row.key).decode(),
                "value": bytes(row.value).decode(),
                "headers": [[h.key, bytes(h.value).decode()] for h in (row.headers or [])],
                "timestamp_ms": int(row.timestamp.timestamp() * 1000),
            }
            for row in rows
        ]
    }


def stream(job: dict[str, Any]) -> dict[str, Any]:
    spark = session()
    out = Path(job["out"])

    def write(frame: Any, batch_id: int) -> None:
        frame.selectExpr("offset", "CAST(value AS STRING) AS value").write.mode("append").parquet(
            str(out)
        )

    if job["guard"]:
        guard = IncarnationGuard(
            job["options"], [job["topic"]], Path(job["checkpoint"]) / "topic-ids.json"
        )
        if job.get("check_first", True):
            guard.check()  # the ids the query starts on (raises if they changed since)
        write = guard.wrap(write)
    query = (
        spark.readStream.format("kafka")
        .options(**reader_options(job))
        .load()
        .writeStream.foreachBatch(write)
        .option("checkpointLocation", job["checkpoint"])
        .trigger(processingTime="300 milliseconds")
        .start()
    )
    deadline = time.monotonic() + float(job["timeout_s"])
    stop = Path(job["stop"])
    from pyspark.errors import StreamingQueryException  # noqa: PLC0415

    while query.isActive and not stop.exists() and time.monotonic() < deadline:
        try:
            query.awaitTermination(0.2)
        except StreamingQueryException:
            break  # failed: its exception is read below
    exception = query.exception()
    query.stop()
    return {"exception": None if exception is None else str(exception)}


def main() -> None:
    job = json.loads(sys.argv[1])
    try:
        result = batch(job) if job["mode"] == "batch" else stream(job)
    except TopicIncarnationChangedError as exc:  # the guard's check before the start
        result = {"exception": f"TopicIncarnationChangedError: {exc}"}
    print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
