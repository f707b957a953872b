"""pytest fixtures for applications that use pgqueue (a pytest plugin).

Enable it with ``pgqueue_fixtures = true`` in the pytest configuration (the plugin
registered through the ``pytest11`` entry point then loads this module), or with
``pytest_plugins = ["pgqueue.testing.fixtures"]`` in a conftest.py, or ``-p
pgqueue.testing.fixtures``.

* ``pgqueue_dsn``: the DSN of a fresh database for this test, migrated (schema from the
  ``pgqueue_schema`` setting, default ``pgqueue``), cloned from a template made once per
  session, dropped after the test;
* ``pgqueue_conn``: an autocommit connection to it;
* ``pgqueue_app``: the app named by the ``pgqueue_app`` setting (``module:attribute``),
  pointed at this test's database for the test's duration.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

from ..app import App
from ..runner.loader import load_app
from .database import TestDatabases

__all__ = ["pgqueue_app", "pgqueue_conn", "pgqueue_databases", "pgqueue_dsn"]


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addini("pgqueue_app", "the app pgqueue_app points at each test's database (module:attribute)", default="")
    parser.addini("pgqueue_schema", "schema of pgqueue in the test databases", default="pgqueue")


@pytest.fixture(scope="session")
def pgqueue_databases(pytestconfig: pytest.Config) -> Iterator[TestDatabases]:
    """Makes the test databases (one template per session, migrated once)."""
    databases = TestDatabases(schema=str(pytestconfig.getini("pgqueue_schema")))
    yield databases
    databases.close()


@pytest.fixture
def pgqueue_dsn(pgqueue_databases: TestDatabases) -> Iterator[str]:
    """DSN of this test's own freshly migrated database."""
    dsn = pgqueue_databases.create()
    yield dsn
    pgqueue_databases.drop(dsn)


@pytest.fixture
def pgqueue_conn(pgqueue_dsn: str) -> Iterator[psycopg.Connection[Any]]:
    """An autocommit connection to this test's database (``conn.transaction()`` for one)."""
    with psycopg.connect(pgqueue_dsn, autocommit=True) as conn:
        yield conn


@pytest.fixture
def pgqueue_app(pytestconfig: pytest.Config, pgqueue_dsn: str, pgqueue_databases: TestDatabases) -> Iterator[App]:
    """The app of the ``pgqueue_app`` setting, using this test's database."""
    target = str(pytestconfig.getini("pgqueue_app"))
    if not target:
        raise pytest.UsageError("the pgqueue_app fixture needs the pgqueue_app setting (module:attribute)")
    app = load_app(target)
    saved = (app._dsn, app._dsn_source, app._database, app.schema, app._waiter)
    app.configure(dsn=pgqueue_dsn, schema=pgqueue_databases.schema, source="pgqueue_app fixture")
    try:
        yield app
    finally:
        if app._waiter is not None:
            app._waiter.close()
        app._dsn, app._dsn_source, app._database, app.schema, app._waiter = saved
