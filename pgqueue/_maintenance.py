"""Maintenance every worker process runs; the database picks one process per tick.

* ``run_ticks``: every ``maintenance_interval`` (jittered, so nodes do not wake in
  lockstep) one statement that, under a transaction-scoped advisory lock, promotes due
  scheduled/retryable jobs and rescues jobs whose lease expired; every
  ``partition_interval`` it also creates finished-job partitions ahead.
* ``run_vacuum``: VACUUMs the live partition when its dead tuples pile up, one process at a
  time (session advisory lock).
"""

from __future__ import annotations

import asyncio
import logging
import random
import time

import psycopg
import psycopg.errors
import psycopg_pool

from ._jobs_db import JobsDB
from ._partitions import ensure_partitions
from .config import WorkerConfig
from .retry import Backoff

__all__ = ["Maintenance"]

log = logging.getLogger("pgqueue.maintenance")

#: The rescuer's backoff: it cannot know a task's own policy when the task is unknown here.
RESCUE_BACKOFF = Backoff()


class Maintenance:
    def __init__(
        self, db: JobsDB, pool: psycopg_pool.AsyncConnectionPool, *, dsn: str, schema: str, config: WorkerConfig
    ) -> None:
        self.db = db
        self.pool = pool
        self.dsn = dsn
        self.schema = schema
        self.config = config

    async def run_ticks(self) -> None:
        cfg = self.config
        next_partitions = time.monotonic() + cfg.partition_interval
        await asyncio.sleep(random.uniform(0, cfg.maintenance_interval))  # de-synchronise nodes
        while True:
            try:
                async with self.pool.connection() as conn:
                    result = await self.db.maintenance_tick(
                        conn,
                        batch=1000,
                        backoff_base=RESCUE_BACKOFF.base,
                        backoff_cap=RESCUE_BACKOFF.cap,
                        default_max_attempts=cfg.default_max_attempts,
                    )
                if result.rescued or result.discarded:
                    log.warning(
                        "rescued %d jobs whose lease expired (%d retried, %d discarded)",
                        result.rescued + result.discarded,
                        result.rescued,
                        result.discarded,
                    )
                if result.promoted:
                    log.debug("%d scheduled/retryable jobs became available", result.promoted)
                if time.monotonic() >= next_partitions:
                    await self.repair_partitions()
                    next_partitions = time.monotonic() + cfg.partition_interval
            except (psycopg.OperationalError, psycopg_pool.PoolTimeout) as exc:
                log.warning("maintenance tick failed (%s)", exc)
            await asyncio.sleep(cfg.maintenance_interval * random.uniform(0.8, 1.2))

    async def run_vacuum(self) -> None:
        cfg = self.config
        while True:
            await asyncio.sleep(cfg.vacuum_interval * random.uniform(0.8, 1.2))
            try:
                async with self.pool.connection() as conn:
                    started = time.monotonic()
                    if await self.db.vacuum_live_if_needed(conn, cfg.vacuum_threshold):
                        log.info("vacuumed %s.jobs_live in %.2fs", self.schema, time.monotonic() - started)
            except (psycopg.OperationalError, psycopg_pool.PoolTimeout) as exc:
                log.warning("vacuum check failed (%s)", exc)
            except psycopg.errors.InsufficientPrivilege as exc:
                log.warning("cannot vacuum the live partition (%s); leaving it to autovacuum", exc)
                return

    async def repair_partitions(self) -> int:
        def work() -> int:
            with psycopg.connect(self.dsn, autocommit=True, connect_timeout=10) as conn:
                return ensure_partitions(conn, self.schema, days_ahead=self.config.partition_days_ahead)

        return await asyncio.to_thread(work)
