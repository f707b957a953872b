"""The benchmark workloads (``python -m bench``) run end to end in ``--quick`` mode.

Each test runs one workload against its own fresh database, with pgqueue and the batched
raw-SQL ceiling only (the Python peers may not be installed), and checks the shape of the
JSON result and that its figures are sane. No timing thresholds: CI machines are noisy.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import psycopg
import pytest
from typer.testing import CliRunner

from bench.__main__ import app
from bench.workloads import notify as notify_workload

CONTENDERS = "pgqueue,raw-sql-b100"
NAMES = ("pgqueue", "raw-sql-b100")

# Each runs a whole workload end to end: seconds each on an idle machine, far more under load.
pytestmark = pytest.mark.slow


def bench(dsn: str, tmp_path: Path, workload: str, *args: str, contenders: str = CONTENDERS) -> dict[str, Any]:
    out = tmp_path / f"{workload}.json"
    result = CliRunner().invoke(
        app, [workload, "--quick", "--dsn", dsn, "--contenders", contenders, "--json", str(out), *args]
    )
    assert result.exit_code == 0, f"{result.output}\n{result.exception!r}"
    data: dict[str, Any] = json.loads(out.read_text())
    assert data["workload"] == workload
    assert data["environment"]["postgres"]
    return data


def positive(metrics: dict[str, float], *keys: str) -> None:
    for key in keys:
        assert metrics[key] > 0, f"{key} = {metrics[key]}"


COSTS = ("WAL B/job", "worker CPU us/job", "server CPU us/job")


def costs(metrics: dict[str, float]) -> None:
    """WAL, worker CPU and server CPU per job were measured (PostgreSQL runs on this machine
    in the tests, with or without a reachable server). CPU is counted in 10 ms ticks, so a
    quick run of a fast contender can read 0; WAL cannot."""
    positive(metrics, "WAL B/job")
    for key in COSTS[1:]:
        assert metrics[key] >= 0, f"{key} = {metrics[key]}"


def test_drain(dsn: str, tmp_path: Path) -> None:
    data = bench(dsn, tmp_path, "drain", "--processes", "1,2", "--concurrency", "4")
    assert list(data["configs"]) == ["1 x 4", "2 x 4"]
    for part in data["configs"].values():
        # The raw loop at the same batch as pgqueue's concurrency joins every configuration.
        assert set(part["medians"]) == {*NAMES, "raw-sql-b4"}
        for m in part["medians"].values():
            positive(m, "jobs/s", "drain s")
            costs(m)
            assert m["WAL enqueue B/job"] + m["WAL run B/job"] == pytest.approx(m["WAL B/job"])
        assert part["ratios"]["pgqueue / raw-sql ceiling"] > 0
        assert part["ratios"]["pgqueue / raw-sql-b4"] > 0
    assert set(data["summary"]) == {"1 x 4", "2 x 4"}
    for row in data["summary"].values():
        assert {"/ raw-sql", "/ raw same batch", "WAL / raw"} <= set(row)
    assert data["summary"]["2 x 4"]["/ 1 process"] == pytest.approx(
        data["configs"]["2 x 4"]["medians"]["pgqueue"]["jobs/s"]
        / data["configs"]["1 x 4"]["medians"]["pgqueue"]["jobs/s"]
    )
    assert data["wal_source"]


def test_drain_with_results_and_a_process_awaiting_every_job(dsn: str, tmp_path: Path) -> None:
    data = bench(dsn, tmp_path, "drain", "--concurrency", "4", contenders="pgqueue,pgqueue-result,pgqueue-awaited")
    medians = data["configs"]["1 x 4"]["medians"]
    assert set(medians) == {"pgqueue", "pgqueue-result", "pgqueue-awaited"}
    for m in medians.values():
        positive(m, "jobs/s", "drain s")
        costs(m)
    # The awaiter got every job's result: its run's reset fails the workload otherwise.


def test_drain_rejects_bad_input(dsn: str) -> None:
    result = CliRunner().invoke(app, ["drain", "--quick", "--dsn", dsn, "--concurrency", "4,x"])
    assert result.exit_code != 0
    assert "--concurrency" in result.output
    result = CliRunner().invoke(app, ["drain", "--quick", "--dsn", dsn, "--contenders", "pgqueue,nosuch"])
    assert result.exit_code != 0
    assert "nosuch" in result.output


def test_enqueue(dsn: str, tmp_path: Path) -> None:
    data = bench(dsn, tmp_path, "enqueue")
    medians = data["results"]["1 producers"]["medians"]
    for name in ("plain-insert", *NAMES):
        positive(medians[name], "jobs/s")
    # Bulk: each contender's bulk path against INSERT ... SELECT FROM unnest of the same rows.
    bulk = data["results"]["bulk 100 per call, 1 producers"]
    for name in ("plain-insert", *NAMES):
        positive(bulk["medians"][name], "jobs/s")
    assert bulk["ratios"]["pgqueue / plain insert"] > 0
    assert data["results"]["enqueue_many"]["median jobs/s"] > 0
    rows = data["summary"]
    assert rows["single, 1 producers"]["/ plain insert"] > 0
    assert rows["bulk 100 per call, 1 producers (plain: INSERT ... unnest)"]["/ plain insert"] > 0


def test_latency(dsn: str, tmp_path: Path) -> None:
    data = bench(dsn, tmp_path, "latency")
    poll_ms = data["params"]["poll_interval"] * 1000
    for mode in ("listen", "poll"):
        for name in NAMES:
            m = data["modes"][mode]["medians"][name]
            positive(m, "jobs", "p50 ms")
            assert m["missed"] == 0
            assert m["p50 ms"] <= m["p95 ms"] <= m["p99 ms"] <= m["max ms"]
            assert data["samples"][name if mode == "listen" else f"{name} (poll)"]
        # Polling never waits much longer than one interval (generous: CI is noisy).
        assert data["modes"]["poll"]["medians"]["pgqueue"]["max ms"] < poll_ms * 5 + 1000
    assert {
        "pgqueue p50 - raw-sql p50 ms",
        "pgqueue p99 - raw-sql p99 ms",
        "pgqueue p99 ms",
        "pgqueue poll max - poll interval ms",
    } <= set(data["headline"])
    assert "pgqueue / raw-sql ceiling (p50)" in data["modes"]["listen"]["ratios"]
    # The differences in ms, per wake-up mode.
    listen = data["modes"]["listen"]["medians"]
    diff = data["summary"]["listen"]
    assert diff["p50 - raw-sql ms"] == pytest.approx(listen["pgqueue"]["p50 ms"] - listen["raw-sql-b100"]["p50 ms"])
    assert "p99 - raw-sql ms" in diff


def test_steady(dsn: str, tmp_path: Path) -> None:
    data = bench(dsn, tmp_path, "steady")
    for name in NAMES:
        m = data["medians"][name]
        positive(m, "jobs/s", "enqueued", "enqueued/s", "p50 ms")
        assert m["depth end"] >= 0
        assert m["depth max"] >= 0
        costs(m)
        timeline = data["timelines"][name][0]
        assert len(timeline["t"]) == len(timeline["depth"]) == len(timeline["jobs/s"]) > 2
        assert timeline["completed"][-1] > 0
    assert data["ratios"]["pgqueue / raw-sql ceiling"] > 0
    assert data["summary"]["steady"]["WAL / raw"] > 0


def test_contention(dsn: str, tmp_path: Path) -> None:
    data = bench(dsn, tmp_path, "contention")
    scenarios = data["scenarios"]
    assert set(scenarios) == {"one queue", "queue per process", "all queues"}
    assert set(scenarios["one queue"]["medians"]) == set(NAMES)
    assert data["skipped"]["all queues"] == ["raw-sql-b100"]
    for part in scenarios.values():
        m = part["medians"]["pgqueue"]
        positive(m, "jobs/s", "claims")
        costs(m)
        assert 0 <= m["empty claim %"] <= 100
        assert m["lock waits max"] >= m["lock waits avg"] >= 0
    positive(scenarios["one queue"]["medians"]["raw-sql-b100"], "jobs/s")
    costs(scenarios["one queue"]["medians"]["raw-sql-b100"])
    assert data["summary"]["one queue"]["/ raw-sql"] > 0


def test_xmin(dsn: str, tmp_path: Path) -> None:
    data = bench(dsn, tmp_path, "xmin", contenders="pgqueue")
    base, held = data["medians"]["pgqueue"], data["medians"]["pgqueue (xmin held)"]
    positive(base, "jobs/s")
    positive(held, "jobs/s")
    assert held["xmin held"] == 1  # the idle REPEATABLE READ transaction really pinned xmin
    assert data["ratios"]["pgqueue: held / baseline"] > 0
    assert data["timelines"]["pgqueue (xmin held)"][0]["stats"]


def test_soak(dsn: str, tmp_path: Path) -> None:
    data = bench(dsn, tmp_path, "soak", contenders="pgqueue")
    m = data["medians"]["pgqueue"]
    positive(m, "jobs/s", "enqueued", "table MB max")
    assert m["jobs lost"] == 0
    assert "drift %" in m
    rows = data["intervals"]["pgqueue"][0]
    assert rows
    assert all(r["jobs/s"] >= 0 for r in rows)


def test_plot(dsn: str, tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    png = tmp_path / "drain.png"
    data = bench(dsn, tmp_path, "drain", "--plot", str(png))
    medians = data["configs"]["1 x 100"]["medians"]
    assert png.read_bytes().startswith(b"\x89PNG")
    # Every other kind of chart, drawn from hand-made results of the same shape.
    from bench import _plot

    timeline = {
        "t": [0.0, 0.5, 1.0],
        "depth": [0, 5, 0],
        "enqueued": [0, 50, 100],
        "completed": [0, 45, 100],
        "jobs/s": [0.0, 90.0, 110.0],
        "stats": [{"t": 0.5, "dead tuples": 3, "table MB": 1.0, "index MB": 0.5}],
    }
    results: list[dict[str, Any]] = [
        {
            "workload": "latency",
            "params": {"modes": ["listen", "poll"], "poll_interval": 0.2},
            "samples": {"pgqueue": [1.0, 2.0, 3.0], "pgqueue (poll)": [50.0, 150.0]},
        },
        {"workload": "contention", "scenarios": {"one queue": {"medians": medians}}},
        {"workload": "enqueue", "results": {"1 producers": {"medians": medians}, "enqueue_many": {}}},
        *({"workload": w, "timelines": {"pgqueue": [timeline]}} for w in ("steady", "xmin", "soak")),
    ]
    for result in results:
        path = tmp_path / f"{result['workload']}.png"
        _plot.plot(result, path)
        assert path.read_bytes().startswith(b"\x89PNG")


def test_memory(dsn: str, tmp_path: Path) -> None:
    out = tmp_path / "memory.json"
    result = CliRunner().invoke(app, ["memory", "--quick", "--dsn", dsn, "--json", str(out)])
    assert result.exit_code == 0, f"{result.output}\n{result.exception!r}"
    data = json.loads(out.read_text())
    assert [row["jobs"] for row in data["enqueue_many"]] == [1000, 5000]
    for row in data["enqueue_many"]:
        positive(row, "peak MiB", "jobs/s")
    assert data["worker"]["max RSS MiB under load"] > 0


def test_idle(dsn: str, tmp_path: Path) -> None:
    out = tmp_path / "idle.json"
    result = CliRunner().invoke(app, ["idle", "--quick", "--dsn", dsn, "--json", str(out)])
    assert result.exit_code == 0, f"{result.output}\n{result.exception!r}"
    data = json.loads(out.read_text())
    assert data["queries/s"] >= 0
    assert data["CPU %"] >= 0
    assert data["seconds"] >= 2


def test_baseline_contender(dsn: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # This very checkout as the "baseline" revision: its processes run from another
    # directory's code (here the same), and the tables gain the before/after ratios.
    from bench import _contenders
    from bench._runner import REPO

    baseline = dataclasses.replace(
        _contenders.PGQUEUE, name="pgqueue-baseline", variant=True, checkout=str(REPO), name_there="pgqueue"
    )
    monkeypatch.setitem(_contenders.CONTENDERS, "pgqueue-baseline", baseline)
    data = bench(dsn, tmp_path, "enqueue", contenders="pgqueue,pgqueue-baseline")
    bulk = data["results"]["bulk 100 per call, 1 producers"]["medians"]
    assert {"plain-insert", "pgqueue", "pgqueue-baseline"} == set(bulk)  # its producer takes --batch
    for row in data["summary"].values():
        assert row["/ baseline"] > 0


def test_summary_row() -> None:
    from bench._runner import summary

    med = {
        "pgqueue": {"jobs/s": 5_000.0, "WAL B/job": 1_000.0, "worker CPU us/job": 40.0},
        "pgqueue-baseline": {"jobs/s": 4_000.0, "WAL B/job": 1_250.0, "worker CPU us/job": 50.0},
        "raw-sql-b100": {"jobs/s": 20_000.0, "WAL B/job": 500.0, "worker CPU us/job": 5.0},
        "raw-sql-b16": {"jobs/s": 10_000.0, "WAL B/job": 400.0, "worker CPU us/job": 10.0},
        "pgqueuer": {"jobs/s": 2_500.0},
    }
    row = summary(med, same_batch="raw-sql-b16")
    assert row["/ raw-sql"] == pytest.approx(0.25)  # the best raw variant's throughput
    assert row["/ raw same batch"] == pytest.approx(0.5)
    assert row["/ pgqueuer"] == pytest.approx(2.0)
    assert row["/ baseline"] == pytest.approx(1.25)
    assert row["WAL / raw"] == pytest.approx(2.5)  # the cheapest raw variant's WAL
    assert row["worker CPU / raw"] == pytest.approx(8.0)
    assert row["WAL / baseline"] == pytest.approx(0.8)
    assert row["worker CPU / baseline"] == pytest.approx(0.8)
    assert summary({"raw-sql-b100": med["raw-sql-b100"]}) == {}


def test_wal_fallback_warning() -> None:
    from bench._cost import warnings_for

    assert warnings_for(["pg_walinspect (this database)"]) == []
    lost = "pg_current_wal_insert_lsn (whole cluster; pg_walinspect failed: requested WAL segment pg_wal/{} gone)"
    (warning,) = warnings_for([lost.format("0001"), lost.format("0002"), "pg_walinspect (this database)"])
    assert "in 2 run(s)" in warning
    assert "pg_wal/..." in warning


@pytest.mark.skipif(notify_workload.pgbench() is None, reason="pgbench is not installed")
def test_notify(dsn: str, tmp_path: Path) -> None:
    out = tmp_path / "notify.json"
    result = CliRunner().invoke(app, ["notify", "--quick", "--dsn", dsn, "--clients", "2", "--json", str(out)])
    assert result.exit_code == 0, f"{result.output}\n{result.exception!r}"
    data = json.loads(out.read_text())
    assert data["workload"] == "notify"
    assert set(data["medians"]) == {"every job notifies", "1 in 10 notifies", "none"}
    for m in data["medians"].values():
        positive(m, "jobs/s")
    assert set(data["ratios"]) == {"every job notifies / none", "1 in 10 notifies / none"}


def test_notify_statements_are_pgqueues_own_with_and_without_the_wake_up(dsn: str) -> None:
    from pgqueue._db.sql import channel_name

    notify, quiet = notify_workload.statements(dsn)
    with psycopg.connect(dsn, autocommit=True) as listener, psycopg.connect(dsn, autocommit=True) as conn:
        listener.execute(f'LISTEN "{channel_name("pgqueue")}"')
        before = conn.execute("SELECT count(*) FROM pgqueue.jobs_live").fetchone()
        conn.execute(quiet)
        conn.execute(notify)
        conn.execute("SELECT pg_notify(%s, 'marker')", [channel_name("pgqueue")])
        heard = []
        for n in listener.notifies(timeout=30):
            if n.payload == "marker":
                break
            heard.append(n.payload)
        after = conn.execute("SELECT count(*) FROM pgqueue.jobs_live").fetchone()
    assert heard == ["default"]  # one wake-up: the notifying statement's
    assert before is not None
    assert after == (before[0] + 2,)


def test_wal_mix_counts_each_sides_writes_per_drained_job(dsn: str, tmp_path: Path) -> None:
    from bench import wal_mix

    out = tmp_path / "wal.json"
    jobs = 300
    assert wal_mix.main(["--dsn", dsn, "--jobs", str(jobs), "--concurrency", "4", "--json", str(out)]) == 0
    sides = json.loads(out.read_text())["sides"]

    def records(side: str, *kinds: str) -> int:
        return sum(sides[side].get(k, {"records": 0})["records"] for k in kinds)

    # The raw loop deletes each job and keeps nothing; pgqueue deletes each job from the
    # live partition and inserts it into its finished partition (the history it keeps).
    assert records("raw", "Heap/DELETE") == jobs
    assert records("raw", "Heap/INSERT", "Heap/INSERT+INIT") == 0
    assert records("pgqueue", "Heap/DELETE") >= jobs
    assert records("pgqueue", "Heap/INSERT", "Heap/INSERT+INIT") >= jobs
    # Every claimed job's lock is in the WAL on both sides.
    assert records("raw", "Heap/LOCK") >= jobs
    assert records("pgqueue", "Heap/LOCK") >= jobs
    with psycopg.connect(dsn) as conn:  # both sides cleaned up after themselves
        left = conn.execute("SELECT count(*) FROM pg_namespace WHERE nspname IN ('walmix', 'bench_raw')").fetchone()
    assert left == (0,)
