"""Calls one attempt's handler and maps what it did to an outcome. No SQL except for
the transactional mode, where the completion must share the handler's transaction (and
goes through the DB layer's ``record_outcomes``).

Outcome rules: return -> completed, with the returned value as the job's result (None: no
result); a value that cannot be stored (not JSON, over ``max_result_bytes``) -> discarded
at once with a :class:`~pgqueue.ResultError` (a transactional handler's writes roll back);
``Cancel`` -> cancelled; ``Snooze(after)`` ->
scheduled after that delay (available at once for 0), the attempt given back and no error
recorded, even on the last attempt; ``Retry(after)`` -> retryable after that delay; an
exception of a ``non_retryable`` type, or arguments that do not fit the handler's
signature (or cannot be decoded) -> discarded at once; any
other exception or a timeout -> retryable after the task's backoff. A retryable outcome on
the last attempt becomes discarded (the dead letter), with every error kept.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextvars
import functools
import json
import threading
import traceback
from dataclasses import dataclass
from typing import Any

import psycopg

from .._db import workflows as workflows_db
from .._db.jobs import JobsDB
from ..errors import Cancel, InvalidArgumentsError, ResultError, Retry, Snooze, UndecodableArgsError
from ..models import BatchInfo, Job, JobContext, JobState, Outcome
from ..results.encode import DEFAULT_MAX_RESULT_BYTES, encode_result
from ..task import TaskDef
from .connections import Connections

__all__ = ["COMPLETED", "Attempt", "HandlerRunner", "LeaseLost", "error_record", "failure_outcome"]

_MAX_MESSAGE = 4000
_MAX_TRACEBACK = 16000


class LeaseLost(Exception):  # noqa: N818
    """The job's lease was no longer ours when the transactional completion ran."""


@dataclass(slots=True)
class Attempt:
    #: None when nothing is left to write (transactional success, or lease lost).
    outcome: Outcome | None
    #: A sync handler that timed out keeps its thread until it returns; the slot stays
    #: taken until then, so capacity reflects reality.
    straggler: asyncio.Future[Any] | None = None
    #: True when a transactional handler committed its completion itself.
    committed: bool = False


def error_record(exc: BaseException, job: Job, worker_id: str) -> dict[str, Any]:
    tb = "".join(traceback.format_exception(exc))
    return {
        "attempt": job.attempt,
        "type": f"{type(exc).__module__}.{type(exc).__qualname__}",
        "message": str(exc)[:_MAX_MESSAGE],
        "traceback": tb[-_MAX_TRACEBACK:],
        "worker": worker_id,
    }


def _arguments_error(task: TaskDef | None, job: Job, exc: BaseException) -> BaseException:
    """A ``TypeError`` raised because the stored arguments do not fit the handler (it
    changed since enqueue, or the job came by name from SQL or another service) becomes
    an :class:`InvalidArgumentsError`, which no retry can fix; any other error is kept."""
    if task is None or type(exc) is not TypeError:
        return exc
    problem = task.args_checker.problem(job.args)
    if problem is None:
        return exc  # raised inside the handler: an ordinary failure
    error = InvalidArgumentsError(f"task {task.name!r}: the job's arguments do not fit the handler: {problem}")
    error.__cause__ = exc
    return error


def failure_outcome(task: TaskDef | None, job: Job, exc: BaseException, worker_id: str) -> Outcome:
    if isinstance(exc, Snooze):  # not a failure: no error, no attempt used
        return Outcome(JobState.SCHEDULED if exc.after > 0 else JobState.AVAILABLE, delay=exc.after)
    original, exc = exc, _arguments_error(task, job, exc)
    error = error_record(exc, job, worker_id)
    last = job.attempt >= job.max_attempts
    if isinstance(exc, Cancel):
        return Outcome(JobState.CANCELLED, error=error)
    if (
        exc is not original
        or isinstance(exc, UndecodableArgsError | ResultError)
        or (task is not None and task.non_retryable and isinstance(exc, task.non_retryable))
    ):
        return Outcome(JobState.DISCARDED, error=error)
    if last:
        return Outcome(JobState.DISCARDED, error=error)
    if isinstance(exc, Retry):
        return Outcome(JobState.RETRYABLE, delay=exc.after, error=error)
    delay = task.retry.delay(job.attempt) if task is not None else 1.0
    return Outcome(JobState.RETRYABLE, delay=delay, error=error)


COMPLETED = Outcome(JobState.COMPLETED)

#: A child's parents as its context shows them: (results, states) by parent id, and for a
#: batch callback the batch's counts.
_Parents = tuple[dict[int, Any], dict[int, str], BatchInfo | None] | None


class HandlerRunner:
    """Runs handlers: ``async def`` ones on the loop, plain ones in a thread pool of
    ``threads`` threads (made on first use), each under its task's timeout."""

    def __init__(
        self,
        *,
        db: JobsDB,
        worker_id: str,
        connections: Connections,
        threads: int,
        max_result_bytes: int = DEFAULT_MAX_RESULT_BYTES,
    ) -> None:
        self.db = db
        self.max_result_bytes = max_result_bytes
        self.worker_id = worker_id
        self.connections = connections
        self._threads_max = threads
        self._threads: concurrent.futures.ThreadPoolExecutor | None = None
        self._sync_running = 0
        self._sync_lock = threading.Lock()

    @property
    def threads(self) -> concurrent.futures.ThreadPoolExecutor:
        if self._threads is None:
            self._threads = concurrent.futures.ThreadPoolExecutor(self._threads_max, thread_name_prefix="pgqueue-job")
        return self._threads

    def close(self) -> None:
        """Stop the thread pool without waiting: a stuck sync handler keeps its thread."""
        if self._threads is not None:
            self._threads.shutdown(wait=False, cancel_futures=True)

    @property
    def sync_running(self) -> int:
        """Sync handlers running in their threads now (a timed-out one until it returns)."""
        with self._sync_lock:
            return self._sync_running

    async def _parents(self, task: TaskDef, job: Job) -> _Parents:
        """A child's parents, read before its handler runs (only for jobs with parents whose
        handler takes a context): (results, states) by parent id."""
        if not (job.has_parents and task.pass_context):
            return None
        async with self.connections.connection() as conn:
            rows = await workflows_db.parent_results(conn, self.db.schema, job.id)
            batch = await workflows_db.callback_batch(conn, self.db.schema, job.id) if not rows else None
        return (
            {r.id: None if r.result is None else json.loads(r.result) for r in rows},
            {r.id: r.state or "removed" for r in rows},
            None if batch is None else BatchInfo(*batch),
        )

    def _context(self, job: Job, parents: _Parents, conn: Any = None) -> JobContext:
        if parents is None:
            return JobContext(job, self.worker_id, conn)
        return JobContext(
            job, self.worker_id, conn, parent_results=parents[0], parent_states=parents[1], batch=parents[2]
        )

    async def run(self, task: TaskDef, job: Job) -> Attempt:
        straggler: asyncio.Future[Any] | None = None
        try:
            parents = await self._parents(task, job)
            if task.is_async:
                result = await asyncio.wait_for(self._call_async(task, job, parents), task.timeout)
            else:
                straggler = asyncio.get_running_loop().run_in_executor(
                    self.threads, functools.partial(contextvars.copy_context().run, self._call_sync, task, job, parents)
                )
                result = await asyncio.wait_for(asyncio.shield(straggler), task.timeout)
                straggler = None
        except TimeoutError:
            exc = TimeoutError(f"task {task.name} exceeded its {task.timeout}s timeout")
            return Attempt(failure_outcome(task, job, exc, self.worker_id), straggler)
        except LeaseLost:
            return Attempt(None)
        except asyncio.CancelledError as exc:
            current = asyncio.current_task()
            if current is not None and current.cancelling():
                raise  # we are being cancelled (shutdown, lost lease): not the handler's doing
            return Attempt(failure_outcome(task, job, exc, self.worker_id))
        except KeyboardInterrupt:
            raise
        except BaseException as exc:  # noqa: BLE001 - a handler may raise anything, even SystemExit
            return Attempt(failure_outcome(task, job, exc, self.worker_id))
        if task.transactional:
            return Attempt(None, committed=True)
        if result is None:
            return Attempt(COMPLETED)
        return Attempt(Outcome(JobState.COMPLETED, result=result))

    def _completed(self, task: TaskDef, value: Any) -> str | None:
        """The result to store for a handler's return ``value`` (JSON text; None: none).

        Raises:
            ResultError: ``value`` is not JSON or is too big (the job is discarded).
        """
        return None if value is None else encode_result(task.name, value, self.max_result_bytes)

    async def _call_async(self, task: TaskDef, job: Job, parents: _Parents) -> str | None:
        """Run an ``async def`` handler; returns its result as JSON text (None: none).
        A transactional one records its completion, result included, in its transaction."""
        if not task.transactional:
            if task.pass_context:
                return self._completed(task, await task.fn(self._context(job, parents), **job.args))
            return self._completed(task, await task.fn(**job.args))
        async with self.connections.connection() as conn, conn.transaction():
            result = self._completed(task, await task.fn(self._context(job, parents, conn), **job.args))
            outcome = COMPLETED if result is None else Outcome(JobState.COMPLETED, result=result)
            held = await self.db.record_outcomes(conn, [(job.id, job.lease_token, outcome)])
            if job.id not in held:
                raise LeaseLost()  # rolls back the handler's writes with it
        return None

    def _call_sync(self, task: TaskDef, job: Job, parents: _Parents) -> str | None:
        with self._sync_lock:
            self._sync_running += 1
        try:
            return self._call_sync_handler(task, job, parents)
        finally:
            with self._sync_lock:
                self._sync_running -= 1

    def _call_sync_handler(self, task: TaskDef, job: Job, parents: _Parents) -> str | None:
        # In the handler's thread: a big result is encoded off the event loop.
        if not task.transactional:
            if task.pass_context:
                return self._completed(task, task.fn(self._context(job, parents), **job.args))
            return self._completed(task, task.fn(**job.args))
        conn: psycopg.Connection[Any]
        with self.connections.sync_pool().connection() as conn, conn.transaction():
            result = self._completed(task, task.fn(self._context(job, parents, conn), **job.args))
            outcome = COMPLETED if result is None else Outcome(JobState.COMPLETED, result=result)
            if job.id not in self.db.record_outcomes_sync(conn, [(job.id, job.lease_token, outcome)]):
                raise LeaseLost()
        return None
