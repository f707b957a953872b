"""enqueue: single enqueues in the caller's transaction from 1 and 8 producer processes,
against a plain single-row INSERT into a similar table; and bulk ``enqueue_many`` (COPY).

Producers of one measurement start together (aligned on a wall-clock instant) and each
runs for ``duration`` seconds; the figure is the sum of their commits per second.
"""

from __future__ import annotations

import subprocess
import sys
import time
from typing import Any

import psycopg

from bench._contenders import PGQUEUE, Contender
from bench._runner import REPO, interleaved, medians
from bench.workers.producer import PLAIN_DDL


def producers(dsn: str, name: str, count: int, duration: float, contender: Contender | None = None) -> float:
    start_at = time.time() + 1.0
    procs = [
        subprocess.Popen(
            [
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
            ],
            cwd=contender.process_cwd(REPO) if contender else REPO,
            stdout=subprocess.PIPE,
            text=True,
        )
        for _ in range(count)
    ]
    total = 0.0
    for proc in procs:
        out, _ = proc.communicate(timeout=duration + 120)
        done = [line for line in out.splitlines() if line.startswith("DONE ")]
        if proc.returncode != 0 or not done:
            raise RuntimeError(f"producer for {name} failed (exit {proc.returncode})")
        _, n, elapsed = done[-1].split()
        total += int(n) / float(elapsed)
    return total


def run(
    dsn: str, contenders: list[Contender], *, producer_counts: list[int], duration: float, bulk_jobs: int, repeat: int
) -> dict[str, Any]:
    for c in contenders:
        c.setup(dsn)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(PLAIN_DDL)
    names = ["plain-insert", *(c.name for c in contenders)]
    by_name = {c.name: c for c in contenders}
    results: dict[str, Any] = {}
    for count in producer_counts:

        def one(name: str, _rep: int, count: int = count) -> dict[str, float]:
            with psycopg.connect(dsn, autocommit=True) as conn:
                if name == "plain-insert":
                    conn.execute("TRUNCATE bench_raw.plain")
                else:
                    by_name[name].reset(conn)
            return {"jobs/s": producers(dsn, name, count, duration, by_name.get(name))}

        runs = interleaved(names, repeat, one)
        med = medians(runs)
        base = med["plain-insert"]["jobs/s"]
        results[f"{count} producers"] = {
            "runs": runs,
            "medians": med,
            "ratios": {f"{n} / plain insert": v["jobs/s"] / base for n, v in med.items() if n != "plain-insert"},
        }
    # Bulk: enqueue_many through COPY (pgqueue only: it is pgqueue's API).
    bulk: list[float] = []
    for _ in range(repeat):
        with psycopg.connect(dsn, autocommit=True) as conn:
            PGQUEUE.reset(conn)
            t = time.perf_counter()
            PGQUEUE.preload(conn, bulk_jobs)
            bulk.append(bulk_jobs / (time.perf_counter() - t))
    bulk.sort()
    results["enqueue_many"] = {"jobs": bulk_jobs, "runs": bulk, "median jobs/s": bulk[len(bulk) // 2]}
    return {
        "workload": "enqueue",
        "params": {"producers": producer_counts, "duration": duration, "bulk_jobs": bulk_jobs, "repeat": repeat},
        "results": results,
    }
