"""Running one claimed job in the test's own process, the way a worker would: the
handler gets a real :class:`~pgqueue.JobContext` (the claimed job, its attempt and lease;
for a transactional task a connection whose transaction also records the completion),
its outcome follows the worker's rules (:func:`pgqueue.worker.handler.failure_outcome`)
and is written, fenced by the lease. Unlike a worker, what the handler returned or raised
comes back to the caller as the object itself. Task timeouts are not applied.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import psycopg

from .._db.jobs import JobsDB
from .._db.testing import TestingDB
from ..app import App
from ..errors import ConfigError
from ..models import Job, JobContext, JobState, Outcome
from ..results.encode import encode_result
from ..task import TaskDef
from ..worker.handler import failure_outcome

__all__ = ["LEASE", "WORKER_ID", "Ran", "claim_and_run", "run_claimed", "task_limits"]

#: The worker id written on jobs run by pgqueue.testing.
WORKER_ID = "pgqueue-testing"
#: The lease of a job run in a test (seconds): long enough for any test's handler.
LEASE = 3600.0


@dataclass(frozen=True, slots=True)
class Ran:
    """One attempt run by pgqueue.testing."""

    job: Job
    #: What was written for the attempt (its state says how it ended).
    outcome: Outcome
    #: What the handler returned (None when it raised).
    value: Any = None
    #: What the handler raised (None when it returned).
    error: Exception | None = None


def task_limits(app: App) -> dict[str, int]:
    """Every task of ``app`` with its max_attempts (what a claim needs)."""
    return {name: task.max_attempts for name, task in app.tasks.items()}


class _Fenced(Exception):  # noqa: N818
    """The lease was not ours when the completion was written."""


def _completed(app: App, task: TaskDef, value: Any) -> Outcome:
    if value is None:
        return Outcome(JobState.COMPLETED)
    return Outcome(JobState.COMPLETED, result=encode_result(task.name, value, app.max_result_bytes))


def _record(db: JobsDB, conn: psycopg.Connection[Any], job: Job, outcome: Outcome) -> None:
    with conn.transaction():
        if job.id not in db.record_outcomes_sync(conn, [(job.id, job.lease_token, outcome)]):
            raise _Fenced(f"job {job.id}: its lease was taken over while the test ran it")


def run_claimed(app: App, conn: psycopg.Connection[Any], job: Job) -> Ran:
    """Run ``job`` (claimed on ``conn`` by pgqueue.testing) and write its outcome on ``conn``.

    Raises:
        ConfigError: an ``async def`` handler while an event loop runs in this thread (use
        a worker, or run the helper in a thread: ``await asyncio.to_thread(drain, app)``).
    """
    task = app.tasks[job.task]
    db = JobsDB(app.schema)
    if task.is_async:
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            return asyncio.run(_run_async(app, db, task, job, conn))
        raise ConfigError(
            f"task {task.name!r} is async and an event loop runs in this thread: call pgqueue.testing's helpers "
            "from a thread (await asyncio.to_thread(...))"
        )
    try:
        if task.transactional:
            with conn.transaction():  # the handler's writes and its completion commit together
                value = task.fn(JobContext(job, WORKER_ID, conn), **job.args)
                outcome = _completed(app, task, value)
                _record(db, conn, job, outcome)
            return Ran(job, outcome, value)
        value = task.fn(*_context(task, job), **job.args)
        outcome = _completed(app, task, value)
    except _Fenced:
        raise
    except Exception as exc:  # noqa: BLE001 - a handler may raise anything: recorded, then handed back
        return _failed(db, conn, task, job, exc)
    _record(db, conn, job, outcome)
    return Ran(job, outcome, value)


def _context(task: TaskDef, job: Job) -> tuple[JobContext, ...]:
    return (JobContext(job, WORKER_ID),) if task.pass_context else ()


def _failed(db: JobsDB, conn: psycopg.Connection[Any], task: TaskDef, job: Job, exc: Exception) -> Ran:
    outcome = failure_outcome(task, job, exc, WORKER_ID)
    _record(db, conn, job, outcome)
    return Ran(job, outcome, error=exc)


async def _run_async(app: App, db: JobsDB, task: TaskDef, job: Job, conn: psycopg.Connection[Any]) -> Ran:
    try:
        if task.transactional:
            async with await psycopg.AsyncConnection.connect(app.dsn) as aconn, aconn.transaction():
                value = await task.fn(JobContext(job, WORKER_ID, aconn), **job.args)
                outcome = _completed(app, task, value)
                if job.id not in await db.record_outcomes(aconn, [(job.id, job.lease_token, outcome)]):
                    raise _Fenced(f"job {job.id}: its lease was taken over while the test ran it")
            return Ran(job, outcome, value)
        value = await task.fn(*_context(task, job), **job.args)
        outcome = _completed(app, task, value)
    except _Fenced:
        raise
    except Exception as exc:  # noqa: BLE001 - a handler may raise anything: recorded, then handed back
        return _failed(db, conn, task, job, exc)
    _record(db, conn, job, outcome)
    return Ran(job, outcome, value)


def claim_and_run(app: App, conn: psycopg.Connection[Any], job_id: int, tasks: Mapping[str, int]) -> Ran | None:
    """Claim job ``job_id`` now and run it; None when it is not waiting (or never committed)."""
    with conn.transaction():
        job = TestingDB(app.schema).claim_job(conn, job_id, tasks=tasks, lease=LEASE, worker_id=WORKER_ID)
    return None if job is None else run_claimed(app, conn, job)
