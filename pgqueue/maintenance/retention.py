"""Retention: finished jobs are removed by dropping whole day partitions, never by DELETE.

A day partition of a final state is dropped once its whole day (UTC) is older than that
state's retention: rows are kept at least the retention and at most one day longer.
Yesterday's and today's partitions are never dropped (partition maintenance keeps them
created). Each DROP runs in its own short transaction under the partition advisory lock
(the one ``ensure_partitions`` takes, so one process at a time) with a lock timeout, so a
DROP waiting for a busy parent gives up and is tried again at the next run instead of
queueing completions behind it.

The retention each run applied is recorded in the ``settings`` table
(``retention.<state>`` = seconds, or null for "kept forever") for ``pgqueue status``.
The same run removes worker registrations that expired long ago, summarises the new
block ranges of the recent partitions' BRIN indexes (``summarize_recent``), and prunes the
unique ledger (``unique_keys``) of rows that hold nothing any more: a period that ended,
a holder that left the live states it held the key in, or one whose day partition was
dropped (``prune_unique_keys``), in batches of one short transaction each.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta
from typing import Any

import psycopg
import psycopg.errors

from .._db import schema as db
from .._db.errors import LockBusyError, NotPermittedError
from ..config import DEAD_WORKER_GRACE, WorkerConfig
from ..models import JobState
from .partitions import drop_day

__all__ = [
    "RetentionResult",
    "apply_retention",
    "expired_partitions",
    "prune_unique_keys",
    "retention_of",
    "summarize_recent",
]

log = logging.getLogger("pgqueue.retention")

_PARENT_STATE = {"jobs_completed": "completed", "jobs_discarded": "discarded", "jobs_cancelled": "cancelled"}


@dataclass
class RetentionResult:
    leader: bool = False
    dropped: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)  # lock timeout: tried again next run
    registrations_removed: int = 0
    unique_keys_removed: int = 0


def retention_of(config: WorkerConfig) -> dict[str, float | None]:
    """Seconds kept per final state from a :class:`~pgqueue.WorkerConfig`; None = forever."""
    values = {
        JobState.COMPLETED.value: config.retention_completed,
        JobState.DISCARDED.value: config.retention_discarded,
        JobState.CANCELLED.value: config.retention_cancelled,
    }
    return {state: (float(v) if v else None) for state, v in values.items()}


def expired_partitions(
    partitions: list[tuple[str, str, date]], retention: Mapping[str, float | None], now: datetime
) -> list[str]:
    """Names of the partitions whose whole day ended more than the retention ago.

    ``partitions`` are (parent, child, day) rows; ``now`` is the database clock.
    """
    today = now.astimezone(UTC).date()
    out: list[str] = []
    for parent, child, day in partitions:
        keep = retention.get(_PARENT_STATE.get(parent, ""))
        if keep is None or day >= today - timedelta(days=1):
            continue
        day_end = datetime(day.year, day.month, day.day, tzinfo=UTC) + timedelta(days=1)
        if day_end <= now - timedelta(seconds=keep):
            out.append(child)
    return out


def apply_retention(
    conn: psycopg.Connection[Any], schema: str, retention: Mapping[str, float | None], *, by: str
) -> RetentionResult:
    """Drop expired finished-job partitions and stale registrations; ``conn`` is autocommit.

    Does nothing (``leader=False``) while another process holds the partition lock.
    """
    result = RetentionResult()
    with conn.transaction():
        if not db.lock_try(conn, "partitions", schema):
            return result
        result.leader = True
        now = db.db_now(conn, schema)
        rows = db.partition_list(conn, schema)
        expired = expired_partitions([(r.parent, r.child, r.day) for r in rows], retention, now)
        names = [f"retention.{state}" for state in retention]
        values = [json.dumps(v) for v in retention.values()]
        db.settings_put(conn, schema, names, values, by=by)
        result.registrations_removed = db.registry_cleanup(conn, schema, DEAD_WORKER_GRACE)
    summarize_recent(conn, schema)
    for child in expired:
        try:
            with conn.transaction():
                if not db.lock_try(conn, "partitions", schema):
                    result.skipped.append(child)
                    continue
                db.lock_timeout(conn, schema, 1)
                drop_day(conn, schema, child)  # as the owner, or through its function (worker role)
            result.dropped.append(child)
        except LockBusyError:
            result.skipped.append(child)
    result.unique_keys_removed = prune_unique_keys(conn, schema)
    if result.dropped:
        log.info("retention: dropped %d finished-job partitions: %s", len(result.dropped), ", ".join(result.dropped))
    if result.unique_keys_removed:
        log.info("retention: removed %d unique keys no job holds any more", result.unique_keys_removed)
    if result.skipped:
        log.warning("retention: %d partitions busy, will retry: %s", len(result.skipped), ", ".join(result.skipped))
    if result.registrations_removed:
        log.info("removed %d registrations of workers that died", result.registrations_removed)
    return result


#: Ledger rows one pruning transaction looks at.
UNIQUE_PRUNE_BATCH = 5000


def prune_unique_keys(conn: psycopg.Connection[Any], schema: str, *, batch: int = UNIQUE_PRUNE_BATCH) -> int:
    """Remove the unique ledger's rows that hold nothing any more, walking it once in key
    order, ``batch`` rows per short transaction (``conn`` is autocommit); returns how many
    went."""
    days = [row.day for row in db.partition_list(conn, schema)]
    kept_since = None if not days else datetime(min(days).year, min(days).month, min(days).day, tzinfo=UTC)
    removed, after = 0, ""
    while True:
        gone, last = db.unique_keys_prune(conn, schema, after=after, batch=batch, kept_since=kept_since)
        removed += gone
        if last is None:
            return removed
        after = last


def summarize_recent(conn: psycopg.Connection[Any], schema: str) -> int:
    """Summarise new block ranges of the BRIN indexes on today's and yesterday's finished
    partitions, so the views' time windows skip all but the recent ranges even where
    autovacuum (which would summarise them) is off or slow. Returns the ranges added."""
    added = 0
    try:
        for index in db.brin_recent_indexes(conn, schema):
            added += db.brin_summarize(conn, schema, index)
    except NotPermittedError as exc:
        log.debug("cannot summarise BRIN indexes (%s); leaving it to autovacuum", exc)
    return added
