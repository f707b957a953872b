"""Test helpers (not an app): ``pgqueue work`` subprocesses on the test apps, job-table
queries, and a forced lease rescue.

Every process starts in its own session, so ``kill()`` also reaches the children of a
``--processes N`` supervisor. Output goes to a log file, shown when an assertion fails.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any

import psycopg

from pgqueue._db.sql import queries_for

REPO = Path(__file__).resolve().parents[2]


class WorkerProcess:
    """One ``python -m pgqueue work TARGET --dsn DSN ...`` process."""

    def __init__(self, dsn: str, target: str, args: Sequence[str], log: Path) -> None:
        self.log = log
        env = {k: v for k, v in os.environ.items() if not k.startswith("PGQUEUE_")}
        env["PYTHONUNBUFFERED"] = "1"
        self.cmd = [sys.executable, "-m", "pgqueue", "work", target, "--dsn", dsn, *args]
        with open(log, "ab") as out:
            self.proc = subprocess.Popen(
                self.cmd, cwd=REPO, stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True
            )

    @property
    def pid(self) -> int:
        return self.proc.pid

    def alive(self) -> bool:
        return self.proc.poll() is None

    def output(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""

    def signal(self, signum: int) -> None:
        if self.alive():
            self.proc.send_signal(signum)

    def wait(self, timeout: float) -> int:
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"worker {self.pid} still running after {timeout}s:\n{self.output()}") from None

    def kill(self) -> None:
        """SIGKILL the process and everything in its session, then reap it."""
        with suppress(ProcessLookupError, PermissionError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(10)


@contextmanager
def worker_process(dsn: str, target: str, *args: str, log: Path) -> Iterator[WorkerProcess]:
    """A worker subprocess that is always killed (with its children) on exit."""
    proc = WorkerProcess(dsn, target, args, log)
    try:
        yield proc
    finally:
        proc.kill()


def pid_alive(pid: int) -> bool:
    """True while ``pid`` exists and is not a zombie (orphans may stay unreaped here)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def create_test_tables(conn: psycopg.Connection[Any]) -> None:
    """The tables the test apps write to (see tests/apps/basic.py)."""
    conn.execute(
        "CREATE TABLE IF NOT EXISTS ledger (id bigserial PRIMARY KEY, job_key text NOT NULL, event text NOT NULL,"
        " pid int NOT NULL, at timestamptz NOT NULL DEFAULT clock_timestamp())"
    )
    conn.execute("CREATE TABLE IF NOT EXISTS effects (job_key text NOT NULL, attempt int NOT NULL)")


def ledger(conn: psycopg.Connection[Any], key: str, event: str | None = None) -> list[tuple[str, int]]:
    """(event, pid) rows for ``key`` in insertion order, optionally of one event."""
    rows = conn.execute(
        "SELECT event, pid FROM ledger WHERE job_key = %s AND (%s::text IS NULL OR event = %s) ORDER BY id",
        [key, event, event],
    ).fetchall()
    return [(r[0], r[1]) for r in rows]


def job_row(conn: psycopg.Connection[Any], job_id: int) -> dict[str, Any]:
    cur = conn.execute(
        "SELECT id, state::text AS state, attempt, max_attempts, errors, worker_id, lease_token, run_at,"
        " started_at, finished_at FROM pgqueue.jobs WHERE id = %s",
        [job_id],
    )
    row = cur.fetchone()
    assert row is not None, f"job {job_id} not found"
    assert cur.description is not None
    return dict(zip([c.name for c in cur.description], row, strict=True))


def wait_for_exit(procs: Sequence[WorkerProcess], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    for p in procs:
        p.wait(max(0.1, deadline - time.monotonic()))


def enqueue_sql(conn: psycopg.Connection[Any], task: str, args: str, **kw: Any) -> int:
    extra = "".join(f", {k} => %({k})s" for k in kw)
    row = conn.execute(f"SELECT pgqueue.enqueue(%(task)s, %(args)s::jsonb{extra})", {"task": task, "args": args, **kw})
    found = row.fetchone()
    assert found is not None
    return int(found[0])


def state_of(conn: psycopg.Connection[Any], job_id: int) -> str | None:
    row = conn.execute("SELECT state::text FROM pgqueue.jobs WHERE id = %s", [job_id]).fetchone()
    return None if row is None else str(row[0])


def is_final(conn: psycopg.Connection[Any], job_id: int) -> bool:
    return state_of(conn, job_id) in {"completed", "discarded", "cancelled"}


def rows_for(conn: psycopg.Connection[Any], job_id: int) -> int:
    row = conn.execute("SELECT count(*) FROM pgqueue.jobs WHERE id = %s", [job_id]).fetchone()
    assert row is not None
    return int(row[0])


def force_rescue(dsn: str, job_id: int, *, hold: bool, timeout: float = 10.0) -> None:
    """Expire ``job_id``'s lease and run the rescuer's maintenance_tick on it, atomically.

    Both happen in one transaction, so no worker's own tick can rescue it in between with
    other settings. ``hold=True`` then pushes run_at an hour ahead, so the job stays
    ``retryable``; otherwise it is due at once (zero backoff).
    """
    tick = queries_for("pgqueue")["maintenance_tick"]
    deadline = time.monotonic() + timeout
    while True:
        with psycopg.connect(dsn) as c:
            cur = c.execute(
                "UPDATE pgqueue.jobs_live SET lease_expires_at = now() - interval '1 second'"
                " WHERE id = %s AND state = 'running'",
                [job_id],
            )
            assert cur.rowcount == 1, f"job {job_id} is not running"
            result = c.execute(
                tick,
                {
                    "lock_name": "pgqueue.maintenance:pgqueue",
                    "since": None,
                    "batch": 1000,
                    "backoff_base": 0.0,
                    "backoff_cap": 0.0,
                    "default_max_attempts": 20,
                },
            ).fetchone()
            assert result is not None
            leader, _promoted, rescued, _discarded = result[:4]
            if leader and rescued == 1:
                if hold:
                    c.execute("UPDATE pgqueue.jobs_live SET run_at = now() + interval '1 hour' WHERE id = %s", [job_id])
                c.commit()
                return
            c.rollback()  # a worker's tick held the lock this instant: try again
        if time.monotonic() > deadline:
            raise AssertionError(f"could not rescue job {job_id} within {timeout}s")
        time.sleep(0.02)


def assert_lease_expired_errors(errors: list[dict[str, Any]], attempts: list[int]) -> None:
    assert [e["type"] for e in errors] == ["LeaseExpired"] * len(attempts), errors
    assert [e["attempt"] for e in errors] == attempts
    for e in errors:
        assert e["worker"]
        assert e["at"]
        assert "lease expired" in e["message"]
