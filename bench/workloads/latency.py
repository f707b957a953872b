"""latency: commit -> handler start for jobs enqueued one at a time onto idle workers.

One worker process per contender waits idle; one producer process (``bench.workers.producer``)
commits single jobs at a fixed rate and prints each job's post-commit wall time; the
worker, started with ``--report``, prints each handler's start. Pickup latency is the
difference, matched by job key. Each contender runs twice: woken by LISTEN/NOTIFY, and with
``--no-listen`` (polling every ``poll_interval``; the target there is max <= poll interval
+ 10 ms).
"""

from __future__ import annotations

from typing import Any

import psycopg

from bench._contenders import Contender
from bench._measure import Producers, latencies_ms, latency_summary, wait_until
from bench._runner import WorkerGroup, interleaved, medians, ratios, workers

MODES = ("listen", "poll")


def label(name: str, mode: str) -> str:
    return name if mode == "listen" else f"{name} (poll)"


def run(
    dsn: str,
    contenders: list[Contender],
    *,
    rate: float,
    duration: float,
    poll_interval: float,
    modes: tuple[str, ...] = MODES,
    concurrency: int = 10,
    repeat: int,
) -> dict[str, Any]:
    for c in contenders:
        c.setup(dsn)
    by_label = {label(c.name, m): (c, m) for m in modes for c in contenders}
    samples: dict[str, list[float]] = {lab: [] for lab in by_label}

    def one(lab: str, _rep: int) -> dict[str, float]:
        contender, mode = by_label[lab]
        extra: tuple[str, ...] = ("--poll-interval", str(poll_interval))
        if mode == "poll":
            extra = ("--no-listen", *extra)
        with psycopg.connect(dsn, autocommit=True) as conn:
            contender.reset(conn)
        group = WorkerGroup(contender, dsn, processes=1, concurrency=concurrency, extra=extra, report=True)
        producer = Producers(
            dsn, contender.name, 1, duration, module="bench.workers.producer", extra=("--rate", str(rate))
        )
        with workers(group):
            producer.start()
            try:
                sent = producer.wait()
            except BaseException:
                producer.kill()
                raise
            wait_until(lambda: all(k in group.reports for k in producer.sent), poll_interval * 2 + 5, 0.02)
        lat = latencies_ms(producer.sent, group.reports)
        samples[lab].extend(round(v, 3) for v in lat)
        return {**latency_summary(lat), "jobs": float(sent), "missed": float(sent - len(lat))}

    runs = interleaved(list(by_label), repeat, one)
    med = medians(runs)
    per_mode: dict[str, Any] = {}
    rows: dict[str, dict[str, float]] = {}
    warnings: list[str] = []
    for mode in modes:
        m = {c.name: med[label(c.name, mode)] for c in contenders}
        compared = m
        if mode == "poll":
            # A worker that polls picks a job up after half an interval on average; one far
            # quicker is still being woken some other way, and comparing with it says nothing.
            quick = [n for n, v in m.items() if v["p50 ms"] < poll_interval * 1000 / 10]
            warnings += [
                f"{n} (poll): p50 {m[n]['p50 ms']:.1f} ms, far below the poll interval: its worker "
                "does not seem to honour --no-listen; left out of the poll ratios"
                for n in quick
            ]
            compared = {n: v for n, v in m.items() if n not in quick}
        rows[mode] = differences(compared)
        per_mode[mode] = {
            "medians": m,
            "ratios": {f"{k} (p50)": v for k, v in ratios(compared, "p50 ms", higher_is_better=False).items()},
        }
    return {
        "workload": "latency",
        "params": {
            "rate": rate,
            "duration": duration,
            "poll_interval": poll_interval,
            "modes": list(modes),
            "concurrency": concurrency,
            "repeat": repeat,
        },
        "runs": runs,
        "modes": per_mode,
        "headline": headline(per_mode, poll_interval),
        "summary": {mode: row for mode, row in rows.items() if row},
        "warnings": warnings,
        "samples": {lab: sorted(v) for lab, v in samples.items()},
    }


def differences(med: dict[str, dict[str, float]]) -> dict[str, float]:
    """pgqueue's pickup p50 and p99 minus the raw-SQL LISTEN + claim loop's (the best raw
    variant's), PgQueuer's and pgqueue-baseline's, in ms: positive = pgqueue is slower."""
    if "pgqueue" not in med:
        return {}
    ours = med["pgqueue"]
    row: dict[str, float] = {}
    raw = [v for n, v in med.items() if n.startswith("raw-sql")]
    refs = {"raw-sql": raw, "pgqueuer": [med["pgqueuer"]] if "pgqueuer" in med else []}
    refs["baseline"] = [med["pgqueue-baseline"]] if "pgqueue-baseline" in med else []
    for ref, values in refs.items():
        for q in ("p50", "p99"):
            if values:
                row[f"{q} - {ref} ms"] = ours[f"{q} ms"] - min(v[f"{q} ms"] for v in values)
    return row


def headline(per_mode: dict[str, Any], poll_interval: float) -> dict[str, float]:
    """The figures the targets name: pgqueue's p50 over the raw-SQL loop's, its p99, and
    without LISTEN its worst pickup over the poll interval."""
    out: dict[str, float] = {}
    listen = per_mode.get("listen", {}).get("medians", {})
    if "pgqueue" in listen:
        raw = [v["p50 ms"] for n, v in listen.items() if n.startswith("raw-sql")]
        if raw:
            out["pgqueue p50 - raw-sql p50 ms"] = listen["pgqueue"]["p50 ms"] - min(raw)
            raw99 = min(v["p99 ms"] for n, v in listen.items() if n.startswith("raw-sql"))
            out["pgqueue p99 - raw-sql p99 ms"] = listen["pgqueue"]["p99 ms"] - raw99
        out["pgqueue p50 ms"] = listen["pgqueue"]["p50 ms"]
        out["pgqueue p99 ms"] = listen["pgqueue"]["p99 ms"]
    poll = per_mode.get("poll", {}).get("medians", {})
    if "pgqueue" in poll:
        out["pgqueue poll max - poll interval ms"] = poll["pgqueue"]["max ms"] - poll_interval * 1000
    return out
