"""Which database: the resolution order, a display without passwords, hints that name the
database in use, the CLI's notice line, and errors that say why a connection failed."""

from __future__ import annotations

import os
import shlex
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg.conninfo import conninfo_to_dict, make_conninfo
from typer.testing import CliRunner

import pgqueue
from pgqueue._dsn import (
    FROM_APP,
    FROM_ENV,
    FROM_OPTION,
    Database,
    display_dsn,
    migrate_hint,
    open_connection,
    resolve_database,
)
from pgqueue.cli import app as cli_app
from pgqueue.errors import ConfigError, DatabaseUnavailableError, SchemaNotInstalledError
from pgqueue.migrate import migrate, require_current
from tests.apps.support import create_test_tables, ledger, state_of
from tests.conftest import REPO, wait_until

SECRET = "s3cr3t-Pa55"


# -- resolution order ---------------------------------------------------------------------


def test_explicit_dsn_wins_over_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PGQUEUE_DSN", "postgresql://env-host/envdb")
    assert resolve_database("postgresql://given/db") == Database("postgresql://given/db", FROM_OPTION)
    assert resolve_database("postgresql://given/db", source=FROM_APP).source == FROM_APP
    assert resolve_database(None) == Database("postgresql://env-host/envdb", FROM_ENV)
    assert resolve_database("") == Database("postgresql://env-host/envdb", FROM_ENV)  # empty means not given


def test_app_dsn_wins_over_the_environment_and_configure_overrides_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PGQUEUE_DSN", "postgresql://env-host/envdb")
    app = pgqueue.App(dsn="postgresql://app-host/appdb")
    assert app.database == Database("postgresql://app-host/appdb", FROM_APP)
    assert app.dsn == "postgresql://app-host/appdb"
    app.configure(dsn="postgresql://cli-host/clidb", schema="other")  # what `--dsn` and `--schema` do
    assert app.database == Database("postgresql://cli-host/clidb", FROM_OPTION)
    assert app.schema == "other"
    assert pgqueue.App().database == Database("postgresql://env-host/envdb", FROM_ENV)


def test_invalid_dsn_is_refused_naming_where_it_came_from(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PGQUEUE_DSN", f"host=x password={SECRET} nonsense")
    with pytest.raises(ConfigError, match=r"the DSN from \$PGQUEUE_DSN is not a valid PostgreSQL connection string"):
        resolve_database(None)
    with pytest.raises(ConfigError, match=r"the DSN from App\(dsn=…\)"):
        pgqueue.App(dsn="postgresql://h/db?bogus_option=1").migrate()


# -- display ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("dsn", "shown"),
    [
        (f"postgresql://app:{SECRET}@db.example:6432/prod", "postgresql://app:***@db.example:6432/prod"),
        (f"postgresql://app:{SECRET}@db/prod?sslmode=require", "postgresql://app:***@db/prod?sslmode=require"),
        (f"host=db port=5433 dbname=prod user=app password={SECRET}", "postgresql://app:***@db:5433/prod"),
        (f"host=db dbname=prod password='{SECRET} x' sslpassword={SECRET}", "postgresql://:***@db/prod"),
        ("postgresql://postgres:@/postgres?host=/run/pg", "postgresql://postgres@/postgres?host=/run/pg"),
        ("postgresql://localhost/mydb", "postgresql://localhost/mydb"),
        (f"postgresql://app:{SECRET}@h/db?not_an_option=1", "(an invalid connection string)"),
    ],
)
def test_display_never_shows_a_password(dsn: str, shown: str) -> None:
    assert display_dsn(dsn) == shown
    assert SECRET not in Database(dsn, FROM_ENV).describe()
    assert SECRET not in display_dsn(dsn, password=False)
    assert "***" not in display_dsn(dsn, password=False)


def test_connection_errors_never_show_the_password() -> None:
    with pytest.raises(DatabaseUnavailableError) as info:
        open_connection(_server_dsn(user="nobody_here", password=SECRET))  # the test server refuses them
    assert SECRET not in str(info.value)
    assert info.value.reason == "refused"


# -- hints name the database in use -------------------------------------------------------


def test_migrate_hint_names_the_database_and_schema(empty_dsn: str) -> None:
    shown = shlex.quote(display_dsn(empty_dsn, password=False))  # a socket path needs quoting
    with psycopg.connect(empty_dsn, autocommit=True) as conn:
        with pytest.raises(SchemaNotInstalledError) as info:
            require_current(conn, "pgqueue")
        assert str(info.value).endswith(f"run `pgqueue migrate --dsn {shown}`")
        with pytest.raises(SchemaNotInstalledError) as other:
            require_current(conn, "jobs_b")
        assert str(other.value).endswith(f"run `pgqueue migrate --dsn {shown} --schema jobs_b`")
        assert migrate_hint(conn, "pgqueue", "--create-roles") == f"run `pgqueue migrate --dsn {shown} --create-roles`"
        task = pgqueue.App().task(name="t")(lambda: None)
        with pytest.raises(SchemaNotInstalledError, match="run `pgqueue migrate --dsn "):
            task.enqueue(conn)


async def test_async_enqueue_hint_names_the_database(empty_dsn: str) -> None:
    task = pgqueue.App().task(name="t")(lambda: None)
    async with await psycopg.AsyncConnection.connect(empty_dsn, autocommit=True) as aconn:
        with pytest.raises(SchemaNotInstalledError) as info:
            await task.enqueue_async(aconn)
    assert f"run `pgqueue migrate --dsn {shlex.quote(display_dsn(empty_dsn, password=False))}`" in str(info.value)


def test_demo_inspect_hint_names_the_database() -> None:
    import shlex

    from pgqueue.cli.demo import inspect_hint

    hint = inspect_hint(f"postgresql://app:{SECRET}@db:5433/prod", "pgqueue_demo")
    assert SECRET not in hint
    assert shlex.split(hint) == [
        "psql",
        "postgresql://app@db:5433/prod",
        "-c",
        "SELECT state, count(*) FROM pgqueue_demo.jobs GROUP BY 1",
    ]


# -- the command line says which database -------------------------------------------------


def _cli(*args: str, env: dict[str, str | None]) -> Any:
    return CliRunner().invoke(cli_app, list(args), env={"PGQUEUE_SCHEMA": None, "COLUMNS": "200", **env})


def test_cli_names_a_database_from_the_environment(dsn: str) -> None:
    result = _cli("jobs", "list", env={"PGQUEUE_DSN": dsn})
    assert result.exit_code == 0, result.output
    assert result.stderr.splitlines() == [f"pgqueue: database {display_dsn(dsn)} (from $PGQUEUE_DSN)"]


def test_cli_is_quiet_about_a_database_given_with_dsn(dsn: str) -> None:
    result = _cli("jobs", "list", "--dsn", dsn, env={"PGQUEUE_DSN": None})
    assert result.exit_code == 0, result.output
    assert result.stderr == ""


def _run(args: list[str], env: dict[str, str], timeout: float = 60) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith("PGQUEUE_")}
    return subprocess.run(
        [sys.executable, "-m", "pgqueue", *args],
        cwd=REPO,
        env={**base, "COLUMNS": "200", **env},
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def test_cron_list_app_reads_the_apps_database(dsn: str, empty_dsn: str) -> None:
    # $PGQUEUE_DSN names a database without pgqueue; the app names the migrated one.
    result = _run(
        ["cron", "list", "--app", "tests.apps.dsn_app:app"], env={"PGQUEUE_DSN": empty_dsn, "TEST_APP_DSN": dsn}
    )
    assert result.returncode == 0, result.stderr
    assert "no cron schedules in schema pgqueue" in result.stdout
    assert result.stderr.splitlines() == [f"pgqueue: database {display_dsn(dsn)} (from App(dsn=…))"]


@contextmanager
def _worker(args: list[str], env: dict[str, str], log: Path) -> Iterator[subprocess.Popen[bytes]]:
    base = {k: v for k, v in os.environ.items() if not k.startswith("PGQUEUE_")}
    with open(log, "ab") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "pgqueue", "work", *args],
            cwd=REPO,
            env={**base, "PYTHONUNBUFFERED": "1", **env},
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        yield proc
    finally:
        with suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(10)


def _enqueue_record(dsn: str, key: str) -> int:
    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute("SELECT pgqueue.enqueue('record', %s::jsonb)", [f'{{"key": "{key}"}}']).fetchone()
    assert row is not None
    return int(row[0])


def test_worker_from_the_environment_works_only_on_that_database(
    dsn: str, empty_dsn: str, conn: psycopg.Connection[Any], tmp_path: Path
) -> None:
    with psycopg.connect(empty_dsn, autocommit=True) as other:
        migrate(other, "pgqueue")
        create_test_tables(other)
    create_test_tables(conn)
    here = _enqueue_record(dsn, "here")
    elsewhere = _enqueue_record(empty_dsn, "elsewhere")
    log = tmp_path / "worker.log"
    with _worker(["tests.apps.basic:app", "--poll-interval", "0.2"], {"PGQUEUE_DSN": dsn}, log) as proc:
        wait_until(lambda: state_of(conn, here) == "completed", timeout=30)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(20) == 0, log.read_text()
    output = log.read_text()
    assert f"pgqueue: database {display_dsn(dsn)} (from $PGQUEUE_DSN)" in output
    assert f"database={display_dsn(dsn)} schema=pgqueue" in output
    assert ledger(conn, "here", "done")
    with psycopg.connect(empty_dsn, autocommit=True) as other:
        assert state_of(other, elsewhere) == "available"
        assert ledger(other, "elsewhere") == []


def test_worker_prefers_the_apps_dsn_to_the_environment(dsn: str, empty_dsn: str, tmp_path: Path) -> None:
    log = tmp_path / "worker.log"
    env = {"PGQUEUE_DSN": empty_dsn, "TEST_APP_DSN": dsn}
    with _worker(["tests.apps.dsn_app:app", "--poll-interval", "0.2"], env, log) as proc:
        wait_until(lambda: " started: " in log.read_text(), timeout=30)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(20) == 0, log.read_text()
    output = log.read_text()
    assert f"pgqueue: database {display_dsn(dsn)} (from App(dsn=…))" in output
    assert f"database={display_dsn(dsn)} " in output


# -- why a connection failed --------------------------------------------------------------


def _server_dsn(**changes: Any) -> str:
    from tests.conftest import server_dsn

    return make_conninfo(server_dsn(), **changes)


def _where(dsn: str) -> str:
    """How errors name the server: host:port, or the socket file of a socket directory."""
    info = conninfo_to_dict(dsn)
    host, port = str(info["host"]), info.get("port", 5432)
    return f"socket {host.rstrip('/')}/.s.PGSQL.{port}" if host.startswith("/") else f"{host}:{port}"


def test_missing_database_is_a_refusal_that_quotes_the_server() -> None:
    dsn = _server_dsn(dbname="pgqueue_no_such_db")
    with pytest.raises(DatabaseUnavailableError) as info:
        open_connection(dsn)
    assert info.value.reason == "refused"
    assert str(info.value) == (
        f'the database server at {_where(dsn)} refused the connection: database "pgqueue_no_such_db" does not exist'
    )
    result = _cli("status", "--dsn", dsn, env={"PGQUEUE_DSN": None})
    assert result.exit_code == 1
    assert result.stderr.strip() == f"error: {info.value}"
    with pytest.raises(DatabaseUnavailableError, match="refused the connection: database"):
        pgqueue.App(dsn=dsn).migrate()


@pytest.fixture
def closed_port() -> Iterator[int]:
    """A TCP port on 127.0.0.1 that is bound but not listening: connections are refused."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        yield sock.getsockname()[1]


def test_closed_port_is_unreachable_and_named(closed_port: int) -> None:
    dsn = f"postgresql://127.0.0.1:{closed_port}/db"
    with pytest.raises(DatabaseUnavailableError) as info:
        open_connection(dsn)
    assert info.value.reason == "unreachable"
    assert str(info.value).startswith(
        f"cannot reach the database server at 127.0.0.1:{closed_port}: connection refused"
    )


@pytest.fixture
def silent_server() -> Iterator[int]:
    """A TCP server that accepts connections and never says a word."""
    server = socket.create_server(("127.0.0.1", 0))
    accepted: list[socket.socket] = []
    stop = threading.Event()

    def serve() -> None:
        server.settimeout(0.1)
        while not stop.is_set():
            with suppress(TimeoutError):
                accepted.append(server.accept()[0])

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield server.getsockname()[1]
    finally:
        stop.set()
        thread.join(5)
        for s in accepted:
            s.close()
        server.close()


def test_silent_server_is_a_timeout_naming_address_and_timeout(silent_server: int) -> None:
    dsn = f"postgresql://127.0.0.1:{silent_server}/db?connect_timeout=2"
    with pytest.raises(DatabaseUnavailableError) as info:
        open_connection(dsn)
    assert info.value.reason == "timeout"
    assert str(info.value).startswith(
        f"the database server at 127.0.0.1:{silent_server} did not answer within 2s (connect_timeout)"
    )
