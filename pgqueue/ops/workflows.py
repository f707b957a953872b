"""Operations on workflows (jobs with dependencies): progress, the jobs of one workflow, a
job's parents and children, and cancelling or retrying a whole workflow."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

import psycopg

from .._db import workflows as db
from .._db.sql import validate_schema
from ..errors import JobNotFoundError

__all__ = [
    "BatchProgress",
    "JobRelations",
    "batch_progress",
    "cancel_batch",
    "WorkflowJob",
    "WorkflowProgress",
    "cancel_workflow",
    "job_relations",
    "retry_workflow",
    "workflow_jobs",
    "workflow_progress",
]

Conn = psycopg.Connection[Any]


@dataclass(frozen=True, slots=True)
class WorkflowProgress:
    """One workflow's jobs per status (the ``workflow_progress`` view)."""

    workflow_id: int
    total: int
    waiting: int  #: parents still open
    ready: int  #: available, retryable, or scheduled for a later run_at
    running: int
    completed: int
    discarded: int
    cancelled: int
    created_at: datetime
    finished_at: datetime | None  #: once every job is final

    @property
    def done(self) -> bool:
        return self.finished_at is not None


@dataclass(frozen=True, slots=True)
class WorkflowJob:
    id: int
    task: str
    queue: str
    status: str  #: a job state, or "waiting" (parents still open)
    parents: list[int]
    created_at: datetime
    finished_at: datetime | None


@dataclass(frozen=True, slots=True)
class JobRelations:
    """A job's place in a workflow: its workflow id (None: a plain job), how many parents
    it still waits for, parents as (id, on_failure policy, parent's final state once
    settled), children as (id, policy), and the batch it is a member of."""

    workflow_id: int | None
    waiting_on: int | None
    parents: list[tuple[int, str, str | None]]
    children: list[tuple[int, str]]
    batch_id: int | None = None  #: the batch this job is a member of


def _check_id(value: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"a workflow or job id is an int, got {value!r}")
    return int(value)


def workflow_progress(conn: Conn, schema: str, workflow_id: int) -> WorkflowProgress | None:
    """The progress of the workflow ``workflow_id`` (the id of its first job, which
    ``jobs show`` prints); None when no job belongs to it."""
    row = db.workflow_progress(conn, validate_schema(schema), _check_id(workflow_id))
    return None if row is None else WorkflowProgress(*row)


def workflow_jobs(conn: Conn, schema: str, workflow_id: int) -> list[WorkflowJob]:
    """The jobs of one workflow, in id order."""
    return [WorkflowJob(*row) for row in db.workflow_jobs(conn, validate_schema(schema), _check_id(workflow_id))]


def job_relations(conn: Conn, schema: str, job_id: int) -> JobRelations:
    """The parents and children of job ``job_id`` (empty for a plain job)."""
    schema = validate_schema(schema)
    rel = db.relations(conn, schema, _check_id(job_id))
    workflow_id, waiting_on = db.job_workflow(conn, schema, job_id)
    return JobRelations(
        workflow_id=workflow_id,
        waiting_on=waiting_on,
        parents=[(r.job_id, r.on_failure, r.parent_state) for r in rel if r.kind == "parent"],
        children=[(r.job_id, r.on_failure) for r in rel if r.kind == "child" and r.job_id > 0],
        # Batch membership is an edge to the batch, stored as child -batch id (migration 0012).
        batch_id=next((-r.job_id for r in rel if r.kind == "child" and r.job_id < 0), None),
    )


def cancel_workflow(conn: Conn, schema: str, workflow_id: int) -> int:
    """Cancel every live job of a workflow (running ones are asked to stop); returns how many.

    Raises:
        JobNotFoundError: no job belongs to this workflow.
    """
    schema = validate_schema(schema)
    if db.workflow_progress(conn, schema, _check_id(workflow_id)) is None:
        raise JobNotFoundError(f"no workflow with id {workflow_id}")
    return db.cancel_workflow(conn, schema, workflow_id)


def retry_workflow(conn: Conn, schema: str, workflow_id: int) -> int:
    """Retry the discarded and cancelled jobs of a workflow; their dependents wait for them
    anew (completed jobs are left alone). Returns how many jobs were retried.

    Raises:
        JobNotFoundError: no job belongs to this workflow.
    """
    schema = validate_schema(schema)
    if db.workflow_progress(conn, schema, _check_id(workflow_id)) is None:
        raise JobNotFoundError(f"no workflow with id {workflow_id}")
    return db.retry_workflow(conn, schema, workflow_id)


# -- batches ----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class BatchProgress:
    """One batch (the ``batch_progress`` view)."""

    batch_id: int
    total: int
    completed: int
    discarded: int
    cancelled: int
    pending: int  #: members not settled yet
    closed: bool
    created_at: datetime
    closed_at: datetime | None
    fired_at: datetime | None  #: when its callbacks were enqueued
    callback_ids: list[int] | None


def batch_progress(conn: Conn, schema: str, batch_id: int) -> BatchProgress | None:
    """A batch's counts and whether its callbacks fired; None when there is no such batch."""
    row = db.batch_get(conn, validate_schema(schema), _check_id(batch_id))
    return None if row is None else BatchProgress(*row)


def cancel_batch(conn: Conn, schema: str, batch_id: int) -> int:
    """Close a batch and cancel its members not finished yet (running ones are asked to
    stop); its ``on_discard`` and ``on_complete`` callbacks fire once they all settled.
    Returns how many members were cancelled or asked to stop.

    Raises:
        JobNotFoundError: no batch has this id.
    """
    schema = validate_schema(schema)
    if db.batch_get(conn, schema, _check_id(batch_id)) is None:
        raise JobNotFoundError(f"no batch with id {batch_id}")
    return db.batch_cancel(conn, schema, batch_id)
