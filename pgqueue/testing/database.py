"""Test databases: one template migrated once, then a fresh clone per test.

``CREATE DATABASE ... TEMPLATE`` copies the migrated template in a few milliseconds, so
every test gets its own database with pgqueue's schema and nothing else, without running
the migrations again. The server is the one of ``$PGQUEUE_TEST_DSN``, else
``$PGQUEUE_DSN``, else pgqueue's embedded server; its role needs ``CREATEDB``.
"""

from __future__ import annotations

import os
import uuid
from typing import Any

import psycopg
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from .. import _dsn
from .._db.testing import clone_database, drop_database
from ..migrate import migrate

__all__ = ["TEST_DSN_VAR", "TestDatabases", "server_dsn"]

TEST_DSN_VAR = "PGQUEUE_TEST_DSN"


def server_dsn() -> str:
    """The DSN tests create their databases through: ``$PGQUEUE_TEST_DSN``, else
    ``$PGQUEUE_DSN``, else the embedded server's (started if need be)."""
    env = os.environ.get(TEST_DSN_VAR)
    if env:
        return _dsn.resolve_database(env, source=f"${TEST_DSN_VAR}").dsn
    return _dsn.resolve_database(None).dsn


def _with_dbname(dsn: str, dbname: str) -> str:
    params: dict[str, Any] = conninfo_to_dict(dsn)
    params["dbname"] = dbname
    return make_conninfo(**params)


class TestDatabases:
    """Makes migrated databases on one server: :meth:`create` clones the template (made
    and migrated on first use), :meth:`drop` removes a clone, :meth:`close` the template."""

    __test__ = False

    def __init__(self, dsn: str | None = None, *, schema: str = "pgqueue", prefix: str = "pgqueue_test") -> None:
        self.admin_dsn = dsn or server_dsn()
        self.schema = schema
        self.prefix = prefix
        self.template: str | None = None

    def _admin(self) -> psycopg.Connection[Any]:
        return psycopg.connect(self.admin_dsn, autocommit=True)

    def _new_name(self, kind: str) -> str:
        return f"{self.prefix}_{kind}_{os.getpid()}_{uuid.uuid4().hex[:8]}"

    def _ensure_template(self) -> str:
        if self.template is None:
            name = self._new_name("tpl")
            with self._admin() as admin:
                clone_database(admin, name, "template0")
            with psycopg.connect(_with_dbname(self.admin_dsn, name), autocommit=True) as conn:
                migrate(conn, self.schema)
            self.template = name
        return self.template

    def create(self) -> str:
        """A new database cloned from the migrated template; returns its DSN."""
        template = self._ensure_template()
        name = self._new_name("db")
        with self._admin() as admin:
            clone_database(admin, name, template)
        return _with_dbname(self.admin_dsn, name)

    def drop(self, dsn: str) -> None:
        """Drop a database :meth:`create` made (ending its sessions)."""
        with self._admin() as admin:
            drop_database(admin, str(conninfo_to_dict(dsn)["dbname"]))

    def close(self) -> None:
        """Drop the template."""
        if self.template is not None:
            with self._admin() as admin:
                drop_database(admin, self.template)
            self.template = None
