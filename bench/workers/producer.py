"""A producer process: single enqueues, each in its own transaction, for a duration.

``--rate 0`` means as fast as possible; otherwise it paces itself to ``--rate`` jobs/s and
reports ``<key> <commit time>`` for each job (the latency workloads pair these with the
workers' start reports). It ends with ``DONE <jobs> <seconds> <CPU seconds>``: the CPU
time (user + system) this process spent enqueueing, start-up excluded (one enqueue rolled
back before the clock starts pays the contender's imports and set-up).
``--contender plain-insert`` inserts one row into a plain table instead: the baseline a
single enqueue is compared with.

``--batch N`` (N > 1) makes each transaction one bulk enqueue of N jobs through the
contender's bulk path (its ``preload``: pgqueue's ``enqueue_many``, PgQueuer's list
enqueue, procrastinate's ``batch_defer``); for ``plain-insert`` one
``INSERT ... SELECT FROM unnest(...)`` of N rows, the raw bulk baseline.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import uuid
from collections.abc import Callable
from typing import Any

import psycopg

from bench import _contenders

PLAIN_DDL = """
CREATE SCHEMA IF NOT EXISTS bench_raw;
CREATE TABLE IF NOT EXISTS bench_raw.plain (
    id bigserial PRIMARY KEY,
    task text NOT NULL,
    queue text NOT NULL DEFAULT 'default',
    args jsonb NOT NULL DEFAULT '{}',
    created_at timestamptz NOT NULL DEFAULT now()
);
"""


PLAIN_INSERT = "INSERT INTO bench_raw.plain (task, args) VALUES ('bench.noop', %s::jsonb)"
# The raw bulk baseline: N rows in one statement, their arguments as one array parameter.
PLAIN_BULK_INSERT = "INSERT INTO bench_raw.plain (task, args) SELECT 'bench.noop', a FROM unnest(%s::jsonb[]) AS a"


def warm_up(conn: psycopg.Connection[Any], enqueue: Callable[[], None]) -> None:
    """One enqueue in a transaction rolled back, before the clock starts: imports and
    one-off set-up (a contender's app, its queries), which a real producer pays once, stay
    out of the figures. Nothing is written (a NOTIFY is dropped with the rollback)."""
    with conn.transaction(force_rollback=True):
        enqueue()


def bulk(args: argparse.Namespace) -> None:
    """``--batch N``: one bulk enqueue of N no-argument jobs per transaction, flat out."""
    conn = psycopg.connect(args.dsn, autocommit=True)
    if args.contender == "plain-insert":
        rows = ["{}"] * args.batch

        def enqueue_many() -> None:
            with conn.transaction():
                conn.execute(PLAIN_BULK_INSERT, [rows])

    else:
        contender = _contenders.get([args.contender])[0]

        def enqueue_many() -> None:
            contender.preload(conn, args.batch)  # one transaction of its own

    warm_up(conn, enqueue_many)
    if args.start_at:
        time.sleep(max(args.start_at - time.time(), 0))
    start, cpu = time.perf_counter(), time.process_time()
    end = start + args.duration
    count = 0
    while time.perf_counter() < end:
        enqueue_many()
        count += args.batch
    elapsed = time.perf_counter() - start
    sys.stdout.write(f"DONE {count} {elapsed:.6f} {time.process_time() - cpu:.6f}\n")
    sys.stdout.flush()
    conn.close()


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--dsn", required=True)
    p.add_argument("--contender", required=True)
    p.add_argument("--duration", type=float, default=5.0)
    p.add_argument("--rate", type=float, default=0.0)
    p.add_argument("--start-at", type=float, default=0.0, help="wall-clock time to begin (aligns producers)")
    p.add_argument("--batch", type=int, default=1, help="jobs per transaction, through the bulk path when > 1")
    args = p.parse_args()
    if args.batch > 1:
        bulk(args)
        return
    conn = psycopg.connect(args.dsn, autocommit=True)
    if args.contender == "plain-insert":

        def enqueue(key: str, t: float) -> None:
            # The same arguments a contender's single enqueue carries (bench/_contenders.py).
            conn.execute(PLAIN_INSERT, [json.dumps({"k": key, "t": t})])

    else:
        contender = _contenders.get([args.contender])[0]

        def enqueue(key: str, t: float) -> None:
            contender.enqueue_one(conn, key, t)

    warm_up(conn, lambda: enqueue("warm-up", time.time()))
    prefix = uuid.uuid4().hex[:8]
    if args.start_at:
        time.sleep(max(args.start_at - time.time(), 0))
    start, cpu = time.perf_counter(), time.process_time()
    end = start + args.duration
    count = 0
    reporting = args.rate > 0
    out = sys.stdout
    while True:
        now = time.perf_counter()
        if now >= end:
            break
        if reporting:
            due = start + count / args.rate
            if due > now:
                time.sleep(due - now)
        key = f"{prefix}-{count}"
        with conn.transaction():
            enqueue(key, time.time())
        if reporting:
            out.write(f"{key} {time.time():.6f}\n")
        count += 1
    elapsed = time.perf_counter() - start
    out.write(f"DONE {count} {elapsed:.6f} {time.process_time() - cpu:.6f}\n")
    out.flush()
    conn.close()


if __name__ == "__main__":
    main()
