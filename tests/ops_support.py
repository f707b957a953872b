"""Helpers shared by the ops, ``jobs`` CLI and ``status`` CLI tests: finished jobs written
straight into their partitions (old days included), so tests control finished_at."""

from __future__ import annotations

import json
from datetime import date, timedelta
from typing import Any

import psycopg

from pgqueue.maintenance.partitions import _create_day, partition_name

TRACEBACK = 'Traceback (most recent call last):\n  File "app.py", line 3, in f\nValueError: bad row 7\n'


def error_entry(attempt: int, message: str = "bad row 7", type_: str = "builtins.ValueError") -> dict[str, Any]:
    return {
        "attempt": attempt,
        "type": type_,
        "message": message,
        "traceback": TRACEBACK,
        "worker": "host:1:abc",
        "at": "2026-01-01T00:00:00+00:00",
    }


def db_today(conn: psycopg.Connection[Any]) -> date:
    row = conn.execute("SELECT (now() AT TIME ZONE 'UTC')::date").fetchone()
    assert row is not None
    return row[0]  # type: ignore[no-any-return]


def ensure_day(conn: psycopg.Connection[Any], state: str, day: date) -> str:
    """The day partition of ``state`` for ``day``, created if missing; returns its name."""
    name = partition_name(f"jobs_{state}", day)
    exists = conn.execute("SELECT to_regclass(%s) IS NOT NULL", [f"pgqueue.{name}"]).fetchone()
    if not (exists and exists[0]):
        with conn.transaction():
            _create_day(conn, "pgqueue", f"jobs_{state}", day)
    return name


def insert_finished(
    conn: psycopg.Connection[Any],
    state: str,
    *,
    ago: timedelta,
    task: str = "tests.finished",
    queue: str = "default",
    errors: list[dict[str, Any]] | None = None,
    args: dict[str, Any] | None = None,
) -> int:
    """One finished job with finished_at = now() - ago (its day partition is created)."""
    day_row = conn.execute("SELECT ((now() - %s::interval) AT TIME ZONE 'UTC')::date", [ago]).fetchone()
    assert day_row is not None
    ensure_day(conn, state, day_row[0])
    errs = errors if errors is not None else ([error_entry(1)] if state == "discarded" else [])
    row = conn.execute(
        "INSERT INTO pgqueue.jobs (queue, task, args, state, attempt, max_attempts, finished_at, errors)"
        " VALUES (%s, %s, %s::jsonb, %s, %s, 3, now() - %s::interval, %s::jsonb) RETURNING id",
        [queue, task, json.dumps(args or {}), state, max(len(errs), 1), ago, json.dumps(errs)],
    ).fetchone()
    assert row is not None
    return int(row[0])


def enqueue(conn: psycopg.Connection[Any], task: str = "tests.waiting", queue: str = "default", **kw: Any) -> int:
    extra = "".join(f", {k} => %({k})s" for k in kw)
    row = conn.execute(
        f"SELECT pgqueue.enqueue(%(task)s, '{{}}'::jsonb, queue => %(queue)s{extra})",
        {"task": task, "queue": queue, **kw},
    ).fetchone()
    assert row is not None
    return int(row[0])


def state_of(conn: psycopg.Connection[Any], job_id: int) -> str | None:
    row = conn.execute("SELECT state::text FROM pgqueue.jobs WHERE id = %s", [job_id]).fetchone()
    return None if row is None else str(row[0])


def partitions(conn: psycopg.Connection[Any], state: str) -> set[str]:
    rows = conn.execute(
        "SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid WHERE i.inhparent = %s::regclass",
        [f"pgqueue.jobs_{state}"],
    ).fetchall()
    return {r[0] for r in rows}
