"""``pgqueue status`` (one snapshot of the observability views as rich tables or JSON) and
``pgqueue top`` (the same views refreshed live, with a throughput sparkline)."""

from __future__ import annotations

import contextlib
import signal
import threading
import time
from collections import deque
from datetime import date, datetime, timedelta
from typing import Annotated, Any

import typer
from rich import box
from rich.console import Group, RenderableType
from rich.live import Live
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from .. import ops
from .._db.admin import set_application_name
from .common import DsnOpt, SchemaOpt, app, connect, console, guard
from .jobs import ago, print_json, seconds
from .render import fit_table

__all__ = ["Throughput", "render_status", "render_top", "sparkline"]

_BARS = "▁▂▃▄▅▆▇█"


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
    for q in snap.queues:
        done = f"{q.completed_1m:,}/{q.completed_5m:,}/{q.completed_15m:,}" if wide else f"{q.completed_1m:,}"
        dead = f"{q.discarded_1m:,}/{q.discarded_5m:,}/{q.discarded_15m:,}" if wide else f"{q.discarded_1m:,}"
        lag = q.lag_seconds or 0.0
        t.add_row(
            escape(q.queue),
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
    parts: list[RenderableType] = [head, fit_table(queues_table(snap)), fit_table(workers_table(snap))]
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


# -- top ----------------------------------------------------------------------------------


def sparkline(values: list[float]) -> str:
    """One block character per value, scaled to the largest."""
    top = max(values, default=0)
    if top <= 0:
        return _BARS[0] * len(values)
    return "".join(_BARS[min(len(_BARS) - 1, round(v / top * (len(_BARS) - 1)))] for v in values)


class Throughput:
    """Jobs completed per refresh, estimated from successive ``queue_stats`` snapshots.

    ``completed_1m`` is a sliding window: between two snapshots it grows by what completed
    and shrinks by what left the window. What left is estimated from the rate of the minutes
    before it (``(completed_5m - completed_1m) / 240`` per second), which is exact while the
    rate is steady and for a burst younger than a minute. Times are the database clock.
    """

    def __init__(self, width: int = 60) -> None:
        self.history: deque[float] = deque(maxlen=width)
        self.rates: deque[float] = deque(maxlen=width)
        self._last: tuple[datetime, int, int] | None = None

    def update(self, snap: ops.StatusSnapshot) -> None:
        c1 = sum(q.completed_1m for q in snap.queues)
        c5 = sum(q.completed_5m for q in snap.queues)
        if self._last is not None:
            at, prev1, prev5 = self._last
            dt = (snap.at - at).total_seconds()
            if dt > 0:
                left = dt * max(prev5 - prev1, 0) / 240.0
                done = max(0.0, c1 - prev1 + left)
                self.history.append(done)
                self.rates.append(done / dt)
        self._last = (snap.at, c1, c5)


def render_top(snap: ops.StatusSnapshot, tp: Throughput, schema: str, interval: float) -> Group:
    h = snap.health
    in_flight = sum(w.in_flight or 0 for w in snap.workers if w.alive)
    head = Text(f"pgqueue top · {schema} · {snap.at:%H:%M:%S %Z}", style="bold")
    head.append(f" · every {interval:g}s · Ctrl-C quits", style="dim")
    summary = Text()
    summary.append(f"available {sum(q.available for q in snap.queues):,}  ", style="cyan")
    summary.append(f"running {sum(q.running for q in snap.queues):,}  ", style="yellow")
    summary.append(f"retryable {sum(q.retryable for q in snap.queues):,}  ", style="magenta")
    summary.append(f"in flight {in_flight:,}  ")
    summary.append(f"workers {h.workers_alive if h else 0}  ")
    summary.append(f"live dead tuples {h.live_dead_tuples if h else 0:,}", style="dim")
    spark = Text("throughput ", style="bold")
    if tp.history:
        spark.append(sparkline(list(tp.history)), style="green")
        spark.append(f"  now {tp.rates[-1]:,.0f} jobs/s · peak {max(tp.rates):,.0f} jobs/s", style="bold")
        spark.append(f" · {sum(q.completed_1m for q in snap.queues):,} completed in the last minute")
    else:
        spark.append("(needs two refreshes)", style="dim")
    return Group(
        head,
        summary,
        spark,
        fit_table(queues_table(snap, wide=False)),
        fit_table(workers_table(snap, alive_only=True)),
        fit_table(failures_table(snap, limit=5)),
    )


@app.command()
def top(
    interval: Annotated[float, typer.Option(min=0.1, help="Seconds between refreshes.")] = 2.0,
    iterations: Annotated[int | None, typer.Option(min=1, help="Stop after this many refreshes.")] = None,
    once: Annotated[bool, typer.Option("--once", help="One refresh, then exit (same as --iterations 1).")] = False,
    dsn: DsnOpt = None,
    schema: SchemaOpt = "pgqueue",
) -> None:
    """A live dashboard: throughput, queue depth and lag, workers, failures (Ctrl-C quits).

    Each refresh reads the views in one pipelined round trip on one connection.
    """
    limit = 1 if once else iterations

    def go() -> None:
        with connect(dsn) as conn:
            set_application_name(conn, schema, "pgqueue top")
            tp = Throughput()
            with Live(console=console, auto_refresh=False, transient=False) as live:
                done = 0
                while True:
                    snap = ops.status(conn, schema, failures_limit=5, retention=False)
                    tp.update(snap)
                    live.update(render_top(snap, tp, schema, interval), refresh=True)
                    done += 1
                    if limit is not None and done >= limit:
                        return
                    time.sleep(interval)

    # Ctrl-C is how one leaves top (exit code 0), even when started with SIGINT ignored (a
    # shell's background job, some launchers): Python then installs no handler of its own.
    main = threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGINT, signal.default_int_handler) if main else None
    try:
        with contextlib.suppress(KeyboardInterrupt):
            guard(go)
    finally:
        if previous is not None:
            signal.signal(signal.SIGINT, previous)
