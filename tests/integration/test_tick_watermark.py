"""The maintenance tick's watermark: timers behind it are left for the periodic full scan."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg

from pgqueue._db.jobs import TickResult
from pgqueue._db.sql import queries_for
from pgqueue.maintenance.watermark import TickWatermark

Conn = psycopg.Connection[Any]
TICK = queries_for("pgqueue")["maintenance_tick"]


def tick(conn: Conn, since: datetime | None) -> tuple[Any, ...]:
    row = conn.execute(
        TICK,
        {
            "lock_name": "pgqueue.maintenance:pgqueue",
            "since": since,
            "batch": 1000,
            # A rescued job's retry is drawn from [0, 1e9 s) (full jitter): far beyond the
            # second tick, however late it comes. With 1 s the second tick promoted it
            # whenever the ticks were further apart than the draw (a loaded machine).
            "backoff_base": 1e9,
            "backoff_cap": 1e9,
            "default_max_attempts": 20,
        },
    ).fetchone()
    assert row is not None
    return tuple(row)


def add(conn: Conn, state: str, ago: str) -> int:
    column = "lease_expires_at" if state == "running" else "run_at"
    extra = ", lease_token, started_at, attempt" if state == "running" else ""
    values = ", gen_random_uuid(), now(), 1" if state == "running" else ""
    row = conn.execute(
        f"INSERT INTO pgqueue.jobs_live (task, queue, state, {column}{extra})"
        f" VALUES ('t', 'q', %s, now() - %s::interval{values}) RETURNING id",
        [state, ago],
    ).fetchone()
    assert row is not None
    return int(row[0])


def state(conn: Conn, job_id: int) -> str:
    row = conn.execute("SELECT state::text FROM pgqueue.jobs WHERE id = %s", [job_id]).fetchone()
    assert row is not None
    return str(row[0])


def test_tick_skips_timers_behind_since_and_a_full_scan_finds_them(conn: Conn) -> None:
    recent = add(conn, "scheduled", "1 second")
    old = add(conn, "scheduled", "1 hour")
    expired_recently = add(conn, "running", "1 second")
    expired_long_ago = add(conn, "running", "1 hour")
    now = conn.execute("SELECT now()").fetchone()[0]  # type: ignore[index]

    leader, promoted, rescued, _discarded, _notified, db_now, _expired = tick(conn, now - timedelta(minutes=1))
    assert leader
    assert (promoted, rescued) == (1, 1)
    assert state(conn, recent) == "available"
    assert state(conn, expired_recently) == "retryable"
    assert (state(conn, old), state(conn, expired_long_ago)) == ("scheduled", "running")
    assert db_now >= now

    _, promoted, rescued, *_ = tick(conn, None)
    assert (promoted, rescued) == (1, 1)
    assert state(conn, old) == "available"
    assert state(conn, expired_long_ago) == "retryable"


def test_tick_skips_deadlines_behind_since_and_a_full_scan_finds_them(conn: Conn) -> None:
    # A job whose deadline passed long ago (it was running then, say: its retry is due in
    # an hour) and one whose deadline passed just now.
    old = add(conn, "retryable", "-1 hour")
    conn.execute("UPDATE pgqueue.jobs_live SET expires_at = now() - interval '1 hour' WHERE id = %s", [old])
    recent = add(conn, "available", "1 second")
    conn.execute("UPDATE pgqueue.jobs_live SET expires_at = now() - interval '1 second' WHERE id = %s", [recent])
    now = conn.execute("SELECT now()").fetchone()[0]  # type: ignore[index]

    *_, expired = tick(conn, now - timedelta(minutes=1))
    assert expired == 1
    assert (state(conn, recent), state(conn, old)) == ("cancelled", "retryable")
    *_, expired = tick(conn, None)
    assert expired == 1
    assert state(conn, old) == "cancelled"


def result(*, leader: bool = True, promoted: int = 0, rescued: int = 0, expired: int = 0, at: datetime) -> TickResult:
    return TickResult(leader, promoted, rescued, 0, at, expired)


def test_watermark_moves_only_after_complete_leader_passes() -> None:
    t0 = datetime(2026, 1, 1, tzinfo=UTC)
    wm = TickWatermark(margin=timedelta(seconds=5), full_every=60.0)
    assert wm.since(0.0) is None  # the first pass is a full one
    wm.observe(result(at=t0), scanned_since=None, batch=10, now=0.0)
    assert wm.since(1.0) == t0 - timedelta(seconds=5)

    # Not the leader, or a pass that hit its batch limit: the watermark stays.
    wm.observe(result(leader=False, at=t0 + timedelta(seconds=1)), scanned_since=wm.since(1.0), batch=10, now=1.0)
    wm.observe(result(promoted=10, at=t0 + timedelta(seconds=2)), scanned_since=wm.since(2.0), batch=10, now=2.0)
    wm.observe(result(rescued=10, at=t0 + timedelta(seconds=3)), scanned_since=wm.since(3.0), batch=10, now=3.0)
    wm.observe(result(expired=10, at=t0 + timedelta(seconds=3)), scanned_since=wm.since(3.0), batch=10, now=3.0)
    assert wm.since(3.0) == t0 - timedelta(seconds=5)

    wm.observe(result(promoted=9, at=t0 + timedelta(seconds=4)), scanned_since=wm.since(4.0), batch=10, now=4.0)
    assert wm.since(4.0) == t0 - timedelta(seconds=1)
    # Every full_every seconds, a full scan again.
    assert wm.since(60.0) is None
