"""The cron scheduler's seam to the database: one typed method per query in sql/queries/cron.sql."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Protocol

import psycopg
import psycopg.errors

from .._dsn import migrate_hint
from ..errors import SchemaNotInstalledError
from .conn import AConn, expect_row
from .sql import lock_name, queries_for

__all__ = ["TICK_HISTORY_DAYS", "CronDB", "Fired", "ScheduleState", "StatusRow", "status_rows"]


#: Tick history kept in cron_ticks (the latest tick of each schedule is always kept).
TICK_HISTORY_DAYS = 7


class Schedule(Protocol):
    """What the scheduler's statements read of a schedule (a :class:`pgqueue.Schedule`)."""

    @property
    def name(self) -> str: ...
    @property
    def task(self) -> str: ...
    @property
    def expression(self) -> str: ...
    @property
    def timezone(self) -> str: ...
    @property
    def queue(self) -> str: ...
    @property
    def priority(self) -> int: ...
    @property
    def args_json(self) -> str: ...
    @property
    def missed(self) -> str: ...
    @property
    def max_catchup(self) -> int: ...
    @property
    def grace(self) -> float: ...
    @property
    def concurrency_key(self) -> str | None: ...
    @property
    def expires_in(self) -> float | None: ...
    def unique_key(self, tick: datetime) -> str: ...


@dataclass(frozen=True, slots=True)
class ScheduleState:
    name: str
    last_tick: datetime | None
    defined_at: datetime

    @property
    def cursor(self) -> datetime:
        """Only ticks after this instant are ever considered."""
        if self.last_tick is None:
            return self.defined_at
        return max(self.last_tick, self.defined_at)


@dataclass(frozen=True, slots=True)
class Fired:
    schedule: str
    tick: datetime
    job_id: int


def _states(rows: Sequence[tuple[Any, ...]]) -> dict[str, ScheduleState]:
    return {r[0]: ScheduleState(r[0], r[1], r[2]) for r in rows}


def _utc(value: datetime) -> datetime:
    return value.astimezone(UTC)


class CronDB:
    def __init__(self, schema: str) -> None:
        self.schema = schema
        self.q = queries_for(schema)
        self.lock_name = lock_name("cron", schema)

    async def register(self, conn: AConn, schedules: Sequence[Schedule]) -> tuple[dict[str, ScheduleState], datetime]:
        """Upsert ``schedules``; returns their states and the database clock."""
        cur = await conn.execute(
            self.q["cron_register"],
            {
                "names": [s.name for s in schedules],
                "tasks": [s.task for s in schedules],
                "crons": [s.expression for s in schedules],
                "timezones": [s.timezone for s in schedules],
                "queues": [s.queue for s in schedules],
                "priorities": [s.priority for s in schedules],
                "args": [s.args_json for s in schedules],
                "missed": [s.missed for s in schedules],
                "max_catchup": [s.max_catchup for s in schedules],
                "grace": [float(s.grace) for s in schedules],
            },
        )
        rows = await cur.fetchall()
        clock = rows[0][3] if rows else datetime.now(UTC)
        return _states(rows), _utc(clock)

    async def try_lock(self, conn: AConn) -> tuple[bool, datetime, datetime]:
        """Inside a transaction: (won the lock, now(), clock_timestamp())."""
        cur = await conn.execute(self.q["cron_lock"], {"lock_name": self.lock_name})
        row = expect_row(await cur.fetchone(), "cron_lock")
        return bool(row[0]), _utc(row[1]), _utc(row[2])

    async def lock_schedules(self, conn: AConn, names: Sequence[str]) -> dict[str, ScheduleState]:
        cur = await conn.execute(self.q["cron_lock_schedules"], {"names": list(names)})
        return _states(await cur.fetchall())

    async def fire(
        self,
        conn: AConn,
        *,
        ticks: Sequence[tuple[Schedule, datetime]],
        cursors: Sequence[tuple[str, datetime]],
        worker_id: str,
        keep_days: int = TICK_HISTORY_DAYS,
    ) -> list[Fired]:
        """Record ticks, insert their jobs, advance cursors (see ``cron_fire``); returns what fired."""
        cur = await conn.execute(
            self.q["cron_fire"],
            {
                "names": [s.name for s, _ in ticks],
                "ticks": [t for _, t in ticks],
                "tasks": [s.task for s, _ in ticks],
                "queues": [s.queue for s, _ in ticks],
                "priorities": [s.priority for s, _ in ticks],
                "args": [s.args_json for s, _ in ticks],
                "unique_keys": [s.unique_key(t) for s, t in ticks],
                "concurrency_keys": [s.concurrency_key for s, _ in ticks],
                "expires_in": [s.expires_in for s, _ in ticks],
                "cursor_names": [n for n, _ in cursors],
                "cursor_ticks": [t for _, t in cursors],
                "worker_id": worker_id,
                "keep_days": keep_days,
            },
        )
        return [Fired(r[0], _utc(r[1]), int(r[2])) for r in await cur.fetchall() if r[0] is not None]

    async def refresh(self, conn: AConn, names: Sequence[str]) -> tuple[dict[str, ScheduleState], datetime | None]:
        """Mark ``names`` as declared by a running worker; returns their states and the clock."""
        cur = await conn.execute(self.q["cron_refresh"], {"names": list(names)})
        rows = await cur.fetchall()
        return _states(rows), (_utc(rows[0][3]) if rows else None)


@dataclass(frozen=True, slots=True)
class StatusRow:
    """One row of ``cron_status`` (what ``pgqueue cron list`` shows)."""

    name: str
    task: str
    cron: str
    timezone: str
    queue: str
    priority: int
    missed: str
    max_catchup: int
    grace_seconds: float
    active: bool
    last_seen_at: datetime
    defined_at: datetime
    last_tick: datetime | None
    last_fired_tick: datetime | None
    last_fired_at: datetime | None
    last_fired_by: str | None
    last_job_id: int | None
    last_job_state: str | None
    db_now: datetime


def status_rows(conn: psycopg.Connection[Any], schema: str) -> list[StatusRow]:
    """Every schedule the database knows (sync: for the CLI).

    Raises:
        SchemaNotInstalledError: the schema has no cron tables.
    """
    try:
        rows = conn.execute(queries_for(schema)["cron_status_list"]).fetchall()
    except psycopg.errors.UndefinedTable:  # the boundary: see .errors
        raise SchemaNotInstalledError(f"schema {schema!r} has no cron tables: {migrate_hint(conn, schema)}") from None
    return [StatusRow(*row) for row in rows]
