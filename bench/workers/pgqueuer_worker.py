"""A PgQueuer worker with one no-op entrypoint, ``bench.noop``.

Configured the way PgQueuer's docs ("Performance tuning", "Benchmarks") and its own
benchmark tool set it up for short jobs, and swept here for no-op drain throughput:

* the asyncpg driver (PgQueuer's docs measure it ~1.7x its psycopg driver; here ~2x)
  when asyncpg is installed (``pip install 'pgqueuer[asyncpg]'``), else its psycopg
  driver (``--driver``);
* one QueueManager on one connection (``--managers``: more, each with its own
  connection, as PgQueuer's benchmark runs 5, were slower here on 2 CPUs);
* ``batch_size=100`` jobs per dequeue round trip, as pgqueue's worker claims 100
  (larger batches were faster: 25 < 50 < 100); PgQueuer requires
  ``max_concurrent_tasks >= 2 x batch_size``, so the cap on jobs in flight is
  ``max(--concurrency, 2 x batch)``, i.e. 200 at the default concurrency of 100
  (``--max-concurrent-tasks 0`` removes it, PgQueuer's own default; no faster here);
* a bare QueueManager, no SchedulerManager (nothing is scheduled; ``pgq run`` accepts a
  QueueManager factory too); uvloop, as ``pgq run`` uses when it is installed;
* completion is PgQueuer's buffered status log: finished jobs are deleted from the queue
  table and logged, in batches of ``batch_size`` or every ~0.1 s.

``--poll-interval`` is the dequeue timeout (the fallback poll when no NOTIFY arrives).
PgQueuer always LISTENs (no polling-only mode), so ``--no-listen`` is ignored, as is
``--queues`` (PgQueuer routes by entrypoint, not by queue).
"""

from __future__ import annotations

import asyncio
import json
import logging
import signal
import sys
from collections.abc import Awaitable, Callable
from datetime import timedelta
from typing import Any

from pgqueuer import QueueManager
from pgqueuer.errors import FailingListenerError
from pgqueuer.models import Job

from bench.peers import TASK, pgqueuer_queries, pgqueuer_settings
from bench.workers._common import parse, ready, report

REPORT = False


async def noop(job: Job) -> None:
    if REPORT and job.payload:
        report(json.loads(job.payload).get("k"))


def asyncpg_args(dsn: str) -> dict[str, Any]:
    """asyncpg takes URLs only; a libpq ``key=value`` string becomes keyword arguments."""
    if dsn.startswith(("postgres://", "postgresql://")):
        return {"dsn": dsn}
    from psycopg.conninfo import conninfo_to_dict

    names = {
        "host": "host",
        "port": "port",
        "user": "user",
        "password": "password",
        "dbname": "database",
        "sslmode": "ssl",
        "connect_timeout": "timeout",
    }
    out: dict[str, Any] = {names[k]: v for k, v in conninfo_to_dict(dsn).items() if k in names and v is not None}
    if "port" in out:
        out["port"] = int(out["port"])
    if "timeout" in out:
        out["timeout"] = float(out["timeout"])
    return out


async def connect(dsn: str, driver: str) -> tuple[Any, Callable[[], Awaitable[None]]]:
    """(PgQueuer driver, close) over one new connection."""
    if driver == "asyncpg":
        import asyncpg  # type: ignore[import-untyped]
        from pgqueuer.db import AsyncpgDriver

        conn = await asyncpg.connect(**asyncpg_args(dsn))
        return AsyncpgDriver(conn), conn.close
    import psycopg
    from pgqueuer.db import PsycopgDriver

    aconn = await psycopg.AsyncConnection.connect(dsn, autocommit=True)
    return PsycopgDriver(aconn), aconn.close


def default_driver() -> str:
    try:
        import asyncpg  # noqa: F401
    except ImportError:
        return "psycopg"
    return "asyncpg"


def main() -> None:
    global REPORT
    args = parse(
        [
            ("--managers", int, 1),
            ("--batch-size", int, 100),
            ("--max-concurrent-tasks", int, -1),
            ("--driver", str, default_driver()),
        ]
    )
    REPORT = args.report
    logging.basicConfig(level=logging.WARNING)
    logging.getLogger("pgqueuer").setLevel(logging.WARNING)
    managers = max(1, args.managers)
    cap = args.max_concurrent_tasks
    if cap < 0:  # --concurrency split between the managers, raised to PgQueuer's 2 x batch minimum
        cap = max(args.concurrency // managers, 2 * args.batch_size)

    async def run() -> None:
        closers = []
        qms: list[QueueManager] = []
        for _ in range(managers):
            driver, close = await connect(args.dsn, args.driver)
            closers.append(close)
            qm = QueueManager(pgqueuer_queries(driver), channel=pgqueuer_settings().channel)
            qm.entrypoint(TASK)(noop)
            qms.append(qm)

        def stop() -> None:
            for qm in qms:
                qm.shutdown.set()

        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop)
        tasks = [
            asyncio.create_task(
                qm.run(
                    dequeue_timeout=timedelta(seconds=args.poll_interval),
                    batch_size=args.batch_size,
                    max_concurrent_tasks=cap,
                )
            )
            for qm in qms
        ]
        # Ready once every manager's LISTEN round-trips a NOTIFY (PgQueuer's health probe).
        for qm in qms:
            while not any(t.done() for t in tasks):
                try:
                    await qm.listener_healthy(timedelta(seconds=0.5))
                    break
                except FailingListenerError:  # not listening yet
                    continue
        if not any(t.done() for t in tasks):
            ready()
        results = await asyncio.gather(*tasks, return_exceptions=True)
        for close in closers:
            await close()
        for r in results:
            if isinstance(r, BaseException):
                print(f"pgqueuer worker failed: {r!r}", file=sys.stderr)
                sys.exit(1)

    try:
        import uvloop
    except ImportError:
        asyncio.run(run())
    else:
        uvloop.run(run())


if __name__ == "__main__":
    main()
