"""``pgqueue queues …``, ``pgqueue tasks …`` and ``pgqueue work --queue NAME=N``: flow control
from the command line, with one clear error for bad input."""

from __future__ import annotations

import json
import signal
from pathlib import Path
from typing import Any

import psycopg
import pytest

from pgqueue import ops
from tests.apps.support import worker_process
from tests.cli_support import assert_one_clear_error, invoke
from tests.conftest import wait_until

Conn = psycopg.Connection[Any]


def queue_row(conn: Conn, name: str) -> tuple[Any, ...] | None:
    return conn.execute(
        "SELECT paused, concurrency, key_concurrency, key_fifo, rate_limit,"
        " extract(epoch FROM rate_period)::float, key_rate_limit, extract(epoch FROM key_rate_period)::float"
        " FROM pgqueue.queues WHERE name = %s",
        [name],
    ).fetchone()


def test_limit_pause_resume_and_list(dsn: str, conn: Conn) -> None:
    result = invoke("queues", "limit", "images", "10", "--create", "--dsn", dsn)
    assert result.exit_code == 0, result.output
    assert "queue images: running; concurrency 10 (running 0)" in result.stdout
    result = invoke(
        "queues", "limit", "images", "--rate", "100/1m", "--key", "1", "--fifo", "--key-rate", "2/1s", "--dsn", dsn
    )
    assert result.exit_code == 0, result.output
    assert queue_row(conn, "images") == (False, 10, 1, True, 100, 60.0, 2, 1.0)
    assert invoke("queues", "pause", "images", "--dsn", dsn).stdout.strip() == "queue images paused"
    assert invoke("queues", "pause", "images", "--dsn", dsn).stdout.strip() == "queue images was already paused"
    listing = invoke("queues", "list", "--dsn", dsn)
    assert listing.exit_code == 0, listing.output
    line = next(line for line in listing.stdout.splitlines() if line.strip().startswith("images"))
    for needle in ("paused", "10", "1 fifo", "100/1m", "2/1s"):
        assert needle in line, line
    as_json = json.loads(invoke("queues", "list", "--json", "--dsn", dsn).stdout)
    assert as_json[0]["queue"] == "images"
    assert as_json[0]["paused"] is True
    assert invoke("queues", "resume", "images", "--dsn", dsn).stdout.strip() == "queue images resumed"
    result = invoke("queues", "limit", "images", "none", "--rate", "none", "--key", "none", "--dsn", dsn)
    assert result.exit_code == 0, result.output
    assert queue_row(conn, "images") == (False, None, None, False, None, None, 2, 1.0)


def test_task_limits(dsn: str, conn: Conn) -> None:
    result = invoke("tasks", "limit", "reports.build", "5", "--dsn", dsn)
    assert result.exit_code == 0, result.output
    assert "at most 5 running at once" in result.stdout
    assert [(t.task, t.concurrency) for t in ops.task_controls(conn, "pgqueue")] == [("reports.build", 5)]
    assert "reports.build" in invoke("tasks", "list", "--dsn", dsn).stdout
    assert invoke("tasks", "limit", "reports.build", "none", "--dsn", dsn).exit_code == 0
    assert ops.task_controls(conn, "pgqueue") == []


@pytest.mark.parametrize(
    ("args", "needles"),
    [
        (["queues", "limit", "nope", "3"], ["unknown queue 'nope'", "add it first"]),
        (["queues", "limit", "images", "0", "--create"], ["concurrency: give a positive integer"]),
        (["queues", "limit", "images", "--rate", "5", "--create"], ["--rate: give N/DURATION"]),
        (["queues", "limit", "images", "--rate", "5/0s", "--create"], ["period must be between 1 millisecond"]),
        (["queues", "limit", "images", "--rate", "5/3", "--create"], ["--rate: invalid duration '3'"]),
        (["queues", "limit", "images", "--key", "2", "--fifo", "--create"], ["fifo needs a key concurrency of 1"]),
        (["queues", "pause", "bad name"], ["invalid queue name 'bad name'"]),
        (["tasks", "limit", "bad task", "3"], ["invalid task name 'bad task'"]),
        (["tasks", "limit", "t", "0"], ["concurrency: give a positive integer"]),
    ],
)
def test_bad_input_is_one_clear_error_and_changes_nothing(
    dsn: str, conn: Conn, args: list[str], needles: list[str]
) -> None:
    result = invoke(*args, "--dsn", dsn)
    assert_one_clear_error(result.exit_code, result.stderr, *needles)
    assert conn.execute("SELECT count(*) FROM pgqueue.queues").fetchone() == (0,)
    assert conn.execute("SELECT count(*) FROM pgqueue.task_limits").fetchone() == (0,)


def test_work_gives_a_queue_its_own_slots(dsn: str, conn: Conn, tmp_path: Path) -> None:
    app = "tests.apps.configured:app"  # serves alpha and beta
    with worker_process(dsn, app, "--queue", "alpha=2", "--queue", "beta=3", log=tmp_path / "w.log") as w:
        row = wait_until(lambda: conn.execute("SELECT queues, concurrency FROM pgqueue.workers").fetchone(), timeout=60)
        assert row == (["alpha", "beta"], 5), w.output()
        assert "queues=alpha=2,beta=3 concurrency=5" in w.output()
        # The queues it serves are known to operators from its start.
        wait_until(lambda: {r[0] for r in conn.execute("SELECT name FROM pgqueue.queues")} >= {"alpha", "beta"})
        w.signal(signal.SIGTERM)
        assert w.wait(30) == 0, w.output()


@pytest.mark.parametrize("value", ["alpha=0", "alpha=x", "=3", "alpha=-1"])
def test_a_bad_queue_option_is_one_clear_error(dsn: str, value: str) -> None:
    result = invoke("work", "tests.apps.configured:app", "--queue", value, "--dsn", dsn)
    assert_one_clear_error(result.exit_code, result.stderr, f"--queue {value!r}", "NAME=N")
