"""contention: many worker processes draining one queue, then the same jobs spread over
many queues.

Like ``drain`` (workers start idle, N no-op jobs commit at once, the clock runs until none
is left), with many processes, so claims collide. Scenarios:

* ``one queue``: every process claims from the same queue (all contenders);
* ``queue per process``: N jobs spread round-robin over Q queues, process i serves queue
  i mod Q only (the partitioned ideal: nothing to skip);
* ``all queues``: the same spread, every process serving all Q queues (``--queues a,b,c``).

The multi-queue scenarios need a contender that can enqueue onto named queues and whose
worker takes ``--queues``: pgqueue here; others are skipped. SKIP LOCKED waste is the share
of claims that came back empty (pgqueue workers print ``STATS claims=.. empty_claims=..``
at exit; it includes each process's idle claims at start and end); lock waits are the
backends of this database waiting on a heavyweight lock (``wait_event_type = 'Lock'``),
and on LWLocks, sampled from ``pg_stat_activity`` every 100 ms during the drain.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from typing import Any

from bench._contenders import Conn, Contender
from bench._cost import CostMeter, warnings_for
from bench._db import connect
from bench._measure import Sampler, activity_probe
from bench._runner import WorkerGroup, interleaved, medians, ratios, summary, wait_drained, workers

SCENARIOS = ("one queue", "queue per process", "all queues")


def _pgqueue_preload_queues(conn: Conn, n: int, queues: list[str]) -> None:
    from bench.workers.pgqueue_worker import build_app

    app = build_app("postgresql://unused")
    bound = [app.tasks["bench.noop"].options(queue=q) for q in queues]

    def specs() -> Iterator[Any]:
        for i in range(n):
            yield bound[i % len(bound)].job()

    with conn.transaction():
        app.enqueue_many(conn, specs())


# Contenders that can spread jobs over named queues: name -> preload(conn, n, queues).
MULTI_QUEUE: dict[str, Callable[[Conn, int, list[str]], None]] = {"pgqueue": _pgqueue_preload_queues}


def label(name: str, scenario: str) -> str:
    return name if scenario == "one queue" else f"{name} ({scenario})"


def parse_stats(lines: list[str]) -> dict[str, int]:
    """Sum ``claims=.. empty_claims=.. completed=..`` over the processes' STATS lines."""
    total: dict[str, int] = {}
    for line in lines:
        for part in line.split():
            key, _, value = part.partition("=")
            if value.isdigit():
                total[key] = total.get(key, 0) + int(value)
    return total


def run(
    dsn: str,
    contenders: list[Contender],
    *,
    jobs: int,
    processes: int,
    concurrency: int,
    queues: int,
    scenarios: tuple[str, ...] = SCENARIOS,
    repeat: int,
    timeout: float = 600,
) -> dict[str, Any]:
    for c in contenders:
        c.setup(dsn)
    names = [f"q{i}" for i in range(queues)]
    plan: dict[str, tuple[Contender, str]] = {}
    skipped: dict[str, list[str]] = {}
    for scenario in scenarios:
        for c in contenders:
            if scenario == "one queue" or c.name in MULTI_QUEUE:
                plan[label(c.name, scenario)] = (c, scenario)
            else:
                skipped.setdefault(scenario, []).append(c.name)

    def groups(contender: Contender, scenario: str) -> list[WorkerGroup]:
        def group(n: int, extra: tuple[str, ...] = ()) -> WorkerGroup:
            return WorkerGroup(contender, dsn, processes=n, concurrency=concurrency, extra=extra)

        if scenario == "queue per process":
            return [group(1, ("--queues", names[i % queues])) for i in range(processes)]
        if scenario == "all queues":
            return [group(processes, ("--queues", ",".join(names)))]
        return [group(processes)]

    sources: list[str] = []  # how each run's WAL was measured

    def one(lab: str, _rep: int) -> dict[str, float]:
        contender, scenario = plan[lab]
        with connect(dsn) as conn:
            contender.reset(conn)
            started = groups(contender, scenario)
            with ExitStack() as stack:
                for g in started:
                    stack.enter_context(workers(g))
                sampler = Sampler(dsn, activity_probe, 0.1).start()
                meter = CostMeter(dsn, [pid for g in started for pid in g.pids()]).start()
                try:
                    t = time.perf_counter()
                    if scenario == "one queue":
                        contender.preload(conn, jobs)
                    else:
                        MULTI_QUEUE[contender.name](conn, jobs, names)
                    committed = time.perf_counter()
                    meter.mark()
                    done = wait_drained(conn, contender, timeout)
                    cost = meter.stop(jobs)
                finally:
                    samples = sampler.stop()
            # Workers have exited here: their STATS lines are in.
            sources.append(meter.wal_source)
            contender.reset(conn)  # no dead rows left for autovacuum in the next run's window
        stats = parse_stats([s for g in started for s in g.stats])
        return {**_metrics(jobs, t, committed, done, samples, stats), **cost}

    runs = interleaved(list(plan), repeat, one)
    med = medians(runs)
    per_scenario: dict[str, Any] = {}
    rows: dict[str, dict[str, float]] = {}
    for scenario in scenarios:
        m = {c.name: med[label(c.name, scenario)] for c in contenders if label(c.name, scenario) in med}
        if m:
            per_scenario[scenario] = {"medians": m, "ratios": ratios(m, "jobs/s")}
            if row := summary(m):
                rows[scenario] = row
    return {
        "workload": "contention",
        "params": {
            "jobs": jobs,
            "processes": processes,
            "concurrency": concurrency,
            "queues": queues,
            "repeat": repeat,
        },
        "runs": runs,
        "scenarios": per_scenario,
        "skipped": skipped,
        "summary": rows,
        "wal_source": sorted(set(sources)),
        "warnings": warnings_for(sources),
    }


def _metrics(
    jobs: int, start: float, committed: float, done: float, samples: list[tuple[float, Any]], stats: dict[str, int]
) -> dict[str, float]:
    waits = [s[0] for _, s in samples] or [0]
    lw = [s[1] for _, s in samples] or [0]
    out = {
        "jobs/s": jobs / (done - committed),
        "drain s": done - committed,
        "enqueue s": committed - start,
        "lock waits avg": statistics.fmean(waits),
        "lock waits max": float(max(waits)),
        "lwlock waits avg": statistics.fmean(lw),
    }
    if stats.get("claims"):
        out["claims"] = float(stats["claims"])
        out["empty claim %"] = 100 * stats.get("empty_claims", 0) / stats["claims"]
    return out
