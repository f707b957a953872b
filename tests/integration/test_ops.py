"""pgqueue.ops, the library behind ``pgqueue jobs`` and ``pgqueue status``, on a real database."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta
from typing import Any

import psycopg
import pytest

import pgqueue
from pgqueue import ops
from tests.conftest import async_wait_until, running_worker
from tests.ops_support import enqueue, error_entry, insert_finished, partitions, state_of

# -- list / get ---------------------------------------------------------------------------


def test_list_jobs_newest_first_with_filters(conn: psycopg.Connection[Any]) -> None:
    a = enqueue(conn, "t.alpha", "q1")
    b = enqueue(conn, "t.beta", "q2")
    c = insert_finished(conn, "completed", ago=timedelta(minutes=1), task="t.alpha", queue="q1")
    d = insert_finished(conn, "discarded", ago=timedelta(minutes=2), task="t.beta", queue="q1")

    assert [j.id for j in ops.list_jobs(conn)] == [d, c, b, a]
    assert [j.id for j in ops.list_jobs(conn, state="available")] == [b, a]
    assert [j.id for j in ops.list_jobs(conn, state=pgqueue.JobState.DISCARDED)] == [d]
    assert [j.id for j in ops.list_jobs(conn, queue="q1")] == [d, c, a]
    assert [j.id for j in ops.list_jobs(conn, task="t.beta")] == [d, b]
    assert [j.id for j in ops.list_jobs(conn, queue="q1", task="t.alpha", state="completed")] == [c]
    assert [j.id for j in ops.list_jobs(conn, limit=2)] == [d, c]
    assert ops.list_jobs(conn, queue="nope") == []

    dead = ops.list_jobs(conn, state="discarded")[0]
    assert dead.state is pgqueue.JobState.DISCARDED
    assert dead.error_count == 1
    assert dead.last_error == "builtins.ValueError: bad row 7"
    assert dead.finished_at is not None
    waiting = ops.list_jobs(conn, state="available")[0]
    assert waiting.last_error is None
    assert waiting.finished_at is None
    assert waiting.queue == "q2"


def test_list_jobs_rejects_bad_input(conn: psycopg.Connection[Any]) -> None:
    with pytest.raises(pgqueue.ConfigError, match="unknown state 'done'"):
        ops.list_jobs(conn, state="done")
    with pytest.raises(pgqueue.ConfigError, match="limit"):
        ops.list_jobs(conn, limit=0)
    with pytest.raises(pgqueue.ConfigError, match="invalid schema name"):
        ops.list_jobs(conn, 'x"; DROP TABLE pgqueue.jobs; --')


def test_get_job_missing_raises(conn: psycopg.Connection[Any]) -> None:
    with pytest.raises(pgqueue.JobNotFoundError, match="no job with id 424242"):
        ops.get_job(conn, "pgqueue", 424242)


def test_get_job_finds_a_job_in_an_old_day_partition(conn: psycopg.Connection[Any]) -> None:
    old = insert_finished(conn, "cancelled", ago=timedelta(days=6), args={"k": [1, 2]})
    job = ops.get_job(conn, "pgqueue", old)
    assert job.state is pgqueue.JobState.CANCELLED
    assert job.args == {"k": [1, 2]}
    assert job.finished_at is not None
    assert job.finished_at < datetime.now(UTC) - timedelta(days=5)


async def test_get_job_after_real_failures_has_every_error_with_traceback(
    app: pgqueue.App, conn: psycopg.Connection[Any]
) -> None:
    @app.task(name="ops.fails", max_attempts=2, retry=pgqueue.Backoff(base=0.01, jitter=False))
    def fails(n: int) -> None:
        raise ValueError(f"row {n} is malformed")

    job_id = fails.enqueue(conn, n=7)
    async with running_worker(app):
        await async_wait_until(lambda: state_of(conn, job_id) == "discarded")
    job = ops.get_job(conn, "pgqueue", job_id)
    assert job.args == {"n": 7}
    assert job.attempt == 2
    assert job.max_attempts == 2
    assert [e.attempt for e in job.errors] == [1, 2]
    for e in job.errors:
        assert e.type.endswith("ValueError")
        assert e.message == "row 7 is malformed"
        assert e.traceback is not None
        assert "raise ValueError" in e.traceback
        assert e.worker
        assert e.at is not None
    assert job.last_error is not None
    assert job.last_error.endswith("ValueError: row 7 is malformed")


# -- cancel / retry -----------------------------------------------------------------------


def test_cancel_waiting_finished_and_missing_jobs(conn: psycopg.Connection[Any]) -> None:
    waiting = enqueue(conn, run_at=datetime.now(UTC) + timedelta(hours=1))
    assert state_of(conn, waiting) == "scheduled"
    assert ops.cancel_job(conn, "pgqueue", waiting) is pgqueue.JobState.CANCELLED
    assert state_of(conn, waiting) == "cancelled"
    done = insert_finished(conn, "completed", ago=timedelta(minutes=1))
    assert ops.cancel_job(conn, "pgqueue", done) is pgqueue.JobState.COMPLETED
    assert state_of(conn, done) == "completed"
    with pytest.raises(pgqueue.JobNotFoundError):
        ops.cancel_job(conn, "pgqueue", 999_999)


async def test_cancel_running_job_is_stopped_by_its_worker(app: pgqueue.App, conn: psycopg.Connection[Any]) -> None:
    @app.task(name="ops.long", pass_context=True)
    async def long(ctx: pgqueue.JobContext) -> None:
        import asyncio

        await asyncio.sleep(60)

    job_id = long.enqueue(conn)
    async with running_worker(app, heartbeat_interval=0.2, lease=5, shutdown_timeout=1):
        await async_wait_until(lambda: state_of(conn, job_id) == "running")
        assert ops.cancel_job(conn, "pgqueue", job_id) is pgqueue.JobState.RUNNING
        job = ops.get_job(conn, "pgqueue", job_id)  # flagged, unless its worker was that quick
        assert job.cancel_requested_at is not None or job.state is pgqueue.JobState.CANCELLED
        await async_wait_until(lambda: state_of(conn, job_id) == "cancelled", timeout=20)


def test_retry_job(conn: psycopg.Connection[Any]) -> None:
    dead = insert_finished(conn, "discarded", ago=timedelta(minutes=3))
    assert ops.retry_job(conn, "pgqueue", dead) is True
    job = ops.get_job(conn, "pgqueue", dead)
    assert job.state is pgqueue.JobState.AVAILABLE
    assert job.finished_at is None
    assert len(job.errors) == 1  # the history is kept
    assert ops.retry_job(conn, "pgqueue", dead) is False  # available now: nothing to retry
    with pytest.raises(pgqueue.JobNotFoundError):
        ops.retry_job(conn, "pgqueue", 999_999)


def _set_key(conn: psycopg.Connection[Any], job_id: int, key: str) -> None:
    conn.execute("UPDATE pgqueue.jobs SET unique_key = %s WHERE id = %s", [key, job_id])


def test_retry_jobs_skips_jobs_whose_unique_key_is_taken(conn: psycopg.Connection[Any]) -> None:
    twins = [insert_finished(conn, "discarded", ago=timedelta(minutes=1)) for _ in range(2)]
    held = insert_finished(conn, "discarded", ago=timedelta(minutes=1))
    plain = insert_finished(conn, "discarded", ago=timedelta(minutes=1))
    for job_id in twins:
        _set_key(conn, job_id, "img-42")
    _set_key(conn, held, "img-7")
    holder = enqueue(conn, unique_key="img-7")
    result = ops.retry_jobs(conn, "pgqueue", batch_size=10)
    assert result == ops.RetryResult(retried=2, skipped=2)
    assert sorted(state_of(conn, i) or "" for i in twins) == ["available", "discarded"]
    assert state_of(conn, held) == "discarded"
    assert state_of(conn, plain) == "available"
    assert state_of(conn, holder) == "available"


def test_retry_jobs_in_batches_and_by_task(conn: psycopg.Connection[Any]) -> None:
    a = [insert_finished(conn, "discarded", ago=timedelta(minutes=i + 1), task="t.a") for i in range(5)]
    b = [insert_finished(conn, "discarded", ago=timedelta(days=2), task="t.b") for _ in range(2)]
    cancelled = insert_finished(conn, "cancelled", ago=timedelta(minutes=1), task="t.a")
    assert ops.retry_jobs(conn, "pgqueue", task="t.a", batch_size=2) == ops.RetryResult(5, 0)
    assert {state_of(conn, i) for i in a} == {"available"}
    assert {state_of(conn, i) for i in b} == {"discarded"}
    assert state_of(conn, cancelled) == "cancelled"
    assert ops.retry_jobs(conn, "pgqueue", batch_size=1) == ops.RetryResult(2, 0)
    assert {state_of(conn, i) for i in b} == {"available"}
    assert ops.retry_jobs(conn, "pgqueue") == ops.RetryResult(0, 0)
    assert ops.retry_jobs(conn, "pgqueue", state="cancelled") == ops.RetryResult(1, 0)
    assert state_of(conn, cancelled) == "available"
    with pytest.raises(pgqueue.ConfigError, match="only discarded or cancelled"):
        ops.retry_jobs(conn, "pgqueue", state="completed")


# -- purge --------------------------------------------------------------------------------


def _purge_today(cutoff: datetime, older_than: timedelta) -> date:
    """The UTC day the purge saw as today: its cutoff is its now() - older_than (a date
    read after it could be the next day)."""
    return (cutoff + older_than).astimezone(UTC).date()


def _finished_at(conn: psycopg.Connection[Any], ids: list[int]) -> list[datetime]:
    rows = conn.execute("SELECT finished_at FROM pgqueue.jobs WHERE id = ANY(%s) ORDER BY id", [ids]).fetchall()
    return [r[0] for r in rows]


def _dropped_by_day(finished: list[datetime], cutoff: datetime, today: date) -> int:
    """How many of these rows sit in a partition purge drops: a day before yesterday (UTC)
    that ended before the cutoff."""
    days = [x.astimezone(UTC).date() for x in finished]
    ends = [datetime(d.year, d.month, d.day, tzinfo=UTC) + timedelta(days=1) for d in days]
    return sum(1 for d, end in zip(days, ends, strict=True) if end <= cutoff and d < today - timedelta(days=1))


def test_purge_drops_whole_days_and_deletes_the_boundary_in_batches(conn: psycopg.Connection[Any]) -> None:
    ages = [timedelta(days=5), timedelta(days=3), timedelta(days=3), timedelta(hours=2), timedelta(minutes=90)]
    old = [insert_finished(conn, "completed", ago=a) for a in ages]
    keep = [insert_finished(conn, "completed", ago=a) for a in (timedelta(minutes=30), timedelta(minutes=5))]
    other_state = insert_finished(conn, "discarded", ago=timedelta(days=5))
    live = enqueue(conn)
    conn.execute("ANALYZE pgqueue.jobs_completed")
    finished = _finished_at(conn, old)
    day5 = f"jobs_completed_{finished[0].astimezone(UTC):%Y%m%d}"
    before = partitions(conn, "completed")

    result = ops.purge_jobs(conn, "pgqueue", state="completed", older_than=timedelta(hours=1), batch_size=1)

    assert result.state is pgqueue.JobState.COMPLETED
    # Every partition wholly before the cutoff is gone; every other one is still there.
    after = partitions(conn, "completed")
    assert day5 in result.dropped_partitions
    assert set(result.dropped_partitions) == before - after
    today = _purge_today(result.cutoff, timedelta(hours=1))
    for name in after:
        day = datetime.strptime(name[-8:], "%Y%m%d").replace(tzinfo=UTC)
        assert day + timedelta(days=1) > result.cutoff or day.date() >= today - timedelta(days=1), name
    # Exactly the old rows went: those in whole old days by DROP, the rest by DELETE.
    by_drop = _dropped_by_day(finished, result.cutoff, today)
    assert by_drop >= 3  # the 5- and 3-day-old rows
    assert result.dropped_rows_estimate == by_drop  # ANALYZE made the statistics exact
    assert result.deleted_rows == len(old) - by_drop
    assert [state_of(conn, i) for i in old] == [None] * len(old)
    assert [state_of(conn, i) for i in keep] == ["completed", "completed"]
    assert state_of(conn, other_state) == "discarded"
    assert state_of(conn, live) == "available"
    # Running it again finds nothing more to do.
    again = ops.purge_jobs(conn, "pgqueue", state="completed", older_than=timedelta(hours=1))
    assert again.dropped_partitions == []
    assert again.deleted_rows == 0


def test_purge_boundary_rows_by_batched_delete(conn: psycopg.Connection[Any]) -> None:
    old = [insert_finished(conn, "discarded", ago=timedelta(seconds=60 + i)) for i in range(7)]
    fresh = insert_finished(conn, "discarded", ago=timedelta(seconds=0))
    today = f"jobs_discarded_{_finished_at(conn, [fresh])[0].astimezone(UTC):%Y%m%d}"
    finished = _finished_at(conn, old)
    result = ops.purge_jobs(conn, "pgqueue", state="discarded", older_than=timedelta(seconds=30), batch_size=3)
    assert today in partitions(conn, "discarded")  # the boundary day is never dropped
    assert result.deleted_rows == 7 - _dropped_by_day(
        finished, result.cutoff, _purge_today(result.cutoff, timedelta(seconds=30))
    )
    assert [state_of(conn, i) for i in old] == [None] * 7
    assert state_of(conn, fresh) == "discarded"


@pytest.mark.parametrize("state", ["available", "running", "scheduled", "retryable"])
def test_purge_refuses_live_states(conn: psycopg.Connection[Any], state: str) -> None:
    with pytest.raises(pgqueue.ConfigError, match="only completed, discarded or cancelled"):
        ops.purge_jobs(conn, "pgqueue", state=state, older_than=timedelta(days=1))


# -- status -------------------------------------------------------------------------------


def test_status_snapshot_reads_every_view(conn: psycopg.Connection[Any]) -> None:
    enqueue(conn, "t.a", "q1")
    enqueue(conn, "t.a", "q1")
    insert_finished(conn, "completed", ago=timedelta(seconds=5), queue="q1")
    insert_finished(
        conn, "discarded", ago=timedelta(seconds=5), queue="q2", task="t.z", errors=[error_entry(1, "nope")]
    )
    snap = ops.status(conn)
    by_queue = {q.queue: q for q in snap.queues}
    assert by_queue["q1"].available == 2
    assert by_queue["q1"].completed_1m == 1
    assert by_queue["q2"].discarded_1m == 1
    assert by_queue["q1"].lag_seconds is not None
    assert by_queue["q1"].lag_seconds >= 0
    assert any(f.task == "t.z" and f.last_message == "nope" for f in snap.failures)
    assert snap.health is not None
    assert snap.health.live_rows == 2
    assert {r["state"] for r in snap.retention} == {"completed", "discarded", "cancelled"}
    assert ops.status(conn, retention=False).retention == []
    as_json = ops.jsonable(snap)
    assert isinstance(as_json["at"], str)
    assert datetime.fromisoformat(as_json["at"])


def test_status_on_an_unmigrated_database_says_so(empty_dsn: str) -> None:
    with (
        psycopg.connect(empty_dsn, autocommit=True) as c,
        pytest.raises(pgqueue.SchemaNotInstalledError, match="migrate"),
    ):
        ops.status(c)


def test_purge_gives_up_cleanly_when_the_parent_is_busy(conn: psycopg.Connection[Any], dsn: str) -> None:
    old = insert_finished(conn, "completed", ago=timedelta(days=4))
    with psycopg.connect(dsn) as busy:
        # An open transaction that wrote a finished job holds a lock on the parent.
        busy.execute("INSERT INTO pgqueue.jobs (queue, task, state, finished_at) VALUES ('q', 't', 'completed', now())")
        with pytest.raises(pgqueue.PgQueueError, match=r"is busy .* run the purge again"):
            ops.purge_jobs(conn, "pgqueue", state="completed", older_than=timedelta(days=1), lock_timeout=0.2)
        busy.rollback()
    assert state_of(conn, old) == "completed"
    result = ops.purge_jobs(conn, "pgqueue", state="completed", older_than=timedelta(days=1))
    assert len(result.dropped_partitions) >= 1
    assert state_of(conn, old) is None


def test_list_and_show_read_the_id_indexes_not_whole_partitions(conn: psycopg.Connection[Any]) -> None:
    """The exact statements ops runs, explained by auto_explain on 20,000 finished jobs."""
    insert_finished(conn, "completed", ago=timedelta(0))  # creates today's partition if needed
    conn.execute(
        "INSERT INTO pgqueue.jobs (queue, task, state, attempt, max_attempts, finished_at)"
        " SELECT 'bulk', 'tests.bulk', 'completed', 1, 1, now() FROM generate_series(1, 20000)"
    )
    conn.execute("ANALYZE pgqueue.jobs")
    # The partition the rows landed in (not today's date read later: midnight may pass).
    where = conn.execute("SELECT DISTINCT tableoid::regclass::text FROM pgqueue.jobs WHERE queue = 'bulk'").fetchall()
    assert len(where) == 1, where
    today = str(where[0][0]).removeprefix("pgqueue.")
    middle = ops.list_jobs(conn, limit=10_000)[-1].id
    plans: list[str] = []
    conn.add_notice_handler(lambda diag: plans.append(diag.message_primary or ""))
    conn.execute("LOAD 'auto_explain'")
    conn.execute("SET auto_explain.log_min_duration = 0")
    conn.execute("SET auto_explain.log_level = 'notice'")
    for call in (
        lambda: ops.list_jobs(conn, limit=20),
        lambda: ops.list_jobs(conn, state="completed", limit=20),
        lambda: ops.get_job(conn, "pgqueue", middle),
    ):
        plans.clear()
        call()
        plan = "\n".join(p for p in plans if "pgqueue.jobs" in p or "jobs_" in p)
        assert f"Index Scan Backward using {today}" in plan or f"Index Scan using {today}" in plan, plan
        assert f"Seq Scan on {today}" not in plan, plan
