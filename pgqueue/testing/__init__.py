"""Helpers for testing code that uses pgqueue, against a real database.

* :func:`enqueued_jobs`, :func:`assert_enqueued`, :func:`refute_enqueued`: what waits in
  the queue;
* :func:`perform_job`: run a task's handler now, as a worker would (real context, lease,
  attempt, transactional connection), and get back what it returned or raised;
* :func:`drain`: run every due job in this process until none is left, following retries
  and scheduled jobs by moving the test clock (:func:`advance`) instead of sleeping;
* :func:`inline`: a mode in which a job enqueued in a transaction runs as soon as that
  transaction commits (and never when it rolls back).

The pytest fixtures (each test starts from a database equal to a migrated template: a
clone, reset after each test that changed only rows) live in
:mod:`pgqueue.testing.fixtures`; see docs/testing.md. Importing this module imports no
test framework.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

import psycopg

from .._db.testing import TestingDB, WaitingJob
from ..app import App, Task
from ..errors import ConfigError
from ..models import JobState
from ._inline import inline
from ._run import LEASE, WORKER_ID, claim_and_run, run_claimed, task_limits

__all__ = [
    "DrainResult",
    "WaitingJob",
    "advance",
    "assert_enqueued",
    "drain",
    "enqueued_jobs",
    "inline",
    "perform_job",
    "refute_enqueued",
]


@contextmanager
def _connection(app: App, conn: psycopg.Connection[Any] | None) -> Iterator[psycopg.Connection[Any]]:
    if conn is not None:
        yield conn
        return
    with psycopg.connect(app.dsn, autocommit=True) as own:
        yield own


def _app_and_task(target: App | Task[Any, Any] | str, app: App | None) -> tuple[App, str | None]:
    if isinstance(target, Task):
        return target.app, target.name
    if isinstance(target, App):
        return target, None
    if isinstance(target, str) and app is not None:
        return app, target
    raise ConfigError(f"expected a pgqueue Task or App (or a task name with app=...), got {target!r}")


# -- what is enqueued ----------------------------------------------------------------------


def enqueued_jobs(
    target: App | Task[Any, Any] | str,
    conn: psycopg.Connection[Any] | None = None,
    /,
    *,
    app: App | None = None,
    queue: str | None = None,
    **args: Any,
) -> list[WaitingJob]:
    """The jobs waiting to run (available, scheduled or retryable), oldest first: of one
    task (a :class:`~pgqueue.Task`, or a name with ``app=``) or of a whole app, in
    ``queue`` if given, whose arguments include ``args`` (each given argument equal).

    ``conn`` reads inside its open transaction (to see jobs not yet committed); without
    it a new connection to the app's database is used.
    """
    the_app, task = _app_and_task(target, app)
    with _connection(the_app, conn) as c:
        jobs = TestingDB(the_app.schema).waiting_jobs(c, task=task, queue=queue)
    missing = object()
    return [j for j in jobs if all(j.args.get(k, missing) == v for k, v in args.items())]


def _describe(target: App | Task[Any, Any] | str, args: dict[str, Any]) -> str:
    name = target.name if isinstance(target, Task) else "any task" if isinstance(target, App) else target
    return f"{name} with {args}" if args else str(name)


def assert_enqueued(
    target: App | Task[Any, Any] | str,
    conn: psycopg.Connection[Any] | None = None,
    /,
    *,
    app: App | None = None,
    queue: str | None = None,
    **args: Any,
) -> WaitingJob:
    """Fail unless a job of ``target`` whose arguments include ``args`` waits to run;
    returns the oldest such job. The failure lists the jobs that do wait."""
    found = enqueued_jobs(target, conn, app=app, queue=queue, **args)
    if found:
        return found[0]
    the_app, task = _app_and_task(target, app)
    waiting = enqueued_jobs(the_app if task is None else task, conn, app=the_app, queue=queue)
    listed = "\n".join(f"  #{j.id} {j.task} {j.state} queue={j.queue} args={j.args}" for j in waiting) or "  (none)"
    raise AssertionError(f"no job of {_describe(target, args)} is enqueued; waiting jobs:\n{listed}")


def refute_enqueued(
    target: App | Task[Any, Any] | str,
    conn: psycopg.Connection[Any] | None = None,
    /,
    *,
    app: App | None = None,
    queue: str | None = None,
    **args: Any,
) -> None:
    """Fail if a job of ``target`` whose arguments include ``args`` waits to run."""
    found = enqueued_jobs(target, conn, app=app, queue=queue, **args)
    if found:
        listed = "\n".join(f"  #{j.id} {j.task} {j.state} args={j.args}" for j in found)
        raise AssertionError(f"expected no job of {_describe(target, args)}, found:\n{listed}")


# -- running jobs --------------------------------------------------------------------------


def perform_job(task: Task[Any, Any], /, **args: Any) -> Any:
    """Enqueue one job of ``task`` (committed, on the app's database), claim it and run its
    handler in this process, as a worker would: the same argument checks as enqueue, a
    real :class:`~pgqueue.JobContext` (attempt 1, a lease, for a transactional task
    ``ctx.conn`` in the transaction that records the completion), the outcome written.

    Returns what the handler returned; raises what it raised (``Retry``, ``Snooze`` and
    ``Cancel`` included), after recording that outcome as a worker would.

    Raises:
        InvalidArgumentsError: ``args`` do not fit the handler or are not JSON.
    """
    if not isinstance(task, Task):
        raise ConfigError(f"perform_job takes a pgqueue Task, got {task!r}")
    app = task.app
    with psycopg.connect(app.dsn, autocommit=True) as conn:
        with conn.transaction():
            job_id = int(task.enqueue(conn, **args))
        ran = claim_and_run(app, conn, job_id, task_limits(app))
    if ran is None:
        raise ConfigError(f"job {job_id} of {task.name!r} could not be claimed (a unique rule kept an older job?)")
    if ran.error is not None:
        raise ran.error
    return ran.value


@dataclass
class DrainResult:
    """How the attempts :func:`drain` ran ended, one count per outcome; equal to another
    result with the same counts (``advanced`` is not compared)."""

    completed: int = 0
    #: Attempts that failed and will be retried.
    retryable: int = 0
    discarded: int = 0
    cancelled: int = 0
    #: Attempts that asked to run again later (``Snooze``).
    snoozed: int = 0
    #: Seconds the test clock was moved forward to reach scheduled and retried jobs.
    advanced: float = field(default=0.0, compare=False)

    def as_dict(self) -> dict[str, int]:
        return {
            "completed": self.completed,
            "retryable": self.retryable,
            "discarded": self.discarded,
            "cancelled": self.cancelled,
            "snoozed": self.snoozed,
        }

    @property
    def attempts(self) -> int:
        return sum(self.as_dict().values())


def _seconds(value: float | timedelta | None, what: str) -> float | None:
    if value is None:
        return None
    seconds = value.total_seconds() if isinstance(value, timedelta) else value
    if isinstance(seconds, bool) or not isinstance(seconds, int | float) or math.isnan(seconds) or seconds < 0:
        raise ConfigError(f"{what} must be seconds >= 0 or a timedelta, got {value!r}")
    return float(seconds)


def _queues(app: App, queues: Sequence[str] | str | None) -> list[str] | None:
    if queues is None:
        return None
    if isinstance(queues, str):
        return [queues]
    return list(queues)


def drain(
    app: App,
    *,
    queues: Sequence[str] | str | None = None,
    follow: bool = True,
    horizon: float | timedelta | None = None,
    max_attempts: int = 10_000,
) -> DrainResult:
    """Run the due jobs of ``queues`` (default: every queue) one at a time in this process
    until none is due, and return how their attempts ended.

    With ``follow`` (the default) scheduled and retried jobs are followed: when nothing is
    due, the test clock moves forward to the next waiting job (:func:`advance`), no
    further than ``horizon`` seconds in all (None: no limit), so backoffs and delays take
    no time. ``max_attempts`` bounds the attempts run (a job that snoozes forever).

    Raises:
        AssertionError: more than ``max_attempts`` attempts were needed.
    """
    limit = _seconds(horizon, "horizon")
    names = _queues(app, queues)
    tasks = task_limits(app)
    db = TestingDB(app.schema)
    result = DrainResult()
    with psycopg.connect(app.dsn, autocommit=True) as conn:
        while True:
            with conn.transaction():
                job = db.claim_next(conn, queues=names, tasks=tasks, lease=LEASE, worker_id=WORKER_ID)
            if job is None:
                if not follow:
                    break
                wait = db.next_timer(conn, queues=names, tasks=tasks)
                if wait is None or (limit is not None and result.advanced + wait > limit):
                    break
                db.advance(conn, wait, queues=names)
                result.advanced += wait
                continue
            if result.attempts >= max_attempts:
                raise AssertionError(f"drain ran {max_attempts} attempts and jobs are still due (max_attempts=...)")
            outcome = run_claimed(app, conn, job).outcome
            if outcome.snoozed:
                result.snoozed += 1
            elif outcome.state == JobState.COMPLETED:
                result.completed += 1
            elif outcome.state == JobState.RETRYABLE:
                result.retryable += 1
            elif outcome.state == JobState.DISCARDED:
                result.discarded += 1
            else:
                result.cancelled += 1
    return result


def advance(app: App, seconds: float | timedelta, *, queues: Sequence[str] | str | None = None) -> int:
    """Move the test clock ``seconds`` forward for the waiting jobs of ``queues`` (default:
    all): their run_at and deadlines come that much earlier, so those due by then become
    available at once. Returns how many became available. The database's own clock does
    not move: only the jobs' timers (unique periods and cron are not affected).
    """
    amount = _seconds(seconds, "seconds")
    if amount is None:
        raise ConfigError("seconds must be given (seconds >= 0 or a timedelta)")
    with psycopg.connect(app.dsn, autocommit=True) as conn:
        return TestingDB(app.schema).advance(conn, amount, queues=_queues(app, queues))
