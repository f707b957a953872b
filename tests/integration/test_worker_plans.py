"""The worker's hot statements run on generic plans made without sequential scans
(``worker_plans``): PostgreSQL would otherwise plan every claim afresh (a generic plan
cannot know the claim's LIMIT, so the default keeps choosing custom plans, and planning
cost more than a small claim), and a statement prepared while the live table looked empty
would keep scanning the table after jobs poured in. The plans must reach their rows
through indexes whatever the table held when they were made, and the settings must not
leak to anything else that runs on the connection."""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import AsyncIterator
from typing import Any

import psycopg
import pytest
from psycopg import AsyncClientCursor

from pgqueue._db.jobs import JobsDB, cursor_params
from pgqueue.worker.handler import COMPLETED

Conn = psycopg.Connection[Any]
AConn = psycopg.AsyncConnection[Any]
DB = JobsDB("pgqueue")
TASKS = {"t": 5}


def add(conn: Conn, queue: str, n: int) -> None:
    conn.execute(
        "INSERT INTO pgqueue.jobs_live (task, queue, state, run_at)"
        " SELECT 't', %s, 'available', now() - interval '1 minute' FROM generate_series(1, %s)",
        [queue, n],
    )


@pytest.fixture
async def aconn(dsn: str) -> AsyncIterator[AConn]:
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as c:
        yield c


def claim_params(queues: list[str], limit: int) -> dict[str, Any]:
    params: dict[str, Any] = {
        "tasks": list(TASKS),
        "task_max_attempts": list(TASKS.values()),
        "limit": limit,
        "lease": 30.0,
        "worker_id": "w",
    }
    params.update(cursor_params(queues, None, None))
    return params


def plan_nodes(plan: dict[str, Any]) -> list[dict[str, Any]]:
    nodes = [plan]
    for child in plan.get("Plans", []):
        nodes.extend(plan_nodes(child))
    return nodes


@pytest.mark.parametrize("session", [False, True], ids=["per transaction", "for the session"])
async def test_claims_run_on_a_generic_plan_and_leave_the_connection_as_it_was(
    conn: Conn, aconn: AConn, session: bool
) -> None:
    if session:
        await DB.use_session_plans(aconn)
    add(conn, "q", 40)
    claimed = 0
    for _ in range(20):
        jobs, _ = await DB.claim(aconn, queues=["q"], task_limits=TASKS, limit=1, lease=30.0, worker_id="w")
        claimed += len(jobs)
    assert claimed == 20
    cur = await aconn.execute(
        "SELECT generic_plans, custom_plans FROM pg_prepared_statements WHERE statement LIKE 'WITH picked AS%'"
    )
    plans = await cur.fetchall()
    assert plans, "the claim was never prepared"
    assert sum(g for g, _ in plans) > 0, plans
    assert sum(c for _, c in plans) == 0, plans
    cur = await aconn.execute("SELECT current_setting('plan_cache_mode')")
    assert await cur.fetchone() == ("force_generic_plan" if session else "auto",)


@pytest.mark.parametrize("queues", [["q"], ["q", "r"]], ids=["one queue", "many queues"])
async def test_the_generic_claim_plan_reaches_its_rows_through_indexes(
    conn: Conn, aconn: AConn, queues: list[str]
) -> None:
    # Made while the table is empty, then used on thousands of rows: a plan made for the
    # wrong size must still not scan the table.
    conn.execute("ANALYZE pgqueue.jobs_live")
    for _ in range(8):  # psycopg prepares a statement at its 6th run; the plan is made then
        jobs, _ = await DB.claim(aconn, queues=queues, task_limits=TASKS, limit=10, lease=30.0, worker_id="w")
        assert jobs == []
    query = DB.q["job_claim_one_queue" if len(queues) == 1 else "job_claim_many_queues"]
    cur = await aconn.execute(
        "SELECT name, parameter_types::text[] FROM pg_prepared_statements WHERE statement LIKE %s",
        [query.decode()[:30] + "%"],
    )
    row = await cur.fetchone()
    assert row is not None
    name, types = row
    names = list(dict.fromkeys(re.findall(rb"%\((\w+)\)s", query)))  # psycopg numbers them so
    assert len(names) == len(types)
    params = claim_params(queues, 10)
    values = [params[n.decode()] for n in names]
    explain = f"EXPLAIN (FORMAT JSON) EXECUTE {name}(" + ", ".join(f"(%s)::{t}" for t in types) + ")"

    async def scans() -> list[tuple[str, str | None]]:
        async with aconn.transaction():  # the claim's own settings, as DB.claim sends them
            await aconn.execute(DB.q["worker_plans"])
            row = await (await AsyncClientCursor(aconn).execute(explain, values)).fetchone()
        assert row is not None
        plan = row[0] if isinstance(row[0], list) else json.loads(row[0])
        nodes = plan_nodes(plan[0]["Plan"])
        return [(n["Node Type"], n.get("Index Name")) for n in nodes if n.get("Relation Name") == "jobs_live"]

    for queue in queues:
        add(conn, queue, 5_000)
    before_analyze = await scans()
    conn.execute("ANALYZE pgqueue.jobs_live")
    for found in (before_analyze, await scans()):
        assert ("Seq Scan", None) not in found, found
        assert ("Index Scan", "jobs_live_pkey") in found, found
        assert ("Index Scan", "jobs_live_fetch") in found, found
    assert await (await aconn.execute("SELECT current_setting('enable_seqscan')")).fetchone() == ("on",)


async def test_the_outcome_plan_made_on_an_empty_table_finds_rows_by_primary_key(conn: Conn, aconn: AConn) -> None:
    conn.execute("ANALYZE pgqueue.jobs_live")
    for _ in range(8):  # prepared at the 6th run, on an empty table
        assert await DB.record_outcomes(aconn, []) == set()
    cur = await aconn.execute(
        "SELECT name, generic_plans, custom_plans FROM pg_prepared_statements WHERE statement LIKE 'WITH outcome%'"
    )
    row = await cur.fetchone()
    assert row is not None
    name, generic, custom = row
    assert generic > 0, (generic, custom)
    assert custom == 0, (generic, custom)
    add(conn, "q", 5_000)
    jobs, _ = await DB.claim(aconn, queues=["q"], task_limits=TASKS, limit=3, lease=30.0, worker_id="w")
    outcomes = json.dumps(
        [{"id": j.id, "token": str(j.lease_token), "state": "completed", "delay": None, "error": None} for j in jobs]
    )
    async with aconn.transaction(force_rollback=True):
        await aconn.execute(DB.q["worker_plans"])
        explain = f"EXPLAIN (ANALYZE, FORMAT JSON) EXECUTE {name}(%s)"
        found = await (await AsyncClientCursor(aconn).execute(explain, [outcomes])).fetchone()
    assert found is not None
    plan = found[0] if isinstance(found[0], list) else json.loads(found[0])
    nodes = plan_nodes(plan[0]["Plan"])
    scans = [(n["Node Type"], n.get("Index Name")) for n in nodes if n.get("Relation Name") == "jobs_live"]
    assert ("Seq Scan", None) not in scans, scans
    assert ("Index Scan", "jobs_live_pkey") in scans, scans
    assert await DB.record_outcomes(aconn, [(j.id, j.lease_token, COMPLETED) for j in jobs]) == {j.id for j in jobs}


async def test_a_session_on_the_worker_plans_claims_and_records_with_or_without_outcomes(
    conn: Conn, aconn: AConn
) -> None:
    # A hot connection claims alone (one plain statement), claims with outcomes riding along
    # (a pipeline without worker_plans), and records outcomes alone: each on generic plans
    # only, each fenced by lease as on any other connection.
    await DB.use_session_plans(aconn)
    conn.execute("ANALYZE pgqueue.jobs_live")
    for _ in range(8):  # prepared at the 6th run, on an empty table
        assert await DB.record_outcomes(aconn, []) == set()
        assert await DB.claim(aconn, queues=["q"], task_limits=TASKS, limit=2, lease=30.0, worker_id="w") == ([], set())
    add(conn, "q", 5_000)
    first, written = await DB.claim(aconn, queues=["q"], task_limits=TASKS, limit=2, lease=30.0, worker_id="w")
    assert len(first) == 2
    assert written == set()
    stale = (first[1].id, uuid.uuid4(), COMPLETED)  # a lease this worker does not hold
    outcomes = [(first[0].id, first[0].lease_token, COMPLETED), stale]
    second, written = await DB.claim(
        aconn, queues=["q"], task_limits=TASKS, limit=3, lease=30.0, worker_id="w", outcomes=outcomes
    )
    assert len(second) == 3
    assert written == {first[0].id}
    assert await DB.record_outcomes(aconn, [(j.id, j.lease_token, COMPLETED) for j in second]) == {j.id for j in second}
    states = dict(conn.execute("SELECT state::text, count(*) FROM pgqueue.jobs GROUP BY 1").fetchall())
    assert states == {"completed": 4, "running": 1, "available": 4_995}
    assert conn.execute("SELECT state::text FROM pgqueue.jobs_live WHERE id = %s", [first[1].id]).fetchone() == (
        "running",
    )
    cur = await aconn.execute(
        "SELECT statement, generic_plans, custom_plans FROM pg_prepared_statements"
        " WHERE statement LIKE 'WITH picked AS%' OR statement LIKE 'WITH outcome%'"
    )
    plans = await cur.fetchall()
    assert len(plans) == 2, plans
    assert all(generic > 0 and custom == 0 for _, generic, custom in plans), plans
