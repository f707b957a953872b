"""Connection helpers every database user of the worker shares: naming connections in
``pg_stat_activity``, bounding how long a query may hang, one-line error text."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Awaitable
from contextlib import AbstractAsyncContextManager
from typing import Any, Protocol, TypeVar

import psycopg
import psycopg_pool
from psycopg.conninfo import conninfo_to_dict

from ..retry import Backoff

__all__ = [
    "RECONNECT_BACKOFF",
    "TRANSIENT",
    "AConn",
    "AnyConn",
    "Conn",
    "ConnectionSource",
    "application_name",
    "brief",
    "expect_row",
    "within",
]

#: The connection types every DB module takes (the caller's, or one from a pool).
Conn = psycopg.Connection[Any]
AConn = psycopg.AsyncConnection[Any]
AnyConn = Conn | AConn

#: Errors that mean "the database is unreachable right now": every caller logs and retries.
TRANSIENT: tuple[type[BaseException], ...] = (psycopg.OperationalError, psycopg_pool.PoolTimeout)

#: Retrying a statement the worker cannot do without (claim, outcomes) or a connection:
#: 0.05 s, doubling up to 5 s, reset by the next success.
RECONNECT_BACKOFF = Backoff(base=0.05, cap=5.0, jitter=False)


class ConnectionSource(Protocol):
    """Where async connections come from: a psycopg pool, or the worker's connections."""

    def connection(self) -> AbstractAsyncContextManager[AConn]: ...


T = TypeVar("T")
Row = TypeVar("Row")


def expect_row(row: Row | None, query: str) -> Row:
    """``row``, which ``query`` always returns (an aggregate, a function call)."""
    if row is None:
        raise RuntimeError(f"query {query} returned no row")
    return row


def application_name(dsn: str, purpose: str) -> dict[str, Any]:
    """Connection options that name a worker connection by purpose and pid in
    ``pg_stat_activity`` (``pgqueue listener 1234``), unless the DSN or ``$PGAPPNAME``
    already names it."""
    if os.environ.get("PGAPPNAME") or "application_name" in conninfo_to_dict(dsn):
        return {}
    return {"application_name": f"pgqueue {purpose} {os.getpid()}"}


def brief(exc: BaseException) -> str:
    """One line for a log message: the first line of a database error (libpq's messages
    carry multi-line hints), and what a pool timeout means."""
    text = str(exc).strip()
    line = text.splitlines()[0].strip() if text else type(exc).__name__
    if isinstance(exc, psycopg_pool.PoolTimeout):
        line += ": the pool is exhausted or the database refuses new connections"
    return line


async def within(seconds: float, aw: Awaitable[T], what: str) -> T:
    """Await a query for at most ``seconds``. Past that its connection is presumed dead
    (a peer that vanished without FIN or RST: a partition, a stateful firewall forgetting
    the connection) and :class:`psycopg.OperationalError` is raised, which every caller
    already treats as a lost connection; psycopg closes it, so the pool drops it."""
    try:
        async with asyncio.timeout(seconds):  # no extra task, unlike wait_for: cheap on the hot path
            return await aw
    except TimeoutError:
        raise psycopg.OperationalError(f"{what} got no answer within {seconds:g}s") from None
