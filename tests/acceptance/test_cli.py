"""The ``pgqueue`` command line: typer's CliRunner in-process, subprocesses for ``work``."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import psycopg
import pytest

from pgqueue._db.sql import load_migrations
from pgqueue.migrate import latest_version
from tests.apps.support import REPO, create_test_tables, job_row, ledger, worker_process
from tests.cli_support import assert_one_clear_error, invoke
from tests.conftest import wait_until

UNREACHABLE = "postgresql://postgres@127.0.0.1:1/x?connect_timeout=3"


def run_cli(*args: str, timeout: float = 30) -> subprocess.CompletedProcess[str]:
    """``python -m pgqueue ARGS`` from the repository root, killed after ``timeout``."""
    env_cmd = [sys.executable, "-m", "pgqueue", *args]
    # As a context manager: the pipes are closed and the process reaped on every path (a
    # leaked Popen warns later, in whichever test the garbage collector runs).
    with subprocess.Popen(
        env_cmd, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True
    ) as proc:
        try:
            out, err = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)  # the process and any worker children it forked
            out, err = proc.communicate()
            raise AssertionError(f"`pgqueue {' '.join(args)}` still running after {timeout}s:\n{err[-2000:]}") from None
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
    return subprocess.CompletedProcess(env_cmd, proc.returncode, out, err)


def count_jobs(conn: psycopg.Connection[Any]) -> int:
    row = conn.execute("SELECT count(*) FROM pgqueue.jobs").fetchone()
    assert row is not None
    return int(row[0])


# -- migrate ----------------------------------------------------------------------------


def test_migrate_twice(empty_dsn: str) -> None:
    first = invoke("migrate", "--dsn", empty_dsn)
    assert first.exit_code == 0, first.output
    versions = [m.version for m in load_migrations()]
    assert f"applied {', '.join(map(str, versions))}; now at version {latest_version()}" in first.stdout
    second = invoke("migrate", "--dsn", empty_dsn)
    assert second.exit_code == 0, second.output
    assert f"up to date at version {latest_version()}" in second.stdout
    with psycopg.connect(empty_dsn) as c:
        assert c.execute("SELECT count(*) FROM pgqueue.migrations").fetchone() == (len(versions),)
        assert c.execute("SELECT to_regclass('pgqueue.jobs') IS NOT NULL").fetchone() == (True,)


def test_migrate_other_schema(empty_dsn: str) -> None:
    result = invoke("migrate", "--dsn", empty_dsn, "--schema", "jobs_b")
    assert result.exit_code == 0, result.output
    assert "jobs_b" in result.stdout
    with psycopg.connect(empty_dsn) as c:
        assert c.execute("SELECT to_regclass('jobs_b.jobs') IS NOT NULL").fetchone() == (True,)
        assert c.execute("SELECT to_regclass('pgqueue.jobs')").fetchone() == (None,)


def test_migrate_invalid_schema_name(empty_dsn: str) -> None:
    result = invoke("migrate", "--dsn", empty_dsn, "--schema", 'x"; DROP TABLE y; --')
    assert_one_clear_error(result.exit_code, result.stderr, "invalid schema name")


# -- enqueue ----------------------------------------------------------------------------


def test_enqueue_prints_the_id_and_creates_the_row(dsn: str, conn: psycopg.Connection[Any]) -> None:
    result = invoke(
        "enqueue", "reports.build", "--args", '{"user_id": 42, "tags": ["a", "b"]}', "--queue", "reports",
        "--priority", "7", "--dsn", dsn,
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    job_id = int(result.stdout.strip())
    row = conn.execute(
        "SELECT task, args, queue, priority, state::text, attempt FROM pgqueue.jobs WHERE id = %s", [job_id]
    ).fetchone()
    assert row == ("reports.build", {"user_id": 42, "tags": ["a", "b"]}, "reports", 7, "available", 0)


def test_enqueue_delay_and_unique_key(dsn: str, conn: psycopg.Connection[Any]) -> None:
    first = invoke("enqueue", "t", "--delay", "60", "--unique-key", "only-once", "--dsn", dsn)
    second = invoke("enqueue", "t", "--delay", "60", "--unique-key", "only-once", "--dsn", dsn)
    assert first.exit_code == 0, first.output
    assert second.exit_code == 0, second.output
    assert first.stdout.strip() == second.stdout.strip()
    row = job_row(conn, int(first.stdout))
    assert row["state"] == "scheduled"
    assert count_jobs(conn) == 1


def test_enqueue_defaults_to_empty_args(dsn: str, conn: psycopg.Connection[Any]) -> None:
    result = invoke("enqueue", "noargs", "--dsn", dsn)
    assert result.exit_code == 0, result.output
    assert conn.execute("SELECT args FROM pgqueue.jobs WHERE id = %s", [int(result.stdout)]).fetchone() == ({},)


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        ("not json", "not valid JSON"),
        ("{'single': 'quotes'}", "not valid JSON"),
        ("[1]", "JSON object"),
        ('"text"', "JSON object"),
        ("null", "JSON object"),
    ],
)
def test_enqueue_rejects_bad_args(dsn: str, conn: psycopg.Connection[Any], args: str, needle: str) -> None:
    result = invoke("enqueue", "t", "--args", args, "--dsn", dsn)
    assert_one_clear_error(result.exit_code, result.stderr, "--args", needle)
    assert count_jobs(conn) == 0


@pytest.mark.parametrize("queue", ["bad queue!", "", "-leading-dash", "x" * 65])
def test_enqueue_rejects_invalid_queue(dsn: str, conn: psycopg.Connection[Any], queue: str) -> None:
    result = invoke("enqueue", "t", "--queue", queue, "--dsn", dsn)
    assert_one_clear_error(result.exit_code, result.stderr, "invalid queue name")
    assert count_jobs(conn) == 0


def test_enqueue_rejects_out_of_range_priority(dsn: str, conn: psycopg.Connection[Any]) -> None:
    result = invoke("enqueue", "t", "--priority", "40000", "--dsn", dsn)
    assert_one_clear_error(result.exit_code, result.stderr, "priority")
    assert count_jobs(conn) == 0


def test_enqueue_on_unmigrated_database(empty_dsn: str) -> None:
    result = invoke("enqueue", "t", "--dsn", empty_dsn)
    assert_one_clear_error(result.exit_code, result.stderr, "pgqueue migrate")


@pytest.mark.parametrize("command", [["migrate"], ["enqueue", "t", "--args", "{}"]])
def test_unreachable_database(command: list[str]) -> None:
    result = invoke(*command, "--dsn", UNREACHABLE)
    assert_one_clear_error(result.exit_code, result.stderr, "cannot reach the database")


# -- work -------------------------------------------------------------------------------


def test_work_on_unmigrated_database(empty_dsn: str) -> None:
    result = run_cli("work", "tests.apps.basic:app", "--dsn", empty_dsn)
    assert_one_clear_error(result.returncode, result.stderr, "pgqueue migrate")


def test_work_with_processes_on_unmigrated_database_fails_fast(empty_dsn: str) -> None:
    # Every child would fail the same way: the supervisor must not restart them forever.
    result = run_cli("work", "tests.apps.basic:app", "--processes", "2", "--dsn", empty_dsn, timeout=10)
    assert result.returncode != 0
    assert "pgqueue migrate" in result.stderr


@pytest.mark.parametrize(
    ("target", "needle"),
    [
        ("nonexistent.module:app", "cannot import module 'nonexistent.module'"),
        ("tests.apps.basic:nothing_here", "has no attribute 'nothing_here'"),
        ("tests.apps.basic:record", "not a pgqueue.App"),
        ("tests.apps.basic", "expected MODULE:APP"),
    ],
)
def test_work_bad_target(dsn: str, target: str, needle: str) -> None:
    result = run_cli("work", target, "--dsn", dsn)
    assert_one_clear_error(result.returncode, result.stderr, needle)


def test_work_bad_target_with_processes(dsn: str) -> None:
    result = run_cli("work", "nonexistent.module:app", "--processes", "2", "--dsn", dsn)
    assert_one_clear_error(result.returncode, result.stderr, "cannot import module")


def test_work_unknown_log_level(dsn: str) -> None:
    result = invoke("work", "tests.apps.basic:app", "--log-level", "chatty", "--dsn", dsn)
    assert_one_clear_error(result.exit_code, result.stderr, "unknown log level")


def test_enqueue_then_work_end_to_end(dsn: str, conn: psycopg.Connection[Any], tmp_path: Path) -> None:
    create_test_tables(conn)
    result = invoke("enqueue", "record", "--args", json.dumps({"key": "cli-1"}), "--dsn", dsn)
    assert result.exit_code == 0, result.output
    job_id = int(result.stdout)
    other = invoke("enqueue", "record", "--args", json.dumps({"key": "cli-2"}), "--queue", "other", "--dsn", dsn)
    assert other.exit_code == 0, other.output
    with worker_process(
        dsn, "tests.apps.basic:app", "--queues", "default", "--concurrency", "2", "--poll-interval", "0.2",
        log=tmp_path / "w.log",
    ) as w:  # fmt: skip
        wait_until(lambda: job_row(conn, job_id)["state"] == "completed", timeout=15)
        assert ledger(conn, "cli-1") == [("done", w.pid)]
        w.signal(signal.SIGINT)
        assert w.wait(10) == 0, w.output()
        assert "started: queues=default concurrency=2" in w.output()
    # --queues default: the job in queue "other" was left alone.
    assert job_row(conn, int(other.stdout))["state"] == "available"
    assert ledger(conn, "cli-2") == []
