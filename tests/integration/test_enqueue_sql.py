"""unique_key deduplication (also under racing transactions), the SQL function
pgqueue.enqueue() and the NOTIFY each enqueuing transaction sends.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
from datetime import UTC, datetime

import psycopg
import pytest

import pgqueue
from pgqueue.models import JobState
from tests.conftest import async_wait_until, job_states, running_worker, wait_until
from tests.enqueue_support import (
    CHANNEL,
    Conn,
    NoopTask,
    claim,
    complete,
    count_jobs,
    db_now,
    must_get_job,
    notifications_until_sentinel,
)

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
