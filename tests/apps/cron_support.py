"""Test helpers for cron (not an app): scheduler instances on their own pools, and the
cron tables read back."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterable
from contextlib import asynccontextmanager
from datetime import datetime
from typing import Any

import psycopg
import psycopg_pool

from pgqueue import CronScheduler, Schedule


@asynccontextmanager
async def scheduler(
    dsn: str, schedules: Iterable[Schedule], worker_id: str = "test", **options: Any
) -> AsyncIterator[CronScheduler]:
    """A scheduler on its own connection pool (so instances really run side by side).

    Tick history is kept for a century unless ``history_days`` says otherwise: tests inject
    times months before the real clock, which the default week of history would prune.
    """
    options.setdefault("history_days", 36500)
    pool = psycopg_pool.AsyncConnectionPool(dsn, min_size=1, max_size=2, kwargs={"autocommit": True}, open=False)
    await pool.open(wait=True, timeout=30)
    try:
        yield CronScheduler(schedules, pool, schema="pgqueue", worker_id=worker_id, **options)
    finally:
        await pool.close()


def set_state(conn: psycopg.Connection[Any], name: str, *, last_tick: datetime | None, defined_at: datetime) -> None:
    """Rewrite a schedule's cursor, as if the cluster had been down since then."""
    cur = conn.execute(
        "UPDATE pgqueue.cron_schedules SET last_tick = %s, defined_at = %s WHERE name = %s",
        [last_tick, defined_at, name],
    )
    assert cur.rowcount == 1, f"schedule {name} is not registered"


def fired(conn: psycopg.Connection[Any], name: str) -> list[datetime]:
    rows = conn.execute("SELECT tick FROM pgqueue.cron_ticks WHERE schedule = %s ORDER BY tick", [name]).fetchall()
    return [r[0] for r in rows]


def cron_jobs(conn: psycopg.Connection[Any], name: str) -> list[dict[str, Any]]:
    """The jobs of one schedule (from every partition), by tick."""
    cur = conn.execute(
        "SELECT id, task, args, queue, priority, run_at, unique_key, state::text AS state FROM pgqueue.jobs"
        " WHERE unique_key LIKE %s ORDER BY run_at, id",
        [f"cron:{name}:%"],
    )
    assert cur.description is not None
    names = [c.name for c in cur.description]
    return [dict(zip(names, row, strict=True)) for row in cur.fetchall()]


def state(conn: psycopg.Connection[Any], name: str) -> dict[str, Any]:
    cur = conn.execute("SELECT * FROM pgqueue.cron_status WHERE name = %s", [name])
    row = cur.fetchone()
    assert row is not None, f"schedule {name} not found"
    assert cur.description is not None
    return dict(zip([c.name for c in cur.description], row, strict=True))


def db_value(conn: psycopg.Connection[Any], query: str) -> Any:
    """The single value a query returns (a test's own SQL, e.g. the database clock)."""
    row = conn.execute(query).fetchone()
    assert row is not None
    return row[0]
