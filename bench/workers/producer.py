"""A producer process: single enqueues, each in its own transaction, for a duration.

``--rate 0`` means as fast as possible; otherwise it paces itself to ``--rate`` jobs/s and
reports ``<key> <commit time>`` for each job (the latency workloads pair these with the
workers' start reports). ``--contender plain-insert`` inserts one row into a plain table
instead: the baseline a single enqueue is compared with.
"""

from __future__ import annotations

import argparse
import sys
import time
import uuid

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


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--dsn", required=True)
    p.add_argument("--contender", required=True)
    p.add_argument("--duration", type=float, default=5.0)
    p.add_argument("--rate", type=float, default=0.0)
    p.add_argument("--start-at", type=float, default=0.0, help="wall-clock time to begin (aligns producers)")
    args = p.parse_args()
    conn = psycopg.connect(args.dsn, autocommit=True)
    if args.contender == "plain-insert":

        def enqueue(key: str, t: float) -> None:
            conn.execute(
                "INSERT INTO bench_raw.plain (task, args) VALUES ('bench.noop', %s::jsonb)", [f'{{"k":"{key}"}}']
            )

    else:
        contender = _contenders.get([args.contender])[0]

        def enqueue(key: str, t: float) -> None:
            contender.enqueue_one(conn, key, t)

    prefix = uuid.uuid4().hex[:8]
    if args.start_at:
        time.sleep(max(args.start_at - time.time(), 0))
    start = time.perf_counter()
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
    out.write(f"DONE {count} {elapsed:.6f}\n")
    out.flush()
    conn.close()


if __name__ == "__main__":
    main()
