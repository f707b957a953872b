"""Buffers attempt outcomes and writes them in batches, by size or by time.

A batch is flushed when it reaches ``batch_size`` outcomes or ``interval`` seconds after
its first outcome arrived, whichever comes first. Writes are fenced by lease token, so a
batch can be retried after a connection error without harm; outcomes stay buffered (and
their leases keep being extended) until the database has acknowledged them.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

import psycopg
import psycopg.errors
import psycopg_pool

from ._jobs_db import JobsDB, Outcome
from .models import Job

__all__ = ["Completer"]

log = logging.getLogger("pgqueue.completer")


class Completer:
    def __init__(
        self,
        db: JobsDB,
        pool: psycopg_pool.AsyncConnectionPool,
        *,
        batch_size: int,
        interval: float,
        on_written: Callable[[Job, Outcome, bool], None],
        repair_partitions: Callable[[], Awaitable[object]],
    ) -> None:
        self.db = db
        self.pool = pool
        self.batch_size = batch_size
        self.interval = interval
        self.on_written = on_written
        self.repair_partitions = repair_partitions
        self._pending: list[tuple[Job, Outcome]] = []
        self._arrived = asyncio.Event()
        self._full = asyncio.Event()
        self._idle = asyncio.Event()
        self._idle.set()
        self._lock = asyncio.Lock()

    def submit(self, job: Job, outcome: Outcome) -> None:
        self._pending.append((job, outcome))
        self._idle.clear()
        self._arrived.set()
        if len(self._pending) >= self.batch_size:
            self._full.set()

    def pending(self) -> list[tuple[int, uuid.UUID]]:
        return [(job.id, job.lease_token) for job, _ in self._pending]

    async def drained(self) -> None:
        """Wait until every submitted outcome has been written."""
        await self._idle.wait()

    async def run(self) -> None:
        while True:
            await self._arrived.wait()
            if len(self._pending) < self.batch_size and self.interval > 0:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._full.wait(), self.interval)
            await self.flush()

    async def flush(self) -> None:
        async with self._lock:
            await self._flush()

    async def _flush(self) -> None:
        backoff = 0.05
        while self._pending:
            batch = self._pending[: self.batch_size]
            try:
                async with self.pool.connection() as conn:
                    written = await self._write(conn, batch)
            except psycopg.errors.CheckViolation as exc:
                if "no partition" not in str(exc):
                    raise
                log.warning("finished-job partition missing (%s); creating it", exc)
                await self.repair_partitions()
                continue
            except (psycopg.OperationalError, psycopg_pool.PoolTimeout) as exc:
                log.warning("could not record %d job outcomes (%s); retrying in %.2fs", len(batch), exc, backoff)
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, 5.0)
                continue
            del self._pending[: len(batch)]
            for job, outcome in batch:
                self.on_written(job, outcome, job.id in written)
        self._arrived.clear()
        self._full.clear()
        self._idle.set()

    async def _write(self, conn: psycopg.AsyncConnection[Any], batch: list[tuple[Job, Outcome]]) -> set[int]:
        return await self.db.record_outcomes(conn, [(job.id, job.lease_token, outcome) for job, outcome in batch])
