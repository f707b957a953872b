"""The sync and async twins give the same result against a real PostgreSQL: the same rows,
the same ids returned (a unique key answers with the existing job), the same counts and the
same errors. That they take the same parameters: tests/unit/test_api_parity.py."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest

import pgqueue

Conn = psycopg.Connection[Any]
AConn = psycopg.AsyncConnection[Any]
NoopTask = pgqueue.Task[..., None]

ROW = (
    "SELECT id, state::text, queue, task, args, priority, attempt, max_attempts, unique_key, errors,"
    " run_at - created_at, scheduled_at - created_at FROM pgqueue.jobs ORDER BY id"
)


def take_rows(conn: Conn, returned: list[int]) -> tuple[list[int], list[tuple[Any, ...]]]:
    """The jobs written (without their ids) and which of them each returned id names; then
    delete them, so the twin's round starts from the same empty table."""
    rows = conn.execute(ROW).fetchall()
    ids = [row[0] for row in rows]
    conn.execute("DELETE FROM pgqueue.jobs")
    return [ids.index(job_id) for job_id in returned], [row[1:] for row in rows]


def batch(noop: NoopTask) -> list[pgqueue.JobSpec]:
    once = noop.options(unique_key="batch-once", priority=3)
    return [noop.job(i=i) for i in range(3)] + [once.job(i=10), once.job(i=11)]


def sync_round(conn: Conn, app: pgqueue.App, noop: NoopTask) -> tuple[list[int], int]:
    with conn.transaction():
        ids: list[int] = [
            noop.enqueue(conn, image=1),
            noop.options(priority=5, delay=60, unique_key="k", max_attempts=2, queue="q2").enqueue(conn, image=2),
            noop.options(unique_key="k").enqueue(conn, image=3),
            app.enqueue(conn, "noop", image=4),
        ]
        count = app.enqueue_many(conn, batch(noop))
    return ids, count


async def async_round(aconn: AConn, app: pgqueue.App, noop: NoopTask) -> tuple[list[int], int]:
    async with aconn.transaction():
        ids: list[int] = [
            await noop.enqueue_async(aconn, image=1),
            await noop.options(priority=5, delay=60, unique_key="k", max_attempts=2, queue="q2").enqueue_async(
                aconn, image=2
            ),
            await noop.options(unique_key="k").enqueue_async(aconn, image=3),
            await app.enqueue_async(aconn, "noop", image=4),
        ]
        count = await app.enqueue_many_async(aconn, batch(noop))
    return ids, count


async def test_enqueue_twins_write_the_same_jobs(dsn: str, conn: Conn, app: pgqueue.App, noop: NoopTask) -> None:
    sync_ids, sync_count = sync_round(conn, app, noop)
    sync_result = take_rows(conn, sync_ids)
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as aconn:
        async_ids, async_count = await async_round(aconn, app, noop)
    async_result = take_rows(conn, async_ids)

    assert async_count == sync_count
    assert async_result == sync_result
    returned, rows = sync_result
    assert returned[1] == returned[2]  # the unique key answered with the existing job
    assert len(rows) == 3 + 3 + 1  # enqueue_many deduplicated its own batch too


async def test_enqueue_many_twins_take_the_same_generators(dsn: str, conn: Conn, app: pgqueue.App) -> None:
    @app.task(name="gen")
    def gen(i: int) -> None: ...

    with conn.transaction():
        sync_count = app.enqueue_many(conn, (gen.job(i=i) for i in range(50)))
    sync_result = take_rows(conn, [])
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as aconn, aconn.transaction():
        async_count = await app.enqueue_many_async(aconn, (gen.job(i=i) for i in range(50)))
    assert (async_count, take_rows(conn, [])) == (sync_count, sync_result) == (50, sync_result)


def _error(exc: BaseException) -> tuple[type[BaseException], str]:
    return type(exc), str(exc)


@pytest.mark.parametrize(
    ("task", "kwargs"),
    [("nope", {}), ("noop", {"payload": object()})],
    ids=["unknown-task", "args-not-json"],
)
async def test_enqueue_twins_refuse_alike(
    dsn: str, conn: Conn, app: pgqueue.App, noop: NoopTask, task: str, kwargs: dict[str, Any]
) -> None:
    with pytest.raises(pgqueue.PgQueueError) as sync_error:
        app.enqueue(conn, task, **kwargs)
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as aconn:
        with pytest.raises(pgqueue.PgQueueError) as async_error:
            await app.enqueue_async(aconn, task, **kwargs)
    assert _error(async_error.value) == _error(sync_error.value)


async def test_enqueue_twins_say_the_same_when_the_schema_is_missing(empty_dsn: str) -> None:
    app = pgqueue.App(dsn=empty_dsn)

    @app.task(name="lost")
    def lost() -> None: ...

    with psycopg.connect(empty_dsn, autocommit=True) as conn, pytest.raises(pgqueue.PgQueueError) as sync_error:
        lost.enqueue(conn)
    async with await psycopg.AsyncConnection.connect(empty_dsn, autocommit=True) as aconn:
        with pytest.raises(pgqueue.PgQueueError) as async_error:
            await lost.enqueue_async(aconn)
        with pytest.raises(pgqueue.PgQueueError) as async_many_error:
            await app.enqueue_many_async(aconn, [lost.job()])
    with psycopg.connect(empty_dsn, autocommit=True) as conn, pytest.raises(pgqueue.PgQueueError) as sync_many_error:
        app.enqueue_many(conn, [lost.job()])
    assert isinstance(sync_error.value, pgqueue.SchemaNotInstalledError)
    assert _error(async_error.value) == _error(sync_error.value)
    assert _error(async_many_error.value) == _error(sync_many_error.value)
