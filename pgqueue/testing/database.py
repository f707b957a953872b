"""Test databases: one template migrated once, then databases equal to it.

:meth:`TestDatabases.create` clones the template (``CREATE DATABASE ... TEMPLATE``, about
0.1 s on PostgreSQL 15), so a database has pgqueue's schema (and what the ``setup``
callable added to the template) without running the migrations again.
:meth:`TestDatabases.acquire` and :meth:`TestDatabases.release` are what each test uses:
released, a clone is put back as it was (the test's sessions ended, its rows deleted, the
sequences reset: a few milliseconds) when the test changed nothing else, and is dropped
otherwise (any DDL), the next test then getting a new clone. The server is the one of
``$PGQUEUE_TEST_DSN``, else ``$PGQUEUE_DSN``, else pgqueue's embedded server; its role
needs ``CREATEDB``.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable
from typing import Any, Literal

import psycopg
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from .. import _dsn
from .._db.testing import DatabaseState, clone_database, database_state, drop_database, restore_database
from ..migrate import migrate

__all__ = [
    "ISOLATION",
    "RESET_APPLICATION_NAME",
    "TEST_DSN_VAR",
    "Isolation",
    "TemplateSetup",
    "TestDatabases",
    "server_dsn",
]

TEST_DSN_VAR = "PGQUEUE_TEST_DSN"

#: What :meth:`TestDatabases.release` does with a test's database: ``reset`` puts it back
#: as the template was when only rows and sequences changed (else drops it), ``clone``
#: always drops it (every test then gets a new clone).
Isolation = Literal["reset", "clone"]
ISOLATION: tuple[Isolation, ...] = ("reset", "clone")

#: Called once on the template, after pgqueue's migrations, with an autocommit connection:
#: the application's own tables, so that each test does not create them.
TemplateSetup = Callable[[psycopg.Connection[Any]], None]


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


#: The ``application_name`` of the connection kept open to a database that is reused.
RESET_APPLICATION_NAME = "pgqueue.testing reset"


class _Reusable:
    """A clone kept from test to test, with what it held fresh and the connection that
    resets it (kept open: a new session would load the catalogs into its caches again,
    which costs more than the reset itself)."""

    def __init__(self, dsn: str, conn: psycopg.Connection[Any], state: DatabaseState) -> None:
        self.dsn = dsn
        self.conn = conn
        self.state = state
        self.in_use = False


class TestDatabases:
    """Makes migrated databases on one server: :meth:`create` clones the template (made
    and migrated on first use), :meth:`drop` removes a clone; :meth:`acquire` gives a
    database equal to the template, :meth:`release` takes it back (reset for the next
    :meth:`acquire`, or dropped); :meth:`close` drops what is left and the template."""

    __test__ = False

    def __init__(
        self,
        dsn: str | None = None,
        *,
        schema: str = "pgqueue",
        prefix: str = "pgqueue_test",
        setup: TemplateSetup | None = None,
        isolation: Isolation = "reset",
    ) -> None:
        if isolation not in ISOLATION:
            raise ValueError(f"isolation must be one of {ISOLATION}, got {isolation!r}")
        self.admin_dsn = dsn or server_dsn()
        self.schema = schema
        self.prefix = prefix
        self.setup = setup
        self.isolation: Isolation = isolation
        self.template: str | None = None
        self._reusable: _Reusable | None = None
        #: Clones made; databases :meth:`release` put back, and dropped since a reset could
        #: not make them equal to the template.
        self.clones = 0
        self.resets = 0
        self.replaced = 0

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
                if self.setup is not None:
                    self.setup(conn)
            self.template = name
        return self.template

    def create(self) -> str:
        """A new database cloned from the migrated template; returns its DSN."""
        template = self._ensure_template()
        name = self._new_name("db")
        with self._admin() as admin:
            clone_database(admin, name, template)
        self.clones += 1
        return _with_dbname(self.admin_dsn, name)

    def drop(self, dsn: str) -> None:
        """Drop a database :meth:`create` made (ending its sessions)."""
        with self._admin() as admin:
            drop_database(admin, str(conninfo_to_dict(dsn)["dbname"]))

    def acquire(self) -> str:
        """The DSN of a database equal to the template, for one test: the one
        :meth:`release` last put back, else a new clone. :meth:`release` it after the test."""
        reusable = self._reusable
        if reusable is not None and not reusable.in_use:
            reusable.in_use = True
            return reusable.dsn
        dsn = self.create()
        if self.isolation == "clone" or reusable is not None:
            return dsn
        conn = None
        try:
            conn = psycopg.connect(
                dsn,
                autocommit=True,
                application_name=RESET_APPLICATION_NAME,
                options="-c client_min_messages=error",  # no warning per session it waits for
            )
            state = database_state(conn)
        except BaseException:
            if conn is not None:
                conn.close()
            self.drop(dsn)
            raise
        self._reusable = _Reusable(dsn, conn, state)
        self._reusable.in_use = True
        return dsn

    def release(self, dsn: str) -> None:
        """Take back a database :meth:`acquire` gave: put it back as the template was if
        the test changed only rows and sequences (isolation ``reset``), else drop it."""
        reusable = self._reusable
        if reusable is None or reusable.dsn != dsn:
            self.drop(dsn)
            return
        reusable.in_use = False
        try:
            restored = restore_database(reusable.conn, reusable.state)
        except psycopg.Error:
            restored = False
        if restored:
            self.resets += 1
            return
        self.replaced += 1
        self._reusable = None
        reusable.conn.close()
        self.drop(dsn)

    def close(self) -> None:
        """Drop the database kept for reuse and the template."""
        if self._reusable is not None:
            reusable, self._reusable = self._reusable, None
            reusable.conn.close()
            self.drop(reusable.dsn)
        if self.template is not None:
            with self._admin() as admin:
                drop_database(admin, self.template)
            self.template = None
