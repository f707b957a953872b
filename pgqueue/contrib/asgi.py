"""pgqueue in an asyncio web application (FastAPI, Starlette, any ASGI framework with a
lifespan): a connection pool for enqueueing from request handlers, and optionally a
worker running in the application's own event loop.

:class:`Queue` imports no framework: its :meth:`Queue.lifespan` is an async context
manager that FastAPI and Starlette take as ``lifespan=`` directly, and that any other
lifespan can enter. On startup it opens the pool and starts the worker (waiting until it
runs); on shutdown the worker stops gracefully, as ``pgqueue work`` does on SIGTERM: no
new claims, in-flight jobs finish (up to the worker's ``shutdown_timeout``), the rest go
back to ``available``; then the pool closes.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Any

import psycopg
import psycopg_pool

from ..app import App, Task
from ..errors import ConfigError
from ..results.handle import JobHandle
from ..worker.worker import Worker

__all__ = ["Queue"]


class Queue:
    """A pgqueue app's pool and in-process worker, tied to a web app's lifespan.

    ``worker=False`` only enqueues (workers run elsewhere, ``pgqueue work``).
    ``worker_options`` override the app's :class:`~pgqueue.WorkerConfig` (``queues``,
    ``concurrency``, ``shutdown_timeout``...). ``min_size``/``max_size`` size the pool
    request handlers enqueue on.
    """

    def __init__(
        self, app: App, *, worker: bool = True, min_size: int = 1, max_size: int = 10, **worker_options: Any
    ) -> None:
        if not isinstance(app, App):
            raise ConfigError(f"Queue takes a pgqueue.App, got {app!r}")
        self.app = app
        self.run_worker = worker
        self.min_size = min_size
        self.max_size = max_size
        self.worker_options = worker_options
        self._pool: psycopg_pool.AsyncConnectionPool | None = None
        self.worker: Worker | None = None

    @property
    def pool(self) -> psycopg_pool.AsyncConnectionPool:
        """The pool request handlers enqueue on (open between startup and shutdown).

        Raises:
            ConfigError: the lifespan is not running.
        """
        if self._pool is None:
            raise ConfigError("the pgqueue Queue is not started: pass queue.lifespan to your app (lifespan=...)")
        return self._pool

    @property
    def stopping(self) -> bool:
        """True once shutdown began (a long handler may check it to end early)."""
        return self.worker is not None and self.worker._stopping.is_set()

    async def wait_stopping(self) -> None:
        """Return once shutdown began (for a long ``async def`` handler that should end
        early; the worker must be running)."""
        if self.worker is None:
            raise ConfigError("this Queue runs no worker")
        await self.worker._stopping.wait()

    def connection(self) -> AbstractAsyncContextManager[psycopg.AsyncConnection[Any]]:
        """A connection from the pool, for enqueueing inside your own transaction:
        ``async with queue.connection() as conn, conn.transaction(): ...``."""
        return self.pool.connection()

    async def enqueue(self, task: Task[Any, Any] | str, /, **kwargs: Any) -> JobHandle:
        """Enqueue ``task`` (a Task, or a name of the app's) in a transaction of its own."""
        found = task if isinstance(task, Task) else self.app.get_task(task)
        async with self.pool.connection() as conn, conn.transaction():
            return await found.enqueue_async(conn, **kwargs)

    @asynccontextmanager
    async def lifespan(self, asgi_app: Any = None) -> AsyncIterator[dict[str, Any]]:
        """Start the pool (and the worker) for the block; yields the lifespan state
        (``{"pgqueue": self}``, which Starlette exposes as ``request.state.pgqueue``).

        Raises:
            Whatever stops the worker from starting (an unreachable database, a schema
            not migrated), at startup.
        """
        pool = psycopg_pool.AsyncConnectionPool(
            self.app.dsn, min_size=self.min_size, max_size=self.max_size, open=False, name="pgqueue-asgi"
        )
        await pool.open(wait=True)
        self._pool = pool
        task: asyncio.Task[None] | None = None
        try:
            if self.run_worker:
                self.worker = self.app.worker(**self.worker_options)
                task = asyncio.create_task(self.worker.run(), name="pgqueue-worker")
                started = asyncio.create_task(self.worker.started.wait())
                await asyncio.wait({task, started}, return_when=asyncio.FIRST_COMPLETED)
                if task.done():
                    started.cancel()
                    task.result()  # the worker could not start: say why, at startup
            yield {"pgqueue": self}
        finally:
            if task is not None and self.worker is not None:
                self.worker.stop()
                await task
            self._pool = None
            await pool.close()
