"""pytest fixtures for applications that use pgqueue (a pytest plugin).

Enable it with ``pgqueue_fixtures = true`` in the pytest configuration (the plugin
registered through the ``pytest11`` entry point then loads this module), or with
``pytest_plugins = ["pgqueue.testing.fixtures"]`` in a conftest.py, or ``-p
pgqueue.testing.fixtures``.

* ``pgqueue_dsn``: the DSN of this test's database, equal to a template made once per
  session: migrated (schema from the ``pgqueue_schema`` setting, default ``pgqueue``),
  then given what the ``pgqueue_template_setup`` fixture returns (your tables). After the
  test, the plugin ends the test's sessions and, when the test changed only rows and
  sequences, deletes its rows and resets the sequences for the next test; after any other
  change (DDL) it drops the database and the next test gets a new clone of the template
  (``pgqueue_isolation = clone``: a new clone for every test);
* ``pgqueue_conn``: an autocommit connection to it;
* ``pgqueue_app``: the app named by the ``pgqueue_app`` setting (``module:attribute``),
  pointed at this test's database for the test's duration;
* ``pgqueue_template_setup``: override it (session scope, in a conftest.py) to return a
  callable that gets an autocommit connection to the template once, after pgqueue's
  migrations, and creates your own tables there.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

from ..app import App
from ..runner.loader import load_app
from .database import ISOLATION, TemplateSetup, TestDatabases

_DATABASES = pytest.StashKey[TestDatabases]()

__all__ = ["pgqueue_app", "pgqueue_conn", "pgqueue_databases", "pgqueue_dsn", "pgqueue_template_setup"]


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addini("pgqueue_app", "the app pgqueue_app points at each test's database (module:attribute)", default="")
    parser.addini("pgqueue_schema", "schema of pgqueue in the test databases", default="pgqueue")
    parser.addini(
        "pgqueue_isolation",
        "reset: a test's database is put back as the template was for the next test when only its rows and "
        "sequences changed (else a new clone); clone: a new clone for every test",
        default="reset",
    )


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter, config: pytest.Config) -> None:
    databases = config.stash.get(_DATABASES, None)
    if databases is not None:
        terminalreporter.write_line(
            f"pgqueue test databases ({databases.isolation}): {databases.clones} cloned, "
            f"{databases.resets} reset for the next test, {databases.replaced} replaced after other changes (DDL)"
        )


@pytest.fixture(scope="session")
def pgqueue_template_setup() -> TemplateSetup | None:
    """Override (session scope) to return ``setup(conn)``: run once on the template after
    pgqueue's migrations, to create the application's tables. None: nothing more."""
    return None


@pytest.fixture(scope="session")
def pgqueue_databases(
    pytestconfig: pytest.Config, pgqueue_template_setup: TemplateSetup | None
) -> Iterator[TestDatabases]:
    """Makes the test databases (one template per session, migrated once)."""
    isolation = str(pytestconfig.getini("pgqueue_isolation"))
    if isolation not in ISOLATION:
        raise pytest.UsageError(f"pgqueue_isolation must be one of {', '.join(ISOLATION)}, not {isolation!r}")
    databases = TestDatabases(
        schema=str(pytestconfig.getini("pgqueue_schema")),
        setup=pgqueue_template_setup,
        isolation=isolation,
    )
    pytestconfig.stash[_DATABASES] = databases
    yield databases
    databases.close()


@pytest.fixture
def pgqueue_dsn(pgqueue_databases: TestDatabases) -> Iterator[str]:
    """DSN of this test's database: equal to the migrated template, none of the rows,
    sequence values or sessions an earlier test left."""
    dsn = pgqueue_databases.acquire()
    yield dsn
    pgqueue_databases.release(dsn)


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
