"""``pgqueue demo``: a self-contained showcase on a real database.

It resets a dedicated schema, registers a few tasks (fast ones, flaky ones that retry,
doomed ones that end in the dead letter, scheduled ones), enqueues a few thousand jobs in
transactions, runs a worker in this process and shows live per-state counts.
"""

from __future__ import annotations

import asyncio
import random
import shlex
import time
from typing import Any

import psycopg
from rich.console import Console
from rich.live import Live
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table
from rich.text import Text

from .._db import admin as db
from .._dsn import display_dsn, open_connection
from ..app import App
from ..errors import Retry
from ..migrate import migrate
from ..models import JobState
from ..retry import Backoff
from .common import STATE_STYLE

__all__ = ["build_demo_app", "inspect_hint", "run_demo"]

STATES = [s.value for s in JobState]


def build_demo_app(dsn: str, schema: str) -> App:
    app = App(dsn=dsn, schema=schema)
    fast_retry = Backoff(base=0.05, cap=0.5)

    @app.task(name="demo.resize_image", queue="images")
    def resize_image(image_id: int, width: int, height: int) -> None:
        _ = (image_id * width * height) % 7  # a little CPU-free "work"

    @app.task(name="demo.send_email", queue="emails")
    async def send_email(to: str, template: str) -> None:
        await asyncio.sleep(random.uniform(0, 0.002))  # an I/O call

    @app.task(name="demo.sync_crm", queue="default", max_attempts=5, retry=fast_retry)
    def sync_crm(account: int) -> None:
        if random.random() < 0.3:
            raise ConnectionError("CRM API timed out")

    @app.task(name="demo.rate_limited", queue="default", max_attempts=4)
    async def rate_limited(call: int) -> None:
        if random.random() < 0.2:
            raise Retry(after=0.2, reason="429 Too Many Requests")

    @app.task(name="demo.import_file", queue="default", max_attempts=3, retry=fast_retry)
    def import_file(path: str) -> None:
        raise ValueError(f"{path}: not a CSV file")

    return app


def _enqueue_all(app: App, conn: psycopg.Connection[Any], total: int) -> int:
    tasks = app.tasks
    with conn.transaction():
        # Single enqueues inside an application transaction (one round trip each).
        for i in range(50):
            tasks["demo.send_email"].enqueue(conn, to=f"user{i}@example.com", template="welcome")
        # Scheduled jobs: they wait in 'scheduled' until due.
        for i in range(50):
            tasks["demo.resize_image"].options(delay=0.2 + i / 100).enqueue(conn, image_id=i, width=64, height=64)
    bulk = total - 100
    doomed = max(bulk // 200, 3)

    def stream() -> Any:
        for i in range(bulk):
            r = i % 10
            if i < doomed:
                yield tasks["demo.import_file"].job(path=f"/uploads/{i}.xlsx")
            elif r < 5:
                yield tasks["demo.resize_image"].job(image_id=i, width=800, height=600)
            elif r < 8:
                yield tasks["demo.send_email"].job(to=f"user{i}@example.com", template="digest")
            elif r < 9:
                yield tasks["demo.sync_crm"].job(account=i)
            else:
                yield tasks["demo.rate_limited"].job(call=i)

    with conn.transaction():
        app.enqueue_many(conn, stream())  # COPY, in one transaction
    return total


def _counts(conn: psycopg.Connection[Any], schema: str) -> dict[str, int]:
    counts = dict.fromkeys(STATES, 0)
    counts.update(db.demo_state_counts(conn, schema))
    return counts


def _state_line(counts: dict[str, int]) -> Text:
    line = Text()
    for state in STATES:
        line.append(f"{state} ", style=STATE_STYLE[state])
        line.append(f"{counts[state]:,}   ", style="bold")
    return line


def run_demo(dsn: str, schema: str, jobs: int, concurrency: int, console: Console) -> None:
    with open_connection(dsn) as conn:
        db.demo_drop_schema(conn, schema)
        migrate(conn, schema)
        console.print(f"[bold]pgqueue demo[/] on schema [cyan]{schema}[/]: migrated")
        app = build_demo_app(dsn, schema)
        t0 = time.perf_counter()
        _enqueue_all(app, conn, jobs)
        console.print(
            f"enqueued {jobs:,} jobs in {time.perf_counter() - t0:.2f}s "
            f"(50 single enqueues, 50 scheduled, {jobs - 100:,} via COPY)"
        )
        elapsed = asyncio.run(_work(app, conn, schema, jobs, concurrency, console))
        counts = _counts(conn, schema)
        retries = db.demo_failed_attempts(conn, schema)
    finished = counts["completed"] + counts["discarded"] + counts["cancelled"]
    summary = Table(title="pgqueue demo: summary", show_header=False, title_justify="left")
    summary.add_column(style="bold")
    summary.add_column(justify="right")
    summary.add_row("jobs", f"{jobs:,}")
    summary.add_row("completed", f"{counts['completed']:,}")
    summary.add_row("failed attempts (retried or dead)", f"{retries:,}")
    summary.add_row("discarded (dead letter)", f"{counts['discarded']:,}")
    summary.add_row("wall time", f"{elapsed:.2f}s")
    summary.add_row("throughput", f"{finished / elapsed:,.0f} jobs/s")
    console.print()
    console.print(summary)
    console.print(f"inspect: {inspect_hint(dsn, schema)}", markup=False, highlight=False)


def inspect_hint(dsn: str, schema: str) -> str:
    """A ``psql`` command that reads the demo's counts from its database (psql asks for a password)."""
    query = f"SELECT state, count(*) FROM {schema}.jobs GROUP BY 1"
    return shlex.join(["psql", display_dsn(dsn, password=False), "-c", query])


async def _work(
    app: App, conn: psycopg.Connection[Any], schema: str, total: int, concurrency: int, console: Console
) -> float:
    worker = app.worker(concurrency=concurrency, poll_interval=0.5, maintenance_interval=0.2)
    runner = asyncio.create_task(worker.run())
    progress = Progress(
        TextColumn("[bold]finished"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("{task.fields[rate]}"),
        TimeElapsedColumn(),
        console=console,
    )
    bar = progress.add_task("jobs", total=total, rate="")
    start = time.perf_counter()
    deadline = start + 120
    with Live(console=console, refresh_per_second=8, transient=False) as live:
        while True:
            counts = await asyncio.to_thread(_counts, conn, schema)
            finished = counts["completed"] + counts["discarded"] + counts["cancelled"]
            rate = finished / max(time.perf_counter() - start, 1e-6)
            progress.update(bar, completed=finished, rate=f"{rate:,.0f} jobs/s")
            grid = Table.grid()
            grid.add_row(progress)
            grid.add_row(_state_line(counts))
            live.update(grid)
            if finished >= total or runner.done() or time.perf_counter() > deadline:
                break
            await asyncio.sleep(0.25)
    elapsed = time.perf_counter() - start
    worker.stop()
    await runner
    return elapsed
