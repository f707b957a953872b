"""enqueue: single enqueues in the caller's transaction from 1 and 8 producer processes,
against a plain single-row INSERT into a similar table; bulk enqueues of N jobs per call
against a plain ``INSERT ... SELECT FROM unnest(...)`` of the same rows; and one
``enqueue_many`` (COPY) of many jobs.

Producers of one measurement start together (aligned on a wall-clock instant) and each
runs for ``duration`` seconds; the figure is the sum of their commits per second.
"""

from __future__ import annotations

import functools
import math
import subprocess
import sys
import time
from typing import Any

from bench._contenders import PGQUEUE, Contender
from bench._db import connect
from bench._runner import REPO, console, interleaved, medians
from bench.workers.producer import PLAIN_DDL

PLAIN = "plain-insert"


def producers(
    dsn: str,
    name: str,
    count: int,
    duration: float,
    contender: Contender | None = None,
    batch: int = 1,
) -> dict[str, float]:
    """Run ``count`` producers together; their summed jobs/s and CPU per job (NaN for a
    baseline checkout whose producer does not report its CPU time)."""
    start_at = time.time() + 1.0
    cmd = [
        sys.executable,
        "-m",
        "bench.workers.producer",
        "--dsn",
        dsn,
        "--contender",
        contender.process_name() if contender else name,
        "--duration",
        str(duration),
        "--start-at",
        str(start_at),
    ]
    if batch > 1:
        cmd += ["--batch", str(batch)]
    cwd = contender.process_cwd(REPO) if contender else REPO
    procs = [subprocess.Popen(cmd, cwd=cwd, stdout=subprocess.PIPE, text=True) for _ in range(count)]
    rate, jobs, cpu = 0.0, 0, 0.0
    for proc in procs:
        out, _ = proc.communicate(timeout=duration + 120)
        done = [line for line in out.splitlines() if line.startswith("DONE ")]
        if proc.returncode != 0 or not done:
            raise RuntimeError(f"producer for {name} failed (exit {proc.returncode})")
        n, elapsed, *rest = done[-1].split()[1:]
        rate += int(n) / float(elapsed)
        jobs += int(n)
        cpu += float(rest[0]) if rest else math.nan
    return {"jobs/s": rate, "producer CPU us/job": cpu * 1e6 / jobs if jobs else math.nan}


@functools.cache
def _takes_batch(cwd: str) -> bool:
    """Whether that checkout's producer has ``--batch`` (a baseline revision may predate it)."""
    out = subprocess.run(
        [sys.executable, "-m", "bench.workers.producer", "--help"], cwd=cwd, capture_output=True, text=True, check=False
    )
    return "--batch" in out.stdout


def _section(
    dsn: str, names: list[str], by_name: dict[str, Contender], count: int, duration: float, batch: int, repeat: int
) -> dict[str, Any]:
    """One table: every contender and the plain insert, interleaved; ratios to the plain insert."""

    def one(name: str, _rep: int) -> dict[str, float]:
        with connect(dsn) as conn:
            if name == PLAIN:
                conn.execute("TRUNCATE bench_raw.plain")
            else:
                by_name[name].reset(conn)
        return producers(dsn, name, count, duration, by_name.get(name), batch)

    runs = interleaved(names, repeat, one)
    med = medians(runs)
    base = med[PLAIN]["jobs/s"]
    return {
        "runs": runs,
        "medians": med,
        "ratios": {f"{n} / plain insert": v["jobs/s"] / base for n, v in med.items() if n != PLAIN},
    }


def run(
    dsn: str,
    contenders: list[Contender],
    *,
    producer_counts: list[int],
    duration: float,
    bulk_jobs: int,
    repeat: int,
    bulk_batch: int = 1_000,
    bulk_producers: list[int] | None = None,
) -> dict[str, Any]:
    for c in contenders:
        c.setup(dsn)
    with connect(dsn) as conn:
        conn.execute(PLAIN_DDL)
    names = [PLAIN, *(c.name for c in contenders)]
    by_name = {c.name: c for c in contenders}
    results: dict[str, Any] = {}
    rows: dict[str, dict[str, float]] = {}
    for count in producer_counts:
        label = f"{count} producers"
        results[label] = _section(dsn, names, by_name, count, duration, 1, repeat)
        rows[f"single, {label}"] = _summary(results[label]["medians"])
    # Bulk: N jobs per call and transaction, against INSERT ... SELECT FROM unnest of N rows.
    bulk_names = [PLAIN]
    for c in contenders:
        if c.checkout is None or _takes_batch(str(c.process_cwd(REPO))):
            bulk_names.append(c.name)
        else:
            console.print(f"[yellow]bulk: skipping {c.name}: its checkout's producer has no --batch[/]")
    for count in bulk_producers or [1]:
        label = f"bulk {bulk_batch:,} per call, {count} producers"
        results[label] = _section(dsn, bulk_names, by_name, count, duration, bulk_batch, repeat)
        rows[f"{label} (plain: INSERT ... unnest)"] = _summary(results[label]["medians"])
    # One enqueue_many (COPY) of many jobs in one transaction (pgqueue only: it is pgqueue's API).
    bulk: list[float] = []
    for _ in range(repeat):
        with connect(dsn) as conn:
            PGQUEUE.reset(conn)
            t = time.perf_counter()
            PGQUEUE.preload(conn, bulk_jobs)
            bulk.append(bulk_jobs / (time.perf_counter() - t))
    bulk.sort()
    results["enqueue_many"] = {"jobs": bulk_jobs, "runs": bulk, "median jobs/s": bulk[len(bulk) // 2]}
    return {
        "workload": "enqueue",
        "params": {
            "producers": producer_counts,
            "duration": duration,
            "bulk_batch": bulk_batch,
            "bulk_producers": bulk_producers or [1],
            "bulk_jobs": bulk_jobs,
            "repeat": repeat,
        },
        "results": results,
        "summary": rows,
    }


def _summary(med: dict[str, dict[str, float]]) -> dict[str, float]:
    """pgqueue's jobs/s over the plain insert's, PgQueuer's and the baseline's, where present."""
    if "pgqueue" not in med:
        return {}
    ours = med["pgqueue"]["jobs/s"]
    row = {"/ plain insert": ours / med[PLAIN]["jobs/s"]}
    cpu = med["pgqueue"].get("producer CPU us/job", math.nan)
    if not math.isnan(cpu) and med[PLAIN].get("producer CPU us/job"):
        row["producer CPU / plain"] = cpu / med[PLAIN]["producer CPU us/job"]
    for name in ("pgqueuer", "procrastinate", "pgqueue-baseline"):
        if med.get(name, {}).get("jobs/s"):
            row[f"/ {name.removeprefix('pgqueue-')}"] = ours / med[name]["jobs/s"]
    return row
