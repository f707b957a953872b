"""What the operations return: plain frozen dataclasses, and :func:`jsonable` to turn any of
them into JSON-ready values (``--json`` in the CLI)."""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import date, datetime, timedelta
from decimal import Decimal
from typing import Any

from ..models import JobState

__all__ = ["JobDetail", "JobError", "JobSummary", "PurgeResult", "RetryResult", "jsonable"]


@dataclass(frozen=True, slots=True)
class JobError:
    """One failed attempt, as the worker (or the rescuer) recorded it."""

    attempt: int | None
    type: str
    message: str
    traceback: str | None
    worker: str | None
    at: datetime | None

    @classmethod
    def from_json(cls, obj: Mapping[str, Any]) -> JobError:
        at = obj.get("at")
        return cls(
            attempt=obj.get("attempt"),
            type=str(obj.get("type") or "Error"),
            message=str(obj.get("message") or ""),
            traceback=obj.get("traceback"),
            worker=obj.get("worker"),
            at=datetime.fromisoformat(at) if isinstance(at, str) else None,
        )


@dataclass(frozen=True, slots=True)
class JobSummary:
    """A job as ``list_jobs`` returns it: everything but its arguments and full errors."""

    id: int
    queue: str
    task: str
    state: JobState
    priority: int
    attempt: int
    max_attempts: int | None
    run_at: datetime
    created_at: datetime
    started_at: datetime | None
    finished_at: datetime | None
    unique_key: str | None
    worker_id: str | None
    error_count: int
    last_error: str | None  #: "Type: message" of the latest failed attempt
    #: The time the job was scheduled for at enqueue (a cron job: its tick); unlike
    #: ``run_at`` no retry moves it. A job finished before schema version 6 shows its run_at.
    scheduled_at: datetime
    snoozes: int  #: how often the handler snoozed it (each gave its attempt back)
    expires_at: datetime | None  #: deadline by which an attempt must start (None: none)
    concurrency_key: str | None  #: key for per-key concurrency limits (None: none)
    dedupe_key: str | None  #: its key under unique rules (the unique ledger; None: none)


@dataclass(frozen=True, slots=True)
class JobDetail(JobSummary):
    """A job with its arguments, every failed attempt and its result (``get_job``)."""

    args: dict[str, Any]
    errors: list[JobError]
    lease_expires_at: datetime | None
    cancel_requested_at: datetime | None  #: an operator asked the running job to stop
    #: What the handler returned (decoded JSON) for a completed job; None when it returned
    #: None, and for every other state.
    result: Any = None


@dataclass(frozen=True, slots=True)
class RetryResult:
    retried: int  #: jobs put back to available
    skipped: int  #: left as they were: a live job holds their unique_key


@dataclass(frozen=True, slots=True)
class PurgeResult:
    state: JobState
    cutoff: datetime  #: rows finished before this instant (database clock) were removed
    dropped_partitions: list[str]
    dropped_rows_estimate: int  #: from the planner's statistics of the dropped partitions
    deleted_rows: int  #: removed by batched DELETE from the boundary partition(s)


def jsonable(value: Any) -> Any:
    """Results as JSON-ready values: dataclasses → dicts, times → ISO 8601, enums → values."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: jsonable(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, datetime | date):
        return value.isoformat()
    if isinstance(value, timedelta):
        return value.total_seconds()
    if isinstance(value, Decimal):
        return float(value)
    if isinstance(value, Mapping):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [jsonable(v) for v in value]
    return value
