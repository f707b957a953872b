"""Retention: finished jobs go away a whole day partition at a time, per final state."""

from __future__ import annotations

import signal
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg import sql

import pgqueue
from pgqueue.config import WorkerConfig
from pgqueue.errors import ConfigError
from pgqueue.maintenance import RetentionService
from pgqueue.maintenance.retention import apply_retention, expired_partitions, retention_of
from tests.apps.support import worker_process
from tests.cli_support import assert_one_clear_error, invoke
from tests.conftest import wait_until

Conn = psycopg.Connection[Any]
DAY = 86400.0
DEFAULTS = {"completed": DAY, "discarded": 14 * DAY, "cancelled": 7 * DAY}


def today(conn: Conn) -> date:
    row = conn.execute("SELECT (now() AT TIME ZONE 'UTC')::date").fetchone()
    assert row is not None
    return row[0]  # type: ignore[no-any-return]


def add_day(conn: Conn, state: str, day: date, rows: int = 3) -> str:
    """A past day partition of ``state`` holding ``rows`` finished jobs."""
    name = f"jobs_{state}_{day:%Y%m%d}"
    conn.execute(
        sql.SQL("CREATE TABLE IF NOT EXISTS pgqueue.{} PARTITION OF pgqueue.{} FOR VALUES FROM ({}) TO ({})").format(
            sql.Identifier(name),
            sql.Identifier(f"jobs_{state}"),
            sql.Literal(f"{day.isoformat()} 00:00:00+00"),
            sql.Literal(f"{(day + timedelta(days=1)).isoformat()} 00:00:00+00"),
        )
    )
    conn.execute(
        "INSERT INTO pgqueue.jobs (task, queue, state, attempt, max_attempts, finished_at)"
        " SELECT 't', 'q', %s::pgqueue.job_state, 1, 1, %s::timestamptz + make_interval(secs => g)"
        " FROM generate_series(1, %s) AS g",
        [state, datetime(day.year, day.month, day.day, tzinfo=UTC), rows],
    )
    return name


def partitions(conn: Conn) -> set[str]:
    rows = conn.execute(
        "SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid"
        " WHERE i.inhparent IN ('pgqueue.jobs_completed'::regclass, 'pgqueue.jobs_discarded'::regclass,"
        " 'pgqueue.jobs_cancelled'::regclass)"
    ).fetchall()
    return {r[0] for r in rows}


def count(conn: Conn, state: str) -> int:
    row = conn.execute("SELECT count(*) FROM pgqueue.jobs WHERE state = %s::pgqueue.job_state", [state]).fetchone()
    assert row is not None
    return int(row[0])


# -- the rule ------------------------------------------------------------------------------


def test_expired_partitions_keep_at_least_the_retention_and_never_recent_days() -> None:
    now = datetime(2026, 3, 20, 6, 0, tzinfo=UTC)
    parts = [
        ("jobs_completed", f"jobs_completed_{d:%Y%m%d}", d)
        for d in (date(2026, 3, 17), date(2026, 3, 18), date(2026, 3, 19), date(2026, 3, 20), date(2026, 3, 21))
    ]
    # 1 day: the 18th ended 30h ago (dropped); the 19th (yesterday) and later are kept.
    assert expired_partitions(parts, {"completed": DAY}, now) == ["jobs_completed_20260317", "jobs_completed_20260318"]
    # 2 days: the 18th ended only 30h ago, so it stays.
    assert expired_partitions(parts, {"completed": 2 * DAY}, now) == ["jobs_completed_20260317"]
    # Shorter than a day still never drops yesterday or today.
    assert expired_partitions(parts, {"completed": 60.0}, now) == ["jobs_completed_20260317", "jobs_completed_20260318"]
    # None: kept forever; other states are not touched by this one's setting.
    assert expired_partitions(parts, {"completed": None}, now) == []
    assert expired_partitions(parts, {"discarded": 60.0}, now) == []


def test_retention_config() -> None:
    assert retention_of(WorkerConfig()) == DEFAULTS
    assert retention_of(WorkerConfig(retention_completed=0))["completed"] is None
    with pytest.raises(ConfigError, match="retention_discarded"):
        WorkerConfig(retention_discarded=-1)


# -- dropping partitions ---------------------------------------------------------------------


def test_apply_retention_drops_whole_expired_partitions_per_state(conn: Conn) -> None:
    t = today(conn)
    old = {
        "completed": [add_day(conn, "completed", t - timedelta(days=3))],
        "discarded": [
            add_day(conn, "discarded", t - timedelta(days=20)),
            add_day(conn, "discarded", t - timedelta(days=10)),
        ],
        "cancelled": [
            add_day(conn, "cancelled", t - timedelta(days=10)),
            add_day(conn, "cancelled", t - timedelta(days=3)),
        ],
    }
    recent = conn.execute(
        "INSERT INTO pgqueue.jobs (task, queue, state, attempt, max_attempts, finished_at)"
        " VALUES ('t', 'q', 'completed', 1, 1, now()) RETURNING id"
    ).fetchone()
    assert recent is not None
    before = partitions(conn)

    result = apply_retention(conn, "pgqueue", DEFAULTS, by="test-worker")

    assert result.leader
    dropped = {old["completed"][0], old["discarded"][0], old["cancelled"][0]}
    assert set(result.dropped) == dropped
    assert partitions(conn) == before - dropped
    # Whole partitions went; the rows of kept days are untouched (3 rows each).
    assert count(conn, "discarded") == 3
    assert count(conn, "cancelled") == 3
    assert count(conn, "completed") == 1  # today's
    # What was applied is on record, and the retention view shows it.
    settings = dict(conn.execute("SELECT name, value FROM pgqueue.settings").fetchall())
    assert settings == {"retention.completed": DAY, "retention.discarded": 14 * DAY, "retention.cancelled": 7 * DAY}
    view = {
        r[0]: r[1:]
        for r in conn.execute(
            "SELECT state::text, keep_for, partitions, oldest_day FROM pgqueue.retention ORDER BY state"
        ).fetchall()
    }
    assert view["completed"][0] == timedelta(days=1)
    assert view["discarded"][0] == timedelta(days=14)
    assert view["discarded"][2] == t - timedelta(days=10)
    assert view["cancelled"][2] == t - timedelta(days=3)
    assert view["completed"][2] == t - timedelta(days=1)  # yesterday, created ahead by migrate

    # Running again finds nothing more to do.
    assert apply_retention(conn, "pgqueue", DEFAULTS, by="test-worker").dropped == []


def test_retention_waits_for_the_partition_lock_holder(conn: Conn, dsn: str) -> None:
    t = today(conn)
    name = add_day(conn, "completed", t - timedelta(days=5))
    with psycopg.connect(dsn) as other:
        other.execute("SELECT pg_advisory_xact_lock(hashtextextended('pgqueue.partitions:pgqueue', 0))")
        result = apply_retention(conn, "pgqueue", DEFAULTS, by="t")
        assert not result.leader
        assert name in partitions(conn)
    assert apply_retention(conn, "pgqueue", DEFAULTS, by="t").dropped == [name]


def test_busy_parent_skips_the_drop_and_retries_later(conn: Conn, dsn: str) -> None:
    t = today(conn)
    busy = add_day(conn, "completed", t - timedelta(days=5))
    free = add_day(conn, "discarded", t - timedelta(days=30))
    with psycopg.connect(dsn) as reader:
        reader.execute("LOCK TABLE pgqueue.jobs_completed IN ACCESS SHARE MODE")  # a long report, say
        result = apply_retention(conn, "pgqueue", DEFAULTS, by="t")
        assert result.skipped == [busy]
        assert result.dropped == [free]
    assert apply_retention(conn, "pgqueue", DEFAULTS, by="t").dropped == [busy]
    assert count(conn, "completed") == 0


async def test_worker_maintenance_applies_its_retention(app: pgqueue.App, conn: Conn, dsn: str) -> None:
    t = today(conn)
    old = add_day(conn, "completed", t - timedelta(days=4))
    kept = add_day(conn, "discarded", t - timedelta(days=4))
    config = WorkerConfig(retention_completed=2 * DAY, retention_discarded=0)
    service = RetentionService(dsn=lambda: dsn, schema="pgqueue", config=config, worker_id="test-worker")
    result = await service.run_once()
    assert result.dropped == [old]
    assert old not in partitions(conn)
    assert kept in partitions(conn)  # 0: discarded jobs are kept forever
    settings = dict(conn.execute("SELECT name, value FROM pgqueue.settings").fetchall())
    assert settings["retention.completed"] == 2 * DAY
    assert settings["retention.discarded"] is None


def test_work_retention_options_take_the_duration_grammar(dsn: str, conn: Conn, tmp_path: Path) -> None:
    with worker_process(
        dsn, "tests.apps.basic:app", "--retention-completed", "1d12h", "--retention-discarded", "forever",
        "--retention-cancelled", "2w", log=tmp_path / "w.log",
    ) as w:  # fmt: skip
        wait_until(lambda: conn.execute("SELECT count(*) FROM pgqueue.settings").fetchone() == (3,), timeout=15)
        w.signal(signal.SIGINT)
        assert w.wait(10) == 0, w.output()
    settings = dict(conn.execute("SELECT name, value FROM pgqueue.settings").fetchall())
    assert settings == {"retention.completed": 1.5 * DAY, "retention.discarded": None, "retention.cancelled": 14 * DAY}


@pytest.mark.parametrize(
    ("value", "needle"),
    [("3", "needs a unit, e.g. 3s or 3d"), ("0s", "use 'forever'"), ("3 days", "not a duration")],
)
def test_work_refuses_a_bad_retention(dsn: str, value: str, needle: str) -> None:
    result = invoke("work", "tests.apps.basic:app", "--retention-cancelled", value, "--dsn", dsn)
    assert result.exit_code == 1
    expected = f"--retention-cancelled: invalid duration {value!r}"
    assert_one_clear_error(result.exit_code, result.stderr, expected, needle)
