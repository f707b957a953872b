"""Enqueueing a job by task name, for tools: the task may belong to another service (it
need not be registered in any App here), as with the SQL function ``enqueue()``."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime, timedelta
from typing import Any

from .. import _enqueue
from .._db import enqueue as db
from .._db.conn import Conn
from .._db.sql import validate_schema
from ..models import JobSpec
from ..unique import Unique

__all__ = ["enqueue_job", "make_job"]


def make_job(
    task: str,
    args: Mapping[str, Any],
    *,
    queue: str = "default",
    priority: int = 0,
    run_at: datetime | None = None,
    delay: float | timedelta | None = None,
    unique_key: str | None = None,
    max_attempts: int | None = None,
    max_payload_bytes: int = _enqueue.DEFAULT_MAX_PAYLOAD_BYTES,
    concurrency_key: str | None = None,
    expires_at: datetime | None = None,
    expires_in: float | timedelta | None = None,
    unique: Unique | None = None,
) -> JobSpec:
    """A validated job of ``task``, for :func:`enqueue_job` or ``App.enqueue_many``. The
    same checks as ``task.job(...)``, except the handler's signature (not known here):
    ``unique`` rules without a ``unique_key`` derive the key from the arguments given.

    Raises:
        EnqueueError: a bad task or queue name, argument, option or payload.
    """
    return _enqueue.make_spec(
        task,
        args,
        queue=queue,
        priority=priority,
        run_at=run_at,
        delay=delay,
        unique_key=unique_key,
        max_attempts=max_attempts,
        max_bytes=max_payload_bytes,
        concurrency_key=concurrency_key,
        expires_at=expires_at,
        expires_in=expires_in,
        unique=unique,
    )


def enqueue_job(conn: Conn, schema: str, job: JobSpec) -> int:
    """Enqueue ``job`` in ``conn``'s current transaction; returns its id (with a
    ``unique_key`` matching a live job, or a key held under unique rules: that job's id).

    Raises:
        EnqueueError: the database refused the job (payload limit, privileges...).
        SchemaNotInstalledError: ``pgqueue migrate`` has not run on this database.
    """
    return db.enqueue_one(conn, validate_schema(schema), job)
