"""Enqueue in the caller's transaction: atomicity, one round trip, options and arguments.

Everything runs against a real PostgreSQL (one fresh migrated database per test).
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import psycopg
import pytest
from psycopg import pq

import pgqueue
from tests.enqueue_support import (
    ROUND_TRIP_ARGS,
    Conn,
    NoopTask,
    count_jobs,
    count_uploads,
    db_now,
    get_job,
    libpq_trace,
    must_get_job,
)

# -- atomic enqueue (I1) ---------------------------------------------------------------


def _enqueue_then_raise(conn: Conn, task: NoopTask, ids: list[int]) -> None:
    with conn.transaction():
        ids.append(task.enqueue(conn, n=3))
        raise RuntimeError("boom")


def test_committed_job_exists_rolled_back_job_does_not(dsn: str, conn: Conn, noop: NoopTask) -> None:
    with conn.transaction():
        kept = noop.enqueue(conn, n=1)
        # Not visible to anybody else before commit.
        with psycopg.connect(dsn, autocommit=True) as other:
            assert get_job(other, kept) is None
    assert must_get_job(conn, kept)["state"] == "available"

    with conn.transaction():
        dropped = noop.enqueue(conn, n=2)
        assert get_job(conn, dropped) is not None  # visible inside its own transaction
        raise psycopg.Rollback()
    assert get_job(conn, dropped) is None

    failed: list[int] = []
    with pytest.raises(RuntimeError, match="boom"):
        _enqueue_then_raise(conn, noop, failed)
    assert len(failed) == 1
    assert get_job(conn, failed[0]) is None
    assert count_jobs(conn) == 1


def test_enqueue_on_non_autocommit_connection(dsn: str, conn: Conn, noop: NoopTask) -> None:
    c = psycopg.connect(dsn)
    try:
        gone = noop.enqueue(c, n=1)
        assert c.info.transaction_status == pq.TransactionStatus.INTRANS  # enqueue never commits
        c.rollback()
        kept = noop.enqueue(c, n=2)
        c.commit()
        closed = noop.enqueue(c, n=3)
    finally:
        c.close()  # closing with an open transaction discards it
    assert get_job(conn, gone) is None
    assert get_job(conn, closed) is None
    assert must_get_job(conn, kept)["args"] == {"n": 2}
    assert count_jobs(conn) == 1


async def test_enqueue_async_commit_and_rollback(dsn: str, conn: Conn, noop: NoopTask) -> None:
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as aconn:
        async with aconn.transaction():
            kept = await noop.enqueue_async(aconn, image_id=42, width=800)
            assert get_job(conn, kept) is None  # other connection: not committed yet
        async with aconn.transaction():
            dropped = await noop.enqueue_async(aconn, image_id=43)
            raise psycopg.Rollback()
    job = must_get_job(conn, kept)
    assert job["args"] == {"image_id": 42, "width": 800}
    assert job["task"] == "noop"
    assert job["queue"] == "work"
    assert get_job(conn, dropped) is None
    assert count_jobs(conn) == 1


def test_app_enqueue_by_name(conn: Conn, app: pgqueue.App, noop: NoopTask) -> None:
    @app.task(name="images.resize", queue="images", priority=3)
    def resize(image_id: int, width: int, height: int) -> None:
        return None

    with conn.transaction():
        job_id = app.enqueue(conn, "images.resize", image_id=42, width=800, height=600)
    with conn.transaction():
        dropped = app.enqueue(conn, "images.resize", image_id=1, width=1, height=1)
        raise psycopg.Rollback()
    job = must_get_job(conn, job_id)
    assert (job["task"], job["queue"], job["priority"]) == ("images.resize", "images", 3)
    assert job["args"] == {"image_id": 42, "width": 800, "height": 600}
    assert job["max_attempts"] is None  # the task's own setting is applied at claim
    assert get_job(conn, dropped) is None


async def test_app_enqueue_async_by_name(dsn: str, conn: Conn, app: pgqueue.App, noop: NoopTask) -> None:
    async with await psycopg.AsyncConnection.connect(dsn) as aconn:
        job_id = await app.enqueue_async(aconn, "noop", x=1)
        await aconn.rollback()
        kept = await app.enqueue_async(aconn, "noop", x=2)
        await aconn.commit()
    assert get_job(conn, job_id) is None
    assert must_get_job(conn, kept)["args"] == {"x": 2}


def default_named(x: int) -> None:
    return None


def test_default_task_name_is_module_and_function(conn: Conn, app: pgqueue.App) -> None:
    task = app.task(default_named)
    assert task.name == f"{__name__}.default_named"
    job_id = app.enqueue(conn, task.name, x=1)
    assert must_get_job(conn, job_id)["task"] == task.name
    assert must_get_job(conn, job_id)["queue"] == "default"


def test_enqueue_ids_are_distinct_and_increasing(conn: Conn, noop: NoopTask) -> None:
    with conn.transaction():
        ids = [noop.enqueue(conn, i=i) for i in range(20)]
    assert ids == sorted(ids)
    assert len(set(ids)) == 20
    rows = conn.execute("SELECT id, args->>'i' FROM pgqueue.jobs ORDER BY id").fetchall()
    assert rows == [(job_id, str(i)) for i, job_id in enumerate(ids)]


# -- one round trip in the caller's transaction ------------------------------------------


def test_single_enqueue_is_one_round_trip_with_callers_insert(uploads: Conn, noop: NoopTask) -> None:
    conn = uploads
    with conn.transaction():
        conn.execute("INSERT INTO uploads (name) VALUES ('a.png')")
        with libpq_trace(conn) as plain:
            job_a = noop.enqueue(conn, upload="a.png")
        with libpq_trace(conn) as scheduled:
            job_b = noop.options(delay=60, unique_key="u-b", priority=9).enqueue(conn, upload="b.png")
        with libpq_trace(conn) as duplicate:
            job_c = noop.options(unique_key="u-b").enqueue(conn, upload="c.png")
    assert plain.round_trips == 1, plain.text
    assert scheduled.round_trips == 1, scheduled.text
    assert duplicate.round_trips == 1, duplicate.text
    assert job_c == job_b
    assert count_uploads(conn) == 1
    assert must_get_job(conn, job_a)["args"] == {"upload": "a.png"}
    assert must_get_job(conn, job_b)["state"] == "scheduled"

    with conn.transaction():
        conn.execute("INSERT INTO uploads (name) VALUES ('d.png')")
        job_d = noop.enqueue(conn, upload="d.png")
        raise psycopg.Rollback()
    assert get_job(conn, job_d) is None
    assert count_uploads(conn) == 1
    assert count_jobs(conn) == 2


async def test_single_async_enqueue_is_one_round_trip(dsn: str, conn: Conn, noop: NoopTask) -> None:
    conn.execute("CREATE TABLE uploads (id serial PRIMARY KEY, name text NOT NULL)")
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as aconn:
        async with aconn.transaction():
            await aconn.execute("INSERT INTO uploads (name) VALUES ('a.png')")
            with libpq_trace(aconn) as trace:
                job_id = await noop.enqueue_async(aconn, upload="a.png")
        assert trace.round_trips == 1, trace.text
        async with aconn.transaction():
            await aconn.execute("INSERT INTO uploads (name) VALUES ('b.png')")
            dropped = await noop.enqueue_async(aconn, upload="b.png")
            raise psycopg.Rollback()
    assert get_job(conn, job_id) is not None
    assert get_job(conn, dropped) is None
    assert count_uploads(conn) == 1


# -- options ---------------------------------------------------------------------------


def test_options_run_at_future_is_scheduled(conn: Conn, noop: NoopTask) -> None:
    run_at = (db_now(conn) + timedelta(hours=1)).replace(microsecond=123456)
    job_id = noop.options(run_at=run_at).enqueue(conn)
    job = must_get_job(conn, job_id)
    assert job["state"] == "scheduled"
    assert job["run_at"] == run_at


def test_options_run_at_in_another_timezone(conn: Conn, noop: NoopTask) -> None:
    ist = timezone(timedelta(hours=5, minutes=30))
    run_at = datetime(2099, 6, 1, 12, 0, tzinfo=ist)
    job = must_get_job(conn, noop.options(run_at=run_at).enqueue(conn))
    assert job["run_at"] == run_at
    assert job["run_at"] == datetime(2099, 6, 1, 6, 30, tzinfo=UTC)
    assert job["state"] == "scheduled"


def test_options_run_at_past_is_available(conn: Conn, noop: NoopTask) -> None:
    run_at = datetime(2001, 2, 3, 4, 5, 6, tzinfo=UTC)
    job_id = noop.options(run_at=run_at).enqueue(conn)
    job = must_get_job(conn, job_id)
    assert job["state"] == "available"
    assert job["run_at"] == run_at


@pytest.mark.parametrize("delay", [90, 90.5, timedelta(minutes=1, seconds=30.5)])
def test_options_delay_schedules_relative_to_database_clock(
    conn: Conn, noop: NoopTask, delay: float | timedelta
) -> None:
    seconds = delay.total_seconds() if isinstance(delay, timedelta) else float(delay)
    with conn.transaction():
        tx_now = db_now(conn)  # now() is the transaction's start on the server
        job_id = noop.options(delay=delay).enqueue(conn)
    job = must_get_job(conn, job_id)
    assert job["state"] == "scheduled"
    assert abs((job["run_at"] - tx_now).total_seconds() - seconds) < 0.001

    # Outside an explicit transaction: compare with the server clock, with tolerance.
    before = db_now(conn)
    job_id = noop.options(delay=delay).enqueue(conn)
    after = db_now(conn)
    run_at = must_get_job(conn, job_id)["run_at"]
    assert before + timedelta(seconds=seconds) <= run_at <= after + timedelta(seconds=seconds)
    assert abs((run_at - after).total_seconds() - seconds) < 1.0


def test_options_zero_delay_is_available(conn: Conn, noop: NoopTask) -> None:
    job_id = noop.options(delay=0).enqueue(conn)
    assert must_get_job(conn, job_id)["state"] == "available"


def test_options_priority_queue_max_attempts_stored(conn: Conn, app: pgqueue.App) -> None:
    @app.task(name="report", queue="reports", priority=2, max_attempts=9)
    def report(n: int) -> None:
        return None

    plain = report.enqueue(conn, n=0)
    custom = report.options(priority=-5, queue="urgent", max_attempts=3).enqueue(conn, n=1)
    zero = report.options(priority=0).enqueue(conn, n=2)

    job = must_get_job(conn, plain)
    assert (job["queue"], job["priority"], job["max_attempts"]) == ("reports", 2, None)
    job = must_get_job(conn, custom)
    assert (job["queue"], job["priority"], job["max_attempts"]) == ("urgent", -5, 3)
    assert must_get_job(conn, zero)["priority"] == 0  # an explicit 0 overrides the task's 2


def test_options_returns_a_copy_and_chains(conn: Conn, noop: NoopTask) -> None:
    high = noop.options(priority=7)
    both = high.options(queue="other")
    job = must_get_job(conn, both.enqueue(conn))
    assert (job["queue"], job["priority"]) == ("other", 7)
    job = must_get_job(conn, high.enqueue(conn))
    assert (job["queue"], job["priority"]) == ("work", 7)
    job = must_get_job(conn, noop.enqueue(conn))
    assert (job["queue"], job["priority"]) == ("work", 0)


@pytest.mark.parametrize(
    ("options", "match"),
    [
        ({"run_at": datetime(2030, 1, 1, tzinfo=UTC), "delay": 5}, "run_at or delay"),
        ({"delay": -1}, "delay"),
        ({"delay": timedelta(days=-1)}, "delay"),
        ({"delay": float("nan")}, "delay"),
        ({"max_attempts": 0}, "max_attempts"),
        ({"unique_key": ""}, "unique_key"),
        ({"unique_key": "k" * 201}, "unique_key"),
    ],
)
def test_options_invalid_values_raise_config_error(
    conn: Conn, noop: NoopTask, options: dict[str, Any], match: str
) -> None:
    with pytest.raises(pgqueue.ConfigError, match=match):
        noop.options(**options).enqueue(conn)
    assert count_jobs(conn) == 0


# -- arguments -------------------------------------------------------------------------


def test_args_round_trip_through_the_function(conn: Conn, noop: NoopTask) -> None:
    job_id = noop.enqueue(conn, **ROUND_TRIP_ARGS)
    assert must_get_job(conn, job_id)["args"] == ROUND_TRIP_ARGS


def test_no_args_store_an_empty_object(conn: Conn, noop: NoopTask) -> None:
    assert must_get_job(conn, noop.enqueue(conn))["args"] == {}


def test_literal_backslash_u0000_text_is_not_mistaken_for_nul(conn: Conn, noop: NoopTask) -> None:
    # A string holding backslash, 'u', '0', '0', '0', '0' is legal in jsonb; only a real
    # U+0000 character is not.
    value = "C:\\u0000\\dir"
    job_id = noop.enqueue(conn, path=value)
    assert must_get_job(conn, job_id)["args"] == {"path": value}
