"""cancel_job() and retry_job(): operator actions from SQL, with a real worker."""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

import psycopg
import pytest

import pgqueue
from tests.apps.support import job_row, state_of
from tests.conftest import async_wait_until, running_worker

Conn = psycopg.Connection[Any]

# Heartbeats every 0.2 s, so a cancel request reaches the worker quickly.
FAST = {"heartbeat_interval": 0.2, "lease": 2.0}


def cancel(conn: Conn, job_id: int) -> str | None:
    row = conn.execute("SELECT pgqueue.cancel_job(%s)::text", [job_id]).fetchone()
    assert row is not None
    return None if row[0] is None else str(row[0])


def retry(conn: Conn, job_id: int) -> bool:
    row = conn.execute("SELECT pgqueue.retry_job(%s)", [job_id]).fetchone()
    assert row is not None
    return bool(row[0])


def partition_of(conn: Conn, job_id: int) -> str:
    row = conn.execute("SELECT tableoid::regclass::text FROM pgqueue.jobs WHERE id = %s", [job_id]).fetchone()
    assert row is not None
    return str(row[0])


# -- jobs that are not running: cancelled at once ----------------------------------------


def test_cancel_waiting_jobs_moves_them_to_cancelled_at_once(app: pgqueue.App, conn: Conn) -> None:
    @app.task(name="noop")
    def noop() -> None: ...

    available = noop.enqueue(conn)
    scheduled = noop.options(delay=3600).enqueue(conn)
    retryable = noop.enqueue(conn)
    conn.execute(
        "UPDATE pgqueue.jobs_live SET state = 'retryable', run_at = now() + interval '1 hour', attempt = 1,"
        ' max_attempts = 3, errors = \'[{"type": "builtins.ValueError"}]\' WHERE id = %s',
        [retryable],
    )
    for job_id in (available, scheduled, retryable):
        assert cancel(conn, job_id) == "cancelled"
        row = job_row(conn, job_id)
        assert row["state"] == "cancelled"
        assert row["finished_at"] is not None
        assert partition_of(conn, job_id).startswith("pgqueue.jobs_cancelled_")
    # The retryable job keeps its history.
    assert job_row(conn, retryable)["errors"] == [{"type": "builtins.ValueError"}]
    # Cancelling again changes nothing and says so.
    assert cancel(conn, available) == "cancelled"
    copies = conn.execute("SELECT count(*) FROM pgqueue.jobs WHERE id = %s", [available]).fetchone()
    assert copies == (1,)


def test_cancel_final_or_missing_job_reports_its_state(conn: Conn) -> None:
    row = conn.execute(
        "INSERT INTO pgqueue.jobs (task, queue, state, attempt, max_attempts, finished_at)"
        " VALUES ('done', 'default', 'completed', 1, 1, now()) RETURNING id"
    ).fetchone()
    assert row is not None
    done = int(row[0])
    assert cancel(conn, done) == "completed"
    assert state_of(conn, done) == "completed"
    assert cancel(conn, 987654321) is None


# -- running jobs: the worker learns it at its heartbeat ---------------------------------


async def test_cancel_running_async_job_cancels_its_handler(app: pgqueue.App, conn: Conn) -> None:
    started = asyncio.Event()
    saw_cancel = asyncio.Event()

    @app.task(name="forever_async")
    async def forever_async() -> None:
        started.set()
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            saw_cancel.set()
            raise

    job_id = forever_async.enqueue(conn)
    async with running_worker(app, **FAST) as worker:
        await asyncio.wait_for(started.wait(), 20)
        assert cancel(conn, job_id) == "running"
        await async_wait_until(lambda: state_of(conn, job_id) == "cancelled")
        assert saw_cancel.is_set()
        # The row changes when the outcome commits; the counter when the worker reads the reply.
        await async_wait_until(lambda: worker.stats.cancelled == 1)
        assert worker.in_flight == 0
    row = job_row(conn, job_id)
    assert row["attempt"] == 1
    assert [e["type"] for e in row["errors"]] == ["pgqueue.errors.Cancel"]
    assert row["errors"][0]["message"] == "cancelled by an operator"


async def test_cancel_running_sync_job_is_seen_through_its_context(app: pgqueue.App, conn: Conn) -> None:
    started = threading.Event()
    checks: list[bool] = []

    @app.task(name="loop_sync", pass_context=True)
    def loop_sync(ctx: pgqueue.JobContext) -> None:
        started.set()
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            checks.append(ctx.cancel_requested)
            ctx.check_cancelled()  # raises pgqueue.Cancel once asked
            time.sleep(0.01)

    job_id = loop_sync.enqueue(conn)
    async with running_worker(app, **FAST) as worker:
        await asyncio.to_thread(started.wait, 20)
        assert cancel(conn, job_id) == "running"
        await async_wait_until(lambda: state_of(conn, job_id) == "cancelled")
        await async_wait_until(lambda: worker.stats.cancelled == 1)  # counted on reading the reply
    assert checks[0] is False
    assert checks[-1] is True
    assert [e["type"] for e in job_row(conn, job_id)["errors"]] == ["pgqueue.errors.Cancel"]


async def test_failure_after_a_cancel_request_ends_cancelled_not_retried(app: pgqueue.App, conn: Conn) -> None:
    started = threading.Event()

    @app.task(name="fails_when_asked", pass_context=True, max_attempts=5)
    def fails_when_asked(ctx: pgqueue.JobContext) -> None:
        started.set()
        deadline = time.monotonic() + 30
        while not ctx.cancel_requested and time.monotonic() < deadline:
            time.sleep(0.01)
        raise RuntimeError("interrupted while cleaning up")

    job_id = fails_when_asked.enqueue(conn)
    async with running_worker(app, **FAST) as worker:
        await asyncio.to_thread(started.wait, 20)
        assert cancel(conn, job_id) == "running"
        await async_wait_until(lambda: state_of(conn, job_id) == "cancelled")
        assert worker.stats.retried == 0
    assert [e["type"] for e in job_row(conn, job_id)["errors"]] == ["builtins.RuntimeError"]


async def test_handler_that_completes_despite_the_request_stays_completed(app: pgqueue.App, conn: Conn) -> None:
    release = threading.Event()
    started = threading.Event()

    @app.task(name="ignores_cancel")
    def ignores_cancel() -> None:
        started.set()
        release.wait(30)

    job_id = ignores_cancel.enqueue(conn)
    async with running_worker(app, **FAST) as worker:
        await asyncio.to_thread(started.wait, 20)
        assert cancel(conn, job_id) == "running"
        row = conn.execute("SELECT cancel_requested_at FROM pgqueue.jobs_live WHERE id = %s", [job_id]).fetchone()
        assert row is not None
        assert row[0] is not None
        # Wait for a heartbeat to have flagged it, then let the handler finish its work.
        await async_wait_until(lambda: worker.executor.cancels.requested(job_id))
        release.set()
        await async_wait_until(lambda: state_of(conn, job_id) == "completed")


async def test_cancel_request_survives_a_worker_that_never_heartbeats_it(app: pgqueue.App, conn: Conn) -> None:
    # A running job asked to stop whose worker dies is rescued as usual; the request stays
    # on the row, so the next attempt is cancelled at its first heartbeat.
    started = asyncio.Event()

    @app.task(name="blocks", max_attempts=3)
    async def blocks() -> None:
        started.set()
        await asyncio.sleep(3600)

    job_id = blocks.enqueue(conn)
    conn.execute("UPDATE pgqueue.jobs_live SET cancel_requested_at = now() WHERE id = %s", [job_id])
    async with running_worker(app, **FAST):
        await asyncio.wait_for(started.wait(), 20)
        await async_wait_until(lambda: state_of(conn, job_id) == "cancelled")


# -- retry_job ---------------------------------------------------------------------------


async def test_retry_discarded_job_runs_again_with_one_more_attempt(app: pgqueue.App, conn: Conn) -> None:
    runs: list[int] = []

    @app.task(name="flaky", max_attempts=1, pass_context=True)
    def flaky(ctx: pgqueue.JobContext) -> None:
        runs.append(ctx.job.attempt)
        if len(runs) == 1:
            raise ValueError("first run fails")

    job_id = flaky.enqueue(conn)
    async with running_worker(app) as worker:
        await async_wait_until(lambda: state_of(conn, job_id) == "discarded")
        before = job_row(conn, job_id)
        assert before["attempt"] == 1
        assert before["max_attempts"] == 1
        assert retry(conn, job_id) is True  # NOTIFY wakes the worker
        await async_wait_until(lambda: state_of(conn, job_id) == "completed")
        # The row changes when the outcome commits; the counters when the worker reads the reply.
        await async_wait_until(lambda: worker.stats.completed == 1)
        assert worker.stats.discarded == 1
    after = job_row(conn, job_id)
    assert runs == [1, 2]
    assert after["attempt"] == 2
    assert after["max_attempts"] == 2
    assert [e["type"] for e in after["errors"]] == ["builtins.ValueError"]
    assert partition_of(conn, job_id).startswith("pgqueue.jobs_completed_")


def test_retry_only_applies_to_discarded_and_cancelled(app: pgqueue.App, conn: Conn) -> None:
    @app.task(name="noop")
    def noop() -> None: ...

    live = noop.enqueue(conn)
    assert retry(conn, live) is False
    assert retry(conn, 123456789) is False
    assert state_of(conn, live) == "available"
    assert cancel(conn, live) == "cancelled"
    assert retry(conn, live) is True
    row = job_row(conn, live)
    assert row["state"] == "available"
    assert row["finished_at"] is None
    assert row["max_attempts"] is None  # never claimed: the task's own setting still applies
    assert partition_of(conn, live) == "pgqueue.jobs_live"


def test_retry_refuses_when_a_live_job_holds_the_unique_key(app: pgqueue.App, conn: Conn) -> None:
    @app.task(name="noop")
    def noop() -> None: ...

    first = noop.options(unique_key="k1").enqueue(conn)
    assert cancel(conn, first) == "cancelled"
    second = noop.options(unique_key="k1").enqueue(conn)
    assert second != first
    with pytest.raises(psycopg.errors.UniqueViolation, match="holds its unique_key"):
        retry(conn, first)
    # Nothing lost: the cancelled job is still there, the live one too.
    assert state_of(conn, first) == "cancelled"
    assert state_of(conn, second) == "available"
