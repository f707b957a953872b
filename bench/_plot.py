"""``--plot``: a PNG of a workload's result, drawn with matplotlib (Agg, no display needed).

* drain, enqueue, contention: side-by-side bars of the median jobs/s;
* latency: the pickup-latency CDF of every contender, one panel per wake-up mode;
* steady, xmin, soak: throughput and queue depth over time (plus the live relation's
  dead tuples and size for xmin and soak), the first repetition of each contender.

matplotlib is imported only here, and only when a plot is asked for.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from pathlib import Path
from typing import Any


def plot(result: dict[str, Any], path: Path) -> None:
    try:
        mpl = importlib.import_module("matplotlib")
    except ImportError:
        raise SystemExit("--plot needs matplotlib: pip install matplotlib (or -e '.[bench]')") from None
    mpl.use("Agg")
    plt = importlib.import_module("matplotlib.pyplot")
    workload = result.get("workload", "?")
    draw = DRAWERS.get(workload)
    if draw is None:
        raise ValueError(f"no plot for workload {workload!r}")
    fig = draw(plt, result)
    fig.suptitle(_title(result))
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110, bbox_inches="tight")
    plt.close(fig)


def _title(result: dict[str, Any]) -> str:
    env = result.get("environment", {})
    where = f" - PostgreSQL {env['postgres']}, {env.get('cpus', '?')} CPUs" if "postgres" in env else ""
    return f"pgqueue bench: {result.get('workload', '?')}{where}"


# -- bars -------------------------------------------------------------------------------------


def _groups(result: dict[str, Any]) -> dict[str, dict[str, dict[str, float]]]:
    """{group: {contender: medians}} for the bar workloads."""
    if result["workload"] == "enqueue":
        return {k: v["medians"] for k, v in result["results"].items() if "medians" in v}
    if result["workload"] == "contention":
        return {k: v["medians"] for k, v in result["scenarios"].items()}
    if result["workload"] == "drain" and "configs" in result:
        return {f"{k} (processes x concurrency)": v["medians"] for k, v in result["configs"].items()}
    return {"": result["medians"]}


def _bars(plt: Any, result: dict[str, Any]) -> Any:
    groups = _groups(result)
    names: list[str] = []
    for med in groups.values():
        names.extend(n for n in med if n not in names)
    fig, ax = plt.subplots(figsize=(max(6, 1.2 * len(names) * len(groups) + 2), 4.5))
    width = 0.8 / max(len(names), 1)
    for i, name in enumerate(names):
        xs = [g + (i - (len(names) - 1) / 2) * width for g in range(len(groups))]
        ys = [med.get(name, {}).get("jobs/s", 0.0) for med in groups.values()]
        bars = ax.bar(xs, ys, width, label=name)
        ax.bar_label(bars, labels=[f"{y:,.0f}" if y else "" for y in ys], fontsize=7, rotation=90, padding=2)
    ax.set_xticks(range(len(groups)), [g or result["workload"] for g in groups])
    ax.set_ylabel("jobs/s (median)")
    ax.margins(y=0.2)
    ax.legend(fontsize=8)
    return fig


# -- latency ----------------------------------------------------------------------------------


def _cdf(plt: Any, result: dict[str, Any]) -> Any:
    modes = result["params"].get("modes", ["listen", "poll"])
    fig, axes = plt.subplots(1, len(modes), figsize=(6 * len(modes), 4.5), squeeze=False)
    for ax, mode in zip(axes[0], modes, strict=True):
        for lab, values in result["samples"].items():
            if lab.endswith("(poll)") != (mode == "poll") or not values:
                continue
            n = len(values)
            ax.step(sorted(values), [(i + 1) / n for i in range(n)], where="post", label=lab)
        if mode == "poll":
            ax.axvline(
                result["params"]["poll_interval"] * 1000 + 10,
                color="grey",
                linestyle=":",
                label="poll interval + 10 ms",
            )
            ax.set_title(f"without LISTEN (poll every {result['params']['poll_interval']:g}s)")
        else:
            ax.set_xscale("log")
            ax.set_title("woken by LISTEN/NOTIFY")
        ax.set_xlabel("commit -> handler start, ms")
        ax.set_ylabel("fraction of jobs")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    return fig


# -- over time --------------------------------------------------------------------------------


def _smooth(ts: list[float], ys: list[float], window: float) -> list[float]:
    """Mean of the last ``window`` seconds at each point: per-sample rates are jumpy."""
    out: list[float] = []
    lo = 0
    for i, t in enumerate(ts):
        while ts[lo] < t - window:
            lo += 1
        chunk = ys[lo : i + 1]
        out.append(sum(chunk) / len(chunk))
    return out


def _timelines(plt: Any, result: dict[str, Any]) -> Any:
    timelines: dict[str, list[dict[str, Any]]] = result["timelines"]
    with_stats = result["workload"] in ("xmin", "soak") and any(r and r[0].get("stats") for r in timelines.values())
    rows = 3 if with_stats else 2
    fig, axes = plt.subplots(rows, 1, figsize=(10, 3 * rows), sharex=True)
    duration = max((tl[0]["t"][-1] for tl in timelines.values() if tl and tl[0]["t"]), default=1.0)
    window = max(1.0, duration / 60)
    for name, reps in timelines.items():
        if not reps or not reps[0]["t"]:
            continue
        tl = reps[0]
        axes[0].plot(tl["t"], _smooth(tl["t"], tl["jobs/s"], window), label=name)
        axes[1].plot(tl["t"], tl["depth"], label=name)
        if with_stats and tl.get("stats"):
            st = [s for s in tl["stats"] if s["t"] >= 0]
            axes[2].plot([s["t"] for s in st], [s.get("dead tuples", 0) for s in st], label=f"{name}: dead tuples")
    axes[0].set_ylabel(f"completed jobs/s\n({window:.2g}s mean)")
    axes[1].set_ylabel("queue depth")
    axes[1].set_yscale("symlog", linthresh=100)  # a small bounded backlog stays visible beside a runaway one
    if with_stats:
        axes[2].set_ylabel("dead tuples\n(live relation)")
        sizes = axes[2].twinx()
        for name, reps in timelines.items():
            st = [s for s in reps[0].get("stats", []) if s["t"] >= 0] if reps else []
            if st:
                sizes.plot(
                    [s["t"] for s in st],
                    [s.get("table MB", 0) + s.get("index MB", 0) for s in st],
                    linestyle="--",
                    label=f"{name}: heap + index MB",
                )
        sizes.set_ylabel("MB")
        sizes.legend(fontsize=8, loc="upper right")
    axes[-1].set_xlabel("seconds since producers started")
    for ax in axes:
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8, loc="upper left")
    return fig


DRAWERS: dict[str, Callable[[Any, dict[str, Any]], Any]] = {
    "drain": _bars,
    "enqueue": _bars,
    "contention": _bars,
    "latency": _cdf,
    "steady": _timelines,
    "xmin": _timelines,
    "soak": _timelines,
}
