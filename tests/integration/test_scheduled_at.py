"""``Job.scheduled_at``: the time a job was scheduled for at enqueue (a cron job: its
tick). Every enqueue path sets it; retries, ``Retry``, rescues, releases, ``retry_job``
and ``cancel_job`` leave it alone while they move ``run_at``; the finished row keeps it.

Worker tests run the real worker; the others drive the worker's own queries (claim,
outcomes, release, the rescuer) through :class:`JobsDB`, one step at a time.
"""

from __future__ import annotations

import asyncio
import json
import re
import uuid
from datetime import datetime, timedelta
from typing import Any

import psycopg
import pytest
from typer.testing import CliRunner

import pgqueue
from pgqueue import ops
from pgqueue._db.jobs import JobsDB
from pgqueue.cli import app as cli_app
from pgqueue.models import Job, JobState, Outcome
from tests.apps.cron_support import db_value, scheduler, set_state
from tests.apps.support import force_rescue, is_final
from tests.conftest import async_wait_until, running_worker

Conn = psycopg.Connection[Any]
DB = JobsDB("pgqueue")
HOUR = timedelta(hours=1)


def stored(conn: Conn, job_id: int) -> tuple[str, datetime | None, datetime]:
    """(state, scheduled_at, run_at) as the row holds them (no NULL-means-run_at reading)."""
    row = conn.execute("SELECT state::text, scheduled_at, run_at FROM pgqueue.jobs WHERE id = %s", [job_id]).fetchone()
    assert row is not None, f"job {job_id} not found"
    return row[0], row[1], row[2]


def an_hour_ago(conn: Conn) -> datetime:
    value: datetime = db_value(conn, "SELECT date_trunc('second', now()) - interval '1 hour'")
    return value


async def claim_one(dsn: str, task: str, *, max_attempts: int = 3) -> Job:
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as aconn:
        jobs, _ = await DB.claim(
            aconn, queues=["default"], task_limits={task: max_attempts}, limit=1, lease=60.0, worker_id="test"
        )
    assert len(jobs) == 1, jobs
    return jobs[0]


async def write_outcome(dsn: str, job: Job, outcome: Outcome) -> None:
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as aconn:
        assert await DB.record_outcomes(aconn, [(job.id, job.lease_token, outcome)]) == {job.id}


async def maintenance(dsn: str) -> tuple[int, int, int]:
    """One scheduler + rescuer pass (zero backoff): (promoted, rescued, discarded)."""
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as aconn:
        tick = await DB.maintenance_tick(aconn, batch=100, backoff_base=0.0, backoff_cap=0.0, default_max_attempts=20)
    assert tick.leader  # no worker runs in these tests: nobody else holds the lock
    return tick.promoted, tick.rescued, tick.discarded


# -- enqueue paths --------------------------------------------------------------------------


async def test_every_enqueue_path_records_the_time_asked_for(app: pgqueue.App, dsn: str, conn: Conn) -> None:
    @app.task(name="tests.paths")
    def paths(n: int = 0) -> None:
        return None

    later = db_value(conn, "SELECT date_trunc('second', now()) + interval '1 day'")
    paths.enqueue(conn, n=1)
    paths.options(run_at=later).enqueue(conn, n=2)
    paths.options(delay=3600).enqueue(conn, n=3)
    paths.options(unique_key="k1", run_at=later).enqueue(conn, n=4)  # through enqueue()
    conn.execute("SELECT pgqueue.enqueue('tests.paths', run_at => %s)", [later])
    conn.execute("SELECT pgqueue.enqueue('tests.paths')")
    app.enqueue_many(
        conn,
        [
            paths.job(n=5),
            paths.options(run_at=later).job(n=6),
            paths.options(delay=60).job(n=7),
            paths.options(unique_key="k2").job(n=8),
        ],
    )
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as aconn:
        await paths.options(run_at=later).enqueue_async(aconn, n=9)
        await app.enqueue_many_async(aconn, [paths.options(delay=30).job(n=10)])

    rows = conn.execute("SELECT scheduled_at, run_at FROM pgqueue.jobs").fetchall()
    assert len(rows) == 12
    assert all(scheduled is not None and scheduled == run_at for scheduled, run_at in rows), rows


# -- retries ----------------------------------------------------------------------------------


async def test_cron_job_failing_once_still_reads_its_tick(dsn: str, conn: Conn) -> None:
    app = pgqueue.App(dsn=dsn)
    seen: list[Job] = []

    @app.task(name="tasks.minute", queue="cron", pass_context=True, retry=pgqueue.Backoff(base=0.05, jitter=False))
    def minute(ctx: pgqueue.JobContext) -> None:
        seen.append(ctx.job)
        if ctx.job.attempt == 1:
            raise RuntimeError("the first attempt fails")

    # Fire the tick of an hour ago, so that the retry's run_at is far from it.
    schedule = pgqueue.Schedule(name="minute", task="tasks.minute", cron="* * * * *", queue="cron", missed="skip")
    tick: datetime = db_value(conn, "SELECT date_trunc('minute', now()) - interval '1 hour'")
    async with scheduler(dsn, [schedule]) as cron:
        await cron.register()
        set_state(conn, "minute", last_tick=tick - timedelta(minutes=10), defined_at=tick - timedelta(days=1))
        result = await cron.run_once(now=tick + timedelta(seconds=1))
    assert [f.tick for f in result.fired] == [tick]
    job_id = result.fired[0].job_id
    assert stored(conn, job_id) == ("available", tick, tick)

    async with running_worker(app, queues=("cron",)):
        await async_wait_until(lambda: is_final(conn, job_id))
    assert [j.attempt for j in seen] == [1, 2]
    assert [j.scheduled_at for j in seen] == [tick, tick]
    assert seen[0].run_at == tick
    assert seen[1].run_at > tick + HOUR - timedelta(minutes=1)  # the retry's time
    assert stored(conn, job_id) == ("completed", tick, seen[1].run_at)  # the finished row keeps it
    assert ops.get_job(conn, "pgqueue", job_id).scheduled_at == tick


async def test_retry_signal_keeps_scheduled_at(app: pgqueue.App, conn: Conn) -> None:
    seen: list[Job] = []

    @app.task(name="tests.again", pass_context=True)
    def again(ctx: pgqueue.JobContext) -> None:
        seen.append(ctx.job)
        if ctx.job.attempt == 1:
            raise pgqueue.Retry(after=0, reason="not yet")

    when = an_hour_ago(conn)
    job_id = again.options(run_at=when).enqueue(conn)
    async with running_worker(app):
        await async_wait_until(lambda: is_final(conn, job_id))
    assert [(j.attempt, j.scheduled_at) for j in seen] == [(1, when), (2, when)]
    assert seen[1].run_at > when + HOUR - timedelta(minutes=1)
    assert stored(conn, job_id)[:2] == ("completed", when)


async def test_rescue_after_lease_expiry_keeps_scheduled_at(app: pgqueue.App, dsn: str, conn: Conn) -> None:
    @app.task(name="tests.frozen")
    def frozen() -> None:
        return None

    when = an_hour_ago(conn)
    job_id = frozen.options(run_at=when).enqueue(conn)
    first = await claim_one(dsn, "tests.frozen")
    assert (first.id, first.run_at, first.scheduled_at) == (job_id, when, when)

    await asyncio.to_thread(force_rescue, dsn, job_id, hold=False)  # the worker froze
    state, scheduled, run_at = stored(conn, job_id)
    assert (state, scheduled) == ("retryable", when)
    assert run_at > when + HOUR - timedelta(minutes=1)

    assert (await maintenance(dsn))[0] == 1  # due again
    second = await claim_one(dsn, "tests.frozen")
    assert (second.attempt, second.scheduled_at, second.run_at) == (2, when, run_at)


async def test_rescue_into_the_dead_letter_then_retry_job_keeps_scheduled_at(
    app: pgqueue.App, dsn: str, conn: Conn
) -> None:
    @app.task(name="tests.crashing", max_attempts=1)
    def crashing() -> None:
        return None

    when = an_hour_ago(conn)
    job_id = crashing.options(run_at=when).enqueue(conn)
    await claim_one(dsn, "tests.crashing", max_attempts=1)
    conn.execute("UPDATE pgqueue.jobs_live SET lease_expires_at = now() - interval '1 second' WHERE id = %s", [job_id])
    assert (await maintenance(dsn))[2] == 1
    assert stored(conn, job_id)[:2] == ("discarded", when)

    assert ops.retry_job(conn, "pgqueue", job_id)
    state, scheduled, run_at = stored(conn, job_id)
    assert (state, scheduled) == ("available", when)
    assert run_at > when + HOUR - timedelta(minutes=1)  # retry_job makes it due now
    again = await claim_one(dsn, "tests.crashing", max_attempts=1)
    assert (again.attempt, again.scheduled_at) == (2, when)


async def test_failure_release_discard_retry_job_and_cancel_keep_scheduled_at(
    app: pgqueue.App, dsn: str, conn: Conn
) -> None:
    @app.task(name="tests.steps")
    def steps() -> None:
        return None

    when = an_hour_ago(conn)
    job_id = steps.options(run_at=when).enqueue(conn)

    # A failure: retryable, due at once.
    first = await claim_one(dsn, "tests.steps")
    await write_outcome(dsn, first, Outcome(JobState.RETRYABLE, delay=0.0, error={"type": "E", "message": "m"}))
    assert stored(conn, job_id)[:2] == ("retryable", when)
    assert (await maintenance(dsn))[0] == 1

    # A graceful shutdown hands it back.
    second = await claim_one(dsn, "tests.steps")
    assert second.scheduled_at == when
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as aconn:
        assert await DB.release(aconn, {second.id: second.lease_token}) == 1
    assert stored(conn, job_id)[:2] == ("available", when)

    # The dead letter, then retry_job.
    third = await claim_one(dsn, "tests.steps")
    assert third.scheduled_at == when
    await write_outcome(dsn, third, Outcome(JobState.DISCARDED, error={"type": "E", "message": "m"}))
    assert stored(conn, job_id)[:2] == ("discarded", when)
    assert ops.retry_job(conn, "pgqueue", job_id)
    assert stored(conn, job_id)[:2] == ("available", when)

    # cancel_job moves the waiting job to the cancelled partition with it.
    assert ops.cancel_job(conn, "pgqueue", job_id) is JobState.CANCELLED
    assert stored(conn, job_id)[:2] == ("cancelled", when)


@pytest.mark.parametrize("rewrite", ["failure", "rescue"])
async def test_row_inserted_without_scheduled_at_reads_run_at_and_is_pinned_by_a_retry(
    dsn: str, conn: Conn, rewrite: str
) -> None:
    """A producer's own INSERT (or one still running the previous release) leaves it NULL."""
    when = an_hour_ago(conn)
    row = conn.execute(
        "INSERT INTO pgqueue.jobs_live (task, queue, state, run_at)"
        " VALUES ('tests.foreign', 'default', 'available', %s) RETURNING id",
        [when],
    ).fetchone()
    assert row is not None
    job_id = row[0]
    assert stored(conn, job_id) == ("available", None, when)
    assert ops.get_job(conn, "pgqueue", job_id).scheduled_at == when

    job = await claim_one(dsn, "tests.foreign")
    assert job.scheduled_at == when
    if rewrite == "failure":
        await write_outcome(dsn, job, Outcome(JobState.RETRYABLE, delay=0.0))
    else:
        await asyncio.to_thread(force_rescue, dsn, job_id, hold=False)
    state, scheduled, run_at = stored(conn, job_id)
    assert (state, scheduled) == ("retryable", when)  # pinned before run_at moved
    assert run_at > when + HOUR - timedelta(minutes=1)


def test_job_built_without_scheduled_at_takes_run_at() -> None:
    """Code that builds a Job positionally, as before the field existed, keeps working."""
    now = datetime.now().astimezone()
    job = Job(1, "q", "t", {}, 0, 1, 3, uuid.uuid4(), now, now, timedelta(0))
    assert job.scheduled_at == now
    later = now + HOUR
    assert Job(1, "q", "t", {}, 0, 1, 3, job.lease_token, later, now, timedelta(0), now).scheduled_at == now


# -- inspection ---------------------------------------------------------------------------------


@pytest.fixture
def retried_job(app: pgqueue.App, dsn: str, conn: Conn) -> tuple[int, datetime, datetime]:
    """A job whose run_at was moved by a failure: (id, scheduled_at, run_at)."""

    @app.task(name="tests.shown")
    def shown() -> None:
        return None

    when = an_hour_ago(conn)
    job_id = shown.options(run_at=when).enqueue(conn)

    async def fail_once() -> None:
        job = await claim_one(dsn, "tests.shown")
        await write_outcome(dsn, job, Outcome(JobState.RETRYABLE, delay=3600.0, error={"type": "E", "message": "m"}))

    asyncio.run(fail_once())
    _, scheduled, run_at = stored(conn, job_id)
    assert scheduled == when
    assert run_at > when + HOUR
    return job_id, when, run_at


def test_ops_and_cli_show_scheduled_at(dsn: str, conn: Conn, retried_job: tuple[int, datetime, datetime]) -> None:
    job_id, when, run_at = retried_job
    detail = ops.get_job(conn, "pgqueue", job_id)
    assert (detail.scheduled_at, detail.run_at) == (when, run_at)
    assert [(j.id, j.scheduled_at) for j in ops.list_jobs(conn, "pgqueue")] == [(job_id, when)]

    runner = CliRunner()
    shown = runner.invoke(cli_app, ["jobs", "show", str(job_id), "--dsn", dsn], env={"COLUMNS": "200"})
    assert shown.exit_code == 0, shown.output
    found = re.search(r"scheduled for +(\S+)", shown.stdout)
    assert found is not None, shown.stdout
    assert datetime.fromisoformat(found[1]) == when
    as_json = runner.invoke(cli_app, ["jobs", "show", str(job_id), "--json", "--dsn", dsn])
    assert as_json.exit_code == 0, as_json.output
    assert datetime.fromisoformat(json.loads(as_json.stdout)["scheduled_at"]) == when
    listed = runner.invoke(cli_app, ["jobs", "list", "--json", "--dsn", dsn])
    assert listed.exit_code == 0, listed.output
    assert [datetime.fromisoformat(r["scheduled_at"]) for r in json.loads(listed.stdout)] == [when]
