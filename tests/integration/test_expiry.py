"""Expiry: a job not started by its deadline (database clock) never runs; the claims skip
it and the maintenance tick cancels it with a pgqueue.Expired error saying why, shown by
the views and `pgqueue jobs`. Deadlines come from task.options, the task's default, the
SQL function, enqueue_many and `pgqueue enqueue --expires-in`."""

from __future__ import annotations

import uuid
from datetime import datetime, timedelta
from typing import Any

import psycopg
import pytest
from typer.testing import CliRunner

import pgqueue
from pgqueue import ops
from pgqueue._db.jobs import cursor_params, outcome_params
from pgqueue.cli.main import app as cli_app
from pgqueue.models import JobState, Outcome
from tests.apps.support import is_final, state_of
from tests.conftest import async_wait_until, running_worker
from tests.enqueue_support import Q, claim, db_now
from tests.integration.test_tick_watermark import tick

Conn = psycopg.Connection[Any]
Fresh = pgqueue.Task[..., None]


def deadline(conn: Conn, job_id: int) -> datetime | None:
    found = conn.execute("SELECT expires_at FROM pgqueue.jobs WHERE id = %s", [job_id]).fetchone()
    assert found is not None
    value: datetime | None = found[0]
    return value


def pass_deadline(conn: Conn, *job_ids: int) -> None:
    """Move deadlines into the past (what waiting would do, without waiting)."""
    conn.execute(
        "UPDATE pgqueue.jobs_live SET expires_at = now() - interval '1 second' WHERE id = ANY(%s)", [list(job_ids)]
    )


def retry_later(conn: Conn, job_id: int, token: uuid.UUID) -> None:
    """Record a failed attempt whose retry is due in an hour (the worker's own query)."""
    written = conn.execute(
        Q["job_record_outcomes"], outcome_params([(job_id, token, Outcome(JobState.RETRYABLE, delay=3600))])
    ).fetchall()
    assert written == [(job_id,)]


def run_tick(conn: Conn) -> int:
    *_, expired = tick(conn, None)
    return int(expired)


@pytest.fixture
def task(app: pgqueue.App) -> Fresh:
    @app.task(name="t.fresh", queue="q", expires_in=timedelta(minutes=10))
    def fresh(n: int = 0) -> None: ...

    return fresh


# -- where deadlines come from ----------------------------------------------------------------


async def test_deadlines_through_every_enqueue_path(conn: Conn, app: pgqueue.App, task: Fresh) -> None:
    with conn.transaction():  # one now() for the enqueues and the checks
        now = db_now(conn)
        default = task.enqueue(conn)  # the task's expires_in, after run_at (now)
        assert deadline(conn, default) == now + timedelta(minutes=10)
        delayed = task.options(delay=3600).enqueue(conn)  # counts from run_at, not from enqueue
        assert deadline(conn, delayed) == now + timedelta(hours=1, minutes=10)
        at = now + timedelta(days=1)
        explicit = task.options(expires_at=at).enqueue(conn)
        assert deadline(conn, explicit) == at
        short = task.options(expires_in=5).enqueue(conn)
        assert deadline(conn, short) == now + timedelta(seconds=5)
    async with await psycopg.AsyncConnection.connect(conn.info.dsn, autocommit=True) as aconn:
        async with aconn.transaction():
            a_now = (await (await aconn.execute("SELECT now()")).fetchone())[0]  # type: ignore[index]
            via_async = await task.options(expires_in=7).enqueue_async(aconn)
            assert await app.enqueue_many_async(aconn, [task.options(expires_in=9).job(n=1)]) == 1
        assert deadline(conn, via_async) == a_now + timedelta(seconds=7)
        copied = conn.execute("SELECT expires_at FROM pgqueue.jobs WHERE args = '{\"n\": 1}'").fetchone()
        assert copied == (a_now + timedelta(seconds=9),)
    with conn.transaction():  # one transaction: COPY's run_at is its now()
        many_now = db_now(conn)
        assert app.enqueue_many(conn, [task.job(n=i) for i in range(3)] + [task.options(expires_at=at).job()]) == 4
    many = conn.execute("SELECT expires_at FROM pgqueue.jobs ORDER BY id DESC LIMIT 4").fetchall()
    assert sorted(r[0] for r in many) == sorted([many_now + timedelta(minutes=10)] * 3 + [at])
    with conn.transaction():
        keyed = task.options(unique_key="k", expires_in=60).enqueue(conn)  # through enqueue()
        assert deadline(conn, keyed) == db_now(conn) + timedelta(seconds=60)
        sql = conn.execute("SELECT pgqueue.enqueue('t.sql', expires_at => now() + interval '2 hours')").fetchone()
        assert sql is not None
        assert deadline(conn, sql[0]) == db_now(conn) + timedelta(hours=2)
    plain = conn.execute("SELECT pgqueue.enqueue('t.sql')").fetchone()
    assert plain is not None
    assert deadline(conn, plain[0]) is None


def test_cli_enqueue_expires_in_uses_the_duration_grammar(dsn: str, conn: Conn) -> None:
    env = {"PGQUEUE_DSN": dsn, "PGQUEUE_SCHEMA": None}
    result = CliRunner().invoke(cli_app, ["enqueue", "t.cli", "--expires-in", "1h30m", "--delay", "60"], env=env)
    assert result.exit_code == 0, result.output
    job_id = int(result.stdout.strip())
    found = conn.execute("SELECT expires_at - run_at FROM pgqueue.jobs WHERE id = %s", [job_id]).fetchone()
    assert found == (timedelta(hours=1, minutes=30),)
    bad = CliRunner().invoke(cli_app, ["enqueue", "t.cli", "--expires-in", "90"], env=env)
    assert bad.exit_code == 1
    assert "--expires-in: invalid duration '90': needs a unit" in bad.stderr
    zero = CliRunner().invoke(cli_app, ["enqueue", "t.cli", "--expires-in", "0s"], env=env)
    assert zero.exit_code == 1
    assert "expires_in must be positive" in zero.stderr
    assert conn.execute("SELECT count(*) FROM pgqueue.jobs").fetchone() == (1,)


# -- nothing starts after the deadline ----------------------------------------------------------


@pytest.mark.parametrize("queues", [["q"], ["q", "other"]], ids=["one-queue", "many-queues"])
def test_claims_skip_jobs_past_their_deadline(conn: Conn, task: Fresh, queues: list[str]) -> None:
    expired = task.enqueue(conn, n=1)
    fresh = task.enqueue(conn, n=2)
    row = conn.execute("SELECT pgqueue.enqueue('t.fresh', '{\"n\": 3}', queue => 'q')").fetchone()
    assert row is not None
    undated = int(row[0])
    assert deadline(conn, undated) is None
    pass_deadline(conn, expired)
    query = "job_claim_one_queue" if len(queues) == 1 else "job_claim_many_queues"
    claimed = conn.execute(
        Q[query],
        {
            **cursor_params(queues),
            "tasks": ["t.fresh"],
            "task_max_attempts": [3],
            "limit": 10,
            "lease": 30.0,
            "worker_id": "w",
        },
    ).fetchall()
    assert sorted(r[0] for r in claimed) == sorted([fresh, undated])
    assert state_of(conn, expired) == "available"


def test_tick_cancels_waiting_jobs_past_their_deadline_with_the_reason(dsn: str, conn: Conn, task: Fresh) -> None:
    available = task.enqueue(conn, n=1)
    scheduled = task.options(run_at=db_now(conn) + timedelta(hours=1), expires_in=60).enqueue(conn, n=2)
    running = task.enqueue(conn, n=3)
    keep = task.enqueue(conn, n=4)
    [claimed] = claim(conn, "q", {"t.fresh": 3}, limit=1)
    assert claimed[0] == available
    retry_later(conn, available, claimed[7])  # failed: its retry waits an hour
    [claimed_running] = claim(conn, "q", {"t.fresh": 3}, limit=1)
    assert claimed_running[0] == running
    pass_deadline(conn, available, scheduled, running)
    deadlines = {j: deadline(conn, j) for j in (available, scheduled)}

    assert run_tick(conn) == 2
    assert run_tick(conn) == 0
    assert (state_of(conn, available), state_of(conn, scheduled)) == ("cancelled", "cancelled")
    assert state_of(conn, running) == "running"  # never touched: no attempt *starts* late
    assert state_of(conn, keep) == "available"  # its deadline is ahead
    for job_id in (available, scheduled):
        detail = ops.get_job(conn, "pgqueue", job_id)
        assert detail.state is JobState.CANCELLED
        assert detail.expires_at == deadlines[job_id]
        last = detail.errors[-1]
        assert last.type == "pgqueue.Expired"
        stamp = deadlines[job_id].astimezone().isoformat()  # type: ignore[union-attr]
        assert last.message.startswith("expired: not started by its deadline ")
        assert datetime.fromisoformat(last.message.rsplit(" ", 1)[1]) == deadlines[job_id], stamp
        assert detail.last_error is not None
        assert detail.last_error.startswith("pgqueue.Expired: expired:")
    assert ops.get_job(conn, "pgqueue", available).attempt == 1  # it had run once before

    # The running job's retry, asked for after its deadline, expires at the next tick.
    retry_later(conn, running, claimed_running[7])
    assert run_tick(conn) == 1
    assert state_of(conn, running) == "cancelled"

    # Views: queue_stats counts them as cancelled and expired, failures names the reason.
    stats = conn.execute("SELECT cancelled_1m, cancelled_15m, expired_15m FROM pgqueue.queue_stats WHERE queue = 'q'")
    assert stats.fetchone() == (3, 3, 3)
    failure = conn.execute("SELECT count, last_message FROM pgqueue.failures WHERE error_type = 'pgqueue.Expired'")
    found = failure.fetchone()
    assert found is not None
    assert found[0] == 3
    assert found[1].startswith("expired: not started by its deadline")
    # `pgqueue jobs list` shows the reason; `show` the deadline.
    env = {"PGQUEUE_DSN": dsn, "PGQUEUE_SCHEMA": None, "COLUMNS": "250"}
    listed = CliRunner().invoke(cli_app, ["jobs", "list", "--state", "cancelled"], env=env)
    assert listed.exit_code == 0, listed.output
    assert listed.stdout.count("pgqueue.Expired: expired: not started by its deadline") == 3
    shown = CliRunner().invoke(cli_app, ["jobs", "show", str(scheduled)], env=env)
    assert "expires at" in shown.stdout
    assert "pgqueue.Expired" in shown.stdout


def test_a_deadline_already_past_at_enqueue_cancels_the_job_unstarted(conn: Conn, task: Fresh) -> None:
    past = task.options(expires_at=db_now(conn) - timedelta(minutes=1)).enqueue(conn)
    assert claim(conn, "q", {"t.fresh": 3}) == []
    assert run_tick(conn) == 1
    assert state_of(conn, past) == "cancelled"


def test_retrying_an_expired_job_drops_the_deadline_that_passed(conn: Conn, task: Fresh) -> None:
    job_id = task.enqueue(conn)
    pass_deadline(conn, job_id)
    assert run_tick(conn) == 1
    assert ops.retry_job(conn, "pgqueue", job_id)
    assert (state_of(conn, job_id), deadline(conn, job_id)) == ("available", None)
    [claimed] = claim(conn, "q", {"t.fresh": 3})
    assert claimed[0] == job_id
    # A deadline still ahead is kept by a retry.
    later = task.enqueue(conn)
    conn.execute("SELECT pgqueue.cancel_job(%s)", [later])
    ahead = deadline(conn, later)
    assert ops.retry_job(conn, "pgqueue", later)
    assert deadline(conn, later) == ahead


async def test_worker_never_runs_a_job_whose_deadline_passed(app: pgqueue.App, conn: Conn) -> None:
    ran: list[int] = []

    @app.task(name="t.timely", queue="w")
    def timely(n: int) -> None:
        ran.append(n)

    stale = timely.options(expires_in=60).enqueue(conn, n=1)
    pass_deadline(conn, stale)
    fresh = timely.options(expires_in=3600).enqueue(conn, n=2)
    async with running_worker(app, queues=("w",)) as worker:
        await async_wait_until(lambda: is_final(conn, stale) and is_final(conn, fresh), timeout=30)
        assert worker.stats.claimed == 1
    assert ran == [2]
    assert (state_of(conn, stale), state_of(conn, fresh)) == ("cancelled", "completed")


async def test_handlers_see_their_deadline_and_key(app: pgqueue.App, conn: Conn) -> None:
    seen: list[tuple[datetime | None, str | None]] = []

    @app.task(name="t.ctx", pass_context=True, concurrency_key="customer_id")
    def ctx_task(ctx: pgqueue.JobContext, customer_id: int) -> None:
        seen.append((ctx.job.expires_at, ctx.job.concurrency_key))

    job_id = ctx_task.options(expires_in=600).enqueue(conn, customer_id=7)
    async with running_worker(app):
        await async_wait_until(lambda: is_final(conn, job_id))
    assert seen == [(deadline(conn, job_id), "7")]
