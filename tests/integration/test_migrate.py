"""Migrations: idempotent, recorded, safe under concurrency, schema-configurable, and the
layout they build (partitions, indexes, storage parameters, the claim's plan)."""

from __future__ import annotations

import concurrent.futures
import threading
from collections.abc import Iterator
from datetime import date, timedelta
from typing import Any, LiteralString

import psycopg
import pytest
from psycopg import sql

import pgqueue
from pgqueue._db.jobs import cursor_params, outcome_params
from pgqueue._db.sql import load_migrations, queries_for
from pgqueue.maintenance.partitions import FINISHED_PARENTS, ensure_partitions, partition_name
from pgqueue.migrate import current_version, latest_version, migrate, require_current
from pgqueue.models import JobState, Outcome

Conn = psycopg.Connection[Any]

ALL_VERSIONS = [m.version for m in load_migrations()]
LIVE_INDEXES = {
    "jobs_live_pkey",
    "jobs_live_fetch",
    "jobs_live_timers",
    "jobs_live_unique_key",
    "jobs_live_keyed",
    "jobs_live_expires",
    "jobs_live_workflow",
}


@pytest.fixture
def empty_conn(empty_dsn: str) -> Iterator[Conn]:
    with psycopg.connect(empty_dsn, autocommit=True) as c:
        yield c


def scalar(conn: Conn, query: LiteralString | bytes | sql.SQL | sql.Composed, params: Any = None) -> Any:
    row = conn.execute(query, params).fetchone()
    assert row is not None
    return row[0]


def db_today(conn: Conn) -> date:
    value: date = scalar(conn, "SELECT (now() AT TIME ZONE 'UTC')::date")
    return value


def schema_tables(conn: Conn, schema: str) -> set[str]:
    rows = conn.execute(
        "SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace"
        " WHERE n.nspname = %s AND c.relkind IN ('r', 'p')",
        [schema],
    ).fetchall()
    return {r[0] for r in rows}


def day_partitions(conn: Conn, schema: str, parent: str) -> dict[str, str]:
    """Child name -> partition bound expression, for one finished-job parent."""
    conn.execute("SET TimeZone = 'UTC'")
    rows = conn.execute(
        "SELECT child.relname, pg_get_expr(child.relpartbound, child.oid)"
        " FROM pg_inherits i"
        " JOIN pg_class parent ON parent.oid = i.inhparent"
        " JOIN pg_class child ON child.oid = i.inhrelid"
        " JOIN pg_namespace n ON n.oid = parent.relnamespace"
        " WHERE n.nspname = %s AND parent.relname = %s",
        [schema, parent],
    ).fetchall()
    return dict(rows)


def enqueue_function_count(conn: Conn, schema: str) -> int:
    return int(
        scalar(
            conn,
            "SELECT count(*) FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace"
            " WHERE n.nspname = %s AND p.proname = 'enqueue'",
            [schema],
        )
    )


# -- idempotence and recording ---------------------------------------------------------


def test_migrate_fresh_then_idempotent(empty_conn: Conn) -> None:
    assert current_version(empty_conn, "pgqueue") is None
    assert migrate(empty_conn, "pgqueue") == ALL_VERSIONS
    assert migrate(empty_conn, "pgqueue") == []
    assert migrate(empty_conn, "pgqueue") == []
    rows = empty_conn.execute(
        "SELECT version, name, applied_at IS NOT NULL FROM pgqueue.migrations ORDER BY version"
    ).fetchall()
    assert rows == [(m.version, m.name, True) for m in load_migrations()]
    assert current_version(empty_conn, "pgqueue") == latest_version() == ALL_VERSIONS[-1]
    require_current(empty_conn, "pgqueue")
    assert {"jobs", "jobs_live", "jobs_completed", "jobs_discarded", "jobs_cancelled", "migrations"} <= (
        schema_tables(empty_conn, "pgqueue")
    )
    assert enqueue_function_count(empty_conn, "pgqueue") == 1


def test_migrate_already_migrated_database_is_a_no_op(conn: Conn) -> None:
    assert migrate(conn, "pgqueue") == []
    assert scalar(conn, "SELECT count(*) FROM pgqueue.migrations") == len(ALL_VERSIONS)


def test_migrate_on_non_autocommit_connection_commits(empty_dsn: str) -> None:
    with psycopg.connect(empty_dsn) as c:
        assert migrate(c, "pgqueue") == ALL_VERSIONS
    with psycopg.connect(empty_dsn, autocommit=True) as c:
        require_current(c, "pgqueue")


def test_app_migrate_uses_its_dsn(empty_dsn: str) -> None:
    app = pgqueue.App(dsn=empty_dsn)
    assert app.migrate() == ALL_VERSIONS
    assert app.migrate() == []
    with psycopg.connect(empty_dsn, autocommit=True) as c:
        require_current(c, "pgqueue")


def test_concurrent_migrate_on_fresh_database(empty_dsn: str) -> None:
    n = 4
    barrier = threading.Barrier(n)

    def run() -> list[int]:
        with psycopg.connect(empty_dsn, autocommit=True) as c:
            barrier.wait(timeout=30)
            return migrate(c, "pgqueue")

    with concurrent.futures.ThreadPoolExecutor(n) as pool:
        results = [f.result(timeout=60) for f in [pool.submit(run) for _ in range(n)]]

    assert sorted(results) == [[]] * (n - 1) + [ALL_VERSIONS]
    with psycopg.connect(empty_dsn, autocommit=True) as c:
        assert scalar(c, "SELECT count(*) FROM pg_namespace WHERE nspname = 'pgqueue'") == 1
        rows = c.execute("SELECT version, count(*) FROM pgqueue.migrations GROUP BY 1 ORDER BY 1").fetchall()
        assert rows == [(v, 1) for v in ALL_VERSIONS]
        assert enqueue_function_count(c, "pgqueue") == 1
        for parent in FINISHED_PARENTS:
            assert len(day_partitions(c, "pgqueue", parent)) == 4
        job_id = scalar(c, "SELECT pgqueue.enqueue('t')")
        assert scalar(c, "SELECT state::text FROM pgqueue.jobs WHERE id = %s", [job_id]) == "available"


def test_failed_migration_leaves_nothing_behind(empty_conn: Conn) -> None:
    # A conflicting object makes migration 0001 fail half-way.
    empty_conn.execute("CREATE SCHEMA pgqueue")
    empty_conn.execute("CREATE TYPE pgqueue.job_state AS ENUM ('x')")
    with pytest.raises(pgqueue.MigrationError, match="0001"):
        migrate(empty_conn, "pgqueue")
    assert schema_tables(empty_conn, "pgqueue") == set()  # not even the version table
    assert current_version(empty_conn, "pgqueue") is None
    with pytest.raises(pgqueue.SchemaNotInstalledError):
        require_current(empty_conn, "pgqueue")
    # After fixing the conflict, migrate works.
    empty_conn.execute("DROP TYPE pgqueue.job_state")
    assert migrate(empty_conn, "pgqueue") == ALL_VERSIONS


@pytest.mark.parametrize("schema", ['a"; drop', "Upper", "1abc", "", "x" * 49, "pg-queue"])
def test_migrate_rejects_invalid_schema_names(empty_conn: Conn, schema: str) -> None:
    with pytest.raises(pgqueue.ConfigError, match="schema"):
        migrate(empty_conn, schema)
    assert scalar(empty_conn, "SELECT count(*) FROM pg_namespace WHERE nspname !~ '^(pg_|information_schema)'") == 1


# -- require_current -------------------------------------------------------------------


def test_require_current_on_empty_database(empty_conn: Conn) -> None:
    with pytest.raises(pgqueue.SchemaNotInstalledError, match="pgqueue migrate"):
        require_current(empty_conn, "pgqueue")


def test_require_current_when_behind(conn: Conn) -> None:
    require_current(conn, "pgqueue")
    conn.execute("DELETE FROM pgqueue.migrations WHERE version = %s", [latest_version()])
    with pytest.raises(pgqueue.SchemaNotInstalledError, match="pgqueue migrate"):
        require_current(conn, "pgqueue")


def test_require_current_other_schema(conn: Conn) -> None:
    with pytest.raises(pgqueue.SchemaNotInstalledError, match="pgqueue migrate"):
        require_current(conn, "not_installed")


# -- custom schema ---------------------------------------------------------------------


def test_migrate_custom_schema(dsn: str, conn: Conn) -> None:
    assert migrate(conn, "jobs_custom") == ALL_VERSIONS
    assert migrate(conn, "jobs_custom") == []
    require_current(conn, "jobs_custom")
    assert enqueue_function_count(conn, "jobs_custom") == 1
    assert {"jobs", "jobs_live", "migrations"} <= schema_tables(conn, "jobs_custom")
    for parent in FINISHED_PARENTS:
        assert len(day_partitions(conn, "jobs_custom", parent)) == 4

    # The function lives in the custom schema and writes only there.
    from_sql = scalar(conn, "SELECT jobs_custom.enqueue('t', queue => 'cq')")
    app = pgqueue.App(dsn=dsn, schema="jobs_custom")

    @app.task(name="custom.task", queue="cq")
    def custom_task(n: int) -> None:
        return None

    with psycopg.connect(dsn, autocommit=True) as listener:
        listener.execute("LISTEN jobs_custom_wakeup")
        with conn.transaction():
            from_py = custom_task.enqueue(conn, n=1)
            app.enqueue_many(conn, [custom_task.job(n=i) for i in range(10)])
        conn.execute("SELECT pg_notify('jobs_custom_wakeup', 'sentinel')")
        got: list[tuple[str, str]] = []
        for notify in listener.notifies(timeout=15):
            got.append((notify.channel, notify.payload))
            if notify.payload == "sentinel":
                break
        assert got == [("jobs_custom_wakeup", "cq"), ("jobs_custom_wakeup", "sentinel")]

    assert scalar(conn, "SELECT count(*) FROM jobs_custom.jobs") == 12
    assert scalar(conn, "SELECT count(*) FROM pgqueue.jobs") == 0
    rows = conn.execute("SELECT id, task FROM jobs_custom.jobs WHERE id IN (%s, %s) ORDER BY id", [from_sql, from_py])
    assert rows.fetchall() == [(from_sql, "t"), (from_py, "custom.task")]


def test_custom_schema_on_fresh_database_creates_only_that_schema(empty_conn: Conn) -> None:
    assert migrate(empty_conn, "jobs_custom") == ALL_VERSIONS
    assert scalar(empty_conn, "SELECT count(*) FROM pg_namespace WHERE nspname = 'pgqueue'") == 0
    with pytest.raises(pgqueue.SchemaNotInstalledError):
        require_current(empty_conn, "pgqueue")


def test_enqueue_into_schema_that_is_not_installed(dsn: str, conn: Conn) -> None:
    app = pgqueue.App(dsn=dsn, schema="elsewhere")

    @app.task(name="t")
    def t() -> None:
        return None

    with pytest.raises(pgqueue.SchemaNotInstalledError, match="pgqueue migrate"):
        t.enqueue(conn)


# -- layout ----------------------------------------------------------------------------


def test_finished_partitions_from_yesterday_to_two_days_ahead(empty_conn: Conn) -> None:
    migrate(empty_conn, "pgqueue")
    today = db_today(empty_conn)
    for parent in FINISHED_PARENTS:
        expected = {}
        for offset in range(-1, 3):
            day = today + timedelta(days=offset)
            expected[partition_name(parent, day)] = (
                f"FOR VALUES FROM ('{day.isoformat()} 00:00:00+00') TO ('{day + timedelta(days=1)} 00:00:00+00')"
            )
        assert day_partitions(empty_conn, "pgqueue", parent) == expected

    assert ensure_partitions(empty_conn, "pgqueue", days_ahead=2) == 0
    assert ensure_partitions(empty_conn, "pgqueue", days_ahead=4) == 2 * len(FINISHED_PARENTS)
    for parent in FINISHED_PARENTS:
        assert partition_name(parent, today + timedelta(days=4)) in day_partitions(empty_conn, "pgqueue", parent)


def test_finished_jobs_land_in_todays_partition(conn: Conn) -> None:
    q = queries_for("pgqueue")
    job_id = scalar(conn, "SELECT pgqueue.enqueue('t', queue => 'p')")
    claimed = conn.execute(
        q["job_claim_one_queue"],
        {**cursor_params(["p"]), "tasks": ["t"], "task_max_attempts": [3], "limit": 1, "lease": 30.0, "worker_id": "w"},
    ).fetchall()
    assert [r[0] for r in claimed] == [job_id]
    assert scalar(conn, "SELECT tableoid::regclass::text FROM pgqueue.jobs WHERE id = %s", [job_id]) == (
        "pgqueue.jobs_live"
    )
    done = conn.execute(
        q["job_record_outcomes"],
        outcome_params([(job_id, claimed[0][7], Outcome(JobState.COMPLETED))]),
    ).fetchall()
    assert done == [(job_id,)]
    where = scalar(conn, "SELECT tableoid::regclass::text FROM pgqueue.jobs WHERE id = %s", [job_id])
    assert where == f"pgqueue.{partition_name('jobs_completed', db_today(conn))}"
    assert scalar(conn, "SELECT count(*) FROM pgqueue.jobs_live") == 0


def test_live_partition_has_exactly_the_documented_indexes(conn: Conn) -> None:
    rows = dict(
        conn.execute(
            "SELECT indexname, indexdef FROM pg_indexes WHERE schemaname = 'pgqueue' AND tablename = 'jobs_live'"
        ).fetchall()
    )
    assert set(rows) == LIVE_INDEXES
    assert "UNIQUE INDEX jobs_live_pkey" in rows["jobs_live_pkey"]
    assert rows["jobs_live_pkey"].endswith("(id)")
    fetch = rows["jobs_live_fetch"]
    assert "(queue, ((- (priority)::integer)), run_at, id)" in fetch
    assert "WHERE (state = 'available'::pgqueue.job_state)" in fetch
    unique = rows["jobs_live_unique_key"]
    assert "UNIQUE INDEX" in unique
    assert "(unique_key)" in unique
    assert "WHERE (unique_key IS NOT NULL)" in unique
    timers = rows["jobs_live_timers"]
    for needle in ("(state, ", "lease_expires_at", "run_at", "'running'", "'scheduled'", "'retryable'"):
        assert needle in timers
    # Jobs without a concurrency key never enter the keyed index.
    keyed = rows["jobs_live_keyed"]
    assert "(queue, state, concurrency_key, id)" in keyed
    assert "WHERE (concurrency_key IS NOT NULL)" in keyed
    # Only jobs with a deadline, while they wait, enter the expiry index.
    expires = rows["jobs_live_expires"]
    assert "(expires_at)" in expires
    assert "expires_at IS NOT NULL" in expires
    assert "'running'" not in expires
    assert scalar(conn, "SELECT count(*) FROM pg_constraint WHERE conname = 'jobs_live_pkey'") == 1


def test_live_partition_storage_parameters(conn: Conn) -> None:
    options = scalar(conn, "SELECT reloptions FROM pg_class WHERE oid = 'pgqueue.jobs_live'::regclass")
    params = dict(opt.split("=", 1) for opt in options)
    assert params["fillfactor"] == "80"
    assert params["autovacuum_vacuum_scale_factor"] == "0"
    assert int(params["autovacuum_vacuum_threshold"]) > 0
    assert params["autovacuum_vacuum_insert_scale_factor"] == "0"
    assert params["autovacuum_analyze_scale_factor"] == "0"
    assert "autovacuum_vacuum_cost_delay" in params


def test_finished_day_partitions_storage_parameters(conn: Conn) -> None:
    rows = conn.execute(
        "SELECT c.relname, c.reloptions FROM pg_inherits i"
        " JOIN pg_class c ON c.oid = i.inhrelid"
        " WHERE i.inhparent = ANY(ARRAY['pgqueue.jobs_completed', 'pgqueue.jobs_discarded',"
        " 'pgqueue.jobs_cancelled']::regclass[])"
    ).fetchall()
    assert len(rows) == 12
    for name, options in rows:
        assert options is not None, name
        params = dict(opt.split("=", 1) for opt in options)
        assert params["fillfactor"] == "100", name
        assert "autovacuum_vacuum_insert_scale_factor" in params, name


@pytest.mark.parametrize("query", ["job_claim_one_queue", "job_claim_many_queues"])
def test_claim_plan_uses_the_fetch_index(conn: Conn, query: str) -> None:
    conn.execute(
        "INSERT INTO pgqueue.jobs_live (task, queue, priority, state, args)"
        " SELECT 't', 'q' || (i % 5), (i % 3)::smallint, 'available', jsonb_build_object('i', i)"
        " FROM generate_series(1, 5000) AS i"
    )
    conn.execute(
        "INSERT INTO pgqueue.jobs_live (task, queue, state, run_at)"
        " SELECT 't', 'q0', 'scheduled', now() + interval '1 hour' FROM generate_series(1, 500)"
    )
    conn.execute("ANALYZE pgqueue.jobs_live")
    params = {
        **cursor_params(["q0"] if query == "job_claim_one_queue" else ["q0", "q1"]),
        "tasks": ["t"],
        "task_max_attempts": [5],
        "limit": 10,
        "lease": 30.0,
        "worker_id": "w",
    }
    plan = "\n".join(r[0] for r in conn.execute(b"EXPLAIN " + queries_for("pgqueue")[query], params))
    assert "Index Scan using jobs_live_fetch on jobs_live" in plan, plan
    assert "Seq Scan on jobs_live" not in plan, plan
    if query == "job_claim_one_queue":
        assert "Sort" not in plan, plan  # the index order is the claim order
