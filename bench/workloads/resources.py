"""Resource use: ``memory`` (enqueue_many's peak memory against its size; a worker's RSS at
concurrency 100 under load) and ``idle`` (what an idle worker costs the database and CPU).

These are not races: there is no peer to interleave with, and the figures (KiB, queries,
CPU seconds) depend little on how busy the machine is.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import psycopg

from bench._contenders import PGQUEUE
from bench._runner import REPO, WorkerGroup, wait_drained, workers


def _rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def _cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime + stime


def bulk_peak(dsn: str, jobs: int) -> dict[str, float]:
    out = subprocess.run(
        [sys.executable, "-m", "bench.workers.bulk_enqueue", "--dsn", dsn, "--jobs", str(jobs)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=1800,
        check=True,
    ).stdout
    _, base, peak, took = next(line for line in out.splitlines() if line.startswith("RSS ")).split()
    return {"jobs": jobs, "base MiB": int(base) / 1024, "peak MiB": int(peak) / 1024, "jobs/s": jobs / float(took)}


def memory(dsn: str, *, bulk_sizes: list[int], drain_jobs: int, concurrency: int) -> dict[str, Any]:
    PGQUEUE.setup(dsn)
    bulk = []
    for n in bulk_sizes:
        with psycopg.connect(dsn, autocommit=True) as conn:
            PGQUEUE.reset(conn)
        bulk.append(bulk_peak(dsn, n))
    growth = bulk[-1]["peak MiB"] - bulk[0]["peak MiB"]

    samples: list[int] = []
    with psycopg.connect(dsn, autocommit=True) as conn:
        PGQUEUE.reset(conn)
        group = WorkerGroup(PGQUEUE, dsn, processes=1, concurrency=concurrency)
        with workers(group):
            pid = group._procs[0].pid
            idle_rss = _rss_kib(pid)
            stop = threading.Event()

            def sample() -> None:
                while not stop.is_set():
                    samples.append(_rss_kib(pid))
                    stop.wait(0.1)

            sampler = threading.Thread(target=sample, daemon=True)
            sampler.start()
            PGQUEUE.preload(conn, drain_jobs)
            wait_drained(conn, PGQUEUE, timeout=600)
            stop.set()
            sampler.join()
    return {
        "workload": "memory",
        "params": {"bulk_sizes": bulk_sizes, "drain_jobs": drain_jobs, "concurrency": concurrency},
        "enqueue_many": bulk,
        "enqueue_many peak growth MiB": growth,
        "worker": {"idle RSS MiB": idle_rss / 1024, "max RSS MiB under load": max(samples, default=0) / 1024},
    }


def idle(dsn: str, *, seconds: float, warmup: float) -> dict[str, Any]:
    """One idle pgqueue worker alone on the database: transactions per second it makes
    (pg_stat_database, which backends flush about once a second) and its CPU use."""
    PGQUEUE.setup(dsn)
    with psycopg.connect(dsn, autocommit=True) as conn:
        PGQUEUE.reset(conn)
        group = WorkerGroup(PGQUEUE, dsn, processes=1, concurrency=10)
        query = "SELECT xact_commit + xact_rollback FROM pg_stat_database WHERE datname = current_database()"
        with workers(group):
            pid = group._procs[0].pid
            time.sleep(warmup)  # start-up work (migrations check, partitions) is not idle cost
            conn.execute("SELECT pg_stat_clear_snapshot()")
            row = conn.execute(query).fetchone()
            xacts0, cpu0, t0 = int(row[0]) if row else 0, _cpu_seconds(pid), time.monotonic()
            time.sleep(seconds)
            conn.execute("SELECT pg_stat_clear_snapshot()")
            row = conn.execute(query).fetchone()
            xacts1, cpu1, t1 = int(row[0]) if row else 0, _cpu_seconds(pid), time.monotonic()
    elapsed = t1 - t0
    own = 3  # this connection's own statements in between (clear, read, clear)
    return {
        "workload": "idle",
        "params": {"seconds": seconds, "warmup": warmup},
        "queries/s": max(xacts1 - xacts0 - own, 0) / elapsed,
        "CPU %": (cpu1 - cpu0) / elapsed * 100,
        "seconds": elapsed,
    }
