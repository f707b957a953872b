"""Migrations 0011-0012 (workflows and batches) on a database whose roles were set up by
an earlier release: before the roles script is run again, producers create workflows and
batches and a worker's completion releases dependents, through functions that run as the
owner; the whole-workflow and whole-batch operator acts stay the owner's."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from psycopg import sql
from psycopg.conninfo import make_conninfo

import pgqueue
from pgqueue.migrate import migrate
from pgqueue.roles import apply_roles, role_names
from tests.conftest import async_wait_until, running_worker, server_dsn
from tests.integration.test_migrate_scheduled_at import migrate_to_version
from tests.roles_support import denied, drop_roles

SCHEMA = "pgqueue"


@pytest.fixture
def old_roles(monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[str, dict[str, str]]]:
    """A database at schema version 10 with roles set up then, migrated to the latest (13)
    version by the owner role without running the roles script again."""
    prefix = f"w{uuid.uuid4().hex[:10]}"
    dbname = f"pgqueue_wfroles_{prefix}"
    names = role_names(SCHEMA, prefix)
    logins = {kind: f"{prefix}_{kind}_login" for kind in ("producer", "worker")}
    with psycopg.connect(server_dsn(), autocommit=True) as admin:
        admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(dbname)))
    try:
        with psycopg.connect(server_dsn(dbname), autocommit=True) as conn:
            migrate_to_version(conn, monkeypatch, 10)
            apply_roles(conn, SCHEMA, prefix)
            for kind, login in logins.items():
                conn.execute(
                    sql.SQL("CREATE ROLE {} LOGIN IN ROLE {}").format(
                        sql.Identifier(login), sql.Identifier(getattr(names, kind))
                    )
                )
            assert migrate(conn, SCHEMA, as_role=names.owner) == [11, 12, 13]
        yield server_dsn(dbname), logins
    finally:
        with psycopg.connect(server_dsn(), autocommit=True) as admin:
            admin.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(dbname)))
            drop_roles(admin, [*logins.values(), *names.all()])


async def test_roles_set_up_before_workflows_run_them_until_the_script_runs_again(
    old_roles: tuple[str, dict[str, str]],
) -> None:
    dsn, logins = old_roles
    ran: list[str] = []
    app = pgqueue.App(dsn=make_conninfo(dsn, user=logins["worker"]))

    @app.task(name="wf.step", queue="wq")
    def step(name: str) -> None:
        ran.append(name)

    @app.task(name="wf.done", queue="wq")
    def done() -> None:
        ran.append("callback")

    with psycopg.connect(make_conninfo(dsn, user=logins["producer"]), autocommit=True) as producer:
        with producer.transaction():
            chain = app.chain(step.job(name="a"), step.job(name="b"), step.job(name="c")).enqueue(producer)
        batch = app.create_batch(producer, on_complete=done.job())
        batch.add(producer, step.job(name="m1"), step.job(name="m2"))
        batch.close(producer)
        with denied:
            producer.execute("SELECT pgqueue.cancel_workflow(%s)", [int(chain[0])])
    async with running_worker(app, queues=("wq",)):
        await async_wait_until(lambda: len(ran) == 6, timeout=30)
    assert sorted(ran) == ["a", "b", "c", "callback", "m1", "m2"]
    assert [r for r in ran if r in "abc"] == ["a", "b", "c"]  # each link after the one before
    assert ran.index("callback") > max(ran.index("m1"), ran.index("m2"))
    with psycopg.connect(dsn, autocommit=True) as admin:
        states = admin.execute("SELECT state::text, count(*) FROM pgqueue.jobs GROUP BY 1").fetchall()
        assert dict(states) == {"completed": 6}
        public: Any = admin.execute(
            "SELECT bool_or(has_function_privilege('public', p.oid, 'EXECUTE')) FROM pg_proc AS p"
            " WHERE p.pronamespace = 'pgqueue'::regnamespace AND p.proname IN"
            " ('settle_dependents', 'enqueue_workflow', 'batch_create', 'batch_close', 'cancel_workflow')"
        ).fetchone()
        assert public == (False,)
