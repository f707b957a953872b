"""fairness: does one saturated key slow the others down?

Two runs, interleaved, each with one pgqueue worker process serving the queue ``fair``,
while a producer (``bench.workers.trickle``) commits single jobs over ``keys`` other
concurrency keys at ``rate`` jobs/s in all:

* ``unlimited``: the trickle alone, on the queue without limits;
* ``hot key``: the queue limited to ``key_limit`` running job per key, with ``hot_jobs``
  jobs of one key (``hot``, each sleeping ``hot_sleep`` s) committed before the worker
  starts: that key is saturated throughout, its backlog waiting in the queue ahead of
  every trickle job, and the claim has to step over it.

Reported: the trickle jobs' pickup latency (commit -> handler start) p50/p95/p99/max, and
the hot run's minus the unlimited run's (target: p99 within 10 ms); ``hot waiting end``
(the hot key's jobs still waiting when the trickle ended; 0 would mean it was not
saturated to the end).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from bench._contenders import PGQUEUE, _pgqueue_app
from bench._db import connect
from bench._measure import Producers, latencies_ms, latency_summary, wait_until
from bench._runner import WorkerGroup, interleaved, medians, workers
from pgqueue import ops

SCHEMA = "pgqueue"
QUEUE = "fair"
HOT_KEY = "hot"
UNLIMITED, HOT = "unlimited", "hot key"
HOT_WAITING = "SELECT count(*) FROM pgqueue.jobs_live WHERE queue = %s AND concurrency_key = %s AND state = 'available'"


@dataclass(frozen=True)
class Params:
    rate: float = 100.0  # trickle jobs/s, over all its keys
    keys: int = 20
    duration: float = 10.0
    hot_jobs: int = 5_000
    hot_sleep: float = 0.02
    key_limit: int = 1
    concurrency: int = 10


def run_once(dsn: str, hot: bool, p: Params) -> dict[str, float]:
    with connect(dsn) as conn:
        PGQUEUE.reset(conn)
        ops.set_queue_limits(
            conn,
            SCHEMA,
            QUEUE,
            concurrency=None,
            rate=None,
            key_concurrency=p.key_limit if hot else None,
            key_fifo=False,
            key_rate=None,
            create=True,
        )
        if hot:
            app = _pgqueue_app()
            task = app.tasks["bench.noop"].options(queue=QUEUE, concurrency_key=HOT_KEY)
            with conn.transaction():
                app.enqueue_many(conn, (task.job(s=p.hot_sleep) for _ in range(p.hot_jobs)))
        group = WorkerGroup(PGQUEUE, dsn, concurrency=p.concurrency, extra=("--queues", QUEUE), report=True)
        trickle = Producers(
            dsn,
            "pgqueue",
            1,
            p.duration,
            module="bench.workers.trickle",
            extra=("--rate", str(p.rate), "--keys", str(p.keys), "--queue", QUEUE),
        )
        with workers(group):
            trickle.start()
            try:
                sent = trickle.wait()
            except BaseException:
                trickle.kill()
                raise
            wait_until(lambda: all(k in group.reports for k in trickle.sent), 10.0, 0.02)
            row = conn.execute(HOT_WAITING, [QUEUE, HOT_KEY]).fetchone()
        PGQUEUE.reset(conn)
    lat = latencies_ms(trickle.sent, group.reports)
    return {
        **latency_summary(lat),
        "jobs": float(sent),
        "missed": float(sent - len(lat)),
        "hot waiting end": float(row[0]) if row else 0.0,
    }


def run(dsn: str, p: Params, *, repeat: int) -> dict[str, Any]:
    PGQUEUE.setup(dsn)
    labels = {UNLIMITED: False, HOT: True}
    runs = interleaved(list(labels), repeat, lambda lab, _rep: run_once(dsn, labels[lab], p))
    med = medians(runs)
    diff = {f"{q} - unlimited ms": med[HOT][f"{q} ms"] - med[UNLIMITED][f"{q} ms"] for q in ("p50", "p99")}
    warnings = []
    if any(r["hot waiting end"] == 0 for r in runs[HOT]):
        warnings.append("the hot key's backlog ran out before the trickle ended: raise --hot-jobs")
    if any(r["missed"] for rs in runs.values() for r in rs):
        warnings.append("some trickle jobs were never seen to start: their latencies are missing")
    with connect(dsn) as conn:  # leave the queue without limits
        ops.set_queue_limits(conn, SCHEMA, QUEUE, key_concurrency=None)
    return {
        "workload": "fairness",
        "params": {**dataclasses.asdict(p), "repeat": repeat},
        "runs": runs,
        "medians": med,
        "summary": {f"{HOT} (limit {p.key_limit} per key) vs {UNLIMITED}": diff},
        "headline": {f"trickle {k}": v for k, v in diff.items()},
        "warnings": warnings,
    }
