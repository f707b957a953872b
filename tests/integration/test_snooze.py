"""Snooze: a handler puts its job off without using up an attempt (counted in snoozes),
through the worker (sync, async, transactional handlers), the outcome statement, the log
line, stats, metrics and `pgqueue jobs show`; bad values fail the attempt like any error."""

from __future__ import annotations

import asyncio
import io
import json
import logging
import threading
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import psycopg
import pytest
from typer.testing import CliRunner

import pgqueue
from pgqueue.cli.main import app as cli_app
from pgqueue.logging_setup import make_formatter
from pgqueue.models import JobState, Outcome
from tests.apps.support import is_final, state_of
from tests.conftest import async_wait_until, running_worker
from tests.enqueue_support import Q, claim, must_get_job
from tests.integration.test_metrics import LOCAL, scrape, value

Conn = psycopg.Connection[Any]


def row(conn: Conn, job_id: int) -> dict[str, Any]:
    cur = conn.execute(
        "SELECT state::text AS state, attempt, snoozes, errors, run_at - now() AS wait FROM pgqueue.jobs WHERE id = %s",
        [job_id],
    )
    found = cur.fetchone()
    assert found is not None
    assert cur.description is not None
    return dict(zip([c.name for c in cur.description], found, strict=True))


@pytest.fixture
def captured() -> Iterator[io.StringIO]:
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(make_formatter("json"))
    logger = logging.getLogger("pgqueue.worker")
    old = logger.level
    logger.setLevel(logging.INFO)
    logger.addHandler(handler)
    try:
        yield stream
    finally:
        logger.removeHandler(handler)
        logger.setLevel(old)


# -- the outcome statement -----------------------------------------------------------------


def test_outcome_gives_the_attempt_back_and_counts_the_snooze(conn: Conn) -> None:
    job_id = conn.execute("SELECT pgqueue.enqueue('t.snoozy', queue => 'q', max_attempts => 1)").fetchone()[0]  # type: ignore[index]
    [claimed] = claim(conn, "q", {"t.snoozy": 1})
    assert claimed[5] == 1  # attempt counted at claim: the only one allowed
    written = conn.execute(
        Q["job_record_outcomes"],
        {
            "outcomes": json.dumps(
                [{"id": job_id, "token": str(claimed[7]), "state": "scheduled", "delay": 90.0, "error": None}]
            )
        },
    ).fetchall()
    assert written == [(job_id,)]
    snoozed = row(conn, job_id)
    assert (snoozed["state"], snoozed["attempt"], snoozed["snoozes"], snoozed["errors"]) == ("scheduled", 0, 1, [])
    assert timedelta(seconds=89) < snoozed["wait"] <= timedelta(seconds=90)
    job = must_get_job(conn, job_id)
    assert job["max_attempts"] == 1  # still one attempt left: the snooze did not use it
    assert conn.execute(
        "SELECT lease_token, lease_expires_at FROM pgqueue.jobs WHERE id = %s", [job_id]
    ).fetchone() == (
        None,
        None,
    )


# -- through the worker --------------------------------------------------------------------


async def test_sync_handler_snoozes_then_completes_on_its_only_attempt(
    app: pgqueue.App, conn: Conn, captured: io.StringIO
) -> None:
    seen: list[tuple[int, int]] = []

    @app.task(name="t.waits", max_attempts=1, pass_context=True)
    def waits(ctx: pgqueue.JobContext) -> None:
        seen.append((ctx.job.attempt, ctx.job.snoozes))
        if ctx.job.snoozes < 2:
            raise pgqueue.Snooze(after=0)  # available again at once

    job_id = waits.enqueue(conn)
    async with running_worker(app, **LOCAL) as worker:
        await async_wait_until(lambda: is_final(conn, job_id), timeout=30)
        assert worker.metrics is not None
        assert worker.metrics.port
        samples = await asyncio.to_thread(scrape, worker.metrics.port)
        stats = worker.stats
    done = row(conn, job_id)
    # Three runs, each attempt 1 of 1: the two snoozes gave theirs back.
    assert seen == [(1, 0), (1, 1), (1, 2)]
    assert (done["state"], done["attempt"], done["snoozes"], done["errors"]) == ("completed", 1, 2, [])
    assert (stats.snoozed, stats.completed, stats.retried, stats.discarded) == (2, 1, 0, 0)
    labels = {"queue": "default", "task": "t.waits"}
    assert value(samples, "pgqueue_jobs_snoozed_total", **labels) == 2
    assert value(samples, "pgqueue_jobs_failed_total", **labels) == 0
    lines = [json.loads(line) for line in captured.getvalue().splitlines() if '"job_id"' in line]
    snoozes = [line for line in lines if line.get("snoozed")]
    assert [(s["state"], s["snoozes"], s["attempt"], s["retry_in_s"]) for s in snoozes] == [
        ("available", 1, 1, 0.0),
        ("available", 2, 1, 0.0),
    ]
    assert all("snoozed (" in s["msg"] and "attempt given back" in s["msg"] for s in snoozes)


async def test_async_handler_snoozes_for_a_while(app: pgqueue.App, conn: Conn) -> None:
    @app.task(name="t.later")
    async def later() -> None:
        raise pgqueue.Snooze(after=timedelta(hours=1))

    job_id = later.enqueue(conn)
    async with running_worker(app) as worker:
        await async_wait_until(lambda: worker.stats.snoozed == 1)
    snoozed = row(conn, job_id)
    assert (snoozed["state"], snoozed["attempt"], snoozed["snoozes"]) == ("scheduled", 0, 1)
    assert timedelta(minutes=59) < snoozed["wait"] <= timedelta(hours=1)


async def test_transactional_handler_snooze_rolls_its_writes_back(app: pgqueue.App, conn: Conn) -> None:
    conn.execute("CREATE TABLE side_effects (job_id bigint)")
    runs = threading.Event()

    @app.task(name="t.tx", transactional=True)
    def tx(ctx: pgqueue.JobContext) -> None:
        ctx.conn.execute("INSERT INTO side_effects VALUES (%s)", [ctx.job.id])
        if ctx.job.snoozes == 0:
            raise pgqueue.Snooze(after=0)
        runs.set()

    job_id = tx.enqueue(conn)
    async with running_worker(app):
        await async_wait_until(lambda: is_final(conn, job_id), timeout=30)
    done = row(conn, job_id)
    assert (done["state"], done["attempt"], done["snoozes"]) == ("completed", 1, 1)
    # The snoozed run's insert was rolled back with its transaction; the second committed.
    assert conn.execute("SELECT count(*) FROM side_effects").fetchone() == (1,)
    assert runs.is_set()


@pytest.mark.parametrize("after", [-1, float("nan"), 11 * 365 * 86400])
async def test_a_bad_snooze_fails_the_attempt_and_loses_nothing(app: pgqueue.App, conn: Conn, after: float) -> None:
    @app.task(name="t.bad_snooze", max_attempts=2, retry=pgqueue.Backoff(base=3600, jitter=False))
    def bad_snooze() -> None:
        raise pgqueue.Snooze(after=after)

    job_id = bad_snooze.enqueue(conn)
    async with running_worker(app) as worker:
        await async_wait_until(lambda: worker.stats.retried == 1)
    failed = row(conn, job_id)
    assert (failed["state"], failed["attempt"], failed["snoozes"]) == ("retryable", 1, 0)
    [error] = failed["errors"]
    assert error["type"] == "pgqueue.errors.ConfigError"
    assert "Snooze(after=...) must be seconds" in error["message"]


async def test_operator_cancel_wins_over_a_snooze(app: pgqueue.App, conn: Conn) -> None:
    started = threading.Event()
    release = threading.Event()

    @app.task(name="t.cancel_me")
    def cancel_me() -> None:
        started.set()
        release.wait(30)
        raise pgqueue.Snooze(after=0)

    job_id = cancel_me.enqueue(conn)
    async with running_worker(app, heartbeat_interval=0.1) as worker:
        await async_wait_until(started.is_set)
        assert conn.execute("SELECT pgqueue.cancel_job(%s)::text", [job_id]).fetchone() == ("running",)
        await async_wait_until(lambda: worker.executor.cancels.requested(job_id))
        release.set()
        await async_wait_until(lambda: is_final(conn, job_id))
    assert state_of(conn, job_id) == "cancelled"


def test_jobs_show_and_list_say_how_often_a_job_snoozed(dsn: str, conn: Conn) -> None:
    job_id = conn.execute("SELECT pgqueue.enqueue('t.shown', queue => 'q')").fetchone()[0]  # type: ignore[index]
    for _ in range(3):
        [claimed] = claim(conn, "q", {"t.shown": 5})
        conn.execute(
            Q["job_record_outcomes"],
            {
                "outcomes": json.dumps(
                    [{"id": job_id, "token": str(claimed[7]), "state": Outcome(JobState.AVAILABLE).state, "delay": 0.0}]
                )
            },
        )
    env = {"PGQUEUE_DSN": dsn, "PGQUEUE_SCHEMA": None, "COLUMNS": "200"}
    shown = CliRunner().invoke(cli_app, ["jobs", "show", str(job_id)], env=env)
    assert shown.exit_code == 0, shown.output
    assert "snoozes" in shown.stdout
    assert "3 (attempts given back)" in shown.stdout
    listed = CliRunner().invoke(cli_app, ["jobs", "list"], env=env)
    assert listed.exit_code == 0, listed.output
    assert "0/5 (3 snoozes)" in listed.stdout
    as_json = CliRunner().invoke(cli_app, ["jobs", "show", str(job_id), "--json"], env=env)
    assert json.loads(as_json.stdout)["snoozes"] == 3
