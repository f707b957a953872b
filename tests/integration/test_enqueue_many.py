"""enqueue_many: bulk enqueue through COPY."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from datetime import timedelta

import psycopg

import pgqueue
from tests.conftest import job_states
from tests.enqueue_support import (
    ROUND_TRIP_ARGS,
    Conn,
    NoopTask,
    count_jobs,
    db_now,
    must_get_job,
)

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
