"""Fixtures and helpers of the roles tests (loaded as a pytest plugin from conftest.py).

`rdb` gives every test a fresh database with pgqueue migrated by the superuser, the four
roles applied under a random prefix (roles are cluster-wide) and one login user per role;
it drops the database, the login users and the roles afterwards.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import date, timedelta
from pathlib import Path
from typing import Any, LiteralString

import psycopg
import pytest
from psycopg import sql
from psycopg.conninfo import make_conninfo

import pgqueue
from pgqueue._db.sql import queries_for
from pgqueue.maintenance.partitions import partition_name
from pgqueue.migrate import migrate
from pgqueue.roles import RoleNames, apply_roles, role_names
from tests.conftest import server_dsn

Conn = psycopg.Connection[Any]
SCHEMA = "pgqueue"
Q = queries_for(SCHEMA)
REPO = Path(__file__).resolve().parents[1]
KINDS = ("owner", "producer", "worker", "inspector")
denied = pytest.raises(psycopg.errors.InsufficientPrivilege)


@dataclass
class RolesDB:
    dbname: str
    names: RoleNames
    logins: dict[str, str]  # kind -> login user

    def dsn(self, kind: str | None = None) -> str:
        base = server_dsn(self.dbname)
        return base if kind is None else make_conninfo(base, user=self.logins[kind])

    def connect(self, kind: str | None = None) -> Conn:
        return psycopg.connect(self.dsn(kind), autocommit=True)


def drop_roles(admin: Conn, roles: list[str]) -> None:
    for role in roles:
        admin.execute(sql.SQL("DROP ROLE IF EXISTS {}").format(sql.Identifier(role)))


@pytest.fixture
def rdb() -> Iterator[RolesDB]:
    prefix = f"t{uuid.uuid4().hex[:10]}"
    dbname = f"pgqueue_roles_{prefix}"
    names = role_names(SCHEMA, prefix)
    logins = {kind: f"{prefix}_{kind}_login" for kind in KINDS}
    with psycopg.connect(server_dsn(), autocommit=True) as admin:
        admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(dbname)))
        # The default CREATE and TEMP privileges of PUBLIC on a fresh database would blur
        # what the roles grant; production databases should revoke them too.
        admin.execute(sql.SQL("REVOKE CREATE, TEMP ON DATABASE {} FROM PUBLIC").format(sql.Identifier(dbname)))
    try:
        with psycopg.connect(server_dsn(dbname), autocommit=True) as conn:
            conn.execute("REVOKE CREATE ON SCHEMA public FROM PUBLIC")
            migrate(conn, SCHEMA)
            assert apply_roles(conn, SCHEMA, prefix) == names
            for kind in KINDS:
                conn.execute(
                    sql.SQL("CREATE ROLE {} LOGIN IN ROLE {}").format(
                        sql.Identifier(logins[kind]), sql.Identifier(getattr(names, kind))
                    )
                )
        yield RolesDB(dbname, names, logins)
    finally:
        with psycopg.connect(server_dsn(), autocommit=True) as admin:
            admin.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(dbname)))
            drop_roles(admin, [*logins.values(), *names.all()])


def scalar(conn: Conn, query: LiteralString | sql.Composed, params: Any = None) -> Any:
    row = conn.execute(query, params).fetchone()
    assert row is not None
    return row[0]


def make_app(dsn: str, ran: list[int] | None = None) -> pgqueue.App:
    app = pgqueue.App(dsn=dsn)

    @app.task(name="work.record", queue="rq")
    def record(n: int, secret: str = "") -> None:
        if ran is not None:
            ran.append(n)

    return app


def claim_params(tasks: list[str]) -> dict[str, Any]:
    from pgqueue._db.jobs import cursor_params

    return {
        "tasks": tasks,
        "task_max_attempts": [3] * len(tasks),
        "limit": 10,
        "lease": 30.0,
        "worker_id": "intruder",
        **cursor_params(["rq"]),
    }


def create_old_partition(admin: Conn, owner: str, day: date) -> str:
    """A completed-jobs day partition for a past day, owned like the others; its name."""
    child = partition_name("jobs_completed", day)
    admin.execute(
        sql.SQL("CREATE TABLE pgqueue.{} PARTITION OF pgqueue.jobs_completed FOR VALUES FROM ({}) TO ({})").format(
            sql.Identifier(child), sql.Literal(day.isoformat()), sql.Literal((day + timedelta(days=1)).isoformat())
        )
    )
    admin.execute(sql.SQL("ALTER TABLE pgqueue.{} OWNER TO {}").format(sql.Identifier(child), sql.Identifier(owner)))
    return child
