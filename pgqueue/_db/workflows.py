"""The DB layer of workflows (``sql/queries/workflows.sql``): a graph of jobs in one call,
a child's view of its parents, a job's relations, and whole-workflow operations. Releasing
dependents is not here: it is part of every statement that finishes a job.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import psycopg
from psycopg import errors as pgerrors

from ..errors import WorkflowError
from .conn import AConn, AnyConn, Conn, expect_row
from .errors import enqueue_error, translated
from .sql import queries_for

__all__ = [
    "ParentRow",
    "batch_cancel",
    "batch_close",
    "batch_close_async",
    "batch_create",
    "batch_create_async",
    "batch_get",
    "callback_batch",
    "Relation",
    "cancel_workflow",
    "enqueue_graph",
    "enqueue_graph_async",
    "job_workflow",
    "parent_results",
    "parent_results_sync",
    "relations",
    "retry_workflow",
    "workflow_jobs",
    "workflow_progress",
]


class ParentRow(NamedTuple):
    id: int
    state: str | None  # None: removed by retention
    result: str | None  # JSON text


class Relation(NamedTuple):
    kind: str  # "parent" or "child"
    job_id: int
    on_failure: str
    parent_state: str | None  # the parent's final state once the edge settled


def _error(exc: psycopg.Error, conn: AnyConn, schema: str) -> Exception:
    """The function's refusals (an unknown parent, a bad dependency) as WorkflowError."""
    if isinstance(exc, pgerrors.ForeignKeyViolation | pgerrors.InvalidParameterValue) and (
        exc.diag.message_primary or ""
    ).startswith("pgqueue.enqueue_workflow"):
        return WorkflowError((exc.diag.message_primary or "").removeprefix("pgqueue.enqueue_workflow: "))
    return enqueue_error(exc, conn, schema)


def enqueue_graph(conn: psycopg.Connection[Any], schema: str, nodes_json: str) -> list[int]:
    """Enqueue the nodes (see ``enqueue_workflow()``) in ``conn``'s transaction; their ids."""
    try:
        row = conn.execute(queries_for(schema)["workflow_enqueue"], {"nodes": nodes_json}).fetchone()
    except psycopg.Error as exc:
        raise _error(exc, conn, schema) from exc
    return list(expect_row(row, "workflow_enqueue")[0])


async def enqueue_graph_async(conn: psycopg.AsyncConnection[Any], schema: str, nodes_json: str) -> list[int]:
    try:
        cur = await conn.execute(queries_for(schema)["workflow_enqueue"], {"nodes": nodes_json})
        row = await cur.fetchone()
    except psycopg.Error as exc:
        raise _error(exc, conn, schema) from exc
    return list(expect_row(row, "workflow_enqueue")[0])


async def parent_results(conn: AConn, schema: str, job_id: int) -> list[ParentRow]:
    with translated(conn, schema):
        cur = await conn.execute(queries_for(schema)["job_parent_results"], {"id": job_id})
        return [ParentRow(*row) for row in await cur.fetchall()]


def parent_results_sync(conn: Conn, schema: str, job_id: int) -> list[ParentRow]:
    with translated(conn, schema):
        rows = conn.execute(queries_for(schema)["job_parent_results"], {"id": job_id}).fetchall()
        return [ParentRow(*row) for row in rows]


def relations(conn: Conn, schema: str, job_id: int) -> list[Relation]:
    with translated(conn, schema):
        return [Relation(*row) for row in conn.execute(queries_for(schema)["job_relations"], {"id": job_id})]


def job_workflow(conn: Conn, schema: str, job_id: int) -> tuple[int | None, int | None]:
    """(workflow id, open parents) of a job; (None, None) for a plain or unknown job."""
    with translated(conn, schema):
        row = conn.execute(queries_for(schema)["job_workflow"], {"id": job_id}).fetchone()
    return (None, None) if row is None else (row[0], row[1])


def workflow_progress(conn: Conn, schema: str, workflow_id: int) -> tuple[Any, ...] | None:
    with translated(conn, schema):
        return conn.execute(queries_for(schema)["workflow_progress"], {"workflow_id": workflow_id}).fetchone()


def workflow_jobs(conn: Conn, schema: str, workflow_id: int) -> list[tuple[Any, ...]]:
    with translated(conn, schema):
        return conn.execute(queries_for(schema)["workflow_jobs"], {"workflow_id": workflow_id}).fetchall()


def cancel_workflow(conn: Conn, schema: str, workflow_id: int) -> int:
    with translated(conn, schema, privilege=True):
        row = conn.execute(queries_for(schema)["workflow_cancel"], {"workflow_id": workflow_id}).fetchone()
        return int(expect_row(row, "workflow_cancel")[0])


def retry_workflow(conn: Conn, schema: str, workflow_id: int) -> int:
    with translated(conn, schema, privilege=True):
        row = conn.execute(queries_for(schema)["workflow_retry"], {"workflow_id": workflow_id}).fetchone()
        return int(expect_row(row, "workflow_retry")[0])


# -- batches ----------------------------------------------------------------------------


def _batch_error(exc: psycopg.Error, conn: AnyConn, schema: str) -> Exception:
    if isinstance(exc, pgerrors.InvalidParameterValue) and (exc.diag.message_primary or "").startswith(
        "pgqueue.batch_"
    ):
        return WorkflowError((exc.diag.message_primary or "").split(": ", 1)[-1])
    return enqueue_error(exc, conn, schema)


def batch_create(conn: psycopg.Connection[Any], schema: str, callbacks_json: str) -> int:
    try:
        row = conn.execute(queries_for(schema)["batch_create"], {"callbacks": callbacks_json}).fetchone()
    except psycopg.Error as exc:
        raise _batch_error(exc, conn, schema) from exc
    return int(expect_row(row, "batch_create")[0])


async def batch_create_async(conn: psycopg.AsyncConnection[Any], schema: str, callbacks_json: str) -> int:
    try:
        cur = await conn.execute(queries_for(schema)["batch_create"], {"callbacks": callbacks_json})
        row = await cur.fetchone()
    except psycopg.Error as exc:
        raise _batch_error(exc, conn, schema) from exc
    return int(expect_row(row, "batch_create")[0])


def batch_close(conn: psycopg.Connection[Any], schema: str, batch_id: int) -> None:
    with translated(conn, schema):
        row = conn.execute(queries_for(schema)["batch_close"], {"batch_id": batch_id}).fetchone()
    if not expect_row(row, "batch_close")[0]:
        raise WorkflowError(f"no batch with id {batch_id}")


async def batch_close_async(conn: psycopg.AsyncConnection[Any], schema: str, batch_id: int) -> None:
    with translated(conn, schema):
        cur = await conn.execute(queries_for(schema)["batch_close"], {"batch_id": batch_id})
        row = await cur.fetchone()
    if not expect_row(row, "batch_close")[0]:
        raise WorkflowError(f"no batch with id {batch_id}")


def batch_cancel(conn: Conn, schema: str, batch_id: int) -> int:
    with translated(conn, schema, privilege=True):
        row = conn.execute(queries_for(schema)["batch_cancel"], {"batch_id": batch_id}).fetchone()
        return int(expect_row(row, "batch_cancel")[0])


def batch_get(conn: Conn, schema: str, batch_id: int) -> tuple[Any, ...] | None:
    with translated(conn, schema):
        return conn.execute(queries_for(schema)["batch_get"], {"batch_id": batch_id}).fetchone()


async def callback_batch(conn: AConn, schema: str, job_id: int) -> tuple[int, int, int, int, int] | None:
    """The batch a callback job reports on: (id, total, completed, discarded, cancelled)."""
    with translated(conn, schema):
        cur = await conn.execute(queries_for(schema)["job_callback_batch"], {"id": job_id})
        row = await cur.fetchone()
    return None if row is None else (int(row[0]), int(row[1]), int(row[2]), int(row[3]), int(row[4]))
