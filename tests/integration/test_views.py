"""The inspection views: what they report, that every column is documented, and that
they stay index-driven on a table of 1,000,000 finished jobs (EXPLAIN)."""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterable, Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest
from psycopg import sql

from pgqueue.maintenance.partitions import _create_day, partition_name
from pgqueue.maintenance.retention import summarize_recent
from pgqueue.migrate import migrate

Conn = psycopg.Connection[Any]
VIEWS = ("queue_stats", "failures", "workers", "health", "retention")


def rows(conn: Conn, query: str, params: Any = None) -> list[dict[str, Any]]:
    cur = conn.execute(query, params)
    assert cur.description is not None
    names = [c.name for c in cur.description]
    return [dict(zip(names, r, strict=True)) for r in cur.fetchall()]


def insert_job(conn: Conn, **cols: Any) -> int:
    cols.setdefault("task", "t")
    cols.setdefault("queue", "a")
    for key in ("errors", "args"):
        if key in cols:
            cols[key] = json.dumps(cols[key])
    names = list(cols)
    values = sql.SQL(", ").join(sql.SQL(str(cols[n])) if n.endswith("_sql") else sql.Placeholder(n) for n in names)
    columns = sql.SQL(", ").join(sql.Identifier(n.removesuffix("_sql")) for n in names)
    row = conn.execute(
        sql.SQL("INSERT INTO pgqueue.jobs ({}) VALUES ({}) RETURNING id").format(columns, values),
        {n: v for n, v in cols.items() if not n.endswith("_sql")},
    ).fetchone()
    assert row is not None
    return int(row[0])


def error(type_: str, message: str, ago: str) -> str:
    """An errors[] element whose time is ``now() - ago`` (built by the server)."""
    return f"jsonb_build_object('type', '{type_}', 'message', '{message}', 'at', now() - interval '{ago}')"


def insert_with_errors(conn: Conn, errors: list[str], **cols: Any) -> int:
    job_id = insert_job(conn, **cols)
    conn.execute(
        sql.SQL("UPDATE pgqueue.jobs SET errors = jsonb_build_array({}) WHERE id = %s").format(
            sql.SQL(", ").join(sql.SQL(e) for e in errors)  # test-only literals
        ),
        [job_id],
    )
    return job_id


# -- what the views say --------------------------------------------------------------------


def test_queue_stats_counts_lag_windows_and_failure_rate(conn: Conn) -> None:
    insert_job(conn, state="available", run_at_sql="now() - interval '10 seconds'")
    insert_job(conn, state="available", run_at_sql="now() - interval '1 second'")
    insert_job(conn, state="scheduled", run_at_sql="now() + interval '1 hour'")
    insert_job(
        conn,
        state="running",
        attempt=1,
        max_attempts=3,
        lease_token_sql="gen_random_uuid()",
        lease_expires_at_sql="now() + interval '30 seconds'",
    )
    insert_with_errors(
        conn,
        [error("builtins.ValueError", "old", "10 minutes"), error("builtins.ValueError", "new", "1 minute")],
        state="retryable",
        attempt=2,
        max_attempts=3,
    )
    for ago in ("30 seconds", "3 minutes", "4 minutes", "10 minutes", "20 minutes"):
        insert_job(conn, state="completed", attempt=1, finished_at_sql=f"now() - interval '{ago}'")
    insert_with_errors(
        conn,
        [error("builtins.KeyError", "k", "30 seconds")],
        state="discarded",
        attempt=1,
        finished_at_sql="now() - interval '30 seconds'",
    )
    insert_job(conn, state="discarded", attempt=1, finished_at_sql="now() - interval '10 minutes'")
    insert_job(conn, queue="b", state="completed", attempt=1, finished_at_sql="now() - interval '2 minutes'")
    insert_job(conn, queue="c", state="completed", attempt=1, finished_at_sql="now() - interval '16 minutes'")
    insert_job(conn, queue="c", state="cancelled", finished_at_sql="now()")

    stats = {r["queue"]: r for r in rows(conn, "SELECT * FROM pgqueue.queue_stats")}
    # c: nothing live, nothing completed/discarded in 15 min, but a job cancelled just now.
    assert set(stats) == {"a", "b", "c"}
    c = stats["c"]
    assert (c["completed_15m"], c["cancelled_1m"], c["cancelled_15m"], c["expired_15m"]) == (0, 1, 1, 0)
    a = stats["a"]
    assert (a["available"], a["scheduled"], a["running"], a["retryable"]) == (2, 1, 1, 1)
    assert 10 <= a["lag_seconds"] < 120
    assert (a["completed_1m"], a["completed_5m"], a["completed_15m"]) == (1, 3, 4)
    assert (a["discarded_1m"], a["discarded_5m"], a["discarded_15m"]) == (1, 1, 2)
    # The retryable job's recent error and the discarded job's: 2 failed of 5 attempts.
    assert a["failed_attempts_5m"] == 2
    assert a["failure_rate_5m"] == pytest.approx(2 / 5)
    b = stats["b"]
    assert (b["available"], b["lag_seconds"], b["completed_5m"], b["failure_rate_5m"]) == (0, 0.0, 1, 0.0)
    assert {type(v) for k, v in a.items() if k not in ("queue", "lag_seconds", "failure_rate_5m")} == {int}


def test_failures_group_latest_errors_by_task_and_type(conn: Conn) -> None:
    insert_with_errors(conn, [error("builtins.ValueError", "v", "2 minutes")], task="ta", state="retryable", attempt=1)
    older = insert_with_errors(
        conn,
        [error("builtins.KeyError", "older", "3 hours")],
        task="tb",
        state="discarded",
        attempt=1,
        finished_at_sql="now() - interval '3 hours'",
    )
    newer = insert_with_errors(
        conn,
        [error("builtins.ValueError", "first try", "5 minutes"), error("builtins.KeyError", "newer", "1 minute")],
        task="tb",
        state="discarded",
        attempt=2,
        finished_at_sql="now() - interval '1 minute'",
    )
    # Not failures: a completed job that had failed once, and a cancelled one.
    insert_with_errors(
        conn, [error("builtins.OSError", "x", "1 minute")], task="tc", state="completed", finished_at_sql="now()"
    )
    insert_with_errors(
        conn, [error("builtins.OSError", "x", "1 minute")], task="tc", state="cancelled", finished_at_sql="now()"
    )
    got = {(r["task"], r["error_type"]): r for r in rows(conn, "SELECT * FROM pgqueue.failures")}
    assert set(got) == {("ta", "builtins.ValueError"), ("tb", "builtins.KeyError")}
    tb = got[("tb", "builtins.KeyError")]
    assert tb["count"] == 2
    assert tb["last_message"] == "newer"
    assert tb["last_job_id"] == newer != older
    assert got[("ta", "builtins.ValueError")]["count"] == 1


def test_health_reports_the_transaction_holding_back_vacuum(conn: Conn, dsn: str) -> None:
    insert_job(conn, state="available")
    with psycopg.connect(dsn) as holder:
        holder.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
        holder.execute("SELECT count(*) FROM pgqueue.jobs_live")  # takes the snapshot
        (h,) = rows(conn, "SELECT * FROM pgqueue.health")
        assert h["oldest_xact_pid"] == holder.info.backend_pid
        assert h["oldest_xact_age_seconds"] >= 0
        assert h["oldest_xmin_age_xids"] >= 0
    (h,) = rows(conn, "SELECT * FROM pgqueue.health")
    assert h["oldest_xact_pid"] is None
    assert h["live_rows"] == 1
    assert h["live_size_bytes"] > 0
    assert h["workers_alive"] == 0
    assert h["finished_partitions"] >= 3 * 4  # yesterday .. 2 days ahead, three states
    assert h["oldest_finished_partition"] <= conn.execute("SELECT current_date").fetchone()[0]  # type: ignore[index]


def test_every_view_column_is_documented(conn: Conn) -> None:
    for view in VIEWS:
        undocumented = conn.execute(
            "SELECT a.attname FROM pg_attribute a WHERE a.attrelid = %s::regclass AND a.attnum > 0"
            " AND NOT a.attisdropped AND col_description(a.attrelid, a.attnum) IS NULL",
            [f"pgqueue.{view}"],
        ).fetchall()
        assert undocumented == [], f"{view}: {undocumented}"
        comment = conn.execute("SELECT obj_description(%s::regclass, 'pg_class')", [f"pgqueue.{view}"]).fetchone()
        assert comment is not None
        assert comment[0], view


# -- cost on a million finished jobs ----------------------------------------------------------
#
# Nothing here depends on the time of day: the data is laid out relative to the server's
# clock (the only clock the views read), and the checks compare each plan with the bounds
# of the partitions and the rows it really read, under the same now() as the plan.

BIG = "obs_big"
PAST_DAYS = 6
#: The recent time window each view reads finished jobs in (its widest), and the
#: partitions (by state) it may read; the upper bound is now() + AHEAD for all.
WINDOWS = {
    "queue_stats": (timedelta(minutes=15), {"completed", "discarded", "cancelled"}),
    "failures": (timedelta(hours=24), {"discarded", "cancelled"}),  # cancelled: the expired ones
}
AHEAD = timedelta(hours=1)
#: A BRIN scan reads whole block ranges: at most one straddles each end of the window.
WASTED_RANGES = 2
FINISHED_PARENTS = ("jobs_completed", "jobs_discarded", "jobs_cancelled")


def plan_nodes(plan: dict[str, Any]) -> Iterator[dict[str, Any]]:
    yield plan
    for child in plan.get("Plans", []):
        yield from plan_nodes(child)


@pytest.fixture(scope="module")
def big_dsn(postgresql_noproc: Any) -> Iterator[str]:
    """A database of this test run with schema obs_big: 1,000,000 finished jobs over the
    last 6 days (400k of them in the last 24 hours, in finish order, as a worker appends
    them) and 20k live jobs, all relative to the server's clock."""
    from tests.conftest import server_dsn

    name = f"pgqueue_obs_big_{os.getpid()}"  # two test runs may share the server
    with psycopg.connect(server_dsn(), autocommit=True) as admin:
        admin.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))
        admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    dsn = server_dsn(name)
    try:
        with psycopg.connect(dsn, autocommit=True) as conn:
            migrate(conn, BIG)
            fill(conn)
        yield dsn
    finally:
        with psycopg.connect(server_dsn(), autocommit=True) as admin:
            admin.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))


def fill(conn: Conn) -> None:
    s = sql.Identifier(BIG)
    anchor = conn.execute("SELECT now()").fetchone()[0]  # type: ignore[index]
    first = (anchor - timedelta(days=PAST_DAYS)).astimezone(UTC).date()
    last = anchor.astimezone(UTC).date()
    for parent in FINISHED_PARENTS:
        for back in range((last - first).days + 1):
            day = last - timedelta(days=back)
            if conn.execute("SELECT to_regclass(%s)", [f"{BIG}.{partition_name(parent, day)}"]).fetchone() == (None,):
                _create_day(conn, BIG, parent, day)
    # (rows, from, to): finished_at spread evenly and inserted in order; 1 in 10 is
    # discarded with an error, 1 in 50 cancelled, the rest completed.
    spans = [
        (600_000, anchor - timedelta(days=PAST_DAYS), anchor - timedelta(days=1)),
        (400_000, anchor - timedelta(days=1), anchor),
    ]
    for n, lo, hi in spans:
        conn.execute(
            sql.SQL(
                "INSERT INTO {s}.jobs (task, queue, state, attempt, max_attempts, created_at, started_at,"
                " finished_at, errors)"
                " SELECT 'task_' || (g %% 7), 'q' || (g %% 5), st, 1, 1, f, f, f,"
                "  CASE WHEN st = 'discarded' THEN jsonb_build_array(jsonb_build_object("
                "   'type', 'builtins.ValueError', 'message', 'boom', 'at', f)) ELSE '[]'::jsonb END"
                " FROM generate_series(1, {n}) AS g,"
                "  LATERAL (SELECT %(lo)s::timestamptz + (%(hi)s::timestamptz - %(lo)s::timestamptz)"
                "   * (g::float8 / {n}) AS f,"
                "   (CASE WHEN g %% 10 = 0 THEN 'discarded' WHEN g %% 50 = 1 THEN 'cancelled'"
                "    ELSE 'completed' END)::{s}.job_state AS st) AS x"
            ).format(s=s, n=sql.Literal(n)),
            {"lo": lo, "hi": hi},
        )
    conn.execute(
        sql.SQL(
            "INSERT INTO {s}.jobs_live (task, queue, state, run_at, attempt, max_attempts, errors)"
            " SELECT 'task_' || (g % 7), 'q' || (g % 5), st, now() - make_interval(secs => g % 600),"
            "  CASE WHEN st = 'retryable' THEN 1 ELSE 0 END, 5,"
            "  CASE WHEN st = 'retryable' THEN jsonb_build_array(jsonb_build_object("
            "   'type', 'builtins.KeyError', 'message', 'k', 'at', now() - make_interval(secs => g % 900)))"
            "  ELSE '[]'::jsonb END"
            " FROM generate_series(1, 20000) AS g,"
            "  LATERAL (SELECT (CASE WHEN g % 4 = 0 THEN 'retryable' WHEN g % 4 = 1 THEN 'scheduled'"
            "   ELSE 'available' END)::{s}.job_state AS st) AS x"
        ).format(s=s)
    )
    conn.execute(sql.SQL("ANALYZE {s}.jobs").format(s=s))
    conn.execute(sql.SQL("ANALYZE {s}.jobs_live").format(s=s))
    # What the maintenance leader does every partition_interval (autovacuum, if on, too).
    assert summarize_recent(conn, BIG) > 0


_BOUND = re.compile(r"FOR VALUES FROM \('([^']+)'\) TO \('([^']+)'\)")


def finished_partitions(conn: Conn) -> dict[str, tuple[datetime, datetime, float]]:
    """Every finished-job day partition: its bounds (as the catalog has them, read back
    by the server) and the rows one BRIN block range holds (from ANALYZE's statistics)."""
    found = conn.execute(
        "SELECT c.relname, pg_get_expr(c.relpartbound, c.oid), c.relpages, c.reltuples"
        " FROM pg_inherits AS i JOIN pg_class AS c ON c.oid = i.inhrelid"
        " WHERE i.inhparent = ANY(%s::regclass[])",
        [[f"{BIG}.{p}" for p in FINISHED_PARENTS]],
    ).fetchall()
    out: dict[str, tuple[datetime, datetime, float]] = {}
    for name, bound, pages, tuples in found:
        m = _BOUND.search(bound)
        assert m is not None, bound
        lo, hi = conn.execute("SELECT %s::timestamptz, %s::timestamptz", [m[1], m[2]]).fetchone()  # type: ignore[misc]
        out[name] = (lo, hi, 128 * tuples / pages if pages > 0 else 0.0)  # 128: BRIN's pages_per_range
    return out


def scans(plan: dict[str, Any], partitions: Iterable[str]) -> Iterator[tuple[str, int]]:
    """(partition, rows read from the heap) for every scan of these partitions in an
    EXPLAIN ANALYZE plan: the rows it returned plus those its filter or a lossy (BRIN)
    recheck threw away."""
    names = set(partitions)
    for node in plan_nodes(plan):
        name = node.get("Relation Name")
        if name in names:
            per_loop = node["Actual Rows"] + node.get("Rows Removed by Filter", 0)
            per_loop += node.get("Rows Removed by Index Recheck", 0)
            yield name, round(per_loop * node["Actual Loops"])


@pytest.mark.slow
@pytest.mark.timeout(600)
@pytest.mark.parametrize("view", VIEWS)
def test_views_stay_index_driven_on_a_million_finished_jobs(big_dsn: str, view: str) -> None:
    with psycopg.connect(big_dsn, autocommit=True) as conn:
        total = conn.execute(sql.SQL("SELECT count(*) FROM {}.jobs").format(sql.Identifier(BIG))).fetchone()
        assert total is not None
        assert total[0] == 1_020_000
        query = sql.SQL("SELECT * FROM {}.{}").format(sql.Identifier(BIG), sql.Identifier(view))
        window, states = WINDOWS.get(view, (timedelta(0), set()))
        with conn.transaction():  # one transaction: one now() for the plan and the checks
            now = conn.execute("SELECT now()").fetchone()[0]  # type: ignore[index]
            partitions = finished_partitions(conn)
            explain = conn.execute(sql.SQL("EXPLAIN (FORMAT JSON) {}").format(query)).fetchone()
            assert explain is not None
            nodes = list(plan_nodes(explain[0][0]["Plan"]))
            read = {n["Relation Name"] for n in nodes if n.get("Relation Name") in partitions}
            # The view reads exactly the day partitions of its states that its window
            # [now() - window, now() + AHEAD) overlaps: the others are pruned at start.
            overlapping = {
                name
                for name, (lo, hi, _) in partitions.items()
                if name.rsplit("_", 1)[0].removeprefix("jobs_") in states and lo < now + AHEAD and hi > now - window
            }
            assert read == overlapping, f"{view} at {now}: reads {sorted(read)}, window overlaps {sorted(overlapping)}"
        if view not in WINDOWS:
            return  # health, retention, workers: no finished job read at all (checked above)

        timings = []
        for _ in range(3):
            with conn.transaction():
                in_window: dict[str, int] = dict(
                    conn.execute(
                        sql.SQL(
                            "SELECT tableoid::regclass::text, count(*) FROM {}.jobs"
                            " WHERE finished_at >= now() - %s AND finished_at < now() + %s GROUP BY 1"
                        ).format(sql.Identifier(BIG)),
                        [window, AHEAD],
                    ).fetchall()
                )
                analyzed = conn.execute(sql.SQL("EXPLAIN (ANALYZE, FORMAT JSON) {}").format(query)).fetchone()
                assert analyzed is not None
            doc = analyzed[0][0]
            timings.append(doc["Planning Time"] + doc["Execution Time"])
            # Index-driven: every partition scan reads the rows of its window plus at most
            # the block ranges straddling the window's ends, however big the partition is
            # (a sequential scan of a day of jobs reads the whole day).
            for name, rows in scans(doc["Plan"], partitions):
                wanted = in_window.get(f"{BIG}.{name}", 0)
                slack = WASTED_RANGES * partitions[name][2]
                assert rows <= wanted + slack, (
                    f"{view}: {name} read {rows} rows for {wanted} in its window (slack {slack:.0f}): not index-driven"
                )
        print(f"\nEXPLAIN ANALYZE {view}: best {min(timings):.2f} ms of {', '.join(f'{t:.2f}' for t in timings)}")
