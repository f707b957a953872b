"""Partition upkeep and retention, as periodic services: each round runs on a connection
of its own (blocking, in a thread), so after a failure it is tried again sooner than the
interval, but not every tick (``UPKEEP_RETRY``).

* :class:`PartitionService`, every ``partition_interval``: creates finished-job
  partitions ahead (:mod:`.partitions`).
* :class:`RetentionService`, soon after start and then every ``partition_interval``:
  drops expired day partitions and removes dead worker registrations (:mod:`.retention`).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

import psycopg

from ..config import WorkerConfig
from ..retry import Backoff
from .partitions import ensure_partitions
from .retention import RetentionResult, apply_retention, retention_of
from .service import PeriodicService

__all__ = ["UPKEEP_RETRY", "PartitionService", "RetentionService"]

log = logging.getLogger("pgqueue.maintenance")

#: Seconds before partition upkeep or retention is tried again after a failure.
UPKEEP_RETRY = 30.0


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
