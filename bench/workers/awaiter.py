"""A process that waits for the result of every job waiting in ``pgqueue.jobs_live``
(``app.handle(id).result_async()``, all at once). It prints ``READY`` once every job is
marked awaited, and ``GOT <n> errors=<e>`` when every wait has returned."""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys
from typing import Any

import psycopg

import pgqueue


def count(dsn: str, query: str) -> int:
    with psycopg.connect(dsn, autocommit=True, application_name="pgqueue-bench") as c:
        row = c.execute(query).fetchone()  # type: ignore[arg-type]
    return int(row[0]) if row else 0


async def run(dsn: str, expected: int) -> None:
    app = pgqueue.App(dsn=dsn)
    with psycopg.connect(dsn, autocommit=True, application_name="pgqueue-bench") as c:
        ids = [r[0] for r in c.execute("SELECT id FROM pgqueue.jobs_live")]
    if len(ids) != expected:
        sys.exit(f"awaiter: expected {expected} jobs, found {len(ids)}")
    waits: list[asyncio.Future[Any]] = [asyncio.ensure_future(app.handle(i).result_async(timeout=600)) for i in ids]
    while count(dsn, "SELECT count(*) FROM pgqueue.jobs_live WHERE awaited") < expected:  # noqa: ASYNC110 - the database is what changes
        await asyncio.sleep(0.05)
    sys.stdout.write("READY\n")
    sys.stdout.flush()
    results = await asyncio.gather(*waits, return_exceptions=True)
    errors = sum(isinstance(r, BaseException) or r != {"ok": True, "k": None} for r in results)
    sys.stdout.write(f"GOT {len(results)} errors={errors}\n")
    sys.stdout.flush()


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--dsn", required=True)
    p.add_argument("--count", type=int, required=True)
    args = p.parse_args()
    logging.basicConfig(level=logging.ERROR)
    asyncio.run(run(args.dsn, args.count))


if __name__ == "__main__":
    main()
