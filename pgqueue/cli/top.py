"""``pgqueue top``: the observability views refreshed live, with a throughput sparkline."""

from __future__ import annotations

import contextlib
import signal
import threading
import time
from collections import deque
from datetime import datetime
from typing import Annotated

import typer
from rich.console import Group, RenderableType
from rich.live import Live
from rich.text import Text

from .. import ops
from .._db.admin import set_application_name
from .common import DsnOpt, SchemaOpt, app, connect, console, guard
from .render import fit_table
from .status import controls_table, failures_table, queues_table, workers_table

__all__ = ["Throughput", "render_top", "sparkline"]

_BARS = "▁▂▃▄▅▆▇█"


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
    parts: list[RenderableType] = [head, summary, spark, fit_table(queues_table(snap, wide=False))]
    if snap.controls or snap.task_controls:
        parts.append(fit_table(controls_table(snap)))
    parts += [fit_table(workers_table(snap, alive_only=True)), fit_table(failures_table(snap, limit=5))]
    return Group(*parts)


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
