"""The worker in-process, on a real PostgreSQL: fetching, running, logging, shutdown."""

from __future__ import annotations

import asyncio
import logging
import threading
import uuid
from datetime import datetime
from typing import Any

import psycopg
import pytest

import pgqueue
from tests.apps.support import is_final, job_row, state_of
from tests.conftest import async_wait_until, job_states, running_worker

# -- running handlers -----------------------------------------------------------------


async def test_sync_and_async_handlers_both_run(app: pgqueue.App, conn: psycopg.Connection[Any]) -> None:
    seen: list[tuple[str, int, str]] = []

    @app.task(name="sync_h")
    def sync_h(x: int) -> None:
        seen.append(("sync", x, threading.current_thread().name))

    @app.task(name="async_h")
    async def async_h(x: int) -> None:
        await asyncio.sleep(0)
        seen.append(("async", x, threading.current_thread().name))

    sync_h.enqueue(conn, x=1)
    async_h.enqueue(conn, x=2)
    async with running_worker(app) as worker:
        await async_wait_until(lambda: len(seen) == 2)
        await async_wait_until(lambda: worker.stats.completed == 2)
    by_kind = {kind: (x, thread) for kind, x, thread in seen}
    assert by_kind["sync"][0] == 1
    assert by_kind["async"][0] == 2
    # Sync handlers run in the worker's thread pool, async ones on the loop's thread.
    assert by_kind["sync"][1].startswith("pgqueue-job")
    assert by_kind["async"][1] == threading.current_thread().name
    assert job_states(conn) == {"completed": 2}


async def test_running_jobs_never_exceed_concurrency(app: pgqueue.App, conn: psycopg.Connection[Any]) -> None:
    running = 0
    peak = 0
    done = 0

    @app.task(name="slowish")
    async def slowish() -> None:
        nonlocal running, peak, done
        running += 1
        peak = max(peak, running)
        try:
            await asyncio.sleep(0.05)
        finally:
            running -= 1
            done += 1

    app.enqueue_many(conn, [slowish.job() for _ in range(20)])
    async with running_worker(app, concurrency=3, fetch_batch=100) as worker:
        await async_wait_until(lambda: worker.stats.completed == 20)
    assert done == 20
    assert peak == 3, f"peak concurrency was {peak}, expected exactly 3"
    assert worker.stats.claimed == 20
    assert job_states(conn) == {"completed": 20}


async def test_full_batch_triggers_immediate_refetch_while_capacity_lasts(
    app: pgqueue.App, conn: psycopg.Connection[Any]
) -> None:
    # fetch_batch=5 < concurrency=10: the first claim comes back full with 5 free slots left,
    # so the worker must claim again at once. Polling is effectively off (30s, no LISTEN).
    running = 0
    gate = asyncio.Event()

    @app.task(name="held")
    async def held() -> None:
        nonlocal running
        running += 1
        await gate.wait()

    app.enqueue_many(conn, [held.job() for _ in range(10)])
    async with running_worker(app, concurrency=10, fetch_batch=5, poll_interval=30, listen=False) as worker:
        try:
            await async_wait_until(lambda: running == 10, timeout=5)
            assert worker.stats.claims == 2
        finally:
            gate.set()
        await async_wait_until(lambda: worker.stats.completed == 10)


async def test_drains_500_jobs_with_few_claims(app: pgqueue.App, conn: psycopg.Connection[Any]) -> None:
    @app.task(name="noop")
    async def noop() -> None:
        return None

    app.enqueue_many(conn, [noop.job() for _ in range(500)])
    # No LISTEN and a 30s poll: only the "refetch when a batch came back full / when capacity
    # frees up" logic can keep the worker going; without it this would take minutes.
    async with running_worker(app, concurrency=10, fetch_batch=10, poll_interval=30, listen=False) as worker:
        # Polling alone would need 50 polls of 30 s, far past this bound.
        await async_wait_until(lambda: worker.stats.completed == 500, timeout=120)
    assert worker.stats.claimed == 500
    assert worker.stats.claims < 150, f"{worker.stats.claims} claims for 500 jobs"
    assert job_states(conn) == {"completed": 500}


async def test_higher_priority_runs_first(app: pgqueue.App, conn: psycopg.Connection[Any]) -> None:
    order: list[int] = []

    @app.task(name="prio")
    def prio(p: int) -> None:
        order.append(p)

    priorities = [0, 5, -3, 10, 3, 5, -1]
    for p in priorities:
        prio.options(priority=p).enqueue(conn, p=p)
    async with running_worker(app, concurrency=1) as worker:
        await async_wait_until(lambda: worker.stats.completed == len(priorities))
    assert order == sorted(priorities, reverse=True)


async def test_equal_priority_runs_in_enqueue_order(app: pgqueue.App, conn: psycopg.Connection[Any]) -> None:
    order: list[int] = []

    @app.task(name="fifo")
    def fifo(n: int) -> None:
        order.append(n)

    for n in range(8):
        fifo.enqueue(conn, n=n)
    async with running_worker(app, concurrency=1) as worker:
        await async_wait_until(lambda: worker.stats.completed == 8)
    assert order == list(range(8))


async def test_worker_never_claims_an_unregistered_task(app: pgqueue.App, conn: psycopg.Connection[Any]) -> None:
    @app.task(name="known")
    def known() -> None:
        return None

    row = conn.execute("SELECT pgqueue.enqueue('not_registered_here', '{}')").fetchone()
    assert row is not None
    unknown_id = int(row[0])
    known_id = known.enqueue(conn)
    # Claims that find nothing come from polls: poll fast while listening too, or each of the
    # three below waits for the listener's safety-net poll.
    async with running_worker(app, poll_interval_listening=0.2) as worker:
        await async_wait_until(lambda: is_final(conn, known_id))
        # Let several more claims pass over the unknown job.
        empty = worker.stats.empty_claims
        await async_wait_until(lambda: worker.stats.empty_claims >= empty + 3)
    row = conn.execute(
        "SELECT state::text, attempt, worker_id FROM pgqueue.jobs WHERE id = %s", [unknown_id]
    ).fetchone()
    assert row == ("available", 0, None)
    assert worker.stats.claimed == 1


async def test_queues_filter(app: pgqueue.App, conn: psycopg.Connection[Any]) -> None:
    ran: list[str] = []

    @app.task(name="q_task", queue="a")
    def q_task(where: str) -> None:
        ran.append(where)

    a_id = q_task.enqueue(conn, where="a")
    b_id = q_task.options(queue="b").enqueue(conn, where="b")
    # Poll fast while listening too: the empty claims awaited below come from polls.
    async with running_worker(app, queues=("a",), poll_interval_listening=0.2) as worker:
        assert worker.queues == ("a",)
        await async_wait_until(lambda: is_final(conn, a_id))
        empty = worker.stats.empty_claims
        await async_wait_until(lambda: worker.stats.empty_claims >= empty + 3)
    assert ran == ["a"]
    assert state_of(conn, b_id) == "available"

    async with running_worker(app, queues=("b",)):
        await async_wait_until(lambda: is_final(conn, b_id))
    assert ran == ["a", "b"]


async def test_default_queues_cover_every_task_queue(app: pgqueue.App, conn: psycopg.Connection[Any]) -> None:
    ran: list[str] = []

    @app.task(name="in_x", queue="x")
    def in_x() -> None:
        ran.append("x")

    @app.task(name="in_default")
    def in_default() -> None:
        ran.append("default")

    in_x.enqueue(conn)
    in_default.enqueue(conn)
    async with running_worker(app) as worker:
        assert set(worker.queues) == {"x", "default"}
        await async_wait_until(lambda: worker.stats.completed == 2)
    assert sorted(ran) == ["default", "x"]


async def test_scheduled_job_runs_only_after_run_at(app: pgqueue.App, conn: psycopg.Connection[Any], dsn: str) -> None:
    started: list[datetime] = []

    @app.task(name="later")
    def later() -> None:
        with psycopg.connect(dsn) as c:
            row = c.execute("SELECT clock_timestamp()").fetchone()
            assert row is not None
            started.append(row[0])

    job_id = later.options(delay=0.5).enqueue(conn)
    assert state_of(conn, job_id) == "scheduled"
    async with running_worker(app) as worker:
        await async_wait_until(lambda: worker.stats.completed == 1, timeout=10)
    run_at = job_row(conn, job_id)["run_at"]
    created = conn.execute("SELECT created_at FROM pgqueue.jobs WHERE id = %s", [job_id]).fetchone()
    assert created is not None
    assert (run_at - created[0]).total_seconds() == pytest.approx(0.5, abs=0.05)
    assert len(started) == 1
    assert started[0] >= run_at, f"handler started at {started[0]}, before run_at {run_at}"


# -- logging --------------------------------------------------------------------------


def _job_lines(caplog: pytest.LogCaptureFixture, job_id: int) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name == "pgqueue.worker" and r.getMessage().startswith(f"job {job_id} ")]


async def test_one_info_line_per_outcome_without_args(
    app: pgqueue.App, conn: psycopg.Connection[Any], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="pgqueue")
    secret = "hunter2-" + uuid.uuid4().hex

    @app.task(name="login", pass_context=True, retry=pgqueue.Backoff(base=0.01, jitter=False))
    def login(ctx: pgqueue.JobContext, password: str) -> None:
        if ctx.job.attempt == 1:
            raise RuntimeError("first try fails")

    job_id = login.enqueue(conn, password=secret)
    async with running_worker(app):
        await async_wait_until(lambda: is_final(conn, job_id), timeout=10)
    lines = _job_lines(caplog, job_id)
    assert [r.levelno for r in lines] == [logging.INFO, logging.INFO], [r.getMessage() for r in lines]
    assert "retryable" in lines[0].getMessage()
    assert "RuntimeError" in lines[0].getMessage()
    assert "completed" in lines[1].getMessage()
    assert "login" in lines[1].getMessage()
    assert secret not in caplog.text
    for record in caplog.records:
        assert secret not in record.getMessage()
        assert secret not in repr(record.args)


async def test_log_args_opt_in(
    app: pgqueue.App, conn: psycopg.Connection[Any], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="pgqueue")
    value = "visible-" + uuid.uuid4().hex

    @app.task(name="chatty", log_args=True)
    def chatty(v: str) -> None:
        return None

    job_id = chatty.enqueue(conn, v=value)
    async with running_worker(app):
        await async_wait_until(lambda: is_final(conn, job_id))
    lines = _job_lines(caplog, job_id)
    assert len(lines) == 1
    assert value in lines[0].getMessage()


# -- shutdown -------------------------------------------------------------------------


async def test_stop_lets_in_flight_job_finish(app: pgqueue.App, conn: psycopg.Connection[Any]) -> None:
    started = asyncio.Event()
    finished: list[bool] = []

    @app.task(name="short")
    async def short() -> None:
        started.set()
        await asyncio.sleep(0.3)
        finished.append(True)

    job_id = short.enqueue(conn)
    # A shutdown timeout far past running_worker's stop_timeout: stop() must return when the
    # job is done, not when the timeout runs out.
    async with running_worker(app, shutdown_timeout=3600, stop_timeout=60) as worker:
        await asyncio.wait_for(started.wait(), 10)
    # running_worker's exit called stop() and waited for run() to return.
    assert finished == [True]
    assert state_of(conn, job_id) == "completed"
    assert worker.stats.completed == 1
    assert worker.stats.released == 0


async def test_stop_releases_jobs_past_shutdown_timeout(app: pgqueue.App, conn: psycopg.Connection[Any]) -> None:
    started = asyncio.Event()
    cancelled: list[bool] = []

    @app.task(name="long", max_attempts=3)
    async def long() -> None:
        started.set()
        try:
            await asyncio.Event().wait()  # never returns: shutdown must release it
        except asyncio.CancelledError:
            cancelled.append(True)
            raise

    job_id = long.enqueue(conn)
    # running_worker fails if the worker has not stopped 60 s after stop().
    async with running_worker(app, shutdown_timeout=0.2, stop_timeout=60) as worker:
        await asyncio.wait_for(started.wait(), 10)
        assert job_row(conn, job_id)["attempt"] == 1
    assert cancelled == [True]
    row = conn.execute(
        "SELECT state::text, attempt, lease_token, lease_expires_at, worker_id, errors FROM pgqueue.jobs WHERE id = %s",
        [job_id],
    ).fetchone()
    assert row == ("available", 0, None, None, None, [])
    assert worker.stats.released == 1
    assert worker.stats.completed == 0
    assert worker.stats.retried == 0


async def test_stop_claims_nothing_new(app: pgqueue.App, conn: psycopg.Connection[Any]) -> None:
    started = asyncio.Event()

    @app.task(name="finishing")
    async def finishing(n: int) -> None:
        started.set()
        await asyncio.sleep(0.5 if n == 1 else 0)

    first = finishing.enqueue(conn, n=1)
    # Polling off (30s): after the listener's catch-up claim the fetcher is idle, so the only
    # thing that could claim job 2 is the NOTIFY of its enqueue, which arrives after stop().
    # (A claim already in flight when stop() is called may still start what it returns.)
    worker = app.worker(poll_interval=30, maintenance_interval=0.2, shutdown_timeout=5)
    run = asyncio.create_task(worker.run())
    try:
        await asyncio.wait_for(started.wait(), 10)
        assert worker.listener is not None
        await asyncio.wait_for(worker.listener.connected.wait(), 10)
        # Idle: the listener's catch-up wake-up was taken (by the start claim when it came
        # before it, else by a second claim) and no claim is in flight.
        await async_wait_until(lambda: worker.stats.fetcher_waiting and not worker.fetcher.wake_pending)
        worker.stop()
        second = finishing.enqueue(conn, n=2)  # commits and notifies while the worker drains
        await asyncio.wait_for(run, 10)
    finally:
        worker.stop()
        if not run.done():
            await asyncio.wait_for(run, 10)
    assert state_of(conn, first) == "completed"
    assert job_row(conn, second)["state"] == "available"
    assert job_row(conn, second)["attempt"] == 0
    assert worker.stats.claimed == 1


async def test_worker_refuses_unmigrated_database(empty_dsn: str) -> None:
    app = pgqueue.App(dsn=empty_dsn)

    @app.task(name="anything")
    def anything() -> None:
        return None

    worker = app.worker()
    with pytest.raises(pgqueue.SchemaNotInstalledError, match="pgqueue migrate"):
        await asyncio.wait_for(worker.run(), 30)


async def test_worker_reports_unreachable_database() -> None:
    app = pgqueue.App(dsn="postgresql://postgres@127.0.0.1:1/nothing?connect_timeout=3")
    worker = app.worker()
    with pytest.raises(pgqueue.DatabaseUnavailableError):
        await asyncio.wait_for(worker.run(), 30)


async def test_priority_order_across_queues(app: pgqueue.App, conn: psycopg.Connection[Any]) -> None:
    order: list[tuple[str, int]] = []

    @app.task(name="multi", pass_context=True)
    def multi(ctx: pgqueue.JobContext) -> None:
        order.append((ctx.job.queue, ctx.job.priority))

    for queue, priority in [("q1", 1), ("q2", 9), ("q1", 5), ("q2", -2), ("q1", 9)]:
        multi.options(queue=queue, priority=priority).enqueue(conn)
    async with running_worker(app, queues=("q1", "q2"), concurrency=1) as worker:
        await async_wait_until(lambda: worker.stats.completed == 5)
    # The multi-queue claim merges per-queue scans: global priority order, ties by run_at/id.
    assert order == [("q2", 9), ("q1", 9), ("q1", 5), ("q1", 1), ("q2", -2)]


async def test_stop_from_another_thread(app: pgqueue.App, conn: psycopg.Connection[Any]) -> None:
    @app.task(name="tiny")
    def tiny() -> None:
        return None

    job_id = tiny.enqueue(conn)
    worker = app.worker(poll_interval=0.2, maintenance_interval=0.2)
    run = asyncio.create_task(worker.run())
    try:
        await async_wait_until(lambda: is_final(conn, job_id))
        stopper = threading.Thread(target=worker.stop)
        stopper.start()
        stopper.join()
        await asyncio.wait_for(run, 10)
    finally:
        worker.stop()
        if not run.done():
            await asyncio.wait_for(run, 10)
    assert worker.stats.completed == 1


async def test_stop_before_run_claims_nothing(app: pgqueue.App, conn: psycopg.Connection[Any]) -> None:
    @app.task(name="never")
    def never() -> None:
        return None

    job_id = never.enqueue(conn)
    worker = app.worker(poll_interval=0.2)
    worker.stop()
    await asyncio.wait_for(worker.run(), 10)
    assert worker.stats.claims == 0
    assert state_of(conn, job_id) == "available"


async def test_stop_releases_a_sync_job_past_shutdown_timeout(app: pgqueue.App, conn: psycopg.Connection[Any]) -> None:
    started = threading.Event()
    gate = threading.Event()

    @app.task(name="long_sync")
    def long_sync() -> None:
        started.set()
        gate.wait(3600)  # until the test ends: shutdown must release it

    job_id = long_sync.enqueue(conn)
    try:
        # running_worker fails if the worker has not stopped 60 s after stop().
        async with running_worker(app, shutdown_timeout=0.2, stop_timeout=60) as worker:
            await asyncio.to_thread(started.wait, 10)
    finally:
        gate.set()  # let the abandoned thread end
    row = job_row(conn, job_id)
    assert (row["state"], row["attempt"], row["lease_token"]) == ("available", 0, None)
    assert worker.stats.released == 1
