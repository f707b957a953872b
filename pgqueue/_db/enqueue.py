"""The DB layer of enqueue: one job by one named query, many by COPY (plus the keyed ones
by the race-safe function), sync and async twins; database refusals become pgqueue's
errors through :func:`pgqueue._db.errors.enqueue_error`.

Enqueue never commits: it runs inside whatever transaction the caller's connection has
open, which is what makes a job exist iff the caller's transaction commits.
"""

from __future__ import annotations

import logging
import re
from collections.abc import AsyncIterable, Iterable, Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
from psycopg.pq import PipelineStatus, TransactionStatus

from .._enqueue import node_json
from .._wake import NO_WINDOW, Plan, WakeThrottle
from ..errors import InvalidArgumentsError, PgQueueError
from ..models import JobSpec
from .conn import AnyConn, expect_row
from .errors import enqueue_error
from .sql import queries_for
from .workflows import enqueue_graph, enqueue_graph_async

__all__ = ["enqueue_many", "enqueue_many_async", "enqueue_one", "enqueue_one_async"]

log = logging.getLogger("pgqueue.enqueue")


# -- one job ---------------------------------------------------------------------------


def params(spec: JobSpec, plan: Plan | None = None) -> dict[str, Any]:
    """The parameters of ``job_insert`` / ``job_enqueue`` for one job (``plan``: its
    wake-up, when a :class:`~pgqueue._wake.WakeThrottle` decided it)."""
    return {
        "wake": plan is None or plan.notify,
        "echo": None if plan is None else plan.echo,
        "task": spec.task,
        "args": spec.args_json,
        "queue": spec.queue,
        "priority": spec.priority,
        "run_at": spec.run_at,
        "delay": spec.delay or 0.0,
        "unique_key": spec.unique_key,
        "max_attempts": spec.max_attempts,
        "concurrency_key": spec.concurrency_key,
        "expires_at": spec.expires_at,
        "expires_in": spec.expires_in,
        "unique_period": spec.unique_period,
        "unique_states": None if spec.unique_states is None else list(spec.unique_states),
        "unique_mode": spec.unique_mode,
    }


def _query(schema: str, spec: JobSpec) -> bytes:
    # Keyed jobs need the function's race-safe lookup of the key's holder; the rest take
    # a plain INSERT (same rules, no PL/pgSQL).
    return queries_for(schema)["job_enqueue" if spec.unique_key is not None else "job_insert"]


def _dependent_nodes(specs: list[JobSpec]) -> str:
    """Jobs with dependencies on existing jobs, as independent nodes of enqueue_workflow()."""
    return (
        "[" + ",".join(node_json(s, [("j", pid, policy) for pid, policy in s.depends_on], False) for s in specs) + "]"
    )


def _plan(conn: AnyConn, spec: JobSpec, wakes: WakeThrottle) -> Plan | None:
    """The throttle's decision for a job due now whose statement is its own transaction
    (there the commit is seen to happen); None (always notify) for every other job."""
    if (
        not wakes.window
        or spec.unique_key is not None
        or spec.run_at is not None
        or spec.delay
        or not conn.autocommit
        or conn.info.transaction_status != TransactionStatus.IDLE
        # In a pipeline a result comes before the Sync that commits it.
        or conn.pgconn.pipeline_status != PipelineStatus.OFF
    ):
        return None
    info = conn.info
    return wakes.plan((info.host, info.port, info.dbname), spec.queue)


def _repair_failed(wakes: WakeThrottle, plan: Plan | None, exc: BaseException, job_id: int) -> None:
    # The job is committed: failing the call now would invite a duplicate. Workers find it
    # by the queue's next wake-up (the window is closed: the next job notifies) or by
    # their safety-net poll.
    wakes.settle(plan, ok=False)
    log.warning("job %s enqueued, but its wake-up could not be sent (%s); workers will find it by polling", job_id, exc)


def enqueue_one(conn: psycopg.Connection[Any], schema: str, spec: JobSpec, wakes: WakeThrottle = NO_WINDOW) -> int:
    if spec.depends_on:
        return enqueue_graph(conn, schema, _dependent_nodes([spec]))[0]
    plan = _plan(conn, spec, wakes)
    try:
        row = conn.execute(_query(schema, spec), params(spec, plan)).fetchone()
    except BaseException as exc:
        wakes.settle(plan, ok=False)
        if isinstance(exc, psycopg.Error):
            raise enqueue_error(exc, conn, schema) from exc
        raise
    job_id = int(expect_row(row, "job_insert")[0])
    if wakes.settle(plan, ok=True):
        try:
            conn.execute(queries_for(schema)["queue_notify"], {"queues": [spec.queue]})
        except BaseException as exc:
            _repair_failed(wakes, plan, exc, job_id)
            if not isinstance(exc, psycopg.Error):
                raise
    return job_id


async def enqueue_one_async(
    conn: psycopg.AsyncConnection[Any], schema: str, spec: JobSpec, wakes: WakeThrottle = NO_WINDOW
) -> int:
    if spec.depends_on:
        return (await enqueue_graph_async(conn, schema, _dependent_nodes([spec])))[0]
    plan = _plan(conn, spec, wakes)
    try:
        cur = await conn.execute(_query(schema, spec), params(spec, plan))
        row = await cur.fetchone()
    except BaseException as exc:
        wakes.settle(plan, ok=False)
        if isinstance(exc, psycopg.Error):
            raise enqueue_error(exc, conn, schema) from exc
        raise
    job_id = int(expect_row(row, "job_insert")[0])
    if wakes.settle(plan, ok=True):
        try:
            await conn.execute(queries_for(schema)["queue_notify"], {"queues": [spec.queue]})
        except BaseException as exc:
            _repair_failed(wakes, plan, exc, job_id)
            if not isinstance(exc, psycopg.Error):
                raise
    return job_id


# -- many jobs -------------------------------------------------------------------------


class _Batch:
    """Splits a stream of specs into COPY rows and keyed specs, tracking queues to wake.

    Rows are numbered from 1 in the caller's order, so that an error names its row.
    """

    def __init__(self, now: datetime) -> None:
        self.now = now
        self.wake: set[str] = set()
        self.keyed: list[JobSpec] = []
        self.keyed_rows: list[int] = []  # row numbers of the keyed specs
        self.dependent: list[JobSpec] = []  # jobs with dependencies (enqueue_workflow())
        self.count = 0
        # COPY rows carry run_at twice (run_at and scheduled_at), and a batch's rows mostly
        # share one value: its text (what psycopg would send, str()) is made once per value.
        self._at: datetime | None = None
        self._at_text = ""

    def _timestamp(self, at: datetime) -> str:
        if at != self._at:
            self._at, self._at_text = at, str(at)
        return self._at_text

    def _next(self, specs: Iterator[Any]) -> JobSpec | None:
        try:
            spec = next(specs)
        except StopIteration:
            return None
        except PgQueueError as exc:  # the caller's generator refused a job (task.job(...))
            raise type(exc)(f"enqueue_many row {self.count + 1}: {exc}") from exc
        self.count += 1
        if not isinstance(spec, JobSpec):
            raise InvalidArgumentsError(
                f"enqueue_many row {self.count}: expected a job from task.job(...), got {type(spec).__name__}"
            )
        return spec

    def rows(self, specs: Iterable[JobSpec]) -> Iterator[tuple[Any, ...]]:
        it = iter(specs)
        while (spec := self._next(it)) is not None:
            if spec.depends_on:
                self.dependent.append(spec)
                self.keyed_rows.append(self.count)
                continue
            if spec.unique_key is not None:
                self.keyed.append(spec)
                self.keyed_rows.append(self.count)
                continue
            run_at = spec.run_at
            if run_at is None:  # most jobs of a batch are due now: no date arithmetic for them
                run_at = self.now + timedelta(seconds=spec.delay) if spec.delay else self.now
            if run_at <= self.now:
                state = "available"
                self.wake.add(spec.queue)
            else:
                state = "scheduled"
            at = self._timestamp(run_at)
            expires_at = spec.expires_at
            if spec.expires_in is not None:
                expires_at = run_at + timedelta(seconds=spec.expires_in)
            yield (
                spec.task, spec.args_json, spec.queue, spec.priority, at, at, state, spec.max_attempts,
                spec.concurrency_key, expires_at,
            )  # fmt: skip

    def keyed_params(self) -> list[dict[str, Any]]:
        """The keyed jobs' parameters in key order (stable: a key's jobs keep their order),
        so that two transactions enqueueing the same keys take them in the same order and
        cannot deadlock."""
        return [params(s) for s in sorted(self.keyed, key=lambda s: s.unique_key or "")]

    def translate(self, exc: psycopg.Error, conn: AnyConn, schema: str) -> Exception:
        """:func:`enqueue_error`, naming the row the database refused when it says which."""
        found = _COPY_LINE.search(exc.diag.context or "")
        if found is None:
            return enqueue_error(exc, conn, schema)
        row = int(found[1])  # the n-th COPY row: count the keyed rows before it back in
        for keyed in self.keyed_rows:
            if keyed <= row:
                row += 1
        error = enqueue_error(exc, conn, schema)
        if isinstance(error, PgQueueError):
            return type(error)(f"enqueue_many row {row}: {error}")
        error.add_note(f"enqueue_many row {row}")
        return error


_COPY_LINE = re.compile(r"COPY \w+, line (\d+)")


def enqueue_many(conn: psycopg.Connection[Any], schema: str, specs: Iterable[JobSpec]) -> int:
    q = queries_for(schema)
    batch = _Batch(datetime.now(UTC))  # its clock is replaced by the database's below
    try:
        batch.now = conn.execute(q["db_now"]).fetchone()[0]  # type: ignore[index]
        with conn.cursor() as cur, cur.copy(q["job_copy"]) as copy:
            for row in batch.rows(specs):
                copy.write_row(row)
        with conn.cursor() as cur:
            if batch.keyed:
                cur.executemany(q["job_enqueue"], batch.keyed_params())
        if batch.dependent:
            enqueue_graph(conn, schema, _dependent_nodes(batch.dependent))
        with conn.cursor() as cur:
            if batch.wake:
                cur.execute(q["queue_notify"], {"queues": sorted(batch.wake)})
    except psycopg.Error as exc:
        raise batch.translate(exc, conn, schema) from exc
    return batch.count


async def enqueue_many_async(
    conn: psycopg.AsyncConnection[Any], schema: str, specs: Iterable[JobSpec] | AsyncIterable[JobSpec]
) -> int:
    q = queries_for(schema)
    batch = _Batch(datetime.now(UTC))  # its clock is replaced by the database's below
    try:
        cur = await conn.execute(q["db_now"])
        batch.now = (await cur.fetchone())[0]  # type: ignore[index]
        async with conn.cursor() as acur, acur.copy(q["job_copy"]) as copy:
            if isinstance(specs, AsyncIterable):
                items = aiter(specs)
                while True:
                    try:
                        spec = await anext(items)
                    except StopAsyncIteration:
                        break
                    except PgQueueError as exc:
                        raise type(exc)(f"enqueue_many row {batch.count + 1}: {exc}") from exc
                    for row in batch.rows((spec,)):
                        await copy.write_row(row)
            else:
                for row in batch.rows(specs):
                    await copy.write_row(row)
        async with conn.cursor() as acur:
            if batch.keyed:
                await acur.executemany(q["job_enqueue"], batch.keyed_params())
        if batch.dependent:
            await enqueue_graph_async(conn, schema, _dependent_nodes(batch.dependent))
        async with conn.cursor() as acur:
            if batch.wake:
                await acur.execute(q["queue_notify"], {"queues": sorted(batch.wake)})
    except psycopg.Error as exc:
        raise batch.translate(exc, conn, schema) from exc
    return batch.count
