"""Operations on single jobs and sets of them: list, show, cancel, retry, purge."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

from .._db import admin as db
from .._db import schema as _schema_db
from .._db.conn import Conn
from .._db.errors import LockBusyError, translated
from .._db.sql import validate_schema
from ..errors import ConfigError, JobNotFoundError, PgQueueError
from ..maintenance.partitions import drop_day
from ..models import FINAL_STATES, JobState
from .results import JobDetail, JobError, JobSummary, PurgeResult, RetryResult

__all__ = [
    "cancel_job",
    "get_job",
    "list_jobs",
    "purge_jobs",
    "retry_job",
    "retry_jobs",
]

MAX_LIST_LIMIT = 10_000

# -- helpers ------------------------------------------------------------------------------


def _state(value: str | JobState) -> JobState:
    try:
        return JobState(value)
    except ValueError:
        raise ConfigError(f"unknown state {value!r}: use one of {', '.join(s.value for s in JobState)}") from None


def _summary_kwargs(row: Mapping[str, Any]) -> dict[str, Any]:
    names = [f.name for f in dataclasses.fields(JobSummary)]
    out = {n: row[n] for n in names}
    out["state"] = JobState(row["state"])
    return out


# -- jobs ---------------------------------------------------------------------------------


def list_jobs(
    conn: Conn,
    schema: str = "pgqueue",
    *,
    state: str | JobState | None = None,
    queue: str | None = None,
    task: str | None = None,
    limit: int = 50,
) -> list[JobSummary]:
    """The most recent jobs (highest id first) matching every given filter.

    A ``state`` filter reads only that state's partition. Rows come from each partition's
    id index in descending order, so the cost grows with ``limit`` (and with how rare a
    ``queue``/``task`` filter is), not with the table's size.
    """
    if not 1 <= limit <= MAX_LIST_LIMIT:
        raise ConfigError(f"limit must be between 1 and {MAX_LIST_LIMIT}, got {limit}")
    rows = db.list_jobs(
        conn,
        validate_schema(schema),
        state=None if state is None else _state(state).value,
        queue=queue,
        task=task,
        limit=limit,
    )
    return [JobSummary(**_summary_kwargs(r)) for r in rows]


def get_job(conn: Conn, schema: str, job_id: int) -> JobDetail:
    """One job by id, from whichever partition holds it (one id-index probe per partition).

    Raises:
        JobNotFoundError: no job has this id (it never existed or was purged).
    """
    row = db.get_job(conn, validate_schema(schema), job_id)
    if row is None:
        raise JobNotFoundError(f"no job with id {job_id}")
    return JobDetail(
        **_summary_kwargs(row),
        args=row["args"],
        errors=[JobError.from_json(e) for e in row["errors"] if isinstance(e, Mapping)],
        lease_expires_at=row["lease_expires_at"],
        cancel_requested_at=row["cancel_requested_at"],
        result=row["result"],
    )


def cancel_job(conn: Conn, schema: str, job_id: int) -> JobState:
    """Cancel a job; returns its state afterwards.

    ``cancelled``: done (a waiting job is cancelled at once). ``running``: the job's worker
    was asked to stop it and will cancel it at its next check. ``completed`` or
    ``discarded``: it had already finished, nothing changed.

    Raises:
        JobNotFoundError: no job has this id.
    """
    state = db.cancel_job(conn, validate_schema(schema), job_id)
    if state is None:
        raise JobNotFoundError(f"no job with id {job_id}")
    return JobState(state)


def retry_job(conn: Conn, schema: str, job_id: int) -> bool:
    """Put a discarded or cancelled job back to ``available`` (attempts start over).

    Returns False, changing nothing, when the job is in any other state.

    Raises:
        JobNotFoundError: no job has this id.
    """
    if db.retry_job(conn, validate_schema(schema), job_id):
        return True
    if db.job_state(conn, schema, job_id) is None:
        raise JobNotFoundError(f"no job with id {job_id}")
    return False


def retry_jobs(
    conn: Conn,
    schema: str = "pgqueue",
    *,
    state: str | JobState = JobState.DISCARDED,
    task: str | None = None,
    batch_size: int = 1000,
) -> RetryResult:
    """Retry every ``discarded`` (or ``cancelled``) job, optionally of one task.

    Works through the jobs in id order, ``batch_size`` per transaction, so it never holds
    many locks for long. A job whose ``unique_key`` is held by a live job stays as it is
    (the key is taken by the first of several sharing it); these are counted as skipped.
    """
    st = _state(state)
    if st not in (JobState.DISCARDED, JobState.CANCELLED):
        raise ConfigError("only discarded or cancelled jobs can be retried")
    if batch_size < 1:
        raise ConfigError("batch_size must be at least 1")
    validate_schema(schema)
    retried, seen, after = 0, 0, 0
    while True:
        got, saw, last = db.retry_batch(
            conn, schema, partition=f"jobs_{st.value}", task=task, after=after, batch=batch_size
        )
        if last is None:
            return RetryResult(retried, seen - retried)
        retried += got
        seen += saw
        after = last


# -- purge --------------------------------------------------------------------------------


def purge_jobs(
    conn: Conn,
    schema: str,
    *,
    state: str | JobState,
    older_than: timedelta,
    batch_size: int = 5000,
    lock_timeout: float = 5.0,
) -> PurgeResult:
    """Remove ``state`` jobs that finished more than ``older_than`` ago (database clock).

    Finished jobs live in one partition per UTC day. Each day older than yesterday that
    lies wholly before the cutoff is dropped as a table: instant, no dead tuples, no vacuum
    debt, but the DROP takes a brief ACCESS EXCLUSIVE lock on the state's parent table
    (finishing workers wait for it; after ``lock_timeout`` seconds the purge stops with
    :class:`~pgqueue.PgQueueError` and can simply be run again). Older rows of the day that
    straddles the cutoff (and of yesterday and today, which are never dropped) are deleted
    in id-ordered batches of ``batch_size``, one transaction each: they leave dead tuples
    for vacuum but never lock the parent.
    Only final states can be purged; live jobs are never touched.
    """
    st = _state(state)
    if st not in FINAL_STATES:
        raise ConfigError(f"cannot purge {st.value!r} jobs: only completed, discarded or cancelled jobs can be purged")
    if older_than < timedelta(0):
        raise ConfigError("older_than must not be negative")
    if batch_size < 1:
        raise ConfigError("batch_size must be at least 1")
    validate_schema(schema)
    parent = f"jobs_{st.value}"
    cutoff, today = db.purge_cutoff(conn, schema, older_than)
    with translated(conn, schema):
        partitions = _schema_db.partition_list(conn, schema)
    dropped: list[str] = []
    estimate = 0
    for part in sorted(partitions, key=lambda p: p.child):
        if part.parent != parent:
            continue
        day = datetime(part.day.year, part.day.month, part.day.day, tzinfo=UTC)
        # Yesterday's and today's partitions stay (a completion whose transaction began
        # before midnight still lands in yesterday's); their old rows go by DELETE.
        if day + timedelta(days=1) <= cutoff and day.date() < today - timedelta(days=1):
            _drop_partition(conn, schema, part.child, lock_timeout)
            dropped.append(part.child)
            estimate += max(part.reltuples, 0)
    # What is left before the cutoff sits in the boundary day (partition pruning keeps
    # the DELETE there); keyset on id so every batch reads only rows not yet seen.
    deleted, after = 0, 0
    while True:
        gone, last = db.purge_batch(conn, schema, partition=parent, cutoff=cutoff, after=after, batch=batch_size)
        if last is None:
            break
        deleted += gone
        after = last
    return PurgeResult(st, cutoff, dropped, estimate, deleted)


def _drop_partition(conn: Conn, schema: str, name: str, lock_timeout: float) -> None:
    try:
        _drop_partition_now(conn, schema, name, lock_timeout)
    except LockBusyError:
        raise PgQueueError(
            f"partition {name} is busy (lock timeout after {lock_timeout:g}s); partitions before it were "
            "dropped: run the purge again"
        ) from None


def _drop_partition_now(conn: Conn, schema: str, name: str, lock_timeout: float) -> None:
    with translated(conn, schema), conn.transaction():
        _schema_db.lock_timeout(conn, schema, lock_timeout)
        # The same lock as partition creation: never races a worker's maintenance.
        _schema_db.lock_wait(conn, "partitions", schema)
        drop_day(conn, schema, name)
