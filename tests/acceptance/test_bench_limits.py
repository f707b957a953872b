"""The flow-control workloads (``python -m bench limits`` and ``fairness``) run end to end
in ``--quick`` mode, each against its own fresh database: the shape of the JSON result,
that every limit held, and that the database is left without controls. No timing
thresholds: CI machines are noisy.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import psycopg
import pytest
from typer.testing import CliRunner

from bench import _contenders
from bench.__main__ import app
from bench._runner import REPO
from bench.workloads.limits import rate_window
from tests.acceptance.test_bench import costs, positive

UNCONTROLLED = (
    "SELECT count(*) FROM pgqueue.queue_controls"
    " WHERE paused OR concurrency IS NOT NULL OR key_concurrency IS NOT NULL OR rate_limit IS NOT NULL"
)


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_limits(dsn: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # This very checkout as the baseline revision (the environment reaches the producers too).
    monkeypatch.setenv("PGQUEUE_BENCH_BASELINE", str(REPO))
    baseline = dataclasses.replace(
        _contenders.PGQUEUE, name="pgqueue-baseline", variant=True, checkout=str(REPO), name_there="pgqueue"
    )
    monkeypatch.setitem(_contenders.CONTENDERS, "pgqueue-baseline", baseline)
    out = tmp_path / "limits.json"
    args = ["limits", "--quick", "--dsn", dsn, "--json", str(out), "--jobs", "600", "--concurrency", "20"]
    args += ["--binding", "5", "--rate-limit", "200", "--steady-duration", "1"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, f"{result.output}\n{result.exception!r}"
    data = json.loads(out.read_text())
    med = data["medians"]
    assert set(med) == {
        "drain: unlimited",
        "drain: unlimited, another queue limited",
        "drain: pgqueue-baseline",
        "drain: global limit 20 (= workers)",
        "drain: key limit 1, 100 keys",
        "drain: key limit 2, 100 keys",
        "drain: binding limit 5",
        "drain: rate 200/1s",
        "steady: unlimited",
        "steady: pgqueue-baseline",
    }
    for m in med.values():
        positive(m, "jobs/s")
        costs(m)
    # Every limit held.
    assert med["drain: binding limit 5"]["running max"] <= 5
    assert med["drain: key limit 1, 100 keys"]["running per key max"] <= 1
    assert med["drain: key limit 2, 100 keys"]["running per key max"] <= 2
    assert med["drain: rate 200/1s"]["most starts in a window"] <= 200
    rows = data["summary"]
    assert rows["drain: key limit 1, 100 keys / unlimited"]["jobs/s ratio"] > 0
    assert rows["drain: binding limit 5 / unlimited"]["held / limit"] <= 1
    assert rows["drain: unlimited / pgqueue-baseline"]["jobs/s ratio"] > 0
    assert rows["steady: unlimited / pgqueue-baseline"]["jobs/s ratio"] > 0
    # The database is left as found: no bench queue controlled.
    with psycopg.connect(dsn) as conn:
        assert conn.execute(UNCONTROLLED).fetchone() == (0,)


def test_rate_window() -> None:
    # Limit 2 per second: a burst of 2 at 0, then one start as each leaves the window.
    figures = rate_window([0.0, 0.1, 1.0, 1.1, 2.0, 2.1], limit=2, period=1.0)
    assert figures["most starts in a window"] == 2
    assert figures["starts/s"] == pytest.approx(4 / 2.0)
    assert figures["starts/s / limit"] == pytest.approx(1.0)
    assert rate_window([0.0, 0.5, 0.9], limit=2, period=1.0)["most starts in a window"] == 3


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_fairness(dsn: str, tmp_path: Path) -> None:
    out = tmp_path / "fairness.json"
    result = CliRunner().invoke(app, ["fairness", "--quick", "--dsn", dsn, "--json", str(out)])
    assert result.exit_code == 0, f"{result.output}\n{result.exception!r}"
    data = json.loads(out.read_text())
    for name in ("unlimited", "hot key"):
        m = data["medians"][name]
        positive(m, "jobs", "p50 ms")
        assert m["missed"] == 0
        assert m["p50 ms"] <= m["p99 ms"] <= m["max ms"]
    assert data["medians"]["hot key"]["hot waiting end"] > 0  # the hot key stayed saturated
    assert data["medians"]["unlimited"]["hot waiting end"] == 0
    (row,) = data["summary"].values()
    assert row["p99 - unlimited ms"] == pytest.approx(
        data["medians"]["hot key"]["p99 ms"] - data["medians"]["unlimited"]["p99 ms"]
    )
