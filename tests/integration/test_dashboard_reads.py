"""The dashboard's own reads say what the views say: the overview's one statement gives
every queue_stats row. Its connections run without parallel workers."""

from __future__ import annotations

import dataclasses

from pgqueue.dashboard import DashboardConfig
from pgqueue.dashboard.database import Database
from pgqueue.dashboard.views import overview
from tests.dashboard_support import Conn
from tests.integration.test_views import error, insert_job, insert_with_errors, rows


def _queue_data(conn: Conn) -> None:
    """Every case queue_stats distinguishes: live states, lag, the 1/5/15-minute windows,
    failed attempts in and out of the last 5 minutes, expiries, a queue with finished
    jobs only, and one whose jobs finished too long ago to be shown."""
    insert_job(conn, state="available", run_at_sql="now() - interval '10 seconds'")
    insert_job(conn, state="available", run_at_sql="now() - interval '1 second'")
    insert_job(conn, state="scheduled", run_at_sql="now() + interval '1 hour'")
    insert_job(
        conn,
        state="running",
        attempt=1,
        max_attempts=3,
        lease_token_sql="gen_random_uuid()",
        lease_expires_at_sql="now() + interval '30 seconds'",
    )
    insert_with_errors(
        conn,
        [error("builtins.ValueError", "old", "10 minutes"), error("builtins.ValueError", "new", "1 minute")],
        state="retryable",
        attempt=2,
        max_attempts=3,
    )
    for ago in ("30 seconds", "3 minutes", "4 minutes", "10 minutes", "20 minutes", "40 minutes"):
        insert_job(conn, state="completed", attempt=1, finished_at_sql=f"now() - interval '{ago}'")
    insert_with_errors(
        conn,
        [error("builtins.OSError", "flaky", "2 minutes")],
        state="completed",
        attempt=2,
        finished_at_sql="now() - interval '90 seconds'",
    )
    insert_with_errors(
        conn,
        [error("builtins.KeyError", "k", "30 seconds")],
        state="discarded",
        attempt=1,
        finished_at_sql="now() - interval '30 seconds'",
    )
    insert_job(conn, state="discarded", attempt=1, finished_at_sql="now() - interval '10 minutes'")
    insert_job(conn, queue="b", state="completed", attempt=1, finished_at_sql="now() - interval '2 minutes'")
    insert_job(conn, queue="c", state="completed", attempt=1, finished_at_sql="now() - interval '16 minutes'")
    insert_job(conn, queue="c", state="cancelled", finished_at_sql="now()")
    insert_with_errors(
        conn,
        [error("pgqueue.Expired", "not started by its deadline", "3 minutes")],
        queue="c",
        state="cancelled",
        finished_at_sql="now() - interval '3 minutes'",
    )
    insert_job(conn, queue="gone", state="completed", attempt=1, finished_at_sql="now() - interval '20 minutes'")


def test_the_overview_gives_every_queue_stats_row(conn: Conn, dsn: str) -> None:
    _queue_data(conn)
    config = DashboardConfig(dsn=dsn)
    with conn.transaction():  # one now() for both
        data = overview(conn, config)
        view = rows(conn, "SELECT * FROM pgqueue.queue_stats ORDER BY queue")
    assert [q.queue for q in data.queues] == ["a", "b", "c"]
    assert [dataclasses.asdict(q) for q in data.queues] == view
    a = data.queues[0]
    # What the sums are made of (the view test says why): retryable + finished in 5 min.
    assert (a.completed_1m, a.completed_5m, a.completed_15m, a.failed_attempts_5m) == (1, 4, 5, 3)
    assert data.queues[2].expired_15m == 1
    # The chart: the same pass counts every finished job of its 30 minutes, per minute.
    assert data.totals["completed_1m"] == 1


def test_the_overview_with_a_chart_shorter_than_15_minutes(conn: Conn, dsn: str) -> None:
    _queue_data(conn)
    with conn.transaction():
        data = overview(conn, DashboardConfig(dsn=dsn, chart_minutes=2))
        view = rows(conn, "SELECT * FROM pgqueue.queue_stats ORDER BY queue")
    assert [dataclasses.asdict(q) for q in data.queues] == view


def test_dashboard_connections_run_without_parallel_workers(dsn: str) -> None:
    with Database(DashboardConfig(dsn=dsn)) as database:
        setting = database.run(lambda c: c.execute("SHOW max_parallel_workers_per_gather").fetchone())
    assert setting == ("0",)
