"""Fixtures and helpers of the hostile-input tests (loaded as a pytest plugin from
conftest.py): an `echo` task that records what it ran with, the `intact` check, and a
way to run a real worker until given jobs are final.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import pytest

import pgqueue
from tests.conftest import async_wait_until, running_worker
from tests.enqueue_support import Conn

EchoTask = pgqueue.Task[..., None]
Check = Callable[[], None]

INJECTIONS = [
    "x'; DROP TABLE canary; --",
    "'); DROP TABLE canary; --",
    '"; DROP TABLE canary; --',
    '"',
    "$$; DROP TABLE canary; $$",
    "\\'; DROP TABLE canary; --",
]
LOOKALIKES = [
    "d\u0435fault",  # Cyrillic e
    "\uff44\uff45\uff46\uff41\uff55\uff4c\uff54",  # fullwidth "default"
    "de\u200bfault",  # zero-width space
    "default\u202e",  # right-to-left override
    "default\n",  # a trailing newline slips past a regex ending in "$"
    "default\x00",
]


# -- fixtures ------------------------------------------------------------------------------


@pytest.fixture
def received(app: pgqueue.App) -> dict[int, dict[str, Any]]:
    """Arguments each job of the `echo` task ran with, by job id."""
    return {}


@pytest.fixture
def echo(app: pgqueue.App, received: dict[int, dict[str, Any]]) -> EchoTask:
    @app.task(name="hostile.echo", queue="hq", max_attempts=3, pass_context=True)
    def echo_fn(ctx: pgqueue.JobContext, **kwargs: Any) -> None:
        received[ctx.job.id] = kwargs

    return echo_fn


#: A finished-job day partition, or one of its indexes: the worker's partition upkeep
#: creates the days ahead as the date moves on (a run that crosses midnight UTC).
_DAY_PARTITION = re.compile(r"^(pgqueue\.)?jobs_(completed|discarded|cancelled)_[0-9]{8}(_|$)")


def _snapshot(conn: Conn) -> tuple[Any, ...]:
    jobs = conn.execute(
        "SELECT id, state::text, queue, task, args, priority, run_at, attempt FROM pgqueue.jobs"
        " WHERE queue = 'bystander' ORDER BY id"
    ).fetchall()
    relations = conn.execute(
        "SELECT relname, relkind FROM pg_class WHERE relnamespace = 'pgqueue'::regnamespace ORDER BY 1"
    ).fetchall()
    constraints = conn.execute(
        "SELECT conrelid::regclass::text, conname, pg_get_constraintdef(oid) FROM pg_constraint"
        " WHERE connamespace = 'pgqueue'::regnamespace ORDER BY 1, 2"
    ).fetchall()
    functions = conn.execute(
        "SELECT p.oid::regprocedure::text, md5(p.prosrc), p.prosecdef FROM pg_proc p"
        " WHERE p.pronamespace = 'pgqueue'::regnamespace ORDER BY 1"
    ).fetchall()
    canary = conn.execute("SELECT note FROM public.canary ORDER BY note").fetchall()
    days = {r for r in relations if _DAY_PARTITION.match(r[0])}
    return (
        jobs,
        [r for r in relations if r not in days],
        [c for c in constraints if not _DAY_PARTITION.match(c[0])],
        functions,
        canary,
        days,
    )


@pytest.fixture
def intact(conn: Conn) -> Check:
    """A canary table and two bystander jobs; call the result to assert nothing changed
    (but for day partitions created ahead meanwhile: none may go)."""
    conn.execute("CREATE TABLE public.canary (note text NOT NULL)")
    conn.execute("INSERT INTO public.canary VALUES ('alive')")
    conn.execute("SELECT pgqueue.enqueue('bystander.task', '{\"keep\": [1, \"two\"]}', queue => 'bystander')")
    conn.execute(
        "SELECT pgqueue.enqueue('bystander.task', '{\"later\": true}', queue => 'bystander',"
        " run_at => now() + interval '1 day', priority => 7)"
    )
    before = _snapshot(conn)
    assert len(before[0]) == 2
    assert before[-1], "no day partitions seen"

    def check() -> None:
        after = _snapshot(conn)
        assert after[:-1] == before[:-1]
        assert before[-1] <= after[-1], f"day partitions gone: {sorted(before[-1] - after[-1])}"

    return check


async def run_until_final(app: pgqueue.App, ids: list[int], conn: Conn, **config: Any) -> dict[int, str]:
    """Run a real worker on queue 'hq' until every job of ``ids`` reached a final state."""

    def finals() -> dict[int, str] | None:
        rows = dict(conn.execute("SELECT id, state::text FROM pgqueue.jobs WHERE id = ANY(%s)", [ids]).fetchall())
        done = {i: s for i, s in rows.items() if s in {"completed", "discarded", "cancelled"}}
        return done if len(done) == len(ids) else None

    async with running_worker(app, queues=("hq",), **config):
        result: dict[int, str] = await async_wait_until(finals, timeout=30)
    return result


def poison_outcome(conn: Conn, job_id: int) -> tuple[int, list[dict[str, Any]]]:
    """Attempts and errors of a job whose args this test process could not decode either."""
    row = conn.execute("SELECT attempt, errors FROM pgqueue.jobs WHERE id = %s", [job_id]).fetchone()
    assert row is not None
    return row[0], row[1]


def sql_enqueue(conn: Conn, args: Any, **kw: Any) -> int:
    names = ", ".join(f"{k} => %({k})s" for k in kw)
    query = "SELECT pgqueue.enqueue('hostile.echo', %(args)s::jsonb, queue => 'hq'" + (", " + names if kw else "") + ")"
    row = conn.execute(query.encode(), {"args": args, **kw}).fetchone()
    assert row is not None
    return int(row[0])
