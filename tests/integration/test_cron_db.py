"""Cron against a real PostgreSQL: registration, missed ticks, DST, changed and removed
schedules. Times before "now" are injected into run_once(now=...) where a test needs a
night or a downtime; everything else (locks, cursors, jobs) is the real path."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest

import pgqueue
from pgqueue import Schedule
from tests.apps.cron_support import cron_jobs, db_value, fired, scheduler, set_state, state
from tests.conftest import async_wait_until, running_worker


def utc(year: int, month: int, day: int, hour: int = 0, minute: int = 0, second: int = 0) -> datetime:
    return datetime(year, month, day, hour, minute, second, tzinfo=UTC)


def sched(name: str, cron: str, **options: Any) -> Schedule:
    options.setdefault("task", name)
    return Schedule(name=name, cron=cron, **options)


async def test_register_is_idempotent_and_safe_when_workers_start_together(conn: psycopg.Connection[Any]) -> None:
    schedules = [sched(f"s{i}", "*/5 * * * *", args={"i": i}) for i in range(20)]
    dsn = conn.info.dsn
    async with (
        scheduler(dsn, schedules, "w1") as a,
        scheduler(dsn, reversed(schedules), "w2") as b,
        scheduler(dsn, schedules, "w3") as c,
    ):
        await asyncio.gather(a.register(), b.register(), c.register())
        first = dict(conn.execute("SELECT name, defined_at FROM pgqueue.cron_schedules").fetchall())
        await a.register()
    assert sorted(first) == sorted(s.name for s in schedules)
    again = dict(conn.execute("SELECT name, defined_at FROM pgqueue.cron_schedules").fetchall())
    assert again == first  # same definition: the cursor origin does not move
    row = state(conn, "s7")
    assert (row["cron"], row["timezone"], row["missed"], row["active"], row["last_tick"]) == (
        "*/5 * * * *",
        "UTC",
        "latest",
        True,
        None,
    )
    assert conn.execute("SELECT args FROM pgqueue.cron_schedules WHERE name = 's7'").fetchone() == ({"i": 7},)
    undocumented = conn.execute(
        "SELECT attname FROM pg_attribute WHERE attrelid = 'pgqueue.cron_status'::regclass AND attnum > 0"
        " AND col_description(attrelid, attnum) IS NULL"
    ).fetchall()
    assert undocumented == []


async def test_missed_ticks_after_downtime_follow_each_policy(conn: psycopg.Connection[Any]) -> None:
    minutes_fired = {"skip": [0], "latest": [1, 0], "all": [3, 2, 1, 0]}
    schedules = [
        sched(missed, "* * * * *", task="tasks.ping", queue="cron", args={"x": 1}, missed=missed, max_catchup=3)
        for missed in minutes_fired
    ]
    async with scheduler(conn.info.dsn, schedules, "w1") as s:
        await s.register()
        # The whole cluster was down for ten minutes.
        down_since = db_value(conn, "SELECT date_trunc('minute', now()) - interval '10 minutes'")
        for name in minutes_fired:
            set_state(conn, name, last_tick=down_since, defined_at=down_since - timedelta(days=1))
        result = await s.run_once()
        assert result.leader
        assert result.now is not None
        assert (await s.run_once()).fired == []  # nothing is due twice
    assert sorted(result.dropped) == ["all", "latest", "skip"]
    # The current minute's tick is under a minute old (on time); older ones were missed.
    current = result.now.replace(second=0, microsecond=0)
    for name, minutes in minutes_fired.items():
        expected = [current - timedelta(minutes=m) for m in minutes]
        assert [f.tick for f in result.fired if f.schedule == name] == expected, name
        jobs = cron_jobs(conn, name)
        assert [j["run_at"] for j in jobs] == expected, name
        assert [j["id"] for j in jobs] == [f.job_id for f in result.fired if f.schedule == name]
        for job, tick in zip(jobs, expected, strict=True):
            assert job["unique_key"] == f"cron:{name}:{tick:%Y-%m-%dT%H:%M:%SZ}"
            assert (job["task"], job["args"], job["queue"], job["state"]) == (
                "tasks.ping",
                {"x": 1},
                "cron",
                "available",
            )
        assert state(conn, name)["last_tick"] == current  # dropped ticks are behind the cursor too
        assert fired(conn, name) == expected


async def test_daily_0230_in_paris_across_both_dst_nights(conn: psycopg.Connection[Any]) -> None:
    nights = {
        # Spring forward: 02:30 does not exist on 29 March, fires at 03:00 +02:00.
        "spring": (utc(2026, 3, 28, 12), [utc(2026, 3, 29, 1, 0), utc(2026, 3, 30, 0, 30)]),
        # Fall back: 02:30 happens twice on 25 October, fires once (the first, +02:00).
        "fall": (utc(2026, 10, 24, 12), [utc(2026, 10, 25, 0, 30), utc(2026, 10, 26, 1, 30)]),
    }
    for name, (start, expected) in nights.items():
        schedule = sched(name, "30 2 * * *", timezone="Europe/Paris", missed="all")
        async with scheduler(conn.info.dsn, [schedule]) as s:
            await s.register()
            set_state(conn, name, last_tick=None, defined_at=start)
            now = start
            while now < start + timedelta(hours=42):  # a node waking every 20 minutes
                now += timedelta(minutes=20)
                await s.run_once(now=now)
        assert fired(conn, name) == expected
        assert [j["run_at"] for j in cron_jobs(conn, name)] == expected


async def test_changed_expression_takes_effect_on_the_next_tick_without_double_fire(
    conn: psycopg.Connection[Any],
) -> None:
    t0 = utc(2026, 6, 1, 10)
    v1 = sched("rotate", "*/10 * * * *", missed="all")
    v2 = sched("rotate", "*/5 * * * *", missed="all")
    v3 = sched("rotate", "* * * * *", missed="all")
    dsn = conn.info.dsn
    async with scheduler(dsn, [v1], "old") as old, scheduler(dsn, [v2], "new") as new:
        await old.register()
        set_state(conn, "rotate", last_tick=None, defined_at=t0)
        assert [f.tick for f in (await old.run_once(now=t0 + timedelta(minutes=10, seconds=5))).fired] == [
            t0 + timedelta(minutes=10)
        ]
        # Deploy v2: registering it moves defined_at to the database's now...
        db_now = db_value(conn, "SELECT now()")
        await new.register()
        row = state(conn, "rotate")
        assert row["cron"] == "*/5 * * * *"
        assert row["defined_at"] >= db_now
        # ... which we place at 10:12 in this simulated morning.
        set_state(conn, "rotate", last_tick=row["last_tick"], defined_at=t0 + timedelta(minutes=12))
        assert (await old.run_once(now=t0 + timedelta(minutes=14, seconds=59))).fired == []
        assert [f.tick for f in (await new.run_once(now=t0 + timedelta(minutes=15, seconds=1))).fired] == [
            t0 + timedelta(minutes=15)
        ]
        # A rolling deploy: the old node still runs v1; 10:20 is a tick of both, fired once.
        assert len((await old.run_once(now=t0 + timedelta(minutes=20, seconds=2))).fired) == 1
        assert (await new.run_once(now=t0 + timedelta(minutes=20, seconds=3))).fired == []
    async with scheduler(dsn, [v3], "newer") as newer:
        await newer.register()
        # A change never catches up: ticks of the new expression before the change are not "missed".
        set_state(conn, "rotate", last_tick=t0 + timedelta(minutes=20), defined_at=t0 + timedelta(minutes=30))
        assert (await newer.run_once(now=t0 + timedelta(minutes=30, seconds=30))).fired == []
        assert [f.tick for f in (await newer.run_once(now=t0 + timedelta(minutes=31, seconds=1))).fired] == [
            t0 + timedelta(minutes=31)
        ]
    expected = [t0 + timedelta(minutes=m) for m in (10, 15, 20, 31)]
    assert fired(conn, "rotate") == expected
    assert [j["run_at"] for j in cron_jobs(conn, "rotate")] == expected


async def test_schedule_removed_from_code_stops_firing_and_shows_inactive(conn: psycopg.Connection[Any]) -> None:
    t0 = utc(2026, 6, 1, 10)
    a, b = sched("keep", "* * * * *", missed="all"), sched("legacy", "* * * * *", missed="all")
    dsn = conn.info.dsn
    async with scheduler(dsn, [a, b], "v1") as before:
        await before.register()
        for name in ("keep", "legacy"):
            set_state(conn, name, last_tick=None, defined_at=t0)
        assert len((await before.run_once(now=t0 + timedelta(seconds=61))).fired) == 2
    # The new release drops "legacy"; its workers never fire it again.
    async with scheduler(dsn, [a], "v2") as after:
        await after.register()
        result = await after.run_once(now=t0 + timedelta(minutes=5, seconds=1))
    assert {f.schedule for f in result.fired} == {"keep"}
    assert fired(conn, "legacy") == [t0 + timedelta(minutes=1)]  # history kept
    assert len(fired(conn, "keep")) == 5
    # Two minutes without a worker declaring it: inactive (row and history kept).
    conn.execute("UPDATE pgqueue.cron_schedules SET last_seen_at = now() - interval '3 minutes' WHERE name = 'legacy'")
    assert state(conn, "legacy")["active"] is False
    assert state(conn, "keep")["active"] is True
    assert state(conn, "legacy")["last_fired_tick"] == t0 + timedelta(minutes=1)


async def test_tick_history_is_pruned_after_a_week_but_keeps_the_latest_tick(conn: psycopg.Connection[Any]) -> None:
    schedule = sched("daily", "0 6 * * *", missed="all")
    six = timedelta(hours=6)
    async with scheduler(conn.info.dsn, [schedule], history_days=7) as s:
        await s.register()
        today = db_value(conn, "SELECT date_trunc('day', now())")
        set_state(conn, "daily", last_tick=None, defined_at=today - timedelta(days=30))
        await s.run_once(now=today - timedelta(days=20))
        assert len(fired(conn, "daily")) == 10
        # Pruning runs with the next firing; a schedule's latest tick is never pruned.
        await s.run_once(now=today - timedelta(days=19, hours=12))
        assert fired(conn, "daily") == [today - timedelta(days=21) + six, today - timedelta(days=20) + six]
        await s.run_once(now=today - timedelta(days=1))
        await s.run_once(now=today)
    db_now = db_value(conn, "SELECT now()")
    ticks = fired(conn, "daily")
    assert ticks[-1] == today - timedelta(days=1) + six
    assert all(t > db_now - timedelta(days=7, minutes=1) for t in ticks)
    assert state(conn, "daily")["last_tick"] == ticks[-1]


async def test_worker_runs_the_scheduler_and_the_jobs(dsn: str) -> None:
    app = pgqueue.App(dsn=dsn)
    seen: list[int] = []

    @app.periodic(cron="* * * * * *", queue="cron-q", args={"n": 7}, missed="all")
    @app.task(name="tick")
    def tick(n: int) -> None:
        seen.append(n)

    async with running_worker(app) as worker:
        assert "cron-q" in worker.queues  # the schedule's queue is served by default
        assert worker.cron is not None
        await async_wait_until(lambda: len(seen) >= 2, timeout=15)
    assert set(seen) == {7}
    with psycopg.connect(dsn) as conn:
        jobs = cron_jobs(conn, "tick")
        assert {j["state"] for j in jobs[: len(seen)]} == {"completed"}
        assert [j["run_at"] for j in jobs] == fired(conn, "tick")


async def test_cron_jobs_carry_their_tasks_concurrency_key_and_deadline(conn: psycopg.Connection[Any]) -> None:
    app = pgqueue.App(dsn=conn.info.dsn)

    @app.periodic(cron="* * * * *", args={"customer_id": 42})
    @app.task(name="t.nightly", concurrency_key="customer_id", expires_in=600)
    def nightly(customer_id: int | None = None) -> None: ...

    app.add_schedule("other", task="t.elsewhere", cron="* * * * *")  # a task of another service
    with pytest.raises(
        pgqueue.ConfigError,
        match=r"schedule 'broken': .*argument 'customer_id', which must be a str or an int, got NoneType",
    ):
        app.add_schedule("broken", task="t.nightly", cron="* * * * *", args={})
    schedules = app.declared_schedules()
    assert [(s.name, s.concurrency_key, s.expires_in) for s in schedules] == [
        ("other", None, None),
        ("t.nightly", "42", 600.0),
    ]
    async with scheduler(conn.info.dsn, schedules, "w1") as s:
        await s.register()
        set_state(conn, "t.nightly", last_tick=None, defined_at=db_value(conn, "SELECT now() - interval '1 minute'"))
        set_state(conn, "other", last_tick=None, defined_at=db_value(conn, "SELECT now() - interval '1 minute'"))
        result = await s.run_once()
    [tick] = [f.tick for f in result.fired if f.schedule == "t.nightly"]
    rows = dict(
        (r[0], r[1:])
        for r in conn.execute("SELECT task, concurrency_key, expires_at - run_at, run_at FROM pgqueue.jobs")
    )
    assert rows["t.nightly"] == ("42", timedelta(minutes=10), tick)  # the deadline counts from the tick
    assert rows["t.elsewhere"][:2] == (None, None)
