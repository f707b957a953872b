"""``python -m bench WORKLOAD``: pgqueue side by side with a raw-SQL ceiling and peers.

Every workload prints a rich table of medians and ratios and can write ``--json`` (with
the environment: PostgreSQL version and settings, CPUs, fsync latency) and ``--plot``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from bench import _contenders, _db, _env, _runner

app = typer.Typer(no_args_is_help=True, add_completion=False, pretty_exceptions_enable=False,
                  help="pgqueue benchmarks: throughput, latency and contention on your own PostgreSQL.")

DsnOpt = Annotated[str | None, typer.Option(help="Database (default: pgqueue_bench on 127.0.0.1, else embedded).")]
ContOpt = Annotated[str | None, typer.Option(help="Comma-separated contenders (default: all available).")]
RepeatOpt = Annotated[int, typer.Option(min=1, help="Interleaved repetitions; medians are reported.")]
JsonOpt = Annotated[Path | None, typer.Option("--json", help="Write the result (with environment) here.")]
PlotOpt = Annotated[Path | None, typer.Option("--plot", help="Write a PNG chart here (needs matplotlib).")]


def _setup(dsn: str | None, contenders: str | None) -> tuple[str, list[_contenders.Contender]]:
    resolved = _db.resolve_dsn(dsn)
    chosen = []
    for c in _contenders.get(contenders.split(",") if contenders else None):
        missing = c.missing()
        if missing:
            _runner.console.print(f"[yellow]skipping {c.name}: {missing}[/]")
        else:
            chosen.append(c)
    return resolved, chosen


def _finish(title: str, result: dict[str, Any], dsn: str, json_path: Path | None, plot: Path | None) -> None:
    result["environment"] = _env.describe(dsn)
    if "medians" in result:
        _runner.print_table(title, result["medians"], result.get("ratios", {}))
    _runner.write_json(json_path, result)
    if plot is not None:
        from bench import _plot

        _plot.plot(result, plot)
        _runner.console.print(f"wrote {plot}")


@app.command()
def drain(
    dsn: DsnOpt = None, contenders: ContOpt = None, repeat: RepeatOpt = 3,
    jobs: Annotated[int, typer.Option(help="Jobs to pre-load.")] = 50_000,
    processes: Annotated[int, typer.Option(help="Worker processes.")] = 1,
    concurrency: Annotated[int, typer.Option(help="Concurrency per process.")] = 100,
    json_path: JsonOpt = None, plot: PlotOpt = None,
) -> None:
    """N no-op jobs, W processes x C concurrency: jobs/s to empty the queue."""
    from bench.workloads import drain as w

    resolved, chosen = _setup(dsn, contenders)
    result = w.run(resolved, chosen, jobs=jobs, processes=processes, concurrency=concurrency, repeat=repeat)
    _finish(f"drain: {jobs:,} no-op jobs, {processes} process(es) x {concurrency}", result, resolved, json_path, plot)


@app.command()
def enqueue(
    dsn: DsnOpt = None, contenders: ContOpt = "pgqueue", repeat: RepeatOpt = 3,
    producers: Annotated[str, typer.Option(help="Producer counts to measure.")] = "1,8",
    duration: Annotated[float, typer.Option(help="Seconds per measurement.")] = 5.0,
    bulk_jobs: Annotated[int, typer.Option(help="Jobs for the enqueue_many (COPY) figure.")] = 200_000,
    json_path: JsonOpt = None, plot: PlotOpt = None,
) -> None:
    """Single enqueues (1 and 8 producers) against a plain INSERT; bulk enqueue_many."""
    from bench.workloads import enqueue as w

    resolved, chosen = _setup(dsn, contenders)
    result = w.run(resolved, chosen, producer_counts=[int(p) for p in producers.split(",")],
                   duration=duration, bulk_jobs=bulk_jobs, repeat=repeat)
    for label, part in result["results"].items():
        if "medians" in part:
            _runner.print_table(f"enqueue, {label}", part["medians"], part["ratios"])
    _runner.console.print(f"enqueue_many: {result['results']['enqueue_many']['median jobs/s']:,.0f} jobs/s")
    _finish("enqueue", result, resolved, json_path, plot)


if __name__ == "__main__":
    app()
