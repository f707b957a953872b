"""The test suite's own helpers: a worker that hangs on shutdown fails its test with the
stacks that show where it hangs (tests/conftest.py), and the hostile tests' ``intact``
check tolerates what the clock legitimately changes (tests/hostile_support.py), and a
test's database has the day partitions of the day it runs, not of the session's start."""

from __future__ import annotations

import asyncio
import threading
from datetime import date, timedelta
from typing import Any

import psycopg
import pytest

from pgqueue.maintenance.partitions import FINISHED_PARENTS, _create_day, partition_name
from tests.conftest import freshen_day_partitions, running_worker, task_and_thread_stacks
from tests.hostile_support import Check


class HangingWorker:
    """Starts, then never finishes after stop(): a stand-in for a worker stuck in shutdown."""

    def __init__(self) -> None:
        self.started = asyncio.Event()

    async def run(self) -> None:
        self.started.set()
        await stuck_in_shutdown()

    def stop(self) -> None:
        pass


async def stuck_in_shutdown() -> None:
    await asyncio.Event().wait()


class HangingApp:
    def worker(self, **config: Any) -> HangingWorker:
        return HangingWorker()


async def test_a_worker_hanging_on_stop_fails_with_the_stacks_of_its_tasks() -> None:
    app: Any = HangingApp()
    with pytest.raises(AssertionError, match=r"did not stop within 0.2s of stop\(\)") as failure:
        async with running_worker(app, stop_timeout=0.2):
            pass
    assert "stuck_in_shutdown" in str(failure.value)


def test_stacks_name_every_thread() -> None:
    release = threading.Event()
    thread = threading.Thread(target=release.wait, name="parked-helper", daemon=True)
    thread.start()
    try:

        async def collect() -> str:
            return task_and_thread_stacks()

        stacks = asyncio.run(collect())
    finally:
        release.set()
        thread.join(10)
    assert "Thread parked-helper:" in stacks
    assert "Thread MainThread:" in stacks


def test_intact_allows_day_partitions_created_ahead_but_not_dropped(
    conn: psycopg.Connection[Any], intact: Check
) -> None:
    # What the worker's partition upkeep does once the date moves on (past midnight UTC).
    with conn.transaction():
        _create_day(conn, "pgqueue", "jobs_completed", date(2099, 1, 1))
    intact()
    existing = conn.execute(
        "SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid"
        " WHERE i.inhparent = 'pgqueue.jobs_discarded'::regclass ORDER BY 1 LIMIT 1"
    ).fetchone()
    assert existing is not None
    conn.execute(f"DROP TABLE pgqueue.{existing[0]}")
    with pytest.raises(AssertionError, match="day partitions gone"):
        intact()
    conn.execute("DELETE FROM public.canary")
    with pytest.raises(AssertionError):
        intact()


def day_partitions(conn: psycopg.Connection[Any]) -> set[str]:
    rows = conn.execute(
        "SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid"
        " WHERE i.inhparent = ANY('{pgqueue.jobs_completed,pgqueue.jobs_discarded,pgqueue.jobs_cancelled}'::regclass[])"
    )
    return {r[0] for r in rows}


def test_a_database_cloned_from_yesterdays_template_gets_todays_partitions(conn: psycopg.Connection[Any]) -> None:
    today: date = conn.execute("SELECT (now() AT TIME ZONE 'UTC')::date").fetchone()[0]  # type: ignore[index]
    fresh = {partition_name(p, today + timedelta(days=d)) for p in FINISHED_PARENTS for d in range(-1, 3)}
    assert day_partitions(conn) == fresh
    # As migrated one day earlier: from two days ago to tomorrow.
    for parent in FINISHED_PARENTS:
        conn.execute(f"DROP TABLE pgqueue.{partition_name(parent, today + timedelta(days=2))}")
        with conn.transaction():
            _create_day(conn, "pgqueue", parent, today - timedelta(days=2))
    assert day_partitions(conn) != fresh
    freshen_day_partitions(conn)
    assert day_partitions(conn) == fresh
