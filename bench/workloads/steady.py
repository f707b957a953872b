"""steady: producers and workers at once for a fixed time; end-to-end jobs/s, queue depth,
pickup latency.

P producer processes (``bench._feeder``) commit batches of jobs, paced to a rate (by
default 2 x 5,000 jobs/s: the 10k jobs/s target) or flat out, while W worker processes run
them. Every ``sample`` seconds the contender's unfinished count (its ``remaining_sql``) is
read: completed = enqueued (from the producers' commit times) - unfinished, so throughput
over time needs nothing from the workers. Workers run with ``--report`` (unless
``latency=False``) and the last job of every producer transaction is matched with its
handler start: pickup latency under load, including any time spent queued.

``run_once`` is also the body of the ``xmin`` and ``soak`` workloads.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass
from typing import Any

import psycopg

from bench._contenders import Contender
from bench._cost import CostMeter, warnings_for
from bench._db import connect
from bench._measure import (
    Producers,
    Sampler,
    count_probe,
    job_table,
    latencies_ms,
    latency_summary,
    table_probe,
    vacuum_warnings,
    wait_until,
)
from bench._runner import WorkerGroup, console, interleaved, medians, ratios, summary, workers


@dataclass(frozen=True)
class Steady:
    producers: int = 2
    rate: float = 5_000.0  # jobs/s per producer; 0: flat out
    batch: int = 100  # jobs per producer transaction
    bulk: bool = True  # all but one job of a batch through the contender's bulk path
    max_depth: int = 0  # producers hold back at this queue depth (0: never)
    workers: int = 1
    concurrency: int = 100
    duration: float = 20.0
    sample: float = 0.5  # seconds between depth samples
    stats_every: float = 1.0  # seconds between table statistics samples (0: none)
    latency: bool = True
    drain_timeout: float = 10.0  # after the producers stop; a backlog left is counted, not waited out
    cost: bool = True  # WAL and CPU per job (bench/_cost.py); xmin and soak runs leave it off

    def producer_args(self) -> tuple[str, ...]:
        args = ("--rate", str(self.rate), "--batch", str(self.batch), "--max-depth", str(self.max_depth))
        return (*args, "--bulk") if self.bulk else args


HOLD_XMIN = "BEGIN ISOLATION LEVEL REPEATABLE READ"


def run_once(
    dsn: str, contender: Contender, cfg: Steady, *, hold_xmin: bool = False
) -> tuple[dict[str, float], dict[str, Any]]:
    """One steady run: (summary metrics, timeline). With ``hold_xmin``, another connection
    keeps an idle REPEATABLE READ transaction (and so its snapshot's xmin) open throughout."""
    with connect(dsn) as conn:
        contender.reset(conn)
        table = job_table(conn, contender)
        holder = None
        if hold_xmin:
            holder = connect(dsn)
            holder.execute(HOLD_XMIN)
            holder.execute("SELECT 1")  # takes the snapshot: from here on, backend_xmin is set
        try:
            group = WorkerGroup(contender, dsn, processes=cfg.workers, concurrency=cfg.concurrency, report=cfg.latency)
            with workers(group):
                metrics, timeline = _during(dsn, conn, contender, cfg, group, table)
            if holder is not None:
                metrics["xmin held"] = float(_holds_xmin(conn, holder))
        finally:
            if holder is not None:
                holder.close()
    if cfg.latency:
        sent = timeline.pop("_sent")
        lat = latencies_ms(sent, group.reports)
        # Sampled jobs never seen to start (a backlog left when the drain gave up): the
        # percentiles leave out exactly the slowest, so a non-zero count discounts them.
        metrics.update({**latency_summary(lat), "latency missed": float(len(sent) - len(lat))})
    else:
        timeline.pop("_sent")
    return metrics, timeline


def _during(
    dsn: str, conn: psycopg.Connection[Any], contender: Contender, cfg: Steady, group: WorkerGroup, table: str | None
) -> tuple[dict[str, float], dict[str, Any]]:
    depth = Sampler(dsn, count_probe(contender.remaining_sql), cfg.sample).start()
    stats = Sampler(dsn, table_probe(table), cfg.stats_every).start() if table and cfg.stats_every else None
    producers = Producers(dsn, contender.name, cfg.producers, cfg.duration, extra=cfg.producer_args())
    # From just before the producers start until the backlog is drained: WAL and server CPU
    # cover enqueue and run (the producers' backends count), worker CPU the workers only.
    meter = CostMeter(dsn, group.pids()).start() if cfg.cost else None
    try:
        start_at = producers.start()
        enqueued = producers.wait()
        end_at = time.time()  # everything the producers committed is in; what is left?
        left = _count(conn, contender.remaining_sql)
        depth.samples.append((end_at, left))
    except BaseException:
        producers.kill()
        if meter is not None:
            meter.stop(0)
        depth.stop()
        if stats:
            stats.stop()
        raise
    # Let the backlog finish (the sampled keys' pickups are part of the run), within reason.
    t = time.perf_counter()
    drained = wait_until(lambda: _count(conn, contender.remaining_sql) == 0, cfg.drain_timeout, 0.05)
    drain_s = time.perf_counter() - t
    cost = meter.stop(enqueued) if meter is not None else {}
    if not drained:
        late = f"{contender.name}: backlog not drained {cfg.drain_timeout:.0f}s after the producers stopped"
        console.print(f"[yellow]{late}[/]")
    if cfg.latency:  # the last reports can trail the last completion by a moment
        wait_until(lambda: all(k in group.reports for k in producers.sent), 2.0, 0.02)
    depth_samples = depth.stop()
    stat_samples = stats.stop() if stats else []
    window = end_at - start_at
    metrics = {
        "enqueued": float(enqueued),
        "jobs/s": (enqueued - left) / window,
        "enqueued/s": enqueued / window,
        "depth max": float(max((d for at, d in depth_samples if at <= end_at), default=0)),
        "depth end": float(left),
        "drain s": drain_s,
        **cost,
    }
    if stat_samples:
        last = stat_samples[-1][1]
        metrics.update(
            {
                "dead tuples max": float(max(s.get("dead tuples", 0) for _, s in stat_samples)),
                "table MB end": last.get("table MB", 0.0),
                "index MB end": last.get("index MB", 0.0),
            }
        )
    timeline = _timeline(start_at, end_at, depth_samples, producers.commits, cfg.batch)
    timeline["table"] = table
    timeline["wal_source"] = meter.wal_source if meter is not None else None
    timeline["stats"] = [{"t": round(at - start_at, 3), **s} for at, s in stat_samples]
    timeline["_sent"] = producers.sent
    return metrics, timeline


def _count(conn: psycopg.Connection[Any], sql: str) -> int:
    row = conn.execute(sql).fetchone()
    return int(row[0]) if row else 0


def _holds_xmin(conn: psycopg.Connection[Any], holder: psycopg.Connection[Any]) -> bool:
    row = conn.execute(
        "SELECT backend_xmin IS NOT NULL FROM pg_stat_activity WHERE pid = %s", [holder.info.backend_pid]
    ).fetchone()
    return bool(row and row[0])


def _timeline(
    start_at: float, end_at: float, samples: list[tuple[float, Any]], commits: list[float], batch: int
) -> dict[str, Any]:
    """Per depth sample: seconds since the producers began, depth, enqueued, completed, and
    the completion rate since the previous sample."""
    out: dict[str, Any] = {"t": [], "depth": [], "enqueued": [], "completed": [], "jobs/s": []}
    i = 0
    prev: tuple[float, int] | None = None
    for at, d in samples:
        if at < start_at or at > end_at:
            continue
        while i < len(commits) and commits[i] <= at:
            i += 1
        enqueued = i * batch
        completed = max(enqueued - int(d), 0)
        rel = at - start_at
        rate = (completed - prev[1]) / (rel - prev[0]) if prev and rel > prev[0] else 0.0
        prev = (rel, completed)
        for k, v in (
            ("t", round(rel, 3)),
            ("depth", d),
            ("enqueued", enqueued),
            ("completed", completed),
            ("jobs/s", round(rate, 1)),
        ):
            out[k].append(v)
    return out


def run(dsn: str, contenders: list[Contender], cfg: Steady, *, repeat: int) -> dict[str, Any]:
    for c in contenders:
        c.setup(dsn)
    by_name = {c.name: c for c in contenders}
    timelines: dict[str, list[dict[str, Any]]] = {n: [] for n in by_name}

    def one(name: str, _rep: int) -> dict[str, float]:
        metrics, timeline = run_once(dsn, by_name[name], cfg)
        timelines[name].append(timeline)
        with connect(dsn) as conn:  # no dead rows left for autovacuum in the next run's window
            by_name[name].reset(conn)
        return metrics

    runs = interleaved(list(by_name), repeat, one)
    med = medians(runs)
    sources = [tl["wal_source"] for tls in timelines.values() for tl in tls if tl["wal_source"]]
    row = summary(med)
    return {
        "workload": "steady",
        "params": {**asdict(cfg), "repeat": repeat},
        "warnings": vacuum_warnings(dsn) + warnings_for(sources),
        "wal_source": sorted(set(sources)),
        "runs": runs,
        "medians": med,
        "ratios": ratios(med, "jobs/s"),
        "summary": {"steady": row} if row else {},
        "timelines": timelines,
    }
