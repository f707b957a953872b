"""xmin: the steady workload with and without a held snapshot, interleaved.

"Held" runs keep another connection in an idle ``REPEATABLE READ`` transaction (``BEGIN``;
``SELECT 1``; then nothing) for the whole run: its xmin stops VACUUM from removing any row
version that dies meanwhile, so every finished job leaves a dead tuple (and dead index
entries) behind in the live relation. Reported: throughput held / baseline (target >= 0.5),
and the live relation's dead tuples and size over time (``pg_stat_user_tables``, whose
counts lag by about a second). By default the producers saturate the workers, holding back
at a queue depth, so a slowdown shows as lower throughput rather than a growing backlog.
"""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from bench._contenders import Contender
from bench._measure import vacuum_warnings
from bench._runner import interleaved, medians
from bench.workloads.steady import Steady, run_once

MODES = ("baseline", "xmin held")


def label(name: str, mode: str) -> str:
    return name if mode == "baseline" else f"{name} ({mode})"


def run(dsn: str, contenders: list[Contender], cfg: Steady, *, repeat: int) -> dict[str, Any]:
    for c in contenders:
        c.setup(dsn)
    plan = {label(c.name, m): (c, m) for c in contenders for m in MODES}
    timelines: dict[str, list[dict[str, Any]]] = {lab: [] for lab in plan}

    def one(lab: str, _rep: int) -> dict[str, float]:
        contender, mode = plan[lab]
        metrics, timeline = run_once(dsn, contender, cfg, hold_xmin=mode != "baseline")
        timelines[lab].append(timeline)
        return metrics

    runs = interleaved(list(plan), repeat, one)
    med = medians(runs)
    rat = {}
    for c in contenders:
        base, held = med[label(c.name, "baseline")]["jobs/s"], med[label(c.name, "xmin held")]["jobs/s"]
        rat[f"{c.name}: held / baseline"] = held / base if base else float("nan")
    return {
        "workload": "xmin",
        "params": {**asdict(cfg), "repeat": repeat},
        "warnings": vacuum_warnings(dsn),
        "runs": runs,
        "medians": med,
        "ratios": rat,
        "timelines": timelines,
    }
