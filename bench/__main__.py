"""``python -m bench WORKLOAD``: pgqueue side by side with a raw-SQL ceiling and peers.

Every workload prints a rich table of medians and ratios and can write ``--json`` (with
the environment: PostgreSQL version and settings, CPUs, fsync latency) and ``--plot``.

Why this module is about 620 lines: it is the command line of every workload, one thin
typer command each with its documented options; the workloads themselves live in
``bench/workloads``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from bench import _contenders, _db, _env, _runner

app = typer.Typer(
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    help="pgqueue benchmarks: throughput, latency and contention on your own PostgreSQL.",
)

DsnOpt = Annotated[str | None, typer.Option(help="Database (default: pgqueue_bench on 127.0.0.1, else embedded).")]
ContOpt = Annotated[str | None, typer.Option(help="Comma-separated contenders (default: all available).")]
RepeatOpt = Annotated[int, typer.Option(min=1, help="Interleaved repetitions; medians are reported.")]
JsonOpt = Annotated[Path | None, typer.Option("--json", help="Write the result (with environment) here.")]
PlotOpt = Annotated[Path | None, typer.Option("--plot", help="Write a PNG chart here (needs matplotlib).")]
QuickOpt = Annotated[bool, typer.Option("--quick", help="Smoke test: tiny sizes, seconds-long, one repetition.")]


def _setup(dsn: str | None, contenders: str | None) -> tuple[str, list[_contenders.Contender]]:
    resolved = _db.resolve_dsn(dsn)
    chosen = []
    try:
        asked = _contenders.get([n.strip() for n in contenders.split(",")] if contenders else None)
    except ValueError as exc:
        raise typer.BadParameter(str(exc), param_hint="--contenders") from None
    for c in asked:
        missing = c.missing()
        if missing:
            _runner.console.print(f"[yellow]skipping {c.name}: {missing}[/]")
        else:
            chosen.append(c)
    return resolved, chosen


def _finish(
    title: str,
    result: dict[str, Any],
    dsn: str,
    json_path: Path | None,
    plot: Path | None,
    columns: tuple[str, ...] | None = None,
    summary_first: str = "",
) -> None:
    result["environment"] = _env.describe(dsn)
    for warning in result.get("warnings", []):
        _runner.console.print(f"[yellow]{warning}[/]")
    if "medians" in result:
        med = _columns(result["medians"], columns) if columns else result["medians"]
        _runner.print_table(title, med, result.get("ratios", {}))
    if result.get("summary"):
        title = f"{title}: pgqueue compared with the others (medians of one run)"
        _runner.print_summary(title, result["summary"], summary_first)
    _runner.write_json(json_path, result)
    if plot is not None:
        from bench import _plot

        _plot.plot(result, plot)
        _runner.console.print(f"wrote {plot}")


@app.command()
def drain(
    dsn: DsnOpt = None,
    contenders: ContOpt = None,
    repeat: RepeatOpt = 3,
    jobs: Annotated[int, typer.Option(help="Jobs to pre-load.")] = 50_000,
    processes: Annotated[str, typer.Option(help="Worker processes; several: 1,2 (one run per combination).")] = "1",
    concurrency: Annotated[str, typer.Option(help="Concurrency per process; several: 4,16,100.")] = "100",
    raw_same_batch: Annotated[
        bool, typer.Option(help="Add the raw loop claiming C jobs per round trip (raw-sql-b<C>) to each configuration.")
    ] = True,
    json_path: JsonOpt = None,
    plot: PlotOpt = None,
    quick: QuickOpt = False,
) -> None:
    """N no-op jobs, W processes x C concurrency: jobs/s to empty the queue, WAL and CPU per job."""
    from bench.workloads import drain as w

    if quick:
        jobs, repeat = 2_000, 1
    configs = [w.Config(p, c) for p in _ints(processes, "--processes") for c in _ints(concurrency, "--concurrency")]
    resolved, chosen = _setup(dsn, contenders)
    result = w.run(resolved, chosen, jobs=jobs, configs=configs, repeat=repeat, raw_same_batch=raw_same_batch)
    for label, part in result["configs"].items():
        _runner.print_table(
            f"drain: {jobs:,} no-op jobs, {label} (processes x concurrency)",
            _columns(part["medians"], DRAIN_COLUMNS),
            part["ratios"],
        )
    _finish("drain", result, resolved, json_path, plot, summary_first="processes x concurrency")


@app.command()
def notify(
    dsn: DsnOpt = None,
    repeat: RepeatOpt = 3,
    clients: Annotated[int, typer.Option(min=1, help="pgbench connections enqueueing at once.")] = 8,
    duration: Annotated[int, typer.Option(min=1, help="Seconds per run.")] = 6,
    one_in: Annotated[str, typer.Option(help="Variants: 1 = every job notifies, N = one in N, 0 = none.")] = "1,10,0",
    json_path: JsonOpt = None,
    quick: QuickOpt = False,
) -> None:
    """pgqueue's single-job INSERT from pgbench (C clients): commits/s when every job
    notifies, when one in N does (a NOTIFY window) and when none does."""
    from bench.workloads import notify as w

    if quick:
        duration, repeat = 2, 1
    resolved = _db.resolve_dsn(dsn)
    variants = _ints(one_in, "--one-in", minimum=0)
    result = w.run(resolved, clients=clients, duration=duration, repeat=repeat, one_in=variants)
    _finish(f"notify: pgqueue's single-job INSERT, {clients} pgbench clients", result, resolved, json_path, None)


@app.command()
def workflows(
    dsn: DsnOpt = None,
    repeat: RepeatOpt = 3,
    jobs: Annotated[int, typer.Option(help="Jobs per run (as chains of 10, or graphs of 102).")] = 20_400,
    concurrency: Annotated[int, typer.Option(help="Concurrency of the one worker process.")] = 100,
    json_path: JsonOpt = None,
    quick: QuickOpt = False,
) -> None:
    """No-op jobs drained as plain jobs, as chains of 10 and as 100-wide fan-out/fan-in
    graphs (each completion releases the next jobs): jobs/s side by side."""
    from bench.workloads import drain as w

    if quick:
        jobs, repeat = 2_040, 1
    resolved, chosen = _setup(dsn, "pgqueue,pgqueue-chain10,pgqueue-fan100")
    result = w.run(resolved, chosen, jobs=jobs, configs=[w.Config(1, concurrency)], repeat=repeat, raw_same_batch=False)
    result["workload"] = "workflows"
    for label, part in result["configs"].items():
        _runner.print_table(
            f"workflows: {jobs:,} no-op jobs as plain jobs, chains of 10 and fan-out/fan-in 100, {label}",
            _columns(part["medians"], DRAIN_COLUMNS),
            part["ratios"],
        )
    _finish("workflows", result, resolved, json_path, None)


@app.command()
def enqueue(
    dsn: DsnOpt = None,
    contenders: ContOpt = "pgqueue",
    repeat: RepeatOpt = 3,
    producers: Annotated[str, typer.Option(help="Producer counts to measure.")] = "1,8",
    duration: Annotated[float, typer.Option(help="Seconds per measurement.")] = 5.0,
    bulk_batch: Annotated[int, typer.Option(min=2, help="Jobs per bulk call (and transaction).")] = 1_000,
    bulk_producers: Annotated[str, typer.Option(help="Producer counts for the bulk measurement.")] = "1",
    bulk_jobs: Annotated[int, typer.Option(help="Jobs for the one-call enqueue_many (COPY) figure.")] = 200_000,
    json_path: JsonOpt = None,
    plot: PlotOpt = None,
    quick: QuickOpt = False,
) -> None:
    """Single enqueues (1 and 8 producers) against a plain INSERT; bulk against INSERT ... unnest."""
    from bench.workloads import enqueue as w

    if quick:
        producers, duration, bulk_batch, bulk_producers, bulk_jobs, repeat = "1", 0.5, 100, "1", 2_000, 1
    resolved, chosen = _setup(dsn, contenders)
    result = w.run(
        resolved,
        chosen,
        producer_counts=_ints(producers, "--producers"),
        duration=duration,
        bulk_jobs=bulk_jobs,
        repeat=repeat,
        bulk_batch=bulk_batch,
        bulk_producers=_ints(bulk_producers, "--bulk-producers"),
    )
    for label, part in result["results"].items():
        if "medians" in part:
            _runner.print_table(f"enqueue, {label}", part["medians"], part["ratios"])
    _runner.console.print(
        f"enqueue_many of {bulk_jobs:,} jobs in one call: "
        f"{result['results']['enqueue_many']['median jobs/s']:,.0f} jobs/s"
    )
    _finish("enqueue", result, resolved, json_path, plot, summary_first="enqueue")


@app.command()
def latency(
    dsn: DsnOpt = None,
    contenders: ContOpt = None,
    repeat: RepeatOpt = 3,
    rate: Annotated[float, typer.Option(help="Jobs/s, enqueued one at a time.")] = 50.0,
    duration: Annotated[float, typer.Option(help="Seconds of enqueueing per measurement.")] = 10.0,
    poll_interval: Annotated[float, typer.Option(help="Workers' poll interval, seconds.")] = 1.0,
    modes: Annotated[
        str, typer.Option(help="listen (NOTIFY wakes workers), poll (--no-listen), or both.")
    ] = "listen,poll",
    json_path: JsonOpt = None,
    plot: PlotOpt = None,
    quick: QuickOpt = False,
) -> None:
    """Idle pickup latency, commit -> handler start: p50/p95/p99/max, with and without LISTEN."""
    from bench.workloads import latency as w

    if quick:
        rate, duration, poll_interval, repeat = 50.0, 0.5, 0.2, 1
    chosen_modes = tuple(m.strip() for m in modes.split(","))
    if not set(chosen_modes) <= set(w.MODES):
        raise typer.BadParameter(f"modes are {', '.join(w.MODES)}", param_hint="--modes")
    resolved, chosen = _setup(dsn, contenders)
    result = w.run(
        resolved, chosen, rate=rate, duration=duration, poll_interval=poll_interval, modes=chosen_modes, repeat=repeat
    )
    for mode, part in result["modes"].items():
        how = "woken by LISTEN" if mode == "listen" else f"polling every {poll_interval:g}s (--no-listen)"
        _runner.print_table(f"latency, {rate:g} jobs/s, {how}", part["medians"], part["ratios"])
    _print_headline(result)
    _finish("latency", result, resolved, json_path, plot, summary_first="wake-up")


@app.command()
def steady(
    dsn: DsnOpt = None,
    contenders: ContOpt = None,
    repeat: RepeatOpt = 3,
    producers: Annotated[int, typer.Option(help="Producer processes.")] = 2,
    rate: Annotated[float, typer.Option(help="Jobs/s per producer (0: flat out).")] = 5_000.0,
    batch: Annotated[int, typer.Option(help="Jobs per producer transaction.")] = 100,
    single: Annotated[bool, typer.Option("--single", help="Single enqueues only (default: bulk + one keyed).")] = False,
    max_depth: Annotated[int, typer.Option(help="Producers hold back at this queue depth (0: never).")] = 0,
    processes: Annotated[int, typer.Option("--workers", help="Worker processes.")] = 1,
    concurrency: Annotated[int, typer.Option(help="Concurrency per worker process.")] = 100,
    duration: Annotated[float, typer.Option(help="Seconds of producing per measurement.")] = 20.0,
    latency: Annotated[bool, typer.Option(help="Workers report handler starts (pickup latency).")] = True,
    json_path: JsonOpt = None,
    plot: PlotOpt = None,
    quick: QuickOpt = False,
) -> None:
    """Producers and workers at once: end-to-end jobs/s, queue depth, pickup latency."""
    from bench.workloads import steady as w

    if quick:
        duration, repeat = 2.0, 1
    cfg = w.Steady(
        producers=producers,
        rate=rate,
        batch=batch,
        bulk=not single,
        max_depth=max_depth,
        workers=processes,
        concurrency=concurrency,
        duration=duration,
        latency=latency,
        sample=0.25 if quick else 0.5,
    )
    resolved, chosen = _setup(dsn, contenders)
    result = w.run(resolved, chosen, cfg, repeat=repeat)
    total = f"{producers} x {rate:,.0f} jobs/s" if rate else f"{producers} producers flat out"
    _finish(
        f"steady: {total}, {processes} worker process(es) x {concurrency}, {duration:g}s",
        result,
        resolved,
        json_path,
        plot,
        STEADY_COLUMNS,
        summary_first="workload",
    )


@app.command()
def contention(
    dsn: DsnOpt = None,
    contenders: ContOpt = None,
    repeat: RepeatOpt = 3,
    jobs: Annotated[int, typer.Option(help="Jobs to pre-load.")] = 50_000,
    processes: Annotated[int, typer.Option(help="Worker processes.")] = 8,
    concurrency: Annotated[int, typer.Option(help="Concurrency per process.")] = 10,
    queues: Annotated[
        int | None, typer.Option(help="Queues in the multi-queue scenarios (default: processes).")
    ] = None,
    json_path: JsonOpt = None,
    plot: PlotOpt = None,
    quick: QuickOpt = False,
) -> None:
    """Many worker processes on one queue, then over many queues: jobs/s, empty claims, lock waits."""
    from bench.workloads import contention as w

    if quick:
        jobs, processes, repeat = 2_000, 3, 1
    resolved, chosen = _setup(dsn, contenders)
    result = w.run(
        resolved,
        chosen,
        jobs=jobs,
        processes=processes,
        concurrency=concurrency,
        queues=queues or processes,
        repeat=repeat,
    )
    for scenario, part in result["scenarios"].items():
        _runner.print_table(
            f"contention, {scenario}: {jobs:,} jobs, {processes} processes x {concurrency}",
            _columns(part["medians"], CONTENTION_COLUMNS),
            part["ratios"],
        )
    for scenario, names in result["skipped"].items():
        _runner.console.print(f"[dim]{scenario}: skipped {', '.join(names)} (no multi-queue support here)[/]")
    _finish("contention", result, resolved, json_path, plot, summary_first="scenario")


@app.command()
def limits(
    dsn: DsnOpt = None,
    repeat: RepeatOpt = 3,
    jobs: Annotated[int, typer.Option(help="Jobs per drain.")] = 10_000,
    processes: Annotated[int, typer.Option(help="Worker processes.")] = 1,
    concurrency: Annotated[int, typer.Option(help="Concurrency per process.")] = 100,
    keys: Annotated[int, typer.Option(min=1, help="Concurrency keys the per-key scenarios spread jobs over.")] = 1_000,
    binding: Annotated[int, typer.Option(min=1, help="The binding queue limit.")] = 10,
    rate_limit: Annotated[int, typer.Option(min=1, help="Starts per --rate-period in the rate scenario.")] = 1_000,
    rate_period: Annotated[float, typer.Option(min=0.001, help="Seconds.")] = 1.0,
    steady_duration: Annotated[float, typer.Option(help="Seconds per steady run (0: no steady runs).")] = 10.0,
    json_path: JsonOpt = None,
    quick: QuickOpt = False,
) -> None:
    """Flow control's cost: unlimited vs baselines, global, per-key, binding and rate limits (drain, steady)."""
    from bench.workloads import limits as w

    if quick:
        jobs, keys, steady_duration, repeat = min(jobs, 2_000), min(keys, 100), min(steady_duration, 2.0), 1
    params = w.Params(
        jobs=jobs,
        processes=processes,
        concurrency=concurrency,
        keys=keys,
        binding=binding,
        rate_limit=rate_limit,
        rate_period=rate_period,
        steady_duration=steady_duration,
    )
    resolved = _db.resolve_dsn(dsn)
    # Every other revision asked for in the environment runs the unlimited queue beside today's.
    baselines = [c for c in _contenders.get(list(_contenders.CONTENDERS)) if c.checkout]
    result = w.run(resolved, baselines, params, repeat=repeat, steady_runs=steady_duration > 0)
    title = f"limits: {jobs:,} jobs per drain, {processes} x {concurrency} (processes x concurrency)"
    _finish(title, result, resolved, json_path, None, LIMITS_COLUMNS, summary_first="run / compared with")


LIMITS_COLUMNS = (
    "jobs/s",
    "drain s",
    "running max",
    "running per key max",
    "claims per 100 jobs",
    "empty claim %",
    "starts/s",
    "most starts in a window",
    *("WAL B/job", "worker CPU us/job", "server CPU us/job"),
)


@app.command()
def fairness(
    dsn: DsnOpt = None,
    repeat: RepeatOpt = 3,
    rate: Annotated[float, typer.Option(min=0.1, help="Trickle jobs/s, over all its keys.")] = 100.0,
    keys: Annotated[int, typer.Option(min=1, help="Trickle keys.")] = 20,
    duration: Annotated[float, typer.Option(help="Seconds of trickle per run.")] = 10.0,
    hot_jobs: Annotated[int, typer.Option(min=1, help="Jobs of the hot key queued before the run.")] = 5_000,
    hot_sleep: Annotated[float, typer.Option(min=0, help="Seconds each hot job runs.")] = 0.02,
    key_limit: Annotated[int, typer.Option(min=1, help="Running jobs per key in the hot run.")] = 1,
    concurrency: Annotated[int, typer.Option(min=1, help="Worker concurrency.")] = 10,
    json_path: JsonOpt = None,
    quick: QuickOpt = False,
) -> None:
    """One saturated key and a trickle over 20 others: the trickle's pickup vs an unlimited queue's."""
    from bench.workloads import fairness as w

    if quick:
        rate, duration, hot_jobs, repeat = 50.0, 1.0, 500, 1
    params = w.Params(
        rate=rate,
        keys=keys,
        duration=duration,
        hot_jobs=hot_jobs,
        hot_sleep=hot_sleep,
        key_limit=key_limit,
        concurrency=concurrency,
    )
    resolved = _db.resolve_dsn(dsn)
    result = w.run(resolved, params, repeat=repeat)
    _finish(
        f"fairness: trickle of {rate:g} jobs/s over {keys} keys, {duration:g}s; hot key: {hot_jobs:,} queued",
        result,
        resolved,
        json_path,
        None,
        summary_first="trickle pickup",
    )
    _print_headline(result)


# Shared by xmin and soak: producers saturate the workers, holding back at a queue depth.
RateOpt = Annotated[float, typer.Option(help="Jobs/s per producer (0: flat out).")]
MaxDepthOpt = Annotated[int, typer.Option(help="Producers hold back at this queue depth (0: never).")]
WorkersOpt = Annotated[int, typer.Option("--workers", help="Worker processes.")]


@app.command()
def xmin(
    dsn: DsnOpt = None,
    contenders: ContOpt = "pgqueue",
    repeat: RepeatOpt = 3,
    duration: Annotated[float, typer.Option(help="Seconds per run.")] = 30.0,
    producers: Annotated[int, typer.Option(help="Producer processes.")] = 2,
    rate: RateOpt = 0.0,
    max_depth: MaxDepthOpt = 10_000,
    processes: WorkersOpt = 1,
    json_path: JsonOpt = None,
    plot: PlotOpt = None,
    quick: QuickOpt = False,
) -> None:
    """steady with and without an idle REPEATABLE READ transaction holding xmin: held / baseline."""
    from bench.workloads import steady as s
    from bench.workloads import xmin as w

    if quick:
        duration, repeat = 2.0, 1
    cfg = s.Steady(
        producers=producers,
        rate=rate,
        max_depth=max_depth,
        workers=processes,
        duration=duration,
        latency=False,
        sample=0.25 if quick else 0.5,
        cost=False,  # WAL over a long window is too much to read back; steady measures it
    )
    resolved, chosen = _setup(dsn, contenders)
    result = w.run(resolved, chosen, cfg, repeat=repeat)
    _finish(
        f"xmin: {duration:g}s runs, {producers} producers, {processes} worker process(es)",
        result,
        resolved,
        json_path,
        plot,
        XMIN_COLUMNS,
    )


@app.command()
def soak(
    dsn: DsnOpt = None,
    contenders: ContOpt = "pgqueue",
    repeat: RepeatOpt = 1,
    minutes: Annotated[float, typer.Option(help="Length of the run.")] = 10.0,
    every: Annotated[float, typer.Option(help="Seconds per reported interval.")] = 60.0,
    producers: Annotated[int, typer.Option(help="Producer processes.")] = 2,
    rate: RateOpt = 0.0,
    max_depth: MaxDepthOpt = 10_000,
    processes: WorkersOpt = 1,
    json_path: JsonOpt = None,
    plot: PlotOpt = None,
    quick: QuickOpt = False,
) -> None:
    """steady for a long time: per-interval jobs/s, live relation and index size; drift; jobs lost."""
    from bench.workloads import soak as w
    from bench.workloads import steady as s

    if quick:
        minutes, every, repeat = 0.05, 1.0, 1
    cfg = s.Steady(
        producers=producers,
        rate=rate,
        max_depth=max_depth,
        workers=processes,
        duration=minutes * 60,
        latency=False,
        stats_every=min(5.0, every / 2),
        drain_timeout=120,
        cost=False,
    )
    resolved, chosen = _setup(dsn, contenders)
    result = w.run(resolved, chosen, cfg, every=every, repeat=repeat)
    for name, reps in result["intervals"].items():
        rows = {
            f"{i + 1}: {r['end s']:g}s": {k: v for k, v in r.items() if k != "end s"} for i, r in enumerate(reps[-1])
        }
        _runner.print_table(f"soak, {name}, per {every:g}s (last repetition)", rows, {}, first="interval: end")
    _finish(
        f"soak: {minutes:g} min, {producers} producers, {processes} worker process(es)",
        result,
        resolved,
        json_path,
        plot,
        SOAK_COLUMNS,
    )


def _ints(value: str, option: str, minimum: int = 1) -> list[int]:
    """A comma-separated list of integers >= ``minimum``, e.g. ``--concurrency 4,16,100``."""
    try:
        out = [int(v) for v in value.split(",")]
    except ValueError:
        out = []
    if not out or min(out) < minimum:
        kind = "positive integers" if minimum == 1 else f"integers >= {minimum}"
        raise typer.BadParameter(f"expected {kind} separated by commas, got {value!r}", param_hint=option)
    return out


def _columns(med: dict[str, dict[str, float]], columns: tuple[str, ...]) -> dict[str, dict[str, float]]:
    """The metrics a table shows (the JSON keeps every one)."""
    return {n: {k: v[k] for k in columns if k in v} for n, v in med.items()}


COST_COLUMNS = ("WAL B/job", "worker CPU us/job", "server CPU us/job")
DRAIN_COLUMNS = ("jobs/s", "drain s", *COST_COLUMNS)
CONTENTION_COLUMNS = (
    "jobs/s",
    "drain s",
    "empty claim %",
    "lock waits avg",
    "lock waits max",
    "lwlock waits avg",
    *COST_COLUMNS,
)
XMIN_COLUMNS = ("jobs/s", "depth max", "dead tuples max", "table MB end", "index MB end", "xmin held")
SOAK_COLUMNS = ("jobs/s", "drift %", "jobs lost", "table MB max", "index MB max", "dead tuples max")


@app.command()
def memory(
    dsn: DsnOpt = None,
    bulk: Annotated[str, typer.Option(help="enqueue_many sizes to compare (peak memory must not grow).")] = (
        "100000,1000000"
    ),
    drain_jobs: Annotated[int, typer.Option(help="Jobs the worker drains while its RSS is sampled.")] = 200_000,
    concurrency: Annotated[int, typer.Option(help="Worker concurrency.")] = 100,
    json_path: JsonOpt = None,
    quick: QuickOpt = False,
) -> None:
    """Peak memory of enqueue_many by size (flat = streaming); worker RSS under load."""
    from bench.workloads import resources as w

    if quick:
        bulk, drain_jobs = "1000,5000", 2_000
    resolved = _db.resolve_dsn(dsn)
    result = w.memory(
        resolved, bulk_sizes=[int(n) for n in bulk.split(",")], drain_jobs=drain_jobs, concurrency=concurrency
    )
    for row in result["enqueue_many"]:
        _runner.console.print(
            f"enqueue_many {row['jobs']:>10,} jobs: peak {row['peak MiB']:.1f} MiB "
            f"(at start {row['base MiB']:.1f} MiB), {row['jobs/s']:,.0f} jobs/s"
        )
    _runner.console.print(f"enqueue_many peak growth: {result['enqueue_many peak growth MiB']:+.1f} MiB")
    worker = result["worker"]
    _runner.console.print(
        f"worker at concurrency {concurrency}: idle {worker['idle RSS MiB']:.1f} MiB, "
        f"max under load {worker['max RSS MiB under load']:.1f} MiB"
    )
    _finish("memory", result, resolved, json_path, None)


@app.command()
def idle(
    dsn: DsnOpt = None,
    seconds: Annotated[float, typer.Option(help="Seconds measured.")] = 60.0,
    warmup: Annotated[float, typer.Option(help="Seconds after start-up before measuring.")] = 5.0,
    json_path: JsonOpt = None,
    quick: QuickOpt = False,
) -> None:
    """An idle worker's cost: queries per second it sends, and its CPU use."""
    from bench.workloads import resources as w

    if quick:
        seconds, warmup = 2.0, 0.5
    resolved = _db.resolve_dsn(dsn)
    result = w.idle(resolved, seconds=seconds, warmup=warmup)
    _runner.console.print(
        f"idle worker over {result['seconds']:.0f}s: {result['queries/s']:.2f} queries/s, {result['CPU %']:.2f}% CPU"
    )
    _finish("idle", result, resolved, json_path, None)


STEADY_COLUMNS = ("jobs/s", "enqueued/s", "depth max", "depth end", "p50 ms", "p99 ms", "max ms", *COST_COLUMNS)


def _print_headline(result: dict[str, Any]) -> None:
    for label, value in result.get("headline", {}).items():
        _runner.console.print(f"{label}: [bold]{value:,.2f}[/]")


@app.command("plot")
def plot_command(
    result: Annotated[Path, typer.Argument(help="A result written with --json.", exists=True, dir_okay=False)],
    png: Annotated[Path, typer.Argument(help="Where to write the chart.")],
) -> None:
    """Draw a saved result again (needs matplotlib)."""
    import json

    from bench import _plot

    _plot.plot(json.loads(result.read_text()), png)
    _runner.console.print(f"wrote {png}")


if __name__ == "__main__":
    app()
