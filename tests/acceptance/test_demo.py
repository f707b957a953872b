"""The first README command: `pgqueue demo`, on a given DSN and on the embedded server."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from pgqueue.embedded import embedded_dsn
from pgqueue.migrate import latest_version
from tests.conftest import REPO
from tests.embedded_support import throwaway_pgdata


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
def pgdata() -> Iterator[Path]:
    with throwaway_pgdata() as path:
        yield path


def test_embedded_server_starts_then_is_reused(pgdata: Path, monkeypatch: pytest.MonkeyPatch) -> None:
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


def test_cli_without_dsn_announces_the_embedded_server(pgdata: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "PGQUEUE_DSN"}
    env["PGQUEUE_EMBEDDED_DIR"] = str(pgdata)

    def pgqueue(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "pgqueue", *args], cwd=REPO, capture_output=True, text=True, timeout=120, env=env
        )

    proc = pgqueue("migrate")
    assert proc.returncode == 0, proc.stderr
    assert "started the embedded PostgreSQL" in proc.stderr
    assert "`pgqueue embedded stop`" in proc.stderr
    assert proc.stderr.count("\n") == 1  # exactly one line about it
    assert f"now at version {latest_version()}" in proc.stdout
    # The first README command, on the server now running: a one-line note, no second start.
    demo = pgqueue("demo", "--jobs", "10", "--concurrency", "5")
    assert demo.returncode == 0, demo.stderr
    assert demo.stderr.splitlines() == [
        f"pgqueue: no DSN given, using the embedded PostgreSQL running in {pgdata} (`pgqueue embedded stop` stops it); "
        "set PGQUEUE_DSN to use your own database"
    ]
    assert "enqueued 10 jobs" in demo.stdout
