"""Migration 0007 (concurrency_key, expires_at, snoozes, dedupe_key, the unique ledger, a
new enqueue()) on a database that ran version 6: data kept, no table rewritten, and roles
set up before it keep working (producers enqueue, enqueue() stays the owner's SECURITY
DEFINER function with the producer's grant, workers clean the ledger) before the roles
script is run again."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict, make_conninfo

import pgqueue
from pgqueue.maintenance.partitions import ensure_partitions
from pgqueue.roles import render_roles_sql, role_names
from tests.conftest import server_dsn
from tests.integration.test_migrate_scheduled_at import fill_version_5, migrate_to_version, one
from tests.roles_support import denied, drop_roles

Conn = psycopg.Connection[Any]
SCHEMA = "pgqueue"
#: Every column a version 6 job row has.
V6_COLUMNS = (
    "id, run_at, created_at, started_at, finished_at, lease_expires_at, lease_token, attempt, max_attempts,"
    " priority, state::text, queue, task, args, unique_key, worker_id, errors, cancel_requested_at, scheduled_at"
)
NEW_SIGNATURE = (
    "pgqueue.enqueue(text, jsonb, text, integer, timestamptz, text, integer, text, timestamptz, interval, text[], text)"
)


@pytest.fixture
def empty_conn(empty_dsn: str) -> Iterator[Conn]:
    with psycopg.connect(empty_dsn, autocommit=True) as c:
        yield c


def v6_rows(conn: Conn) -> list[tuple[Any, ...]]:
    return conn.execute(sql.SQL("SELECT {} FROM pgqueue.jobs ORDER BY id").format(sql.SQL(V6_COLUMNS))).fetchall()


def storage(conn: Conn) -> dict[str, int]:
    """relfilenode of every table of the jobs tree: a rewrite would change it."""
    return dict(
        conn.execute(
            "SELECT c.relname, c.relfilenode FROM pg_class AS c"
            " WHERE c.relnamespace = 'pgqueue'::regnamespace AND c.relkind = 'r' AND c.relname LIKE 'jobs%'"
        ).fetchall()
    )


def test_version_6_database_migrates_keeps_its_data_and_rewrites_nothing(
    empty_conn: Conn, monkeypatch: pytest.MonkeyPatch
) -> None:
    conn = empty_conn
    migrate_to_version(conn, monkeypatch, 6)
    ids = fill_version_5(conn)
    before, files = v6_rows(conn), storage(conn)
    assert len(before) == len(ids)

    assert migrate_to_version(conn, monkeypatch, 7) == [7]
    assert migrate_to_version(conn, monkeypatch, 7) == []
    assert v6_rows(conn) == before
    assert storage(conn) == files  # catalog-only: no partition was rewritten
    new = conn.execute(
        "SELECT count(*) FILTER (WHERE concurrency_key IS NULL AND expires_at IS NULL AND dedupe_key IS NULL"
        " AND snoozes = 0) FROM pgqueue.jobs"
    ).fetchone()
    assert new == (len(ids),)
    # Day partitions created from now on carry the columns (LIKE the parent, then ATTACH).
    assert ensure_partitions(conn, SCHEMA, days_ahead=4) > 0
    job = one(conn, "SELECT pgqueue.enqueue('t.new', concurrency_key => 'c1', expires_at => now() + interval '1 day')")
    assert conn.execute(
        "SELECT concurrency_key, expires_at > now(), snoozes FROM pgqueue.jobs WHERE id = %s", [job]
    ).fetchone() == ("c1", True, 0)
    assert one(conn, "SELECT pgqueue.cancel_job(%s)::text", [job]) == "cancelled"
    cancelled = conn.execute("SELECT concurrency_key, snoozes FROM pgqueue.jobs_cancelled WHERE id = %s", [job])
    assert cancelled.fetchone() == ("c1", 0)
    # The old seven-argument calls still resolve, positionally and by name.
    assert one(conn, "SELECT pgqueue.enqueue('t.old', '{}', 'default', 0, now(), 'k1', 3)") > 0
    assert one(conn, "SELECT pgqueue.enqueue('t.old', unique_key => 'k1')") == one(
        conn, "SELECT id FROM pgqueue.jobs_live WHERE unique_key = 'k1'"
    )


def test_roles_set_up_before_0007_keep_working_until_the_script_runs_again(
    empty_dsn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    prefix = f"f{uuid.uuid4().hex[:10]}"
    names = role_names(SCHEMA, prefix)
    logins = {kind: f"{prefix}_{kind}_login" for kind in ("producer", "worker")}
    try:
        with psycopg.connect(empty_dsn, autocommit=True) as admin:
            migrate_to_version(admin, monkeypatch, 6)
            # The roles script as release 6 shipped it: producers' column grant without the
            # columns of version 7, and no ledger.
            roles_v6 = render_roles_sql(SCHEMA, prefix)
            assert roles_v6.count(" concurrency_key, expires_at,") == 1
            admin.execute(roles_v6.replace(" concurrency_key, expires_at,", "").encode())
            for kind, login in logins.items():
                admin.execute(
                    sql.SQL("CREATE ROLE {} LOGIN IN ROLE {}").format(
                        sql.Identifier(login), sql.Identifier(getattr(names, kind))
                    )
                )
            assert migrate_to_version(admin, monkeypatch, 7) == [7]  # the roles script is not run again
            fn = admin.execute(
                "SELECT p.prosecdef, p.proowner::regrole::text, has_function_privilege(%s, p.oid, 'EXECUTE'),"
                " has_function_privilege('public', p.oid, 'EXECUTE')"
                " FROM pg_proc AS p WHERE p.oid = %s::regprocedure",
                [names.producer, NEW_SIGNATURE],
            ).fetchone()
            assert fn == (True, names.owner, True, False)
            ledger = admin.execute(
                "SELECT tableowner, has_table_privilege(%s, 'pgqueue.unique_keys', 'SELECT'),"
                " has_table_privilege(%s, 'pgqueue.unique_keys', 'SELECT')"
                " FROM pg_tables WHERE schemaname = 'pgqueue' AND tablename = 'unique_keys'",
                [names.inspector, names.producer],
            ).fetchone()
            assert ledger == (names.owner, True, False)
        app = pgqueue.App(dsn=empty_dsn)

        @app.task(name="t.produced")
        def produced(n: int) -> None:
            return None

        with psycopg.connect(make_conninfo(empty_dsn, user=logins["producer"]), autocommit=True) as producer:
            # The plain INSERT and COPY of the Python API name the new columns.
            producer.execute(
                "INSERT INTO pgqueue.jobs_live (task, queue, run_at, scheduled_at, concurrency_key, expires_at, state)"
                " VALUES ('t.produced', 'default', now(), now(), 'c', now() + interval '1 hour', 'available')"
            )
            produced.enqueue(producer, n=1)
            app.enqueue_many(producer, [produced.job(n=i) for i in range(2, 5)])
            # enqueue() is still SECURITY DEFINER: the ledger is written as its owner.
            first = one(producer, "SELECT pgqueue.enqueue('t.produced', unique_key => 'u', unique_period => '1 hour')")
            again = one(producer, "SELECT pgqueue.enqueue('t.produced', unique_key => 'u', unique_period => '1 hour')")
            assert again == first
            rules = produced.options(unique=pgqueue.Unique(period=60), expires_in=600, concurrency_key="c")
            assert rules.enqueue(producer, n=9) == rules.enqueue(producer, n=9)  # the Python API's path
            with denied:
                producer.execute("SELECT * FROM pgqueue.unique_keys")
        with psycopg.connect(make_conninfo(empty_dsn, user=logins["worker"]), autocommit=True) as worker:
            assert worker.execute("DELETE FROM pgqueue.unique_keys WHERE key = 'u'").rowcount == 1
        with psycopg.connect(empty_dsn, autocommit=True) as admin:
            assert one(admin, "SELECT count(*) FROM pgqueue.jobs") == 7
    finally:
        with psycopg.connect(server_dsn(), autocommit=True) as admin:
            admin.execute(
                sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(
                    sql.Identifier(str(conninfo_to_dict(empty_dsn)["dbname"]))
                )
            )
            drop_roles(admin, [*logins.values(), *names.all()])
