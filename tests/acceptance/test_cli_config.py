"""``pgqueue work`` starts from the App's ``worker_config``: options given on the command
line replace single settings, the rest (including settings without an option) stay."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import psycopg
import pytest

from tests.apps.support import REPO, worker_process
from tests.conftest import wait_until

APP = "tests.apps.configured:app"


def registration(conn: psycopg.Connection[Any]) -> tuple[Any, ...] | None:
    return conn.execute(
        "SELECT worker_id, queues, concurrency, extract(epoch FROM expires_at - last_heartbeat)::float"
        " FROM pgqueue.workers"
    ).fetchone()


@pytest.mark.parametrize("processes", ["1", "2"])
def test_work_keeps_the_apps_worker_config_and_applies_only_the_options_given(
    dsn: str, conn: psycopg.Connection[Any], tmp_path: Path, processes: str
) -> None:
    # The app sets worker_id (no CLI option), queues alpha,beta, concurrency 7 and a 4 s
    # heartbeat (a registration lives 3 heartbeats); the command line changes concurrency.
    args = ["--concurrency", "3", "--processes", processes]
    with worker_process(dsn, APP, *args, log=tmp_path / "w.log") as w:
        row = wait_until(lambda: registration(conn), timeout=60)
        assert row == ("configured-in-code", ["alpha", "beta"], 3, 12.0), w.output()
        assert "worker configured-in-code started: queues=alpha,beta concurrency=3" in w.output()
        w.signal(signal.SIGTERM)
        assert w.wait(30) == 0, w.output()


@pytest.mark.parametrize("processes", ["1", "2"])
def test_an_option_that_contradicts_the_apps_worker_config_is_one_clear_error(dsn: str, processes: str) -> None:
    # --lease 6 with the app's 4 s heartbeat: leases would expire between heartbeats.
    result = subprocess.run(
        [sys.executable, "-m", "pgqueue", "work", APP, "--dsn", dsn, "--lease", "6", "--processes", processes],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode != 0
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert lines == [
        "error: heartbeat_interval (4.0s) must be at most half the lease (6.0s), or leases expire between heartbeats"
    ]
