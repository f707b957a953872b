"""Least-privilege roles, setup, producer and inspector: each role can do its job and
nothing the others do (the worker role and what leaks: test_roles_worker.py).
"""

from __future__ import annotations

import asyncio
import json
import uuid
from datetime import date, timedelta
from typing import LiteralString

import psycopg
import pytest
from psycopg import sql
from psycopg.conninfo import make_conninfo
from typer.testing import CliRunner

import pgqueue
from pgqueue._db.jobs import outcome_params
from pgqueue.cli import app as cli_app
from pgqueue.maintenance.partitions import partition_name
from pgqueue.migrate import migrate
from pgqueue.models import JobState, Outcome
from pgqueue.roles import apply_roles, render_roles_sql, role_names
from tests.conftest import async_wait_until, server_dsn
from tests.roles_support import (
    SCHEMA,
    Q,
    RolesDB,
    claim_params,
    denied,
    drop_roles,
    make_app,
    scalar,
)

# -- setup -------------------------------------------------------------------------------


def test_roles_are_nologin_groups_and_the_owner_owns_every_object(rdb: RolesDB) -> None:
    with rdb.connect() as admin:
        rows = admin.execute(
            "SELECT rolname, rolcanlogin, rolsuper, rolcreaterole, rolcreatedb FROM pg_roles WHERE rolname = ANY(%s)",
            [list(rdb.names.all())],
        ).fetchall()
        assert sorted(rows) == sorted((name, False, False, False, False) for name in rdb.names.all())
        owner = rdb.names.owner
        assert scalar(admin, "SELECT pg_get_userbyid(nspowner) FROM pg_namespace WHERE nspname = %s", [SCHEMA]) == owner
        relations = admin.execute(
            "SELECT relname, pg_get_userbyid(relowner) FROM pg_class"
            " WHERE relnamespace = %s::regnamespace AND relkind IN ('r', 'p', 'v', 'm', 'S')",
            [SCHEMA],
        ).fetchall()
        functions = admin.execute(
            "SELECT proname, pg_get_userbyid(proowner) FROM pg_proc WHERE pronamespace = %s::regnamespace", [SCHEMA]
        ).fetchall()
        types = admin.execute(
            "SELECT typname, pg_get_userbyid(typowner) FROM pg_type"
            " WHERE typnamespace = %s::regnamespace AND typtype = 'e'",
            [SCHEMA],
        ).fetchall()
        assert {"jobs", "jobs_live", "migrations", "jobs_id_seq"} <= {r[0] for r in relations}
        assert {"enqueue", "create_partition", "drop_partition"} <= {f[0] for f in functions}
        for name, obj_owner in [*relations, *functions, *types]:
            assert obj_owner == owner, f"{name} is owned by {obj_owner}"


def test_applying_roles_again_is_idempotent_and_keeps_working(rdb: RolesDB) -> None:
    with rdb.connect() as admin:
        apply_roles(admin, SCHEMA, rdb.names.owner.removesuffix("_owner"))
        apply_roles(admin, SCHEMA, rdb.names.owner.removesuffix("_owner"))
    with rdb.connect("producer") as producer:
        assert scalar(producer, "SELECT pgqueue.enqueue('work.record', '{\"n\": 1}', queue => 'rq')") == 1
    with rdb.connect("inspector") as inspector:
        assert scalar(inspector, "SELECT count(*) FROM pgqueue.jobs") == 1


def test_print_roles_sql_runs_in_psql_style_and_creates_the_same_grants(empty_dsn: str) -> None:
    prefix = f"p{uuid.uuid4().hex[:10]}"
    names = role_names(SCHEMA, prefix)
    result = CliRunner().invoke(cli_app, ["migrate", "--print-roles-sql", "--role-prefix", prefix])
    assert result.exit_code == 0, result.output
    text = result.stdout
    assert text.startswith("BEGIN;")
    assert text.rstrip().endswith("COMMIT;")
    assert f'"{names.producer}"' in text
    assert "{" + "schema}" not in text  # every placeholder was filled
    try:
        with psycopg.connect(empty_dsn, autocommit=True) as conn:
            migrate(conn, SCHEMA)
            conn.execute(text.encode())  # what `psql -f` would run
            grants = conn.execute(
                "SELECT has_function_privilege(%s, 'pgqueue.enqueue'::regproc::regprocedure, 'EXECUTE'),"
                " has_table_privilege(%s, 'pgqueue.jobs', 'SELECT'),"
                " has_table_privilege(%s, 'pgqueue.jobs_live', 'UPDATE')",
                [names.producer, names.inspector, names.worker],
            ).fetchone()
            assert grants == (True, True, True)
    finally:
        with psycopg.connect(empty_dsn, autocommit=True) as conn:
            conn.execute("DROP SCHEMA pgqueue CASCADE")
            for role in names.all():
                conn.execute(sql.SQL("DROP OWNED BY {}").format(sql.Identifier(role)))
        with psycopg.connect(server_dsn(), autocommit=True) as admin:
            drop_roles(admin, list(names.all()))


def test_cli_migrate_create_roles_then_as_owner(empty_dsn: str) -> None:
    prefix = f"c{uuid.uuid4().hex[:10]}"
    names = role_names(SCHEMA, prefix)
    login = f"{prefix}_ops"
    runner = CliRunner()
    try:
        result = runner.invoke(cli_app, ["migrate", "--dsn", empty_dsn, "--create-roles", "--role-prefix", prefix])
        assert result.exit_code == 0, result.output
        assert names.worker in result.output
        with psycopg.connect(empty_dsn, autocommit=True) as conn:
            conn.execute(sql.SQL("CREATE ROLE {} LOGIN IN ROLE {}").format(*map(sql.Identifier, (login, names.owner))))
            conn.execute(sql.SQL("REVOKE CREATE ON DATABASE {} FROM PUBLIC").format(sql.Identifier(conn.info.dbname)))
            today: date = scalar(conn, "SELECT (now() AT TIME ZONE 'UTC')::date")
            missing = partition_name("jobs_cancelled", today + timedelta(days=2))
            conn.execute(sql.SQL("DROP TABLE pgqueue.{}").format(sql.Identifier(missing)))
        # A non-superuser member of the owner role maintains the schema (no CREATE on the
        # database needed); what it creates belongs to the owner role, not to the login.
        owner_dsn = make_conninfo(empty_dsn, user=login)
        result = runner.invoke(
            cli_app,
            ["migrate", "--dsn", owner_dsn, "--as-owner", "--role-prefix", prefix, "--max-payload-bytes", "65536"],
        )
        assert result.exit_code == 0, result.output
        with psycopg.connect(empty_dsn, autocommit=True) as conn:
            assert scalar(conn, "SELECT pg_get_userbyid(relowner) FROM pg_class WHERE relname = %s", [missing]) == (
                names.owner
            )
            assert "65536" in scalar(
                conn, "SELECT pg_get_constraintdef(oid) FROM pg_constraint WHERE conname = 'jobs_args_size'"
            )
    finally:
        with psycopg.connect(empty_dsn, autocommit=True) as conn:
            conn.execute("DROP SCHEMA IF EXISTS pgqueue CASCADE")
            for role in names.all():
                conn.execute(sql.SQL("DROP OWNED BY {}").format(sql.Identifier(role)))
        with psycopg.connect(server_dsn(), autocommit=True) as admin:
            drop_roles(admin, [login, *names.all()])


@pytest.mark.parametrize("prefix", ["x; DROP TABLE canary; --", 'a"b', "$$", "Upper", "pg_owner", "\uff58", "a\n"])
def test_hostile_role_prefixes_are_refused(prefix: str) -> None:
    with pytest.raises(pgqueue.ConfigError, match="role prefix"):
        role_names(SCHEMA, prefix)
    with pytest.raises(pgqueue.ConfigError):
        render_roles_sql(SCHEMA, prefix)
    result = CliRunner().invoke(cli_app, ["migrate", "--print-roles-sql", "--role-prefix", prefix])
    assert result.exit_code == 1
    assert "role prefix" in result.output


# -- producer ----------------------------------------------------------------------------


async def test_producer_enqueues_through_sql_and_the_python_api(rdb: RolesDB) -> None:
    app = make_app(rdb.dsn("producer"))
    task = app.tasks["work.record"]
    with rdb.connect("producer") as producer:
        via_sql = scalar(producer, "SELECT pgqueue.enqueue('work.record', '{\"n\": 1}', queue => 'rq')")
        keyed = scalar(
            producer, "SELECT pgqueue.enqueue('work.record', '{\"n\": 2}', queue => 'rq', unique_key => 'k')"
        )
        assert scalar(producer, "SELECT pgqueue.enqueue('work.record', queue => 'rq', unique_key => 'k')") == keyed
        with producer.transaction():
            plain = task.enqueue(producer, n=3)
            task.options(delay=3600).enqueue(producer, n=4)
            dedup = task.options(unique_key="k").enqueue(producer, n=5)
        assert dedup == keyed
        count = app.enqueue_many(
            producer, [task.job(n=10 + i) for i in range(50)] + [task.options(unique_key="k2").job(n=99)]
        )
        assert count == 51
    async with await psycopg.AsyncConnection.connect(rdb.dsn("producer"), autocommit=True) as aconn:
        async_id = await task.enqueue_async(aconn, n=6)
        assert await app.enqueue_many_async(aconn, [task.job(n=7)]) == 1
    with rdb.connect() as admin:
        rows = dict(admin.execute("SELECT (args->>'n')::int, state::text FROM pgqueue.jobs").fetchall())
        assert len(rows) == 2 + 2 + 51 + 2
        assert (rows[3], rows[4], rows[6]) == ("available", "scheduled", "available")
        assert scalar(admin, "SELECT count(*) FROM pgqueue.jobs WHERE id = ANY(%s)", [[via_sql, plain, async_id]]) == 3


async def test_producer_waits_for_results_without_reading_jobs(rdb: RolesDB) -> None:
    app = make_app(rdb.dsn("producer"))
    task = app.tasks["work.record"]
    with rdb.connect("producer") as producer:
        done, failed = task.enqueue(producer, n=1), task.enqueue(producer, n=2)
        waits = [asyncio.ensure_future(h.result_async(timeout=60)) for h in (done, failed)]
        with rdb.connect("worker") as worker:  # the worker role claims and completes them
            await async_wait_until(lambda: scalar(worker, "SELECT count(*) FROM pgqueue.jobs_live WHERE awaited") == 2)
            claimed = {r[0]: r[7] for r in worker.execute(Q["job_claim_one_queue"], claim_params(["work.record"]))}
            error = {"attempt": 1, "type": "builtins.KeyError", "message": "'k'", "traceback": "secret tb"}
            outcomes = [
                (done, claimed[done], Outcome(JobState.COMPLETED, result=json.dumps({"rows": 7}))),
                (failed, claimed[failed], Outcome(JobState.DISCARDED, error=error)),
            ]
            worker.execute(Q["job_record_outcomes"], outcome_params(outcomes))
        ok, failure = await asyncio.gather(*waits, return_exceptions=True)
        assert ok == {"rows": 7}
        assert isinstance(failure, pgqueue.JobFailed)
        assert (failure.error_type, failure.error_message) == ("builtins.KeyError", "'k'")
        assert app.result(producer, done) == {"rows": 7}
        for statement in [
            "SELECT result FROM pgqueue.jobs",
            "SELECT errors FROM pgqueue.jobs",
            "UPDATE pgqueue.jobs_live SET state = 'available'",
        ]:
            with denied:
                producer.execute(statement)
    waiter = app._waiter
    assert waiter is not None
    waiter.close()


def test_producer_cannot_read_change_or_claim_jobs(rdb: RolesDB) -> None:
    with rdb.connect() as admin:
        job_id = scalar(
            admin, "SELECT pgqueue.enqueue('work.record', '{\"n\": 1, \"secret\": \"s3cr3t\"}', queue => 'rq')"
        )
    with rdb.connect("producer") as producer:
        attempts: list[LiteralString | bytes] = [
            "SELECT args FROM pgqueue.jobs_live",
            "SELECT errors FROM pgqueue.jobs_live",
            "SELECT unique_key FROM pgqueue.jobs_live",
            "SELECT * FROM pgqueue.jobs",
            "SELECT count(*) FROM pgqueue.jobs_completed",
            "SELECT * FROM pgqueue.migrations",
            "UPDATE pgqueue.jobs_live SET priority = 5",
            "UPDATE pgqueue.jobs_live SET args = '{}'",
            "DELETE FROM pgqueue.jobs_live",
            "DELETE FROM pgqueue.jobs",
            "TRUNCATE pgqueue.jobs_live",
            "INSERT INTO pgqueue.jobs_live (task, queue, state, attempt) VALUES ('t', 'rq', 'available', 9)",
            "INSERT INTO pgqueue.jobs_live (task, queue, state, lease_token, lease_expires_at)"
            " VALUES ('t', 'rq', 'running', gen_random_uuid(), now())",
            "INSERT INTO pgqueue.jobs (task, queue, state, finished_at) VALUES ('t', 'rq', 'completed', now())",
            "SELECT pgqueue.create_partition('jobs_completed', current_date + 5)",
            "SELECT pgqueue.cancel_job(1)",
            "CREATE TABLE pgqueue.intruder (x int)",
        ]
        for statement in attempts:
            with denied:
                producer.execute(statement)
        with denied:
            producer.execute(Q["job_claim_one_queue"], claim_params(["work.record"]))
    with rdb.connect() as admin:
        assert scalar(admin, "SELECT state::text FROM pgqueue.jobs WHERE id = %s", [job_id]) == "available"
        assert scalar(admin, "SELECT args->>'secret' FROM pgqueue.jobs WHERE id = %s", [job_id]) == "s3cr3t"
        assert scalar(admin, "SELECT count(*) FROM pgqueue.jobs") == 1


# -- inspector ---------------------------------------------------------------------------


def test_inspector_reads_everything_and_changes_nothing(rdb: RolesDB) -> None:
    with rdb.connect() as admin:
        job_id = scalar(admin, "SELECT pgqueue.enqueue('work.record', '{\"n\": 1}', queue => 'rq')")
        relations = [
            r[0]
            for r in admin.execute(
                "SELECT relname FROM pg_class WHERE relnamespace = %s::regnamespace AND relkind IN ('r', 'p', 'v')",
                [SCHEMA],
            )
        ]
    app = make_app(rdb.dsn("inspector"))
    with rdb.connect("inspector") as inspector:
        for rel in relations:
            inspector.execute(sql.SQL("SELECT * FROM pgqueue.{} LIMIT 1").format(sql.Identifier(rel)))
        assert scalar(inspector, "SELECT args FROM pgqueue.jobs WHERE id = %s", [job_id]) == {"n": 1}
        for statement in [
            "SELECT pgqueue.enqueue('work.record')",
            "INSERT INTO pgqueue.jobs_live (task, queue, state) VALUES ('t', 'rq', 'available')",
            "UPDATE pgqueue.jobs_live SET priority = 1",
            "DELETE FROM pgqueue.jobs_live",
            "SELECT pgqueue.create_partition('jobs_completed', current_date + 5)",
            "CREATE TABLE pgqueue.intruder (x int)",
        ]:
            with denied:
                inspector.execute(statement)
        with denied:
            inspector.execute(Q["job_claim_one_queue"], claim_params(["work.record"]))
        with pytest.raises(pgqueue.EnqueueError, match="may not enqueue"):
            app.tasks["work.record"].enqueue(inspector, n=2)
        with pytest.raises(pgqueue.EnqueueError, match="may not enqueue"):
            app.enqueue_many(inspector, [app.tasks["work.record"].job(n=3)])
    with rdb.connect() as admin:
        assert scalar(admin, "SELECT count(*) FROM pgqueue.jobs") == 1
