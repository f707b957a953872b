"""The claim cursor: claims that resume after the last job taken, and their rewinds."""

from __future__ import annotations

import asyncio
import uuid
from datetime import timedelta
from typing import Any

import psycopg

import pgqueue
from pgqueue._db.jobs import cursor_params
from pgqueue._db.sql import queries_for
from pgqueue.models import Job
from pgqueue.worker.claim_cursor import (
    HEAD,
    MIN_REWIND_INTERVAL,
    REWIND_BUDGET,
    RUN_AT_MARGIN,
    ClaimCursor,
    ClaimCursors,
)
from tests.conftest import async_wait_until, job_states, running_worker

Conn = psycopg.Connection[Any]
Q = queries_for("pgqueue")


def claim_after(conn: Conn, queues: list[str], after: dict[str, ClaimCursor], limit: int) -> list[tuple[Any, ...]]:
    query = Q["job_claim_one_queue" if len(queues) == 1 else "job_claim_many_queues"]
    params = {
        **cursor_params(queues, after),
        "tasks": ["t"],
        "task_max_attempts": [5],
        "limit": limit,
        "lease": 30.0,
        "worker_id": "w",
    }
    return conn.execute(query, params).fetchall()


def add_jobs(conn: Conn, queue: str, priorities: list[int]) -> list[int]:
    return [
        row[0]
        for row in conn.execute(
            "INSERT INTO pgqueue.jobs_live (task, queue, priority, state, run_at)"
            " SELECT 't', %s, p, 'available', now() - make_interval(secs => 10 - i)"
            " FROM unnest(%s::smallint[]) WITH ORDINALITY AS x(p, i) RETURNING id",
            [queue, priorities],
        ).fetchall()
    ]


def job_of(row: tuple[Any, ...]) -> Job:
    return Job(*row)


def test_claim_resumes_after_the_cursor_in_claim_order(conn: Conn) -> None:
    ids = add_jobs(conn, "q", [0, 0, 0, 0, 5, -5])
    first = claim_after(conn, ["q"], {}, 2)
    # Head first: the priority-5 job, then the oldest priority-0 job.
    assert [r[0] for r in first] == [ids[4], ids[0]]
    cursor = max(ClaimCursor.of(job_of(r)) for r in first)
    assert cursor == ClaimCursor(0, job_of(first[1]).run_at, ids[0])
    rest = claim_after(conn, ["q"], {"q": cursor}, 10)
    # After the cursor: the remaining priority-0 jobs in run_at order, then priority -5.
    assert [r[0] for r in rest] == [ids[1], ids[2], ids[3], ids[5]]


def test_a_job_behind_the_cursor_is_skipped_until_a_claim_from_the_head(conn: Conn) -> None:
    ids = add_jobs(conn, "q", [0, 0, 0])
    taken = claim_after(conn, ["q"], {}, 2)
    cursor = max(ClaimCursor.of(job_of(r)) for r in taken)
    behind = add_jobs(conn, "q", [9])  # higher priority: before the cursor in claim order
    assert [r[0] for r in claim_after(conn, ["q"], {"q": cursor}, 10)] == [ids[2]]
    assert [r[0] for r in claim_after(conn, ["q"], {"q": HEAD}, 10)] == behind


def test_each_queue_has_its_own_cursor(conn: Conn) -> None:
    a = add_jobs(conn, "a", [0, 0, 0])
    b = add_jobs(conn, "b", [0, 0, 0])
    cur_a = ClaimCursor.of(job_of(claim_after(conn, ["a"], {}, 1)[0]))
    rows = claim_after(conn, ["a", "b"], {"a": cur_a}, 10)
    # Queue a resumes after its first job; queue b, without a cursor, starts at its head.
    assert sorted(r[0] for r in rows) == sorted([a[1], a[2], *b])


def fake_job(queue: str, priority: int, run_at_offset: float, job_id: int) -> Job:
    base = HEAD.run_at + timedelta(days=800_000)
    run_at = base + timedelta(seconds=run_at_offset)
    return Job(job_id, queue, "t", {}, priority, 1, 5, uuid.uuid4(), run_at, base, timedelta(0))


def test_cursor_engages_only_when_a_head_claim_is_slow_and_rewinds_within_budget() -> None:
    cursors = ClaimCursors(threshold=0.02)
    jobs = [fake_job("q", 0, 1.0, 1), fake_job("q", 0, 2.0, 2)]
    cursors.observe(jobs, from_head=True, elapsed=0.5, now=50.0)
    assert not cursors.engaged  # slow, but no snapshot pins dead rows: another cause
    cursors.set_pinned(True)
    cursors.observe(jobs, from_head=True, elapsed=0.005, now=100.0)
    assert not cursors.engaged  # pinned, but the head is still cheap
    assert cursors.after(100.1) == {}

    cursors.observe(jobs, from_head=True, elapsed=0.5, now=200.0)
    assert cursors.engaged
    after = cursors.after(200.1)
    assert after["q"] == ClaimCursor(0, jobs[1].run_at - RUN_AT_MARGIN, 0)
    cursors.observe([fake_job("q", 0, 3.0, 3)], from_head=False, elapsed=0.001, now=200.2)
    assert cursors.after(200.3)["q"].run_at == jobs[1].run_at + timedelta(seconds=1) - RUN_AT_MARGIN
    # A head scan of 0.5 s may run at most every 0.5 / REWIND_BUDGET seconds.
    rewind_at = 200.0 + max(MIN_REWIND_INTERVAL, 0.5 / REWIND_BUDGET)
    assert cursors.after(rewind_at - 0.01) != {}
    assert cursors.after(rewind_at) == {}
    assert cursors.rewinds == 1
    assert not cursors.engaged

    cursors.observe(jobs, from_head=True, elapsed=0.5, now=300.0)
    assert cursors.engaged
    cursors.set_pinned(False)  # the snapshot went away: exact order again at once
    assert not cursors.engaged

    disabled = ClaimCursors(threshold=0)
    disabled.set_pinned(True)
    disabled.observe(jobs, from_head=True, elapsed=10.0, now=0.0)
    assert not disabled.engaged


async def test_worker_with_an_engaged_cursor_still_runs_jobs_behind_it(app: pgqueue.App, conn: Conn) -> None:
    ran: list[str] = []

    @app.task(name="c")
    async def c(key: str) -> None:
        ran.append(key)
        await asyncio.sleep(0.002)

    app.enqueue_many(conn, [c.job(key=f"bulk-{i}") for i in range(400)])
    # Pinned by hand and a tiny threshold: the cursor engages after the first claim.
    # (vacuum_interval=0: no maintenance check that would unpin it.)
    async with running_worker(
        app, concurrency=4, fetch_batch=4, claim_cursor_threshold=1e-9, vacuum_interval=0
    ) as worker:
        worker.cursors.set_pinned(True)
        await async_wait_until(lambda: worker.cursors.engaged)
        # Behind the cursor in claim order: a higher priority, and a run_at in the past.
        c.options(priority=10).enqueue(conn, key="urgent")
        c.options(run_at=conn.execute("SELECT now() - interval '1 hour'").fetchone()[0]).enqueue(  # type: ignore[index]
            conn, key="old"
        )
        await async_wait_until(lambda: {"urgent", "old"} <= set(ran), timeout=30)
        await async_wait_until(lambda: worker.stats.completed == 402, timeout=30)
    assert job_states(conn) == {"completed": 402}
    assert sorted(ran) == sorted([f"bulk-{i}" for i in range(400)] + ["urgent", "old"])
