"""Exactly one job per tick, with several schedulers at once: racing instances on their own
connections (an injected clock makes hundreds of ticks quick), live loops on the real
clock, a scheduler killed inside its transaction, and `pgqueue work` processes whose
current leader is SIGKILLed."""

from __future__ import annotations

import asyncio
import itertools
import random
import signal
from collections import Counter
from contextlib import ExitStack
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import psycopg
import pytest

from pgqueue import CronScheduler, Schedule
from pgqueue.cron.scheduler import RunResult
from tests.apps.cron_support import cron_jobs, fired, scheduler, set_state
from tests.apps.support import wait_for_exit, worker_process
from tests.conftest import async_wait_until, wait_until

SECOND = timedelta(seconds=1)


class CrashError(Exception):
    """A scheduler dying after its inserts, before COMMIT."""


def every(name: str, cron: str) -> Schedule:
    return Schedule(name=name, task="tick", cron=cron, missed="all", max_catchup=10_000)


async def test_racing_schedulers_fire_every_tick_exactly_once(conn: psycopg.Connection[Any]) -> None:
    rng = random.Random(5)
    schedules = [every("per-second", "* * * * * *"), every("per-7s", "* * * * * */7"), every("per-minute", "* * * * *")]
    t0 = datetime(2026, 2, 1, tzinfo=UTC)
    steps = 200
    results: list[RunResult] = []
    crashes = 0
    async with (
        scheduler(conn.info.dsn, schedules, "n0") as s0,
        scheduler(conn.info.dsn, schedules, "n1") as s1,
        scheduler(conn.info.dsn, schedules, "n2") as s2,
        scheduler(conn.info.dsn, schedules, "n3") as s3,
        scheduler(conn.info.dsn, schedules, "n4") as s4,
        scheduler(conn.info.dsn, schedules, "n5") as s5,
    ):
        nodes = [s0, s1, s2, s3, s4, s5]
        await asyncio.gather(*(n.register() for n in nodes))
        for s in schedules:
            set_state(conn, s.name, last_tick=None, defined_at=t0)

        async def crash(_: Any) -> None:
            raise CrashError

        async def attempt(node: CronScheduler, now: datetime) -> RunResult | BaseException:
            try:
                return await node.run_once(now=now, before_commit=crash if rng.random() < 0.1 else None)
            except CrashError as exc:
                return exc

        virtual = t0
        latest_now = t0
        for _ in range(steps):
            virtual += timedelta(seconds=rng.uniform(0.3, 4.0))
            # Every node at once, each with its own view of "now" (up to a second apart).
            nows = [virtual + timedelta(seconds=rng.uniform(-1.0, 1.0)) for _ in nodes]
            outcomes = await asyncio.gather(*(attempt(n, t) for n, t in zip(nodes, nows, strict=True)))
            for outcome, now in zip(outcomes, nows, strict=True):
                if isinstance(outcome, RunResult):
                    results.append(outcome)
                    if outcome.leader:
                        latest_now = max(latest_now, now)
                else:
                    crashes += 1
        settle = await s0.run_once(now=latest_now)  # whatever the last crashes left undone
        assert settle.leader
        results.append(settle)
    assert crashes > 0  # some nodes died before COMMIT
    assert any(not r.leader for r in results)  # and some found the lock taken
    fired_by_runs = Counter((f.schedule, f.tick) for r in results for f in r.fired)
    assert max(fired_by_runs.values()) == 1, "a tick was reported fired twice"
    total = 0
    for s in schedules:
        expected = s.expr.ticks(t0, latest_now)
        assert fired(conn, s.name) == expected, s.name
        jobs = cron_jobs(conn, s.name)
        assert [j["run_at"] for j in jobs] == expected, s.name  # one job per tick, none missing
        assert sorted(fired_by_runs[(s.name, t)] for t in expected) == [1] * len(expected)
        total += len(expected)
    assert total > 450  # about 430 per-second ticks, 60 of the 7-second one and 7 per-minute ones


async def test_live_loops_on_the_database_clock(conn: psycopg.Connection[Any]) -> None:
    schedule = every("live", "* * * * * *")
    yearly = Schedule(name="new-year", task="tick", cron="0 0 1 1 *")
    dsn = conn.info.dsn
    async with (
        scheduler(dsn, [schedule], "a") as a,
        scheduler(dsn, [schedule], "b") as b,
        scheduler(dsn, [schedule], "c") as c,
        scheduler(dsn, [schedule], "d") as d,
        scheduler(dsn, [yearly], "idle") as idle,
    ):
        loops = [asyncio.create_task(s.run()) for s in (a, b, c, d, idle)]
        try:
            await async_wait_until(lambda: len(fired(conn, "live")) >= 5, timeout=20, interval=0.1)
        finally:
            for task in loops:
                task.cancel()
            await asyncio.gather(*loops, return_exceptions=True)
        for task in loops:
            assert task.cancelled()  # none died of an error
        ticks = fired(conn, "live")
        assert [t2 - t1 for t1, t2 in itertools.pairwise(ticks)] == [SECOND] * (len(ticks) - 1)
        assert [j["run_at"] for j in cron_jobs(conn, "live")] == ticks
        # Wake-ups are spread (0-500 ms after the tick), not in lockstep.
        wakeups = [w for s in (a, b, c, d) for w in s.stats.wakeups]
        assert len(wakeups) >= 8
        assert max(wakeups) - min(wakeups) > 0.05
        # Nothing due for months: the idle loop registered once and has not queried since.
        assert (idle.stats.statements, idle.stats.attempts) == (1, 0)


async def test_scheduler_killed_inside_its_transaction_leaves_the_ticks_to_another(
    conn: psycopg.Connection[Any],
) -> None:
    schedule = every("s", "* * * * * *")
    t0 = datetime(2026, 2, 1, tzinfo=UTC)
    now = t0 + timedelta(seconds=10, milliseconds=500)
    async with scheduler(conn.info.dsn, [schedule], "victim") as victim, scheduler(conn.info.dsn, [schedule], "b") as b:
        await victim.register()
        set_state(conn, "s", last_tick=None, defined_at=t0)
        seen: list[RunResult] = []

        async def die(victim_conn: psycopg.AsyncConnection[Any]) -> None:
            # The victim has inserted its ten jobs and holds the lock: the other node backs off.
            seen.append(await b.run_once(now=now))
            conn.execute("SELECT pg_terminate_backend(%s)", [victim_conn.info.backend_pid])

        with pytest.raises(psycopg.OperationalError):
            await victim.run_once(now=now, before_commit=die)
        assert not seen[0].leader
        taken_over = await b.run_once(now=now)
    expected = [t0 + SECOND * i for i in range(1, 11)]
    assert [f.tick for f in taken_over.fired] == expected
    assert fired(conn, "s") == expected
    assert [j["id"] for j in cron_jobs(conn, "s")] == [f.job_id for f in taken_over.fired]
    assert conn.execute("SELECT count(*) FROM pgqueue.jobs").fetchone() == (10,)


@pytest.mark.slow
def test_worker_processes_fire_each_tick_once_when_the_leader_is_killed(
    conn: psycopg.Connection[Any], tmp_path: Path
) -> None:
    dsn = conn.info.dsn
    with ExitStack() as stack:
        procs = [
            stack.enter_context(
                worker_process(dsn, "tests.apps.cron_app:app", "--concurrency", "2", log=tmp_path / f"w{i}.log")
            )
            for i in range(3)
        ]
        wait_until(lambda: len(fired(conn, "every-second")) >= 3, timeout=40)
        row = conn.execute(
            "SELECT fired_by FROM pgqueue.cron_ticks WHERE schedule = 'every-second' ORDER BY tick DESC LIMIT 1"
        ).fetchone()
        assert row is not None
        leader_pid = int(row[0].split(":")[-2])
        (victim,) = [p for p in procs if p.pid == leader_pid]
        victim.kill()  # SIGKILL, wherever it was (possibly inside its transaction)
        before = len(fired(conn, "every-second"))
        wait_until(lambda: len(fired(conn, "every-second")) >= before + 4, timeout=30)
        survivors = [p for p in procs if p is not victim]
        for p in survivors:
            p.signal(signal.SIGTERM)
        wait_for_exit(survivors, timeout=30)
        for p in survivors:
            assert p.proc.returncode == 0, p.output()
    ticks = fired(conn, "every-second")
    assert [t2 - t1 for t1, t2 in itertools.pairwise(ticks)] == [SECOND] * (len(ticks) - 1)
    jobs = cron_jobs(conn, "every-second")
    assert [j["run_at"] for j in jobs] == ticks  # exactly one job per tick
    firers = {r[0] for r in conn.execute("SELECT DISTINCT fired_by FROM pgqueue.cron_ticks").fetchall()}
    assert len({f.split(":")[-2] for f in firers} - {str(leader_pid)}) >= 1  # the others took over
    assert any(j["state"] == "completed" for j in jobs)
