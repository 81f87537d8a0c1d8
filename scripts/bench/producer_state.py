#!/usr/bin/env python3
"""What idempotent producers cost a partition log, in one process (no broker, no network).

1. Appends of one-record batches (100-byte values) without a producer id, then the same number
   from ``--producers`` idempotent producers in turn (each batch checked against its
   producer's state and recorded: broker/log/producer_state.py).
2. The log is dropped without a close (as kill -9 leaves it: no producer snapshot at its end),
   every snapshot file is deleted, and the log is opened again: the time to walk every batch
   header and rebuild the producers' state, the worst case (a first open after an upgrade;
   after a crash only the active segment is walked).

Usage: .venv/bin/python scripts/bench/producer_state.py [--batches 100000] [--producers 100]
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

import structlog

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from broker.log.batch import ProducedBatch, TimestampRules, check_produced
from broker.log.config import LogConfig
from broker.log.partition_log import PartitionLog
from broker.log.producer_state import snapshot_offsets
from tests.record_batches import Record, encode_batch

NOW_MS = 1_700_000_000_000


def produced(producer_id: int = -1, sequence: int = -1) -> ProducedBatch:
    data = encode_batch(
        [Record(b"k", b"v" * 100, NOW_MS, ())],
        producer_id=producer_id,
        producer_epoch=0 if producer_id >= 0 else -1,
        base_sequence=sequence,
    )
    return check_produced(
        data,
        produce_version=11,
        max_message_bytes=1 << 20,
        timestamps=TimestampRules(),
        now_ms=NOW_MS,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--batches", type=int, default=100_000)
    parser.add_argument("--producers", type=int, default=100)
    args = parser.parse_args()
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(40))
    logger = structlog.get_logger()
    root = Path(tempfile.mkdtemp())
    directory = root / "bench-0"
    directory.mkdir()
    try:
        log = PartitionLog(
            directory, recovery_point=0, log_start_offset=0, now_ms=NOW_MS, logger=logger
        )
        config = LogConfig()
        plain = produced()
        started = time.perf_counter()
        for _ in range(args.batches):
            log.append(plain, 0, config, NOW_MS)
        plain_s = time.perf_counter() - started
        rounds = args.batches // args.producers
        batches = [[produced(p, s) for p in range(args.producers)] for s in range(rounds)]
        started = time.perf_counter()
        for round_batches in batches:
            for batch in round_batches:
                log.append(batch, 0, config, NOW_MS)
        idempotent_s = time.perf_counter() - started
        end = log.log_end_offset
        del log  # no close: no producer snapshot at the end
        for offset in snapshot_offsets(directory):
            os.unlink(directory / f"{offset:020d}.snapshot")
        size = sum(f.stat().st_size for f in directory.iterdir())
        started = time.perf_counter()
        again = PartitionLog(
            directory, recovery_point=end, log_start_offset=0, now_ms=NOW_MS, logger=logger
        )
        open_s = time.perf_counter() - started
        print(
            f"appends without a producer id: {args.batches / plain_s:,.0f} batches/s; "
            f"idempotent ({args.producers} producers): "
            f"{rounds * args.producers / idempotent_s:,.0f} batches/s"
        )
        print(
            f"open without a snapshot: {end:,} batches ({size / 1e6:.0f} MB), "
            f"{len(again.producers)} producers rebuilt in {open_s:.2f} s"
        )
        again.close()
    finally:
        shutil.rmtree(root)


if __name__ == "__main__":
    main()
