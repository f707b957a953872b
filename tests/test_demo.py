"""The first README command: `pgqueue demo`, on a given DSN and on the embedded server."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from pgqueue.embedded import embedded_dsn
from pgqueue.migrate import latest_version
from tests.conftest import wait_until

REPO = Path(__file__).resolve().parent.parent


def test_demo_runs_to_completion_and_summarises(dsn: str) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "pgqueue", "demo", "--dsn", dsn, "--jobs", "600", "--concurrency", "20"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "COLUMNS": "120"},
    )
    assert proc.returncode == 0, proc.stderr
    assert "enqueued 600 jobs" in proc.stdout
    assert "jobs/s" in proc.stdout
    with psycopg.connect(dsn) as conn:
        states: dict[str, int] = dict(
            conn.execute("SELECT state::text, count(*) FROM pgqueue_demo.jobs GROUP BY 1").fetchall()
        )
    # Every job reached a final state; the doomed ones are in the dead letter.
    assert sum(states.values()) == 600
    assert set(states) <= {"completed", "discarded"}
    assert states["discarded"] >= 3


@pytest.fixture
def embedded_dir() -> Iterator[Path]:
    """A directory for an embedded server's data, outside pytest's tmp_path: running as
    root, the wheel runs PostgreSQL as its own user and opens the parent directories to it,
    and every pytest session that starts meanwhile (another run on this machine) closes
    /tmp/pytest-of-<user> to its owner again, failing the server mid-initdb."""
    parent = Path(tempfile.mkdtemp(prefix="pgqueue-embedded-test-"))
    try:
        yield parent / "pg"
    finally:
        stop_embedded(parent / "pg")
        shutil.rmtree(parent, ignore_errors=True)


def stop_embedded(pgdata: Path) -> None:
    """Fast shutdown of a server still running in ``pgdata``, waiting for it to go."""
    pid_path = pgdata / "postmaster.pid"
    if not pid_path.exists():
        return
    with contextlib.suppress(ProcessLookupError, ValueError, IndexError):
        os.kill(int(pid_path.read_text().split()[0]), signal.SIGINT)
        wait_until(lambda: not pid_path.exists(), timeout=30)


def test_embedded_server_starts_then_is_reused(embedded_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pgdata = embedded_dir
    monkeypatch.setenv("PGQUEUE_EMBEDDED_DIR", str(pgdata))
    first = embedded_dsn(announce=False)
    with psycopg.connect(first) as conn:
        conn.execute("CREATE TABLE marker (x int)")
        conn.commit()
    pid_file = pgdata / "postmaster.pid"
    pid = int(pid_file.read_text().split()[0])
    second = embedded_dsn(announce=False)  # reuses the running server
    with psycopg.connect(second) as conn:
        assert conn.execute("SELECT to_regclass('marker') IS NOT NULL").fetchone() == (True,)
    assert int(pid_file.read_text().split()[0]) == pid


def test_cli_without_dsn_announces_the_embedded_server(embedded_dir: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "PGQUEUE_DSN"}
    env["PGQUEUE_EMBEDDED_DIR"] = str(embedded_dir)
    proc = subprocess.run(
        [sys.executable, "-m", "pgqueue", "migrate"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    assert proc.returncode == 0, proc.stderr
    assert "using the embedded PostgreSQL" in proc.stderr
    assert proc.stderr.count("\n") == 1  # exactly one line about it
    assert f"now at version {latest_version()}" in proc.stdout
