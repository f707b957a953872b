"""Maintenance every worker process runs; the database picks one process per tick.

* ``run_ticks``: every ``maintenance_interval`` (jittered, so nodes do not wake in
  lockstep) one statement that, under a transaction-scoped advisory lock, promotes due
  scheduled/retryable jobs and rescues jobs whose lease expired; every
  ``partition_interval`` it also creates finished-job partitions ahead, and applies
  retention (drops expired day partitions, removes dead worker registrations; first run
  on the first tick).
* ``run_vacuum``: VACUUMs the live partition when its dead tuples pile up, one process at a
  time (session advisory lock).
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections.abc import Awaitable, Callable

import psycopg
import psycopg.errors
import psycopg_pool

from ._jobs_db import JobsDB, VacuumNotAllowedError
from ._listener import brief, within
from ._partitions import ensure_partitions
from ._retention import RetentionResult, apply_retention, retention_of
from ._tick_watermark import TickWatermark
from .config import WorkerConfig
from .retry import Backoff

__all__ = ["Maintenance"]

log = logging.getLogger("pgqueue.maintenance")

#: The rescuer's backoff: it cannot know a task's own policy when the task is unknown here.
RESCUE_BACKOFF = Backoff()
#: Most jobs one tick promotes, and most it rescues.
TICK_BATCH = 1000
#: Seconds before partition upkeep or retention is tried again after a failure.
UPKEEP_RETRY = 30.0
#: A snapshot at least this old (seconds) while dead tuples pass the vacuum threshold
#: means they cannot be removed: claims then resume from a cursor (see _claim_cursor).
PINNED_AFTER = 5.0
#: Longest wait between vacuums of the live partition while a snapshot pins dead rows.
MAX_VACUUM_INTERVAL = 300.0


class Maintenance:
    def __init__(
        self,
        db: JobsDB,
        pool: psycopg_pool.AsyncConnectionPool,
        *,
        dsn: str,
        schema: str,
        config: WorkerConfig,
        worker_id: str = "",
        on_pinned: Callable[[bool], None] | None = None,
    ) -> None:
        self.worker_id = worker_id
        self.on_pinned = on_pinned
        self.db = db
        self.pool = pool
        self.dsn = dsn
        self.schema = schema
        self.config = config

    async def run_ticks(self) -> None:
        cfg = self.config
        next_partitions = time.monotonic() + cfg.partition_interval
        next_retention = 0.0
        await asyncio.sleep(random.uniform(0, cfg.maintenance_interval))  # de-synchronise nodes
        watermark = TickWatermark()
        while True:
            try:
                since = watermark.since(time.monotonic())
                async with self.pool.connection() as conn:
                    result = await within(
                        cfg.lease,
                        self.db.maintenance_tick(
                            conn,
                            batch=TICK_BATCH,
                            backoff_base=RESCUE_BACKOFF.base,
                            backoff_cap=RESCUE_BACKOFF.cap,
                            default_max_attempts=cfg.default_max_attempts,
                            since=since,
                        ),
                        "maintenance tick",
                    )
                watermark.observe(result, scanned_since=since, batch=TICK_BATCH, now=time.monotonic())
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
                    next_partitions = time.monotonic() + await self._upkeep(self.repair_partitions, "partition upkeep")
                if time.monotonic() >= next_retention:
                    next_retention = time.monotonic() + await self._upkeep(self.apply_retention, "retention")
            except (psycopg.OperationalError, psycopg_pool.PoolTimeout) as exc:
                log.warning("maintenance tick failed (%s)", brief(exc))
            await asyncio.sleep(cfg.maintenance_interval * random.uniform(0.8, 1.2))

    async def run_vacuum(self) -> None:
        """Every ``vacuum_interval``: read the live partition's dead tuples and the oldest
        snapshot (reported to ``on_pinned``: True while an old snapshot keeps many dead
        rows alive), and VACUUM it when they pile up, one process at a time."""
        cfg = self.config
        backoff = cfg.vacuum_interval
        next_vacuum = 0.0
        may_vacuum = True
        while True:
            await asyncio.sleep(cfg.vacuum_interval * random.uniform(0.8, 1.2))
            try:
                async with self.pool.connection() as conn:
                    stats = await self.db.live_stats(conn)
                    if self.on_pinned is not None:
                        self.on_pinned(stats.dead >= cfg.vacuum_threshold and stats.snapshot_age >= PINNED_AFTER)
                    if not may_vacuum:
                        continue
                    if stats.can_vacuum and stats.modified >= max(cfg.vacuum_threshold, stats.live // 2):
                        # Where autovacuum is off or slow: keep the claim's plan right
                        # while a backlog builds (ANALYZE samples; cheap next to a claim
                        # that sorts the whole backlog).
                        await self.db.analyze_live(conn)
                    if time.monotonic() < next_vacuum:
                        continue
                    started = time.monotonic()
                    result = await self.db.vacuum_live_if_needed(conn, cfg.vacuum_threshold, stats)
                if result is None:
                    continue
                took = time.monotonic() - started
                if result.holder is None:
                    backoff = cfg.vacuum_interval
                    log.info("vacuumed %s.jobs_live in %.2fs", self.schema, took)
                    continue
                # Most dead rows are still visible to an old snapshot: vacuuming again soon
                # would only rescan the table. Back off until the snapshot goes away.
                backoff = min(backoff * 2, MAX_VACUUM_INTERVAL)
                next_vacuum = time.monotonic() + backoff
                pid, application, age = result.holder
                log.warning(
                    "vacuum of %s.jobs_live left %d of %d dead rows: pid %s (%r) has held a snapshot for "
                    "%.0fs; claims slow down until it ends; next vacuum in about %.1fs",
                    self.schema,
                    result.dead_after,
                    result.dead_before,
                    pid,
                    application,
                    age or 0.0,
                    backoff,
                )
            except (psycopg.OperationalError, psycopg_pool.PoolTimeout) as exc:
                log.warning("vacuum check failed (%s)", brief(exc))
            except (psycopg.errors.InsufficientPrivilege, VacuumNotAllowedError) as exc:
                log.warning("cannot vacuum the live partition (%s); leaving it to autovacuum", exc)
                may_vacuum = False

    async def _upkeep(self, work: Callable[[], Awaitable[object]], what: str) -> float:
        """Run a periodic upkeep job; returns the seconds until the next run: the partition
        interval, or sooner (but not every tick: each run opens a connection) after a
        failure."""
        try:
            await work()
        except (psycopg.OperationalError, psycopg_pool.PoolTimeout) as exc:
            retry = min(UPKEEP_RETRY, self.config.partition_interval)
            log.warning("%s failed (%s); trying again in %.0fs", what, brief(exc), retry)
            return retry
        return self.config.partition_interval

    async def apply_retention(self) -> RetentionResult:
        def work() -> RetentionResult:
            with psycopg.connect(self.dsn, autocommit=True, connect_timeout=10) as conn:
                return apply_retention(conn, self.schema, retention_of(self.config), by=self.worker_id)

        return await asyncio.to_thread(work)

    async def repair_partitions(self) -> int:
        def work() -> int:
            with psycopg.connect(self.dsn, autocommit=True, connect_timeout=10) as conn:
                return ensure_partitions(conn, self.schema, days_ahead=self.config.partition_days_ahead)

        return await asyncio.to_thread(work)
