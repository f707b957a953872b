"""A procrastinate worker with one no-op async task, ``bench.noop``.

procrastinate's throughput knobs, set for many short async jobs:

* ``PsycopgConnector`` (psycopg 3, async), the connector procrastinate recommends, on a
  pool of our own (``App.open_async(pool)``) of ``--pool-size`` connections (default 10,
  so 100 concurrent job completions do not all queue on psycopg_pool's default 4; 4, 10
  and 20 measured the same here) and without the connector's per-checkout connection
  check (``--pool-check 1`` restores it; see ``open_pool``). LISTEN uses a connection of
  its own, outside the pool;
* ``concurrency=--concurrency`` async jobs in flight. procrastinate has no batch fetch:
  one loop claims one job per ``procrastinate_fetch_job_v2`` call (a transaction of its
  own) and each job is completed by its own ``procrastinate_finish_job_v1`` call, so the
  serial fetch loop, not concurrency or pool size, is what bounds throughput;
* ``delete_jobs="successful"``: finished jobs are deleted rather than kept as
  'succeeded' rows, like PgQueuer's (``never`` measured the same). The contender's
  ``remaining_sql`` counts every row of ``procrastinate_jobs`` and relies on this;
* ``listen_notify`` unless ``--no-listen``; ``fetch_job_polling_interval=--poll-interval``;
  ``--queues default`` (the default) means every queue (``queues=None``, one LISTEN
  channel, no queue filter), else the named queues.

Started as ``App.run_worker_async`` starts it (a ``Worker`` on the opened app), with
procrastinate's own SIGTERM/SIGINT handling for a graceful stop; default asyncio loop,
as ``procrastinate worker`` uses.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time

import procrastinate
import psycopg
import psycopg_pool
from procrastinate.worker import Worker

from bench.peers import procrastinate_app
from bench.workers._common import parse, ready, report

REPORT = False


async def noop(k: str | None = None, t: float | None = None) -> None:
    if REPORT:
        report(k)


async def open_pool(dsn: str, size: int, check: bool, application_name: str) -> psycopg_pool.AsyncConnectionPool:
    """The pool procrastinate's connector would create, optionally without its per-checkout check.

    ``PsycopgConnector`` always creates its pool with ``check=check_connection``: an extra
    round trip (an empty query) every time a connection is taken from the pool, i.e. on
    every fetch and every finish. ``App.open_async(pool)`` takes a pool of one's own
    instead, which is what a throughput-minded user does (+15% here).
    """
    pool = psycopg_pool.AsyncConnectionPool(
        dsn,
        min_size=size,
        max_size=size,
        kwargs={"application_name": application_name},
        check=psycopg_pool.AsyncConnectionPool.check_connection if check else None,
        open=False,
    )
    await pool.open(wait=True)
    return pool


async def wait_listening(dsn: str, application_name: str, timeout: float = 30.0) -> None:
    """Until the worker's LISTEN connection (its own, outside the pool) has run LISTEN."""
    deadline = time.monotonic() + timeout
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        while time.monotonic() < deadline:
            cur = await conn.execute(
                "SELECT 1 FROM pg_stat_activity WHERE application_name = %s AND query LIKE 'LISTEN %%'",
                [application_name],
            )
            if await cur.fetchone():
                return
            await asyncio.sleep(0.01)
    raise TimeoutError("procrastinate worker never started listening")


def main() -> None:
    global REPORT
    args = parse([("--pool-size", int, 10), ("--pool-check", int, 0)])
    REPORT = args.report
    logging.basicConfig(level=logging.WARNING)
    logging.getLogger("procrastinate").setLevel(logging.WARNING)
    application_name = f"bench-procrastinate-{os.getpid()}"
    app = procrastinate_app(procrastinate.PsycopgConnector(), noop)
    queues = None if args.queues == "default" else args.queues.split(",")

    async def run() -> None:
        pool = await open_pool(args.dsn, args.pool_size, bool(args.pool_check), application_name)
        try:
            async with app.open_async(pool):
                worker = Worker(
                    app,
                    queues=queues,
                    concurrency=args.concurrency,
                    listen_notify=not args.no_listen,
                    fetch_job_polling_interval=args.poll_interval,
                    delete_jobs="successful",
                    install_signal_handlers=True,
                )
                task = asyncio.create_task(worker.run())  # type: ignore[no-untyped-call]
                # procrastinate has no "started" event: it has registered once worker_id is set.
                while worker.worker_id is None and not task.done():  # noqa: ASYNC110
                    await asyncio.sleep(0.005)
                if not args.no_listen and not task.done():
                    await wait_listening(args.dsn, application_name)
                if not task.done():
                    ready()
                await task
        finally:
            await pool.close()

    asyncio.run(run())


if __name__ == "__main__":
    main()
