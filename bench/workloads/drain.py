"""drain: N pre-loaded no-op jobs, W worker processes x C concurrency, time to empty.

Workers start first and report ready; the N jobs are then committed in one transaction
(COPY), and the clock runs from that commit until no unfinished job is left.
"""

from __future__ import annotations

import time
from typing import Any

import psycopg

from bench._contenders import Contender
from bench._runner import WorkerGroup, interleaved, medians, ratios, wait_drained, workers


def run(
    dsn: str,
    contenders: list[Contender],
    *,
    jobs: int,
    processes: int,
    concurrency: int,
    repeat: int,
    timeout: float = 600,
) -> dict[str, Any]:
    for c in contenders:
        c.setup(dsn)

    by_name = {c.name: c for c in contenders}

    def one(name: str, _rep: int) -> dict[str, float]:
        contender = by_name[name]
        with psycopg.connect(dsn, autocommit=True) as conn:
            contender.reset(conn)
            group = WorkerGroup(contender, dsn, processes=processes, concurrency=concurrency)
            with workers(group):
                start = time.perf_counter()
                contender.preload(conn, jobs)
                committed = time.perf_counter()
                done = wait_drained(conn, contender, timeout)
        return {"jobs/s": jobs / (done - committed), "enqueue s": committed - start, "drain s": done - committed}

    runs = interleaved(list(by_name), repeat, one)
    med = medians(runs)
    return {
        "workload": "drain",
        "params": {"jobs": jobs, "processes": processes, "concurrency": concurrency, "repeat": repeat},
        "runs": runs,
        "medians": med,
        "ratios": ratios(med, "jobs/s"),
    }
