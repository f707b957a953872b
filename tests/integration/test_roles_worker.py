"""Least-privilege roles, the worker: a real Worker runs end to end under the worker role
(claims, retries, the scheduler, cron, partitions, retention), but has no DDL; and what
leaks outside the job row (NOTIFY payloads, advisory lock keys, pg_stat_activity).
"""

from __future__ import annotations

import asyncio
import re
import uuid
from datetime import date, timedelta
from typing import Any

import psycopg
import pytest
from psycopg import sql

import pgqueue
from pgqueue import ops
from pgqueue._db.sql import channel_name
from pgqueue.maintenance.partitions import partition_name
from tests.conftest import async_wait_until, running_worker
from tests.roles_support import (
    REPO,
    SCHEMA,
    Conn,
    RolesDB,
    create_old_partition,
    denied,
    make_app,
    scalar,
)

# -- worker ------------------------------------------------------------------------------


async def test_worker_role_runs_jobs_end_to_end_with_maintenance_and_partitions(rdb: RolesDB) -> None:
    with rdb.connect() as admin:
        today: date = scalar(admin, "SELECT (now() AT TIME ZONE 'UTC')::date")
        ahead = [partition_name(p, today + timedelta(days=2)) for p in ("jobs_completed", "jobs_discarded")]
        for child in ahead:
            admin.execute(sql.SQL("DROP TABLE pgqueue.{}").format(sql.Identifier(child)))
        expired = create_old_partition(admin, rdb.names.owner, today - timedelta(days=3))
    ran: list[int] = []
    app = make_app(rdb.dsn("worker"), ran)
    failing_once: list[int] = []

    @app.task(name="work.flaky", queue="rq", retry=pgqueue.Backoff(base=0.05, jitter=False))
    def flaky(n: int) -> None:
        failing_once.append(n)
        if len(failing_once) == 1:
            raise RuntimeError("first attempt fails")

    ticks: list[int] = []

    @app.periodic(cron="* * * * * *", name="roles-every-second")
    @app.task(name="work.tick", queue="rq")
    def tick() -> None:
        ticks.append(1)

    with rdb.connect("producer") as producer:
        record = make_app(rdb.dsn("producer")).tasks["work.record"]
        for n in range(20):
            record.enqueue(producer, n=n)
        record.options(delay=0.3).enqueue(producer, n=100)  # scheduled: maintenance promotes it
        scalar(producer, "SELECT pgqueue.enqueue('work.flaky', '{\"n\": 7}', queue => 'rq')")
    async with running_worker(app, queues=("rq",)):
        await async_wait_until(lambda: len(ran) == 21 and len(failing_once) == 2 and len(ticks) >= 2, timeout=30)
    with rdb.connect() as admin:
        states = dict(
            admin.execute(
                "SELECT state::text, count(*) FROM pgqueue.jobs WHERE task <> 'work.tick' GROUP BY 1"
            ).fetchall()
        )
        assert states == {"completed": 22}
        assert scalar(admin, "SELECT count(*) FROM pgqueue.cron_ticks WHERE schedule = 'roles-every-second'") >= 2
        assert scalar(admin, "SELECT jsonb_array_length(errors) FROM pgqueue.jobs WHERE task = 'work.flaky'") == 1
        # The worker re-created the partitions through the owner's function.
        owners = admin.execute(
            "SELECT relname, pg_get_userbyid(relowner) FROM pg_class WHERE relname = ANY(%s)", [ahead]
        ).fetchall()
        assert sorted(owners) == sorted((child, rdb.names.owner) for child in ahead)
        # Retention dropped the expired day partition, also through the owner's function.
        assert scalar(admin, "SELECT to_regclass(%s)", [f"pgqueue.{expired}"]) is None
    assert sorted(ran) == [*range(20), 100]


async def test_worker_role_claims_under_limits_and_may_not_change_them(rdb: RolesDB) -> None:
    ran: list[int] = []
    app = make_app(rdb.dsn("worker"), ran)
    with rdb.connect("owner") as owner:
        ops.add_queue(owner, SCHEMA, "rq")
        ops.set_queue_limits(owner, SCHEMA, "rq", concurrency=2, rate=(100, 60), key_concurrency=1)
        ops.set_task_limit(owner, SCHEMA, "work.record", 3)
    with rdb.connect("producer") as producer:
        record = make_app(rdb.dsn("producer")).tasks["work.record"]
        for n in range(10):
            record.enqueue(producer, n=n)
    async with running_worker(app, queues=("rq",)):
        await async_wait_until(lambda: len(ran) == 10, timeout=30)
    with rdb.connect() as admin:
        assert scalar(admin, "SELECT count(*) FROM pgqueue.jobs WHERE state = 'completed'") == 10
        assert scalar(admin, "SELECT sum(n) FROM pgqueue.rate_starts") == 10
    with rdb.connect("worker") as worker:
        with denied:
            ops.pause_queue(worker, SCHEMA, "rq")
        with denied:
            ops.set_task_limit(worker, SCHEMA, "work.record", None)


def test_partitions_made_through_the_function_match_the_owners(rdb: RolesDB) -> None:
    with rdb.connect() as admin:
        today: date = scalar(admin, "SELECT (now() AT TIME ZONE 'UTC')::date")
        made_by_python = partition_name("jobs_completed", today)
        target = today + timedelta(days=9)
    with rdb.connect("worker") as worker:
        assert scalar(worker, "SELECT pgqueue.create_partition('jobs_completed', %s)", [target]) is True
        assert scalar(worker, "SELECT pgqueue.create_partition('jobs_completed', %s)", [target]) is False
    made_by_function = partition_name("jobs_completed", target)

    def shape(admin: Conn, rel: str) -> tuple[Any, ...]:
        options = scalar(admin, "SELECT reloptions FROM pg_class WHERE relname = %s", [rel])
        checks = admin.execute(
            "SELECT conname, pg_get_constraintdef(oid) FROM pg_constraint WHERE conrelid = %s::regclass ORDER BY 1",
            [f"pgqueue.{rel}"],
        ).fetchall()
        return (sorted(options), checks)

    with rdb.connect() as admin:
        assert shape(admin, made_by_function) == shape(admin, made_by_python)
        bound = scalar(
            admin, "SELECT pg_get_expr(relpartbound, oid) FROM pg_class WHERE relname = %s", [made_by_function]
        )
        assert target.isoformat() in bound
        assert (target + timedelta(days=1)).isoformat() in bound


def test_worker_role_has_no_ddl_and_the_partition_functions_refuse_hostile_arguments(rdb: RolesDB) -> None:
    with rdb.connect() as admin:
        today: date = scalar(admin, "SELECT (now() AT TIME ZONE 'UTC')::date")
        admin.execute("CREATE TABLE pgqueue.canary (x int)")
        admin.execute("INSERT INTO pgqueue.canary VALUES (1)")
        admin.execute(sql.SQL("ALTER TABLE pgqueue.canary OWNER TO {}").format(sql.Identifier(rdb.names.owner)))
    with rdb.connect("worker") as worker:
        for statement in [
            "DROP TABLE pgqueue.jobs",
            "DROP TABLE pgqueue.canary",
            "DROP SCHEMA pgqueue CASCADE",
            "ALTER TABLE pgqueue.jobs ADD COLUMN x int",
            "ALTER TABLE pgqueue.jobs_live DROP CONSTRAINT jobs_args_size",
            "ALTER FUNCTION pgqueue.enqueue SECURITY INVOKER",
            "CREATE TABLE pgqueue.intruder (x int)",
            "CREATE FUNCTION pgqueue.f() RETURNS int LANGUAGE sql AS 'SELECT 1'",
            "TRUNCATE pgqueue.jobs_live",
            "DELETE FROM pgqueue.canary",
            "UPDATE pgqueue.migrations SET version = 99",
            "SELECT pgqueue.cancel_job(1)",
        ]:
            with denied:
                worker.execute(statement)
        worker.execute("GRANT SELECT ON pgqueue.jobs TO PUBLIC")  # a no-op: only a warning
        hostile: list[tuple[str, Any]] = [
            ("SELECT pgqueue.create_partition('jobs_live', %s)", today),
            ("SELECT pgqueue.create_partition('canary', %s)", today),
            ("SELECT pgqueue.create_partition('jobs_completed; DROP TABLE pgqueue.canary; --', %s)", today),
            ("SELECT pgqueue.create_partition('jobs_completed', %s)", today + timedelta(days=400)),
            ("SELECT pgqueue.create_partition('jobs_completed', %s)", today - timedelta(days=30)),
            ("SELECT pgqueue.drop_partition(%s)", "canary"),
            ("SELECT pgqueue.drop_partition(%s)", "jobs_live"),
            ("SELECT pgqueue.drop_partition(%s)", partition_name("jobs_completed", today)),
            ("SELECT pgqueue.drop_partition(%s)", partition_name("jobs_completed", today) + '"; DROP TABLE x; --'),
        ]
        for statement, arg in hostile:
            with pytest.raises(psycopg.errors.InvalidParameterValue):
                worker.execute(statement, [arg])
    with rdb.connect() as admin:
        assert scalar(admin, "SELECT count(*) FROM pgqueue.canary") == 1
        assert scalar(admin, "SELECT has_table_privilege('public', 'pgqueue.jobs', 'SELECT')") is False
        old = create_old_partition(admin, rdb.names.owner, today - timedelta(days=3))
    with rdb.connect("worker") as worker:
        assert scalar(worker, "SELECT pgqueue.drop_partition(%s)", [old]) is True  # retention's path
    with rdb.connect() as admin:
        assert scalar(admin, "SELECT to_regclass(%s)", [f"pgqueue.{old}"]) is None
        assert scalar(admin, "SELECT to_regclass('pgqueue.jobs') IS NOT NULL") is True


# -- what leaks ---------------------------------------------------------------------------


def _lock_keys(conn: Conn) -> dict[int, str]:
    """Every advisory lock key pgqueue's code can take for SCHEMA, from the lock names
    written in its source (``pgqueue.<purpose>:<schema>``)."""
    purposes: set[str] = set()
    for path in [*(REPO / "pgqueue").rglob("*.py"), *(REPO / "sql").rglob("*.sql")]:
        purposes.update(re.findall(r"pgqueue\.([a-z_]+):", path.read_text("utf-8")))
    assert {"maintenance", "partitions", "vacuum", "migrate"} <= purposes
    keys = {}
    for purpose in purposes:
        name = f"pgqueue.{purpose}:{SCHEMA}"
        keys[int(scalar(conn, "SELECT hashtextextended(%s, 0)", [name]))] = name
    return keys


async def test_notify_payloads_lock_keys_and_activity_carry_no_job_data(rdb: RolesDB) -> None:
    secret = f"S3CRET-{uuid.uuid4().hex}"
    ran: list[int] = []
    app = make_app(rdb.dsn("worker"), ran)
    seen_locks: set[int] = set()
    seen_queries: list[str] = []
    with rdb.connect("inspector") as listener, rdb.connect() as admin:
        expected_keys = _lock_keys(admin)
        listener.execute(sql.SQL("LISTEN {}").format(sql.Identifier(channel_name(SCHEMA))))
        async with running_worker(app, queues=("rq",), maintenance_interval=0.05):
            with rdb.connect("producer") as producer:
                task = make_app(rdb.dsn("producer")).tasks["work.record"]
                for n in range(30):
                    with producer.transaction():
                        task.enqueue(producer, n=n, secret=secret)
                app.enqueue_many(producer, [task.job(n=100 + n, secret=secret) for n in range(30)])

            def sample() -> bool:
                for classid, objid in admin.execute(
                    # This database's locks only: other test runs share the server.
                    "SELECT classid::bigint, objid::bigint FROM pg_locks WHERE locktype = 'advisory' AND objsubid = 1"
                    " AND database = (SELECT oid FROM pg_database WHERE datname = current_database())"
                ):
                    key = (classid << 32) | objid
                    seen_locks.add(key - (1 << 64) if key >= 1 << 63 else key)
                seen_queries.extend(
                    r[0] for r in admin.execute("SELECT query FROM pg_stat_activity WHERE datname = current_database()")
                )
                return len(ran) == 60 and bool(seen_locks)

            await async_wait_until(sample, timeout=30, interval=0.001)
        sentinel = f"sentinel-{uuid.uuid4().hex}"
        admin.execute("SELECT pg_notify(%s, %s)", [channel_name(SCHEMA), sentinel])
        payloads: list[str] = []
        for notify in listener.notifies(timeout=15):
            if notify.payload == sentinel:
                break
            payloads.append(notify.payload)
    assert payloads, "no wake-up notification was received"
    assert set(payloads) == {"rq"}  # only the queue name, whatever the job carried
    assert seen_locks <= set(expected_keys), f"unexpected advisory lock keys {seen_locks - set(expected_keys)}"
    assert not [q for q in seen_queries if secret in q]


def test_worker_cannot_start_without_the_partition_function(rdb: RolesDB) -> None:
    with rdb.connect() as admin:
        admin.execute("DROP FUNCTION pgqueue.create_partition(text, date)")
        today: date = scalar(admin, "SELECT (now() AT TIME ZONE 'UTC')::date")
        admin.execute(
            sql.SQL("DROP TABLE pgqueue.{}").format(
                sql.Identifier(partition_name("jobs_completed", today + timedelta(days=2)))
            )
        )
    app = make_app(rdb.dsn("worker"))
    with pytest.raises(pgqueue.SchemaNotInstalledError, match="create-roles"):
        asyncio.run(app.worker().run())
