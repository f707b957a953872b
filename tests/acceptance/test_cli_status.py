"""``pgqueue status`` and ``pgqueue top`` on a real database (CliRunner, and a subprocess for
Ctrl-C)."""

from __future__ import annotations

import asyncio
import json
import shlex
import signal
import subprocess
import sys
from dataclasses import replace
from datetime import datetime, timedelta
from typing import Any

import psycopg
import pytest
from typer.testing import CliRunner, Result

import pgqueue
from pgqueue import ops
from pgqueue._dsn import display_dsn
from pgqueue.cli import app as cli_app
from pgqueue.cli.top import Throughput
from tests.apps.support import REPO
from tests.cli_support import assert_one_clear_error
from tests.conftest import running_worker, wait_until
from tests.ops_support import enqueue, error_entry, insert_finished


def cli(*args: str) -> Result:
    env = {"PGQUEUE_DSN": None, "PGQUEUE_SCHEMA": None, "COLUMNS": "200"}
    return CliRunner().invoke(cli_app, list(args), env=env)


def seed(conn: psycopg.Connection[Any]) -> None:
    enqueue(conn, "app.resize", "images")
    enqueue(conn, "app.resize", "images")
    insert_finished(conn, "completed", ago=timedelta(seconds=10), queue="images")
    insert_finished(
        conn, "discarded", ago=timedelta(seconds=10), queue="emails", task="app.send", errors=[error_entry(1, "smtp")]
    )


# -- status -------------------------------------------------------------------------------


async def test_status_shows_every_view(app: pgqueue.App, dsn: str, conn: psycopg.Connection[Any]) -> None:
    seed(conn)
    async with running_worker(app, queues=("images",)) as worker:
        result = await asyncio.to_thread(cli, "status", "--dsn", dsn)
    assert result.exit_code == 0, result.output
    out = result.stdout
    assert "pgqueue status · schema pgqueue" in out
    for needle in ("queues", "images", "emails", "workers (1 alive)", worker.worker_id, "recent failures"):
        assert needle in out, needle
    assert "app.send" in out
    assert "smtp" in out
    for needle in ("health", "live partition", "oldest transaction", "retention", "completed", "cancelled"):
        assert needle in out, needle


async def test_status_json(app: pgqueue.App, dsn: str, conn: psycopg.Connection[Any]) -> None:
    seed(conn)
    async with running_worker(app, queues=("images",)) as worker:
        result = await asyncio.to_thread(cli, "status", "--dsn", dsn, "--json")
    assert result.exit_code == 0, result.output
    snap = json.loads(result.stdout)
    assert set(snap) == {"at", "queues", "workers", "failures", "health", "retention", "controls", "task_controls"}
    datetime.fromisoformat(snap["at"])
    queues = {q["queue"]: q for q in snap["queues"]}
    assert queues["images"]["available"] + queues["images"]["running"] + queues["images"]["completed_1m"] >= 2
    assert queues["emails"]["discarded_1m"] == 1
    assert set(queues["images"]) == {f.name for f in ops.QueueStats.__dataclass_fields__.values()}
    mine = [w for w in snap["workers"] if w["worker_id"] == worker.worker_id]
    assert len(mine) == 1
    assert mine[0]["queues"] == ["images"]
    assert datetime.fromisoformat(mine[0]["last_heartbeat"]).tzinfo is not None
    assert [f["task"] for f in snap["failures"]] == ["app.send"]
    assert snap["health"]["live_rows"] >= 0
    assert {r["state"] for r in snap["retention"]} == {"completed", "discarded", "cancelled"}


def test_status_on_unmigrated_database(empty_dsn: str) -> None:
    result = cli("status", "--dsn", empty_dsn)
    assert_one_clear_error(
        result.exit_code, result.stderr, f"run `pgqueue migrate --dsn {shlex.quote(display_dsn(empty_dsn))}`"
    )


# -- top ----------------------------------------------------------------------------------


def test_top_refreshes_n_times_with_one_snapshot_each(
    dsn: str, conn: psycopg.Connection[Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    seed(conn)
    calls: list[bool] = []
    real = ops.status

    def counting(*args: Any, **kwargs: Any) -> ops.StatusSnapshot:
        calls.append(kwargs.get("retention", True))
        return real(*args, **kwargs)

    monkeypatch.setattr(ops, "status", counting)
    result = cli("top", "--dsn", dsn, "--iterations", "3", "--interval", "0.1")
    assert result.exit_code == 0, result.output
    assert calls == [False, False, False]  # one round trip per refresh, retention left out
    out = result.stdout
    assert "pgqueue top · pgqueue" in out
    assert "throughput" in out
    assert "jobs/s" in out
    assert "images" in out
    assert "app.send" in out

    calls.clear()
    once = cli("top", "--dsn", dsn, "--once")
    assert once.exit_code == 0, once.output
    assert len(calls) == 1
    assert "needs two refreshes" in once.stdout


def test_top_on_unmigrated_database(empty_dsn: str) -> None:
    result = cli("top", "--dsn", empty_dsn, "--once")
    assert_one_clear_error(
        result.exit_code, result.stderr, f"run `pgqueue migrate --dsn {shlex.quote(display_dsn(empty_dsn))}`"
    )


# Starts ``pgqueue top`` with SIGINT at the given disposition (exec keeps an ignored one,
# as a shell does for a background job): how the test runner was launched must not matter.
_LAUNCH_TOP = (
    "import os, signal, sys; signal.signal(signal.SIGINT, getattr(signal, sys.argv[1]));"
    " os.execv(sys.executable, [sys.executable, '-m', 'pgqueue', 'top', *sys.argv[2:]])"
)


@pytest.mark.parametrize("disposition", ["SIG_DFL", "SIG_IGN"])
def test_top_exits_cleanly_on_ctrl_c(dsn: str, conn: psycopg.Connection[Any], disposition: str) -> None:
    with subprocess.Popen(
        [sys.executable, "-c", _LAUNCH_TOP, disposition, "--dsn", dsn, "--interval", "60"],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    ) as proc:
        try:
            # Interrupt once it is inside its refresh loop, between two refreshes: its
            # connection (in this test's own database) is idle after a refresh's queries,
            # and the next refresh is a minute away.
            wait_until(
                lambda: (
                    conn.execute(
                        "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
                        " AND application_name = 'pgqueue top' AND state = 'idle'"
                        " AND query NOT LIKE 'SET application_name%%'"
                    ).fetchone()
                    == (1,)
                )
            )
            proc.send_signal(signal.SIGINT)
            _, err = proc.communicate(timeout=20)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.communicate()
    assert proc.returncode == 0, err
    assert err == ""


def test_top_in_process_gives_back_the_callers_sigint_handler(dsn: str) -> None:
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        result = cli("top", "--dsn", dsn, "--once")
        assert result.exit_code == 0, result.output
        assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN
    finally:
        signal.signal(signal.SIGINT, previous)


# -- throughput ---------------------------------------------------------------------------


def test_throughput_from_real_snapshots(conn: psycopg.Connection[Any]) -> None:
    tp = Throughput()
    first = ops.status(conn, retention=False)
    tp.update(first)
    for _ in range(7):
        insert_finished(conn, "completed", ago=timedelta(0), queue="images")
    second = ops.status(conn, retention=False)
    if second.at <= first.at:  # the same clock tick: move on by a microsecond
        second = replace(second, at=first.at + timedelta(microseconds=1))
    tp.update(second)
    assert list(tp.history) == [7]
