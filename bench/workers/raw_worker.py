"""The raw-SQL ceiling: claim with SKIP LOCKED, run a no-op, delete; nothing else.

``--batch 1`` claims and completes one job per round trip pair; ``--batch 100`` claims up
to 100 and deletes them in one statement. LISTEN wakes it when idle (``--no-listen``
polls instead). Single-threaded: no-op handlers need no concurrency.
"""

from __future__ import annotations

import json
import select

import psycopg

from bench.workers._common import on_stop, parse, ready, report

CLAIM = """
UPDATE bench_raw.jobs SET state = 1
WHERE id IN (SELECT id FROM bench_raw.jobs WHERE state = 0 AND queue = %(queue)s
             ORDER BY id LIMIT %(limit)s FOR UPDATE SKIP LOCKED)
RETURNING id, args
"""
COMPLETE = "DELETE FROM bench_raw.jobs WHERE id = ANY(%(ids)s)"


def main() -> None:
    args = parse([("--batch", int, 1)])
    stopping = False

    def stop() -> None:
        nonlocal stopping
        stopping = True

    on_stop(stop)
    conn = psycopg.connect(args.dsn, autocommit=True)
    listener = None
    if not args.no_listen:
        listener = psycopg.connect(args.dsn, autocommit=True)
        listener.execute("LISTEN bench_raw")
    ready()
    while not stopping:
        rows = conn.execute(CLAIM, {"queue": "default", "limit": args.batch}).fetchall()
        if rows:
            for _id, payload in rows:
                if args.report:
                    report((payload if isinstance(payload, dict) else json.loads(payload)).get("k"))
            conn.execute(COMPLETE, {"ids": [r[0] for r in rows]})
            continue
        if listener is not None:
            # Wait for a notification (or the poll interval), then drain what arrived.
            select.select([listener.fileno()], [], [], args.poll_interval)
            for _ in listener.notifies(timeout=0):
                pass
        else:
            select.select([], [], [], args.poll_interval)
    conn.close()


if __name__ == "__main__":
    main()
