"""Prefetch: jobs claimed beyond the free slots wait in the executor's buffer under their
lease. They are released on a graceful stop without using an attempt, released (never
run stale) when their lease runs short, never taken under a global concurrency limit
(but under key limits, where a buffered job holds only its own key), counted in
``in_flight``, and rescued like running jobs when their worker is SIGKILLed.

Each test pins the prefetch target (``worker.prefetch.fixed``) so that the buffer's size
does not depend on how fast this machine runs claims and jobs."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import psycopg
import pytest

import pgqueue
from pgqueue import ops
from tests.apps.support import REPO, assert_lease_expired_errors
from tests.conftest import async_wait_until, job_states, running_worker, wait_until

Conn = psycopg.Connection[Any]


def _attempts(conn: Conn) -> dict[str, list[int]]:
    """State -> the attempts of the jobs in it, sorted."""
    out: dict[str, list[int]] = {}
    for state, attempt in conn.execute("SELECT state::text, attempt FROM pgqueue.jobs ORDER BY attempt"):
        out.setdefault(state, []).append(attempt)
    return out


def _running_in_db(conn: Conn) -> int:
    row = conn.execute("SELECT count(*) FROM pgqueue.jobs WHERE state = 'running'").fetchone()
    assert row is not None
    return int(row[0])


async def test_buffered_jobs_are_released_on_graceful_stop_without_using_an_attempt(
    app: pgqueue.App, conn: Conn
) -> None:
    gate = asyncio.Event()
    started = 0

    @app.task(name="held")
    async def held() -> None:
        nonlocal started
        started += 1
        await gate.wait()

    async with running_worker(app, concurrency=1) as worker:
        worker.prefetch.fixed = 3
        app.enqueue_many(conn, [held.job() for _ in range(4)])
        await async_wait_until(lambda: started == 1 and len(worker.executor.buffer) == 3)
        worker.stop()
        # The buffer goes back first, while the running job may still finish.
        await async_wait_until(lambda: worker.stats.released == 3)
        assert _attempts(conn) == {"available": [0, 0, 0], "running": [1]}
        gate.set()
        await async_wait_until(lambda: worker.stats.completed == 1)
    assert started == 1
    assert job_states(conn) == {"available": 3, "completed": 1}


async def test_a_buffered_job_whose_lease_runs_short_is_released_not_run(app: pgqueue.App, conn: Conn) -> None:
    gate = asyncio.Event()
    running = 0
    peak = 0

    @app.task(name="held")
    async def held() -> None:
        nonlocal running, peak
        running += 1
        peak = max(peak, running)
        try:
            await gate.wait()
        finally:
            running -= 1

    # A 4 s lease heartbeated every second: a buffered job must start within 4 - 1 - 0.4 s
    # of its claim; the running job holds the only slot for longer than that.
    async with running_worker(app, concurrency=1, lease=4.0, heartbeat_interval=1.0) as worker:
        worker.prefetch.fixed = 2
        app.enqueue_many(conn, [held.job() for _ in range(3)])
        await async_wait_until(lambda: running == 1 and len(worker.executor.buffer) == 2)
        await async_wait_until(lambda: worker.stats.released >= 2, timeout=30)
        assert running == 1
        gate.set()
        await async_wait_until(lambda: worker.stats.completed == 3, timeout=30)
        assert worker.stats.refused == 0
    assert peak == 1
    # Released jobs got their attempt back: none was rescued (which would use one).
    assert _attempts(conn) == {"completed": [1, 1, 1]}
    errors = conn.execute("SELECT count(*) FROM pgqueue.jobs WHERE errors <> '[]'::jsonb").fetchone()
    assert errors == (0,)


@pytest.mark.parametrize("limits", [{"concurrency": 10}, {"rate": (1000, 1.0)}, {"key_rate": (1000, 1.0)}])
async def test_a_queue_with_a_global_limit_or_a_rate_never_prefetches(
    app: pgqueue.App, conn: Conn, limits: dict[str, Any]
) -> None:
    gate = asyncio.Event()
    started = 0

    @app.task(name="held", queue="lim")
    async def held() -> None:
        nonlocal started
        started += 1
        await gate.wait()

    ops.add_queue(conn, "pgqueue", "lim")
    ops.set_queue_limits(conn, "pgqueue", "lim", **limits)
    async with running_worker(app, queues=("lim",), concurrency=1) as worker:
        worker.prefetch.fixed = 3
        app.enqueue_many(conn, [held.job() for _ in range(4)])
        # The slot is taken and the fetcher idle: the limited claims took no job ahead.
        await async_wait_until(lambda: started == 1 and worker.stats.fetcher_waiting)
        assert worker.flow.limited
        assert len(worker.executor.buffer) == 0
        assert _running_in_db(conn) == 1
        assert worker.stats.claimed == 1
        gate.set()
        await async_wait_until(lambda: worker.stats.completed == 4)
    assert worker.stats.released == 0


async def test_a_key_limited_queue_prefetches_and_buffered_jobs_hold_their_keys(app: pgqueue.App, conn: Conn) -> None:
    gate = asyncio.Event()
    started = 0

    @app.task(name="held", queue="keyed")
    async def held() -> None:
        nonlocal started
        started += 1
        await gate.wait()

    ops.add_queue(conn, "pgqueue", "keyed")
    ops.set_queue_limits(conn, "pgqueue", "keyed", key_concurrency=1)
    async with running_worker(app, queues=("keyed",), concurrency=1) as worker:
        worker.prefetch.fixed = 3
        # Two jobs of each of three keys: one per key may be claimed (running or buffered).
        app.enqueue_many(conn, [held.options(concurrency_key=f"k{i % 3}").job() for i in range(6)])
        await async_wait_until(lambda: started == 1 and len(worker.executor.buffer) == 2)
        assert worker.flow.limited
        assert worker.flow.settings.prefetchable
        per_key = conn.execute(
            "SELECT concurrency_key, count(*) FROM pgqueue.jobs WHERE state = 'running' GROUP BY 1"
        ).fetchall()
        assert sorted(per_key) == [("k0", 1), ("k1", 1), ("k2", 1)]
        gate.set()
        await async_wait_until(lambda: worker.stats.completed == 6)
    assert _attempts(conn) == {"completed": [1] * 6}


async def test_in_flight_counts_buffered_jobs(app: pgqueue.App, conn: Conn) -> None:
    gate = asyncio.Event()

    @app.task(name="held")
    async def held() -> None:
        await gate.wait()

    async with running_worker(app, concurrency=2, heartbeat_interval=0.2) as worker:
        worker.prefetch.fixed = 3
        app.enqueue_many(conn, [held.job() for _ in range(5)])
        await async_wait_until(lambda: len(worker.executor.running) == 2 and len(worker.executor.buffer) == 3)
        assert worker.in_flight == 5

        def registered() -> Any:
            return conn.execute(
                "SELECT in_flight FROM pgqueue.worker_registry WHERE worker_id = %s", [worker.worker_id]
            ).fetchone()

        await async_wait_until(lambda: registered() == (5,))
        gate.set()
        await async_wait_until(lambda: worker.stats.completed == 5)
        assert worker.in_flight == 0


def test_a_sigkilled_workers_buffered_jobs_are_rescued_like_running_ones(dsn: str, conn: Conn, tmp_path: Path) -> None:
    app = pgqueue.App(dsn=dsn)

    @app.task(name="hold")
    async def hold() -> None:
        return None

    app.enqueue_many(conn, [hold.job() for _ in range(3)])
    log = tmp_path / "victim.log"
    env = {k: v for k, v in os.environ.items() if not k.startswith("PGQUEUE_")}
    with open(log, "ab") as out:
        victim = subprocess.Popen(
            [sys.executable, "-m", "tests.apps.prefetching", dsn],
            cwd=REPO,
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,
        )
    try:
        # One running, two buffered: all three claimed under the victim's lease.
        wait_until(lambda: _running_in_db(conn) == 3, timeout=30)
    finally:
        os.killpg(victim.pid, signal.SIGKILL)
        victim.wait(10)
    assert _attempts(conn) == {"running": [1, 1, 1]}, log.read_text()

    async def survive() -> None:
        async with running_worker(app, concurrency=4) as survivor:
            await async_wait_until(lambda: survivor.stats.completed == 3, timeout=60)

    asyncio.run(survive())
    assert _attempts(conn) == {"completed": [2, 2, 2]}
    for (errors,) in conn.execute("SELECT errors FROM pgqueue.jobs"):
        assert_lease_expired_errors(errors, [1])
