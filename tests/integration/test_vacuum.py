"""The worker vacuums the live partition itself once it carries enough dead tuples."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import psycopg
import psycopg_pool
import pytest

import pgqueue
from pgqueue._db.jobs import JobsDB
from pgqueue.config import WorkerConfig
from pgqueue.maintenance.vacuum import VacuumService
from tests.conftest import async_wait_until, running_worker


def _vacuum_count(conn: psycopg.Connection[Any]) -> int:
    conn.execute("SELECT pg_stat_clear_snapshot()")
    row = conn.execute(
        "SELECT vacuum_count FROM pg_stat_user_tables WHERE relid = 'pgqueue.jobs_live'::regclass"
    ).fetchone()
    return int(row[0]) if row else 0


async def test_live_partition_is_vacuumed_when_dead_tuples_pile_up(
    app: pgqueue.App, conn: psycopg.Connection[Any]
) -> None:
    @app.task(name="noop")
    async def noop() -> None:
        return None

    before = _vacuum_count(conn)
    with conn.transaction():
        app.enqueue_many(conn, (noop.job() for _ in range(3000)))
    async with running_worker(app, concurrency=50, vacuum_interval=0.2, vacuum_threshold=500) as worker:
        await async_wait_until(lambda: worker.stats.completed == 3000, timeout=60)
        # Each job left a dead version behind in jobs_live (claim update + completion delete).
        await async_wait_until(lambda: _vacuum_count(conn) > before, timeout=30)


async def test_vacuum_is_skipped_below_the_threshold(app: pgqueue.App, conn: psycopg.Connection[Any], dsn: str) -> None:
    @app.task(name="noop")
    async def noop() -> None:
        return None

    before = _vacuum_count(conn)
    with conn.transaction():
        app.enqueue_many(conn, (noop.job() for _ in range(50)))
    async with running_worker(app, vacuum_interval=0.1, vacuum_threshold=1_000_000) as worker:
        await async_wait_until(lambda: worker.stats.completed == 50)
    config = WorkerConfig(vacuum_interval=0.1, vacuum_threshold=1_000_000)
    async with psycopg_pool.AsyncConnectionPool(dsn, kwargs={"autocommit": True}, open=False) as pool:
        service = VacuumService(JobsDB("pgqueue"), pool.connection, schema="pgqueue", config=config)
        rounds = [await service.run_once() for _ in range(6)]  # six rounds, none vacuums
    assert [r.vacuumed for r in rounds] == [0] * 6
    assert _vacuum_count(conn) == before


async def test_vacuum_names_the_snapshot_that_pins_dead_rows_and_backs_off(
    app: pgqueue.App, conn: psycopg.Connection[Any], dsn: str, caplog: pytest.LogCaptureFixture
) -> None:
    @app.task(name="noop")
    async def noop() -> None:
        return None

    with psycopg.connect(dsn, application_name="long-report") as holder:
        holder.execute("BEGIN ISOLATION LEVEL REPEATABLE READ")
        holder.execute("SELECT 1")  # takes the snapshot: rows that die from now on stay
        holder_pid = holder.info.backend_pid
        with conn.transaction():
            app.enqueue_many(conn, (noop.job() for _ in range(2000)))
        caplog.set_level(logging.WARNING, logger="pgqueue.maintenance")
        async with running_worker(app, concurrency=50, vacuum_interval=0.1, vacuum_threshold=500) as worker:
            await async_wait_until(lambda: worker.stats.completed == 2000, timeout=60)
            record = await async_wait_until(
                lambda: next((r for r in caplog.records if "held a snapshot" in r.getMessage()), None), timeout=30
            )
            vacuums = _vacuum_count(conn)
            await asyncio.sleep(0.5)  # a negative check: five base intervals, but the next one is >= 0.16s away
            backed_off = _vacuum_count(conn) - vacuums
            # Every process learns that dead rows are pinned (claims may then use a cursor)...
            await async_wait_until(lambda: worker.cursors.pinned, timeout=15)
            holder.rollback()
            # ...and that they are not any more, once the snapshot is gone.
            await async_wait_until(lambda: not worker.cursors.pinned, timeout=15)
    message = record.getMessage()
    assert f"pid {holder_pid} ('long-report')" in message
    assert backed_off <= 2


def _analyze_count(conn: psycopg.Connection[Any]) -> int:
    conn.execute("SELECT pg_stat_clear_snapshot()")
    row = conn.execute(
        "SELECT analyze_count FROM pg_stat_user_tables WHERE relid = 'pgqueue.jobs_live'::regclass"
    ).fetchone()
    return int(row[0]) if row else 0


async def test_statistics_are_refreshed_while_a_backlog_builds(app: pgqueue.App, conn: psycopg.Connection[Any]) -> None:
    @app.task(name="noop")
    async def noop() -> None:
        return None

    before = _analyze_count(conn)
    # A backlog this worker does not serve (another service's task): nothing consumes it.
    conn.execute(
        "INSERT INTO pgqueue.jobs_live (task, queue, state) SELECT 'elsewhere.task', 'default', 'available'"
        " FROM generate_series(1, 3000)"
    )
    async with running_worker(app, vacuum_interval=0.1, vacuum_threshold=1000):
        await async_wait_until(lambda: _analyze_count(conn) > before, timeout=30)
    plan = "\n".join(
        r[0]
        for r in conn.execute(
            "EXPLAIN SELECT id FROM pgqueue.jobs_live WHERE state = 'available' AND queue = 'default'"
            " ORDER BY (-priority::integer), run_at, id LIMIT 100"
        )
    )
    assert "Index Scan using jobs_live_fetch" in plan, plan
