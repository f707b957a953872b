"""What a user sees on the command line: error lines, ``--version``, ``--traceback``, and
tables that keep every column on narrow terminals. Real ``pgqueue`` subprocesses where the
output matters, on a real database."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
from pathlib import Path

import psycopg
import pytest

from pgqueue import ops
from pgqueue.errors import SchemaNotInstalledError

REPO = Path(__file__).resolve().parent.parent


def pgqueue_cli(
    *args: str, columns: int = 120, cwd: Path = REPO, timeout: float = 60
) -> subprocess.CompletedProcess[str]:
    """``python -m pgqueue ARGS`` with a terminal ``columns`` wide, PGQUEUE_* unset."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PGQUEUE_")}
    env["COLUMNS"] = str(columns)
    env["PYTHONPATH"] = os.pathsep.join([str(cwd), str(REPO)])
    return subprocess.run(
        [sys.executable, "-m", "pgqueue", *args], cwd=cwd, capture_output=True, text=True, timeout=timeout, env=env
    )


def stderr_lines(proc: subprocess.CompletedProcess[str]) -> list[str]:
    return [line for line in proc.stderr.splitlines() if line.strip()]


# -- status/top before migrate ------------------------------------------------------------


def test_status_on_unmigrated_database_logs_nothing_from_the_pipeline(
    empty_dsn: str, caplog: pytest.LogCaptureFixture
) -> None:
    # Whether psycopg complained ("error ignored terminating <psycopg.Pipeline …>") depended
    # on when the aborted results arrived: about one call in three did. Many calls, no line.
    caplog.set_level(logging.DEBUG, logger="psycopg")
    with psycopg.connect(empty_dsn, autocommit=True) as conn:
        for i in range(60):
            with pytest.raises(SchemaNotInstalledError, match="run `pgqueue migrate`"):
                ops.status(conn, "pgqueue", retention=i % 2 == 0)
        assert conn.execute("SELECT 1").fetchone() == (1,)  # the connection is still usable
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING] == []


@pytest.mark.parametrize("command", [("status",), ("top", "--once")])
def test_status_and_top_before_migrate_print_one_line(empty_dsn: str, command: tuple[str, ...]) -> None:
    proc = pgqueue_cli(*command, "--dsn", empty_dsn)
    assert proc.returncode == 1
    assert stderr_lines(proc) == [
        "error: schema 'pgqueue' lacks pgqueue's tables, views or functions: run `pgqueue migrate`"
    ]
