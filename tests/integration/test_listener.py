"""LISTEN/NOTIFY wake-ups, polling without them, and the listener's reconnection."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import psycopg

import pgqueue
from tests.apps.support import state_of
from tests.conftest import async_wait_until, running_worker


def _task(app: pgqueue.App, done: dict[int, float], name: str = "ping") -> pgqueue.Task[Any, Any]:
    @app.task(name=name, pass_context=True)
    async def ping(ctx: pgqueue.JobContext) -> None:
        done[ctx.job.id] = time.monotonic()

    return ping


async def wait_completed(
    conn: psycopg.Connection[Any], done: dict[int, float], job_id: int, timeout: float = 5
) -> None:
    await async_wait_until(lambda: job_id in done, timeout=timeout)
    await async_wait_until(lambda: state_of(conn, job_id) == "completed", timeout=timeout)


async def idle(worker: pgqueue.Worker) -> None:
    """Wait until the worker has found the queue empty and gone to sleep."""
    await async_wait_until(lambda: worker.stats.empty_claims >= 1, timeout=10)
    await async_wait_until(lambda: worker.stats.fetcher_waiting and not worker.fetcher.wake_pending, timeout=10)


async def test_listen_wakes_an_idle_worker_long_before_the_poll_interval(
    app: pgqueue.App, conn: psycopg.Connection[Any]
) -> None:
    done: dict[int, float] = {}
    ping = _task(app, done)
    # Every poll far beyond the wait: a job that runs at all was woken by its notification,
    # however slow the machine.
    never = 3600
    async with running_worker(
        app, poll_interval=never, poll_interval_listening=never, maintenance_interval=never
    ) as worker:
        assert worker.listener is not None
        await asyncio.wait_for(worker.listener.connected.wait(), 10)
        await idle(worker)
        claims_before = worker.stats.claims
        for _ in range(3):  # several round trips, each woken by NOTIFY
            job_id = ping.enqueue(conn)
            await wait_completed(conn, done, job_id, timeout=60)
        # Woken by notifications, not by spinning: a handful of claims per job at most.
        assert worker.stats.claims - claims_before <= 3 * 3


async def test_without_listen_polling_still_runs_jobs(app: pgqueue.App, conn: psycopg.Connection[Any]) -> None:
    done: dict[int, float] = {}
    ping = _task(app, done)
    async with running_worker(app, listen=False, poll_interval=0.3) as worker:
        assert worker.listener is None
        await idle(worker)
        job_id = ping.enqueue(conn)
        await wait_completed(conn, done, job_id, timeout=60)


async def test_notification_for_another_queue_does_not_run_its_jobs(
    app: pgqueue.App, conn: psycopg.Connection[Any]
) -> None:
    done: dict[int, float] = {}
    ping = _task(app, done)
    # Poll fast while listening too: the empty claims awaited below come from polls.
    async with running_worker(app, queues=("default",), poll_interval=0.3, poll_interval_listening=0.3) as worker:
        await idle(worker)
        other = ping.options(queue="elsewhere").enqueue(conn)
        mine = ping.enqueue(conn)
        await async_wait_until(lambda: mine in done, timeout=5)
        # A negative check: two more polls that found nothing for this worker's queue.
        polls = worker.stats.empty_claims
        await async_wait_until(lambda: worker.stats.empty_claims >= polls + 2, timeout=60)
    assert other not in done
    assert state_of(conn, other) == "available"


async def test_listener_reconnects_after_its_backend_is_terminated(
    app: pgqueue.App, conn: psycopg.Connection[Any]
) -> None:
    done: dict[int, float] = {}
    ping = _task(app, done)
    # While the listener is down the worker polls every poll_interval; the safety poll of a
    # healthy listener is far past the wait, so it cannot be what runs the job.
    async with running_worker(app, poll_interval=0.5, poll_interval_listening=3600) as worker:
        listener = worker.listener
        assert listener is not None
        await asyncio.wait_for(listener.connected.wait(), 10)
        await idle(worker)
        old_pid = listener.backend_pid
        assert old_pid is not None
        row = conn.execute("SELECT pg_terminate_backend(%s)", [old_pid]).fetchone()
        assert row == (True,)
        job_id = ping.enqueue(conn)
        await async_wait_until(lambda: job_id in done, timeout=60)
        await async_wait_until(lambda: listener.reconnects >= 1 and listener.backend_pid != old_pid, timeout=10)
        await asyncio.wait_for(listener.connected.wait(), 10)
        alive = conn.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE pid = %s AND query ILIKE 'LISTEN%%'", [listener.backend_pid]
        ).fetchone()
        assert alive == (1,)
        await async_wait_until(lambda: state_of(conn, job_id) == "completed", timeout=5)


async def test_reconnected_listener_delivers_notifications_again(
    app: pgqueue.App, conn: psycopg.Connection[Any]
) -> None:
    done: dict[int, float] = {}
    ping = _task(app, done)
    # Every poll far beyond the wait: after the reconnection only a working LISTEN can pick
    # the job up.
    never = 3600
    async with running_worker(
        app, poll_interval=never, poll_interval_listening=never, maintenance_interval=never
    ) as worker:
        listener = worker.listener
        assert listener is not None
        await asyncio.wait_for(listener.connected.wait(), 10)
        await idle(worker)
        old_pid = listener.backend_pid
        conn.execute("SELECT pg_terminate_backend(%s)", [old_pid])
        await async_wait_until(lambda: listener.backend_pid not in (None, old_pid) and listener.connected.is_set())
        await idle(worker)
        job_id = ping.enqueue(conn)
        await async_wait_until(lambda: job_id in done, timeout=60)
        assert listener.reconnects >= 1


async def test_a_notification_for_a_queue_whose_own_slots_are_full_runs_its_job_when_one_frees(
    app: pgqueue.App, conn: psycopg.Connection[Any]
) -> None:
    # Queue "a" has one slot of its own. Its second job's notification comes while that
    # slot is taken: the claim it wakes looks at "b" only. Freeing the slot must claim
    # "a" again, since nothing else will before the (here: hour-long) poll.
    gate = asyncio.Event()
    started: list[int] = []

    @app.task(name="held", pass_context=True)
    async def held(ctx: pgqueue.JobContext) -> None:
        started.append(ctx.job.id)
        if len(started) == 1:
            await gate.wait()

    never = 3600
    async with running_worker(
        app,
        queues=("a", "b"),
        queue_concurrency={"a": 1},
        poll_interval=never,
        poll_interval_listening=never,
        maintenance_interval=never,
    ) as worker:
        assert worker.listener is not None
        await asyncio.wait_for(worker.listener.connected.wait(), 10)
        # Past the catch-up claim at connection and its echo a second later (either would
        # claim "a" too), so that only the slot's release can.
        await idle(worker)
        claims = worker.stats.claims
        await async_wait_until(lambda: worker.stats.claims > claims, timeout=30)
        await async_wait_until(lambda: worker.stats.fetcher_waiting and not worker.fetcher.wake_pending, timeout=30)
        first = held.options(queue="a").enqueue(conn)
        await async_wait_until(lambda: started == [first], timeout=30)
        claims = worker.stats.claims
        second = held.options(queue="a").enqueue(conn)
        await async_wait_until(lambda: worker.stats.claims > claims, timeout=30)  # woken, "a" full
        await async_wait_until(lambda: worker.stats.fetcher_waiting and not worker.fetcher.wake_pending, timeout=30)
        assert started == [first]
        gate.set()
        await async_wait_until(lambda: second in started, timeout=30)
