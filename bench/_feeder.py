"""A steady-state producer process: ``python -m bench._feeder --contender NAME ...``.

Each transaction enqueues ``--batch`` jobs through the contender's single enqueue (in the
caller's transaction, as an application would), flat out or paced to ``--rate`` jobs/s.
After each commit it prints ``<key> <commit wall time>`` for the transaction's last job:
the commit times give the enqueued count over time, and the keys sample pickup latency
(workers started with ``--report`` print when each job's handler starts). It ends with
``DONE <jobs> <elapsed>``, like ``bench.workers.producer``.

``--bulk`` writes all but the last job of each transaction through the contender's bulk
path (``preload``: COPY, ``enqueue_many``): single enqueues from a few Python processes
cannot reach the rates the steady target asks for. ``--max-depth`` makes a saturating
producer hold back while the queue is that deep.
"""

from __future__ import annotations

import argparse
import sys
import time
import uuid
from typing import Any

import psycopg

from bench import _contenders

DEPTH_CHECK = 0.05  # seconds between looks at the queue depth, with --max-depth


def remaining(conn: psycopg.Connection[Any], contender: _contenders.Contender) -> int:
    row = conn.execute(contender.remaining_sql).fetchone()
    return int(row[0]) if row else 0


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--dsn", required=True)
    p.add_argument("--contender", required=True)
    p.add_argument("--duration", type=float, default=5.0)
    p.add_argument("--rate", type=float, default=0.0, help="jobs/s; 0: as fast as possible")
    p.add_argument("--batch", type=int, default=100, help="jobs per transaction")
    p.add_argument(
        "--bulk", action="store_true", help="enqueue all but the last job of a transaction through the bulk path (COPY)"
    )
    p.add_argument(
        "--max-depth", type=int, default=0, help="hold back while the queue has this many unfinished jobs (0: never)"
    )
    p.add_argument("--start-at", type=float, default=0.0, help="wall-clock time to begin (aligns producers)")
    args = p.parse_args()
    contender = _contenders.get([args.contender])[0]
    conn = psycopg.connect(args.dsn, autocommit=True)
    prefix = uuid.uuid4().hex[:8]
    if args.start_at:
        time.sleep(max(args.start_at - time.time(), 0))
    out = sys.stdout
    start = time.perf_counter()
    end = start + args.duration
    count = 0
    checked = 0.0
    while True:
        now = time.perf_counter()
        if now >= end:
            break
        if args.rate > 0:
            due = start + count / args.rate
            if due > now:
                time.sleep(due - now)
        if args.max_depth and now - checked >= DEPTH_CHECK:
            # Keep slack rather than an ever-growing backlog (River's continuous mode).
            while remaining(conn, contender) >= args.max_depth and time.perf_counter() < end:
                time.sleep(DEPTH_CHECK / 5)
            checked = time.perf_counter()
        with conn.transaction():
            sent_at = time.time()
            if args.bulk:
                if args.batch > 1:
                    contender.preload(conn, args.batch - 1)
                key = f"{prefix}-{count + args.batch - 1}"
                contender.enqueue_one(conn, key, sent_at)
            else:
                for i in range(args.batch):
                    key = f"{prefix}-{count + i}"
                    contender.enqueue_one(conn, key, sent_at)
        out.write(f"{key} {time.time():.6f}\n")
        count += args.batch
    elapsed = time.perf_counter() - start
    out.write(f"DONE {count} {elapsed:.6f}\n")
    out.flush()
    conn.close()


if __name__ == "__main__":
    main()
