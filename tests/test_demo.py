"""The first README command: `pgqueue demo`, on a given DSN and on the embedded server."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import psycopg

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


def test_embedded_server_starts_then_is_reused(tmp_path: Path, monkeypatch: object) -> None:
    pgdata = tmp_path / "pg"
    env_before = os.environ.get("PGQUEUE_EMBEDDED_DIR")
    os.environ["PGQUEUE_EMBEDDED_DIR"] = str(pgdata)
    try:
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
    finally:
        if env_before is None:
            os.environ.pop("PGQUEUE_EMBEDDED_DIR", None)
        else:
            os.environ["PGQUEUE_EMBEDDED_DIR"] = env_before
        pid_path = pgdata / "postmaster.pid"
        if pid_path.exists():
            pm = int(pid_path.read_text().split()[0])
            os.kill(pm, signal.SIGINT)  # fast shutdown
            wait_until(lambda: not pid_path.exists(), timeout=30)


def test_cli_without_dsn_announces_the_embedded_server(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "PGQUEUE_DSN"}
    env["PGQUEUE_EMBEDDED_DIR"] = str(tmp_path / "pg")
    try:
        proc = subprocess.run(
            [sys.executable, "-m", "pgqueue", "migrate"],
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=120,
            env=env,
        )
        assert proc.returncode == 0, proc.stderr
        assert "pgqueue: database postgresql://postgres@/postgres?host=" in proc.stderr
        assert "(from embedded server; set PGQUEUE_DSN to use your own)" in proc.stderr
        assert proc.stderr.count("\n") == 1  # exactly one line about it
        assert f"now at version {latest_version()}" in proc.stdout
    finally:
        pid_path = tmp_path / "pg" / "postmaster.pid"
        if pid_path.exists():
            os.kill(int(pid_path.read_text().split()[0]), signal.SIGINT)
            wait_until(lambda: not pid_path.exists(), timeout=30)
