"""Flow control with real workers: a queue's own slots in one process, a pause that every
worker honours at its next claim, and limits shared by several workers, proved by a
ledger the handlers write on the database clock."""

from __future__ import annotations

import asyncio
import contextlib
from collections import Counter
from typing import Any

import psycopg
import pytest

import pgqueue
from pgqueue import ops
from tests.conftest import async_wait_until, running_worker

Conn = psycopg.Connection[Any]


def max_overlap(conn: Conn, where: str = "true") -> int:
    """The most runs of the ledger that were running at one instant."""
    row = conn.execute(
        "SELECT coalesce(max(n), 0) FROM ("
        " SELECT sum(d) OVER (ORDER BY t, d) AS n FROM ("
        f"  SELECT started_at AS t, 1 AS d FROM ledger WHERE {where}"
        f"  UNION ALL SELECT ended_at, -1 FROM ledger WHERE {where}) AS e) AS s"
    ).fetchone()
    assert row is not None
    return int(row[0])


@pytest.fixture
def ledger(conn: Conn) -> Conn:
    conn.execute(
        "CREATE TABLE ledger (job_id bigint, queue text, key text,"
        " started_at timestamptz NOT NULL, ended_at timestamptz NOT NULL)"
    )
    return conn


async def test_a_queue_with_its_own_slots_runs_at_most_that_many_in_a_process(app: pgqueue.App, conn: Conn) -> None:
    running: Counter[str] = Counter()
    seen_max: Counter[str] = Counter()
    release = asyncio.Event()

    @app.task(name="slow_a", queue="a")
    async def slow_a() -> None:
        await hold("a")

    @app.task(name="slow_b", queue="b")
    async def slow_b() -> None:
        await hold("b")

    async def hold(queue: str) -> None:
        running[queue] += 1
        seen_max[queue] = max(seen_max[queue], running[queue])
        try:
            await release.wait()
        finally:
            running[queue] -= 1

    for _ in range(6):
        slow_a.enqueue(conn)
        slow_b.enqueue(conn)
    config: dict[str, Any] = {"queues": ("a", "b"), "queue_concurrency": {"a": 2, "b": 3}}
    async with running_worker(app, **config) as worker:
        assert worker.capacity.concurrency == 5  # each queue's own slots, and no shared pool
        await async_wait_until(lambda: running["a"] == 2 and running["b"] == 3)
        # Both queues hold more jobs than slots, and stay at their own caps.
        left = conn.execute("SELECT queue, count(*) FROM pgqueue.jobs_live WHERE state = 'available' GROUP BY 1")
        assert dict(left.fetchall()) == {"a": 4, "b": 3}
        release.set()
        await async_wait_until(lambda: worker.stats.completed == 12)
    assert seen_max == {"a": 2, "b": 3}


async def test_a_pause_takes_effect_at_the_next_claim_and_a_resume_too(app: pgqueue.App, conn: Conn) -> None:
    ran: list[str] = []

    @app.task(name="note", queue="q")
    def note(tag: str) -> None:
        ran.append(tag)

    @app.task(name="other", queue="r")
    def other(tag: str) -> None:
        ran.append(tag)

    async with running_worker(app, queues=("q", "r")) as worker:
        note.enqueue(conn, tag="before")
        await async_wait_until(lambda: ran == ["before"])
        assert ops.pause_queue(conn, "pgqueue", "q") is True
        # Every worker hears of it (a notification), and claims on the limited path from then on.
        await async_wait_until(lambda: "q" in worker.flow.settings.controlled_queues)
        with conn.transaction():
            note.enqueue(conn, tag="paused")
            other.enqueue(conn, tag="other queue")
        # One claim covers both queues: the other queue's job running proves a claim made
        # after the paused job was there.
        await async_wait_until(lambda: "other queue" in ran)
        assert "paused" not in ran
        state = conn.execute("SELECT state::text FROM pgqueue.jobs WHERE task = 'note' AND args->>'tag' = 'paused'")
        assert state.fetchone() == ("available",)
        assert ops.resume_queue(conn, "pgqueue", "q") is True
        await async_wait_until(lambda: "paused" in ran)


async def test_two_workers_share_a_global_limit_and_never_exceed_it(app: pgqueue.App, ledger: Conn, dsn: str) -> None:
    conn = ledger
    both_running = asyncio.Event()
    now_running = 0

    @app.task(name="limited", queue="lim", pass_context=True)
    async def limited(ctx: pgqueue.JobContext, n: int) -> None:
        nonlocal now_running
        async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as c:
            start = await (await c.execute("SELECT clock_timestamp()")).fetchone()
            now_running += 1
            if now_running >= 2:
                both_running.set()
            # Hold the slot until two run at once (or a while): the limit must be reached.
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(both_running.wait(), 2.0)
            now_running -= 1
            await c.execute(
                "INSERT INTO ledger (job_id, queue, started_at, ended_at) VALUES (%s, 'lim', %s, clock_timestamp())",
                [ctx.job.id, start[0] if start else None],
            )

    ops.add_queue(conn, "pgqueue", "lim")
    ops.set_queue_limits(conn, "pgqueue", "lim", concurrency=2)
    for n in range(16):
        limited.enqueue(conn, n=n)
    async with (
        running_worker(app, queues=("lim",), concurrency=5) as one,
        running_worker(app, queues=("lim",), concurrency=5) as two,
    ):
        await async_wait_until(lambda: one.stats.completed + two.stats.completed == 16, timeout=60)
    assert both_running.is_set()
    assert max_overlap(conn) == 2
    assert conn.execute("SELECT count(*) FROM ledger").fetchone() == (16,)
