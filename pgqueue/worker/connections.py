"""The worker's connections: one async pool for everything the loop runs (claims,
outcomes, heartbeats, maintenance, cron, transactional ``async def`` handlers), and a
blocking pool made on first use for transactional sync handlers, which run in threads.

Built with the worker, opened by :meth:`Connections.open` once the DSN is known (resolving
it may start the embedded server), closed at the end of ``run()``.
"""

from __future__ import annotations

import asyncio
import threading
from contextlib import AbstractAsyncContextManager

import psycopg_pool

from .._db.conn import AConn, application_name
from .._db.safe_json import configure_connection

__all__ = ["Connections"]

#: Connections the loop's own units may hold at once: fetcher, completer, heartbeat,
#: maintenance tick, vacuum, cron.
LOOP_CONNECTIONS = 6


class Connections:
    def __init__(self, *, name: str, handler_connections: int, sync_connections: int) -> None:
        """``handler_connections``: extra async connections for transactional ``async def``
        handlers; ``sync_connections``: the blocking pool's size."""
        self.name = name
        self.max_size = LOOP_CONNECTIONS + handler_connections
        self.sync_size = sync_connections
        self.dsn = ""
        self._pool: psycopg_pool.AsyncConnectionPool | None = None
        self._sync: psycopg_pool.ConnectionPool | None = None
        self._sync_lock = threading.Lock()

    async def open(self, dsn: str, timeout: float = 30.0) -> None:
        self.dsn = dsn
        pool = psycopg_pool.AsyncConnectionPool(
            dsn,
            min_size=2,
            max_size=self.max_size,
            kwargs={"autocommit": True, **application_name(dsn, "worker")},
            configure=configure_connection,  # no stored args can crash a claim
            open=False,
            name=f"pgqueue-{self.name}",
        )
        await pool.open(wait=True, timeout=timeout)
        self._pool = pool

    @property
    def pool(self) -> psycopg_pool.AsyncConnectionPool:
        if self._pool is None:
            raise RuntimeError("the worker's connection pool is used before the worker runs")
        return self._pool

    def connection(self) -> AbstractAsyncContextManager[AConn]:
        """A connection of the async pool, in autocommit mode."""
        return self.pool.connection()

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
        if self._pool is not None:
            await self._pool.close()
        if self._sync is not None:
            await asyncio.to_thread(self._sync.close)
