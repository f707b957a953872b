"""Reaching the database at start-up: the checks a worker makes before it claims (server
up, schema current, finished-job partitions ready), and waiting for an unreachable
database with backoff and one line per attempt.

A worker started by a service manager (systemd, Kubernetes) may come up before its
database; it waits instead of exiting. Each failed attempt logs where it tried (host, port,
database, never the password) and why.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

import psycopg
from psycopg.conninfo import conninfo_to_dict

from .._dsn import open_connection, unavailable
from .._tasks import wait_set
from ..errors import DatabaseUnavailableError
from ..maintenance.partitions import ensure_partitions
from ..migrate import require_current
from ..retry import Backoff

__all__ = ["BACKOFF", "check_database", "describe_target", "log_attempt", "reach_database", "wait_for_database"]

#: 0.5 s, 1 s, 2 s ... up to 30 s between attempts.
BACKOFF = Backoff(base=0.5, factor=2.0, cap=30.0, jitter=False)
_PREFIX = "cannot reach the database: "


def describe_target(dsn: str) -> str:
    """``host=... port=... dbname=...`` of ``dsn``: what a log line may show of it."""
    try:
        info = conninfo_to_dict(dsn)
    except psycopg.Error:
        return "(unparsable connection string)"
    host = info.get("host") or info.get("hostaddr") or "(default)"
    return f"host={host} port={info.get('port') or '(default)'} dbname={info.get('dbname') or '(default)'}"


def log_attempt(log: logging.Logger, dsn: str, attempt: int, exc: BaseException, delay: float) -> None:
    reason = str(exc).removeprefix(_PREFIX)
    where = describe_target(dsn)
    log.warning("cannot reach the database at %s (attempt %d): %s; retrying in %.1fs", where, attempt, reason, delay)


async def wait_for_database(
    check: Callable[[], Awaitable[None]], dsn: str, stopping: asyncio.Event, log: logging.Logger
) -> bool:
    """Run ``check`` until it stops raising :class:`DatabaseUnavailableError`.

    Returns False, at once, when ``stopping`` is set meanwhile (even during an attempt);
    any other error propagates.
    """
    attempt = 0
    while not stopping.is_set():
        attempt_task = asyncio.ensure_future(check())
        stop_task = asyncio.ensure_future(stopping.wait())
        await asyncio.wait({attempt_task, stop_task}, return_when=asyncio.FIRST_COMPLETED)
        stop_task.cancel()
        await asyncio.gather(stop_task, return_exceptions=True)
        if not attempt_task.done():
            attempt_task.cancel()
            await asyncio.gather(attempt_task, return_exceptions=True)
            return False
        exc = attempt_task.exception()
        if exc is None:
            return True
        if not isinstance(exc, DatabaseUnavailableError):
            raise exc
        attempt += 1
        delay = BACKOFF.delay(attempt)
        log_attempt(log, dsn, attempt, exc, delay)
        await wait_set(stopping, delay)
    return False


def check_database(dsn: str, schema: str, *, days_ahead: int) -> None:
    """The schema is installed and current, and today's partitions exist (blocking).

    Raises:
        DatabaseUnavailableError, SchemaNotInstalledError, MigrationError.
    """
    try:
        with open_connection(dsn) as conn:
            require_current(conn, schema)
            ensure_partitions(conn, schema, days_ahead=days_ahead)
    except psycopg.OperationalError as exc:  # lost after connecting
        raise DatabaseUnavailableError.from_exc(exc) from exc


async def reach_database(dsn: str, schema: str, *, days_ahead: int) -> None:
    """:func:`check_database`, after an async connect: unlike the check in a thread, a
    cancellation (a stop while waiting) can cut that short."""
    try:
        aconn = await psycopg.AsyncConnection.connect(dsn, autocommit=True, connect_timeout=10)
    except psycopg.OperationalError as exc:
        raise unavailable(exc, dsn) from exc
    await aconn.close()
    await asyncio.to_thread(check_database, dsn, schema, days_ahead=days_ahead)
