"""Turning a call like ``task.enqueue(conn, x=1)`` into one statement, sync and async.

The pure part (validation, JSON encoding, parameters) is shared; the two I/O twins are a
few lines each. Enqueue never commits: it runs inside whatever transaction the caller's
connection has open, which is what makes a job exist iff the caller's transaction commits.
"""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterable, Iterable, Iterator, Mapping
from datetime import datetime, timedelta
from typing import Any

import psycopg
from psycopg import errors as pgerrors

from ._sql import queries_for
from .config import validate_queue
from .errors import (
    ConfigError,
    InvalidArgumentsError,
    InvalidQueueError,
    PayloadTooLargeError,
    SchemaNotInstalledError,
)
from .models import JobSpec

__all__ = ["DEFAULT_MAX_PAYLOAD_BYTES", "encode_args", "make_spec"]

DEFAULT_MAX_PAYLOAD_BYTES = 1024 * 1024
PRIORITY_RANGE = range(-32768, 32768)
# json.dumps writes a NUL character as \u0000; a literal backslash before "u0000" is
# written as \\u0000, so only an odd run of backslashes is a real NUL.
_NUL_ESCAPE = re.compile(r"(?<!\\)(?:\\\\)*\\u0000")


def _find_bad_argument(args: Mapping[str, Any]) -> str:
    for name, value in args.items():
        try:
            json.dumps(value, allow_nan=False, ensure_ascii=False).encode("utf-8")
        except (TypeError, ValueError, UnicodeEncodeError, RecursionError) as exc:
            return f"argument {name!r}: {exc}"
    return "arguments are not JSON-serialisable"


def encode_args(task: str, args: Mapping[str, Any], max_bytes: int) -> str:
    """Encode job arguments as JSON text, or raise an error naming the bad argument."""
    for key in args:
        if not isinstance(key, str):
            raise InvalidArgumentsError(f"task {task!r}: argument names must be strings, got {key!r}")
    try:
        text = json.dumps(args, allow_nan=False, ensure_ascii=False, separators=(",", ":"))
        size = len(text.encode("utf-8"))
    except (TypeError, ValueError, UnicodeEncodeError, RecursionError):
        raise InvalidArgumentsError(
            f"task {task!r}: {_find_bad_argument(args)} (args must be JSON: str, int, float, bool, None, list, dict)"
        ) from None
    if "\\u0000" in text and _NUL_ESCAPE.search(text):
        raise InvalidArgumentsError(
            f"task {task!r}: arguments contain a NUL character (\\u0000), which PostgreSQL jsonb cannot store"
        )
    if size > max_bytes:
        raise PayloadTooLargeError(
            f"task {task!r}: arguments are {size} bytes of JSON, over the {max_bytes}-byte limit "
            "(App(max_payload_bytes=...))"
        )
    return text


def _seconds(delay: float | timedelta | None) -> float | None:
    if delay is None:
        return None
    seconds = delay.total_seconds() if isinstance(delay, timedelta) else float(delay)
    if not seconds >= 0 or seconds > 10 * 365 * 86400:
        raise ConfigError(f"delay must be between 0 and ten years, got {delay!r}")
    return seconds


def make_spec(
    task: str,
    args: Mapping[str, Any],
    *,
    queue: str,
    priority: int,
    run_at: datetime | None,
    delay: float | timedelta | None,
    unique_key: str | None,
    max_attempts: int | None,
    max_bytes: int,
) -> JobSpec:
    validate_queue(queue)
    if isinstance(priority, bool) or not isinstance(priority, int) or priority not in PRIORITY_RANGE:
        raise ConfigError(f"priority must be an int in -32768..32767, got {priority!r}")
    if run_at is not None and delay is not None:
        raise ConfigError("give run_at or delay, not both")
    if run_at is not None and (not isinstance(run_at, datetime) or run_at.tzinfo is None):
        raise ConfigError(f"run_at must be a timezone-aware datetime, got {run_at!r}")
    if unique_key is not None and (not isinstance(unique_key, str) or not 1 <= len(unique_key) <= 200):
        raise ConfigError("unique_key must be a string of 1-200 characters")
    if max_attempts is not None and (not isinstance(max_attempts, int) or max_attempts < 1):
        raise ConfigError(f"max_attempts must be a positive int, got {max_attempts!r}")
    return JobSpec(
        task=task,
        args_json=encode_args(task, args, max_bytes),
        queue=queue,
        priority=priority,
        run_at=run_at,
        delay=_seconds(delay),
        unique_key=unique_key,
        max_attempts=max_attempts,
    )


def _params(spec: JobSpec) -> dict[str, Any]:
    return {
        "task": spec.task,
        "args": spec.args_json,
        "queue": spec.queue,
        "priority": spec.priority,
        "run_at": spec.run_at,
        "delay": spec.delay or 0.0,
        "unique_key": spec.unique_key,
        "max_attempts": spec.max_attempts,
    }


def translate(exc: psycopg.Error) -> Exception:
    """Map the database's refusal of a job to pgqueue's error, or return it unchanged."""
    if isinstance(exc, (pgerrors.UndefinedFunction, pgerrors.UndefinedTable, pgerrors.InvalidSchemaName)):
        return SchemaNotInstalledError(
            f"pgqueue is not installed in this database ({exc.diag.message_primary}): run `pgqueue migrate`"
        )
    if isinstance(exc, pgerrors.CheckViolation) and exc.diag.constraint_name == "jobs_args_size":
        return PayloadTooLargeError(
            "arguments exceed the server's payload limit (constraint jobs_args_size; "
            "raise it with `pgqueue migrate --max-payload-bytes N`)"
        )
    if isinstance(exc, pgerrors.InvalidParameterValue) and "queue" in (exc.diag.message_primary or ""):
        return InvalidQueueError(exc.diag.message_primary)
    return exc


# -- one job ---------------------------------------------------------------------------


def _query(schema: str, spec: JobSpec) -> bytes:
    # Keyed jobs need the function's race-safe lookup of the live holder; the rest take
    # a plain INSERT (same rules, no PL/pgSQL).
    return queries_for(schema)["job_enqueue" if spec.unique_key is not None else "job_insert"]


def enqueue_one(conn: psycopg.Connection[Any], schema: str, spec: JobSpec) -> int:
    try:
        row = conn.execute(_query(schema, spec), _params(spec)).fetchone()
    except psycopg.Error as exc:
        raise translate(exc) from exc
    assert row is not None
    return int(row[0])


async def enqueue_one_async(conn: psycopg.AsyncConnection[Any], schema: str, spec: JobSpec) -> int:
    try:
        cur = await conn.execute(_query(schema, spec), _params(spec))
        row = await cur.fetchone()
    except psycopg.Error as exc:
        raise translate(exc) from exc
    assert row is not None
    return int(row[0])


# -- many jobs -------------------------------------------------------------------------


class _Batch:
    """Splits a stream of specs into COPY rows and keyed specs, tracking queues to wake."""

    def __init__(self, now: datetime) -> None:
        self.now = now
        self.wake: set[str] = set()
        self.keyed: list[JobSpec] = []
        self.count = 0

    def rows(self, specs: Iterable[JobSpec]) -> Iterator[tuple[Any, ...]]:
        for spec in specs:
            self.count += 1
            if spec.unique_key is not None:
                self.keyed.append(spec)
                continue
            run_at = spec.run_at
            if run_at is None:
                run_at = self.now + timedelta(seconds=spec.delay or 0.0)
            due = run_at <= self.now
            if due:
                self.wake.add(spec.queue)
            state = "available" if due else "scheduled"
            yield (spec.task, spec.args_json, spec.queue, spec.priority, run_at, state, spec.max_attempts)


def enqueue_many(conn: psycopg.Connection[Any], schema: str, specs: Iterable[JobSpec]) -> int:
    q = queries_for(schema)
    try:
        now = conn.execute(q["db_now"]).fetchone()[0]  # type: ignore[index]
        batch = _Batch(now)
        with conn.cursor() as cur, cur.copy(q["job_copy"]) as copy:
            for row in batch.rows(specs):
                copy.write_row(row)
        with conn.cursor() as cur:
            if batch.keyed:
                cur.executemany(q["job_enqueue"], [_params(s) for s in batch.keyed])
            if batch.wake:
                cur.execute(q["queue_notify"], {"queues": sorted(batch.wake)})
    except psycopg.Error as exc:
        raise translate(exc) from exc
    return batch.count


async def enqueue_many_async(
    conn: psycopg.AsyncConnection[Any], schema: str, specs: Iterable[JobSpec] | AsyncIterable[JobSpec]
) -> int:
    q = queries_for(schema)
    try:
        cur = await conn.execute(q["db_now"])
        now = (await cur.fetchone())[0]  # type: ignore[index]
        batch = _Batch(now)
        async with conn.cursor() as acur, acur.copy(q["job_copy"]) as copy:
            if isinstance(specs, AsyncIterable):
                async for spec in specs:
                    for row in batch.rows((spec,)):
                        await copy.write_row(row)
            else:
                for row in batch.rows(specs):
                    await copy.write_row(row)
        async with conn.cursor() as acur:
            if batch.keyed:
                await acur.executemany(q["job_enqueue"], [_params(s) for s in batch.keyed])
            if batch.wake:
                await acur.execute(q["queue_notify"], {"queues": sorted(batch.wake)})
    except psycopg.Error as exc:
        raise translate(exc) from exc
    return batch.count
