"""``pgqueue status``: one snapshot of the observability views as rich tables or JSON
(``pgqueue top``, in :mod:`.top`, refreshes the same tables live)."""

from __future__ import annotations

from datetime import date, datetime, timedelta
from typing import Annotated, Any

import typer
from rich import box
from rich.console import Group, RenderableType
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from .. import ops
from .common import DsnOpt, SchemaOpt, app, connect, console, guard
from .jobs import ago, print_json, seconds
from .render import fit_table, rate_text

__all__ = ["controls_table", "failures_table", "queues_table", "render_status", "workers_table"]


def _bytes(n: float | None) -> str:
    if n is None:
        return "-"
    for unit in ("B", "kB", "MB", "GB"):
        if abs(n) < 1024 or unit == "GB":
            return f"{n:,.0f} {unit}" if unit == "B" else f"{n:,.1f} {unit}"
        n /= 1024
    return f"{n:,.1f} TB"  # pragma: no cover - unreachable


def _pct(value: float | None) -> Text:
    if value is None:
        return Text("-")
    style = "red" if value >= 0.2 else "yellow" if value > 0 else ""
    return Text(f"{value * 100:.1f}%", style=style)


def _cell(value: Any) -> str:
    """A retention (or any generic) view cell, made readable by type."""
    if value is None:
        return "-"
    if isinstance(value, timedelta):
        return seconds(value.total_seconds())
    if isinstance(value, datetime):
        return value.isoformat(timespec="seconds")
    if isinstance(value, date):
        return value.isoformat()
    if isinstance(value, int | float) and not isinstance(value, bool):
        return f"{value:,}"
    return escape(str(value))


# -- tables -------------------------------------------------------------------------------


def queues_table(snap: ops.StatusSnapshot, *, wide: bool = True) -> Table:
    t = Table(title="queues", title_justify="left", box=box.SIMPLE_HEAD)
    t.add_column("queue", no_wrap=True)
    for name in ("avail", "sched", "run", "retry", "lag"):
        t.add_column(name, justify="right")
    t.add_column("done 1m/5m/15m" if wide else "done 1m", justify="right")
    t.add_column("dead 1m/5m/15m" if wide else "dead 1m", justify="right")
    t.add_column("fail 5m", justify="right")
    paused = {c.queue for c in snap.controls if c.paused}
    for q in snap.queues:
        done = f"{q.completed_1m:,}/{q.completed_5m:,}/{q.completed_15m:,}" if wide else f"{q.completed_1m:,}"
        dead = f"{q.discarded_1m:,}/{q.discarded_5m:,}/{q.discarded_15m:,}" if wide else f"{q.discarded_1m:,}"
        lag = q.lag_seconds or 0.0
        label = Text(q.queue)
        if q.queue in paused:
            label.append(" paused", style="bold yellow")
        t.add_row(
            label,
            f"{q.available:,}",
            f"{q.scheduled:,}",
            f"{q.running:,}",
            f"{q.retryable:,}",
            Text(seconds(lag), style="red" if lag >= 60 else "yellow" if lag >= 5 else ""),
            done,
            Text(dead, style="red" if q.discarded_1m else ""),
            _pct(q.failure_rate_5m),
        )
    if not snap.queues:
        t.add_row(Text("no live jobs and nothing finished in the last 15 minutes", style="dim"))
    return t


def controls_table(snap: ops.StatusSnapshot) -> Table:
    """Paused and limited queues and task limits, with what each limit counts now."""
    t = Table(title="flow control", title_justify="left", box=box.SIMPLE_HEAD)
    for name in ("queue / task", "state", "running/limit", "per key", "starts/rate", "key rate"):
        t.add_column(name, no_wrap=True)
    for c in snap.controls:
        t.add_row(
            escape(c.queue),
            Text("paused", style="bold yellow") if c.paused else Text("running", style="green"),
            f"{c.running}/{c.concurrency if c.concurrency is not None else '-'}",
            (str(c.key_concurrency) if c.key_concurrency is not None else "-") + (" fifo" if c.key_fifo else ""),
            rate_text(c.rate_limit, c.rate_period_seconds, c.starts_in_window),
            rate_text(c.key_rate_limit, c.key_rate_period_seconds),
        )
    for task in snap.task_controls:
        t.add_row(Text(f"task {task.task}"), "", f"{task.running}/{task.concurrency}", "", "", "")
    return t


def workers_table(snap: ops.StatusSnapshot, *, alive_only: bool = False) -> Table:
    workers = [w for w in snap.workers if w.alive or not alive_only]
    t = Table(title=f"workers ({sum(1 for w in snap.workers if w.alive)} alive)", title_justify="left")
    t.box = box.SIMPLE_HEAD
    t.add_column("worker", no_wrap=True)
    t.add_column("queues")
    t.add_column("in flight", justify="right")
    t.add_column("listen")
    t.add_column("heartbeat", justify="right")
    t.add_column("up", justify="right")
    t.add_column("state")
    for w in workers:
        flight = f"{w.in_flight if w.in_flight is not None else '?'}/{w.concurrency or '?'}"
        t.add_row(
            escape(w.worker_id),
            escape(",".join(w.queues or [])),
            flight,
            Text("yes", style="green") if w.listener_connected else Text("no (polling)", style="yellow"),
            ago(w.last_heartbeat, snap.at),
            seconds((snap.at - w.started_at).total_seconds()) if w.started_at else "-",
            Text("alive", style="green") if w.alive else Text("expired", style="red"),
        )
    if not workers:
        t.add_row(Text("no worker registered", style="dim"))
    return t


def failures_table(snap: ops.StatusSnapshot, limit: int | None = None) -> Table:
    rows = snap.failures[:limit] if limit else snap.failures
    t = Table(title="recent failures (latest error per job)", title_justify="left", box=box.SIMPLE_HEAD)
    t.add_column("task", no_wrap=True)
    t.add_column("error", no_wrap=True)
    t.add_column("jobs", justify="right")
    t.add_column("last seen", justify="right", no_wrap=True)
    t.add_column("last job", justify="right")
    t.add_column("last message", overflow="ellipsis")
    for f in rows:
        message = (f.last_message or "").splitlines()[0] if f.last_message else ""
        t.add_row(
            escape(f.task),
            Text(f.error_type, style="red"),
            f"{f.count:,}",
            ago(f.last_seen, snap.at),
            str(f.last_job_id or "-"),
            Text(message[:120]),
        )
    if not rows:
        t.add_row(Text("none", style="dim"))
    return t


def health_table(snap: ops.StatusSnapshot) -> Table:
    t = Table(title="health", title_justify="left", box=box.SIMPLE_HEAD, show_header=False)
    t.add_column(style="bold")
    t.add_column()
    h = snap.health
    if h is None:
        return t
    xact = (
        "none"
        if h.oldest_xact_age_seconds is None
        else f"{seconds(h.oldest_xact_age_seconds)} (pid {h.oldest_xact_pid})"
    )
    t.add_row(
        "live partition", f"{h.live_rows or 0:,} rows, {_bytes(h.live_size_bytes)}, {h.live_dead_tuples or 0:,} dead"
    )
    age = h.oldest_xact_age_seconds or 0
    t.add_row("oldest transaction", Text(xact, style="red" if age >= 300 else "yellow" if age >= 60 else ""))
    t.add_row("workers alive", f"{h.workers_alive or 0} ({h.listeners_connected or 0} listening)")
    oldest = h.oldest_finished_partition.isoformat() if h.oldest_finished_partition else "-"
    t.add_row("finished partitions", f"{h.finished_partitions or 0} (oldest {oldest})")
    return t


def retention_table(snap: ops.StatusSnapshot) -> Table:
    t = Table(title="retention", title_justify="left", box=box.SIMPLE_HEAD, padding=(0, 1))
    columns = list(snap.retention[0]) if snap.retention else []
    for name in columns:
        label = name.removesuffix("_bytes").removesuffix("_estimate").replace("_", " ")
        t.add_column(label, justify="left" if name == "state" else "right", no_wrap=True)
    for row in snap.retention:
        cells = [_bytes(v) if k.endswith("_bytes") else _cell(v) for k, v in row.items()]
        t.add_row(*cells)
    return t


def render_status(snap: ops.StatusSnapshot, schema: str) -> Group:
    head = Text(f"pgqueue status · schema {schema} · {snap.at.isoformat(timespec='seconds')}", style="bold")
    parts: list[RenderableType] = [head, fit_table(queues_table(snap))]
    if snap.controls or snap.task_controls:
        parts.append(fit_table(controls_table(snap)))
    parts.append(fit_table(workers_table(snap)))
    parts += [fit_table(failures_table(snap)), health_table(snap), fit_table(retention_table(snap))]
    return Group(*parts)


JsonOpt = Annotated[bool, typer.Option("--json", help="Machine-readable JSON on stdout.")]


@app.command()
def status(as_json: JsonOpt = False, dsn: DsnOpt = None, schema: SchemaOpt = "pgqueue") -> None:
    """Queues, workers, recent failures, health and retention, from pgqueue's views."""

    def go() -> ops.StatusSnapshot:
        with connect(dsn) as conn:
            return ops.status(conn, schema)

    snap = guard(go)
    if as_json:
        print_json(snap)
    else:
        console.print(render_status(snap, schema))
