"""`pgqueue cron list`: what the database knows, with or without the app's code."""

from __future__ import annotations

import asyncio
import json
import shlex
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
from typer.testing import CliRunner, Result

from pgqueue import Schedule
from pgqueue._dsn import display_dsn
from pgqueue.cli import app as cli_app
from tests.apps.cron_support import scheduler, set_state

T0 = datetime(2026, 6, 1, 8, tzinfo=UTC)


def invoke(*args: str) -> Result:
    return CliRunner().invoke(cli_app, list(args), env={"PGQUEUE_DSN": None, "PGQUEUE_SCHEMA": None, "COLUMNS": "200"})


def fire_some(dsn: str, conn: psycopg.Connection[Any]) -> None:
    """Register two schedules and fire a few ticks of each; "legacy" then leaves the code."""
    every = Schedule(name="every-second", task="cron_tick", cron="* * * * * *", missed="all", max_catchup=1000)
    legacy = Schedule(name="legacy", task="old.task", cron="30 2 * * *", timezone="America/New_York")

    async def run() -> None:
        async with scheduler(dsn, [every, legacy]) as s:
            await s.register()
            set_state(conn, "every-second", last_tick=None, defined_at=T0)
            set_state(conn, "legacy", last_tick=None, defined_at=T0 - timedelta(days=1))
            await s.run_once(now=T0 + timedelta(seconds=3, milliseconds=200))

    asyncio.run(run())
    conn.execute("UPDATE pgqueue.cron_schedules SET last_seen_at = now() - interval '1 hour' WHERE name = 'legacy'")
    conn.execute("UPDATE pgqueue.jobs_live SET state = 'scheduled' WHERE unique_key LIKE 'cron:every-second:%'")


def db_now(conn: psycopg.Connection[Any]) -> datetime:
    row = conn.execute("SELECT now()").fetchone()
    assert row is not None
    return row[0]  # type: ignore[no-any-return]


def test_cron_list_json_reads_the_database(dsn: str, conn: psycopg.Connection[Any]) -> None:
    fire_some(dsn, conn)
    before = db_now(conn)
    result = invoke("cron", "list", "--dsn", dsn, "--json")
    after = db_now(conn)
    assert result.exit_code == 0, result.output
    entries = {e["name"]: e for e in json.loads(result.stdout)}
    assert sorted(entries) == ["every-second", "legacy"]
    every = entries["every-second"]
    assert (every["task"], every["cron"], every["timezone"], every["missed"]) == (
        "cron_tick",
        "* * * * * *",
        "UTC",
        "all",
    )
    assert every["status"] == "active"
    assert every["last_fired_tick"] == "2026-06-01T08:00:03+00:00"
    assert every["last_tick"] == "2026-06-01T08:00:03+00:00"
    assert every["last_job_state"] == "scheduled"
    assert every["last_fired_by"] == "test"
    # The next whole second after the database clock as the command read it, some time
    # between the two reads around it.
    next_tick = datetime.fromisoformat(every["next_tick"])
    assert before < next_tick <= after + timedelta(seconds=1)
    legacy = entries["legacy"]
    # 02:30 New York time, once a day; America/New_York is UTC-4 in June.
    assert legacy["status"] == "inactive"
    assert legacy["last_fired_tick"] == "2026-06-01T06:30:00+00:00"
    assert datetime.fromisoformat(legacy["next_tick"]).astimezone(UTC).time().isoformat() in {"06:30:00", "07:30:00"}
    assert legacy["last_job_state"] == "available"


def test_cron_list_table_and_with_the_app(dsn: str, conn: psycopg.Connection[Any]) -> None:
    fire_some(dsn, conn)
    table = invoke("cron", "list", "--dsn", dsn)
    assert table.exit_code == 0, table.output
    for text in ("schedule", "expression", "next tick", "last run", "every-second", "legacy", "America/New_York"):
        assert text in table.stdout, table.stdout
    assert "hashtextextended('pgqueue.cron:pgqueue', 0)" in table.stdout
    assert "scheduled #" in table.stdout
    assert "inactive" in table.stdout

    # tests/apps/cron_app.py declares "every-second" and "hourly-report", not "legacy".
    result = invoke("cron", "list", "--dsn", dsn, "--json", "--app", "tests.apps.cron_app:app")
    assert result.exit_code == 0, result.output
    status = {e["name"]: e["status"] for e in json.loads(result.stdout)}
    assert status == {"every-second": "active", "hourly-report": "not registered", "legacy": "not in app"}


def test_cron_list_empty_and_errors(dsn: str, empty_dsn: str) -> None:
    empty = invoke("cron", "list", "--dsn", dsn)
    assert empty.exit_code == 0
    assert "no cron schedules" in empty.stdout
    assert invoke("cron", "list", "--dsn", dsn, "--json").stdout.strip() == "[]"
    missing = invoke("cron", "list", "--dsn", empty_dsn)
    assert missing.exit_code == 1
    assert f"has no cron tables: run `pgqueue migrate --dsn {shlex.quote(display_dsn(empty_dsn))}`" in missing.stderr
    assert "Traceback" not in missing.stderr
    bad_app = invoke("cron", "list", "--dsn", dsn, "--app", "tests.apps.nope:app")
    assert bad_app.exit_code == 1
    assert "cannot import module 'tests.apps.nope'" in bad_app.stderr


def test_cron_list_prints_hand_edited_rows_literally(dsn: str, conn: psycopg.Connection[Any]) -> None:
    fire_some(dsn, conn)
    conn.execute("UPDATE pgqueue.cron_schedules SET timezone = '[bold]Mars/Base' WHERE name = 'legacy'")
    table = invoke("cron", "list", "--dsn", dsn)
    assert table.exit_code == 0, table.output
    assert "[bold]Mars/Base" in table.stdout, table.stdout
