"""Maintenance services, one round at a time: ``run_once()`` against a real database."""

from __future__ import annotations

from typing import Any

import psycopg
import psycopg_pool

import pgqueue
from pgqueue._db.jobs import JobsDB
from pgqueue.config import WorkerConfig
from pgqueue.maintenance import PartitionService, TickService

Conn = psycopg.Connection[Any]


def _state(conn: Conn, job_id: int) -> str:
    row = conn.execute("SELECT state FROM pgqueue.jobs WHERE id = %s", [job_id]).fetchone()
    assert row is not None
    return str(row[0])


async def test_a_tick_promotes_due_jobs_and_rescues_expired_leases(app: pgqueue.App, conn: Conn, dsn: str) -> None:
    @app.task(name="noop")
    def noop() -> None:
        return None

    due = noop.options(delay=3600).enqueue(conn)
    lost = noop.enqueue(conn)
    conn.execute("UPDATE pgqueue.jobs_live SET run_at = now() - interval '1 second' WHERE id = %s", [due])
    conn.execute(
        "UPDATE pgqueue.jobs_live SET state = 'running', attempt = 1, lease_token = gen_random_uuid(),"
        " lease_expires_at = now() - interval '1 second' WHERE id = %s",
        [lost],
    )
    async with psycopg_pool.AsyncConnectionPool(dsn, kwargs={"autocommit": True}, open=False) as pool:
        service = TickService(JobsDB("pgqueue"), pool.connection, WorkerConfig())
        result = await service.run_once()
        assert (result.leader, result.promoted, result.rescued, result.discarded) == (True, 1, 1, 0)
        assert _state(conn, due) == "available"
        assert _state(conn, lost) == "retryable"
        # Its retry is drawn with full jitter over 1 s: keep it from falling due before the
        # next tick on a slow machine.
        conn.execute("UPDATE pgqueue.jobs_live SET run_at = now() + interval '1 hour' WHERE id = %s", [lost])
        again = await service.run_once()
        assert (again.promoted, again.rescued) == (0, 0)


async def test_partition_upkeep_creates_the_missing_days(app: pgqueue.App, conn: Conn, dsn: str) -> None:
    service = PartitionService(dsn=lambda: dsn, schema="pgqueue", config=WorkerConfig(partition_days_ahead=3))
    assert await service.run_once() >= 0  # the days ahead that were missing
    assert await service.run_once() == 0  # and none the second time
