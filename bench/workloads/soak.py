"""soak: the steady workload for a long time, summarised per interval (a minute by default).

Per interval: completed jobs/s, the live relation's heap and index size and dead tuples
(the last statistics sample in it). Drift is (last interval - first interval) / first
interval throughput (target: within 10%). For pgqueue, the books must balance at the end:
jobs lost = enqueued (the producers' DONE counts) - finished (rows of ``pgqueue.jobs``
with ``finished_at``) - still live (``pgqueue.jobs_live``), which must be 0.
"""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

import psycopg

from bench._contenders import Contender
from bench._measure import vacuum_warnings
from bench._runner import interleaved, medians
from bench.workloads.steady import Steady, run_once

FINISHED_SQL = "SELECT count(*) FROM pgqueue.jobs WHERE finished_at IS NOT NULL"
LIVE_SQL = "SELECT count(*) FROM pgqueue.jobs_live"


def intervals(timeline: dict[str, Any], every: float, slack: float = 0.25) -> list[dict[str, float]]:
    """Throughput and the live relation's statistics per ``every`` seconds of the run
    (an interval ends at the depth sample within ``slack`` seconds of its boundary)."""
    t, completed, depth = timeline["t"], timeline["completed"], timeline["depth"]
    stats = timeline["stats"]
    out: list[dict[str, float]] = []
    if not t:
        return out
    start_i, bound = 0, every
    while start_i < len(t) - 1:
        end_i = start_i
        while end_i + 1 < len(t) and t[end_i + 1] <= bound + slack:
            end_i += 1
        if end_i == start_i:
            break
        span = t[end_i] - t[start_i]
        if span < every / 2 and out:
            break  # a sliver after the last full interval: too short to rate
        row: dict[str, float] = {
            "end s": round(t[end_i], 1),
            "jobs/s": (completed[end_i] - completed[start_i]) / span if span else 0.0,
            "depth max": float(max(depth[start_i : end_i + 1])),
        }
        last = [s for s in stats if s["t"] <= t[end_i] + 1e-6]
        if last:
            row.update({k: float(last[-1][k]) for k in ("table MB", "index MB", "dead tuples") if k in last[-1]})
        out.append(row)
        start_i, bound = end_i, bound + every
    return out


def run(dsn: str, contenders: list[Contender], cfg: Steady, *, every: float, repeat: int) -> dict[str, Any]:
    for c in contenders:
        c.setup(dsn)
    by_name = {c.name: c for c in contenders}
    per_interval: dict[str, list[list[dict[str, float]]]] = {n: [] for n in by_name}
    timelines: dict[str, list[dict[str, Any]]] = {n: [] for n in by_name}

    def one(name: str, _rep: int) -> dict[str, float]:
        metrics, timeline = run_once(dsn, by_name[name], cfg)
        rows = intervals(timeline, every, cfg.sample / 2)
        per_interval[name].append(rows)
        timelines[name].append(timeline)
        out: dict[str, float] = {k: metrics[k] for k in ("jobs/s", "depth max") if k in metrics}
        if rows:
            first, last = rows[0]["jobs/s"], rows[-1]["jobs/s"]
            out["drift %"] = 100 * (last - first) / first if first else 0.0
            for k in ("table MB", "index MB", "dead tuples"):
                if k in rows[0]:
                    out[f"{k} first"] = rows[0][k]
                    out[f"{k} max"] = max(r.get(k, 0.0) for r in rows)
        if name == "pgqueue":
            with psycopg.connect(dsn, autocommit=True) as conn:
                finished = _count(conn, FINISHED_SQL)
                live = _count(conn, LIVE_SQL)
            out["enqueued"] = metrics["enqueued"]
            out["jobs lost"] = metrics["enqueued"] - finished - live
        return out

    runs = interleaved(list(by_name), repeat, one)
    return {
        "workload": "soak",
        "params": {**asdict(cfg), "every": every, "repeat": repeat},
        "warnings": vacuum_warnings(dsn),
        "runs": runs,
        "medians": medians(runs),
        "intervals": per_interval,
        "timelines": timelines,
    }


def _count(conn: psycopg.Connection[Any], sql: str) -> float:
    row = conn.execute(sql).fetchone()
    return float(row[0]) if row else 0.0
