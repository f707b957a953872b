"""Where a drained job's WAL goes, record type by record type: pgqueue against the raw loop.

``python -m bench.wal_mix [--dsn DSN] [--jobs 5000] [--concurrency 16]`` drains the same
number of no-op jobs twice in one database, each window starting right after a CHECKPOINT
(so both pay the same full-page-image conditions):

* **raw**: the raw-SQL ceiling's own statements (``bench/workers/raw_worker.py``), claiming
  and deleting 100 jobs per round trip on one connection;
* **pgqueue**: a worker of this checkout at the given concurrency, in this process.

It then reads each window's WAL back with ``pg_walinspect`` (superuser, PostgreSQL 15+),
keeps the records of this database (and the commits of transactions that wrote to it), and
prints, per resource manager and record type, the records and bytes per job of each side,
full-page images apart. Jobs are enqueued before the window opens: only the drain counts.
The pgqueue schema is ``walmix`` and the raw table ``bench_raw.jobs``; both are dropped
first (``--keep`` leaves them for inspection afterwards).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from dataclasses import asdict, dataclass
from typing import Any

import psycopg

import pgqueue
from bench._contenders import RAW_DDL
from bench._cost import enable_walinspect
from bench._db import connect, resolve_dsn
from bench.workers.raw_worker import CLAIM, COMPLETE

SCHEMA = "walmix"
RAW_BATCH = 100

# Records of this database, by type: a block reference into it, or any record of a
# transaction that wrote such a block (its COMMIT carries no block reference).
BY_TYPE_SQL = """
WITH r AS (
    SELECT resource_manager || '/' || record_type AS kind,
           (end_lsn - start_lsn)::bigint AS bytes,
           fpi_length::bigint AS fpi,
           xid::text::bigint AS x,
           coalesce(block_ref, '') ~ %(pattern)s AS touches
    FROM pg_get_wal_records_info(%(start)s::pg_lsn, %(end)s::pg_lsn)
), tx AS (SELECT DISTINCT x FROM r WHERE touches AND x <> 0)
SELECT kind, count(*), sum(bytes)::bigint, sum(fpi)::bigint
FROM r WHERE touches OR x IN (SELECT x FROM tx)
GROUP BY kind
"""


@dataclass
class Kind:
    records: int
    bytes: int  # with alignment padding and full-page images
    fpi: int


def _lsn(conn: psycopg.Connection[Any]) -> str:
    row = conn.execute("SELECT pg_current_wal_insert_lsn()::text").fetchone()
    assert row is not None
    return str(row[0])


def _window(conn: psycopg.Connection[Any], start: str, end: str) -> dict[str, Kind]:
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:  # pg_walinspect reads flushed WAL only
        row = conn.execute("SELECT pg_current_wal_flush_lsn() >= %s::pg_lsn", [end]).fetchone()
        if row and row[0]:
            break
        time.sleep(0.02)
    oid = conn.execute("SELECT oid FROM pg_database WHERE datname = current_database()").fetchone()
    assert oid is not None
    rows = conn.execute(BY_TYPE_SQL, {"start": start, "end": end, "pattern": rf"rel \d+/{oid[0]}/"}).fetchall()
    return {str(k): Kind(int(n), int(b), int(f)) for k, n, b, f in rows}


def drain_raw(conn: psycopg.Connection[Any], jobs: int) -> dict[str, Kind]:
    conn.execute("DROP SCHEMA IF EXISTS bench_raw CASCADE")
    conn.execute(RAW_DDL)
    with conn.transaction(), conn.cursor() as cur, cur.copy("COPY bench_raw.jobs (args) FROM STDIN") as copy:
        for _ in range(jobs):
            copy.write_row(("{}",))
    conn.execute("VACUUM ANALYZE bench_raw.jobs")
    conn.execute("CHECKPOINT")
    start = _lsn(conn)
    done = 0
    while True:
        ids = [r[0] for r in conn.execute(CLAIM, {"queue": "default", "limit": RAW_BATCH}).fetchall()]
        if not ids:
            break
        conn.execute(COMPLETE, {"ids": ids})
        done += len(ids)
    if done != jobs:
        raise SystemExit(f"raw loop drained {done} jobs of {jobs}")
    return _window(conn, start, _lsn(conn))


def drain_pgqueue(conn: psycopg.Connection[Any], dsn: str, jobs: int, concurrency: int) -> dict[str, Kind]:
    conn.execute(f'DROP SCHEMA IF EXISTS "{SCHEMA}" CASCADE')
    app = pgqueue.App(dsn=dsn, schema=SCHEMA)

    @app.task(name="bench.noop")
    async def noop() -> None:
        return None

    app.migrate()
    with psycopg.connect(dsn) as producer:
        app.enqueue_many(producer, (noop.job() for _ in range(jobs)))
        producer.commit()
    conn.execute(f'VACUUM ANALYZE "{SCHEMA}".jobs_live')
    conn.execute("CHECKPOINT")
    start = _lsn(conn)
    count = f'SELECT count(*) FROM "{SCHEMA}".jobs_completed'

    async def run() -> None:
        worker = app.worker(concurrency=concurrency)
        task = asyncio.create_task(worker.run())
        deadline = time.monotonic() + 60 + jobs / 50
        try:
            while time.monotonic() < deadline and not task.done():
                row = await asyncio.to_thread(lambda: conn.execute(count).fetchone())
                if row and row[0] == jobs:
                    return
                await asyncio.sleep(0.05)
            raise SystemExit(f"the pgqueue worker did not drain {jobs} jobs in time")
        finally:
            worker.stop()
            await task

    asyncio.run(run())
    return _window(conn, start, _lsn(conn))


def report(sides: dict[str, dict[str, Kind]], jobs: int) -> str:
    kinds = sorted(
        {k for side in sides.values() for k in side},
        key=lambda k: -max(s.get(k, Kind(0, 0, 0)).bytes for s in sides.values()),
    )
    names = list(sides)
    head = f"{'record (B/job: records, bytes, of which FPI)':<34}" + "".join(f"{n:>26}" for n in names)
    lines = [head]
    for k in kinds:
        cells = []
        for n in names:
            c = sides[n].get(k, Kind(0, 0, 0))
            cells.append(f"{c.records / jobs:8.2f} {c.bytes / jobs:8.0f} {c.fpi / jobs:8.0f}")
        lines.append(f"{k:<34}" + "".join(f"{c:>26}" for c in cells))
    totals = {n: sum(c.bytes for c in s.values()) / jobs for n, s in sides.items()}
    no_fpi = {n: sum(c.bytes - c.fpi for c in s.values()) / jobs for n, s in sides.items()}
    lines.append(f"{'total':<34}" + "".join(f"{totals[n]:>26.0f}" for n in names))
    lines.append(f"{'total without full-page images':<34}" + "".join(f"{no_fpi[n]:>26.0f}" for n in names))
    if len(names) == 2 and totals[names[0]]:
        a, b = names
        lines.append(f"{b} / {a}: {totals[b] / totals[a]:.2f} (without full-page images {no_fpi[b] / no_fpi[a]:.2f})")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.wal_mix", description=__doc__.split("\n\n")[0])
    p.add_argument("--dsn", help="default: as python -m bench (a pgqueue_bench database)")
    p.add_argument("--jobs", type=int, default=5000)
    p.add_argument("--concurrency", type=int, default=16)
    p.add_argument("--json", help="also write the figures to this file")
    p.add_argument("--keep", action="store_true", help="leave the walmix schema and bench_raw.jobs behind")
    args = p.parse_args(argv)
    if args.jobs < 1 or args.concurrency < 1:
        p.error("--jobs and --concurrency must be at least 1")
    dsn = resolve_dsn(args.dsn)
    with connect(dsn) as conn:
        if not enable_walinspect(conn):
            print("pg_walinspect is not available here (it needs PostgreSQL 15+ and a superuser)", file=sys.stderr)
            return 2
        sides = {"raw": drain_raw(conn, args.jobs), "pgqueue": drain_pgqueue(conn, dsn, args.jobs, args.concurrency)}
        if not args.keep:
            conn.execute(f'DROP SCHEMA IF EXISTS "{SCHEMA}" CASCADE')
            conn.execute("DROP SCHEMA IF EXISTS bench_raw CASCADE")
    print(f"WAL per drained job, {args.jobs} jobs, pgqueue at concurrency {args.concurrency}, raw batch {RAW_BATCH}")
    print(report(sides, args.jobs))
    if args.json:
        data = {
            "jobs": args.jobs,
            "concurrency": args.concurrency,
            "raw_batch": RAW_BATCH,
            "sides": {n: {k: asdict(c) for k, c in s.items()} for n, s in sides.items()},
        }
        with open(args.json, "w") as f:
            json.dump(data, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
