"""``pgqueue cron list``: the schedules the database knows, their ticks and last runs.

It reads ``pgqueue.cron_status`` and needs no application code; ``--app MODULE:APP``
adds what that app declares (schedules not registered yet, registered ones it dropped).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Annotated, Any
from zoneinfo import ZoneInfo

import typer
from rich import box
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from .._db.admin import db_now
from .._db.cron import StatusRow, status_rows
from .._db.sql import lock_name, validate_schema
from .._dsn import announce, open_connection
from ..cron.schedule import Schedule
from ..cron.ticks import CronExpr
from ..errors import ConfigError
from .common import STATE_STYLE, DsnOpt, SchemaOpt, app, connect, console, guard
from .render import fit_table

__all__ = ["CronEntry", "cron_app", "entries"]

cron_app = typer.Typer(help="Inspect cron schedules.", no_args_is_help=True)
app.add_typer(cron_app, name="cron")

_STATE_STYLE = {**STATE_STYLE, "gone": "dim"}
_STATUS_STYLE = {"active": "green", "inactive": "yellow", "not registered": "cyan", "not in app": "red"}


@dataclass(frozen=True)
class CronEntry:
    """One line of ``pgqueue cron list`` (also its JSON object)."""

    name: str
    task: str
    cron: str
    timezone: str
    queue: str
    missed: str
    max_catchup: int
    grace_seconds: float
    #: active (declared by a running worker lately), inactive, and with --app:
    #: "not registered" (declared, never seen by the database), "not in app".
    status: str
    last_seen_at: datetime | None
    last_tick: datetime | None  # the cursor: every tick up to here was fired or dropped
    last_fired_tick: datetime | None
    last_job_id: int | None
    #: The last fired tick's job state; "gone" once retention removed the job.
    last_job_state: str | None
    last_fired_by: str | None
    next_tick: datetime | None

    def as_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for key, value in self.__dict__.items():
            out[key] = value.astimezone(UTC).isoformat() if isinstance(value, datetime) else value
        return out


def _next_tick(cron: str, timezone: str, name: str, after: datetime) -> datetime | None:
    try:
        return CronExpr(cron, timezone, hash_key=name).next_after(after)
    except ConfigError:
        return None  # edited by hand into something invalid: show no next tick


def _from_row(row: StatusRow, status: str) -> CronEntry:
    cursor = row.defined_at if row.last_tick is None else max(row.last_tick, row.defined_at)
    state = row.last_job_state
    if row.last_job_id is not None and state is None:
        state = "gone"
    return CronEntry(
        name=row.name,
        task=row.task,
        cron=row.cron,
        timezone=row.timezone,
        queue=row.queue,
        missed=row.missed,
        max_catchup=row.max_catchup,
        grace_seconds=row.grace_seconds,
        status=status,
        last_seen_at=row.last_seen_at,
        last_tick=row.last_tick,
        last_fired_tick=row.last_fired_tick,
        last_job_id=row.last_job_id,
        last_job_state=state,
        last_fired_by=row.last_fired_by,
        next_tick=_next_tick(row.cron, row.timezone, row.name, max(cursor, row.db_now)),
    )


def _from_schedule(s: Schedule, now: datetime) -> CronEntry:
    return CronEntry(
        name=s.name,
        task=s.task,
        cron=s.expr.expression,
        timezone=s.timezone,
        queue=s.queue,
        missed=s.missed,
        max_catchup=s.max_catchup,
        grace_seconds=float(s.grace),
        status="not registered",
        last_seen_at=None,
        last_tick=None,
        last_fired_tick=None,
        last_job_id=None,
        last_job_state=None,
        last_fired_by=None,
        next_tick=s.expr.next_after(now),
    )


def entries(rows: list[StatusRow], declared: list[Schedule] | None, now: datetime) -> list[CronEntry]:
    """Merge the database's schedules with an app's declared ones (when given)."""
    names = None if declared is None else {s.name for s in declared}
    out = []
    for row in rows:
        status = "active" if row.active else "inactive"
        if names is not None and row.name not in names:
            status = "not in app"
        out.append(_from_row(row, status))
    known = {row.name for row in rows}
    out.extend(_from_schedule(s, now) for s in declared or [] if s.name not in known)
    return sorted(out, key=lambda e: e.name)


def _when(ts: datetime | None, timezone: str, now: datetime) -> Text:
    if ts is None:
        return Text("-", style="dim")
    try:
        local = ts.astimezone(ZoneInfo(timezone))
    except (KeyError, ValueError):
        local = ts.astimezone(UTC)
    delta = (ts - now).total_seconds()
    rel = f"in {_span(delta)}" if delta >= 0 else f"{_span(-delta)} ago"
    return Text.assemble(local.strftime("%b %d %H:%M:%S %Z"), (f"\n{rel}", "dim"))


def _span(seconds: float) -> str:
    if seconds < 60:
        return f"{seconds:.0f}s"
    if seconds < 3600:
        return f"{seconds // 60:.0f}m"
    if seconds < 86400:
        return f"{seconds // 3600:.0f}h {seconds % 3600 // 60:.0f}m"
    return f"{seconds // 86400:.0f}d {seconds % 86400 // 3600:.0f}h"


def _table(items: list[CronEntry], now: datetime, schema: str) -> Table:
    table = Table(
        title=f"cron schedules in schema {schema}",
        caption=f"lock: hashtextextended('{lock_name('cron', schema)}', 0)",
        box=box.SIMPLE_HEAD,
    )
    for column in ("schedule", "task", "expression", "zone", "missed", "last tick", "next tick", "last run", "status"):
        table.add_column(column, overflow="fold", no_wrap=column in ("expression", "last tick", "next tick", "status"))
    for e in items:
        policy = f"all ≤{e.max_catchup}" if e.missed == "all" else e.missed
        run = Text("-", style="dim")
        if e.last_job_state is not None:
            run = Text.assemble((e.last_job_state, _STATE_STYLE.get(e.last_job_state, "")), f" #{e.last_job_id}")
        table.add_row(  # rows may have been edited by hand: no markup from them
            escape(e.name),
            escape(e.task),
            escape(e.cron),
            escape(e.timezone),
            policy,
            _when(e.last_fired_tick, e.timezone, now),
            _when(e.next_tick, e.timezone, now),
            run,
            Text(e.status, style=_STATUS_STYLE.get(e.status, "")),
        )
    return table


@cron_app.command("list")
def list_schedules(
    dsn: DsnOpt = None,
    schema: SchemaOpt = "pgqueue",
    json_out: Annotated[bool, typer.Option("--json", help="Machine-readable JSON on stdout.")] = False,
    target: Annotated[
        str | None,
        typer.Option("--app", metavar="MODULE:APP", help="Also show what this app declares but the database lacks."),
    ] = None,
) -> None:
    """Schedules, their expression and zone, last and next tick, and the last run's state."""

    def go() -> tuple[list[CronEntry], datetime]:
        validate_schema(schema)
        declared = None
        if target is None:
            conn = connect(dsn)
        else:
            from ..runner.loader import load_app

            loaded = load_app(target)
            declared = loaded.declared_schedules()
            loaded.configure(dsn=dsn)  # --dsn, else the app's own database
            announce(loaded.database)
            conn = open_connection(loaded.database)
        with conn:
            rows = status_rows(conn, schema)
            now = db_now(conn, schema).astimezone(UTC)
        return entries(rows, declared, now), now

    items, now = guard(go)
    if json_out:
        typer.echo(json.dumps([e.as_json() for e in items], indent=2, ensure_ascii=False))
        return
    if not items:
        console.print(f"no cron schedules in schema [bold]{schema}[/] (declare them with @app.periodic)")
        return
    console.print(fit_table(_table(items, now, schema)))
