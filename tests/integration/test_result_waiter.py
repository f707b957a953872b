"""The results waiter: every wait of a process shares one listening connection; it is woken
by NOTIFY (its safety-net poll is turned off here, so only a NOTIFY or a reconnection can
wake it), survives the loss of its connection, and no caller waits past its timeout."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

import pgqueue
from pgqueue import ops
from pgqueue.results.waiter import ResultWaiter
from tests.conftest import async_wait_until, running_worker, wait_until

Conn = psycopg.Connection[Any]
APP_NAME = "pgqueue results %"


def no_poll_waiter(app: pgqueue.App, **kw: Any) -> ResultWaiter:
    """Give ``app`` a waiter that never polls: only NOTIFYs and reconnections wake it."""
    waiter = ResultWaiter(lambda: app.dsn, app.schema, poll_interval=3600.0, **kw)
    app._waiter = waiter
    return waiter


def waiter_backends(conn: Conn) -> list[int]:
    rows = conn.execute(
        "SELECT pid FROM pg_stat_activity WHERE datname = current_database() AND application_name LIKE %s",
        [APP_NAME],
    ).fetchall()
    return [r[0] for r in rows]


def awaited_count(conn: Conn) -> int:
    row = conn.execute("SELECT count(*) FROM pgqueue.jobs_live WHERE awaited").fetchone()
    assert row is not None
    return int(row[0])


@pytest.fixture
def gate() -> Iterator[threading.Event]:
    event = threading.Event()
    yield event
    event.set()  # never leave a handler blocked


async def test_waits_are_woken_by_notify_and_share_one_connection(
    app: pgqueue.App, conn: Conn, gate: threading.Event
) -> None:
    waiter = no_poll_waiter(app)

    @app.task(name="w.square")
    def square(n: int) -> int:
        assert gate.wait(60)
        return n * n

    handles = [square.enqueue(conn, n=n) for n in range(60)]
    sync_results: dict[int, Any] = {}

    def wait_in_thread(h: pgqueue.JobHandle) -> None:
        sync_results[h.id] = h.result(timeout=60)

    threads = [threading.Thread(target=wait_in_thread, args=(h,)) for h in handles[:10]]
    for t in threads:
        t.start()
    waits = [asyncio.ensure_future(h.result_async(timeout=60)) for h in handles[10:]]
    waits += [asyncio.ensure_future(h.result_async(timeout=60)) for h in handles[10:20]]  # two waits, one job
    async with running_worker(app, concurrency=20):
        # Every job is marked awaited while it is still waiting for the gate.
        await async_wait_until(lambda: awaited_count(conn) == 60, timeout=30)
        assert len(waiter_backends(conn)) == 1
        gate.set()
        values = await asyncio.gather(*waits)
    for t in threads:
        await asyncio.to_thread(t.join, 30)
    assert values == [n * n for n in range(10, 60)] + [n * n for n in range(10, 20)]
    assert sync_results == {h.id: n * n for n, h in enumerate(handles[:10])}
    assert waiter.connections == 1
    assert waiter.pending == 0


async def test_cancel_and_failure_wake_waiters_with_job_failed(app: pgqueue.App, conn: Conn) -> None:
    no_poll_waiter(app)

    @app.task(name="w.fails", max_attempts=1)
    async def fails() -> None:
        raise LookupError("no such thing")

    @app.task(name="w.parked", queue="parked")
    def parked() -> None: ...

    failing = fails.enqueue(conn)
    cancelled = parked.enqueue(conn)
    waits = [asyncio.ensure_future(h.result_async(timeout=60)) for h in (failing, cancelled)]
    await async_wait_until(lambda: awaited_count(conn) == 2, timeout=30)
    assert ops.cancel_job(conn, "pgqueue", cancelled) is pgqueue.JobState.CANCELLED
    async with running_worker(app, queues=("default",)):
        outcomes = await asyncio.gather(*waits, return_exceptions=True)
    failed, gone = outcomes
    assert isinstance(failed, pgqueue.JobFailed)
    assert (failed.job_id, failed.state, failed.error_type, failed.error_message) == (
        failing,
        "discarded",
        "builtins.LookupError",
        "no such thing",
    )
    assert str(failed) == f"job {failing} was discarded: builtins.LookupError: no such thing"
    assert isinstance(gone, pgqueue.JobFailed)
    assert (gone.state, gone.error_type) == ("cancelled", None)


async def test_a_wait_times_out_with_the_last_state_seen(app: pgqueue.App, conn: Conn) -> None:
    waiter = no_poll_waiter(app)

    @app.task(name="w.never", queue="nobody")
    def never() -> None: ...

    job = never.enqueue(conn)
    with pytest.raises(pgqueue.ResultTimeout, match=rf"job {job} did not finish within 0\.3s \(last seen available\)"):
        await job.result_async(timeout=0.3)
    with pytest.raises(TimeoutError) as info:
        await asyncio.to_thread(job.result, 0.3)
    assert isinstance(info.value, pgqueue.ResultTimeout)
    assert (info.value.job_id, info.value.state) == (job, "available")
    assert waiter.pending == 0  # given-up waits are forgotten
    with pytest.raises(pgqueue.ResultTimeout):
        await job.result_async(timeout=0)


async def test_an_unknown_job_fails_its_waits_at_once(app: pgqueue.App) -> None:
    no_poll_waiter(app)
    with pytest.raises(pgqueue.JobNotFoundError, match="no job with id 123456789"):
        await app.handle(123456789).result_async(timeout=60)
    with pytest.raises(pgqueue.JobNotFoundError):
        await asyncio.to_thread(app.handle(123456789).result, 60)


async def test_a_caller_cancelled_while_waiting_stops_waiting(app: pgqueue.App, conn: Conn) -> None:
    waiter = no_poll_waiter(app)

    @app.task(name="w.slow", queue="nobody")
    def slow() -> None: ...

    job = slow.enqueue(conn)
    wait = asyncio.ensure_future(job.result_async())
    await async_wait_until(lambda: waiter.pending == 1)
    wait.cancel()
    with pytest.raises(asyncio.CancelledError):
        await wait
    assert waiter.pending == 0


async def test_a_lost_connection_is_replaced_and_nothing_finished_meanwhile_is_missed(
    app: pgqueue.App, conn: Conn, gate: threading.Event
) -> None:
    waiter = no_poll_waiter(app, max_backoff=0.2)

    @app.task(name="w.gated")
    def gated(n: int) -> dict[str, int]:
        assert gate.wait(60)
        return {"n": n}

    handles = [gated.enqueue(conn, n=n) for n in range(5)]
    waits = [asyncio.ensure_future(h.result_async(timeout=60)) for h in handles]
    async with running_worker(app):
        await async_wait_until(lambda: awaited_count(conn) == 5, timeout=30)
        [first] = waiter_backends(conn)
        # Cut the listening connection and finish the jobs: whether they finish before or
        # after it is back, the reconnection reads every pending job again.
        conn.execute("SELECT pg_terminate_backend(%s)", [first])
        gate.set()
        values = await asyncio.gather(*waits)
    assert values == [{"n": n} for n in range(5)]
    assert waiter.connections >= 2
    assert first not in waiter_backends(conn)


def test_an_idle_waiter_gives_its_connection_back(app: pgqueue.App, conn: Conn) -> None:
    no_poll_waiter(app, idle_close=0.2)

    @app.task(name="w.done")
    def done() -> None: ...

    job = done.enqueue(conn)
    ops.cancel_job(conn, "pgqueue", job)
    with pytest.raises(pgqueue.JobFailed):
        job.result(timeout=60)
    wait_until(lambda: not waiter_backends(conn), timeout=30)
    with pytest.raises(pgqueue.JobFailed):  # and starts again when needed
        job.result(timeout=60)


def test_closing_the_waiter_fails_the_waits_left(app: pgqueue.App, conn: Conn) -> None:
    waiter = no_poll_waiter(app)

    @app.task(name="w.left", queue="nobody")
    def left() -> None: ...

    job = left.enqueue(conn)
    errors: list[BaseException] = []

    def wait() -> None:
        try:
            job.result(timeout=60)
        except BaseException as exc:  # noqa: BLE001 - recorded for the assertion
            errors.append(exc)

    thread = threading.Thread(target=wait)
    thread.start()
    wait_until(lambda: awaited_count(conn) == 1, timeout=30)
    waiter.close()
    thread.join(30)
    assert [type(e) for e in errors] == [pgqueue.PgQueueError]
    assert "closed" in str(errors[0])
    wait_until(lambda: not waiter_backends(conn), timeout=30)
