"""Producer side: enqueue in the caller's transaction, options, unique keys, the SQL
function, NOTIFY, bulk COPY and the errors raised for bad input.

Everything runs against a real PostgreSQL (one fresh migrated database per test).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
import os
import tempfile
import uuid
from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import psycopg
import pytest
from psycopg import pq, sql
from psycopg.rows import dict_row

import pgqueue
from pgqueue._jobs_db import Outcome, outcome_params
from pgqueue._sql import queries_for
from pgqueue.models import JobState
from tests.conftest import async_wait_until, job_states, running_worker, wait_until

Conn = psycopg.Connection[Any]
AConn = psycopg.AsyncConnection[Any]
NoopTask = pgqueue.Task[..., None]

CHANNEL = "pgqueue_wakeup"
Q = queries_for("pgqueue")


# -- fixtures and helpers ---------------------------------------------------------------


@pytest.fixture
def noop(app: pgqueue.App) -> NoopTask:
    """A task on queue 'work' with max_attempts=4 and priority 0."""

    @app.task(name="noop", queue="work", max_attempts=4)
    def noop_fn(**kwargs: Any) -> None:
        return None

    return noop_fn


@pytest.fixture
def uploads(conn: Conn) -> Conn:
    """The caller's own table, to check atomicity with the caller's writes."""
    conn.execute("CREATE TABLE uploads (id serial PRIMARY KEY, name text NOT NULL)")
    return conn


def get_job(conn: Conn, job_id: int) -> dict[str, Any] | None:
    with conn.cursor(row_factory=dict_row) as cur:
        cur.execute(
            "SELECT id, state::text AS state, queue, task, args, priority, run_at, attempt, max_attempts,"
            " unique_key, errors, finished_at FROM pgqueue.jobs WHERE id = %s",
            [job_id],
        )
        return cur.fetchone()


def must_get_job(conn: Conn, job_id: int) -> dict[str, Any]:
    job = get_job(conn, job_id)
    assert job is not None, f"job {job_id} does not exist"
    return job


def count_jobs(conn: Conn) -> int:
    row = conn.execute("SELECT count(*) FROM pgqueue.jobs").fetchone()
    assert row is not None
    return int(row[0])


def count_uploads(conn: Conn) -> int:
    row = conn.execute("SELECT count(*) FROM uploads").fetchone()
    assert row is not None
    return int(row[0])


def db_now(conn: Conn) -> datetime:
    row = conn.execute("SELECT now()").fetchone()
    assert row is not None
    value: datetime = row[0]
    return value


@dataclass
class Trace:
    text: str = ""

    @property
    def round_trips(self) -> int:
        """Server replies that end a request cycle (one per client round trip)."""
        return sum(1 for line in self.text.splitlines() if line.startswith("B") and "\tReadyForQuery" in line)

    @property
    def frontend_messages(self) -> int:
        return sum(1 for line in self.text.splitlines() if line.startswith("F"))


@contextmanager
def libpq_trace(conn: Conn | AConn) -> Iterator[Trace]:
    """Record every protocol message libpq exchanges on ``conn`` during the block."""
    result = Trace()
    with tempfile.TemporaryFile("w+") as f:
        conn.pgconn.trace(f.fileno())
        conn.pgconn.set_trace_flags(pq.Trace.SUPPRESS_TIMESTAMPS | pq.Trace.REGRESS_MODE)
        try:
            yield result
        finally:
            conn.pgconn.untrace()
            f.seek(0)
            result.text = f.read()


def claim(conn: Conn, queue: str, tasks: dict[str, int], limit: int = 10) -> list[tuple[Any, ...]]:
    """Claim jobs with the worker's own claim query."""
    return conn.execute(
        Q["job_claim_one_queue"],
        {
            "queue": queue,
            "tasks": list(tasks),
            "task_max_attempts": list(tasks.values()),
            "limit": limit,
            "lease": 30.0,
            "worker_id": "test-worker",
        },
    ).fetchall()


def complete(conn: Conn, job_id: int, token: uuid.UUID, state: JobState = JobState.COMPLETED) -> None:
    """Record an outcome with the worker's own query; asserts the lease was accepted."""
    rows = conn.execute(Q["job_record_outcomes"], outcome_params([(job_id, token, Outcome(state))])).fetchall()
    assert [r[0] for r in rows] == [job_id]


def notifications_until_sentinel(listener: Conn, sender: Conn) -> list[psycopg.Notify]:
    """Everything ``listener`` received before a sentinel sent now by ``sender``.

    Notifications are delivered in commit order, so once the sentinel (committed after
    everything the test did) arrives, every earlier notification has arrived too: no
    arbitrary waiting needed to assert that something was NOT sent.
    """
    sentinel = f"sentinel-{uuid.uuid4().hex}"
    assert sender.autocommit
    sender.execute("SELECT pg_notify(%s, %s)", [CHANNEL, sentinel])
    got: list[psycopg.Notify] = []
    for notify in listener.notifies(timeout=15):
        if notify.payload == sentinel:
            return got
        got.append(notify)
    raise AssertionError(f"sentinel notification never arrived; received {got}")


@pytest.fixture
def listener(dsn: str) -> Iterator[Conn]:
    with psycopg.connect(dsn, autocommit=True) as c:
        c.execute(sql.SQL("LISTEN {}").format(sql.Identifier(CHANNEL)))
        yield c


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


ROUND_TRIP_ARGS: dict[str, Any] = {
    "text": "héllo wörld 😀 — \t tab \n newline \\ backslash \"quote\" 'single'",
    "big": 2**62,
    "neg": -17,
    "float": 0.1,
    "bool": True,
    "none": None,
    "list": [1, "two", [3.5], {"four": 4}],
    "nested": {"a": {"b": {"c": []}}},
    "empty": "",
}


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


# -- unique_key ------------------------------------------------------------------------


def test_unique_key_returns_existing_live_job(conn: Conn, noop: NoopTask) -> None:
    first = noop.options(unique_key="img-42").enqueue(conn, v=1)
    again = noop.options(unique_key="img-42").enqueue(conn, v=2)
    other = noop.options(unique_key="img-43").enqueue(conn, v=3)
    assert again == first
    assert other != first
    assert must_get_job(conn, first)["args"] == {"v": 1}  # the first job is unchanged
    rows = conn.execute("SELECT unique_key, count(*) FROM pgqueue.jobs GROUP BY 1 ORDER BY 1").fetchall()
    assert rows == [("img-42", 1), ("img-43", 1)]


def test_unique_key_dedups_scheduled_and_running_jobs(conn: Conn, noop: NoopTask) -> None:
    scheduled = noop.options(unique_key="s", delay=3600).enqueue(conn)
    assert noop.options(unique_key="s").enqueue(conn) == scheduled
    assert must_get_job(conn, scheduled)["state"] == "scheduled"

    running = noop.options(unique_key="r").enqueue(conn)
    [claimed] = claim(conn, "work", {"noop": 4})
    assert claimed[0] == running
    assert must_get_job(conn, running)["state"] == "running"
    assert noop.options(unique_key="r").enqueue(conn) == running
    assert count_jobs(conn) == 2


@pytest.mark.parametrize("final", [JobState.COMPLETED, JobState.DISCARDED, JobState.CANCELLED])
def test_unique_key_is_free_once_the_job_is_finished(conn: Conn, noop: NoopTask, final: JobState) -> None:
    first = noop.options(unique_key="once").enqueue(conn)
    [claimed] = claim(conn, "work", {"noop": 4})
    assert claimed[0] == first
    complete(conn, first, claimed[7], final)
    assert must_get_job(conn, first)["state"] == final.value

    second = noop.options(unique_key="once").enqueue(conn)
    assert second != first
    assert must_get_job(conn, second)["state"] == "available"
    assert noop.options(unique_key="once").enqueue(conn) == second  # live again: dedups
    assert job_states(conn) == {final.value: 1, "available": 1}


async def test_unique_key_free_after_worker_completes(conn: Conn, app: pgqueue.App) -> None:
    seen: list[int] = []

    @app.task(name="keyed")
    def keyed(n: int) -> None:
        seen.append(n)

    first = keyed.options(unique_key="k").enqueue(conn, n=1)
    assert keyed.options(unique_key="k").enqueue(conn, n=2) == first
    async with running_worker(app):
        await async_wait_until(lambda: job_states(conn) == {"completed": 1})
    assert seen == [1]
    second = keyed.options(unique_key="k").enqueue(conn, n=3)
    assert second != first
    assert must_get_job(conn, second)["args"] == {"n": 3}
    assert job_states(conn) == {"completed": 1, "available": 1}


def _backend_waits_on_lock(conn: Conn, pid: int) -> bool:
    row = conn.execute("SELECT wait_event_type FROM pg_stat_activity WHERE pid = %s", [pid]).fetchone()
    return row is not None and row[0] == "Lock"


@pytest.mark.parametrize("first_commits", [True, False], ids=["first-commits", "first-rolls-back"])
def test_unique_key_race_between_open_transactions(dsn: str, conn: Conn, noop: NoopTask, first_commits: bool) -> None:
    with (
        psycopg.connect(dsn) as first,
        psycopg.connect(dsn) as second,
        concurrent.futures.ThreadPoolExecutor(1) as pool,
    ):
        second.execute("SET lock_timeout = '30s'")
        second.commit()
        first_id = noop.options(unique_key="race").enqueue(first, who="first")
        pending = pool.submit(lambda: noop.options(unique_key="race").enqueue(second, who="second"))
        # The second enqueue must wait on the first's uncommitted key, not return early.
        wait_until(lambda: _backend_waits_on_lock(conn, second.info.backend_pid))
        assert not pending.done()
        if first_commits:
            first.commit()
        else:
            first.rollback()
        second_id = pending.result(timeout=30)
        second.commit()

    rows = conn.execute("SELECT id, args->>'who' FROM pgqueue.jobs WHERE unique_key = 'race'").fetchall()
    if first_commits:
        assert second_id == first_id
        assert rows == [(first_id, "first")]
    else:
        assert second_id != first_id
        assert rows == [(second_id, "second")]
    assert count_jobs(conn) == 1


async def test_unique_key_race_async(dsn: str, conn: Conn, noop: NoopTask) -> None:
    async with (
        await psycopg.AsyncConnection.connect(dsn) as first,
        await psycopg.AsyncConnection.connect(dsn) as second,
    ):
        first_id = await noop.options(unique_key="arace").enqueue_async(first, who="first")
        pending = asyncio.create_task(noop.options(unique_key="arace").enqueue_async(second, who="second"))
        await async_wait_until(lambda: _backend_waits_on_lock(conn, second.info.backend_pid))
        assert not pending.done()
        await first.commit()
        assert await asyncio.wait_for(pending, 30) == first_id
        await second.commit()
    assert conn.execute("SELECT count(*) FROM pgqueue.jobs WHERE unique_key = 'arace'").fetchone() == (1,)


# -- the SQL function --------------------------------------------------------------------


def test_sql_enqueue_with_named_arguments(conn: Conn) -> None:
    row = conn.execute(
        """SELECT pgqueue.enqueue('t', '{"a":1}', queue => 'q', priority => 3, unique_key => 'k')"""
    ).fetchone()
    assert row is not None
    job = must_get_job(conn, row[0])
    assert job["task"] == "t"
    assert job["args"] == {"a": 1}
    assert (job["queue"], job["priority"], job["unique_key"], job["state"]) == ("q", 3, "k", "available")
    assert job["max_attempts"] is None
    assert job["attempt"] == 0

    again = conn.execute("SELECT pgqueue.enqueue('t', unique_key => 'k')").fetchone()
    assert again == (row[0],)
    assert count_jobs(conn) == 1


def test_sql_enqueue_defaults(conn: Conn) -> None:
    with conn.transaction():
        tx_now = db_now(conn)
        row = conn.execute("SELECT pgqueue.enqueue('only.a.name')").fetchone()
    assert row is not None
    job = must_get_job(conn, row[0])
    assert (job["queue"], job["priority"], job["args"], job["state"]) == ("default", 0, {}, "available")
    assert job["run_at"] == tx_now
    assert job["unique_key"] is None


def test_sql_enqueue_run_at_future_is_scheduled(conn: Conn) -> None:
    row = conn.execute("SELECT pgqueue.enqueue('t', run_at => now() + interval '1 hour', max_attempts => 2)").fetchone()
    assert row is not None
    job = must_get_job(conn, row[0])
    assert job["state"] == "scheduled"
    assert job["max_attempts"] == 2


def test_sql_enqueue_unknown_task_and_null_max_attempts_filled_at_claim(conn: Conn, noop: NoopTask) -> None:
    unknown = conn.execute("SELECT pgqueue.enqueue('no.such.task', queue => 'work')").fetchone()
    mine = conn.execute("SELECT pgqueue.enqueue('noop', queue => 'work')").fetchone()
    explicit = conn.execute("SELECT pgqueue.enqueue('noop', queue => 'work', max_attempts => 2)").fetchone()
    assert unknown is not None
    assert mine is not None
    assert explicit is not None
    for row in (unknown, mine, explicit):
        assert must_get_job(conn, row[0])["state"] == "available"
    assert must_get_job(conn, mine[0])["max_attempts"] is None

    claimed = {r[0]: r for r in claim(conn, "work", {"noop": 7})}
    assert set(claimed) == {mine[0], explicit[0]}  # a worker never claims tasks it does not know
    assert must_get_job(conn, mine[0])["max_attempts"] == 7  # the task's own setting
    assert must_get_job(conn, explicit[0])["max_attempts"] == 2  # an explicit value wins
    assert claimed[mine[0]][6] == 7
    unknown_job = must_get_job(conn, unknown[0])
    assert (unknown_job["state"], unknown_job["max_attempts"]) == ("available", None)


@pytest.mark.parametrize("queue", ["", "a b", "x" * 65, "q;drop table", "-lead", "ünï"])
def test_sql_enqueue_invalid_queue_raises(conn: Conn, queue: str) -> None:
    with pytest.raises(psycopg.errors.InvalidParameterValue, match="queue") as info:
        conn.execute("SELECT pgqueue.enqueue('t', queue => %s)", [queue])
    assert queue in str(info.value)
    assert count_jobs(conn) == 0


def test_sql_enqueue_rejects_bad_values(conn: Conn) -> None:
    with pytest.raises(psycopg.errors.NumericValueOutOfRange, match="priority"):
        conn.execute("SELECT pgqueue.enqueue('t', priority => 40000)")
    with pytest.raises(psycopg.errors.NullValueNotAllowed, match="must not be NULL"):
        conn.execute("SELECT pgqueue.enqueue(NULL)")
    with pytest.raises(psycopg.errors.NullValueNotAllowed, match="must not be NULL"):
        conn.execute("SELECT pgqueue.enqueue('t', queue => NULL)")
    with pytest.raises(psycopg.errors.CheckViolation, match="jobs_args_object"):
        conn.execute("SELECT pgqueue.enqueue('t', '[1, 2]')")
    with pytest.raises(psycopg.errors.CheckViolation, match="jobs_task_length"):
        conn.execute("SELECT pgqueue.enqueue(repeat('t', 201))")
    assert count_jobs(conn) == 0


def test_sql_enqueue_queue_name_cannot_inject(conn: Conn) -> None:
    with pytest.raises(psycopg.errors.InvalidParameterValue):
        conn.execute("SELECT pgqueue.enqueue('t', queue => 'q''; DROP TABLE pgqueue.jobs; --')")
    assert conn.execute("SELECT to_regclass('pgqueue.jobs') IS NOT NULL").fetchone() == (True,)


# -- NOTIFY ----------------------------------------------------------------------------


def test_one_notification_per_queue_per_transaction(conn: Conn, listener: Conn, noop: NoopTask) -> None:
    with conn.transaction():
        for i in range(50):
            noop.enqueue(conn, i=i)
        for i in range(50):
            noop.options(queue="other").enqueue(conn, i=i)
        conn.execute("SELECT pgqueue.enqueue('t', queue => 'work')")
    got = notifications_until_sentinel(listener, conn)
    assert sorted(n.payload for n in got) == ["other", "work"]
    assert {n.channel for n in got} == {CHANNEL}
    assert count_jobs(conn) == 101


def test_notification_per_committed_transaction(conn: Conn, listener: Conn, noop: NoopTask) -> None:
    for _ in range(3):
        with conn.transaction():
            noop.enqueue(conn)
            noop.enqueue(conn)
    got = notifications_until_sentinel(listener, conn)
    assert [n.payload for n in got] == ["work", "work", "work"]


def test_no_notification_for_rollback_or_future_jobs(conn: Conn, listener: Conn, noop: NoopTask) -> None:
    with conn.transaction():
        for i in range(10):
            noop.enqueue(conn, i=i)
        raise psycopg.Rollback()
    with conn.transaction():
        noop.options(delay=3600).enqueue(conn)
        noop.options(run_at=datetime(2100, 1, 1, tzinfo=UTC), queue="later").enqueue(conn)
        conn.execute("SELECT pgqueue.enqueue('t', run_at => now() + interval '1 day')")
    noop.options(unique_key="dup").enqueue(conn)
    got = notifications_until_sentinel(listener, conn)
    assert [n.payload for n in got] == ["work"]  # only the keyed job's own transaction
    noop.options(unique_key="dup").enqueue(conn)  # deduplicated: nothing new to wake for
    assert notifications_until_sentinel(listener, conn) == []
    assert job_states(conn) == {"scheduled": 3, "available": 1}


def test_enqueue_many_notifies_once_per_due_queue(conn: Conn, listener: Conn, noop: NoopTask) -> None:
    jobs = [noop.job(i=i) for i in range(500)]
    jobs += [noop.options(queue="b").job(i=i) for i in range(500)]
    jobs += [noop.options(queue="future", delay=600).job(i=i) for i in range(10)]
    jobs += [noop.options(queue="b", unique_key=f"k{i}").job(i=i) for i in range(10)]
    with conn.transaction():
        assert noop.app.enqueue_many(conn, jobs) == len(jobs)
    got = notifications_until_sentinel(listener, conn)
    assert sorted(n.payload for n in got) == ["b", "work"]

    with conn.transaction():
        noop.app.enqueue_many(conn, [noop.options(delay=600).job()])
    with conn.transaction():
        noop.app.enqueue_many(conn, [noop.job()])
        raise psycopg.Rollback()
    assert notifications_until_sentinel(listener, conn) == []


# -- enqueue_many (COPY) ---------------------------------------------------------------


def test_enqueue_many_ten_thousand_from_a_generator(dsn: str, conn: Conn, app: pgqueue.App, noop: NoopTask) -> None:
    consumed = 0

    def specs() -> Iterator[pgqueue.JobSpec]:
        nonlocal consumed
        for i in range(10_000):
            consumed += 1
            yield noop.job(i=i, name=f"item-{i}")

    with conn.transaction():
        assert app.enqueue_many(conn, specs()) == 10_000
        with psycopg.connect(dsn, autocommit=True) as other:
            assert count_jobs(other) == 0  # same transaction as the caller's
    assert consumed == 10_000
    assert job_states(conn) == {"available": 10_000}
    row = conn.execute(
        "SELECT count(*), count(DISTINCT id), sum((args->>'i')::int), min(queue), max(queue), min(task),"
        " bool_and(args->>'name' = 'item-' || (args->>'i')), bool_and(max_attempts IS NULL),"
        " bool_and(priority = 0) FROM pgqueue.jobs"
    ).fetchone()
    assert row == (10_000, 10_000, sum(range(10_000)), "work", "work", "noop", True, True, True)


def test_enqueue_many_delays_schedule(conn: Conn, app: pgqueue.App, noop: NoopTask) -> None:
    with conn.transaction():
        tx_now = db_now(conn)
        count = app.enqueue_many(
            conn,
            [noop.options(delay=120).job(i=i) for i in range(100)]
            + [noop.options(delay=timedelta(hours=1)).job(i=i) for i in range(100, 150)]
            + [noop.options(run_at=tx_now + timedelta(days=1)).job(i=150)]
            + [noop.options(run_at=tx_now - timedelta(days=1)).job(i=151)]
            + [noop.options(delay=0).job(i=152)],
        )
    assert count == 153
    rows = conn.execute("SELECT (args->>'i')::int, state::text, run_at FROM pgqueue.jobs ORDER BY 1").fetchall()
    for i, state, run_at in rows:
        if i < 100:
            assert (state, run_at) == ("scheduled", tx_now + timedelta(seconds=120))
        elif i < 150:
            assert (state, run_at) == ("scheduled", tx_now + timedelta(hours=1))
        elif i == 150:
            assert (state, run_at) == ("scheduled", tx_now + timedelta(days=1))
        elif i == 151:
            assert (state, run_at) == ("available", tx_now - timedelta(days=1))
        else:
            assert (state, run_at) == ("available", tx_now)


def test_enqueue_many_keeps_options_and_tricky_args(conn: Conn, app: pgqueue.App, noop: NoopTask) -> None:
    app.enqueue_many(
        conn,
        [
            noop.options(priority=-3, queue="copyq", max_attempts=6).job(**ROUND_TRIP_ARGS),
            noop.job(),
        ],
    )
    rows = conn.execute(
        "SELECT queue, priority, max_attempts, args, task, attempt, errors, state::text FROM pgqueue.jobs ORDER BY id"
    ).fetchall()
    assert rows == [
        ("copyq", -3, 6, ROUND_TRIP_ARGS, "noop", 0, [], "available"),
        ("work", 0, None, {}, "noop", 0, [], "available"),
    ]


def test_enqueue_many_with_unique_keys(conn: Conn, app: pgqueue.App, noop: NoopTask) -> None:
    existing = noop.options(unique_key="k1").enqueue(conn, v="existing")
    jobs = (
        [noop.job(i=i) for i in range(100)]
        + [noop.options(unique_key="k1").job(v="dup-of-existing")]
        + [noop.options(unique_key="k2").job(v="new")]
        + [noop.options(unique_key="k2").job(v="dup-in-batch")]
        + [noop.options(unique_key="k3", delay=600).job(v="scheduled")]
    )
    with conn.transaction():
        app.enqueue_many(conn, jobs)
    rows = dict(
        conn.execute(
            "SELECT unique_key, array_agg(args->>'v' ORDER BY id) FROM pgqueue.jobs"
            " WHERE unique_key IS NOT NULL GROUP BY 1"
        ).fetchall()
    )
    assert rows == {"k1": ["existing"], "k2": ["new"], "k3": ["scheduled"]}
    assert must_get_job(conn, existing)["args"] == {"v": "existing"}
    assert count_jobs(conn) == 103
    assert job_states(conn) == {"available": 102, "scheduled": 1}


def test_enqueue_many_rollback_leaves_nothing(conn: Conn, app: pgqueue.App, noop: NoopTask) -> None:
    with conn.transaction():
        app.enqueue_many(conn, (noop.job(i=i) for i in range(1000)))
        app.enqueue_many(conn, [noop.options(unique_key="rk").job(), noop.options(delay=10).job()])
        assert count_jobs(conn) == 1002
        raise psycopg.Rollback()
    assert count_jobs(conn) == 0
    # The key was never taken.
    job_id = noop.options(unique_key="rk").enqueue(conn)
    assert must_get_job(conn, job_id)["unique_key"] == "rk"


def test_enqueue_many_empty(conn: Conn, app: pgqueue.App) -> None:
    assert app.enqueue_many(conn, []) == 0
    assert count_jobs(conn) == 0


async def test_enqueue_many_async(dsn: str, conn: Conn, app: pgqueue.App, noop: NoopTask) -> None:
    async def agen() -> AsyncIterator[pgqueue.JobSpec]:
        for i in range(2000):
            yield noop.job(i=i, src="agen")
        yield noop.options(unique_key="ak").job(src="agen")
        yield noop.options(delay=60).job(src="agen")

    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as aconn:
        async with aconn.transaction():
            assert await app.enqueue_many_async(aconn, agen()) == 2002
            assert await app.enqueue_many_async(aconn, [noop.job(i=i, src="list") for i in range(500)]) == 500
        async with aconn.transaction():
            await app.enqueue_many_async(aconn, [noop.job(src="rolled-back")])
            raise psycopg.Rollback()
    counts = dict(conn.execute("SELECT args->>'src', count(*) FROM pgqueue.jobs GROUP BY 1").fetchall())
    assert counts == {"agen": 2002, "list": 500}
    assert job_states(conn) == {"available": 2501, "scheduled": 1}
    assert conn.execute("SELECT count(*) FROM pgqueue.jobs WHERE unique_key = 'ak'").fetchone() == (1,)


# -- bad input -------------------------------------------------------------------------


def test_unknown_task_name(conn: Conn, app: pgqueue.App, noop: NoopTask) -> None:
    @app.task(name="alpha")
    def alpha() -> None:
        return None

    with pytest.raises(pgqueue.UnknownTaskError) as info:
        app.enqueue(conn, "nope.missing", x=1)
    message = str(info.value)
    assert "nope.missing" in message
    assert "alpha" in message
    assert "noop" in message
    assert isinstance(info.value, pgqueue.EnqueueError)
    assert count_jobs(conn) == 0


async def test_unknown_task_name_async(dsn: str, conn: Conn, app: pgqueue.App) -> None:
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as aconn:
        with pytest.raises(pgqueue.UnknownTaskError, match="ghost"):
            await app.enqueue_async(aconn, "ghost")
    assert count_jobs(conn) == 0


class _Opaque:
    pass


@pytest.mark.parametrize(
    "bad",
    [{1, 2}, _Opaque(), datetime(2024, 1, 1, tzinfo=UTC), b"bytes", [1, {2}], {"deep": {"x": object()}}],
    ids=["set", "object", "datetime", "bytes", "nested-set", "nested-object"],
)
def test_non_json_argument_is_named(conn: Conn, noop: NoopTask, bad: Any) -> None:
    with pytest.raises(pgqueue.InvalidArgumentsError) as info:
        noop.enqueue(conn, good=1, the_bad_one=bad)
    assert "the_bad_one" in str(info.value)
    assert "good" not in str(info.value).replace("the_bad_one", "")
    with pytest.raises(pgqueue.InvalidArgumentsError, match="the_bad_one"):
        noop.job(the_bad_one=bad)
    assert count_jobs(conn) == 0


@pytest.mark.parametrize("value", [float("nan"), float("inf"), -float("inf"), [1.0, float("nan")]])
def test_non_finite_floats_rejected(conn: Conn, noop: NoopTask, value: Any) -> None:
    with pytest.raises(pgqueue.InvalidArgumentsError, match="ratio"):
        noop.enqueue(conn, ratio=value)
    assert count_jobs(conn) == 0


@pytest.mark.parametrize(
    "args",
    [{"s": "a\x00b"}, {"s": ["ok", "\x00"]}, {"s": {"k\x00ey": 1}}, {"s\x00": 1}],
    ids=["value", "in-list", "in-nested-key", "in-arg-name"],
)
def test_nul_character_rejected(conn: Conn, noop: NoopTask, args: dict[str, Any]) -> None:
    with pytest.raises(pgqueue.InvalidArgumentsError, match="NUL"):
        noop.enqueue(conn, **args)
    assert count_jobs(conn) == 0


def test_lone_surrogate_is_named(conn: Conn, noop: NoopTask) -> None:
    with pytest.raises(pgqueue.InvalidArgumentsError, match="broken"):
        noop.enqueue(conn, fine="ok", broken="\ud800")
    assert count_jobs(conn) == 0


def test_payload_limit_is_exact(dsn: str, conn: Conn) -> None:
    app = pgqueue.App(dsn=dsn, max_payload_bytes=100)

    @app.task(name="small")
    def small(s: str) -> None:
        return None

    fits = "é" * 46  # {"s":"…"} is 8 bytes plus 2 bytes per é: exactly 100
    job_id = small.enqueue(conn, s=fits)
    assert must_get_job(conn, job_id)["args"] == {"s": fits}
    with pytest.raises(pgqueue.PayloadTooLargeError) as info:
        small.enqueue(conn, s=fits + "x")
    assert "101 bytes" in str(info.value)
    assert "100-byte limit" in str(info.value)
    with pytest.raises(pgqueue.PayloadTooLargeError):
        small.job(s="y" * 1000)
    assert count_jobs(conn) == 1


def test_server_side_payload_limit(dsn: str, conn: Conn) -> None:
    from pgqueue.migrate import migrate, payload_limit

    app = pgqueue.App(dsn=dsn, max_payload_bytes=16 * 1024 * 1024)

    @app.task(name="big")
    def big(blob: str) -> None:
        return None

    assert payload_limit(conn, "pgqueue") == 8 * 1024 * 1024  # the shipped default
    migrate(conn, "pgqueue", max_payload_bytes=1024 * 1024)
    assert payload_limit(conn, "pgqueue") == 1024 * 1024
    blob = os.urandom(1024 * 1024).hex()  # 2 MiB of incompressible text
    with pytest.raises(pgqueue.PayloadTooLargeError, match="server"):
        big.enqueue(conn, blob=blob)
    with pytest.raises(pgqueue.PayloadTooLargeError, match="server"):
        app.enqueue_many(conn, [big.job(blob=blob)])
    assert count_jobs(conn) == 0
    # Raising the cap lets the same payload in, intact.
    migrate(conn, "pgqueue", max_payload_bytes=4 * 1024 * 1024)
    job_id = big.enqueue(conn, blob=blob)
    row = conn.execute("SELECT args->>'blob' FROM pgqueue.jobs WHERE id = %s", [job_id]).fetchone()
    assert row is not None
    assert row[0] == blob


INVALID_QUEUES = ["", "a b", "x" * 65, "q;drop table", "-dash", "tab\t", "ünï"]


@pytest.mark.parametrize("queue", INVALID_QUEUES)
def test_invalid_queue_names_in_options(conn: Conn, noop: NoopTask, queue: str) -> None:
    with pytest.raises(pgqueue.InvalidQueueError, match="queue"):
        noop.options(queue=queue).enqueue(conn)
    with pytest.raises(pgqueue.InvalidQueueError, match="queue"):
        noop.options(queue=queue).job()
    assert count_jobs(conn) == 0


@pytest.mark.parametrize("queue", INVALID_QUEUES)
def test_invalid_queue_names_in_task_declaration(app: pgqueue.App, queue: str) -> None:
    with pytest.raises(pgqueue.InvalidQueueError, match="queue"):
        app.task(name="declared", queue=queue)(default_named)
    assert "declared" not in app.tasks


def test_longest_valid_queue_name(conn: Conn, noop: NoopTask) -> None:
    queue = "Q" + "x_.:-9" * 10 + "abc"
    assert len(queue) == 64
    assert must_get_job(conn, noop.options(queue=queue).enqueue(conn))["queue"] == queue


@pytest.mark.parametrize("priority", [32768, -32769, 10**6, True, 1.5, "1"])
def test_priority_out_of_range(conn: Conn, noop: NoopTask, priority: Any) -> None:
    with pytest.raises(pgqueue.ConfigError, match="priority"):
        noop.options(priority=priority).enqueue(conn)
    assert count_jobs(conn) == 0


def test_priority_bounds_are_accepted(conn: Conn, app: pgqueue.App, noop: NoopTask) -> None:
    hi = noop.options(priority=32767).enqueue(conn)
    lo = noop.options(priority=-32768).enqueue(conn)
    assert must_get_job(conn, hi)["priority"] == 32767
    assert must_get_job(conn, lo)["priority"] == -32768
    with pytest.raises(pgqueue.ConfigError, match="priority"):
        app.task(name="too.high", priority=40000)(default_named)


def test_naive_run_at_rejected(conn: Conn, noop: NoopTask) -> None:
    with pytest.raises(pgqueue.ConfigError, match="timezone"):
        noop.options(run_at=datetime(2030, 1, 1, 12, 0)).enqueue(conn)
    assert count_jobs(conn) == 0


def test_schema_not_installed(empty_dsn: str, noop: NoopTask) -> None:
    with psycopg.connect(empty_dsn, autocommit=True) as c:
        with pytest.raises(pgqueue.SchemaNotInstalledError, match="pgqueue migrate"):
            noop.enqueue(c, x=1)
        with pytest.raises(pgqueue.SchemaNotInstalledError, match="pgqueue migrate"):
            noop.app.enqueue_many(c, [noop.job(x=1)])
        with pytest.raises(pgqueue.SchemaNotInstalledError, match="pgqueue migrate"):
            noop.options(unique_key="k").enqueue(c)
        assert c.execute("SELECT count(*) FROM pg_namespace WHERE nspname = 'pgqueue'").fetchone() == (0,)


async def test_schema_not_installed_async(empty_dsn: str, noop: NoopTask) -> None:
    async with await psycopg.AsyncConnection.connect(empty_dsn, autocommit=True) as aconn:
        with pytest.raises(pgqueue.SchemaNotInstalledError, match="pgqueue migrate"):
            await noop.enqueue_async(aconn, x=1)
        with pytest.raises(pgqueue.SchemaNotInstalledError, match="pgqueue migrate"):
            await noop.app.enqueue_many_async(aconn, [noop.job(x=1)])


def test_client_side_rejection_leaves_callers_transaction_usable(uploads: Conn, noop: NoopTask) -> None:
    conn = uploads
    app = noop.app
    with conn.transaction():
        conn.execute("INSERT INTO uploads (name) VALUES ('kept.png')")
        rejections: list[tuple[type[Exception], Any]] = [
            (pgqueue.InvalidArgumentsError, lambda: noop.enqueue(conn, bad={1})),
            (pgqueue.InvalidArgumentsError, lambda: noop.enqueue(conn, bad=float("nan"))),
            (pgqueue.InvalidArgumentsError, lambda: noop.enqueue(conn, bad="\x00")),
            (pgqueue.InvalidQueueError, lambda: noop.options(queue="a b").enqueue(conn)),
            (pgqueue.ConfigError, lambda: noop.options(priority=99999).enqueue(conn)),
            (pgqueue.ConfigError, lambda: noop.options(run_at=datetime(2030, 1, 1)).enqueue(conn)),
            (pgqueue.UnknownTaskError, lambda: app.enqueue(conn, "missing")),
            (pgqueue.PayloadTooLargeError, lambda: noop.enqueue(conn, big="x" * (2 * 1024 * 1024))),
        ]
        for error, call in rejections:
            with libpq_trace(conn) as trace, pytest.raises(error):
                call()
            assert trace.frontend_messages == 0, f"{error.__name__}: SQL was sent: {trace.text}"
            assert conn.info.transaction_status == pq.TransactionStatus.INTRANS
        job_id = noop.enqueue(conn, fine=True)
    assert count_uploads(conn) == 1
    assert must_get_job(conn, job_id)["args"] == {"fine": True}
    assert count_jobs(conn) == 1


@pytest.mark.parametrize("schema", ['a"; drop', "Upper", "1abc", "", "has space", "x" * 49, "sch-ema", "pg.q"])
def test_invalid_schema_names_rejected(dsn: str, schema: str) -> None:
    with pytest.raises(pgqueue.ConfigError, match="schema"):
        pgqueue.App(dsn=dsn, schema=schema)


def test_valid_schema_names_accepted(dsn: str) -> None:
    for schema in ("pgqueue", "jobs_custom", "_x", "a1", "x" * 48):
        assert pgqueue.App(dsn=dsn, schema=schema).schema == schema


def test_enqueue_with_json_text_args_is_not_double_encoded(conn: Conn, noop: NoopTask) -> None:
    # A string that looks like JSON stays a string.
    job_id = noop.enqueue(conn, payload=json.dumps({"a": 1}))
    assert must_get_job(conn, job_id)["args"] == {"payload": '{"a": 1}'}
