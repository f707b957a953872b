"""Crashes, lost leases and signals: I2 (nothing lost), I3 (fencing) and I4 (bounded retries).

Subprocess tests run ``python -m pgqueue work tests.apps.X:app`` from the repository root;
in-process tests drive the lease by hand (expire it, then run the rescuer's own query).
"""

from __future__ import annotations

import asyncio
import signal
import time
from pathlib import Path
from typing import Any

import psycopg
import pytest

import pgqueue
from pgqueue.runner.stop_signals import REPEAT_WINDOW
from tests.apps.support import (
    WorkerProcess,
    assert_lease_expired_errors,
    create_test_tables,
    enqueue_sql,
    force_rescue,
    job_row,
    ledger,
    pid_alive,
    rows_for,
    state_of,
    worker_process,
)
from tests.conftest import async_wait_until, running_worker, wait_until

FAST_LEASE = ("--lease", "1", "--heartbeat-interval", "0.3", "--poll-interval", "0.2")


# -- in-process: leases and fencing -----------------------------------------------------


async def test_heartbeat_keeps_a_long_job_alive_past_its_lease(app: pgqueue.App, conn: psycopg.Connection[Any]) -> None:
    @app.task(name="long_but_alive")
    async def long_but_alive() -> None:
        await asyncio.sleep(2.5)

    job_id = long_but_alive.enqueue(conn)
    async with running_worker(app, lease=1, heartbeat_interval=0.3, maintenance_interval=0.1) as worker:
        await async_wait_until(lambda: state_of(conn, job_id) == "completed", timeout=10)
    row = job_row(conn, job_id)
    assert (row["attempt"], row["errors"]) == (1, [])
    assert worker.stats.completed == 1
    assert worker.stats.refused == 0


async def test_late_completion_after_rescue_is_refused(
    app: pgqueue.App, conn: psycopg.Connection[Any], dsn: str
) -> None:
    started = asyncio.Event()
    gate = asyncio.Event()

    @app.task(name="fenced", max_attempts=5)
    async def fenced() -> None:
        started.set()
        await gate.wait()

    job_id = fenced.enqueue(conn)
    # A long heartbeat interval: the worker must not notice the rescue before the handler ends.
    async with running_worker(app, lease=60, heartbeat_interval=30, concurrency=1) as worker:
        try:
            await asyncio.wait_for(started.wait(), 10)
            await asyncio.to_thread(force_rescue, dsn, job_id, hold=True)
            rescued = job_row(conn, job_id)
            assert (rescued["state"], rescued["attempt"]) == ("retryable", 1)
        finally:
            gate.set()
        await async_wait_until(lambda: worker.stats.refused == 1)
        assert worker.stats.completed == 0
    after = job_row(conn, job_id)
    assert after == rescued, "the late completion changed the rescued row"
    assert_lease_expired_errors(after["errors"], [1])
    assert rows_for(conn, job_id) == 1


@pytest.mark.parametrize("late_outcome", ["complete", "fail"])
async def test_late_outcome_never_touches_the_new_holder(
    conn: psycopg.Connection[Any], dsn: str, late_outcome: str
) -> None:
    """Worker 1 loses its lease; worker 2 re-claims the job. Worker 1's late outcome,
    arriving while worker 2 runs the job, is refused and leaves worker 2's lease alone."""
    app1, app2 = pgqueue.App(dsn=dsn), pgqueue.App(dsn=dsn)
    started1, gate1, started2, gate2 = asyncio.Event(), asyncio.Event(), asyncio.Event(), asyncio.Event()

    @app1.task(name="contested", max_attempts=5)
    async def first_holder() -> None:
        started1.set()
        await gate1.wait()
        if late_outcome == "fail":
            raise RuntimeError("late failure from the first holder")

    @app2.task(name="contested", max_attempts=5)
    async def second_holder() -> None:
        started2.set()
        await gate2.wait()

    job_id = app1.enqueue(conn, "contested")
    try:
        async with running_worker(app1, lease=60, heartbeat_interval=30, concurrency=1) as w1:
            await asyncio.wait_for(started1.wait(), 10)
            async with running_worker(app2, lease=60, heartbeat_interval=30, concurrency=1) as w2:
                await asyncio.to_thread(force_rescue, dsn, job_id, hold=False)
                await asyncio.wait_for(started2.wait(), 10)  # w1 has no free slot: only w2 can claim it
                held = job_row(conn, job_id)
                assert (held["state"], held["attempt"], held["worker_id"]) == ("running", 2, w2.worker_id)

                gate1.set()
                await async_wait_until(lambda: w1.stats.refused == 1)
                assert job_row(conn, job_id) == held, "worker 1's late outcome touched worker 2's job"

                gate2.set()
                await async_wait_until(lambda: state_of(conn, job_id) == "completed")
                await async_wait_until(lambda: w2.stats.completed == 1)  # counted on reading the reply
            assert (w1.stats.completed, w1.stats.retried, w1.stats.discarded) == (0, 0, 0)
    finally:
        gate1.set()
        gate2.set()
    final = job_row(conn, job_id)
    assert (final["state"], final["attempt"], final["worker_id"]) == ("completed", 2, w2.worker_id)
    assert_lease_expired_errors(final["errors"], [1])
    assert rows_for(conn, job_id) == 1


async def test_heartbeat_notices_a_lost_lease_and_cancels_the_handler(
    app: pgqueue.App, conn: psycopg.Connection[Any], dsn: str
) -> None:
    started = asyncio.Event()
    cancelled = asyncio.Event()

    @app.task(name="doomed")
    async def doomed() -> None:
        started.set()
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            cancelled.set()
            raise

    job_id = doomed.enqueue(conn)
    async with running_worker(app, lease=2, heartbeat_interval=0.3) as worker:
        await asyncio.wait_for(started.wait(), 10)
        await asyncio.to_thread(force_rescue, dsn, job_id, hold=True)
        await asyncio.wait_for(cancelled.wait(), 5)
        await async_wait_until(lambda: worker.in_flight == 0, timeout=5)
    row = job_row(conn, job_id)
    assert (row["state"], row["attempt"]) == ("retryable", 1)
    assert_lease_expired_errors(row["errors"], [1])
    assert (worker.stats.completed, worker.stats.retried, worker.stats.released) == (0, 0, 0)


async def test_a_job_claimed_again_by_the_same_process_stops_its_stale_attempt(
    app: pgqueue.App, conn: psycopg.Connection[Any], dsn: str
) -> None:
    events: list[tuple[str, int]] = []

    @app.task(name="sticky", pass_context=True)
    async def sticky(ctx: pgqueue.JobContext) -> None:
        events.append(("start", ctx.job.attempt))
        if ctx.job.attempt == 1:
            try:
                await asyncio.sleep(60)  # frozen, as far as its lease is concerned
            except asyncio.CancelledError:
                events.append(("cancelled", 1))
                raise
        events.append(("done", ctx.job.attempt))

    job_id = sticky.enqueue(conn)
    # Heartbeats far apart: the rescued job comes back to this very process before its
    # heartbeat could notice that attempt 1 lost its lease.
    async with running_worker(app, lease=60, heartbeat_interval=30) as worker:
        await async_wait_until(lambda: ("start", 1) in events)
        await asyncio.to_thread(force_rescue, dsn, job_id, hold=False)
        await async_wait_until(lambda: ("done", 2) in events)
        await async_wait_until(lambda: ("cancelled", 1) in events, timeout=5)
        await async_wait_until(lambda: worker.in_flight == 0 and worker.stats.completed == 1, timeout=5)
    assert events == [("start", 1), ("start", 2), ("cancelled", 1), ("done", 2)] or events == [
        ("start", 1),
        ("cancelled", 1),
        ("start", 2),
        ("done", 2),
    ]
    row = job_row(conn, job_id)
    assert (row["state"], row["attempt"]) == ("completed", 2)


# -- subprocesses -----------------------------------------------------------------------


def test_sigkilled_worker_job_is_rescued_and_completed_by_another(
    dsn: str, conn: psycopg.Connection[Any], tmp_path: Path
) -> None:
    create_test_tables(conn)
    job_id = enqueue_sql(conn, "slow", '{"key": "k1", "seconds": 1.0}')
    with (
        worker_process(dsn, "tests.apps.basic:app", *FAST_LEASE, log=tmp_path / "w1.log") as w1,
        worker_process(dsn, "tests.apps.basic:app", *FAST_LEASE, log=tmp_path / "w2.log") as w2,
    ):
        # w2 starts together with w1 but the job is w1's once w1 logs its start.
        wait_until(lambda: ledger(conn, "k1", "start"), timeout=15)
        first_pid = ledger(conn, "k1", "start")[0][1]
        victim, survivor = (w1, w2) if first_pid == w1.pid else (w2, w1)
        assert first_pid == victim.pid
        victim.signal(signal.SIGKILL)
        assert victim.wait(5) == -signal.SIGKILL
        wait_until(lambda: state_of(conn, job_id) == "completed", timeout=15)
        assert survivor.alive(), survivor.output()
    row = job_row(conn, job_id)
    assert row["attempt"] == 2
    assert_lease_expired_errors(row["errors"], [1])
    assert ledger(conn, "k1") == [("start", victim.pid), ("start", survivor.pid), ("done", survivor.pid)]


def test_job_that_crashes_every_worker_ends_discarded(dsn: str, conn: psycopg.Connection[Any], tmp_path: Path) -> None:
    create_test_tables(conn)
    job_id = enqueue_sql(conn, "crash", '{"key": "c1"}')
    procs: list[WorkerProcess] = []
    deadline = time.monotonic() + 30
    try:
        while state_of(conn, job_id) != "discarded":
            assert time.monotonic() < deadline, f"job still {state_of(conn, job_id)}: " + (
                procs[-1].output() if procs else ""
            )
            current = WorkerProcess(dsn, "tests.apps.crashy:app", FAST_LEASE, tmp_path / f"w{len(procs)}.log")
            procs.append(current)

            def crashed_or_final(p: WorkerProcess = current) -> bool:
                return not p.alive() or state_of(conn, job_id) == "discarded"

            wait_until(crashed_or_final, timeout=max(0.1, deadline - time.monotonic()))
    finally:
        for p in procs:
            p.kill()
    row = job_row(conn, job_id)
    assert (row["state"], row["attempt"], row["max_attempts"]) == ("discarded", 2, 2)
    assert_lease_expired_errors(row["errors"], [1, 2])
    starts = ledger(conn, "c1", "start")
    assert len(starts) == 2
    assert starts[0][1] != starts[1][1]
    crashed = [p for p in procs if p.proc.returncode == 23]
    assert len(crashed) == 2, [p.proc.returncode for p in procs]
    assert len(procs) == 3  # two crashed on attempts 1 and 2; the third only rescued it to the dead letter


def test_sigterm_lets_the_in_flight_job_finish(dsn: str, conn: psycopg.Connection[Any], tmp_path: Path) -> None:
    create_test_tables(conn)
    job_id = enqueue_sql(conn, "slow", '{"key": "t1", "seconds": 1.0}')
    with worker_process(
        dsn,
        "tests.apps.basic:app",
        "--shutdown-timeout",
        "10",
        "--lease",
        "5",
        "--heartbeat-interval",
        "1",
        log=tmp_path / "w.log",
    ) as w:
        wait_until(lambda: ledger(conn, "t1", "start"), timeout=15)
        w.signal(signal.SIGTERM)
        code = w.wait(15)
        assert code == 0, w.output()
    assert ledger(conn, "t1") == [("start", w.pid), ("done", w.pid)]
    row = job_row(conn, job_id)
    assert (row["state"], row["attempt"]) == ("completed", 1)


def test_sigterm_releases_a_job_longer_than_the_shutdown_timeout(
    dsn: str, conn: psycopg.Connection[Any], tmp_path: Path
) -> None:
    create_test_tables(conn)
    # The job outlasts the test: the worker exiting at all shows it released the job.
    job_id = enqueue_sql(conn, "slow", '{"key": "t2", "seconds": 3600.0}')
    with worker_process(
        dsn,
        "tests.apps.basic:app",
        "--shutdown-timeout",
        "0.3",
        "--lease",
        "5",
        "--heartbeat-interval",
        "1",
        log=tmp_path / "w.log",
    ) as w:
        wait_until(lambda: ledger(conn, "t2", "start"), timeout=15)
        w.signal(signal.SIGTERM)
        code = w.wait(60)
        assert code == 0, w.output()
        assert "released 1" in w.output()
    row = job_row(conn, job_id)
    assert (row["state"], row["attempt"], row["lease_token"], row["worker_id"]) == ("available", 0, None, None)
    assert ledger(conn, "t2", "done") == []


def test_processes_2_share_the_work_and_stop_on_sigterm(
    dsn: str, conn: psycopg.Connection[Any], tmp_path: Path
) -> None:
    create_test_tables(conn)
    keys = [f"p{i}" for i in range(10)]

    def done() -> int:
        row = conn.execute("SELECT count(*) FROM ledger WHERE event = 'done'").fetchone()
        return 0 if row is None else int(row[0])

    with worker_process(
        dsn, "tests.apps.basic:app", "--processes", "2", "--concurrency", "1", *FAST_LEASE, log=tmp_path / "w.log"
    ) as w:
        # Both children up and idle first, so that each one is woken for the new jobs.
        wait_until(lambda: w.output().count(" started: queues=") == 2, timeout=20)
        for key in keys:
            enqueue_sql(conn, "slow", f'{{"key": "{key}", "seconds": 0.3}}')
        wait_until(lambda: done() == len(keys), timeout=20)
        pids = {r[0] for r in conn.execute("SELECT DISTINCT pid FROM ledger WHERE event = 'done'").fetchall()}
        assert len(pids) == 2, f"jobs ran in {pids}"
        assert w.pid not in pids  # the supervisor itself runs no jobs
        w.signal(signal.SIGTERM)
        code = w.wait(15)
        assert code == 0, w.output()
        wait_until(lambda: not any(pid_alive(p) for p in pids), timeout=5)
        assert "restarting" not in w.output()
    states = conn.execute("SELECT state::text, count(*) FROM pgqueue.jobs GROUP BY 1").fetchall()
    assert states == [("completed", len(keys))]


def test_second_sigterm_exits_at_once(dsn: str, conn: psycopg.Connection[Any], tmp_path: Path) -> None:
    create_test_tables(conn)
    # The job and the shutdown timeout are far longer than any wait below, so that "at
    # once" holds on a loaded machine: exit code 130 long before the job could end.
    job_id = enqueue_sql(conn, "slow", '{"key": "t3", "seconds": 120.0}')
    with worker_process(
        dsn, "tests.apps.basic:app", "--shutdown-timeout", "300", "--lease", "5", "--heartbeat-interval", "1",
        log=tmp_path / "w.log",
    ) as w:  # fmt: skip
        wait_until(lambda: ledger(conn, "t3", "start"), timeout=15)
        w.signal(signal.SIGTERM)
        wait_until(lambda: "shutting down gracefully" in w.output(), timeout=30)
        time.sleep(REPEAT_WINDOW + 0.5)  # a repeat within the window would be the same request
        assert w.alive()  # still waiting for the 120s job
        w.signal(signal.SIGTERM)
        assert w.wait(30) == 130, w.output()
    # Exited without finishing or releasing: the lease (5s) will let the rescuer retry it.
    assert job_row(conn, job_id)["state"] == "running"
    assert ledger(conn, "t3", "done") == []


def test_sigterm_during_child_restart_backoff_stops_everything(
    dsn: str, conn: psycopg.Connection[Any], tmp_path: Path
) -> None:
    """A child dies; while the supervisor waits to restart it, SIGTERM arrives. The
    supervisor must not start a replacement that never heard of the stop."""
    create_test_tables(conn)
    job_id = enqueue_sql(conn, "crash", '{"key": "r1"}')
    with worker_process(
        dsn, "tests.apps.crashy:app", "--processes", "2", "--shutdown-timeout", "1", *FAST_LEASE,
        log=tmp_path / "w.log",
    ) as w:  # fmt: skip
        wait_until(lambda: ledger(conn, "r1", "start"), timeout=60)
        # Take the job away so that no later child crashes on it: only the stop can end them.
        conn.execute("DELETE FROM pgqueue.jobs_live WHERE id = %s", [job_id])
        wait_until(lambda: "restarting it" in w.output(), timeout=60)
        w.signal(signal.SIGTERM)  # lands inside the restart delay
        # A replacement started after the stop would never hear of it: no exit at all.
        assert w.wait(30) == 0, w.output()


def terminate_other_backends(conn: psycopg.Connection[Any]) -> int:
    row = conn.execute(
        "SELECT count(*) FILTER (WHERE pg_terminate_backend(pid)) FROM pg_stat_activity"
        " WHERE datname = current_database() AND pid <> pg_backend_pid()"
    ).fetchone()
    assert row is not None
    return int(row[0])


async def test_worker_survives_terminated_connections(app: pgqueue.App, conn: psycopg.Connection[Any]) -> None:
    started = asyncio.Event()
    gate = asyncio.Event()
    ran: list[int] = []

    @app.task(name="through_outage", pass_context=True)
    async def through_outage(ctx: pgqueue.JobContext, n: int) -> None:
        ran.append(n)
        if n == 1:
            started.set()
            await gate.wait()

    first = through_outage.enqueue(conn, n=1)
    async with running_worker(app, lease=60, heartbeat_interval=0.3, poll_interval=0.2) as worker:
        try:
            await asyncio.wait_for(started.wait(), 10)
            assert terminate_other_backends(conn) >= 2  # the pool's and the listener's
            await asyncio.sleep(0.5)  # let heartbeats hit dead connections; no condition to poll
        finally:
            gate.set()
        # The completion is written on a fresh connection, and new jobs are still claimed.
        await async_wait_until(lambda: state_of(conn, first) == "completed", timeout=10)
        second = through_outage.enqueue(conn, n=2)
        await async_wait_until(lambda: state_of(conn, second) == "completed", timeout=10)
        assert worker.listener is not None
        await asyncio.wait_for(worker.listener.connected.wait(), 10)
    assert ran == [1, 2]
    assert job_row(conn, first)["attempt"] == 1
