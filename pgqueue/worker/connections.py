"""The worker's connections: a small async pool for the loop's hot statements (claims,
outcomes, heartbeats, and the small reads that go with them: the flow-control settings
and the worker's registration), whose sessions run on the worker's plans; an async pool for the
rest (maintenance, cron, startup and shutdown, transactional ``async def`` handlers), on
PostgreSQL's defaults; and a blocking pool made on first use for transactional sync
handlers, which run in threads.

The hot pool's sessions keep ``plan_cache_mode`` and ``enable_seqscan`` set (see
``worker_session_plans``), so no handler or operator statement may ever run on them.

Built with the worker, opened by :meth:`Connections.open` once the DSN is known (resolving
it may start the embedded server), closed at the end of ``run()``.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Awaitable, Callable
from contextlib import AbstractAsyncContextManager

import psycopg_pool

from .._db.conn import AConn, application_name
from .._db.safe_json import configure_connection

__all__ = ["Connections"]

#: Connections the loop's hot units may hold at once: fetcher, completer, heartbeat.
HOT_CONNECTIONS = 3
#: Connections the loop's other units may hold at once: maintenance tick, vacuum, cron,
#: a limited claim, and reads for handlers (a child's parents).
LOOP_CONNECTIONS = 6


class Connections:
    def __init__(
        self,
        *,
        name: str,
        handler_connections: int,
        sync_connections: int,
        session_plans: Callable[[AConn], Awaitable[None]],
    ) -> None:
        """``handler_connections``: extra async connections for transactional ``async def``
        handlers; ``sync_connections``: the blocking pool's size; ``session_plans``: sets
        the worker's plans on a new hot connection."""
        self.name = name
        self.max_size = LOOP_CONNECTIONS + handler_connections
        self.sync_size = sync_connections
        self.dsn = ""
        self._session_plans = session_plans
        self._pool: psycopg_pool.AsyncConnectionPool | None = None
        self._hot: psycopg_pool.AsyncConnectionPool | None = None
        self._sync: psycopg_pool.ConnectionPool | None = None
        self._sync_lock = threading.Lock()

    async def open(self, dsn: str, timeout: float = 30.0) -> None:
        self.dsn = dsn
        kwargs = {"autocommit": True, **application_name(dsn, "worker")}
        pool = psycopg_pool.AsyncConnectionPool(
            dsn,
            min_size=1,
            max_size=self.max_size,
            kwargs=kwargs,
            configure=configure_connection,  # no stored args can crash a handler's read
            open=False,
            name=f"pgqueue-{self.name}",
        )
        hot = psycopg_pool.AsyncConnectionPool(
            dsn,
            min_size=1,
            max_size=HOT_CONNECTIONS,
            kwargs=kwargs,
            configure=self._configure_hot,
            open=False,
            name=f"pgqueue-{self.name}-hot",
        )
        try:
            await pool.open(wait=True, timeout=timeout)
            await hot.open(wait=True, timeout=timeout)
        except BaseException:
            await pool.close()
            await hot.close()
            raise
        self._pool, self._hot = pool, hot

    async def _configure_hot(self, conn: AConn) -> None:
        await configure_connection(conn)  # no stored args can crash a claim
        await self._session_plans(conn)

    @property
    def pool(self) -> psycopg_pool.AsyncConnectionPool:
        if self._pool is None:
            raise RuntimeError("the worker's connection pool is used before the worker runs")
        return self._pool

    def connection(self) -> AbstractAsyncContextManager[AConn]:
        """A connection of the async pool, in autocommit mode, on PostgreSQL's defaults."""
        return self.pool.connection()

    def hot(self) -> AbstractAsyncContextManager[AConn]:
        """A connection of the hot pool, in autocommit mode, on the worker's plans: only
        for the worker's own claims, outcomes and heartbeats."""
        if self._hot is None:
            raise RuntimeError("the worker's connection pool is used before the worker runs")
        return self._hot.connection()

    def sync_pool(self) -> psycopg_pool.ConnectionPool:
        """The blocking pool (thread-safe; opened on first use)."""
        with self._sync_lock:
            if self._sync is None:
                self._sync = psycopg_pool.ConnectionPool(
                    self.dsn,
                    min_size=1,
                    max_size=self.sync_size,
                    kwargs={"autocommit": True, **application_name(self.dsn, "job")},
                    open=True,
                )
            return self._sync

    async def close(self) -> None:
        if self._hot is not None:
            await self._hot.close()
        if self._pool is not None:
            await self._pool.close()
        if self._sync is not None:
            await asyncio.to_thread(self._sync.close)
