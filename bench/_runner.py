"""Running contenders side by side: worker subprocesses, interleaved repetitions,
medians and ratios, and the result file."""

from __future__ import annotations

import json
import os
import signal
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg
from rich.console import Console
from rich.table import Table

from bench._contenders import Contender

REPO = Path(__file__).resolve().parent.parent
console = Console(stderr=True)
# Result tables: wide enough for every column when written to a file or a pipe.
tables = Console(width=None if sys.stdout.isatty() else 200)


@dataclass
class WorkerGroup:
    """``processes`` worker subprocesses of one contender; collects their start reports."""

    contender: Contender
    dsn: str
    processes: int = 1
    concurrency: int = 100
    extra: tuple[str, ...] = ()
    report: bool = False
    reports: dict[str, float] = field(default_factory=dict)
    stats: list[str] = field(default_factory=list)
    _procs: list[subprocess.Popen[str]] = field(default_factory=list)
    _threads: list[threading.Thread] = field(default_factory=list)

    def start(self, timeout: float = 60.0) -> None:
        cmd = [
            sys.executable,
            "-m",
            self.contender.worker_module,
            "--dsn",
            self.dsn,
            "--concurrency",
            str(self.concurrency),
            *self.contender.worker_args,
            *self.extra,
        ]
        if self.report:
            cmd.append("--report")
        ready = threading.Semaphore(0)
        for _ in range(self.processes):
            proc = subprocess.Popen(
                cmd,
                cwd=self.contender.process_cwd(REPO),
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
                text=True,
                env={**os.environ, "PYTHONUNBUFFERED": "1"},
            )
            self._procs.append(proc)
            t = threading.Thread(target=self._read, args=(proc, ready), daemon=True)
            t.start()
            self._threads.append(t)
        deadline = time.monotonic() + timeout
        for _ in self._procs:
            if not ready.acquire(timeout=max(deadline - time.monotonic(), 0)):
                self.stop()
                raise RuntimeError(f"{self.contender.name} workers did not start within {timeout}s")

    def pids(self) -> list[int]:
        """The worker processes' ids (for their CPU time, bench/_cost.py)."""
        return [proc.pid for proc in self._procs]

    def _read(self, proc: subprocess.Popen[str], ready: threading.Semaphore) -> None:
        assert proc.stdout is not None
        with proc.stdout:  # closed at EOF: no pipe left for the garbage collector to warn about
            for line in proc.stdout:
                if line == "READY\n":
                    ready.release()
                elif line.startswith("STATS "):
                    self.stats.append(line[6:].strip())
                else:
                    key, _, at = line.partition(" ")
                    if at:
                        self.reports[key] = float(at)

    def stop(self, timeout: float = 30.0) -> None:
        for proc in self._procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in self._procs:
            try:
                proc.wait(timeout)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        for t in self._threads:
            t.join(5)
        self._procs.clear()
        self._threads.clear()


@contextmanager
def workers(group: WorkerGroup) -> Iterator[WorkerGroup]:
    group.start()
    try:
        yield group
    finally:
        group.stop()


def wait_drained(conn: psycopg.Connection[Any], contender: Contender, timeout: float, interval: float = 0.01) -> float:
    """Poll until the contender has no unfinished job; returns the moment it saw none."""
    deadline = time.monotonic() + timeout
    while True:
        row = conn.execute(contender.remaining_sql).fetchone()
        if row is not None and row[0] == 0:
            return time.perf_counter()
        if time.monotonic() > deadline:
            raise TimeoutError(f"{contender.name}: {row[0] if row else '?'} jobs left after {timeout}s")
        time.sleep(interval)


def interleaved(
    names: list[str], repeat: int, run_one: Callable[[str, int], dict[str, float]]
) -> dict[str, list[dict[str, float]]]:
    """Run A B C, A B C, ... ``repeat`` times; returns every run per name."""
    runs: dict[str, list[dict[str, float]]] = {n: [] for n in names}
    for rep in range(repeat):
        for name in names:
            result = run_one(name, rep)
            runs[name].append(result)
            summary = ", ".join(f"{k}={v:,.2f}" for k, v in result.items())
            console.print(f"  [dim]run {rep + 1}/{repeat}[/] {name}: {summary}")
    return runs


def medians(runs: dict[str, list[dict[str, float]]]) -> dict[str, dict[str, float]]:
    out: dict[str, dict[str, float]] = {}
    for name, results in runs.items():
        if results:
            out[name] = {k: statistics.median(r[k] for r in results) for k in results[0]}
    return out


def ratios(med: dict[str, dict[str, float]], metric: str, higher_is_better: bool = True) -> dict[str, float]:
    """pgqueue against the raw-SQL ceiling, the best peer and every other contender, on one metric."""
    if "pgqueue" not in med:
        return {}
    ours = med["pgqueue"][metric]
    out: dict[str, float] = {}
    raw = [v[metric] for n, v in med.items() if n.startswith("raw-sql")]
    peers = [v[metric] for n, v in med.items() if not n.startswith(("pgqueue", "raw-sql"))]
    if raw:
        best = max(raw) if higher_is_better else min(raw)
        out["pgqueue / raw-sql ceiling"] = ours / best if best else float("nan")
    if peers:
        best = max(peers) if higher_is_better else min(peers)
        out["pgqueue / best peer"] = ours / best if best else float("nan")
    # Each other contender by name: raw-SQL variants, PgQueuer, procrastinate, and pgqueue's
    # own variants (e.g. pgqueue-baseline, another revision in the same run).
    for name, values in med.items():
        if name != "pgqueue" and values.get(metric):
            out[f"pgqueue / {name}"] = ours / values[metric]
    return out


# The per-job costs bench/_cost.py measures -> their column in the closing table, where
# they are compared with the cheapest raw-SQL variant's.
COSTS = {"WAL B/job": "WAL / raw", "worker CPU us/job": "worker CPU / raw", "server CPU us/job": "server CPU / raw"}


def summary(
    med: dict[str, dict[str, float]], metric: str = "jobs/s", same_batch: str | None = None
) -> dict[str, float]:
    """One row of a workload's closing ratio table: pgqueue's ``metric`` over the raw-SQL
    ceiling (and over ``same_batch``, a raw variant at comparable settings), PgQueuer,
    procrastinate and pgqueue-baseline where present; its WAL and CPU per job over raw's
    (and over the baseline's)."""
    if "pgqueue" not in med:
        return {}
    ours = med["pgqueue"]
    rat = ratios(med, metric)
    row: dict[str, float] = {}
    for label, key in (
        ("/ raw-sql", "pgqueue / raw-sql ceiling"),
        ("/ raw same batch", f"pgqueue / {same_batch}"),
        ("/ pgqueuer", "pgqueue / pgqueuer"),
        ("/ procrastinate", "pgqueue / procrastinate"),
        ("/ baseline", "pgqueue / pgqueue-baseline"),
    ):
        if key in rat:
            row[label] = rat[key]
    for cost, label in COSTS.items():
        raw = [v[cost] for n, v in med.items() if n.startswith("raw-sql") and v.get(cost, 0) > 0]
        if raw and cost in ours:
            row[label] = ours[cost] / min(raw)
    # Before/after: CPU per job moves far less with the machine's load than jobs/s does.
    base = med.get("pgqueue-baseline", {})
    for cost, label in (("WAL B/job", "WAL / baseline"), ("worker CPU us/job", "worker CPU / baseline")):
        if base.get(cost, 0) > 0 and cost in ours:
            row[label] = ours[cost] / base[cost]
    return row


def print_table(title: str, med: dict[str, dict[str, float]], rat: dict[str, float], first: str = "contender") -> None:
    table = Table(title=title, title_justify="left")
    table.add_column(first, no_wrap=True)
    metrics: list[str] = []
    for values in med.values():  # contenders may lack a metric (e.g. worker-side counters)
        metrics.extend(m for m in values if m not in metrics)
    for m in metrics:
        table.add_column(m, justify="right")
    for name, values in med.items():
        table.add_row(name, *(f"{values[m]:,.1f}" if m in values else "-" for m in metrics))
    tables.print(table)
    for label, value in rat.items():
        tables.print(f"{label}: [bold]{value:.2f}[/]")


def print_summary(title: str, rows: dict[str, dict[str, float]], first: str) -> None:
    """The closing table: one row per configuration or scenario; ratios, and differences
    in ms (signed) for latency."""
    columns: list[str] = []
    for values in rows.values():
        columns.extend(c for c in values if c not in columns)
    if not columns:
        return
    table = Table(title=title, title_justify="left")
    table.add_column(first, no_wrap=True)
    for c in columns:
        table.add_column(c, justify="right")
    for name, values in rows.items():
        table.add_row(name, *(_cell(values[c], c) if c in values else "-" for c in columns))
    tables.print(table)


def _cell(value: float, column: str) -> str:
    return f"{value:+.2f}" if column.endswith(" ms") else f"{value:.2f}"


def write_json(path: Path | None, payload: dict[str, Any]) -> None:
    if path is None:
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(payload, indent=2, default=str))
    console.print(f"wrote {path}")
