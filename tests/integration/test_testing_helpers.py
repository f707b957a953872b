"""pgqueue.testing against a real database: what is enqueued, perform_job, drain with
the test clock, inline mode."""

from __future__ import annotations

import asyncio
from typing import Any

import psycopg
import pytest

import pgqueue
from pgqueue import testing
from tests.conftest import job_states


@pytest.fixture
def shop(app: pgqueue.App, conn: psycopg.Connection[Any]) -> pgqueue.App:
    """``app`` with a few tasks that write what they did to a table."""
    conn.execute("CREATE TABLE done (job_id bigint, what text, attempt int)")

    def note(ctx: pgqueue.JobContext, what: str) -> None:
        with psycopg.connect(app.dsn, autocommit=True) as c:
            c.execute("INSERT INTO done VALUES (%s, %s, %s)", [ctx.job.id, what, ctx.job.attempt])

    @app.task(name="email", queue="mail", pass_context=True)
    def email(ctx: pgqueue.JobContext, to: str, subject: str = "hi") -> str:
        note(ctx, f"email {to}")
        return f"sent to {to}"

    @app.task(name="flaky", pass_context=True, max_attempts=5)
    def flaky(ctx: pgqueue.JobContext, fails: int) -> None:
        note(ctx, "flaky")
        if ctx.job.attempt <= fails:
            raise RuntimeError(f"attempt {ctx.job.attempt} fails")

    @app.task(name="broken", max_attempts=3)
    def broken() -> None:
        raise ValueError("always broken")

    @app.task(name="ledger", transactional=True)
    def ledger(ctx: pgqueue.JobContext, amount: int) -> int:
        ctx.conn.execute("INSERT INTO done VALUES (%s, 'ledger', %s)", [ctx.job.id, amount])
        if amount < 0:
            raise ValueError("negative amount")
        return amount * 2

    @app.task(name="later", pass_context=True)
    async def later(ctx: pgqueue.JobContext, n: int) -> int:
        note(ctx, f"later {n}")
        return n

    return app


def done(conn: psycopg.Connection[Any]) -> list[tuple[Any, ...]]:
    return conn.execute("SELECT what, attempt FROM done ORDER BY job_id, attempt").fetchall()


# -- what is enqueued ----------------------------------------------------------------------


def test_assert_enqueued_sees_the_transaction_and_matches_an_argument_subset(
    shop: pgqueue.App, conn: psycopg.Connection[Any]
) -> None:
    email = shop.get_task("email")
    with conn.transaction():
        job_id = email.enqueue(conn, to="ann@example.com", subject="welcome")
        found = testing.assert_enqueued(email, conn, to="ann@example.com")
        assert (found.id, found.queue, found.state) == (job_id, "mail", "available")
        assert found.args == {"to": "ann@example.com", "subject": "welcome"}
        testing.refute_enqueued(email, conn, to="bob@example.com")
        testing.refute_enqueued(email)  # another connection: nothing committed yet
        raise psycopg.Rollback()
    testing.refute_enqueued(email, conn)
    assert testing.enqueued_jobs(shop) == []


def test_assert_enqueued_failure_lists_the_waiting_jobs(shop: pgqueue.App, conn: psycopg.Connection[Any]) -> None:
    email = shop.get_task("email")
    email.enqueue(conn, to="ann@example.com")
    with pytest.raises(AssertionError, match=r"(?s)no job of email with \{'to': 'zed'\}.*ann@example.com"):
        testing.assert_enqueued(email, to="zed")
    with pytest.raises(AssertionError, match="expected no job of email"):
        testing.refute_enqueued(email, to="ann@example.com")
    assert [j.task for j in testing.enqueued_jobs("email", app=shop, queue="mail")] == ["email"]
    assert testing.enqueued_jobs("email", app=shop, queue="default") == []


def test_a_task_name_needs_its_app(shop: pgqueue.App) -> None:
    with pytest.raises(pgqueue.ConfigError, match="task name with app="):
        testing.enqueued_jobs("email")


# -- perform_job ---------------------------------------------------------------------------


def test_perform_job_runs_the_handler_with_a_real_context(shop: pgqueue.App, conn: psycopg.Connection[Any]) -> None:
    assert testing.perform_job(shop.get_task("email"), to="ann@example.com") == "sent to ann@example.com"
    assert done(conn) == [("email ann@example.com", 1)]
    row = conn.execute("SELECT id, state::text, worker_id, result FROM pgqueue.jobs").fetchone()
    assert row is not None
    job_id, state, worker, result = row
    assert (state, worker, result) == ("completed", "pgqueue-testing", "sent to ann@example.com")
    assert shop.result(conn, job_id) == "sent to ann@example.com"


def test_perform_job_checks_arguments_like_enqueue(shop: pgqueue.App, conn: psycopg.Connection[Any]) -> None:
    with pytest.raises(pgqueue.InvalidArgumentsError, match="email"):
        testing.perform_job(shop.get_task("email"), too="ann@example.com")
    with pytest.raises(pgqueue.InvalidArgumentsError):
        testing.perform_job(shop.get_task("email"), to=object())
    assert job_states(conn) == {}


def test_perform_job_raises_the_handlers_error_and_records_the_attempt(
    shop: pgqueue.App, conn: psycopg.Connection[Any]
) -> None:
    with pytest.raises(RuntimeError, match="attempt 1 fails"):
        testing.perform_job(shop.get_task("flaky"), fails=1)
    (state, errors), *_ = conn.execute("SELECT state::text, errors FROM pgqueue.jobs").fetchall()
    assert state == "retryable"
    assert (errors[0]["type"], errors[0]["attempt"]) == ("builtins.RuntimeError", 1)


def test_perform_job_transactional_writes_commit_with_the_completion(
    shop: pgqueue.App, conn: psycopg.Connection[Any]
) -> None:
    ledger = shop.get_task("ledger")
    assert testing.perform_job(ledger, amount=21) == 42
    with pytest.raises(ValueError, match="negative"):
        testing.perform_job(ledger, amount=-1)
    assert done(conn) == [("ledger", 21)]  # the failed attempt's write rolled back
    assert job_states(conn) == {"completed": 1, "retryable": 1}


def test_perform_job_runs_async_handlers(shop: pgqueue.App, conn: psycopg.Connection[Any]) -> None:
    assert testing.perform_job(shop.get_task("later"), n=7) == 7
    assert done(conn) == [("later 7", 1)]


async def test_async_handlers_inside_a_running_loop_need_a_thread(shop: pgqueue.App) -> None:
    with pytest.raises(pgqueue.ConfigError, match=r"asyncio\.to_thread"):
        testing.perform_job(shop.get_task("later"), n=1)
    assert await asyncio.to_thread(testing.perform_job, shop.get_task("later"), n=2) == 2


# -- drain and the clock -------------------------------------------------------------------


def test_drain_follows_retries_and_scheduled_jobs_without_waiting(
    shop: pgqueue.App, conn: psycopg.Connection[Any]
) -> None:
    with conn.transaction():
        shop.get_task("email").enqueue(conn, to="a")
        shop.get_task("email").options(delay=3600).enqueue(conn, to="b")
        shop.get_task("flaky").enqueue(conn, fails=2)
        shop.get_task("broken").enqueue(conn)
    result = testing.drain(shop)
    assert result == testing.DrainResult(completed=3, retryable=4, discarded=1)
    assert result.as_dict() == {"completed": 3, "retryable": 4, "discarded": 1, "cancelled": 0, "snoozed": 0}
    # The clock jumped most of the hour to the scheduled job (less the time the test took
    # since enqueue): no sleep, and more than any retry's backoff.
    assert 600 < result.advanced <= 3600
    assert job_states(conn) == {"completed": 3, "discarded": 1}
    assert [w for w, _ in done(conn)].count("flaky") == 3


def test_drain_without_follow_runs_only_what_is_due_and_advance_moves_the_clock(
    shop: pgqueue.App, conn: psycopg.Connection[Any]
) -> None:
    email = shop.get_task("email")
    email.enqueue(conn, to="now")
    email.options(delay=60).enqueue(conn, to="in a minute")
    email.options(delay=600).enqueue(conn, to="in ten minutes")
    assert testing.drain(shop, follow=False) == testing.DrainResult(completed=1)
    assert testing.advance(shop, 61) == 1
    assert testing.drain(shop, follow=False) == testing.DrainResult(completed=1)
    assert testing.drain(shop, horizon=100) == testing.DrainResult()  # 539 s away: beyond the horizon
    assert testing.drain(shop, horizon=600) == testing.DrainResult(completed=1)
    assert [w for w, _ in done(conn)] == ["email now", "email in a minute", "email in ten minutes"]


def test_drain_only_runs_the_given_queues(shop: pgqueue.App, conn: psycopg.Connection[Any]) -> None:
    shop.get_task("email").enqueue(conn, to="a")
    shop.get_task("flaky").enqueue(conn, fails=0)
    assert testing.drain(shop, queues=["mail"]) == testing.DrainResult(completed=1)
    assert [j.task for j in testing.enqueued_jobs(shop)] == ["flaky"]
    assert testing.drain(shop, queues="default") == testing.DrainResult(completed=1)


def test_drain_stops_a_job_that_never_ends(app: pgqueue.App, conn: psycopg.Connection[Any]) -> None:
    @app.task(name="forever")
    def forever() -> None:
        raise pgqueue.Snooze(10)

    forever.enqueue(conn)
    with pytest.raises(AssertionError, match="ran 5 attempts"):
        testing.drain(app, max_attempts=5)


def test_bad_clock_values_are_refused(shop: pgqueue.App) -> None:
    with pytest.raises(pgqueue.ConfigError, match="seconds"):
        testing.advance(shop, -1)
    with pytest.raises(pgqueue.ConfigError, match="horizon"):
        testing.drain(shop, horizon=float("nan"))


# -- inline mode ---------------------------------------------------------------------------


def test_inline_runs_a_job_when_its_transaction_commits(shop: pgqueue.App, conn: psycopg.Connection[Any]) -> None:
    email = shop.get_task("email")
    with testing.inline(shop) as runs:
        with conn.transaction():
            email.enqueue(conn, to="ann")
            with conn.transaction():  # a savepoint ending is not the commit
                email.enqueue(conn, to="bob")
            assert done(conn) == []
        assert done(conn) == [("email ann", 1), ("email bob", 1)]
        assert [r.value for r in runs.runs] == ["sent to ann", "sent to bob"]
        with conn.transaction():
            email.enqueue(conn, to="never")
            raise psycopg.Rollback()
        email.enqueue(conn, to="autocommit")  # no transaction: committed at once, run at once
    assert [w for w, _ in done(conn)] == ["email ann", "email bob", "email autocommit"]
    assert job_states(conn) == {"completed": 3}


def test_inline_with_commit_and_a_failing_handler(shop: pgqueue.App, dsn: str) -> None:
    with testing.inline(shop), psycopg.connect(dsn) as conn:  # not autocommit: commit() ends the transaction
        shop.get_task("flaky").enqueue(conn, fails=0)
        conn.commit()
        shop.get_task("flaky").enqueue(conn, fails=1)
        with pytest.raises(RuntimeError, match="attempt 1 fails"):
            conn.commit()
    with psycopg.connect(dsn, autocommit=True) as c:
        assert job_states(c) == {"completed": 1, "retryable": 1}
    # Outside the block enqueue is back to normal.
    with psycopg.connect(dsn, autocommit=True) as c:
        shop.get_task("flaky").enqueue(c, fails=0)
        assert job_states(c) == {"completed": 1, "retryable": 1, "available": 1}


async def test_inline_async_enqueue(shop: pgqueue.App, dsn: str, conn: psycopg.Connection[Any]) -> None:
    with testing.inline(shop):
        async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as aconn:
            async with aconn.transaction():
                await shop.get_task("email").enqueue_async(aconn, to="async")
                assert done(conn) == []
            assert done(conn) == [("email async", 1)]
