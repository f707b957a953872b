"""A thousand concurrent waits in one process (coroutines, and blocking calls in threads)
while the waiter's listening backend is terminated every 2 seconds: every wait gets its
own job's result or error, and none outlives its timeout."""

from __future__ import annotations

import asyncio
import logging
import random
import threading
import time
from typing import Any

import psycopg
import pytest

import pgqueue
from pgqueue import ops
from tests.conftest import async_wait_until, running_worker

Conn = psycopg.Connection[Any]

OK, NONE, FAIL, CANCEL, NEVER = "ok", "none", "fail", "cancel", "never"
#: How the jobs are split (1,000 waits in all: some jobs have two).
PLAN = {OK: 600, NONE: 100, FAIL: 100, CANCEL: 80, NEVER: 20}
DOUBLE_WAITS = 100  # of the OK jobs, also waited for a second time
THREAD_WAITS = 60  # blocking waits, one thread each
TIMEOUT = 240.0  # far beyond the run; only NEVER jobs reach theirs
NEVER_TIMEOUT = 5.0
KILL_EVERY = 2.0


def kill_waiter_backends(dsn: str, stop: threading.Event, kills: list[int]) -> None:
    """Every KILL_EVERY seconds, terminate the waiter's listening connection."""
    with psycopg.connect(dsn, autocommit=True) as c:
        while not stop.wait(KILL_EVERY):
            rows = c.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                " WHERE datname = current_database() AND application_name LIKE 'pgqueue results %'"
            ).fetchall()
            kills.extend(1 for r in rows if r[0])


def expected(kind: str, n: int) -> Any:
    return {"n": n, "square": n * n} if kind == OK else None


@pytest.mark.slow
@pytest.mark.timeout(600)
async def test_a_thousand_waits_survive_their_connection_being_cut_every_two_seconds(
    app: pgqueue.App, conn: Conn, dsn: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.ERROR, logger="pgqueue.results")  # reconnection warnings are expected
    rng = random.Random(13)

    @app.task(name="a.ok")
    async def ok(n: int, delay: float) -> dict[str, int]:
        await asyncio.sleep(delay)
        return {"n": n, "square": n * n}

    @app.task(name="a.none")
    async def none(n: int, delay: float) -> None:
        await asyncio.sleep(delay)

    @app.task(name="a.fail", max_attempts=1)
    async def fail(n: int, delay: float) -> None:
        await asyncio.sleep(delay)
        raise ValueError(f"job {n} fails")

    @app.task(name="a.parked", queue="parked")  # no worker serves it
    def parked(n: int) -> None: ...

    jobs: list[tuple[str, int, pgqueue.JobHandle]] = []
    n = 0
    with conn.transaction():
        for kind, count in PLAN.items():
            for _ in range(count):
                n += 1
                delay = rng.uniform(0.0, 6.0)  # completions spread over several cuts
                if kind == OK:
                    handle = ok.enqueue(conn, n=n, delay=delay)
                elif kind == NONE:
                    handle = none.enqueue(conn, n=n, delay=delay)
                elif kind == FAIL:
                    handle = fail.enqueue(conn, n=n, delay=delay)
                else:
                    handle = parked.enqueue(conn, n=n)
                jobs.append((kind, n, handle))
    waits = [*jobs, *[j for j in jobs if j[0] == OK][:DOUBLE_WAITS]]
    rng.shuffle(waits)
    assert len(waits) == 1000
    threaded, awaited = waits[:THREAD_WAITS], waits[THREAD_WAITS:]

    outcomes: dict[int, tuple[str, int, Any, float, float]] = {}  # wait -> (kind, n, outcome, limit, took)

    def wait_blocking(i: int, kind: str, n: int, handle: pgqueue.JobHandle) -> None:
        limit = NEVER_TIMEOUT if kind == NEVER else TIMEOUT
        start = time.monotonic()
        try:
            got: Any = handle.result(timeout=limit)
        except Exception as exc:  # noqa: BLE001 - the outcome under test
            got = exc
        outcomes[i] = (kind, n, got, limit, time.monotonic() - start)

    async def wait_async(i: int, kind: str, n: int, handle: pgqueue.JobHandle) -> None:
        limit = NEVER_TIMEOUT if kind == NEVER else TIMEOUT
        start = time.monotonic()
        try:
            got: Any = await handle.result_async(timeout=limit)
        except Exception as exc:  # noqa: BLE001 - the outcome under test
            got = exc
        outcomes[i] = (kind, n, got, limit, time.monotonic() - start)

    stop = threading.Event()
    kills: list[int] = []
    killer = threading.Thread(target=kill_waiter_backends, args=(dsn, stop, kills), daemon=True)
    threads = [threading.Thread(target=wait_blocking, args=(i, *w)) for i, w in enumerate(threaded)]
    started = time.monotonic()
    try:
        killer.start()
        for t in threads:
            t.start()
        tasks = [asyncio.ensure_future(wait_async(i, *w)) for i, w in enumerate(awaited, start=THREAD_WAITS)]
        async with running_worker(app, concurrency=200, queues=("default",)):
            await asyncio.sleep(1.0)  # the waits are registered while cuts go on
            for kind, _, handle in jobs:
                if kind == CANCEL:
                    ops.cancel_job(conn, "pgqueue", handle)
            await asyncio.gather(*tasks)
            await async_wait_until(lambda: len(outcomes) == 1000, timeout=TIMEOUT)
    finally:
        stop.set()
        killer.join(30)
        for t in threads:
            await asyncio.to_thread(t.join, 30)
    took = time.monotonic() - started

    wrong = []
    for i, (kind, n, got, limit, spent) in sorted(outcomes.items()):
        if spent > limit + 10.0:
            wrong.append((i, kind, n, f"returned {spent - limit:.1f}s after its timeout"))
        if kind in (OK, NONE):
            good = got == expected(kind, n)
        elif kind == FAIL:
            good = isinstance(got, pgqueue.JobFailed) and (got.state, got.error_type, got.error_message) == (
                "discarded",
                "builtins.ValueError",
                f"job {n} fails",
            )
        elif kind == CANCEL:
            good = isinstance(got, pgqueue.JobFailed) and got.state == "cancelled"
        else:
            good = isinstance(got, pgqueue.ResultTimeout) and got.state == "available"
        if not good:
            wrong.append((i, kind, n, repr(got)))
    waiter = app._waiter
    assert waiter is not None
    print(
        f"\n1000 waits: {len(kills)} cuts of the listening connection, {waiter.connections} connections, "
        f"{waiter.reads} reads, {took:.1f}s"
    )
    assert wrong == []
    assert len(outcomes) == 1000
    assert len(kills) >= 3, "the connection was cut while waits were pending"
    assert waiter.connections >= 2
    assert waiter.pending == 0
