"""The status snapshot behind ``pgqueue status`` and ``pgqueue top``: typed rows of the
observability views (``queue_stats``, ``workers``, ``failures``, ``health``, ``retention``,
``queue_controls``, ``task_controls``),
read in one pipelined round trip. Public names are re-exported by :mod:`pgqueue.ops`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import date, datetime
from decimal import Decimal
from typing import Any

from .._db import admin as db
from .._db.conn import Conn
from .._db.sql import validate_schema
from .queues import QueueControl, TaskControl

__all__ = ["FailureGroup", "Health", "QueueStats", "StatusSnapshot", "WorkerInfo", "status"]


@dataclass(frozen=True, slots=True)
class QueueStats:
    """One row of the ``queue_stats`` view."""

    queue: str
    available: int = 0
    scheduled: int = 0
    running: int = 0
    retryable: int = 0
    lag_seconds: float | None = None
    completed_1m: int = 0
    completed_5m: int = 0
    completed_15m: int = 0
    discarded_1m: int = 0
    discarded_5m: int = 0
    discarded_15m: int = 0
    failed_attempts_5m: int = 0
    failure_rate_5m: float | None = None
    cancelled_1m: int = 0
    cancelled_5m: int = 0
    cancelled_15m: int = 0
    expired_15m: int = 0  #: of cancelled_15m: not started by their deadline


@dataclass(frozen=True, slots=True)
class FailureGroup:
    """One row of the ``failures`` view: recent errors grouped by task and type."""

    task: str
    error_type: str
    count: int = 0
    last_seen: datetime | None = None
    last_message: str | None = None
    last_job_id: int | None = None


@dataclass(frozen=True, slots=True)
class WorkerInfo:
    """One row of the ``workers`` view."""

    worker_id: str
    host: str | None = None
    pid: int | None = None
    queues: list[str] | None = None
    concurrency: int | None = None
    in_flight: int | None = None
    started_at: datetime | None = None
    last_heartbeat: datetime | None = None
    listener_connected: bool | None = None
    version: str | None = None
    expires_at: datetime | None = None
    alive: bool | None = None


@dataclass(frozen=True, slots=True)
class Health:
    """The ``health`` view (one row)."""

    live_rows: int | None = None
    live_size_bytes: int | None = None
    live_dead_tuples: int | None = None
    oldest_xact_age_seconds: float | None = None
    oldest_xact_pid: int | None = None
    oldest_xmin_age_xids: int | None = None
    workers_alive: int | None = None
    listeners_connected: int | None = None
    finished_partitions: int | None = None
    oldest_finished_partition: date | None = None


@dataclass(frozen=True, slots=True)
class StatusSnapshot:
    """What ``pgqueue status`` and each refresh of ``pgqueue top`` read, in one round trip."""

    at: datetime  #: the database clock when the snapshot was taken
    queues: list[QueueStats]
    workers: list[WorkerInfo]
    failures: list[FailureGroup]
    health: Health | None
    retention: list[dict[str, Any]]  #: rows of the ``retention`` view, as they come
    #: Queues with a pause or a limit (``queue_controls``), and task limits.
    controls: list[QueueControl] = field(default_factory=list)
    task_controls: list[TaskControl] = field(default_factory=list)


# -- status -------------------------------------------------------------------------------


def _build(cls: type[Any], row: Mapping[str, Any]) -> Any:
    names = {f.name for f in dataclasses.fields(cls)}
    return cls(**{k: (float(v) if isinstance(v, Decimal) else v) for k, v in row.items() if k in names})


def status(conn: Conn, schema: str = "pgqueue", *, failures_limit: int = 20, retention: bool = True) -> StatusSnapshot:
    """Read ``queue_stats``, ``workers``, ``failures``, ``health`` and (unless
    ``retention=False``) ``retention`` in one pipelined round trip.

    Each view is read by its own statement, so the parts are each consistent but may be a
    few milliseconds apart.
    """
    rows = db.status_rows(conn, validate_schema(schema), failures_limit=failures_limit, retention=retention)
    health = rows["health"]
    return StatusSnapshot(
        at=rows["clock"][0]["at"],
        queues=[_build(QueueStats, r) for r in rows["queues"]],
        workers=[_build(WorkerInfo, r) for r in rows["workers"]],
        failures=[_build(FailureGroup, r) for r in rows["failures"]],
        health=_build(Health, health[0]) if health else None,
        retention=[dict(r) for r in rows.get("retention", [])],
        controls=[QueueControl(**r) for r in rows["controls"]],
        task_controls=[TaskControl(**r) for r in rows["task_controls"]],
    )
