"""Transactional handlers (I5): the handler's writes and the job's completion commit together."""

from __future__ import annotations

import asyncio
import threading
import time
from pathlib import Path
from typing import Any

import psycopg
import pytest

import pgqueue
from tests.apps.support import (
    assert_lease_expired_errors,
    create_test_tables,
    enqueue_sql,
    force_rescue,
    job_row,
    state_of,
    worker_process,
)
from tests.conftest import async_wait_until, running_worker, wait_until

FAST_LEASE = ("--lease", "1", "--heartbeat-interval", "0.3", "--poll-interval", "0.2")


@pytest.fixture
def tables(conn: psycopg.Connection[Any]) -> psycopg.Connection[Any]:
    create_test_tables(conn)
    return conn


def effects(conn: psycopg.Connection[Any], key: str) -> list[int]:
    """Attempts that left an effect row for ``key``."""
    return [r[0] for r in conn.execute("SELECT attempt FROM effects WHERE job_key = %s ORDER BY attempt", [key])]


async def test_sync_transactional_write_commits_with_completion(
    app: pgqueue.App, tables: psycopg.Connection[Any]
) -> None:
    seen_conn: list[object] = []

    @app.task(name="tx_sync", transactional=True)
    def tx_sync(ctx: pgqueue.JobContext, key: str) -> None:
        conn: psycopg.Connection[Any] = ctx.conn
        seen_conn.append(conn)
        assert conn.info.transaction_status == psycopg.pq.TransactionStatus.INTRANS
        conn.execute("INSERT INTO effects (job_key, attempt) VALUES (%s, %s)", [key, ctx.job.attempt])

    job_id = tx_sync.enqueue(tables, key="s1")
    async with running_worker(app) as worker:
        await async_wait_until(lambda: worker.stats.completed == 1)
    assert isinstance(seen_conn[0], psycopg.Connection)
    assert effects(tables, "s1") == [1]
    row = job_row(tables, job_id)
    assert (row["state"], row["attempt"], row["errors"]) == ("completed", 1, [])


async def test_sync_transactional_failure_rolls_back_then_retry_writes_once(
    app: pgqueue.App, tables: psycopg.Connection[Any]
) -> None:
    @app.task(name="tx_flaky", transactional=True, retry=pgqueue.Backoff(base=0.05, jitter=False))
    def tx_flaky(ctx: pgqueue.JobContext, key: str) -> None:
        ctx.conn.execute("INSERT INTO effects (job_key, attempt) VALUES (%s, %s)", [key, ctx.job.attempt])
        if ctx.job.attempt == 1:
            raise RuntimeError("fails after writing")

    job_id = tx_flaky.enqueue(tables, key="f1")
    async with running_worker(app) as worker:
        await async_wait_until(lambda: state_of(tables, job_id) == "completed", timeout=10)
    assert effects(tables, "f1") == [2]
    row = job_row(tables, job_id)
    assert row["attempt"] == 2
    assert [(e["attempt"], e["type"]) for e in row["errors"]] == [(1, "builtins.RuntimeError")]
    assert (worker.stats.retried, worker.stats.completed) == (1, 1)


async def test_sync_transactional_discard_rolls_back(app: pgqueue.App, tables: psycopg.Connection[Any]) -> None:
    @app.task(name="tx_never", transactional=True, max_attempts=1)
    def tx_never(ctx: pgqueue.JobContext, key: str) -> None:
        ctx.conn.execute("INSERT INTO effects (job_key, attempt) VALUES (%s, %s)", [key, ctx.job.attempt])
        raise pgqueue.Cancel("changed my mind")

    job_id = tx_never.enqueue(tables, key="n1")
    async with running_worker(app):
        await async_wait_until(lambda: state_of(tables, job_id) == "cancelled")
    assert effects(tables, "n1") == []


async def test_async_transactional_handler(app: pgqueue.App, tables: psycopg.Connection[Any]) -> None:
    seen_conn: list[object] = []

    @app.task(name="tx_async", transactional=True, retry=pgqueue.Backoff(base=0.05, jitter=False))
    async def tx_async(ctx: pgqueue.JobContext, key: str) -> None:
        conn: psycopg.AsyncConnection[Any] = ctx.conn
        seen_conn.append(conn)
        await conn.execute("INSERT INTO effects (job_key, attempt) VALUES (%s, %s)", [key, ctx.job.attempt])
        if key == "a2" and ctx.job.attempt == 1:
            raise RuntimeError("fails after writing")

    ok_id = tx_async.enqueue(tables, key="a1")
    flaky_id = tx_async.enqueue(tables, key="a2")
    async with running_worker(app) as worker:
        await async_wait_until(lambda: worker.stats.completed == 2, timeout=10)
    assert all(isinstance(c, psycopg.AsyncConnection) for c in seen_conn)
    assert effects(tables, "a1") == [1]
    assert effects(tables, "a2") == [2]
    assert (job_row(tables, ok_id)["state"], job_row(tables, flaky_id)["state"]) == ("completed", "completed")
    assert job_row(tables, flaky_id)["attempt"] == 2


async def test_many_transactional_jobs_each_write_exactly_once(
    app: pgqueue.App, tables: psycopg.Connection[Any]
) -> None:
    @app.task(name="tx_many", transactional=True)
    async def tx_many(ctx: pgqueue.JobContext, key: str) -> None:
        await ctx.conn.execute("INSERT INTO effects (job_key, attempt) VALUES (%s, %s)", [key, ctx.job.attempt])

    app.enqueue_many(tables, [tx_many.job(key=f"m{i}") for i in range(50)])
    async with running_worker(app, concurrency=8) as worker:
        await async_wait_until(lambda: worker.stats.completed == 50, timeout=15)
    row = tables.execute("SELECT count(*), count(DISTINCT job_key) FROM effects").fetchone()
    assert row == (50, 50)


async def test_sync_transactional_lease_lost_rolls_back(
    app: pgqueue.App, tables: psycopg.Connection[Any], dsn: str
) -> None:
    wrote = threading.Event()
    gate = threading.Event()

    @app.task(name="tx_fenced", transactional=True)
    def tx_fenced(ctx: pgqueue.JobContext, key: str) -> None:
        ctx.conn.execute("INSERT INTO effects (job_key, attempt) VALUES (%s, %s)", [key, ctx.job.attempt])
        wrote.set()
        gate.wait(20)

    job_id = tx_fenced.enqueue(tables, key="l1")
    async with running_worker(app, lease=60, heartbeat_interval=30) as worker:
        try:
            await asyncio.to_thread(wrote.wait, 10)
            assert wrote.is_set()
            await asyncio.to_thread(force_rescue, dsn, job_id, hold=True)
            rescued = job_row(tables, job_id)
        finally:
            gate.set()
        await async_wait_until(lambda: worker.stats.refused == 1)
        assert worker.stats.completed == 0
    assert effects(tables, "l1") == []
    after = job_row(tables, job_id)
    assert after == rescued
    assert (after["state"], after["attempt"]) == ("retryable", 1)
    assert_lease_expired_errors(after["errors"], [1])


async def test_async_transactional_lease_lost_rolls_back(
    app: pgqueue.App, tables: psycopg.Connection[Any], dsn: str
) -> None:
    wrote = asyncio.Event()
    gate = asyncio.Event()

    @app.task(name="tx_fenced_async", transactional=True)
    async def tx_fenced_async(ctx: pgqueue.JobContext, key: str) -> None:
        await ctx.conn.execute("INSERT INTO effects (job_key, attempt) VALUES (%s, %s)", [key, ctx.job.attempt])
        wrote.set()
        await gate.wait()

    job_id = tx_fenced_async.enqueue(tables, key="l2")
    async with running_worker(app, lease=60, heartbeat_interval=30) as worker:
        try:
            await asyncio.wait_for(wrote.wait(), 10)
            await asyncio.to_thread(force_rescue, dsn, job_id, hold=True)
        finally:
            gate.set()
        await async_wait_until(lambda: worker.stats.refused == 1)
        assert worker.stats.completed == 0
    assert effects(tables, "l2") == []
    row = job_row(tables, job_id)
    assert (row["state"], row["attempt"]) == ("retryable", 1)


def test_worker_crash_before_commit_leaves_no_effect(dsn: str, tables: psycopg.Connection[Any], tmp_path: Path) -> None:
    """tests/apps/basic.py tx_record(die_first=True) exits the process after its write,
    before the commit: attempt 1 leaves nothing; a second worker's attempt 2 writes once."""
    job_id = enqueue_sql(tables, "tx_record", '{"key": "crash1", "die_first": true}')
    with worker_process(dsn, "tests.apps.basic:app", *FAST_LEASE, log=tmp_path / "w1.log") as w1:
        assert w1.wait(15) == 17, w1.output()
    assert effects(tables, "crash1") == []
    row = job_row(tables, job_id)
    assert (row["state"], row["attempt"]) == ("running", 1)  # nothing was completed by attempt 1

    with worker_process(dsn, "tests.apps.basic:app", *FAST_LEASE, log=tmp_path / "w2.log") as w2:
        wait_until(lambda: state_of(tables, job_id) == "completed", timeout=15)
        time.sleep(0.3)  # let any (wrong) duplicate write land before counting; a negative check
        assert w2.alive(), w2.output()
    assert effects(tables, "crash1") == [2]
    row = job_row(tables, job_id)
    assert row["attempt"] == 2
    assert_lease_expired_errors(row["errors"], [1])


async def test_timed_out_sync_transactional_attempt_never_commits_late(
    app: pgqueue.App, tables: psycopg.Connection[Any]
) -> None:
    """Attempt 1 times out but its thread runs on and then tries to commit; by then the job
    was retried under a new lease, so that late commit must roll back."""
    finished = threading.Event()

    @app.task(name="tx_slow", transactional=True, timeout=0.2, retry=pgqueue.Backoff(base=0.01, jitter=False))
    def tx_slow(ctx: pgqueue.JobContext, key: str) -> None:
        ctx.conn.execute("INSERT INTO effects (job_key, attempt) VALUES (%s, %s)", [key, ctx.job.attempt])
        if ctx.job.attempt == 1:
            time.sleep(1.0)
            finished.set()

    job_id = tx_slow.enqueue(tables, key="t1")
    async with running_worker(app) as worker:
        await async_wait_until(lambda: state_of(tables, job_id) == "completed", timeout=10)
        assert await asyncio.to_thread(finished.wait, 60)  # the straggler's handler returned
        await async_wait_until(lambda: worker.in_flight == 0)
    assert effects(tables, "t1") == [2]
    row = job_row(tables, job_id)
    assert row["attempt"] == 2
    assert [e["type"] for e in row["errors"]] == ["builtins.TimeoutError"]


async def test_handlers_run_on_the_servers_planner_settings_not_the_workers(
    app: pgqueue.App, tables: psycopg.Connection[Any]
) -> None:
    # The worker's own claims and outcomes run on generic plans without sequential scans
    # (set for the whole session of its hot connections); a handler's transaction must
    # never inherit that.
    seen: list[tuple[str, str]] = []
    setting = "SELECT current_setting('plan_cache_mode'), current_setting('enable_seqscan')"

    @app.task(name="tx_settings", transactional=True)
    async def tx_settings(ctx: pgqueue.JobContext) -> None:
        row = await (await ctx.conn.execute(setting)).fetchone()
        seen.append(row)

    @app.task(name="tx_settings_sync", transactional=True)
    def tx_settings_sync(ctx: pgqueue.JobContext) -> None:
        seen.append(ctx.conn.execute(setting).fetchone())

    defaults = tables.execute(setting).fetchone()
    for _ in range(3):
        tx_settings.enqueue(tables)
        tx_settings_sync.enqueue(tables)
    async with running_worker(app) as worker:
        await async_wait_until(lambda: worker.stats.completed == 6, timeout=10)
        async with worker.connections.hot() as hot:
            assert await (await hot.execute(setting)).fetchone() == ("force_generic_plan", "off")
        async with worker.connections.connection() as plain:
            assert await (await plain.execute(setting)).fetchone() == defaults
    assert seen == [defaults] * 6
