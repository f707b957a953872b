"""The DB layer of operations and inspection: jobs by id or filter, cancel and retry,
purge batches, the status views read in one pipeline, and the demo's counts.

Every statement is a named query of ``sql/queries/admin.sql`` run on the caller's
(synchronous) connection. A schema without pgqueue's objects surfaces as
:class:`~pgqueue.SchemaNotInstalledError` (see :func:`~pgqueue._db.errors.translated`).
"""

from __future__ import annotations

from datetime import date, datetime, timedelta
from typing import Any

import psycopg
import psycopg.errors
from psycopg.rows import dict_row

from .conn import Conn, expect_row
from .errors import translated
from .schema import db_now
from .sql import queries_for

__all__ = [
    "StatusRows",
    "cancel_job",
    "db_now",
    "demo_drop_schema",
    "demo_failed_attempts",
    "demo_state_counts",
    "get_job",
    "job_state",
    "list_jobs",
    "metrics_queue_stats",
    "purge_batch",
    "purge_cutoff",
    "retry_batch",
    "retry_job",
    "set_application_name",
    "status_rows",
]

Row = dict[str, Any]


# -- jobs ---------------------------------------------------------------------------------


def list_jobs(
    conn: Conn, schema: str, *, state: str | None, queue: str | None, task: str | None, limit: int
) -> list[Row]:
    """Rows of ``job_list`` (or ``job_list_in_state`` when ``state`` is given)."""
    q = queries_for(schema)
    params = {"state": state, "queue": queue, "task": task, "limit": limit}
    query = q["job_list"] if state is None else q["job_list_in_state"]
    with translated(conn, schema), conn.cursor(row_factory=dict_row) as cur:
        return cur.execute(query, params).fetchall()


def get_job(conn: Conn, schema: str, job_id: int) -> Row | None:
    with translated(conn, schema), conn.cursor(row_factory=dict_row) as cur:
        return cur.execute(queries_for(schema)["job_get"], {"id": job_id}).fetchone()


def job_state(conn: Conn, schema: str, job_id: int) -> str | None:
    with translated(conn, schema):
        row = conn.execute(queries_for(schema)["job_state"], {"id": job_id}).fetchone()
    return None if row is None else str(row[0])


def cancel_job(conn: Conn, schema: str, job_id: int) -> str | None:
    """The job's state after the cancel, or None when there is no such job."""
    with translated(conn, schema):
        row = conn.execute(queries_for(schema)["job_cancel"], {"id": job_id}).fetchone()
    return None if row is None or row[0] is None else str(row[0])


def retry_job(conn: Conn, schema: str, job_id: int) -> bool:
    with translated(conn, schema):
        row = conn.execute(queries_for(schema)["job_retry"], {"id": job_id}).fetchone()
    return bool(row is not None and row[0])


def retry_batch(
    conn: Conn, schema: str, *, partition: str, task: str | None, after: int, batch: int
) -> tuple[int, int, int | None]:
    """Retry the next batch of ``partition`` in its own transaction: (retried, seen, last id)."""
    query = queries_for(schema).compose("job_retry_batch", identifiers={"part": partition})
    with translated(conn, schema), conn.transaction():
        row = conn.execute(query, {"after": after, "task": task, "batch": batch}).fetchone()
    if row is None or row[2] is None:
        return 0, 0, None
    return int(row[0]), int(row[1]), int(row[2])


def purge_cutoff(conn: Conn, schema: str, older_than: timedelta) -> tuple[datetime, date]:
    """The database clock minus ``older_than``, and today's UTC date."""
    with translated(conn, schema):
        row = expect_row(
            conn.execute(queries_for(schema)["job_purge_cutoff"], {"older_than": older_than}).fetchone(),
            "job_purge_cutoff",
        )
    return row[0], row[1]


def purge_batch(
    conn: Conn, schema: str, *, partition: str, cutoff: datetime, after: int, batch: int
) -> tuple[int, int | None]:
    """Delete the next batch of ``partition`` in its own transaction: (deleted, last id)."""
    query = queries_for(schema).compose("job_purge_batch", identifiers={"part": partition})
    with translated(conn, schema), conn.transaction():
        row = conn.execute(query, {"cutoff": cutoff, "after": after, "batch": batch}).fetchone()
    if row is None or row[1] is None:
        return 0, None
    return int(row[0]), int(row[1])


# -- status -------------------------------------------------------------------------------

#: The status views, each read by its own statement (see :func:`status_rows`).
StatusRows = dict[str, list[Row]]


def _drain(pipeline: psycopg.Pipeline, pending: int) -> None:
    """Consume what a failed pipeline still owes, so that leaving it raises nothing more.

    After an error the server skips the statements queued behind it ("pipeline aborted").
    Whether their results were read before the error surfaced depends on timing; those not
    read yet would make the pipeline's exit fail again, and psycopg logs that second failure
    as a stray warning. Each ``sync()`` reads at least one of them, so this ends.
    """
    for _ in range(pending + 2):
        try:
            pipeline.sync()
            return
        except psycopg.Error:
            continue


def status_rows(conn: Conn, schema: str, *, failures_limit: int, retention: bool) -> StatusRows:
    """Rows of ``queues``, ``workers``, ``failures``, ``health``, ``controls``,
    ``task_controls``, (``retention``) and ``clock``, read in one pipelined round trip;
    the clock is read last."""
    q = queries_for(schema)
    queries: list[tuple[str, bytes, dict[str, Any] | None]] = [
        ("queues", q["status_queues"], None),
        ("workers", q["status_workers"], None),
        ("failures", q["status_failures"], {"n": failures_limit}),
        ("health", q["status_health"], None),
        ("controls", q["status_controls"], None),
        ("task_controls", q["status_task_controls"], None),
    ]
    if retention:
        queries.append(("retention", q["status_retention"], None))
    queries.append(("clock", q["status_clock"], None))
    with translated(conn, schema), conn.pipeline() as pipeline:
        try:
            cursors = [conn.cursor(row_factory=dict_row) for _ in queries]
            for cur, (_, query, params) in zip(cursors, queries, strict=True):
                cur.execute(query, params)
            results = [cur.fetchall() for cur in cursors]
        except psycopg.Error:
            _drain(pipeline, len(queries))
            raise
    return {name: rows for (name, _, _), rows in zip(queries, results, strict=True)}


def set_application_name(conn: Conn, schema: str, name: str) -> None:
    conn.execute(queries_for(schema)["session_application_name"], {"name": name})


def metrics_queue_stats(conn: Conn, schema: str, queues: list[str]) -> list[tuple[Any, ...]]:
    """(queue, available, scheduled, running, retryable, lag_seconds) of these queues."""
    return conn.execute(queries_for(schema)["metrics_queue_stats"], {"queues": queues}).fetchall()


# -- demo ---------------------------------------------------------------------------------


def demo_drop_schema(conn: Conn, schema: str) -> None:
    conn.execute(queries_for(schema)["demo_schema_drop"])


def demo_state_counts(conn: Conn, schema: str) -> dict[str, int]:
    return {str(state): int(n) for state, n in conn.execute(queries_for(schema)["demo_state_counts"]).fetchall()}


def demo_failed_attempts(conn: Conn, schema: str) -> int:
    row = conn.execute(queries_for(schema)["demo_failed_attempts"]).fetchone()
    return int(row[0]) if row else 0
