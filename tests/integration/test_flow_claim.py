"""Flow control decided in the claim, statement by statement against PostgreSQL: pause,
global queue and task concurrency, per-key concurrency and FIFO, rates, and that plain
claims never take what the limited claim guards. No worker runs here: each claim is one
call, so every figure below is exact, not a matter of timing."""

from __future__ import annotations

import asyncio
import random
from collections.abc import AsyncIterator, Sequence
from typing import Any

import psycopg
import pytest

from pgqueue import ops
from pgqueue._db.jobs import ClaimHint, JobsDB
from pgqueue.models import Job, JobState, Outcome

Conn = psycopg.Connection[Any]
AConn = psycopg.AsyncConnection[Any]
DB = JobsDB("pgqueue")
TASKS = {"t": 5, "u": 5}


def add(conn: Conn, queue: str, n: int, *, task: str = "t", key: str | None = None, priority: int = 0) -> list[int]:
    """n available jobs, in id order (run_at increasing with id)."""
    return [
        r[0]
        for r in conn.execute(
            "INSERT INTO pgqueue.jobs_live (task, queue, priority, state, run_at, concurrency_key)"
            " SELECT %s, %s, %s, 'available', now() - interval '1 minute' + make_interval(secs => i / 1000.0), %s"
            " FROM generate_series(1, %s) AS i RETURNING id",
            [task, queue, priority, key, n],
        ).fetchall()
    ]


@pytest.fixture
async def aconn(dsn: str) -> AsyncIterator[AConn]:
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as c:
        yield c


async def limited(
    aconn: AConn,
    queues: Sequence[str],
    limit: int = 100,
    *,
    tasks: dict[str, int] | None = None,
    free: dict[str, int] | None = None,
    cursors: dict[str, str | None] | None = None,
) -> tuple[list[Job], dict[str, ClaimHint]]:
    jobs, hints, _ = await DB.claim_limited(
        aconn,
        queues=queues,
        queue_limits=free or {},
        task_limits=tasks or TASKS,
        limit=limit,
        lease=30.0,
        worker_id="w",
        key_cursors=cursors or {},
    )
    return jobs, {h.queue: h for h in hints}


async def plain(aconn: AConn, queues: Sequence[str], limit: int = 100) -> list[Job]:
    jobs, _ = await DB.claim(aconn, queues=queues, task_limits=TASKS, limit=limit, lease=30.0, worker_id="w")
    return jobs


async def complete(aconn: AConn, jobs: Sequence[Job]) -> None:
    await DB.record_outcomes(aconn, [(j.id, j.lease_token, Outcome(JobState.COMPLETED)) for j in jobs])


def running(conn: Conn, **where: str) -> int:
    clauses = "".join(f" AND {col} = %s" for col in where)
    row = conn.execute(f"SELECT count(*) FROM pgqueue.jobs_live WHERE state = 'running'{clauses}", list(where.values()))
    return int(row.fetchone()[0])  # type: ignore[index]


# -- pause -----------------------------------------------------------------------------------


async def test_a_paused_queue_starts_nothing_until_resumed(conn: Conn, aconn: AConn) -> None:
    add(conn, "q", 3)
    add(conn, "other", 2)
    assert ops.pause_queue(conn, "pgqueue", "q") is True
    assert ops.pause_queue(conn, "pgqueue", "q") is False  # already paused
    assert {j.queue for j in await plain(aconn, ["q", "other"])} == {"other"}
    assert await plain(aconn, ["q"]) == []
    jobs, hints = await limited(aconn, ["q"])
    assert jobs == []
    assert "q" not in hints
    assert ops.resume_queue(conn, "pgqueue", "q") is True
    assert len(await plain(aconn, ["q"])) == 3


# -- global concurrency ---------------------------------------------------------------------


async def test_a_queue_limit_counts_every_running_job_and_frees_slots_as_jobs_finish(conn: Conn, aconn: AConn) -> None:
    add(conn, "q", 10)
    ops.add_queue(conn, "pgqueue", "q")
    ops.set_queue_limits(conn, "pgqueue", "q", concurrency=3)
    assert await plain(aconn, ["q"]) == []  # the plain claim leaves a limited queue alone
    first, _ = await limited(aconn, ["q"])
    assert len(first) == 3
    again, hints = await limited(aconn, ["q"])
    assert again == []
    assert hints["q"].blocked
    await complete(aconn, first[:2])
    more, hints = await limited(aconn, ["q"])
    assert len(more) == 2
    assert hints["q"].blocked  # 5 more wait behind the limit
    assert running(conn, queue="q") == 3


async def test_lowering_a_limit_below_what_runs_stops_new_starts_only(conn: Conn, aconn: AConn) -> None:
    add(conn, "q", 10)
    ops.add_queue(conn, "pgqueue", "q")
    ops.set_queue_limits(conn, "pgqueue", "q", concurrency=5)
    first, _ = await limited(aconn, ["q"])
    ops.set_queue_limits(conn, "pgqueue", "q", concurrency=2)
    assert (await limited(aconn, ["q"]))[0] == []
    await complete(aconn, first[:3])  # 2 still run: at the new limit
    assert (await limited(aconn, ["q"]))[0] == []
    await complete(aconn, first[3:4])
    assert len((await limited(aconn, ["q"]))[0]) == 1
    ops.set_queue_limits(conn, "pgqueue", "q", concurrency=None)  # removed: the plain claim takes the rest
    assert len(await plain(aconn, ["q"])) == 10 - 5 - 1


async def test_a_task_limit_holds_across_queues(conn: Conn, aconn: AConn) -> None:
    add(conn, "a", 5, task="t")
    add(conn, "b", 5, task="t")
    add(conn, "b", 2, task="u")
    ops.set_task_limit(conn, "pgqueue", "t", 3)
    assert {j.task for j in await plain(aconn, ["a", "b"])} == {"u"}  # t is the limited claim's
    jobs, _ = await limited(aconn, ["a", "b"])
    assert [j.task for j in jobs] == ["t"] * 3
    assert (await limited(aconn, ["b", "a"]))[0] == []
    await complete(aconn, jobs[:1])
    assert len((await limited(aconn, ["b"]))[0]) == 1
    assert running(conn, task="t") == 3
    assert [c.running for c in ops.task_controls(conn, "pgqueue")] == [3]


async def test_a_rescued_lease_gives_its_slot_back(conn: Conn, aconn: AConn) -> None:
    add(conn, "q", 3)
    ops.add_queue(conn, "pgqueue", "q")
    ops.set_queue_limits(conn, "pgqueue", "q", concurrency=1)
    (job,), _ = await limited(aconn, ["q"])
    assert (await limited(aconn, ["q"]))[0] == []
    # The worker died: its lease runs out and the rescuer takes the job back.
    conn.execute("UPDATE pgqueue.jobs_live SET lease_expires_at = now() - interval '1 second' WHERE id = %s", [job.id])
    tick = await DB.maintenance_tick(aconn, batch=100, backoff_base=3600, backoff_cap=3600, default_max_attempts=5)
    assert tick.rescued == 1
    assert len((await limited(aconn, ["q"]))[0]) == 1


# -- per-key concurrency --------------------------------------------------------------------


async def test_a_saturated_key_never_holds_up_other_keys(conn: Conn, aconn: AConn) -> None:
    hot = add(conn, "q", 50, key="hot")  # the oldest jobs: in front of everyone else's
    others = [add(conn, "q", 1, key=f"k{i}")[0] for i in range(5)]
    ops.add_queue(conn, "pgqueue", "q")
    ops.set_queue_limits(conn, "pgqueue", "q", key_concurrency=1)
    jobs, hints = await limited(aconn, ["q"])
    assert sorted(j.id for j in jobs) == sorted([hot[0], *others])
    late = add(conn, "q", 1, key="late")
    jobs, hints = await limited(aconn, ["q"], cursors={"q": hints["q"].key_cursor})
    assert [j.id for j in jobs] == late
    assert hints["q"].blocked
    assert (await limited(aconn, ["q"]))[0] == []  # hot is at its limit, nobody else waits


async def test_keys_take_turns_when_a_claim_cannot_take_them_all(conn: Conn, aconn: AConn) -> None:
    for key in ("a", "b", "c", "d"):
        add(conn, "q", 3, key=key)
    ops.add_queue(conn, "pgqueue", "q")
    ops.set_queue_limits(conn, "pgqueue", "q", key_concurrency=3)
    seen: list[str] = []
    cursor: str | None = None
    for _ in range(4):
        jobs, hints = await limited(aconn, ["q"], limit=1, cursors={"q": cursor})
        cursor = hints["q"].key_cursor
        for job in jobs:
            row = conn.execute("SELECT concurrency_key FROM pgqueue.jobs WHERE id = %s", [job.id]).fetchone()
            assert row is not None
            seen.append(row[0])
    assert seen == ["a", "b", "c", "d"]


async def test_the_key_walk_wraps_around_after_the_cursor(conn: Conn, aconn: AConn) -> None:
    ids = {key: add(conn, "q", 2, key=key) for key in ("a", "b", "c", "d")}
    ops.add_queue(conn, "pgqueue", "q")
    ops.set_queue_limits(conn, "pgqueue", "q", key_concurrency=1)
    jobs, hints = await limited(aconn, ["q"], limit=3, cursors={"q": "b"})
    assert sorted(j.id for j in jobs) == sorted([ids["c"][0], ids["d"][0], ids["a"][0]])
    assert hints["q"].key_cursor == "a"  # the walk went c, d, then from the start: a
    # b is next; a, c and d are at their limit: one job, and nothing locked beyond it.
    jobs, hints = await limited(aconn, ["q"], limit=3, cursors={"q": "a"})
    assert [j.id for j in jobs] == [ids["b"][0]]
    assert hints["q"].blocked
    assert running(conn) == 4


async def test_a_key_gets_what_its_limit_leaves_and_only_jobs_it_may_run(conn: Conn, aconn: AConn) -> None:
    a = add(conn, "q", 4, key="a")
    b_other_task = add(conn, "q", 2, key="b", task="elsewhere")  # a task this worker does not run
    b = add(conn, "q", 2, key="b")
    conn.execute("UPDATE pgqueue.jobs_live SET expires_at = now() - interval '1 second' WHERE id = %s", [b[0]])
    ops.add_queue(conn, "pgqueue", "q")
    ops.set_queue_limits(conn, "pgqueue", "q", key_concurrency=3)
    (first,), _ = await limited(aconn, ["q"], limit=1)
    assert first.id == a[0]
    jobs, _ = await limited(aconn, ["q"], cursors={"q": "b"})  # a has 1 running: 2 more
    assert sorted(j.id for j in jobs) == sorted([a[1], a[2], b[1]])
    assert running(conn, concurrency_key="a") == 3
    assert not set(b_other_task) & {j.id for j in jobs}


async def test_fifo_runs_a_keys_jobs_one_at_a_time_in_enqueue_order(conn: Conn, aconn: AConn) -> None:
    first, second, _third = add(conn, "q", 3, key="k", priority=0)
    add(conn, "q", 1, key="k", priority=10)  # a higher priority does not jump the queue
    ops.add_queue(conn, "pgqueue", "q")
    ops.set_queue_limits(conn, "pgqueue", "q", key_concurrency=1, key_fifo=True)
    (job,), _ = await limited(aconn, ["q"])
    assert job.id == first
    # It fails and waits for its retry: the key stays blocked behind it.
    await DB.record_outcomes(aconn, [(job.id, job.lease_token, Outcome(JobState.RETRYABLE, delay=3600))])
    assert (await limited(aconn, ["q"]))[0] == []
    conn.execute("UPDATE pgqueue.jobs_live SET state = 'available', run_at = now() WHERE id = %s", [first])
    (job,), _ = await limited(aconn, ["q"])
    assert job.id == first
    await complete(aconn, [job])
    (job,), _ = await limited(aconn, ["q"])
    assert job.id == second


async def test_key_and_queue_limits_apply_together(conn: Conn, aconn: AConn) -> None:
    for key in ("a", "b", "c"):
        add(conn, "q", 5, key=key)
    ops.add_queue(conn, "pgqueue", "q")
    ops.set_queue_limits(conn, "pgqueue", "q", concurrency=4, key_concurrency=2)
    jobs, _ = await limited(aconn, ["q"])
    assert len(jobs) == 4
    keys = conn.execute(
        "SELECT concurrency_key, count(*) FROM pgqueue.jobs_live WHERE state = 'running' GROUP BY 1"
    ).fetchall()
    assert all(n <= 2 for _, n in keys)


# -- rates ------------------------------------------------------------------------------------


async def test_a_rate_allows_so_many_starts_per_window_and_says_when_the_next_one_is(conn: Conn, aconn: AConn) -> None:
    add(conn, "q", 10)
    ops.add_queue(conn, "pgqueue", "q")
    ops.set_queue_limits(conn, "pgqueue", "q", rate=(3, 3600))
    jobs, hints = await limited(aconn, ["q"])
    assert len(jobs) == 3
    assert hints["q"].wait is None
    await complete(aconn, jobs)  # finishing does not give a start back
    jobs, hints = await limited(aconn, ["q"])
    assert jobs == []
    assert hints["q"].wait is not None
    assert 3000 < hints["q"].wait <= 3600
    assert ops.queue_controls(conn, "pgqueue")[0].starts_in_window == 3


async def test_a_key_rate_is_per_key(conn: Conn, aconn: AConn) -> None:
    add(conn, "q", 5, key="a")
    add(conn, "q", 5, key="b")
    ops.add_queue(conn, "pgqueue", "q")
    ops.set_queue_limits(conn, "pgqueue", "q", key_rate=(2, 3600))
    jobs, _hints = await limited(aconn, ["q"])
    assert len(jobs) == 4
    assert (await limited(aconn, ["q"]))[0] == []


async def test_a_sliding_window_counts_starts_not_calendar_slots(conn: Conn, aconn: AConn) -> None:
    add(conn, "q", 10)
    ops.add_queue(conn, "pgqueue", "q")
    ops.set_queue_limits(conn, "pgqueue", "q", rate=(2, 3600))
    assert len((await limited(aconn, ["q"], limit=1))[0]) == 1
    # The first start slides out of the window (as if 59 minutes had passed), the second is recent.
    conn.execute("UPDATE pgqueue.rate_starts SET at = at - interval '3599 seconds'")
    assert len((await limited(aconn, ["q"], limit=1))[0]) == 1
    assert (await limited(aconn, ["q"]))[0] == []
    conn.execute(
        "UPDATE pgqueue.rate_starts SET at = at - interval '2 seconds'"
        " WHERE at = (SELECT min(at) FROM pgqueue.rate_starts)"
    )
    assert len((await limited(aconn, ["q"]))[0]) == 1  # the old one left the window


# -- exactness under concurrent claims ---------------------------------------------------------


async def test_concurrent_claimers_never_exceed_the_queue_or_a_key_limit(conn: Conn, dsn: str) -> None:
    for key in ("a", "b", "c"):
        add(conn, "q", 60, key=key)
    add(conn, "q", 60)
    ops.add_queue(conn, "pgqueue", "q")
    ops.set_queue_limits(conn, "pgqueue", "q", concurrency=7, key_concurrency=2)
    over: list[tuple[int, int]] = []
    stop = asyncio.Event()

    async def claimer(seed: int) -> None:
        rng = random.Random(seed)
        async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as c:
            held: list[Job] = []
            while not stop.is_set():
                jobs, _ = await limited(c, ["q"], limit=rng.randint(1, 4))
                held += jobs
                if held and rng.random() < 0.6:
                    done = rng.sample(held, rng.randint(1, len(held)))
                    await complete(c, done)
                    held = [j for j in held if j not in done]
            await complete(c, held)

    async def monitor() -> int:
        samples = 0
        async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as c:
            while not stop.is_set():
                total = await (
                    await c.execute(
                        "SELECT count(*), (SELECT coalesce(max(n), 0) FROM (SELECT count(*) AS n FROM pgqueue.jobs_live"
                        " WHERE state = 'running' AND concurrency_key IS NOT NULL GROUP BY concurrency_key) AS k)"
                        " FROM pgqueue.jobs_live WHERE state = 'running'"
                    )
                ).fetchone()
                assert total is not None
                if total[0] > 7 or total[1] > 2:
                    over.append((total[0], total[1]))
                samples += 1
                remaining = await (await c.execute("SELECT count(*) FROM pgqueue.jobs_live")).fetchone()
                if remaining is not None and remaining[0] == 0:
                    stop.set()
        return samples

    claimers = [asyncio.create_task(claimer(seed)) for seed in range(8)]
    samples = await asyncio.wait_for(monitor(), timeout=120)
    await asyncio.gather(*claimers)
    assert samples > 10
    assert over == []
    finished = conn.execute("SELECT count(*) FROM pgqueue.jobs WHERE state = 'completed'").fetchone()
    assert finished == (240,)
