"""Migration 0006 (jobs.scheduled_at) on a database that ran version 5: data kept, live
rows filled (a retried cron job gets its tick back from cron_ticks), finished rows read as
their run_at, and producers keep enqueueing before the roles script is run again."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from datetime import datetime
from typing import Any

import psycopg
import pytest
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict, make_conninfo

import pgqueue
import pgqueue.migrate
from pgqueue import ops
from pgqueue._db.jobs import JobsDB
from pgqueue._db.sql import load_migrations
from pgqueue.maintenance.partitions import ensure_partitions
from pgqueue.migrate import current_version, migrate
from pgqueue.models import JobState, Outcome
from pgqueue.roles import render_roles_sql, role_names
from tests.conftest import server_dsn
from tests.roles_support import drop_roles

Conn = psycopg.Connection[Any]
SCHEMA = "pgqueue"
#: Every column a version 5 job row has (all but scheduled_at).
V5_COLUMNS = (
    "id, run_at, created_at, started_at, finished_at, lease_expires_at, lease_token, attempt, max_attempts,"
    " priority, state::text, queue, task, args, unique_key, worker_id, errors, cancel_requested_at"
)


def migrate_to_version(conn: Conn, monkeypatch: pytest.MonkeyPatch, version: int) -> list[int]:
    """Install the schema as release ``version`` left it: the same migrate(), fewer migrations."""
    with monkeypatch.context() as patch:
        older = [m for m in load_migrations() if m.version <= version]
        patch.setattr(pgqueue.migrate, "load_migrations", lambda: older)
        applied = migrate(conn, SCHEMA)
    assert current_version(conn, SCHEMA) == version
    return applied


def migrate_to_version_5(conn: Conn, monkeypatch: pytest.MonkeyPatch) -> None:
    assert migrate_to_version(conn, monkeypatch, 5) == [1, 2, 3, 4, 5]


def one(conn: Conn, query: Any, params: Any = None) -> Any:
    row = conn.execute(query, params).fetchone()
    assert row is not None
    return row[0]


def fill_version_5(conn: Conn) -> dict[str, int]:
    """Live and finished jobs written the way release 5 writes them; their ids by role."""
    ids: dict[str, int] = {}
    ids["available"] = one(conn, "SELECT pgqueue.enqueue('t.plain', run_at => now() - interval '5 minutes')")
    ids["scheduled"] = one(conn, "SELECT pgqueue.enqueue('t.later', run_at => now() + interval '1 day')")
    ids["running"] = one(
        conn,
        "INSERT INTO pgqueue.jobs_live (task, queue, state, run_at, attempt, max_attempts, started_at,"
        " lease_token, lease_expires_at, worker_id)"
        " VALUES ('t.busy', 'default', 'running', now() - interval '1 minute', 1, 3, now(),"
        " gen_random_uuid(), now() + interval '1 minute', 'w1') RETURNING id",
    )
    # A cron job that failed once: its run_at is the retry time, its tick is in cron_ticks.
    conn.execute(
        "INSERT INTO pgqueue.cron_schedules (name, task, cron, timezone, queue, missed, max_catchup, grace_seconds)"
        " VALUES ('nightly', 't.cron', '0 3 * * *', 'UTC', 'default', 'latest', 100, 60)"
    )
    ids["cron"] = one(
        conn,
        "WITH fired AS (INSERT INTO pgqueue.cron_ticks (schedule, tick, job_id)"
        " VALUES ('nightly', date_trunc('day', now()) - interval '21 hours', nextval('pgqueue.jobs_id_seq'))"
        " RETURNING tick, job_id)"
        " INSERT INTO pgqueue.jobs_live (id, task, queue, state, run_at, unique_key, attempt, max_attempts, errors)"
        " SELECT job_id, 't.cron', 'default', 'retryable', now() + interval '30 seconds',"
        " 'cron:nightly:' || to_char(tick AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS\"Z\"'), 1, 3,"
        ' \'[{"type": "E", "message": "m", "attempt": 1}]\' FROM fired RETURNING id',
    )
    for state in ("completed", "discarded", "cancelled"):
        ids[state] = one(
            conn,
            "INSERT INTO pgqueue.jobs (task, queue, state, run_at, attempt, max_attempts, finished_at)"
            " VALUES (%s, 'default', %s, now() - interval '1 hour', 1, 3, now()) RETURNING id",
            [f"t.{state}", state],
        )
    return ids


def v5_rows(conn: Conn) -> list[tuple[Any, ...]]:
    return conn.execute(sql.SQL("SELECT {} FROM pgqueue.jobs ORDER BY id").format(sql.SQL(V5_COLUMNS))).fetchall()


def scheduled(conn: Conn) -> dict[int, tuple[datetime | None, datetime]]:
    return {r[0]: (r[1], r[2]) for r in conn.execute("SELECT id, scheduled_at, run_at FROM pgqueue.jobs")}


@pytest.fixture
def empty_conn(empty_dsn: str) -> Iterator[Conn]:
    with psycopg.connect(empty_dsn, autocommit=True) as c:
        yield c


async def test_version_5_database_migrates_and_keeps_its_data(
    empty_conn: Conn, empty_dsn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    conn = empty_conn
    migrate_to_version_5(conn, monkeypatch)
    ids = fill_version_5(conn)
    tick: datetime = one(conn, "SELECT tick FROM pgqueue.cron_ticks WHERE job_id = %s", [ids["cron"]])
    before = v5_rows(conn)

    assert migrate_to_version(conn, monkeypatch, 6) == [6]
    assert migrate_to_version(conn, monkeypatch, 6) == []
    assert v5_rows(conn) == before  # every other column as it was

    values = scheduled(conn)
    for role in ("available", "scheduled", "running"):
        assert values[ids[role]][0] == values[ids[role]][1], role  # live: its run_at
    assert values[ids["cron"]][0] == tick  # not the retry time in run_at
    assert values[ids["cron"]][1] > tick
    for role in ("completed", "discarded", "cancelled"):
        assert values[ids[role]][0] is None, role  # finished rows are not rewritten...
    # This release's code needs the later versions too; they keep what 0006 did.
    assert migrate(conn, SCHEMA) == [m.version for m in load_migrations() if m.version > 6]
    assert scheduled(conn) == values
    for role in ("completed", "discarded", "cancelled"):
        assert ops.get_job(conn, SCHEMA, ids[role]).scheduled_at == values[ids[role]][1]  # ...and read as run_at
    assert ops.get_job(conn, SCHEMA, ids["cron"]).scheduled_at == tick

    # Day partitions created from now on carry the column too (LIKE the parent, then ATTACH).
    assert ensure_partitions(conn, SCHEMA, days_ahead=4) > 0
    # Once at the current version (what today's worker needs), the retried cron job runs
    # again and finishes with its tick.
    migrate(conn, SCHEMA)
    conn.execute("UPDATE pgqueue.jobs_live SET run_at = now(), state = 'available' WHERE id = %s", [ids["cron"]])
    db = JobsDB(SCHEMA)
    async with await psycopg.AsyncConnection.connect(empty_dsn, autocommit=True) as aconn:
        jobs, _ = await db.claim(
            aconn, queues=["default"], task_limits={"t.cron": 3}, limit=5, lease=60.0, worker_id="test"
        )
        assert [(j.id, j.scheduled_at) for j in jobs] == [(ids["cron"], tick)]
        done = await db.record_outcomes(aconn, [(jobs[0].id, jobs[0].lease_token, Outcome(JobState.COMPLETED))])
        assert done == {ids["cron"]}
    assert scheduled(conn)[ids["cron"]][0] == tick
    assert one(conn, "SELECT state::text FROM pgqueue.jobs WHERE id = %s", [ids["cron"]]) == "completed"


def test_producers_keep_enqueueing_after_0006_before_roles_run_again(
    empty_dsn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    prefix = f"s{uuid.uuid4().hex[:10]}"
    names = role_names(SCHEMA, prefix)
    login = f"{prefix}_producer_login"
    try:
        with psycopg.connect(empty_dsn, autocommit=True) as admin:
            migrate_to_version_5(admin, monkeypatch)
            # The roles script as release 5 shipped it: producers' column INSERT grant
            # without scheduled_at.
            roles_v5 = render_roles_sql(SCHEMA, prefix)
            assert roles_v5.count("run_at, scheduled_at,") == 1
            # (And without the columns of later versions.)
            roles_v5 = roles_v5.replace(" concurrency_key, expires_at,", "")
            admin.execute(roles_v5.replace("run_at, scheduled_at,", "run_at,").encode())
            admin.execute(
                sql.SQL("CREATE ROLE {} LOGIN IN ROLE {}").format(*map(sql.Identifier, (login, names.producer)))
            )
            assert migrate_to_version(admin, monkeypatch, 6) == [6]  # the roles script is not run again
            # Nor after the later versions this release's enqueue needs (each forwards
            # the producers' column grants it adds).
            assert migrate(admin, SCHEMA) == [m.version for m in load_migrations() if m.version > 6]
        app = pgqueue.App(dsn=empty_dsn)

        @app.task(name="t.produced")
        def produced(n: int) -> None:
            return None

        with psycopg.connect(make_conninfo(empty_dsn, user=login), autocommit=True) as producer:
            produced.enqueue(producer, n=1)  # INSERT: needs INSERT (scheduled_at)
            app.enqueue_many(producer, [produced.job(n=i) for i in range(2, 5)])  # COPY
            one(producer, "SELECT pgqueue.enqueue('t.produced', unique_key => 'k')")  # still SECURITY DEFINER
        with psycopg.connect(empty_dsn, autocommit=True) as admin:
            values = scheduled(admin)
            assert len(values) == 5
            assert all(s is not None and s == run_at for s, run_at in values.values()), values
    finally:
        with psycopg.connect(server_dsn(), autocommit=True) as admin:
            admin.execute(
                sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(
                    sql.Identifier(str(conninfo_to_dict(empty_dsn)["dbname"]))
                )
            )
            drop_roles(admin, [login, *names.all()])
