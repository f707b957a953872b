"""Connection helpers every database user of the worker shares: naming connections in
``pg_stat_activity``, bounding how long a query may hang, one-line error text."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Awaitable
from typing import Any, TypeVar

import psycopg
import psycopg_pool
from psycopg.conninfo import conninfo_to_dict

__all__ = ["application_name", "brief", "within"]

T = TypeVar("T")


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
