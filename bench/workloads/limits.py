"""limits: what flow control costs, side by side in one run.

Every scenario is a drain (N no-op jobs committed at once onto idle pgqueue workers; the
clock runs from the commit until none is unfinished, as in ``drain``) on a queue of its
own, configured before each run (every other bench queue's controls removed):

* ``unlimited``: the ``default`` queue, nothing controlled anywhere: the plain claim;
* ``unlimited, another queue limited``: the same, while a queue the workers do not serve
  has a limit (the plain claim steps over controlled queues);
* each baseline checkout (``pgqueue-baseline``, ``pgqueue@NAME``): the same jobs run by
  another revision's workers (e.g. before flow control existed);
* ``global limit ≥ workers``: a queue limit equal to processes x concurrency (never binds);
* ``key limit 1`` and ``key limit 2``: jobs spread round robin over ``keys`` concurrency
  keys, at most 1 (2) running per key;
* ``binding limit``: a queue limit well below the workers' concurrency;
* ``rate``: at most ``rate_limit`` starts per ``rate_period`` seconds: the starts per
  second achieved (from the jobs' ``started_at``, after the first window) against the
  limit, and the most starts in any window (must not exceed the limit).

Every run samples the queue's running jobs (``running max``) and measures WAL and CPU per
job (``bench/_cost.py``). The unlimited queue and each baseline also run ``steady``
(producers flat out, holding back at ``max_depth`` waiting, for ``steady_duration``).
Ratios are over ``unlimited`` (and ``unlimited`` over each baseline), from medians of
interleaved repetitions.
"""

from __future__ import annotations

import dataclasses
import math
import time
from dataclasses import dataclass, field
from typing import Any

from bench._contenders import PGQUEUE, Conn, Contender, _pgqueue_app
from bench._cost import CostMeter, warnings_for
from bench._db import connect
from bench._measure import Sampler
from bench._runner import WorkerGroup, interleaved, medians, wait_drained, workers
from bench.workloads import steady
from bench.workloads.contention import parse_stats
from pgqueue import ops

SCHEMA = "pgqueue"
# The queues this workload configures; each limited scenario has its own.
QUEUES = ("default", "lim-global", "lim-key1", "lim-key2", "lim-binding", "lim-rate", "lim-other")
# Running jobs: in all, and the most of any one concurrency key.
RUNNING_SQL = """
SELECT (SELECT count(*) FROM pgqueue.jobs_live WHERE state = 'running'),
       (SELECT coalesce(max(n), 0) FROM (
            SELECT count(*) AS n FROM pgqueue.jobs_live
            WHERE state = 'running' AND concurrency_key IS NOT NULL
            GROUP BY queue, concurrency_key) AS per_key)
"""
COST_NAMES = {"WAL B/job": "WAL", "worker CPU us/job": "worker CPU", "server CPU us/job": "server CPU"}
UNLIMITED = "unlimited"


@dataclass(frozen=True)
class Scenario:
    label: str
    contender: Contender = PGQUEUE
    queue: str = "default"
    keys: int = 0  # jobs spread over this many concurrency keys (0: no key)
    limits: dict[str, Any] = field(default_factory=dict)  # ops.set_queue_limits keywords
    other: str | None = None  # another queue, not served, limited during the run
    limit: float | None = None  # the queue's bound: running max, or starts in any window
    key_limit: float | None = None  # the bound on one key's running jobs


@dataclass(frozen=True)
class Params:
    jobs: int = 10_000
    processes: int = 1
    concurrency: int = 100
    keys: int = 1_000
    binding: int = 10
    rate_limit: int = 1_000
    rate_period: float = 1.0
    steady_duration: float = 10.0
    steady_producers: int = 2
    max_depth: int = 10_000
    timeout: float = 600.0


def scenarios(p: Params, baselines: list[Contender]) -> list[Scenario]:
    slots = p.processes * p.concurrency
    return [
        Scenario(UNLIMITED),
        Scenario("unlimited, another queue limited", other="lim-other"),
        *(Scenario(c.name, contender=c) for c in baselines),
        Scenario(f"global limit {slots} (= workers)", queue="lim-global", limits={"concurrency": slots}, limit=slots),
        Scenario(
            f"key limit 1, {p.keys:,} keys", queue="lim-key1", keys=p.keys, limits={"key_concurrency": 1}, key_limit=1
        ),
        Scenario(
            f"key limit 2, {p.keys:,} keys",
            queue="lim-key2",
            keys=p.keys,
            limits={"key_concurrency": 2},
            key_limit=2,
        ),
        Scenario(f"binding limit {p.binding}", queue="lim-binding", limits={"concurrency": p.binding}, limit=p.binding),
        Scenario(
            f"rate {p.rate_limit:,}/{p.rate_period:g}s",
            queue="lim-rate",
            limits={"rate": (p.rate_limit, p.rate_period)},
            limit=p.rate_limit,
        ),
    ]


NO_LIMITS: dict[str, Any] = {"concurrency": None, "rate": None, "key_concurrency": None, "key_rate": None}


def configure(conn: Conn, sc: Scenario) -> None:
    """Remove every bench queue's controls, then set this scenario's (and its other queue's)."""
    for q in QUEUES:
        ops.resume_queue(conn, SCHEMA, q, create=True)
        ops.set_queue_limits(conn, SCHEMA, q, **NO_LIMITS, key_fifo=False, create=True)
    if sc.limits:
        ops.set_queue_limits(conn, SCHEMA, sc.queue, **sc.limits)
    if sc.other:
        ops.set_queue_limits(conn, SCHEMA, sc.other, concurrency=10)
    conn.execute("TRUNCATE pgqueue.rate_starts")


def preload(conn: Conn, sc: Scenario, n: int) -> None:
    """N no-op jobs into the scenario's queue in one transaction (COPY), round robin over
    its keys; the baselines' jobs are written by this checkout too (same schema)."""
    app = _pgqueue_app()
    noop = app.tasks["bench.noop"].options(queue=sc.queue)
    with conn.transaction():
        if sc.keys:
            keyed = [noop.options(concurrency_key=f"key-{i}") for i in range(sc.keys)]
            app.enqueue_many(conn, (keyed[i % sc.keys].job() for i in range(n)))
        else:
            app.enqueue_many(conn, (noop.job() for _ in range(n)))


def running_probe(conn: Conn) -> tuple[int, int]:
    row = conn.execute(RUNNING_SQL).fetchone()
    return (int(row[0]), int(row[1])) if row else (0, 0)


def rate_figures(conn: Conn, queue: str, limit: int, period: float) -> dict[str, float]:
    """The rate the queue's finished jobs started at, from their ``started_at`` (the
    database clock): see :func:`rate_window`."""
    rows = conn.execute(
        "SELECT extract(epoch FROM started_at)::float8 FROM pgqueue.jobs"
        " WHERE queue = %s AND started_at IS NOT NULL ORDER BY 1",
        [queue],
    ).fetchall()
    return rate_window([r[0] for r in rows], limit, period)


def rate_window(starts: list[float], limit: int, period: float) -> dict[str, float]:
    """Starts per second after the first window's burst, over the limit's rate, and the
    most starts in any window ``[t, t + period)`` (sorted start times, in seconds)."""
    most, j = 0, 0
    for i, t in enumerate(starts):  # two pointers over the sorted starts
        while starts[j] <= t - period:
            j += 1
        most = max(most, i - j + 1)
    # After the first burst, the window admits starts as old ones leave it: the last
    # n - limit starts took from the limit-th start to the last one.
    span = starts[-1] - starts[limit - 1] if len(starts) > limit else 0.0
    per_s = (len(starts) - limit) / span if span > 0 else math.nan
    return {"starts/s": per_s, "starts/s / limit": per_s * period / limit, "most starts in a window": float(most)}


def drain_once(dsn: str, sc: Scenario, p: Params, sources: list[str]) -> dict[str, float]:
    with connect(dsn) as conn:
        PGQUEUE.reset(conn)
        configure(conn, sc)
        group = WorkerGroup(
            sc.contender, dsn, processes=p.processes, concurrency=p.concurrency, extra=("--queues", sc.queue)
        )
        with workers(group):
            running = Sampler(dsn, running_probe, 0.02).start()
            meter = CostMeter(dsn, group.pids()).start()
            start = time.perf_counter()
            preload(conn, sc, p.jobs)
            committed = time.perf_counter()
            meter.mark()
            try:
                done = wait_drained(conn, sc.contender, p.timeout)
            finally:
                cost = meter.stop(p.jobs)
                samples = running.stop()
        sources.append(meter.wal_source)
        stats = parse_stats(group.stats)  # complete once the workers have stopped
        out = {
            "jobs/s": p.jobs / (done - committed),
            "enqueue s": committed - start,
            "drain s": done - committed,
            "running max": float(max((n for _, (n, _k) in samples), default=0)),
            "running per key max": float(max((k for _, (_n, k) in samples), default=0)),
            **cost,
        }
        if stats.get("claims"):  # how many claims the workers made, and how many found nothing
            out["claims per 100 jobs"] = 100 * stats["claims"] / p.jobs
            out["empty claim %"] = 100 * stats.get("empty_claims", 0) / stats["claims"]
        rate = sc.limits.get("rate")
        if rate:
            out.update(rate_figures(conn, sc.queue, rate[0], rate[1]))
        PGQUEUE.reset(conn)  # no dead rows left for autovacuum in the next run's window
    return out


def steady_once(dsn: str, sc: Scenario, p: Params) -> dict[str, float]:
    with connect(dsn) as conn:
        configure(conn, sc)
    cfg = steady.Steady(
        producers=p.steady_producers,
        rate=0.0,
        max_depth=p.max_depth,
        workers=p.processes,
        concurrency=p.concurrency,
        duration=p.steady_duration,
        latency=False,
    )
    metrics, _ = steady.run_once(dsn, sc.contender, cfg)
    with connect(dsn) as conn:
        sc.contender.reset(conn)
    return metrics


def run(dsn: str, baselines: list[Contender], p: Params, *, repeat: int, steady_runs: bool = True) -> dict[str, Any]:
    PGQUEUE.setup(dsn)
    plan: dict[str, tuple[str, Scenario]] = {}
    for sc in scenarios(p, baselines):
        plan[f"drain: {sc.label}"] = ("drain", sc)
    if steady_runs:
        for sc in scenarios(p, baselines):
            if sc.label == UNLIMITED or sc.contender.checkout:
                plan[f"steady: {sc.label}"] = ("steady", sc)
    sources: list[str] = []

    def one(lab: str, _rep: int) -> dict[str, float]:
        kind, sc = plan[lab]
        return drain_once(dsn, sc, p, sources) if kind == "drain" else steady_once(dsn, sc, p)

    runs = interleaved(list(plan), repeat, one)
    med = medians(runs)
    with connect(dsn) as conn:  # leave the database as found: nothing controlled
        configure(conn, Scenario("reset"))
    return {
        "workload": "limits",
        "params": {**dataclasses.asdict(p), "repeat": repeat},
        "wal_source": sorted(set(sources)),
        "warnings": warnings_for(sources),
        "runs": runs,
        "medians": med,
        "summary": summary(med, plan),
    }


def summary(med: dict[str, dict[str, float]], plan: dict[str, tuple[str, Scenario]]) -> dict[str, dict[str, float]]:
    """The closing table, one row per comparison: ``<run> / unlimited`` for every limited
    run, ``unlimited / <baseline>`` for every other revision: jobs/s and cost per job as
    ratios, and how close each limit came to its bound (``held / limit`` must be <= 1)."""
    rows: dict[str, dict[str, float]] = {}
    for lab, (kind, sc) in plan.items():
        ours = med.get(lab)
        if not ours or sc.contender.checkout:  # a baseline's figures are in the unlimited row
            continue
        if sc.label == UNLIMITED:
            refs = [(o.label, med[o_lab]) for o_lab, (k, o) in plan.items() if k == kind and o.contender.checkout]
        else:
            refs = [(UNLIMITED, med[f"{kind}: {UNLIMITED}"])] if f"{kind}: {UNLIMITED}" in med else []
        for name, ref in refs:
            row = {"jobs/s ratio": ours["jobs/s"] / ref["jobs/s"] if ref.get("jobs/s") else math.nan}
            for cost, short in COST_NAMES.items():
                if ref.get(cost, 0) > 0 and not math.isnan(ours.get(cost, math.nan)):
                    row[f"{short} ratio"] = ours[cost] / ref[cost]
            if kind == "drain" and "rate" in sc.limits and sc.limit:
                row["held / limit"] = ours["most starts in a window"] / sc.limit
                row["starts/s / limit"] = ours["starts/s / limit"]
            elif kind == "drain" and sc.limit:
                row["held / limit"] = ours["running max"] / sc.limit
            elif kind == "drain" and sc.key_limit:
                row["held / limit"] = ours["running per key max"] / sc.key_limit
            rows[f"{lab} / {name}"] = row
    return rows
