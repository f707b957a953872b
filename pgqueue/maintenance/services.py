"""Maintenance every worker process runs; the database picks one process per round.

Three periodic services (see ``_service``), each with its ``run_once()``:

* :class:`TickService`, every ``maintenance_interval`` (jittered, so nodes do not wake in
  lockstep; the first one after a random part of it): one statement that, under a
  transaction-scoped advisory lock, promotes due scheduled/retryable jobs and rescues
  jobs whose lease expired.
* :class:`PartitionService`, every ``partition_interval``: creates finished-job
  partitions ahead.
* :class:`RetentionService`, soon after start and then every ``partition_interval``:
  drops expired day partitions and removes dead worker registrations.

Partition upkeep and retention open their own connection per round, so after a failure
they are tried again sooner than the interval, but not every tick (``UPKEEP_RETRY``).
Vacuuming the live partition is :mod:`pgqueue._vacuum`; :func:`maintainer` groups them all.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from typing import Any

import psycopg

from .._db.conn import within
from .._db.jobs import JobsDB, TickResult
from ..config import WorkerConfig
from ..retry import Backoff
from .partitions import ensure_partitions
from .retention import RetentionResult, apply_retention, retention_of
from .service import Maintainer, PeriodicService
from .vacuum import VacuumService
from .watermark import TickWatermark

__all__ = ["PartitionService", "RetentionService", "TickService", "maintainer"]

log = logging.getLogger("pgqueue.maintenance")

#: A connection from the worker's pool (``pool.connection()``).
Connect = Callable[[], AbstractAsyncContextManager[psycopg.AsyncConnection[Any]]]

#: The rescuer's backoff: it cannot know a task's own policy when the task is unknown here.
RESCUE_BACKOFF = Backoff()
#: Most jobs one tick promotes, and most it rescues.
TICK_BATCH = 1000
#: Seconds before partition upkeep or retention is tried again after a failure.
UPKEEP_RETRY = 30.0


class TickService(PeriodicService[TickResult]):
    """The scheduler + rescuer tick."""

    name = "maintenance"
    what = "maintenance tick"

    def __init__(self, db: JobsDB, connect: Connect, config: WorkerConfig) -> None:
        super().__init__(interval=config.maintenance_interval, log=log)
        self.db = db
        self.connect = connect
        self.config = config
        self.watermark = TickWatermark()

    def first_delay(self) -> float:
        return self.rand(0.0, self.interval)  # de-synchronise nodes

    async def run_once(self) -> TickResult:
        cfg = self.config
        since = self.watermark.since(time.monotonic())
        async with self.connect() as conn:
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
        self.watermark.observe(result, scanned_since=since, batch=TICK_BATCH, now=time.monotonic())
        return result

    def report(self, result: TickResult) -> None:
        if result.rescued or result.discarded:
            log.warning(
                "rescued %d jobs whose lease expired (%d retried, %d discarded)",
                result.rescued + result.discarded,
                result.rescued,
                result.discarded,
            )
        if result.promoted:
            log.debug("%d scheduled/retryable jobs became available", result.promoted)


class _Upkeep:
    """What partition upkeep and retention share: a sync round on a connection of its own."""

    def __init__(self, *, dsn: Callable[[], str], schema: str, config: WorkerConfig) -> None:
        self.dsn = dsn  # asked for at each round: resolving it may start the embedded server
        self.schema = schema
        self.config = config

    def _connect(self) -> psycopg.Connection[Any]:
        return psycopg.connect(self.dsn(), autocommit=True, connect_timeout=10)


def _upkeep_backoff(config: WorkerConfig) -> Backoff:
    retry = min(UPKEEP_RETRY, config.partition_interval)
    return Backoff(base=retry, factor=1.0, cap=retry, jitter=False)


class PartitionService(_Upkeep, PeriodicService[int]):
    """Creates finished-job partitions ahead; ``run_once()`` returns how many it made."""

    name = "partitions"
    what = "partition upkeep"

    def __init__(self, *, dsn: Callable[[], str], schema: str, config: WorkerConfig) -> None:
        _Upkeep.__init__(self, dsn=dsn, schema=schema, config=config)
        PeriodicService.__init__(
            self, interval=config.partition_interval, jitter=0.0, failure_backoff=_upkeep_backoff(config), log=log
        )

    async def run_once(self) -> int:
        def work() -> int:
            with self._connect() as conn:
                return ensure_partitions(conn, self.schema, days_ahead=self.config.partition_days_ahead)

        return await asyncio.to_thread(work)  # logs what it created


class RetentionService(_Upkeep, PeriodicService[RetentionResult]):
    """Applies the configured retention; ``run_once()`` returns what it removed."""

    name = "retention"
    what = "retention"

    def __init__(self, *, dsn: Callable[[], str], schema: str, config: WorkerConfig, worker_id: str) -> None:
        _Upkeep.__init__(self, dsn=dsn, schema=schema, config=config)
        PeriodicService.__init__(
            self, interval=config.partition_interval, jitter=0.0, failure_backoff=_upkeep_backoff(config), log=log
        )
        self.worker_id = worker_id

    def first_delay(self) -> float:
        return self.rand(0.0, self.config.maintenance_interval)  # on the first tick, as it were

    async def run_once(self) -> RetentionResult:
        def work() -> RetentionResult:
            with self._connect() as conn:
                return apply_retention(conn, self.schema, retention_of(self.config), by=self.worker_id)

        return await asyncio.to_thread(work)  # logs what it removed


def maintainer(
    db: JobsDB,
    connect: Connect,
    *,
    dsn: Callable[[], str],
    schema: str,
    config: WorkerConfig,
    worker_id: str,
    on_pinned: Callable[[bool], None] | None = None,
) -> tuple[Maintainer, PartitionService]:
    """Every maintenance service of a worker, grouped; and the partition service alone
    (the completer repairs a missing partition with it)."""
    partitions = PartitionService(dsn=dsn, schema=schema, config=config)
    services: list[PeriodicService[Any]] = [
        TickService(db, connect, config),
        partitions,
        RetentionService(dsn=dsn, schema=schema, config=config, worker_id=worker_id),
    ]
    if config.vacuum_interval > 0:
        services.append(VacuumService(db, connect, schema=schema, config=config, on_pinned=on_pinned))
    return Maintainer(services), partitions
