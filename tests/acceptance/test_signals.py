"""Stopping ``pgqueue work`` the way people and service managers do, with real processes.

A Ctrl-C on a terminal and ``kill -TERM -PGID`` (systemd's default) reach every process of
the group: each worker process gets the stop directly *and* forwarded by its supervisor.
Jobs in flight must still finish (attempt 1, no LeaseExpired), the exit code must be 0 and
no worker may stay registered. Jobs run ``tests.apps.lifecycle``'s ``hold`` task, which
finishes only once the test opens its gate: no test depends on how long anything takes.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any

import psycopg
import pytest

import pgqueue
from pgqueue.runner.stop_signals import REPEAT_WINDOW
from tests.apps.support import REPO, create_test_tables, enqueue_sql, job_row, ledger, state_of, worker_process
from tests.conftest import async_wait_until, running_worker, wait_until

APP = "tests.apps.lifecycle:app"
# Run by the child of a new session: makes the pty on stdin its controlling terminal, then
# becomes ``pgqueue work`` (same pid, so the session, group and terminal are its own).
ATTACH_TTY = "import fcntl, os, sys, termios; fcntl.ioctl(0, termios.TIOCSCTTY, 0); os.execv(sys.argv[1], sys.argv[1:])"


class Work:
    """``pgqueue work`` in its own session, optionally on a pseudo-terminal."""

    def __init__(self, dsn: str, args: list[str], log: Path, *, tty: bool, env: dict[str, str]) -> None:
        self.log = log
        self.master: int | None = None
        cmd = [sys.executable, "-m", "pgqueue", "work", APP, "--dsn", dsn, *args]
        environ = {k: v for k, v in os.environ.items() if not k.startswith("PGQUEUE_")}
        environ.update(env, PYTHONUNBUFFERED="1")
        stdin: int = subprocess.DEVNULL
        if tty:
            self.master, stdin = os.openpty()
            cmd = [sys.executable, "-c", ATTACH_TTY, *cmd]
        with open(log, "ab") as out:
            self.proc = subprocess.Popen(
                cmd, cwd=REPO, stdin=stdin, stdout=out, stderr=subprocess.STDOUT, env=environ, start_new_session=True
            )
        if tty:
            os.close(stdin)

    def output(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""

    def ctrl_c(self) -> None:
        assert self.master is not None
        os.write(self.master, b"\x03")  # the terminal sends SIGINT to its foreground group

    def killpg(self, signum: int) -> None:
        os.killpg(self.proc.pid, signum)

    def wait(self, timeout: float) -> int:
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"pgqueue work still running after {timeout}s:\n{self.output()}") from None

    def close(self) -> None:
        with suppress(ProcessLookupError, PermissionError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(10)
        if self.master is not None:
            os.close(self.master)


@contextmanager
def work(dsn: str, *args: str, log: Path, tty: bool = False, env: dict[str, str] | None = None) -> Iterator[Work]:
    w = Work(dsn, list(args), log, tty=tty, env=env or {})
    try:
        yield w
    finally:
        w.close()


@pytest.fixture
def tables(conn: psycopg.Connection[Any]) -> psycopg.Connection[Any]:
    create_test_tables(conn)
    conn.execute("CREATE TABLE gates (name text PRIMARY KEY)")
    return conn


def hold_jobs(conn: psycopg.Connection[Any], n: int) -> list[int]:
    return [enqueue_sql(conn, "hold", f'{{"key": "h{i}"}}') for i in range(n)]


def started(conn: psycopg.Connection[Any], n: int) -> bool:
    return all(ledger(conn, f"h{i}", "start") for i in range(n))


def open_gate(conn: psycopg.Connection[Any]) -> None:
    conn.execute("INSERT INTO gates VALUES ('jobs')")


def graceful_stops(w: Work) -> int:
    return w.output().count("shutting down gracefully")


def registered_workers(conn: psycopg.Connection[Any]) -> int:
    row = conn.execute("SELECT count(*) FROM pgqueue.workers").fetchone()
    assert row is not None
    return int(row[0])


def assert_completed_once(conn: psycopg.Connection[Any], job_ids: list[int]) -> None:
    for job_id in job_ids:
        row = job_row(conn, job_id)
        assert (row["state"], row["attempt"], row["errors"]) == ("completed", 1, []), row


# -- the stop signal helper ------------------------------------------------------------


# -- a stop from the process group ------------------------------------------------------


@pytest.mark.parametrize("how", ["ctrl-c on a terminal", "kill -TERM -PGID"])
def test_a_stop_from_the_group_lets_in_flight_jobs_finish(
    dsn: str, tables: psycopg.Connection[Any], tmp_path: Path, how: str
) -> None:
    conn = tables
    job_ids = hold_jobs(conn, 4)
    tty = how.startswith("ctrl-c")
    with work(dsn, "--processes", "2", "--concurrency", "2", log=tmp_path / "w.log", tty=tty) as w:
        wait_until(lambda: started(conn, 4), timeout=60)  # two jobs in each worker process
        if tty:
            w.ctrl_c()
        else:
            w.killpg(signal.SIGTERM)
        wait_until(lambda: graceful_stops(w) == 2, timeout=30)
        assert w.proc.poll() is None, w.output()
        assert "exiting now" not in w.output()
        open_gate(conn)
        assert w.wait(60) == 0, w.output()
    assert_completed_once(conn, job_ids)
    assert registered_workers(conn) == 0


def test_a_second_stop_after_the_window_forces_exit(dsn: str, tables: psycopg.Connection[Any], tmp_path: Path) -> None:
    conn = tables
    job_ids = hold_jobs(conn, 2)
    with work(dsn, "--processes", "2", "--concurrency", "1", log=tmp_path / "w.log", tty=True) as w:
        wait_until(lambda: started(conn, 2), timeout=60)
        w.ctrl_c()
        wait_until(lambda: graceful_stops(w) == 2, timeout=30)
        # Every process received the first stop before this instant, so the next one is
        # past the window for all of them: a second request, not a copy of the first.
        time.sleep(REPEAT_WINDOW + 0.5)
        assert w.proc.poll() is None, w.output()
        w.ctrl_c()
        assert w.wait(30) == 130, w.output()
    assert "second SIGINT" in w.output()
    for job_id in job_ids:  # left running: the rescuer retries them once their lease expires
        assert job_row(conn, job_id)["state"] == "running"


def test_a_stop_while_the_worker_processes_start_is_not_lost(
    dsn: str, tables: psycopg.Connection[Any], tmp_path: Path
) -> None:
    """SIGTERM to the group while both worker processes are still importing the app: they
    must not die of it, nor miss it; they start, then stop cleanly."""
    conn = tables
    gate = tmp_path / "import-gate"
    gate.mkdir()
    env = {"LIFECYCLE_IMPORT_GATE": str(gate)}
    with work(dsn, "--processes", "2", log=tmp_path / "w.log", env=env) as w:
        wait_until(lambda: len(list(gate.glob("importing-*"))) == 2, timeout=60)
        w.killpg(signal.SIGTERM)
        wait_until(lambda: "SIGTERM received: stopping 2 worker processes" in w.output(), timeout=30)
        (gate / "open").touch()
        assert w.wait(60) == 0, w.output()
    assert graceful_stops(w) == 2, w.output()
    assert "restarting" not in w.output()
    assert registered_workers(conn) == 0


# -- after a clean stop ------------------------------------------------------------------


async def test_only_sync_handlers_that_run_count_as_running_not_idle_threads(
    app: pgqueue.App, conn: psycopg.Connection[Any]
) -> None:
    """Bug: at exit, every thread of the handler pool counted as a handler "still running"
    (``14 handler threads still running`` after a clean stop with nothing in flight)."""
    release = threading.Event()

    @app.task(name="quick")
    def quick() -> None:
        pass

    @app.task(name="block")
    def block() -> None:
        release.wait(30)

    quick_ids = [quick.enqueue(conn) for _ in range(5)]
    async with running_worker(app, concurrency=5) as worker:
        await async_wait_until(lambda: all(state_of(conn, i) == "completed" for i in quick_ids))
        assert [t for t in threading.enumerate() if t.name.startswith("pgqueue-job")]  # idle, alive
        assert worker.sync_handlers_running == 0
        block_id = block.enqueue(conn)
        await async_wait_until(lambda: worker.sync_handlers_running == 1)
        release.set()
        await async_wait_until(lambda: state_of(conn, block_id) == "completed")
        assert worker.sync_handlers_running == 0


def test_a_clean_stop_does_not_warn_about_idle_handler_threads(
    dsn: str, conn: psycopg.Connection[Any], tmp_path: Path
) -> None:
    """End to end: the idle threads of the pool do not count (see the test above)."""
    create_test_tables(conn)
    job_ids = [enqueue_sql(conn, "slow", f'{{"key": "t{i}", "seconds": 0.2}}') for i in range(20)]
    with worker_process(dsn, "tests.apps.basic:app", "--concurrency", "20", log=tmp_path / "w.log") as w:
        wait_until(lambda: all(job_row(conn, j)["state"] == "completed" for j in job_ids), timeout=60)
        w.signal(signal.SIGTERM)
        assert w.wait(30) == 0, w.output()
    assert "still running" not in w.output()


def test_a_stuck_sync_handler_is_named_at_exit(dsn: str, tables: psycopg.Connection[Any], tmp_path: Path) -> None:
    conn = tables
    hold_jobs(conn, 1)
    with work(dsn, "--shutdown-timeout", "0.2", log=tmp_path / "w.log") as w:
        wait_until(lambda: started(conn, 1), timeout=60)
        w.killpg(signal.SIGTERM)
        assert w.wait(30) == 0, w.output()
    assert "1 sync handler still running after shutdown; exiting anyway" in w.output()
