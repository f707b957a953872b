"""pgqueue.testing's databases against the real server: each ``acquire`` gives a database
equal to the migrated template, whatever the previous test left in the one it reuses
(rows, sequence values, open sessions), and one whose structure a test changed is
replaced by a new clone."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

import pgqueue
from pgqueue import testing
from pgqueue.testing.database import RESET_APPLICATION_NAME, TestDatabases
from tests.conftest import server_dsn


def create_tables(conn: psycopg.Connection[Any]) -> None:
    conn.execute("CREATE TABLE customers (id int PRIMARY KEY, name text)")
    conn.execute("CREATE TABLE orders (id serial PRIMARY KEY, customer int NOT NULL REFERENCES customers)")
    conn.execute("CREATE TABLE settings (key text PRIMARY KEY, value text)")
    conn.execute("INSERT INTO settings VALUES ('currency', 'EUR')")
    conn.execute("CREATE SEQUENCE invoice_no START 100")
    conn.execute("SELECT nextval('invoice_no')")  # the template's sequence was used once


@pytest.fixture
def databases() -> Iterator[TestDatabases]:
    dbs = TestDatabases(server_dsn(), setup=create_tables)
    yield dbs
    dbs.close()


def make_app(dsn: str) -> tuple[pgqueue.App, pgqueue.Task[Any, Any]]:
    app = pgqueue.App(dsn=dsn)

    @app.task(name="ship")
    def ship(order: int) -> None:
        pass

    return app, ship


def dirty(dsn: str) -> None:
    """What a test could leave behind: committed rows in pgqueue's tables and the app's,
    used sequences."""
    _app, ship = make_app(dsn)
    with psycopg.connect(dsn, autocommit=True) as conn:
        with conn.transaction():
            conn.execute("INSERT INTO customers VALUES (1, 'ann')")
            conn.execute("INSERT INTO orders (customer) VALUES (1), (1)")
            ship.enqueue(conn, order=1)
        conn.execute("SELECT nextval('invoice_no')")
    assert testing.perform_job(ship, order=2) is None
    assert len(testing.enqueued_jobs(ship)) == 1


def assert_fresh(dsn: str) -> None:
    app, ship = make_app(dsn)
    assert testing.enqueued_jobs(app) == []
    with psycopg.connect(dsn, autocommit=True) as conn:
        for table in ("pgqueue.jobs_live", "pgqueue.jobs", "customers", "orders"):
            assert conn.execute(f"SELECT count(*) FROM {table}").fetchone() == (0,), table
        assert conn.execute("SELECT key, value FROM settings").fetchall() == [("currency", "EUR")]
        assert conn.execute("SELECT nextval('invoice_no')").fetchone() == (101,)
    with psycopg.connect(dsn) as tx:  # the ids start again too; rolled back, so still fresh
        tx.execute("INSERT INTO customers VALUES (1, 'bob')")
        assert tx.execute("INSERT INTO orders (customer) VALUES (1) RETURNING id").fetchone() == (1,)
        assert int(ship.enqueue(tx, order=9)) == 1
        tx.rollback()


def test_a_released_database_comes_back_equal_to_the_template(databases: TestDatabases) -> None:
    first = databases.acquire()
    dirty(first)
    databases.release(first)
    second = databases.acquire()
    assert second == first  # reused, not cloned again
    assert (databases.clones, databases.resets, databases.replaced) == (1, 1, 0)
    try:
        assert_fresh(second)
    finally:
        databases.release(second)


def test_a_job_enqueued_in_one_test_is_not_in_the_next(databases: TestDatabases) -> None:
    dsn = databases.acquire()
    app, ship = make_app(dsn)
    with psycopg.connect(dsn, autocommit=True) as conn:
        ship.enqueue(conn, order=1)
    testing.assert_enqueued(ship, order=1)
    databases.release(dsn)

    dsn = databases.acquire()
    app, ship = make_app(dsn)
    testing.refute_enqueued(ship)
    assert testing.drain(app) == testing.DrainResult()
    databases.release(dsn)


def test_sessions_a_test_left_open_are_ended_and_their_work_rolled_back(databases: TestDatabases) -> None:
    dsn = databases.acquire()
    _app, ship = make_app(dsn)
    open_transaction = psycopg.connect(dsn)
    idle = psycopg.connect(dsn, autocommit=True)
    try:
        ship.enqueue(open_transaction, order=1)  # never committed by the test
        idle.execute("LISTEN anything")
        databases.release(dsn)
        assert databases.resets == 1
        for conn in (open_transaction, idle):
            with pytest.raises(psycopg.OperationalError):
                conn.execute("SELECT 1")
    finally:
        open_transaction.close()
        idle.close()
    dsn = databases.acquire()
    try:
        assert_fresh(dsn)
        with psycopg.connect(dsn, autocommit=True) as conn:
            others = conn.execute(
                "SELECT application_name FROM pg_stat_activity WHERE datname = current_database()"
                " AND pid <> pg_backend_pid() AND backend_type = 'client backend'"
            ).fetchall()
        assert others == [(RESET_APPLICATION_NAME,)]  # the plugin's own idle connection, nothing else
    finally:
        databases.release(dsn)


def test_the_reset_ends_no_session_on_another_database(databases: TestDatabases) -> None:
    dsn = databases.acquire()
    other = databases.create()
    try:
        with psycopg.connect(other, autocommit=True) as elsewhere, psycopg.connect(dsn, autocommit=True) as here:
            here.execute("SELECT 1")
            databases.release(dsn)
            assert databases.resets == 1
            assert elsewhere.execute("SELECT 1").fetchone() == (1,)  # still connected
            with pytest.raises(psycopg.OperationalError):
                here.execute("SELECT 1")
    finally:
        databases.drop(other)


@pytest.mark.parametrize(
    "change",
    [
        "CREATE TABLE extra (id int)",
        "ALTER TABLE orders ADD COLUMN note text",
        "DROP TABLE settings",
        "CREATE INDEX ON pgqueue.jobs_live (task)",
        "COMMENT ON TABLE orders IS 'changed'",
        "CREATE FUNCTION f() RETURNS int LANGUAGE sql AS 'SELECT 1'",
        "GRANT SELECT ON orders TO PUBLIC",
    ],
)
def test_a_database_whose_structure_changed_is_replaced(databases: TestDatabases, change: str) -> None:
    dsn = databases.acquire()
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(change)
    databases.release(dsn)
    assert (databases.resets, databases.replaced) == (0, 1)
    with psycopg.connect(server_dsn(), autocommit=True) as admin:
        name = psycopg.conninfo.conninfo_to_dict(dsn)["dbname"]
        assert admin.execute("SELECT count(*) FROM pg_database WHERE datname = %s", [name]).fetchone() == (0,)
    fresh = databases.acquire()
    assert fresh != dsn
    try:
        assert_fresh(fresh)
        with psycopg.connect(fresh, autocommit=True) as conn:
            assert conn.execute("SELECT to_regclass('extra'), to_regproc('f')").fetchone() == (None, None)
            assert conn.execute("SELECT obj_description('orders'::regclass)").fetchone() == (None,)
    finally:
        databases.release(fresh)


def test_changed_template_rows_replace_the_database(databases: TestDatabases) -> None:
    dsn = databases.acquire()
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("UPDATE settings SET value = 'USD'")
    databases.release(dsn)
    assert databases.replaced == 1
    fresh = databases.acquire()
    try:
        assert_fresh(fresh)
    finally:
        databases.release(fresh)


def test_rows_a_trigger_writes_during_the_reset_replace_the_database() -> None:
    def with_audit(conn: psycopg.Connection[Any]) -> None:
        create_tables(conn)
        conn.execute("CREATE TABLE audit (what text)")
        conn.execute(
            "CREATE FUNCTION log_delete() RETURNS trigger LANGUAGE plpgsql AS"
            " $$BEGIN INSERT INTO audit VALUES ('deleted'); RETURN OLD; END$$"
        )
        conn.execute("CREATE TRIGGER on_delete AFTER DELETE ON customers FOR EACH ROW EXECUTE FUNCTION log_delete()")

    databases = TestDatabases(server_dsn(), setup=with_audit)
    try:
        dsn = databases.acquire()
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute("INSERT INTO customers VALUES (1, 'ann')")
        databases.release(dsn)  # deleting the customer writes to audit: not as the template was
        assert (databases.resets, databases.replaced) == (0, 1)
        fresh = databases.acquire()
        with psycopg.connect(fresh, autocommit=True) as conn:
            assert conn.execute("SELECT count(*) FROM audit").fetchone() == (0,)
        databases.release(fresh)
    finally:
        databases.close()


def test_clone_isolation_gives_every_test_a_new_clone() -> None:
    databases = TestDatabases(server_dsn(), setup=create_tables, isolation="clone")
    try:
        first = databases.acquire()
        dirty(first)
        databases.release(first)
        second = databases.acquire()
        assert second != first
        assert_fresh(second)
        databases.release(second)
        assert (databases.clones, databases.resets, databases.replaced) == (2, 0, 0)
    finally:
        databases.close()


def test_bad_isolation_is_refused() -> None:
    with pytest.raises(ValueError, match="isolation"):
        TestDatabases(server_dsn(), isolation="rollback")  # type: ignore[arg-type]
