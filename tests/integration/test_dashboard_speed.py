"""Every dashboard page on 1,000,000 finished and 20,000 live jobs (the views test's
database): each answers, pages that filter look at a bounded window of jobs, the
overview reads each relation once and only its window of finished jobs, the failures
page reads its window of failed jobs however many failed in the last 24 hours, and the
timings are printed (run with -s to see them; docs/dashboard.md quotes them). The
bounds are checked on what the database reads, not on the clock."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from starlette.testclient import TestClient

from pgqueue._db.sql import queries_for
from pgqueue.dashboard import DashboardConfig, create_app
from pgqueue.dashboard.filters import JobFilter
from pgqueue.dashboard.views import jobs_page
from tests.integration.test_views import (  # noqa: F401  (big_dsn: the million-job fixture)
    BIG,
    WASTED_RANGES,
    big_dsn,
    finished_partitions,
    plan_nodes,
    scans,
)

SCAN = 10_000


@pytest.fixture(scope="module")
def client(big_dsn: str) -> Iterator[TestClient]:  # noqa: F811
    app = create_app(DashboardConfig(dsn=big_dsn, schema=BIG, show_args=True, scan_limit=SCAN))
    with TestClient(app) as c:
        yield c


def _ids(dsn: str) -> dict[str, int]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        old = conn.execute(f"SELECT min(id) FROM {BIG}.jobs_discarded").fetchone()  # test-only text
        live = conn.execute(f"SELECT max(id) FROM {BIG}.jobs_live").fetchone()
    assert old is not None
    assert live is not None
    return {"old": int(old[0]), "live": int(live[0])}


def _pages(ids: dict[str, int]) -> list[str]:
    return [
        "/",
        "/live",
        "/jobs",
        "/jobs?state=discarded",
        "/jobs?state=completed&before=500000",
        "/jobs?queue=q3",
        "/jobs?task=task_5&state=discarded",
        "/jobs?text=boom",
        "/jobs?text=no-such-text-anywhere",
        "/jobs?created_from=2000-01-01T00:00&created_to=2000-01-02T00:00",
        f"/jobs/{ids['old']}",
        f"/jobs/{ids['live']}",
        "/failures",
        "/workers",
        "/cron",
        "/queues",
    ]


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_every_page_on_a_million_finished_jobs(big_dsn: str, client: TestClient) -> None:  # noqa: F811
    timings: dict[str, float] = {}
    for path in _pages(_ids(big_dsn)):
        best = float("inf")
        for _ in range(3):
            start = time.perf_counter()
            response = client.get(path)
            best = min(best, time.perf_counter() - start)
            assert response.status_code == 200, (path, response.text[:500])
        timings[path] = best * 1000
    width = max(len(p) for p in timings)
    print("\ndashboard pages on 1,000,000 finished + 20,000 live jobs (best of 3, ms):")
    for path, ms in timings.items():
        print(f"  {path:<{width}}  {ms:7.1f}")


@pytest.mark.slow
@pytest.mark.timeout(900)
@pytest.mark.parametrize(
    "params",
    [
        {"queue": "q3"},
        {"text": "no-such-text-anywhere"},
        {"task": "nope", "state": "completed"},
        {"created_from": "2000-01-01T00:00"},
    ],
)
def test_a_filtered_page_looks_at_a_bounded_window(big_dsn: str, params: dict[str, Any]) -> None:  # noqa: F811
    config = DashboardConfig(dsn=big_dsn, schema=BIG, show_args=True, scan_limit=SCAN)
    with psycopg.connect(big_dsn, autocommit=True) as conn:
        page = jobs_page(conn, config, JobFilter.parse(params), None)
        assert page.bounded
        assert page.scanned == SCAN  # a million candidates, yet one window of them
        assert page.next_before is not None
        # Walking on continues exactly below the window.
        nxt = jobs_page(conn, config, JobFilter.parse(params), page.next_before)
        assert nxt.scanned == SCAN
        assert nxt.scanned_to is not None
        assert page.scanned_to is not None
        assert nxt.scanned_to < page.scanned_to


def _explain(conn: psycopg.Connection[Any], name: str, params: dict[str, Any]) -> dict[str, Any]:
    """EXPLAIN (ANALYZE, BUFFERS) of one of the dashboard's statements, as the dashboard runs
    it (no parallel workers)."""
    conn.execute("SET max_parallel_workers_per_gather = 0")
    statement = b"EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) " + queries_for(BIG)[name]
    found = conn.execute(statement, params).fetchone()
    assert found is not None
    doc: dict[str, Any] = found[0][0]
    return doc


def _report(name: str, doc: dict[str, Any]) -> None:
    top = doc["Plan"]
    buffers = top.get("Shared Hit Blocks", 0) + top.get("Shared Read Blocks", 0)
    ms = doc["Planning Time"] + doc["Execution Time"]
    print(f"\nEXPLAIN ANALYZE {name}: {ms:.1f} ms, {buffers} buffers")


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_the_overview_reads_each_relation_once_and_its_window(big_dsn: str) -> None:  # noqa: F811
    minutes = DashboardConfig(dsn=big_dsn).chart_minutes
    with psycopg.connect(big_dsn, autocommit=True) as conn, conn.transaction():  # one now()
        partitions = finished_partitions(conn)
        live = conn.execute(f"SELECT count(*) FROM {BIG}.jobs_live").fetchone()  # test-only text
        in_window: dict[str, int] = dict(
            conn.execute(
                f"SELECT tableoid::regclass::text, count(*) FROM {BIG}.jobs"  # test-only text
                " WHERE state IN ('completed', 'discarded', 'cancelled')"
                "   AND finished_at >= least(date_trunc('minute', now()) - make_interval(mins => %s),"
                "                            now() - interval '15 minutes')"
                "   AND finished_at < now() + interval '1 hour' GROUP BY 1",
                [minutes],
            ).fetchall()
        )
        doc = _explain(conn, "dash_overview", {"minutes": minutes})
    assert live is not None
    nodes = list(plan_nodes(doc["Plan"]))
    live_scans = [n for n in nodes if n.get("Relation Name") == "jobs_live"]
    assert len(live_scans) == 1, "jobs_live is read once (depths, lag and failed attempts together)"
    assert live_scans[0]["Actual Rows"] == live[0]
    read = list(scans(doc["Plan"], partitions))
    assert len({name for name, _ in read}) == len(read), f"a finished partition is read twice: {read}"
    assert read, "the finished jobs of the window are read"
    for name, rows in read:
        wanted = in_window.get(f"{BIG}.{name}", 0)
        slack = WASTED_RANGES * partitions[name][2]
        assert rows <= wanted + slack, f"{name} read {rows} rows for {wanted} in the window (slack {slack:.0f})"
    _report("dash_overview", doc)


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_the_failures_page_reads_its_window_not_the_day(big_dsn: str) -> None:  # noqa: F811
    window = DashboardConfig(dsn=big_dsn).failure_window
    recent = (
        f" FROM {BIG}.jobs WHERE state IN ('discarded', 'cancelled')"  # test-only text
        " AND finished_at >= now() - interval '24 hours' AND finished_at < now() + interval '1 hour'"
    )
    with psycopg.connect(big_dsn, autocommit=True) as conn, conn.transaction():  # one now()
        partitions = finished_partitions(conn)
        live = conn.execute(f"SELECT count(*) FROM {BIG}.jobs_live").fetchone()  # test-only text
        day = conn.execute("SELECT count(*)" + recent).fetchone()
        # The lowest id of the window's finished part, and every finished row above it (a
        # row the window skips, a job cancelled by hand, is read and thrown away).
        cut = conn.execute(
            "SELECT min(id) FROM (SELECT id" + recent + " AND errors <> '[]'::jsonb"
            " AND (state = 'discarded' OR errors -> -1 ->> 'type' = 'pgqueue.Expired')"
            " ORDER BY id DESC LIMIT %s) AS w",
            [window],
        ).fetchone()
        assert cut is not None
        above = conn.execute("SELECT count(*)" + recent + " AND id >= %s", [cut[0]]).fetchone()
        doc = _explain(conn, "dash_failures", {"window": window, "groups": 500})
    assert live is not None
    assert day is not None
    assert above is not None
    assert day[0] > 4 * window  # the 24 hours hold far more failures than the window
    live_read = sum(rows for name, rows in scans(doc["Plan"], ["jobs_live"]))
    assert live_read <= live[0]
    read = list(scans(doc["Plan"], partitions))
    finished_read = sum(rows for _, rows in read)
    # Each partition's id scan stops at the window's end: it reads the rows above the cut
    # and at most the one row past it that loses the merge.
    assert finished_read <= above[0] + len(read), (finished_read, above[0], read)
    print(f"\nfailures: read {finished_read} finished rows for a window of {window}; the 24 hours hold {day[0]}")
    _report("dash_failures", doc)
