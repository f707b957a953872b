"""drain: N pre-loaded no-op jobs, W worker processes x C concurrency, time to empty.

Workers start first and report ready; the N jobs are then committed in one transaction
(COPY), and the clock runs from that commit until no unfinished job is left.

Several configurations (processes x concurrency) run in one invocation, every one of them
interleaved with the others, so their ratios come from the same stretch of time. A
raw-SQL contender at comparable settings joins each configuration: the raw loop claiming
as many jobs per round trip as the configuration's concurrency (``raw-sql-b<C>``), beside
the batch-100 ceiling. Every run also measures WAL, worker CPU and server CPU per job
(``bench/_cost.py``).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from bench import _contenders
from bench._contenders import Contender
from bench._cost import CostMeter, warnings_for
from bench._db import connect
from bench._runner import WorkerGroup, interleaved, medians, ratios, summary, wait_drained, workers


@dataclass(frozen=True)
class Config:
    processes: int
    concurrency: int

    @property
    def label(self) -> str:
        return f"{self.processes} x {self.concurrency}"


def plan(
    contenders: list[Contender], configs: list[Config], raw_same_batch: bool = True
) -> dict[str, tuple[Contender, Config]]:
    """Every run of one repetition, by label: each contender in each configuration, plus
    ``raw-sql-b<C>`` where a raw contender was asked for and none claims C at a time."""
    out: dict[str, tuple[Contender, Config]] = {}
    has_raw = any(c.name.startswith("raw-sql") for c in contenders)
    for cfg in configs:
        chosen = list(contenders)
        same = f"raw-sql-b{cfg.concurrency}"
        if raw_same_batch and has_raw and all(c.name != same for c in chosen):
            chosen.append(_contenders.raw(cfg.concurrency))
        for c in chosen:
            out[label(c.name, cfg, len(configs))] = (c, cfg)
    return out


def label(name: str, cfg: Config, n_configs: int) -> str:
    return name if n_configs == 1 else f"{name} ({cfg.label})"


def run(
    dsn: str,
    contenders: list[Contender],
    *,
    jobs: int,
    configs: list[Config],
    repeat: int,
    raw_same_batch: bool = True,
    timeout: float = 600,
) -> dict[str, Any]:
    runs_plan = plan(contenders, configs, raw_same_batch)
    for c in {c.name: c for c, _ in runs_plan.values()}.values():
        c.setup(dsn)
    sources: list[str] = []  # how each run's WAL was measured

    def one(lab: str, _rep: int) -> dict[str, float]:
        contender, cfg = runs_plan[lab]
        with connect(dsn) as conn:
            contender.reset(conn)
            group = WorkerGroup(contender, dsn, processes=cfg.processes, concurrency=cfg.concurrency)
            with workers(group):
                meter = CostMeter(dsn, group.pids()).start()
                start = time.perf_counter()
                contender.preload(conn, jobs)
                committed = time.perf_counter()
                meter.mark()
                done = wait_drained(conn, contender, timeout)
                cost = meter.stop(jobs)
            sources.append(meter.wal_source)
            # Leave no dead rows behind for autovacuum to clear in the next contender's window.
            contender.reset(conn)
        return {
            "jobs/s": jobs / (done - committed),
            "enqueue s": committed - start,
            "drain s": done - committed,
            **cost,
        }

    runs = interleaved(list(runs_plan), repeat, one)
    med = medians(runs)
    per_config: dict[str, Any] = {}
    rows: dict[str, dict[str, float]] = {}
    for cfg in configs:
        m = {c.name: med[lab] for lab, (c, k) in runs_plan.items() if k == cfg}
        per_config[cfg.label] = {"medians": m, "ratios": ratios(m, "jobs/s")}
        rows[cfg.label] = summary(m, same_batch=f"raw-sql-b{cfg.concurrency}")
    # "2 processes at least as fast as 1": pgqueue against itself in one process.
    for cfg in configs:
        ours = per_config[cfg.label]["medians"].get("pgqueue")
        single = per_config.get(Config(1, cfg.concurrency).label, {}).get("medians", {}).get("pgqueue")
        if cfg.processes > 1 and ours and single:
            rows[cfg.label]["/ 1 process"] = ours["jobs/s"] / single["jobs/s"]
    return {
        "workload": "drain",
        "params": {
            "jobs": jobs,
            "configs": [cfg.label for cfg in configs],
            "raw_same_batch": raw_same_batch,
            "repeat": repeat,
        },
        "wal_source": sorted(set(sources)),
        "warnings": warnings_for(sources),
        "runs": runs,
        "configs": per_config,
        "summary": rows,
    }
