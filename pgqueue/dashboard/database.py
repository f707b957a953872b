"""The dashboard's connections: a small pool opened at the first request (an app mounted
inside another one gets no startup event), each connection named in
``pg_stat_activity``, running its statements without parallel workers and, in read-only
mode, acting as the inspector role."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

import psycopg
from psycopg_pool import ConnectionPool

from .._db import admin as admin_db
from .._db import dashboard as db
from .._db.conn import Conn
from .config import DashboardConfig

__all__ = ["Database"]

T = TypeVar("T")


class Database:
    def __init__(self, config: DashboardConfig) -> None:
        self.config = config
        self._pool: ConnectionPool[Conn] | None = None
        self._lock = threading.Lock()

    def _configure(self, conn: Conn) -> None:
        admin_db.set_application_name(conn, self.config.schema, "pgqueue dashboard")
        db.session_serial(conn, self.config.schema)
        if self.config.read_only:
            db.session_role(conn, self.config.schema, self.config.inspector_role)

    def _open(self) -> ConnectionPool[Conn]:
        with self._lock:
            if self._pool is None:
                pool: ConnectionPool[Conn] = ConnectionPool(
                    self.config.dsn,
                    min_size=1,
                    max_size=self.config.pool_size,
                    kwargs={"autocommit": True},
                    configure=self._configure,
                    open=False,
                    name="pgqueue-dashboard",
                )
                pool.open(wait=False)
                self._pool = pool
            return self._pool

    @contextmanager
    def connection(self) -> Iterator[Conn]:
        with self._open().connection(timeout=10.0) as conn:
            yield conn

    def run(self, fn: Callable[[Conn], T]) -> T:
        with self.connection() as conn:
            return fn(conn)

    def check(self) -> None:
        """Connect once as the pool will (role included) and read the live queues, so that a
        wrong DSN, a missing schema or a role the login user cannot take fails at start with
        its own message rather than as a pool timeout at the first request.

        Raises:
            psycopg.Error: the connection or the role was refused.
            SchemaNotInstalledError: the schema has no pgqueue tables.
        """
        with psycopg.connect(self.config.dsn, autocommit=True) as conn:
            self._configure(conn)
            db.queue_names(conn, self.config.schema)

    def close(self) -> None:
        with self._lock:
            pool, self._pool = self._pool, None
        if pool is not None:
            pool.close()

    def __enter__(self) -> Database:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
