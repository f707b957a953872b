"""What a job's row says to someone who wants its result: the value of a completed job, or
the error that explains why there is none. Shared by the waiter and ``app.result()``."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from .._db.results import ResultRow
from ..errors import EXPIRED_ERROR_TYPE, JobFailed, JobNotFinishedError, JobNotFoundError, ResultError
from ..models import FINAL_STATES, JobState

__all__ = ["is_finished", "not_finished", "not_found", "result_of", "value_of"]

_FINAL = frozenset(s.value for s in FINAL_STATES)


def is_finished(row: ResultRow) -> bool:
    return row.state in _FINAL


def not_found(job_id: int) -> JobNotFoundError:
    return JobNotFoundError(
        f"no job with id {job_id}: it was never committed (or not yet: wait for the enqueuing "
        "transaction to commit), rolled back, or removed by retention"
    )


def not_finished(job_id: int, state: str | None) -> JobNotFinishedError:
    return JobNotFinishedError(f"job {job_id} has not finished: it is {state}", job_id=job_id, state=state)


def _failed(row: ResultRow) -> JobFailed:
    state = JobState(row.state)
    head = f"job {row.id} expired ({state})" if row.error_type == EXPIRED_ERROR_TYPE else f"job {row.id} was {state}"
    why = f"{row.error_type}: {row.error_message}" if row.error_type else "no error was recorded"
    return JobFailed(
        f"{head}: {why}",
        job_id=row.id,
        state=state,
        error_type=row.error_type,
        error_message=row.error_message,
    )


def value_of(row: ResultRow) -> Any:
    """The result of the finished job ``row`` (None when its handler returned None).

    Raises:
        JobFailed: the job was discarded or cancelled (or expired).
        ResultError: the stored result is not JSON Python can decode (written by hand).
    """
    if row.state != JobState.COMPLETED:
        raise _failed(row)
    if row.result is None:
        return None
    try:
        return json.loads(row.result)
    except (ValueError, RecursionError) as exc:
        raise ResultError(f"job {row.id}'s stored result cannot be decoded: {str(exc)[:200]}") from None


def result_of(job_id: int, rows: Sequence[ResultRow]) -> Any:
    """:func:`value_of` the row of ``job_id`` among ``rows`` (what ``job_results`` returned).

    Raises:
        JobNotFoundError: there is no such job.
        JobNotFinishedError: the job is still live.
        JobFailed, ResultError: see :func:`value_of`.
    """
    for row in rows:
        if row.id == job_id:
            if not is_finished(row):
                raise not_finished(job_id, row.state)
            return value_of(row)
    raise not_found(job_id)
