"""Attempt outcomes in-process: retries and backoff, Retry/Cancel signals, non-retryable
errors, timeouts, attempt counting, and handlers raising BaseException."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import psycopg
import pytest

import pgqueue
from tests.apps.support import is_final, job_row, state_of
from tests.conftest import async_wait_until, running_worker

# -- outcomes -------------------------------------------------------------------------

ERROR_KEYS = {"type", "message", "traceback", "worker", "attempt", "at"}


async def test_retry_with_backoff_until_discarded(app: pgqueue.App, conn: psycopg.Connection[Any]) -> None:
    attempts: list[int] = []

    @app.task(name="always_fails", max_attempts=3, pass_context=True, retry=pgqueue.Backoff(base=0.05, jitter=False))
    def always_fails(ctx: pgqueue.JobContext) -> None:
        attempts.append(ctx.job.attempt)
        raise RuntimeError(f"boom on attempt {ctx.job.attempt}")

    job_id = always_fails.enqueue(conn)
    async with running_worker(app) as worker:
        await async_wait_until(lambda: is_final(conn, job_id), timeout=10)
    row = job_row(conn, job_id)
    assert row["state"] == "discarded"
    assert row["attempt"] == 3
    assert attempts == [1, 2, 3]
    errors = row["errors"]
    assert [e["attempt"] for e in errors] == [1, 2, 3]
    for n, e in enumerate(errors, start=1):
        assert set(e) == ERROR_KEYS, e
        assert e["type"] == "builtins.RuntimeError"
        assert e["message"] == f"boom on attempt {n}"
        assert "RuntimeError" in e["traceback"]
        assert "always_fails" in e["traceback"]
        assert e["worker"] == worker.worker_id
    assert worker.stats.retried == 2
    assert worker.stats.discarded == 1


async def test_failure_then_success_keeps_errors(app: pgqueue.App, conn: psycopg.Connection[Any]) -> None:
    @app.task(name="flaky", pass_context=True, retry=pgqueue.Backoff(base=0.05, jitter=False))
    def flaky(ctx: pgqueue.JobContext) -> None:
        if ctx.job.attempt < 3:
            raise OSError("transient")

    job_id = flaky.enqueue(conn)
    async with running_worker(app):
        await async_wait_until(lambda: is_final(conn, job_id), timeout=10)
    row = job_row(conn, job_id)
    assert row["state"] == "completed"
    assert row["attempt"] == 3
    assert [(e["attempt"], e["type"]) for e in row["errors"]] == [(1, "builtins.OSError"), (2, "builtins.OSError")]


async def test_backoff_delay_is_applied_on_the_database_clock(app: pgqueue.App, conn: psycopg.Connection[Any]) -> None:
    @app.task(name="slow_retry", max_attempts=2, retry=pgqueue.Backoff(base=3, jitter=False))
    def slow_retry() -> None:
        raise RuntimeError("later please")

    job_id = slow_retry.enqueue(conn)
    async with running_worker(app):
        await async_wait_until(lambda: state_of(conn, job_id) == "retryable")
        row = conn.execute(
            "SELECT extract(epoch FROM run_at - (errors->0->>'at')::timestamptz) FROM pgqueue.jobs WHERE id = %s",
            [job_id],
        ).fetchone()
    assert row is not None
    assert float(row[0]) == pytest.approx(3.0, abs=0.01)
    # Not run again before its delay. Still waiting as retryable, unless the worker took
    # longer than the delay to stop (a loaded machine): then its maintenance made the job
    # available once due, and no second attempt started.
    after = conn.execute("SELECT state, attempt, run_at <= now() FROM pgqueue.jobs WHERE id = %s", [job_id]).fetchone()
    assert after is not None
    state, attempt, due = after
    assert attempt == 1
    assert state == "retryable" or (due and state == "available"), after


async def test_retry_signal_retries_after_delay(app: pgqueue.App, conn: psycopg.Connection[Any]) -> None:
    starts: list[float] = []

    @app.task(name="asks_retry", pass_context=True)
    def asks_retry(ctx: pgqueue.JobContext) -> None:
        starts.append(time.monotonic())
        if ctx.job.attempt == 1:
            raise pgqueue.Retry(after=0.1)

    job_id = asks_retry.enqueue(conn)
    async with running_worker(app) as worker:
        await async_wait_until(lambda: is_final(conn, job_id), timeout=10)
    row = job_row(conn, job_id)
    assert row["state"] == "completed"
    assert row["attempt"] == 2
    assert len(starts) == 2
    assert starts[1] - starts[0] >= 0.1
    assert [e["type"] for e in row["errors"]] == ["pgqueue.errors.Retry"]
    assert worker.stats.retried == 1
    assert worker.stats.completed == 1


async def test_retry_signal_on_last_attempt_discards(app: pgqueue.App, conn: psycopg.Connection[Any]) -> None:
    @app.task(name="retry_forever", max_attempts=2)
    def retry_forever() -> None:
        raise pgqueue.Retry(after=0.01)

    job_id = retry_forever.enqueue(conn)
    async with running_worker(app):
        await async_wait_until(lambda: is_final(conn, job_id), timeout=10)
    row = job_row(conn, job_id)
    assert (row["state"], row["attempt"], len(row["errors"])) == ("discarded", 2, 2)


async def test_cancel_signal_cancels_with_reason(app: pgqueue.App, conn: psycopg.Connection[Any]) -> None:
    @app.task(name="gives_up", max_attempts=5)
    async def gives_up() -> None:
        raise pgqueue.Cancel("why: the order was refunded")

    job_id = gives_up.enqueue(conn)
    async with running_worker(app) as worker:
        await async_wait_until(lambda: is_final(conn, job_id))
    row = job_row(conn, job_id)
    assert row["state"] == "cancelled"
    assert row["attempt"] == 1
    assert row["finished_at"] is not None
    assert [e["message"] for e in row["errors"]] == ["why: the order was refunded"]
    assert row["errors"][0]["type"] == "pgqueue.errors.Cancel"
    assert worker.stats.cancelled == 1


async def test_non_retryable_error_discards_at_once(app: pgqueue.App, conn: psycopg.Connection[Any]) -> None:
    calls = 0

    @app.task(name="bad_input", max_attempts=5, non_retryable=(ValueError,))
    def bad_input() -> None:
        nonlocal calls
        calls += 1
        raise ValueError("not a number")

    job_id = bad_input.enqueue(conn)
    async with running_worker(app):
        await async_wait_until(lambda: is_final(conn, job_id))
    row = job_row(conn, job_id)
    assert (row["state"], row["attempt"], row["max_attempts"]) == ("discarded", 1, 5)
    assert calls == 1
    assert [e["type"] for e in row["errors"]] == ["builtins.ValueError"]


async def test_non_retryable_matches_subclasses_only(app: pgqueue.App, conn: psycopg.Connection[Any]) -> None:
    @app.task(name="other_error", max_attempts=2, non_retryable=(ValueError,), retry=pgqueue.Backoff(base=0.01))
    def other_error() -> None:
        raise KeyError("missing")

    job_id = other_error.enqueue(conn)
    async with running_worker(app):
        await async_wait_until(lambda: is_final(conn, job_id), timeout=10)
    row = job_row(conn, job_id)
    assert (row["state"], row["attempt"]) == ("discarded", 2)  # retried once, then out of attempts


async def test_async_timeout_fails_the_attempt_and_retries(app: pgqueue.App, conn: psycopg.Connection[Any]) -> None:
    cancelled = 0

    @app.task(name="too_slow_async", timeout=0.2, max_attempts=2, retry=pgqueue.Backoff(base=0.01, jitter=False))
    async def too_slow_async() -> None:
        nonlocal cancelled
        try:
            await asyncio.Event().wait()  # never returns: only the timeout ends the attempt
        except asyncio.CancelledError:
            cancelled += 1
            raise

    job_id = too_slow_async.enqueue(conn)
    async with running_worker(app):
        await async_wait_until(lambda: is_final(conn, job_id), timeout=60)
    row = job_row(conn, job_id)
    assert (row["state"], row["attempt"]) == ("discarded", 2)
    assert [e["type"] for e in row["errors"]] == ["builtins.TimeoutError", "builtins.TimeoutError"]
    assert "timeout" in row["errors"][0]["message"]
    assert cancelled == 2  # the handler was actually interrupted, twice


async def test_sync_timeout_fails_the_attempt_and_retries(app: pgqueue.App, conn: psycopg.Connection[Any]) -> None:
    @app.task(name="too_slow_sync", timeout=0.2, max_attempts=3, retry=pgqueue.Backoff(base=0.01, jitter=False))
    def too_slow_sync() -> None:
        time.sleep(0.6)

    job_id = too_slow_sync.options(max_attempts=2).enqueue(conn)
    async with running_worker(app):
        await async_wait_until(lambda: is_final(conn, job_id), timeout=10)
    row = job_row(conn, job_id)
    assert (row["state"], row["attempt"], row["max_attempts"]) == ("discarded", 2, 2)
    assert [e["type"] for e in row["errors"]] == ["builtins.TimeoutError", "builtins.TimeoutError"]


async def test_sync_timeout_then_success(app: pgqueue.App, conn: psycopg.Connection[Any]) -> None:
    @app.task(name="slow_then_fast", timeout=0.2, pass_context=True, retry=pgqueue.Backoff(base=0.01, jitter=False))
    def slow_then_fast(ctx: pgqueue.JobContext) -> None:
        if ctx.job.attempt == 1:
            time.sleep(0.5)

    job_id = slow_then_fast.enqueue(conn)
    async with running_worker(app):
        await async_wait_until(lambda: is_final(conn, job_id), timeout=10)
    row = job_row(conn, job_id)
    assert (row["state"], row["attempt"]) == ("completed", 2)
    assert [e["type"] for e in row["errors"]] == ["builtins.TimeoutError"]


async def test_attempt_is_counted_at_claim(app: pgqueue.App, conn: psycopg.Connection[Any]) -> None:
    started = asyncio.Event()
    gate = asyncio.Event()

    @app.task(name="blocked", max_attempts=4)
    async def blocked() -> None:
        started.set()
        await gate.wait()

    job_id = blocked.enqueue(conn)
    before = job_row(conn, job_id)
    assert (before["state"], before["attempt"], before["max_attempts"]) == ("available", 0, None)
    async with running_worker(app, lease=30, heartbeat_interval=10) as worker:
        await asyncio.wait_for(started.wait(), 10)
        row = conn.execute(
            "SELECT state::text, attempt, max_attempts, worker_id, lease_token IS NOT NULL,"
            " extract(epoch FROM lease_expires_at - now()) FROM pgqueue.jobs WHERE id = %s",
            [job_id],
        ).fetchone()
        gate.set()
        await async_wait_until(lambda: is_final(conn, job_id))
    assert row is not None
    state, attempt, max_attempts, worker_id, has_token, lease_left = row
    assert (state, attempt, max_attempts, worker_id, has_token) == ("running", 1, 4, worker.worker_id, True)
    assert 25 < float(lease_left) <= 30
    assert job_row(conn, job_id)["attempt"] == 1


async def test_max_attempts_from_sql_enqueue_uses_task_setting(app: pgqueue.App, conn: psycopg.Connection[Any]) -> None:
    @app.task(name="from_sql", max_attempts=7)
    def from_sql(n: int) -> None:
        return None

    row = conn.execute("SELECT pgqueue.enqueue('from_sql', '{\"n\": 1}')").fetchone()
    assert row is not None
    row2 = conn.execute("SELECT pgqueue.enqueue('from_sql', '{\"n\": 2}', max_attempts => 2)").fetchone()
    assert row2 is not None
    async with running_worker(app) as worker:
        await async_wait_until(lambda: worker.stats.completed == 2)
    assert job_row(conn, int(row[0]))["max_attempts"] == 7
    assert job_row(conn, int(row2[0]))["max_attempts"] == 2


async def test_bad_arguments_fail_the_attempt(app: pgqueue.App, conn: psycopg.Connection[Any]) -> None:
    @app.task(name="takes_x", max_attempts=1)
    def takes_x(x: int) -> None:
        return None

    row = conn.execute("SELECT pgqueue.enqueue('takes_x', '{\"y\": 1}')").fetchone()
    assert row is not None
    job_id = int(row[0])
    async with running_worker(app):
        await async_wait_until(lambda: is_final(conn, job_id))
    job = job_row(conn, job_id)
    assert job["state"] == "discarded"
    assert job["errors"][0]["type"] == "pgqueue.errors.InvalidArgumentsError"  # see test_task_args.py


# -- handlers that raise BaseException ------------------------------------------------------
# A handler may raise something that is not an Exception: CancelledError from an inner task
# it awaited, or a library's BaseException subclass. The attempt must still end (fail and be
# retried), its slot must be freed, and its lease must not be extended forever.


class _Abort(BaseException):
    """Not an Exception: like gevent's GreenletExit or a framework's control-flow signal."""


async def test_handler_raising_cancelled_error_itself_fails_the_attempt(
    app: pgqueue.App, conn: psycopg.Connection[Any]
) -> None:
    @app.task(name="inner_cancel", pass_context=True, retry=pgqueue.Backoff(base=0.01, jitter=False))
    async def inner_cancel(ctx: pgqueue.JobContext) -> None:
        if ctx.job.attempt == 1:
            inner = asyncio.get_running_loop().create_future()
            inner.cancel()
            await inner  # raises CancelledError, though nobody cancelled the job

    job_id = inner_cancel.enqueue(conn)
    async with running_worker(app, lease=1, heartbeat_interval=0.3, concurrency=1) as worker:
        await async_wait_until(lambda: is_final(conn, job_id), timeout=6)
        assert worker.in_flight == 0
    row = job_row(conn, job_id)
    assert (row["state"], row["attempt"]) == ("completed", 2)
    assert len(row["errors"]) == 1


async def test_handler_raising_base_exception_fails_the_attempt(
    app: pgqueue.App, conn: psycopg.Connection[Any]
) -> None:
    @app.task(name="base_exc", pass_context=True, retry=pgqueue.Backoff(base=0.01, jitter=False))
    def base_exc(ctx: pgqueue.JobContext) -> None:
        if ctx.job.attempt == 1:
            raise _Abort("not an Exception")

    job_id = base_exc.enqueue(conn)
    async with running_worker(app, lease=1, heartbeat_interval=0.3, concurrency=1) as worker:
        await async_wait_until(lambda: is_final(conn, job_id), timeout=6)
        assert worker.in_flight == 0
    row = job_row(conn, job_id)
    assert (row["state"], row["attempt"]) == ("completed", 2)
    assert [e["type"] for e in row["errors"]] == [f"{__name__}._Abort"]
