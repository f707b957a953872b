"""The limited claim's cost where it matters: with thousands of keyed jobs waiting behind a
saturated key, it reaches its jobs through indexes (never a scan of the live table), and
it looks for jobs without a key only when its caller asks."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import psycopg
import pytest

from pgqueue import ops
from pgqueue._db.jobs import JobsDB
from pgqueue._db.sql import lock_name

Conn = psycopg.Connection[Any]
AConn = psycopg.AsyncConnection[Any]
DB = JobsDB("pgqueue")
TASKS = {"t": 5}


def add(conn: Conn, queue: str, n: int, key: str | None) -> list[int]:
    return [
        r[0]
        for r in conn.execute(
            "INSERT INTO pgqueue.jobs_live (task, queue, state, run_at, concurrency_key)"
            " SELECT 't', %s, 'available', now() - interval '1 minute' + make_interval(secs => i / 1000.0), %s"
            " FROM generate_series(1, %s) AS i RETURNING id",
            [queue, key, n],
        ).fetchall()
    ]


@pytest.fixture
async def aconn(dsn: str) -> AsyncIterator[AConn]:
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as c:
        yield c


def plan_nodes(plan: dict[str, Any]) -> list[dict[str, Any]]:
    nodes = [plan]
    for child in plan.get("Plans", []):
        nodes.extend(plan_nodes(child))
    return nodes


def test_the_limited_claim_reaches_its_picks_by_primary_key_not_a_scan(conn: Conn) -> None:
    add(conn, "q", 20_000, "hot")
    add(conn, "q", 20, None)
    ops.add_queue(conn, "pgqueue", "q")
    ops.set_queue_limits(conn, "pgqueue", "q", key_concurrency=1)
    conn.execute("ANALYZE pgqueue.jobs_live")
    params = {
        "queues": ["q"],
        "queue_limits": [None],
        "tasks": list(TASKS),
        "task_max_attempts": list(TASKS.values()),
        "limit": 10,
        "lease": 30.0,
        "worker_id": "w",
        "key_cursors": [None],
        "unkeyed": [True],
    }
    with conn.transaction():
        lock = {"queues": ["q"], "tasks": list(TASKS), "lock_prefix": lock_name("limit", "pgqueue") + ":"}
        conn.execute(DB.q["job_claim_lock"], lock)
        row = conn.execute(b"EXPLAIN (FORMAT JSON) " + DB.q["job_claim_limited"], params).fetchone()
        assert row is not None
        plan = row[0] if isinstance(row[0], list) else json.loads(row[0])
    nodes = plan_nodes(plan[0]["Plan"])
    scans = [(n["Node Type"], n.get("Relation Name"), n.get("Index Name")) for n in nodes if "Relation Name" in n]
    assert ("Seq Scan", "jobs_live", None) not in scans, scans
    assert any(kind.startswith("Index") and rel == "jobs_live" for kind, rel, _ in scans), scans


async def test_jobs_without_a_key_are_searched_for_only_when_asked(conn: Conn, aconn: AConn) -> None:
    hot = add(conn, "q", 5, "hot")
    plain = add(conn, "q", 2, None)
    ops.add_queue(conn, "pgqueue", "q")
    ops.set_queue_limits(conn, "pgqueue", "q", key_concurrency=1)

    async def claim(unkeyed: bool) -> tuple[list[int], bool | None]:
        jobs, hints, _ = await DB.claim_limited(
            aconn,
            queues=["q"],
            queue_limits={},
            task_limits=TASKS,
            limit=10,
            lease=30.0,
            worker_id="w",
            key_cursors={},
            unkeyed={"q": unkeyed},
        )
        (hint,) = hints
        return sorted(j.id for j in jobs), hint.unkeyed

    assert await claim(False) == ([hot[0]], None)
    assert await claim(True) == (plain, True)
    assert await claim(True) == ([], False)


async def test_a_rate_window_keeps_one_row_per_claim_with_its_starts(conn: Conn, aconn: AConn) -> None:
    add(conn, "q", 10, None)
    ops.add_queue(conn, "pgqueue", "q")
    ops.set_queue_limits(conn, "pgqueue", "q", rate=(7, 3600))

    async def claim() -> int:
        jobs, _, _ = await DB.claim_limited(
            aconn, queues=["q"], queue_limits={}, task_limits=TASKS, limit=5, lease=30.0, worker_id="w", key_cursors={}
        )
        return len(jobs)

    assert await claim() == 5
    assert await claim() == 2
    assert await claim() == 0
    assert conn.execute("SELECT n FROM pgqueue.rate_starts ORDER BY at").fetchall() == [(5,), (2,)]
    assert ops.queue_controls(conn, "pgqueue")[0].starts_in_window == 7
