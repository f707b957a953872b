"""The cron scheduler loop that every worker process runs: due ticks become jobs, once.

Design notes (how cron guarantees one job per tick; users read docs/cron.md):

* **Who fires.** Any process may. Materialisation is one transaction: take
  ``pg_try_advisory_xact_lock(hashtextextended('pgqueue.cron:<schema>', 0))``; if another
  process holds it, retry a moment later (it is held for milliseconds, and the holder may
  declare different schedules). The winner locks its schedules' rows ``FOR UPDATE``,
  computes the due ticks from the cursor and the database's ``now()``, inserts one job
  per tick and advances the cursor, then commits. A process killed mid-way rolls back
  as a whole, so the next process fires the same ticks.
* **Why a tick cannot fire twice.** Three guards, each sufficient on its own for the
  case it covers: (1) the advisory lock keeps materialisers from overlapping; (2) the
  cursor ``last_tick`` is read under the row lock, and no tick at or before it is ever
  computed again, even by a transaction that got past the lock (it waits on the row lock
  and then reads the committed cursor); (3) ``cron_ticks`` has the primary key
  ``(schedule, tick)``, a permanent record, unlike ``jobs.unique_key`` which only
  deduplicates against *live* jobs (a completed tick's job would not stop a duplicate).
  The job still carries ``unique_key = 'cron:<schedule>:<tick>'`` for people and SQL.
  Why a table of fired ticks and not ``last_tick`` alone: the cursor suffices while every
  writer respects it, but it is one mutable value; rewound by hand or by a restored
  backup, it would let old ticks be computed again. The ``(schedule, tick)`` key makes a
  second firing impossible rather than unlikely, and doubles as the history that
  ``pgqueue cron list`` shows (last job, who fired it). It costs one small row per tick,
  pruned after a week except for each schedule's latest tick.
* **Time.** Ticks are computed against the database clock only. To sleep until the next
  tick the loop keeps the offset between the database clock and the local monotonic
  clock, refreshed on every query that returns the clock.
* **Idle cost.** The loop sleeps until the next tick of its schedules (plus a random
  0-``max_jitter`` s, so nodes do not wake in lockstep), and otherwise only refreshes
  every ``refresh_interval`` (about 30 s): one cheap statement that marks its schedules
  as declared and re-reads the clock.
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import psycopg

from .._db.conn import ConnectionSource
from .._db.cron import TICK_HISTORY_DAYS, CronDB, Fired, ScheduleState
from ..maintenance.service import PeriodicService
from ..retry import Backoff
from .schedule import Schedule

__all__ = ["CronScheduler", "CronService", "CronStats", "RunResult"]

log = logging.getLogger("pgqueue.cron")

DEFAULT_REFRESH_INTERVAL = 30.0
DEFAULT_MAX_JITTER = 0.5
#: After a database error: 1 s, doubling up to 30 s (each +-20%), reset by a success.
RETRY_BACKOFF = Backoff(base=1.0, cap=30.0, jitter=False)


@dataclass(frozen=True)
class RunResult:
    """One materialisation attempt."""

    leader: bool  # won the advisory lock
    now: datetime | None = None  # the time ticks were computed against
    fired: list[Fired] = field(default_factory=list)
    dropped: list[str] = field(default_factory=list)  # schedules whose missed ticks the policy dropped


@dataclass
class CronStats:
    statements: int = 0  # statements sent, BEGIN/COMMIT included
    attempts: int = 0
    busy: int = 0  # attempts that found the lock taken
    fired: int = 0
    refreshes: int = 0
    wakeups: list[float] = field(default_factory=list)  # seconds after the tick, last 100


class _DbClock:
    """The database clock, read locally: offset to ``time.monotonic()``."""

    def __init__(self) -> None:
        self.offset: float | None = None

    def observe(self, db_time: datetime, sent: float, received: float) -> None:
        self.offset = db_time.timestamp() - (sent + received) / 2

    def now(self) -> datetime:
        if self.offset is None:
            raise RuntimeError("the database clock is read before any query returned it")
        return datetime.fromtimestamp(time.monotonic() + self.offset, UTC)


class CronScheduler:
    """Materialises ``schedules`` into jobs; see the module docstring.

    Tests drive :meth:`run_once` directly (``now`` injects the time ticks are computed
    against); workers run :meth:`run`.
    """

    def __init__(
        self,
        schedules: Iterable[Schedule],
        pool: ConnectionSource,
        *,
        schema: str,
        worker_id: str,
        refresh_interval: float = DEFAULT_REFRESH_INTERVAL,
        max_jitter: float = DEFAULT_MAX_JITTER,
        history_days: int = TICK_HISTORY_DAYS,
    ) -> None:
        self.schedules = {s.name: s for s in schedules}
        self.names = sorted(self.schedules)
        self.pool = pool
        self.db = CronDB(schema)
        self.worker_id = worker_id
        self.refresh_interval = refresh_interval
        self.max_jitter = max_jitter
        self.history_days = history_days
        self.stats = CronStats()
        self.clock = _DbClock()
        self._cursors: dict[str, datetime] = {}
        self._next: dict[str, datetime | None] = {}
        self._registered = False

    # -- one step each ----------------------------------------------------------------

    async def register(self) -> None:
        """Upsert the declared schedules (idempotent, safe when workers start together)."""
        async with self.pool.connection() as conn:
            sent = time.monotonic()
            states, clock = await self.db.register(conn, [self.schedules[n] for n in self.names])
            self.clock.observe(clock, sent, time.monotonic())
        self.stats.statements += 1
        self._learn(states)
        self._registered = True

    async def refresh(self) -> None:
        async with self.pool.connection() as conn:
            sent = time.monotonic()
            states, clock = await self.db.refresh(conn, self.names)
            if clock is not None:
                self.clock.observe(clock, sent, time.monotonic())
        self.stats.statements += 1
        self.stats.refreshes += 1
        if len(states) < len(self.names):
            self._registered = False  # a row vanished (deleted by hand): upsert it again
        self._learn(states)

    async def run_once(
        self,
        *,
        now: datetime | None = None,
        before_commit: Callable[[psycopg.AsyncConnection[Any]], Awaitable[None]] | None = None,
    ) -> RunResult:
        """One materialisation transaction. ``before_commit(conn)`` is a test seam."""
        self.stats.attempts += 1
        async with self.pool.connection() as conn:
            async with conn.transaction():
                sent = time.monotonic()
                leader, db_now, clock = await self.db.try_lock(conn)
                self.clock.observe(clock, sent, time.monotonic())
                self.stats.statements += 2  # BEGIN + lock
                states: dict[str, ScheduleState] = {}
                if not leader:
                    self.stats.busy += 1
                    result = RunResult(False)
                else:
                    result, states = await self._materialise(conn, now or db_now)
                    if before_commit is not None:
                        await before_commit(conn)
            self.stats.statements += 1  # COMMIT
        self._learn(states)  # only what committed
        self._report(result)
        return result

    async def _materialise(
        self, conn: psycopg.AsyncConnection[Any], now: datetime
    ) -> tuple[RunResult, dict[str, ScheduleState]]:
        states = await self.db.lock_schedules(conn, self.names)
        self.stats.statements += 1
        if len(states) < len(self.names):
            self._registered = False  # a row vanished (deleted by hand): upsert it again
        ticks: list[tuple[Schedule, datetime]] = []
        cursors: list[tuple[str, datetime]] = []
        dropped: list[str] = []
        for name, state in states.items():
            schedule = self.schedules[name]
            due = schedule.due(state.cursor, now)
            ticks.extend((schedule, tick) for tick in due.fire)
            if due.cursor is not None:
                cursors.append((name, due.cursor))
                state = ScheduleState(name, due.cursor, state.defined_at)
            if due.dropped:
                dropped.append(name)
            states[name] = state
        fired: list[Fired] = []
        if cursors:
            fired = await self.db.fire(
                conn, ticks=ticks, cursors=cursors, worker_id=self.worker_id, keep_days=self.history_days
            )
            self.stats.statements += 1
        return RunResult(True, now, fired, dropped), states

    def _report(self, result: RunResult) -> None:
        self.stats.fired += len(result.fired)
        for f in result.fired:
            log.info("cron %s: tick %s -> job %d", f.schedule, f.tick.isoformat(), f.job_id)
        for name in result.dropped:
            schedule = self.schedules[name]
            log.warning(
                "cron %s: ticks more than %gs overdue were not fired (missed=%r%s)",
                name,
                schedule.grace,
                schedule.missed,
                f", max_catchup={schedule.max_catchup}" if schedule.missed == "all" else "",
            )

    def _learn(self, states: dict[str, ScheduleState]) -> None:
        for name, state in states.items():
            if name in self.schedules and self._cursors.get(name) != state.cursor:
                self._cursors[name] = state.cursor
                self._next[name] = self.schedules[name].expr.next_after(state.cursor)

    def next_due(self) -> datetime | None:
        """The earliest tick (database time) that this process knows to be pending."""
        pending = [t for t in self._next.values() if t is not None]
        return min(pending) if pending else None

    # -- the loop ---------------------------------------------------------------------

    async def run(self) -> None:
        """Run until cancelled. Database outages are logged and retried with backoff."""
        await CronService(self).run()

    def _refresh_delay(self) -> float:
        return self.refresh_interval * random.uniform(0.8, 1.2)


class CronService(PeriodicService[float]):
    """The scheduler's loop: each round fires what is due, or refreshes, and returns how
    long to sleep (until the next tick of its schedules or the next refresh)."""

    name = "cron"
    what = "cron scheduler"

    def __init__(self, scheduler: CronScheduler) -> None:
        super().__init__(interval=scheduler.refresh_interval, failure_backoff=RETRY_BACKOFF, log=log)
        self.scheduler = scheduler
        self.refresh_at = time.monotonic() + scheduler._refresh_delay()

    def first_delay(self) -> float:
        return 0.0

    def delay_after(self, result: float) -> float:
        return result

    def failure_line(self, exc: BaseException, delay: float) -> str:
        return f"cron scheduler: database unavailable ({exc}); retrying in {delay:.0f}s"

    async def run_once(self) -> float:
        cron = self.scheduler
        if not cron._registered:
            await cron.register()
        due, now = cron.next_due(), cron.clock.now()
        if due is not None and due <= now:
            result = await cron.run_once()
            cron.stats.wakeups = [*cron.stats.wakeups[-99:], (now - due).total_seconds()]
            if not result.leader:
                return self.rand(0.02, 0.2)  # the holder is done in ms
            if (after := cron.next_due()) is not None and after <= cron.clock.now():
                return 0.05  # our clock ran ahead of the database's now()
            return 0.0
        if time.monotonic() >= self.refresh_at:
            await cron.refresh()
            self.refresh_at = time.monotonic() + cron._refresh_delay()
            due, now = cron.next_due(), cron.clock.now()
        wait = self.refresh_at - time.monotonic()
        if due is not None:
            wait = min(wait, (due - now).total_seconds() + self.rand(0.0, cron.max_jitter))
        return max(wait, 0.0)
