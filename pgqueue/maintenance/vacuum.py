"""Vacuuming the live partition: a periodic service every worker process runs.

Every ``vacuum_interval`` (jittered) it reads the live partition's dead tuples and the
oldest snapshot (reported to ``on_pinned``: True while an old snapshot keeps many dead rows
alive, so claims may resume from a cursor, see ``_claim_cursor``), ANALYZEs the partition
when many rows changed, and VACUUMs it when dead tuples pile up, one process at a time
(session advisory lock). When a vacuum leaves most dead rows behind because an old
snapshot still sees them, vacuuming again soon would only rescan the table: the next
vacuum backs off (``VACUUM_BACKOFF``) until a vacuum succeeds.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from typing import Any

import psycopg
import psycopg.errors

from .._db.errors import NotPermittedError
from .._db.jobs import JobsDB, VacuumResult
from ..config import WorkerConfig
from ..retry import Backoff, Retries
from .service import PeriodicService

__all__ = ["VacuumRound", "VacuumService"]

log = logging.getLogger("pgqueue.maintenance")

#: A snapshot at least this old (seconds) while dead tuples pass the vacuum threshold
#: means they cannot be removed: claims then resume from a cursor (see _claim_cursor).
PINNED_AFTER = 5.0
#: Longest wait between vacuums of the live partition while a snapshot pins dead rows.
MAX_VACUUM_INTERVAL = 300.0


@dataclass(frozen=True, slots=True)
class VacuumRound:
    """What one round did."""

    pinned: bool = False
    analyzed: int = 0
    vacuumed: int = 0
    #: The vacuum that ran, and how long it took (seconds).
    vacuum: VacuumResult | None = None
    took: float = 0.0
    #: Seconds until the next vacuum may run, when this one left pinned rows behind.
    backoff: float = 0.0


class VacuumService(PeriodicService[VacuumRound]):
    name = "vacuum"
    what = "vacuum check"

    def __init__(
        self,
        db: JobsDB,
        connect: Callable[[], AbstractAsyncContextManager[psycopg.AsyncConnection[Any]]],
        *,
        schema: str,
        config: WorkerConfig,
        on_pinned: Callable[[bool], None] | None = None,
    ) -> None:
        super().__init__(interval=config.vacuum_interval, log=log)
        self.db = db
        self.connect = connect
        self.schema = schema
        self.config = config
        self.on_pinned = on_pinned
        self.may_vacuum = True
        #: While a snapshot pins dead rows: twice the interval, doubling up to the maximum.
        self.pinned_backoff = Retries(Backoff(base=2 * config.vacuum_interval, cap=MAX_VACUUM_INTERVAL, jitter=False))
        self.next_vacuum = 0.0

    async def run_once(self) -> VacuumRound:
        try:
            return await self._round()
        except NotPermittedError as exc:
            log.warning("cannot vacuum the live partition (%s); leaving it to autovacuum", exc)
            self.may_vacuum = False
            return VacuumRound()

    async def _round(self) -> VacuumRound:
        cfg = self.config
        analyzed = 0
        async with self.connect() as conn:
            stats = await self.db.live_stats(conn)
            pinned = stats.dead >= cfg.vacuum_threshold and stats.snapshot_age >= PINNED_AFTER
            if self.on_pinned is not None:
                self.on_pinned(pinned)
            if not self.may_vacuum:
                return VacuumRound(pinned)
            if stats.can_vacuum and stats.modified >= max(cfg.vacuum_threshold, stats.live // 2):
                # Where autovacuum is off or slow: keep the claim's plan right while a
                # backlog builds (ANALYZE samples; cheap next to a claim that sorts the
                # whole backlog).
                await self.db.analyze_live(conn)
                analyzed = 1
            if time.monotonic() < self.next_vacuum:
                return VacuumRound(pinned, analyzed)
            started = time.monotonic()
            result = await self.db.vacuum_live_if_needed(conn, cfg.vacuum_threshold, stats)
        if result is None:
            return VacuumRound(pinned, analyzed)
        took = time.monotonic() - started
        if result.holder is None:
            self.pinned_backoff.reset()
            return VacuumRound(pinned, analyzed, 1, result, took)
        backoff = self.pinned_backoff.next()
        self.next_vacuum = time.monotonic() + backoff
        return VacuumRound(pinned, analyzed, 1, result, took, backoff)

    def report(self, result: VacuumRound) -> None:
        vacuum = result.vacuum
        if vacuum is None:
            return
        if vacuum.holder is None:
            log.info("vacuumed %s.jobs_live in %.2fs", self.schema, result.took)
            return
        pid, application, age = vacuum.holder
        log.warning(
            "vacuum of %s.jobs_live left %d of %d dead rows: pid %s (%r) has held a snapshot for "
            "%.0fs; claims slow down until it ends; next vacuum in about %.1fs",
            self.schema,
            vacuum.dead_after,
            vacuum.dead_before,
            pid,
            application,
            age or 0.0,
            result.backoff,
        )
