"""The web dashboard's seam to the database: the overview's one-statement read, failures
over a bounded window, keyset pages of jobs, a job's cron tick, the set-based actions and
the session's settings (no parallel workers; the read-only role).

Every statement is a named query of ``sql/queries/dashboard.sql`` (and the status views'
of ``admin.sql``) run on the caller's synchronous connection.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from psycopg.rows import dict_row

from .conn import Conn, expect_row
from .errors import translated
from .sql import queries_for

__all__ = [
    "JobPage",
    "JobPageQuery",
    "cancel_jobs",
    "delete_jobs",
    "job_cron_tick",
    "failure_rows",
    "job_page",
    "overview_row",
    "queue_names",
    "retry_jobs",
    "session_role",
    "session_serial",
    "workers_rows",
]

Row = dict[str, Any]


def overview_row(conn: Conn, schema: str, *, minutes: int) -> Row:
    """``at`` (the database clock), ``queues`` (queue_stats rows), ``paused`` (queue
    names) and ``series`` (finished per queue and minute): one statement."""
    with translated(conn, schema), conn.cursor(row_factory=dict_row) as cur:
        row = cur.execute(queries_for(schema)["dash_overview"], {"minutes": minutes}).fetchone()
    return expect_row(row, "dash_overview")


def workers_rows(conn: Conn, schema: str) -> list[Row]:
    """The ``workers`` view alone."""
    with translated(conn, schema), conn.cursor(row_factory=dict_row) as cur:
        return cur.execute(queries_for(schema)["status_workers"]).fetchall()


def failure_rows(conn: Conn, schema: str, *, window: int, groups: int) -> list[Row]:
    """Failed jobs grouped by task and error type over a bounded window (``dash_failures``):
    the ``groups`` latest groups, each row carrying ``window_live`` and ``window_finished``
    (with no failure, one row whose group columns are None)."""
    with translated(conn, schema), conn.cursor(row_factory=dict_row) as cur:
        return cur.execute(queries_for(schema)["dash_failures"], {"window": window, "groups": groups}).fetchall()


def queue_names(conn: Conn, schema: str) -> list[str]:
    with translated(conn, schema):
        return [str(r[0]) for r in conn.execute(queries_for(schema)["dash_queue_names"]).fetchall()]


@dataclass(frozen=True, slots=True)
class JobPageQuery:
    """What a page of jobs asks for; every value is bound, never spliced."""

    state: str | None = None
    queue: str | None = None
    task: str | None = None
    text: str | None = None  #: an ILIKE pattern, already escaped
    args_tasks: list[str] | None = None  #: tasks whose args ``text`` may match (None: all)
    created_from: datetime | None = None
    created_to: datetime | None = None
    before: int = 2**63 - 1
    scan: int = 50
    limit: int = 50


@dataclass(frozen=True, slots=True)
class JobPage:
    rows: list[Row]
    scanned_to: int | None  #: the lowest id looked at (None: no job below ``before``)
    scanned: int


def job_page(conn: Conn, schema: str, query: JobPageQuery) -> JobPage:
    q = queries_for(schema)
    params = {
        "state": query.state,
        "queue": query.queue,
        "task": query.task,
        "text": query.text,
        "args_tasks": query.args_tasks,
        "created_from": query.created_from,
        "created_to": query.created_to,
        "before": query.before,
        "scan": query.scan,
        "limit": query.limit,
    }
    statement = q["dash_job_page"] if query.state is None else q["dash_job_page_in_state"]
    with translated(conn, schema), conn.cursor(row_factory=dict_row) as cur:
        found = cur.execute(statement, params).fetchall()
    if not found:
        return JobPage([], None, 0)
    first = found[0]
    rows = [{k: v for k, v in r.items() if k not in ("scanned_to", "scanned")} for r in found if r["id"] is not None]
    return JobPage(rows, first["scanned_to"], int(first["scanned"]))


def job_cron_tick(conn: Conn, schema: str, job_id: int) -> Row | None:
    with translated(conn, schema), conn.cursor(row_factory=dict_row) as cur:
        return cur.execute(queries_for(schema)["dash_job_cron_tick"], {"id": job_id}).fetchone()


def cancel_jobs(conn: Conn, schema: str, ids: list[int]) -> dict[int, str]:
    """Cancel ``ids`` in one transaction: each existing id with its state afterwards."""
    with translated(conn, schema), conn.transaction():
        rows = conn.execute(queries_for(schema)["dash_jobs_cancel"], {"ids": ids}).fetchall()
    return {int(r[0]): str(r[1]) for r in rows}


def retry_jobs(conn: Conn, schema: str, ids: list[int]) -> list[int]:
    """Retry the discarded or cancelled jobs of ``ids`` in one transaction: the ids retried."""
    with translated(conn, schema), conn.transaction():
        rows = conn.execute(queries_for(schema)["dash_jobs_retry"], {"ids": ids}).fetchall()
    return sorted(int(r[0]) for r in rows)


def delete_jobs(conn: Conn, schema: str, ids: list[int]) -> list[int]:
    """Delete the finished jobs of ``ids`` in one transaction: the ids deleted."""
    with translated(conn, schema), conn.transaction():
        rows = conn.execute(queries_for(schema)["dash_jobs_delete"], {"ids": ids}).fetchall()
    return sorted(int(r[0]) for r in rows)


def session_serial(conn: Conn, schema: str) -> None:
    """No parallel workers for this session's statements (see ``dash_session_serial``)."""
    conn.execute(queries_for(schema)["dash_session_serial"])


def session_role(conn: Conn, schema: str, role: str) -> None:
    """Act as ``role`` for the rest of the session (``SET ROLE``)."""
    conn.execute(queries_for(schema)["dash_session_role"], {"role": role})
