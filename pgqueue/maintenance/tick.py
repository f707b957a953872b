"""The scheduler + rescuer tick: every ``maintenance_interval`` (jittered, so nodes do not
wake in lockstep; the first one after a random part of it), one statement that, under a
transaction-scoped advisory lock, promotes due scheduled/retryable jobs, rescues jobs
whose lease expired and cancels waiting jobs whose deadline passed. One process wins the
lock each round."""

from __future__ import annotations

import logging
import time

from .._db.conn import within
from .._db.jobs import JobsDB, TickResult
from ..config import WorkerConfig
from ..retry import Backoff
from .service import Connect, PeriodicService
from .watermark import TickWatermark

__all__ = ["RESCUE_BACKOFF", "TICK_BATCH", "TickService"]

log = logging.getLogger("pgqueue.maintenance")

#: The rescuer's backoff: it cannot know a task's own policy when the task is unknown here.
RESCUE_BACKOFF = Backoff()
#: Most jobs one tick promotes, and most it rescues.
TICK_BATCH = 1000


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
        if result.expired:
            log.info("cancelled %d jobs not started by their deadline (expires_at)", result.expired)
