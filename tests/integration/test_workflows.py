"""Dependencies between jobs against the real database: depends_on, chains, groups and DAGs
created atomically; waiting jobs are visible and never claimed early; the completion
statement releases dependents (or cancels them, cascading, by policy); children read their
parents' results; unknown ids, finished parents and cycles behave as documented; every path
that finishes a job (completion, cancel_job, rescuer, expiry) settles its dependents."""

from __future__ import annotations

import asyncio
import json
import threading
from datetime import timedelta
from typing import Any

import psycopg
import pytest

import pgqueue
from pgqueue import Dependency, WorkflowError, ops
from pgqueue._db.jobs import outcome_params
from pgqueue._db.sql import queries_for
from pgqueue.models import JobState, Outcome
from tests.apps.support import state_of
from tests.cli_support import invoke
from tests.conftest import async_wait_until, running_worker
from tests.enqueue_support import claim
from tests.integration.test_tick_watermark import tick as tick_since

Conn = psycopg.Connection[Any]
FINAL = {"completed", "discarded", "cancelled"}


def row(conn: Conn, job_id: int) -> dict[str, Any]:
    cur = conn.execute(
        "SELECT state::text, waiting_on, has_children, workflow_id, run_at, scheduled_at, started_at, finished_at,"
        " errors FROM pgqueue.jobs WHERE id = %s",
        [job_id],
    )
    found = cur.fetchone()
    assert found is not None, f"no job {job_id}"
    assert cur.description is not None
    return dict(zip([d.name for d in cur.description], found, strict=True))


async def finish(app: pgqueue.App, conn: Conn, job_ids: list[int], **config: Any) -> None:
    async with running_worker(app, **config):
        await async_wait_until(lambda: all(state_of(conn, j) in FINAL for j in job_ids), timeout=30)


Q = queries_for("pgqueue")


def tick(conn: Conn) -> None:
    tick_since(conn, None)


def claim_ids(conn: Conn, task: str, limit: int = 10) -> list[int]:
    return [r[0] for r in claim(conn, "default", {task: 1}, limit=limit)]


def complete(conn: Conn, task: str, result: str | None = None) -> int:
    """Claim one job of ``task`` and record it completed, as a worker does."""
    rows = claim(conn, "default", {task: 1}, limit=1)
    assert rows, f"nothing of {task} to claim"
    job_id, token = rows[0][0], rows[0][7]
    outcomes = outcome_params([(job_id, token, Outcome(JobState.COMPLETED, result=result))])
    assert [r[0] for r in conn.execute(Q["job_record_outcomes"], outcomes).fetchall()] == [job_id]
    return int(job_id)


def count(conn: Conn, query: str, *params: Any) -> int:
    found = conn.execute(query, list(params)).fetchone()
    assert found is not None
    return int(found[0])


# -- creation -------------------------------------------------------------------------------


def test_depends_on_waits_visibly_and_is_never_claimed(app: pgqueue.App, conn: Conn) -> None:
    @app.task(name="wf.a")
    def a() -> None: ...

    parent = a.enqueue(conn)
    child = a.options(depends_on=[parent]).enqueue(conn)
    r = row(conn, child)
    assert (r["state"], r["waiting_on"]) == ("scheduled", 1)
    assert row(conn, parent)["has_children"] is True
    assert row(conn, parent)["workflow_id"] == parent == r["workflow_id"]
    waiting = conn.execute("SELECT id, waiting_for FROM pgqueue.waiting_jobs").fetchall()
    assert waiting == [(child, [parent])]
    # Not backlog: queue_stats counts no lag for it, and neither the scheduler nor a claim takes it.
    tick(conn)
    assert claim_ids(conn, "wf.a") == [parent]
    assert row(conn, child)["state"] == "scheduled"
    lag = conn.execute("SELECT available, lag_seconds FROM pgqueue.queue_stats WHERE queue = 'default'").fetchone()
    assert lag == (0, 0)


def test_rolled_back_workflow_leaves_nothing(app: pgqueue.App, conn: Conn) -> None:
    @app.task(name="wf.b")
    def b(n: int) -> None: ...

    before = count(conn, "SELECT count(*) FROM pgqueue.jobs")
    wf = app.workflow()
    top = wf.add(b.job(n=0))
    mids = [wf.add(b.job(n=i), after=[top]) for i in range(1, 4)]
    wf.add(b.job(n=9), after=mids)

    def create_then_fail() -> None:
        with conn.transaction():
            assert len(wf.enqueue(conn)) == 5
            assert count(conn, "SELECT count(*) FROM pgqueue.job_deps") == 6
            raise RuntimeError("roll back")

    with pytest.raises(RuntimeError):
        create_then_fail()
    assert count(conn, "SELECT count(*) FROM pgqueue.jobs") == before
    assert count(conn, "SELECT count(*) FROM pgqueue.job_deps") == 0


def test_unknown_dependency_is_refused_and_creates_nothing(app: pgqueue.App, conn: Conn) -> None:
    @app.task(name="wf.c")
    def c() -> None: ...

    wf = app.group(c.job(), c.job())
    wf.then(c.job())
    wf.add(c.job(), after=[987654])
    with pytest.raises(WorkflowError, match="depends_on names job 987654, which does not exist"):
        wf.enqueue(conn)
    assert count(conn, "SELECT count(*) FROM pgqueue.jobs") == 0
    with pytest.raises(WorkflowError, match="does not exist"):
        c.options(depends_on=[987654]).enqueue(conn)
    assert count(conn, "SELECT count(*) FROM pgqueue.jobs") == 0


def test_cycles_are_refused_before_anything_is_sent(app: pgqueue.App, conn: Conn) -> None:
    @app.task(name="wf.d")
    def d() -> None: ...

    wf = app.workflow()
    x = wf.add(d.job())
    y = wf.add(d.job(), after=[x])
    z = wf.add(d.job(), after=[y])
    wf.depend(x, z)
    with pytest.raises(WorkflowError, match="cycle"):
        wf.enqueue(conn)
    with pytest.raises(WorkflowError, match="itself"):
        wf.depend(x, x)
    with pytest.raises(pgqueue.ConfigError, match="on_failure"):
        Dependency(1, "skip")  # type: ignore[arg-type]
    with pytest.raises(pgqueue.ConfigError, match="unique"):
        d.options(unique_key="k", depends_on=[1]).job()
    # The SQL function refuses a forward reference (a cycle through raw input) too.
    with pytest.raises(psycopg.errors.InvalidParameterValue, match="earlier nodes"):
        conn.execute(
            "SELECT pgqueue.enqueue_workflow(%s::jsonb)",
            ['[{"task":"wf.d","queue":"default","deps":[["n",1,"cancel"]]},{"task":"wf.d","queue":"default"}]'],
        )
    assert count(conn, "SELECT count(*) FROM pgqueue.jobs") == 0


def test_dependency_on_finished_jobs(app: pgqueue.App, conn: Conn) -> None:
    @app.task(name="wf.e")
    def e() -> None: ...

    done = e.enqueue(conn)
    assert complete(conn, "wf.e", '{"x": 1}') == done
    failed = e.enqueue(conn)
    conn.execute("SELECT pgqueue.cancel_job(%s)", [failed])
    assert (state_of(conn, done), state_of(conn, failed)) == ("completed", "cancelled")
    # Completed parent: satisfied at once. Cancelled parent: the policy decides.
    now_ready = e.options(depends_on=[done]).enqueue(conn)
    assert row(conn, now_ready)["state"] == "available"
    cancelled = e.options(depends_on=[done, failed]).enqueue(conn)
    r = row(conn, cancelled)
    assert r["state"] == "cancelled"
    assert r["errors"][-1]["type"] == "pgqueue.DependencyFailed"
    assert f"job {failed} it depends on ended cancelled" in r["errors"][-1]["message"]
    anyway = e.options(depends_on=[Dependency(failed, on_failure="run")]).enqueue(conn)
    assert row(conn, anyway)["state"] == "available"


# -- running ----------------------------------------------------------------------------------


async def test_diamond_runs_in_order_and_children_read_parent_results(app: pgqueue.App, conn: Conn) -> None:
    started: dict[int, float] = {}
    finished: dict[int, float] = {}
    lock = threading.Lock()
    seen: dict[str, Any] = {}

    @app.task(name="wf.step", pass_context=True)
    async def step(ctx: pgqueue.JobContext, name: str) -> dict[str, Any]:
        loop = asyncio.get_running_loop()
        with lock:
            started[ctx.job.id] = loop.time()
        seen[name] = (dict(ctx.parent_results), dict(ctx.parent_states))
        await asyncio.sleep(0.01)
        with lock:
            finished[ctx.job.id] = loop.time()
        return {"name": name}

    wf = app.workflow()
    top = wf.add(step.job(name="top"))
    left = wf.add(step.job(name="left"), after=[top])
    right = wf.add(step.job(name="right"), after=[top])
    bottom = wf.add(step.job(name="bottom"), after=[left, right])
    with conn.transaction():
        h = wf.enqueue(conn)
    assert [row(conn, x)["workflow_id"] for x in h] == [h[0]] * 4
    await finish(app, conn, list(h), concurrency=8)
    assert all(state_of(conn, x) == "completed" for x in h)
    for child, parents in ((left, [top]), (right, [top]), (bottom, [left, right])):
        for p in parents:
            assert started[h[child]] >= finished[h[p]]
    assert seen["bottom"] == (
        {h[left]: {"name": "left"}, h[right]: {"name": "right"}},
        {h[left]: "completed", h[right]: "completed"},
    )
    assert seen["top"] == ({}, {})
    assert await h[bottom].result_async(timeout=10) == {"name": "bottom"}


async def test_chain_and_group_then(app: pgqueue.App, conn: Conn) -> None:
    order: list[int] = []

    @app.task(name="wf.link")
    def link(n: int) -> int:
        order.append(n)
        return n

    chain = app.chain(*(link.job(n=i) for i in range(5)))
    fan = app.group(*(link.job(n=10 + i) for i in range(3))).then(link.job(n=99))
    h1 = chain.enqueue(conn)
    h2 = fan.enqueue(conn)
    await finish(app, conn, [*h1, *h2], concurrency=4)
    assert [n for n in order if n < 10] == [0, 1, 2, 3, 4]
    assert order.index(99) > max(order.index(10), order.index(11), order.index(12))
    progress = ops.workflow_progress(conn, "pgqueue", h2[0])
    assert progress is not None
    assert (progress.total, progress.completed) == (4, 4)


async def test_failed_parent_cancels_cascading_or_runs_anyway(app: pgqueue.App, conn: Conn) -> None:
    ran: list[str] = []

    @app.task(name="wf.fail", max_attempts=1)
    def fail() -> None:
        raise ValueError("boom")

    @app.task(name="wf.ok")
    def ok(name: str) -> None:
        ran.append(name)

    wf = app.workflow()
    f = wf.add(fail.job())
    cancelled = wf.add(ok.job(name="cancelled"), after=[f])
    grandchild = wf.add(ok.job(name="grandchild"), after=[cancelled])
    anyway = wf.add(ok.job(name="anyway"), after=[Dependency(f, on_failure="run")])
    after_anyway = wf.add(ok.job(name="after-anyway"), after=[anyway])
    h = wf.enqueue(conn)
    await finish(app, conn, list(h))
    assert [state_of(conn, h[i]) for i in (f, cancelled, grandchild, anyway, after_anyway)] == [
        "discarded", "cancelled", "cancelled", "completed", "completed",
    ]  # fmt: skip
    assert sorted(ran) == ["after-anyway", "anyway"]
    assert f"job {h[cancelled]} it depends on ended cancelled" in row(conn, h[grandchild])["errors"][-1]["message"]
    with pytest.raises(pgqueue.JobFailed, match=r"DependencyFailed|depends on"):
        app.result(conn, h[grandchild])

    # Retry the whole workflow: the failed job runs again, its dependents wait for it anew.
    assert ops.retry_workflow(conn, "pgqueue", h[f]) == 3
    assert row(conn, h[cancelled])["waiting_on"] == 1
    assert row(conn, h[grandchild])["waiting_on"] == 1
    await finish(app, conn, [h[f], h[cancelled], h[grandchild]])
    assert state_of(conn, h[cancelled]) == "cancelled"  # fail failed again: cancelled again


def test_cancel_paths_settle_dependents(app: pgqueue.App, conn: Conn) -> None:
    @app.task(name="wf.g")
    def g() -> None: ...

    # An operator's cancel_job() of a waiting parent cascades.
    h = app.chain(g.job(), g.job(), g.job()).enqueue(conn)
    assert ops.cancel_job(conn, "pgqueue", h[0]) == "cancelled"
    assert [state_of(conn, x) for x in h] == ["cancelled"] * 3
    # A whole workflow.
    w = app.group(g.job(), g.job()).then(g.job()).enqueue(conn)
    assert ops.cancel_workflow(conn, "pgqueue", w[0]) == 3
    assert [state_of(conn, x) for x in w] == ["cancelled"] * 3
    # Expiry of a parent that never started.
    p = g.options(expires_in=timedelta(seconds=30)).enqueue(conn)
    c = g.options(depends_on=[p]).enqueue(conn)
    conn.execute("UPDATE pgqueue.jobs_live SET expires_at = now() - interval '1 second' WHERE id = %s", [p])
    tick(conn)
    assert (state_of(conn, p), state_of(conn, c)) == ("cancelled", "cancelled")


def test_rescuer_discarding_a_parent_settles_its_children(app: pgqueue.App, conn: Conn) -> None:
    @app.task(name="wf.h", max_attempts=1)
    def hh() -> None: ...

    p = hh.enqueue(conn)
    run_anyway = hh.options(depends_on=[Dependency(p, on_failure="run")]).enqueue(conn)
    cancelled = hh.options(depends_on=[p]).enqueue(conn)
    assert claim_ids(conn, "wf.h", 1) == [p]
    conn.execute("UPDATE pgqueue.jobs_live SET lease_expires_at = now() - interval '1 second' WHERE id = %s", [p])
    tick(conn)
    assert state_of(conn, p) == "discarded"
    assert row(conn, run_anyway)["state"] == "available"
    assert row(conn, cancelled)["state"] == "cancelled"


def test_enqueue_many_with_dependencies(app: pgqueue.App, conn: Conn) -> None:
    @app.task(name="wf.m")
    def m(n: int) -> None: ...

    parent = m.enqueue(conn, n=0)
    jobs = [m.job(n=1), m.options(depends_on=[parent]).job(n=2), m.job(n=3)]
    assert app.enqueue_many(conn, jobs) == 3
    assert count(conn, "SELECT count(*) FROM pgqueue.waiting_jobs") == 1
    with pytest.raises(WorkflowError, match="does not exist"), conn.transaction():
        app.enqueue_many(conn, [m.options(depends_on=[424242]).job(n=4)])


# -- inspection -------------------------------------------------------------------------------


def test_cli_shows_relations_and_acts_on_workflows(app: pgqueue.App, conn: Conn, dsn: str) -> None:
    @app.task(name="wf.cli")
    def cli_task() -> None: ...

    h = app.group(cli_task.job(), cli_task.job()).then(cli_task.job()).enqueue(conn)
    shown = invoke("jobs", "show", str(h[2]), "--dsn", dsn)
    assert shown.exit_code == 0, shown.output
    assert any(line.split()[1:3] == ["workflow", str(h[0])] for line in shown.output.splitlines() if line.split())
    assert f"{h[0]} (cancel: open)" in shown.output
    parent = invoke("jobs", "show", str(h[0]), "--dsn", dsn, "--json")
    assert json.loads(parent.output)["workflow"]["children"] == [[h[2], "cancel"]]
    plain = cli_task.enqueue(conn)
    assert "workflow" not in json.loads(invoke("jobs", "show", str(plain), "--dsn", dsn, "--json").output)

    progress = invoke("workflows", "show", str(h[0]), "--dsn", dsn)
    assert progress.exit_code == 0, progress.output
    assert "3 jobs, 1 waiting, 2 ready (in progress)" in progress.output
    assert invoke("workflows", "cancel", str(h[0]), "--dsn", dsn).exit_code == 0
    assert [state_of(conn, x) for x in h] == ["cancelled"] * 3
    retried = invoke("workflows", "retry", str(h[0]), "--dsn", dsn)
    assert "3 job(s) retried" in retried.output
    assert [row(conn, x)["state"] for x in h] == ["available", "available", "scheduled"]
    assert row(conn, h[2])["waiting_on"] == 2
    missing = invoke("workflows", "show", "99999", "--dsn", dsn)
    assert missing.exit_code != 0
    assert "no workflow with id 99999" in missing.output + (missing.stderr or "")
