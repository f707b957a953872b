"""``pgqueue jobs list/show/retry/cancel/purge`` through typer's CliRunner on a real database."""

from __future__ import annotations

import asyncio
import json
import re
import shlex
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest
from typer.testing import CliRunner, Result

import pgqueue
from pgqueue._dsn import display_dsn
from pgqueue.cli import app as cli_app
from tests.cli_support import assert_one_clear_error, invoke
from tests.conftest import async_wait_until, running_worker
from tests.ops_support import TRACEBACK, enqueue, error_entry, insert_finished, state_of

SUMMARY_KEYS = {
    "id",
    "queue",
    "task",
    "state",
    "priority",
    "attempt",
    "max_attempts",
    "run_at",
    "created_at",
    "started_at",
    "finished_at",
    "unique_key",
    "worker_id",
    "error_count",
    "last_error",
    "scheduled_at",
    "snoozes",
    "expires_at",
    "concurrency_key",
    "dedupe_key",
}


def jobs(dsn: str, *args: str) -> Result:
    """``pgqueue jobs ARGS`` on a wide terminal, so table cells are not wrapped."""
    env = {"PGQUEUE_DSN": None, "PGQUEUE_SCHEMA": None, "COLUMNS": "200"}
    return CliRunner().invoke(cli_app, ["jobs", *args, "--dsn", dsn], env=env)


# -- list ---------------------------------------------------------------------------------


def test_list_shows_a_table_newest_first(dsn: str, conn: psycopg.Connection[Any]) -> None:
    first = enqueue(conn, "app.first", "mail")
    dead = insert_finished(conn, "discarded", ago=timedelta(minutes=1), task="app.dead")
    result = jobs(dsn, "list")
    assert result.exit_code == 0, result.output
    out = result.stdout
    assert "2 job(s)" in out
    assert out.index(str(dead)) < out.index("app.first")
    assert "available" in out
    assert "discarded" in out
    assert "ValueError: bad row 7" in out
    assert str(first) in out


def test_list_json_has_stable_keys_and_iso_times(dsn: str, conn: psycopg.Connection[Any]) -> None:
    waiting = enqueue(conn, "app.a", "q1")
    done = insert_finished(conn, "completed", ago=timedelta(seconds=5), task="app.b", queue="q2")
    result = jobs(dsn, "list", "--json")
    assert result.exit_code == 0, result.output
    rows = json.loads(result.stdout)
    assert [r["id"] for r in rows] == [done, waiting]
    for r in rows:
        assert set(r) == SUMMARY_KEYS
        assert datetime.fromisoformat(r["created_at"]).tzinfo is not None
    assert rows[0]["state"] == "completed"
    assert datetime.fromisoformat(rows[0]["finished_at"]) <= datetime.now(UTC)
    assert rows[1]["finished_at"] is None

    filtered = json.loads(jobs(dsn, "list", "--json", "--state", "available", "--queue", "q1").stdout)
    assert [r["id"] for r in filtered] == [waiting]
    assert json.loads(jobs(dsn, "list", "--json", "--task", "app.b").stdout)[0]["id"] == done
    assert json.loads(jobs(dsn, "list", "--json", "--limit", "1").stdout)[0]["id"] == done
    assert json.loads(jobs(dsn, "list", "--json", "--queue", "none").stdout) == []


def test_list_rejects_an_unknown_state(dsn: str) -> None:
    result = jobs(dsn, "list", "--state", "finished")
    assert result.exit_code == 1
    assert_one_clear_error(result.exit_code, result.stderr, "unknown state 'finished'")


# -- show ---------------------------------------------------------------------------------


def test_show_prints_args_attempts_and_each_traceback(dsn: str, conn: psycopg.Connection[Any]) -> None:
    errors = [error_entry(1, "first failure"), error_entry(2, "second failure", "builtins.KeyError")]
    job_id = insert_finished(
        conn, "discarded", ago=timedelta(minutes=2), errors=errors, args={"user_id": 42, "email": "a@b.c"}
    )
    result = jobs(dsn, "show", str(job_id))
    assert result.exit_code == 0, result.output
    out = result.stdout
    assert f"job {job_id}" in out
    assert "discarded" in out
    assert '"user_id": 42' in out
    assert re.search(r"attempts +2 of 3", out)
    assert "error 1/2" in out
    assert "error 2/2" in out
    assert "builtins.ValueError: first failure" in out
    assert "builtins.KeyError: second failure" in out
    assert out.count("Traceback (most recent call last):") == 2
    assert 'File "app.py", line 3, in f' in out


def test_show_json(dsn: str, conn: psycopg.Connection[Any]) -> None:
    job_id = insert_finished(conn, "discarded", ago=timedelta(minutes=2), args={"x": [1, 2]})
    result = jobs(dsn, "show", str(job_id), "--json")
    assert result.exit_code == 0, result.output
    job = json.loads(result.stdout)
    assert set(job) == SUMMARY_KEYS | {"args", "errors", "lease_expires_at", "cancel_requested_at", "result"}
    assert job["result"] is None
    assert job["args"] == {"x": [1, 2]}
    assert job["errors"][0]["traceback"] == TRACEBACK
    assert set(job["errors"][0]) == {"attempt", "type", "message", "traceback", "worker", "at"}
    assert datetime.fromisoformat(job["errors"][0]["at"]) == datetime(2026, 1, 1, tzinfo=UTC)


def test_show_prints_a_completed_jobs_result_and_json_has_it(dsn: str, conn: psycopg.Connection[Any]) -> None:
    done = insert_finished(conn, "completed", ago=timedelta(seconds=3))
    conn.execute("""UPDATE pgqueue.jobs SET result = '{"rows": 3, "path": "/tmp/é"}' WHERE id = %s""", [done])
    empty = insert_finished(conn, "completed", ago=timedelta(seconds=3))
    big = insert_finished(conn, "completed", ago=timedelta(seconds=3))
    conn.execute("UPDATE pgqueue.jobs SET result = to_jsonb(repeat('x', 20000)) WHERE id = %s", [big])
    out = jobs(dsn, "show", str(done)).stdout
    # jsonb keeps keys shortest first.
    assert re.search(r"result\s+\{\s+\"path\": \"/tmp/é\",\s+\"rows\": 3\s+\}", out), out
    assert "none (the handler returned None)" in jobs(dsn, "show", str(empty)).stdout
    assert "more characters: see --json" in jobs(dsn, "show", str(big)).stdout
    assert json.loads(jobs(dsn, "show", str(done), "--json").stdout)["result"] == {"rows": 3, "path": "/tmp/é"}
    assert json.loads(jobs(dsn, "show", str(big), "--json").stdout)["result"] == "x" * 20000
    waiting = enqueue(conn, "app.a")
    assert "result" not in jobs(dsn, "show", str(waiting)).stdout.split("args", 1)[1]


def test_show_a_missing_job_is_one_clear_error(dsn: str) -> None:
    result = jobs(dsn, "show", "987654")
    assert result.exit_code == 1
    assert_one_clear_error(result.exit_code, result.stderr, "no job with id 987654")


# -- retry --------------------------------------------------------------------------------


def test_retry_one_job(dsn: str, conn: psycopg.Connection[Any]) -> None:
    dead = insert_finished(conn, "discarded", ago=timedelta(minutes=1))
    result = jobs(dsn, "retry", str(dead))
    assert result.exit_code == 0, result.output
    assert f"job {dead} is available again" in result.stdout
    assert state_of(conn, dead) == "available"
    again = jobs(dsn, "retry", str(dead))
    assert_one_clear_error(again.exit_code, again.stderr, f"job {dead} is available", "only discarded or cancelled")
    missing = jobs(dsn, "retry", "555555")
    assert missing.exit_code == 1
    assert_one_clear_error(missing.exit_code, missing.stderr, "no job with id 555555")


def test_retry_all_discarded_of_one_task(dsn: str, conn: psycopg.Connection[Any]) -> None:
    mine = [insert_finished(conn, "discarded", ago=timedelta(minutes=1), task="app.mine") for _ in range(3)]
    other = insert_finished(conn, "discarded", ago=timedelta(minutes=1), task="app.other")
    result = jobs(dsn, "retry", "--all-discarded", "--task", "app.mine")
    assert result.exit_code == 0, result.output
    assert "3 discarded job(s) of task app.mine available again" in result.stdout
    assert [state_of(conn, i) for i in mine] == ["available"] * 3
    assert state_of(conn, other) == "discarded"
    result = jobs(dsn, "retry", "--all-discarded")
    assert "1 discarded job(s) available again" in result.stdout
    assert state_of(conn, other) == "available"


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        ((), "either a job ID or --all-discarded"),
        (("7", "--all-discarded"), "either a job ID or --all-discarded"),
        (("7", "--task", "x"), "--task only goes with --all-discarded"),
    ],
)
def test_retry_usage_errors(dsn: str, args: tuple[str, ...], needle: str) -> None:
    result = jobs(dsn, "retry", *args)
    assert result.exit_code == 1
    assert_one_clear_error(result.exit_code, result.stderr, needle)


# -- cancel -------------------------------------------------------------------------------


def test_cancel_waiting_finished_and_missing(dsn: str, conn: psycopg.Connection[Any]) -> None:
    waiting = enqueue(conn, run_at=datetime.now(UTC) + timedelta(hours=1))
    result = jobs(dsn, "cancel", str(waiting))
    assert result.exit_code == 0, result.output
    assert f"job {waiting} cancelled" in result.stdout
    assert state_of(conn, waiting) == "cancelled"

    done = insert_finished(conn, "completed", ago=timedelta(minutes=1))
    finished = jobs(dsn, "cancel", str(done))
    assert_one_clear_error(finished.exit_code, finished.stderr, "already finished as completed")
    assert state_of(conn, done) == "completed"

    missing = jobs(dsn, "cancel", "31337")
    assert missing.exit_code == 1
    assert_one_clear_error(missing.exit_code, missing.stderr, "no job with id 31337")


async def test_cancel_a_running_job_stops_it(app: pgqueue.App, dsn: str, conn: psycopg.Connection[Any]) -> None:
    @app.task(name="cli.long")
    async def long() -> None:
        await asyncio.sleep(60)

    job_id = long.enqueue(conn)
    async with running_worker(app, heartbeat_interval=0.2, lease=5, shutdown_timeout=1):
        await async_wait_until(lambda: state_of(conn, job_id) == "running")
        result = await asyncio.to_thread(jobs, dsn, "cancel", str(job_id))
        assert result.exit_code == 0, result.output
        assert "is running: its worker will cancel it at its next check" in result.stdout
        await async_wait_until(lambda: state_of(conn, job_id) == "cancelled", timeout=20)
    shown = json.loads((await asyncio.to_thread(jobs, dsn, "show", str(job_id), "--json")).stdout)
    assert shown["state"] == "cancelled"
    assert shown["finished_at"] is not None
    assert shown["last_error"].endswith("Cancel: cancelled by an operator")


# -- purge --------------------------------------------------------------------------------


def test_purge_json_and_text(dsn: str, conn: psycopg.Connection[Any]) -> None:
    old = [insert_finished(conn, "cancelled", ago=timedelta(days=d)) for d in (4, 5)]
    recent = insert_finished(conn, "cancelled", ago=timedelta(minutes=5))
    result = jobs(dsn, "purge", "--state", "cancelled", "--older-than", "2d", "--json")
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert set(report) == {"state", "cutoff", "dropped_partitions", "dropped_rows_estimate", "deleted_rows"}
    assert report["state"] == "cancelled"
    assert len(report["dropped_partitions"]) >= 2
    assert report["deleted_rows"] == 0
    assert datetime.fromisoformat(report["cutoff"]) < datetime.now(UTC) - timedelta(days=1)
    assert [state_of(conn, i) for i in old] == [None, None]
    assert state_of(conn, recent) == "cancelled"

    text = jobs(dsn, "purge", "--state", "cancelled", "--older-than", "1m")
    assert text.exit_code == 0, text.output
    assert "purged cancelled jobs finished before" in text.stdout
    assert "deleted 1 row(s)" in text.stdout
    assert state_of(conn, recent) is None


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (("--state", "running", "--older-than", "1d"), "only completed, discarded or cancelled"),
        (("--state", "completed", "--older-than", "soon"), "--older-than: invalid duration 'soon': not a duration"),
        (("--state", "completed", "--older-than", "3"), "--older-than: invalid duration '3': needs a unit, e.g. 3s"),
        (("--state", "completed", "--older-than", "forever"), "'forever' is not accepted here"),
        (("--state", "gone", "--older-than", "1d"), "unknown state 'gone'"),
    ],
)
def test_purge_bad_input(dsn: str, conn: psycopg.Connection[Any], args: tuple[str, ...], needle: str) -> None:
    live = enqueue(conn)
    result = jobs(dsn, "purge", *args)
    assert result.exit_code == 1
    assert_one_clear_error(result.exit_code, result.stderr, needle)
    assert state_of(conn, live) == "available"


# -- environment --------------------------------------------------------------------------


@pytest.mark.parametrize("command", [("list",), ("show", "1"), ("cancel", "1"), ("retry", "1")])
def test_unmigrated_database_says_run_migrate(empty_dsn: str, command: tuple[str, ...]) -> None:
    result = jobs(empty_dsn, *command)
    assert result.exit_code == 1
    assert_one_clear_error(
        result.exit_code, result.stderr, f"run `pgqueue migrate --dsn {shlex.quote(display_dsn(empty_dsn))}`"
    )


def test_invalid_schema_name_is_refused(dsn: str) -> None:
    result = invoke("jobs", "list", "--dsn", dsn, "--schema", "Robert'); DROP TABLE x;--")
    assert result.exit_code == 1
    assert_one_clear_error(result.exit_code, result.stderr, "invalid schema name")
