"""The status snapshot behind ``pgqueue status`` and ``pgqueue top``: typed rows of the
observability views (``queue_stats``, ``workers``, ``failures``, ``health``, ``retention``),
read in one pipelined round trip. Public names are re-exported by :mod:`pgqueue.ops`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import date, datetime
from decimal import Decimal
from typing import Any

import psycopg
import psycopg.errors
from psycopg import sql
from psycopg.rows import dict_row

from ._dsn import migrate_hint
from ._sql import validate_schema
from .errors import SchemaNotInstalledError

__all__ = ["FailureGroup", "Health", "QueueStats", "StatusSnapshot", "WorkerInfo", "status", "translate_errors"]

Conn = psycopg.Connection[Any]


@contextmanager
def translate_errors(conn: psycopg.Connection[Any], schema: str) -> Iterator[None]:
    try:
        yield
    except (
        psycopg.errors.UndefinedTable,
        psycopg.errors.UndefinedFunction,
        psycopg.errors.UndefinedColumn,
        psycopg.errors.InvalidSchemaName,
    ):
        raise SchemaNotInstalledError(
            f"schema {schema!r} lacks pgqueue's tables, views or functions: {migrate_hint(conn, schema)}"
        ) from None


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


# -- status -------------------------------------------------------------------------------


def _build(cls: type[Any], row: Mapping[str, Any]) -> Any:
    names = {f.name for f in dataclasses.fields(cls)}
    return cls(**{k: (float(v) if isinstance(v, Decimal) else v) for k, v in row.items() if k in names})


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


def status(conn: Conn, schema: str = "pgqueue", *, failures_limit: int = 20, retention: bool = True) -> StatusSnapshot:
    """Read ``queue_stats``, ``workers``, ``failures``, ``health`` and (unless
    ``retention=False``) ``retention`` in one pipelined round trip.

    Each view is read by its own statement, so the parts are each consistent but may be a
    few milliseconds apart.
    """
    s = sql.Identifier(validate_schema(schema))
    queries: list[tuple[sql.SQL | sql.Composed, dict[str, Any] | None]] = [
        (sql.SQL("SELECT * FROM {}.queue_stats ORDER BY queue").format(s), None),
        (sql.SQL("SELECT * FROM {}.workers ORDER BY started_at, worker_id").format(s), None),
        (
            sql.SQL("SELECT * FROM {}.failures ORDER BY last_seen DESC NULLS LAST LIMIT %(n)s").format(s),
            {"n": failures_limit},
        ),
        (sql.SQL("SELECT * FROM {}.health").format(s), None),
    ]
    if retention:
        queries.append((sql.SQL("SELECT * FROM {}.retention").format(s), None))
    # The pipeline is one implicit transaction, so now() would be its start: read the clock
    # last instead, so that every time the views returned is at or before it.
    queries.append((sql.SQL("SELECT clock_timestamp() AS at"), None))
    with translate_errors(conn, schema), conn.pipeline() as pipeline:
        try:
            cursors = [conn.cursor(row_factory=dict_row) for _ in queries]
            for cur, (query, params) in zip(cursors, queries, strict=True):
                cur.execute(query, params)
            results = [cur.fetchall() for cur in cursors]
        except psycopg.Error:
            _drain(pipeline, len(queries))
            raise
    queues, workers, failures, health = results[:4]
    at = results[-1]
    return StatusSnapshot(
        at=at[0]["at"],
        queues=[_build(QueueStats, r) for r in queues],
        workers=[_build(WorkerInfo, r) for r in workers],
        failures=[_build(FailureGroup, r) for r in failures],
        health=_build(Health, health[0]) if health else None,
        retention=[dict(r) for r in results[4]] if retention else [],
    )
