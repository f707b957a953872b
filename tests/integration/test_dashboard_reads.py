"""The dashboard's own reads say what the views say: the overview's one statement gives
every queue_stats row, and the failures page groups like the failures view, over a
bounded window it states on the page. Its connections run without parallel workers."""

from __future__ import annotations

import dataclasses
from typing import Any

from pgqueue import ops
from pgqueue.dashboard import DashboardConfig
from pgqueue.dashboard.database import Database
from pgqueue.dashboard.views import failures, overview
from tests.dashboard_support import Conn, client_for
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


def _failure_data(conn: Conn) -> dict[str, int]:
    ids = {
        "ta": insert_with_errors(
            conn, [error("builtins.ValueError", "v", "2 minutes")], task="ta", state="retryable", attempt=1
        ),
        "older": insert_with_errors(
            conn,
            [error("builtins.KeyError", "older", "3 hours")],
            task="tb",
            state="discarded",
            attempt=1,
            finished_at_sql="now() - interval '3 hours'",
        ),
        "newer": insert_with_errors(
            conn,
            [error("builtins.ValueError", "first try", "5 minutes"), error("builtins.KeyError", "newer", "1 minute")],
            task="tb",
            state="discarded",
            attempt=2,
            finished_at_sql="now() - interval '1 minute'",
        ),
        "expired": insert_with_errors(
            conn,
            [error("pgqueue.Expired", "not started by its deadline", "4 minutes")],
            task="tc",
            state="cancelled",
            finished_at_sql="now() - interval '4 minutes'",
        ),
    }
    # Not failures: a completed job that had failed once, one cancelled by hand, and one
    # discarded more than 24 hours ago (at the start of yesterday, UTC: a partition the
    # tests have).
    insert_with_errors(
        conn, [error("builtins.OSError", "x", "1 minute")], task="tc", state="completed", finished_at_sql="now()"
    )
    insert_with_errors(
        conn, [error("builtins.OSError", "x", "1 minute")], task="tc", state="cancelled", finished_at_sql="now()"
    )
    insert_with_errors(
        conn,
        [error("builtins.OSError", "x", "25 hours")],
        task="tc",
        state="discarded",
        finished_at_sql="date_trunc('day', now(), 'UTC') - interval '1 day'",
    )
    return ids


def _groups(found: list[ops.FailureGroup]) -> list[dict[str, Any]]:
    return sorted((dataclasses.asdict(g) for g in found), key=lambda g: (g["task"], g["error_type"]))


def test_failures_group_like_the_view_within_the_window(conn: Conn, dsn: str) -> None:
    ids = _failure_data(conn)
    with conn.transaction():
        data = failures(conn, DashboardConfig(dsn=dsn))
        view = rows(conn, "SELECT * FROM pgqueue.failures ORDER BY task, error_type")
    assert _groups(data.groups) == view
    assert [(g.task, g.error_type) for g in data.groups] == [
        ("tb", "builtins.KeyError"),  # the latest error first
        ("ta", "builtins.ValueError"),
        ("tc", "pgqueue.Expired"),
    ]
    assert data.groups[0].last_job_id == ids["newer"]
    # The finished part looked at both discarded jobs, the expired one and the one cancelled
    # by hand (not a failure), not at the one discarded more than 24 hours ago.
    assert (data.live, data.finished, data.live_full, data.finished_full) == (1, 4, False, False)


def test_failures_beyond_the_window_are_left_out_and_the_page_says_so(conn: Conn, dsn: str) -> None:
    live = [
        insert_with_errors(conn, [error("builtins.ValueError", "v", "2 minutes")], task="t", state="retryable")
        for _ in range(3)
    ]
    dead = [
        insert_with_errors(
            conn,
            [error("builtins.KeyError", f"k{i}", f"{10 - i} minutes")],
            task="t",
            state="discarded",
            finished_at_sql=f"now() - interval '{10 - i} minutes'",
        )
        for i in range(3)
    ]
    data = failures(conn, DashboardConfig(dsn=dsn, failure_window=2))
    counts = {g.error_type: g.count for g in data.groups}
    assert counts == {"builtins.ValueError": 2, "builtins.KeyError": 2}
    assert (data.live, data.finished, data.live_full, data.finished_full) == (2, 2, True, True)
    # The newest jobs are the ones kept.
    assert {g.error_type: g.last_job_id for g in data.groups} == {
        "builtins.ValueError": live[-1],
        "builtins.KeyError": dead[-1],
    }
    with client_for(dsn, failure_window=2) as client:
        page = client.get("/failures").text
    assert 'id="failure-window"' in page
    assert page.count("older ones not counted") == 2
    with client_for(dsn) as client:
        page = client.get("/failures").text
    assert "the 5,000 newest live jobs" in page
    assert "older ones not counted" not in page


def test_dashboard_connections_run_without_parallel_workers(dsn: str) -> None:
    with Database(DashboardConfig(dsn=dsn)) as database:
        setting = database.run(lambda c: c.execute("SHOW max_parallel_workers_per_gather").fetchone())
    assert setting == ("0",)
