"""App(notify_window=...): a fast producer notifies once per window, and no job waits for
the safety-net poll because of it (real PostgreSQL, real LISTEN)."""

from __future__ import annotations

import asyncio
import contextlib
import time
from typing import Any

import psycopg
import pytest

import pgqueue
from pgqueue._db.jobs import JobsDB
from pgqueue._db.sql import channel_name
from pgqueue._wake import MAX_WINDOW, Wake, WakeThrottle
from pgqueue.errors import ConfigError
from pgqueue.worker.listener import Listener
from tests.conftest import async_wait_until, running_worker


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _noop(app: pgqueue.App, done: set[int] | None = None) -> pgqueue.Task[Any, Any]:
    @app.task(name="noop", pass_context=True)
    async def noop(ctx: pgqueue.JobContext) -> None:
        if done is not None:
            done.add(ctx.job.id)

    return noop


def _listen(dsn: str, app: pgqueue.App) -> psycopg.Connection[Any]:
    listener = psycopg.connect(dsn, autocommit=True)
    listener.execute(f'LISTEN "{channel_name(app.schema)}"')
    return listener


def _payloads(dsn: str, app: pgqueue.App, listener: psycopg.Connection[Any]) -> list[str]:
    """What ``listener`` heard so far. A marker notification, sent last, bounds the wait:
    notifications arrive in commit order, so everything before it has arrived."""
    with psycopg.connect(dsn, autocommit=True) as other:
        other.execute("SELECT pg_notify(%s, 'marker')", [channel_name(app.schema)])
    out: list[str] = []
    for n in listener.notifies(timeout=30):
        if n.payload == "marker":
            return out
        out.append(n.payload)
    raise AssertionError(f"the marker never came; got {out}")


def test_a_bad_window_is_refused(dsn: str) -> None:
    with pytest.raises(ConfigError, match="notify_window"):
        pgqueue.App(dsn, notify_window=-1)
    with pytest.raises(ConfigError, match="notify_window"):
        pgqueue.App(dsn, notify_window=5)  # seconds, not milliseconds


def test_off_by_default_every_job_notifies(dsn: str, app: pgqueue.App, conn: psycopg.Connection[Any]) -> None:
    assert app.wakes.window == 0
    noop = _noop(app)
    with _listen(dsn, app) as listener:
        for _ in range(5):
            noop.enqueue(conn)
        assert _payloads(dsn, app, listener) == ["default"] * 5
    assert not app.wakes.planned


def test_a_burst_notifies_once_per_window_and_a_late_commit_is_repaired(
    dsn: str, app: pgqueue.App, conn: psycopg.Connection[Any]
) -> None:
    app.wakes = WakeThrottle(0.05)
    clock = app.wakes.clock = Clock()  # decisions on a clock the test moves; the database is real
    noop = _noop(app)
    with _listen(dsn, app) as listener:
        noop.enqueue(conn)  # a quiet queue: notifies
        clock.now += 0.001
        noop.enqueue(conn)  # a burst: notifies and asks for an echo, opening a window
        clock.now += 0.001
        ids = [noop.enqueue(conn) for _ in range(3)]  # inside the window: no NOTIFY
        assert _payloads(dsn, app, listener) == ["default", "default", "~50 default"]
        assert app.wakes.planned == {Wake.PLAIN: 1, Wake.ECHO: 1, Wake.QUIET: 3}

        # A quiet job whose statement returns after the window closed gets its own NOTIFY,
        # sent after its commit.
        real_settle = app.wakes.settle

        def slow_commit(plan: Any, ok: bool) -> bool:
            clock.now += 1.0
            return real_settle(plan, ok)

        app.wakes.settle = slow_commit  # type: ignore[method-assign]
        late = noop.enqueue(conn)
        assert app.wakes.repairs == 1
        assert _payloads(dsn, app, listener) == ["default"]
        states = conn.execute(
            "SELECT count(*) FROM pgqueue.jobs WHERE id = ANY(%s) AND state = 'available'", [[*ids, late]]
        ).fetchone()
        assert states == (4,)


def test_inside_a_callers_transaction_every_job_notifies(
    dsn: str, app: pgqueue.App, conn: psycopg.Connection[Any]
) -> None:
    app.wakes = WakeThrottle(0.05)
    clock = app.wakes.clock = Clock()
    noop = _noop(app)
    with _listen(dsn, app) as listener:
        for _ in range(4):
            with conn.transaction():  # the commit is the caller's, at a time pgqueue cannot see
                noop.enqueue(conn)
            clock.now += 0.001
        assert _payloads(dsn, app, listener) == ["default"] * 4
    assert not app.wakes.planned


def test_in_a_pipeline_every_job_notifies(dsn: str, app: pgqueue.App, conn: psycopg.Connection[Any]) -> None:
    # A pipeline's results come before the Sync that commits them: the commit is not seen.
    app.wakes = WakeThrottle(0.05)
    clock = app.wakes.clock = Clock()
    noop = _noop(app)
    with _listen(dsn, app) as listener:
        with conn.pipeline():
            for _ in range(4):
                noop.enqueue(conn)
                clock.now += 0.001
        # One implicit transaction until the pipeline's Sync: its identical NOTIFYs are one.
        assert _payloads(dsn, app, listener) == ["default"]
    assert not app.wakes.planned  # every statement notified; none was throttled


async def test_the_async_path_takes_the_same_decisions(dsn: str, app: pgqueue.App) -> None:
    app.wakes = WakeThrottle(0.05)
    clock = app.wakes.clock = Clock()
    noop = _noop(app)
    with _listen(dsn, app) as listener:
        async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as aconn:
            for _ in range(5):
                await noop.enqueue_async(aconn)
                clock.now += 0.001
        assert _payloads(dsn, app, listener) == ["default", "default", "~50 default"]
    assert app.wakes.planned == {Wake.PLAIN: 1, Wake.ECHO: 1, Wake.QUIET: 3}


def test_a_rolled_back_echo_request_opens_no_window(dsn: str, app: pgqueue.App, conn: psycopg.Connection[Any]) -> None:
    app.wakes = WakeThrottle(0.05)
    clock = app.wakes.clock = Clock()
    noop = _noop(app)
    noop.enqueue(conn)
    clock.now += 0.001
    # The burst's statement fails in the database (a hostile CHECK added for the test).
    conn.execute("ALTER TABLE pgqueue.jobs_live ADD CONSTRAINT no_more CHECK (id < 0) NOT VALID")
    with pytest.raises(psycopg.errors.CheckViolation):
        noop.enqueue(conn)
    conn.execute("ALTER TABLE pgqueue.jobs_live DROP CONSTRAINT no_more")
    clock.now += 0.001
    with _listen(dsn, app) as listener:
        noop.enqueue(conn)
        assert _payloads(dsn, app, listener)[:1] == ["default"]
    assert app.wakes.planned[Wake.QUIET] == 0


async def test_jobs_of_a_fast_producer_run_without_waiting_for_the_poll(
    app: pgqueue.App, conn: psycopg.Connection[Any]
) -> None:
    # The real clock, and the largest window: a burst's jobs skip their NOTIFY (on any
    # machine where 40 single-row INSERTs take less than a second).
    app.wakes = WakeThrottle(MAX_WINDOW)
    done: set[int] = set()
    noop = _noop(app, done)
    never = 3600  # no poll can rescue a job: each one ran because a wake-up reached a worker
    async with running_worker(
        app, poll_interval=never, poll_interval_listening=never, maintenance_interval=never
    ) as worker:
        assert worker.listener is not None
        await asyncio.wait_for(worker.listener.connected.wait(), 10)
        ids: list[int] = []

        def burst() -> None:  # in a thread: the worker's loop runs meanwhile
            ids.extend(noop.enqueue(conn) for _ in range(40))

        for _ in range(5):
            await asyncio.to_thread(burst)
            await async_wait_until(lambda: done.issuperset(ids), timeout=60)
        assert len(ids) == 200
        assert done.issuperset(ids)
        assert app.wakes.planned[Wake.QUIET] > 0
        assert worker.listener.echoes >= 1


class _Wakes:
    """A Listener on its own, recording when it wakes its worker."""

    def __init__(self, dsn: str, app: pgqueue.App) -> None:
        self.times: list[float] = []
        self.listener = Listener(
            lambda: dsn, JobsDB(app.schema), ["default"], lambda: self.times.append(time.monotonic())
        )

    async def __aenter__(self) -> _Wakes:
        self.started = time.monotonic()
        self.task = asyncio.create_task(self.listener.run())
        await asyncio.wait_for(self.listener.connected.wait(), 10)
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self.task


async def test_the_listener_wakes_again_when_an_echo_is_due(
    dsn: str, app: pgqueue.App, conn: psycopg.Connection[Any]
) -> None:
    async with _Wakes(dsn, app) as wakes:
        await async_wait_until(lambda: len(wakes.times) >= 2, timeout=30)  # connection and its echo
        channel = channel_name(app.schema)
        for payload in ("~x default", "~50 elsewhere", "~"):  # not for this worker: ignored
            conn.execute("SELECT pg_notify(%s, %s)", [channel, payload])
        sent = time.monotonic()
        conn.execute("SELECT pg_notify(%s, %s)", [channel, "~300 default"])
        await async_wait_until(lambda: wakes.listener.echoes == 1, timeout=30)
        await async_wait_until(lambda: [t for t in wakes.times if t > sent], timeout=30)
        # Woken by the echo request alone, and not before its window ended; the others
        # were not echoed (a plain notification now reaches the worker at once).
        assert min(t for t in wakes.times if t > sent) - sent >= 0.29
        assert wakes.listener.echoes == 1


async def test_a_listener_wakes_again_once_a_window_opened_before_it_listened_has_closed(
    dsn: str, app: pgqueue.App
) -> None:
    # A producer may have opened a window (its jobs skip the NOTIFY) just before this
    # worker started listening, so it heard neither the echo request nor those jobs.
    async with _Wakes(dsn, app) as wakes:
        await async_wait_until(lambda: len(wakes.times) >= 2, timeout=30)
        first, second = wakes.times[:2]  # the catch-up at connection, then its echo
        assert second - first >= MAX_WINDOW - 0.01
        assert first >= wakes.started
