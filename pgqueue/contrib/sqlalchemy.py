"""Enqueue inside a SQLAlchemy transaction (``pip install 'postgres-jobqueue[sqlalchemy]'``).

pgqueue enqueues on a psycopg 3 connection; SQLAlchemy's ``postgresql+psycopg`` dialect
holds one under every ``Session``, ``Connection``, ``AsyncSession`` and
``AsyncConnection``. :func:`enqueue` and :func:`enqueue_async` run the enqueue on that
very connection, inside the transaction SQLAlchemy has open, so the job commits or rolls
back with the ORM's writes. Other drivers (psycopg2, asyncpg, pg8000, another database)
cannot share their transaction with pgqueue: they get a :class:`~pgqueue.ConfigError`
naming the driver.
"""

from __future__ import annotations

from typing import Any

import psycopg
from sqlalchemy.engine import Connection
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncSession
from sqlalchemy.orm import Session

from ..app import App, Task
from ..errors import ConfigError
from ..results.handle import JobHandle

__all__ = ["enqueue", "enqueue_async", "psycopg_connection", "psycopg_connection_async"]


def _check_dialect(dialect: Any) -> None:
    if dialect.name != "postgresql" or dialect.driver != "psycopg":
        raise ConfigError(
            f"pgqueue enqueues on psycopg 3 connections, but this SQLAlchemy engine uses "
            f"{dialect.name}+{dialect.driver}: create it with a postgresql+psycopg:// URL"
        )


def psycopg_connection(bind: Session | Connection) -> psycopg.Connection[Any]:
    """The psycopg connection under ``bind``, inside its transaction (a ``Session``
    begins one if it has none; a ``Connection`` must be in one).

    Raises:
        ConfigError: ``bind`` is not on the psycopg 3 dialect, or a ``Connection`` has no
        transaction open.
    """
    if isinstance(bind, Session):
        conn = bind.connection()  # begins the session's transaction if none is open
    elif isinstance(bind, Connection):
        conn = bind
    else:
        raise ConfigError(f"expected a SQLAlchemy Session or Connection, got {bind!r}")
    _check_dialect(conn.dialect)
    if not conn.in_transaction():
        raise ConfigError(
            "this SQLAlchemy Connection has no transaction open: enqueue inside `with conn.begin():` "
            "(the job must commit with your writes)"
        )
    raw = conn.connection.driver_connection
    if not isinstance(raw, psycopg.Connection):
        raise ConfigError(f"expected a psycopg Connection under this SQLAlchemy Connection, found {raw!r}")
    return raw


async def psycopg_connection_async(bind: AsyncSession | AsyncConnection) -> psycopg.AsyncConnection[Any]:
    """:func:`psycopg_connection` for an ``AsyncSession`` or ``AsyncConnection``."""
    if isinstance(bind, AsyncSession):
        conn = await bind.connection()
    elif isinstance(bind, AsyncConnection):
        conn = bind
    else:
        raise ConfigError(f"expected a SQLAlchemy AsyncSession or AsyncConnection, got {bind!r}")
    _check_dialect(conn.dialect)
    if not conn.in_transaction():
        raise ConfigError(
            "this SQLAlchemy AsyncConnection has no transaction open: enqueue inside `async with conn.begin():` "
            "(the job must commit with your writes)"
        )
    raw = (await conn.get_raw_connection()).driver_connection
    if not isinstance(raw, psycopg.AsyncConnection):
        raise ConfigError(f"expected a psycopg AsyncConnection under this SQLAlchemy connection, found {raw!r}")
    return raw


def _task(task: Task[Any, Any] | str, app: App | None) -> Task[Any, Any]:
    if isinstance(task, Task):
        return task
    if app is None:
        raise ConfigError(f"enqueue by name ({task!r}) needs app=")
    return app.get_task(task)


def enqueue(
    bind: Session | Connection, task: Task[Any, Any] | str, /, *, app: App | None = None, **kwargs: Any
) -> JobHandle:
    """Enqueue ``task`` (a Task, or a name with ``app=``) in ``bind``'s transaction; the
    job exists if and only if that transaction commits. Returns its
    :class:`~pgqueue.JobHandle`."""
    return _task(task, app).enqueue(psycopg_connection(bind), **kwargs)


async def enqueue_async(
    bind: AsyncSession | AsyncConnection, task: Task[Any, Any] | str, /, *, app: App | None = None, **kwargs: Any
) -> JobHandle:
    """:func:`enqueue` for an ``AsyncSession`` or ``AsyncConnection``."""
    return await _task(task, app).enqueue_async(await psycopg_connection_async(bind), **kwargs)
