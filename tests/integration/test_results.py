"""Results stored by the completion itself: sync, async and transactional handlers (with
their effects, in one transaction), read back with app.result() and handle.result(); bad
return values end the job as discarded with nothing half-written; the completion sends one
NOTIFY on the results channel per batch that finished an awaited job, and none otherwise."""

from __future__ import annotations

import asyncio
import threading
import uuid
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from psycopg import sql

import pgqueue
from pgqueue import ops
from pgqueue._db.jobs import outcome_params
from pgqueue._db.sql import queries_for
from pgqueue.models import JobState, Outcome
from tests.apps.support import create_test_tables, job_row, state_of
from tests.conftest import async_wait_until, running_worker, wait_until
from tests.enqueue_support import claim
from tests.integration.test_tick_watermark import tick

Conn = psycopg.Connection[Any]
Q = queries_for("pgqueue")
RESULTS = "pgqueue_results"


def stored_result(conn: Conn, job_id: int) -> Any:
    row = conn.execute("SELECT result FROM pgqueue.jobs WHERE id = %s", [job_id]).fetchone()
    assert row is not None, f"no job {job_id}"
    return row[0]


async def finish(app: pgqueue.App, conn: Conn, job_ids: list[int], **config: Any) -> None:
    """Run a worker until every job of ``job_ids`` is final."""
    final = {"completed", "discarded", "cancelled"}
    async with running_worker(app, **config):
        await async_wait_until(lambda: all(state_of(conn, j) in final for j in job_ids), timeout=30)


# -- stored by the completion -------------------------------------------------------------


async def test_sync_and_async_handlers_results_are_stored_and_read_back(app: pgqueue.App, conn: Conn) -> None:
    @app.task(name="r.sync")
    def sync_task(n: int) -> dict[str, Any]:
        return {"n": n, "square": n * n, "text": "héllo 😀", "list": [1, None, True]}

    @app.task(name="r.async")
    async def async_task(n: int) -> list[int]:
        return [n, n + 1]

    @app.task(name="r.none")
    def none_task() -> None:
        return None

    @app.task(name="r.scalar")
    async def scalar_task() -> str:
        return "done"

    a = sync_task.enqueue(conn, n=3)
    b = async_task.enqueue(conn, n=5)
    c = none_task.enqueue(conn)
    d = scalar_task.enqueue(conn)
    await finish(app, conn, [a, b, c, d])
    expected = {"n": 3, "square": 9, "text": "héllo 😀", "list": [1, None, True]}
    assert stored_result(conn, a) == expected
    assert stored_result(conn, b) == [5, 6]
    assert stored_result(conn, c) is None  # NULL: nothing stored
    assert stored_result(conn, d) == "done"
    assert app.result(conn, a) == expected
    assert app.result(conn, c) is None
    assert await asyncio.to_thread(a.result, 30) == expected
    assert await b.result_async(timeout=30) == [5, 6]
    assert await asyncio.to_thread(app.handle(d).result, 30) == "done"
    async with await psycopg.AsyncConnection.connect(conn.info.dsn) as aconn:
        assert await app.result_async(aconn, b) == [5, 6]
    assert ops.get_job(conn, "pgqueue", a).result == expected
    assert ops.get_job(conn, "pgqueue", c).result is None


async def test_transactional_results_commit_with_the_handlers_writes(app: pgqueue.App, conn: Conn) -> None:
    create_test_tables(conn)

    @app.task(name="r.tx_sync", transactional=True)
    def tx_sync(ctx: pgqueue.JobContext, key: str) -> dict[str, str]:
        ctx.conn.execute("INSERT INTO effects (job_key, attempt) VALUES (%s, %s)", [key, ctx.job.attempt])
        # The result is written in this transaction: not visible outside before it commits.
        row = ctx.conn.execute("SELECT result FROM pgqueue.jobs WHERE id = %s", [ctx.job.id]).fetchone()
        assert row == (None,)
        return {"key": key}

    @app.task(name="r.tx_async", transactional=True)
    async def tx_async(ctx: pgqueue.JobContext, key: str) -> list[str]:
        await ctx.conn.execute("INSERT INTO effects (job_key, attempt) VALUES (%s, %s)", [key, ctx.job.attempt])
        return [key]

    a = tx_sync.enqueue(conn, key="s")
    b = tx_async.enqueue(conn, key="a")
    await finish(app, conn, [a, b])
    assert (stored_result(conn, a), stored_result(conn, b)) == ({"key": "s"}, ["a"])
    effects = conn.execute("SELECT job_key FROM effects ORDER BY job_key").fetchall()
    assert effects == [("a",), ("s",)]


async def test_a_transactional_completion_that_rolls_back_leaves_no_result(app: pgqueue.App, conn: Conn) -> None:
    """The handler returns a result, then its completion is fenced off (its lease was
    taken away meanwhile): the transaction rolls back, with its writes and its result."""
    create_test_tables(conn)
    dsn = conn.info.dsn
    entered = threading.Event()
    release = threading.Event()

    @app.task(name="r.tx_fenced", transactional=True)
    def fenced(ctx: pgqueue.JobContext) -> dict[str, int]:
        ctx.conn.execute("INSERT INTO effects (job_key, attempt) VALUES ('fenced', %s)", [ctx.job.attempt])
        entered.set()
        assert release.wait(30)
        return {"would": 1}

    job = fenced.enqueue(conn)
    async with running_worker(app, lease=60, heartbeat_interval=20) as worker:
        assert await asyncio.to_thread(entered.wait, 30)
        with psycopg.connect(dsn, autocommit=True) as other:  # the lease now belongs to nobody
            other.execute("UPDATE pgqueue.jobs_live SET lease_token = gen_random_uuid() WHERE id = %s", [job])
        release.set()
        await async_wait_until(lambda: worker.stats.refused == 1, timeout=30)
    row = job_row(conn, job)
    assert row["state"] == "running"  # untouched by the refused completion
    assert stored_result(conn, job) is None
    assert conn.execute("SELECT count(*) FROM effects").fetchone() == (0,)


# -- bad return values --------------------------------------------------------------------


async def test_results_that_cannot_be_stored_discard_the_job_at_once(dsn: str, conn: Conn) -> None:
    app = pgqueue.App(dsn=dsn, max_result_bytes=64)
    create_test_tables(conn)

    @app.task(name="r.bad", max_attempts=5)
    def bad(kind: str) -> Any:
        return {"set": {1, 2}, "big": "x" * 100, "nan": float("nan"), "nul": "a\x00b"}[kind]

    @app.task(name="r.bad_async", max_attempts=5)
    async def bad_async() -> Any:
        return object()

    @app.task(name="r.bad_tx", transactional=True, max_attempts=5)
    def bad_tx(ctx: pgqueue.JobContext) -> Any:
        ctx.conn.execute("INSERT INTO effects (job_key, attempt) VALUES ('bad_tx', 1)")
        return {"too": "y" * 100}

    @app.task(name="r.good")
    def good(n: int) -> int:
        return n

    jobs = {kind: bad.enqueue(conn, kind=kind) for kind in ("set", "big", "nan", "nul")}
    jobs["object"] = bad_async.enqueue(conn)
    jobs["tx"] = bad_tx.enqueue(conn)
    fine = [good.enqueue(conn, n=n) for n in range(5)]
    await finish(app, conn, [*jobs.values(), *fine])

    problems = {
        "set": "returned a value that is not JSON: Object of type set is not JSON serializable",
        "big": "returned 102 bytes of JSON, over the 64-byte limit (App(max_result_bytes=...))",
        "nan": "returned a value that is not JSON: Out of range float values are not JSON compliant",
        "nul": "NUL character",
        "object": "returned a value that is not JSON: Object of type object is not JSON serializable",
        "tx": "returned 110 bytes of JSON, over the 64-byte limit",
    }
    for kind, job in jobs.items():
        row = job_row(conn, job)
        assert (row["state"], row["attempt"]) == ("discarded", 1), kind  # not retried
        [error] = row["errors"]
        assert error["type"] == "pgqueue.errors.ResultError"
        assert problems[kind] in error["message"], (kind, error["message"])
        assert stored_result(conn, job) is None
        with pytest.raises(pgqueue.JobFailed) as info:
            app.result(conn, job)
        assert (info.value.state, info.value.error_type) == ("discarded", "pgqueue.errors.ResultError")
        assert problems[kind] in (info.value.error_message or "")
    # The transactional handler's write rolled back with it; the rest of the batch is fine.
    assert conn.execute("SELECT count(*) FROM effects").fetchone() == (0,)
    assert [stored_result(conn, j) for j in fine] == [0, 1, 2, 3, 4]


def test_a_result_asked_too_early_or_of_no_job_is_a_clear_error(app: pgqueue.App, conn: Conn) -> None:
    @app.task(name="r.later")
    def later() -> int:
        return 1

    job = later.options(delay=3600).enqueue(conn)
    with pytest.raises(pgqueue.JobNotFinishedError, match=f"job {job} has not finished: it is scheduled") as info:
        app.result(conn, job)
    assert (info.value.job_id, info.value.state) == (job, "scheduled")
    with pytest.raises(pgqueue.JobNotFoundError, match="no job with id 987654321"):
        app.result(conn, 987654321)
    with pytest.raises(pgqueue.JobNotFoundError, match="no job with id 987654321"):
        app.handle(987654321).result(timeout=30)


def test_a_handle_binds_as_a_query_parameter(app: pgqueue.App, conn: Conn) -> None:
    @app.task(name="r.param")
    def param() -> None: ...

    handle = param.enqueue(conn)
    assert isinstance(handle, pgqueue.JobHandle)
    row = conn.execute("SELECT id, %s::bigint FROM pgqueue.jobs WHERE id = %s", [handle, handle]).fetchone()
    assert row == (handle, handle)
    by_name = app.enqueue(conn, "r.param")
    assert isinstance(by_name, pgqueue.JobHandle)
    assert by_name == handle + 1


# -- NOTIFY on the results channel --------------------------------------------------------


@pytest.fixture
def results_listener(dsn: str) -> Iterator[Conn]:
    with psycopg.connect(dsn, autocommit=True) as c:
        c.execute(sql.SQL("LISTEN {}").format(sql.Identifier(RESULTS)))
        yield c


def results_notifications(listener: Conn, sender: Conn) -> int:
    """How many NOTIFYs the results channel carried before a sentinel sent now (delivery is
    in commit order: once the sentinel is in, everything earlier is)."""
    sentinel = f"sentinel-{uuid.uuid4().hex}"
    sender.execute("SELECT pg_notify(%s, %s)", [RESULTS, sentinel])
    for count, notify in enumerate(listener.notifies(timeout=15)):
        if notify.payload == sentinel:
            return count
        assert notify.payload == ""  # no job data on the channel
    raise AssertionError("sentinel notification never arrived")


def claimed(conn: Conn, app: pgqueue.App, n: int, task: str = "r.plain") -> list[tuple[int, uuid.UUID]]:
    @app.task(name=task)
    def plain() -> None: ...

    ids = [plain.enqueue(conn) for _ in range(n)]
    rows = claim(conn, "default", {task: 3}, limit=n)
    assert sorted(r[0] for r in rows) == sorted(ids)
    return sorted((r[0], r[7]) for r in rows)


def record(conn: Conn, jobs: list[tuple[int, uuid.UUID]], state: JobState = JobState.COMPLETED) -> set[int]:
    outcomes = [(j, t, Outcome(state, result='{"r": 1}' if state is JobState.COMPLETED else None)) for j, t in jobs]
    return {r[0] for r in conn.execute(Q["job_record_outcomes"], outcome_params(outcomes)).fetchall()}


def mark_awaited(conn: Conn, job_ids: list[int]) -> int:
    row = conn.execute(Q["job_await"], {"ids": job_ids}).fetchone()
    assert row is not None
    return int(row[0])


def test_completions_notify_once_per_batch_and_only_when_someone_waits(
    app: pgqueue.App, conn: Conn, results_listener: Conn
) -> None:
    jobs = claimed(conn, app, 30)
    # Nobody waits: a batch of ten completions sends nothing, and returns every id.
    assert record(conn, jobs[:10]) == {j for j, _ in jobs[:10]}
    assert results_notifications(results_listener, conn) == 0
    # Two of the next ten are awaited: one NOTIFY for the batch, not one per job.
    assert mark_awaited(conn, [jobs[12][0], jobs[15][0]]) == 2
    assert mark_awaited(conn, [jobs[12][0]]) == 0  # already marked: left alone
    assert record(conn, jobs[10:20]) == {j for j, _ in jobs[10:20]}
    assert results_notifications(results_listener, conn) == 1
    # Two batches with an awaited job each: two NOTIFYs; retried jobs never notify.
    assert mark_awaited(conn, [jobs[20][0], jobs[25][0], jobs[29][0]]) == 3
    record(conn, jobs[20:23])
    record(conn, jobs[23:27])
    record(conn, jobs[27:29], JobState.RETRYABLE)
    assert results_notifications(results_listener, conn) == 2
    assert [stored_result(conn, j) for j, _ in jobs[:3]] == [{"r": 1}] * 3


def test_cancel_and_maintenance_wake_waiters_of_the_jobs_they_finish(
    app: pgqueue.App, conn: Conn, results_listener: Conn
) -> None:
    @app.task(name="r.wait", max_attempts=1)
    def wait() -> None: ...

    plain, awaited = wait.enqueue(conn), wait.enqueue(conn)
    mark_awaited(conn, [awaited])
    assert ops.cancel_job(conn, "pgqueue", plain) is JobState.CANCELLED
    assert results_notifications(results_listener, conn) == 0
    assert ops.cancel_job(conn, "pgqueue", awaited) is JobState.CANCELLED
    assert results_notifications(results_listener, conn) == 1

    # The rescuer discards a running job on its last attempt.
    job = wait.enqueue(conn)
    assert [r[0] for r in claim(conn, "default", {"r.wait": 1}, limit=1)] == [job]
    mark_awaited(conn, [job])
    conn.execute("UPDATE pgqueue.jobs_live SET lease_expires_at = now() - interval '1 second' WHERE id = %s", [job])
    tick(conn, None)
    assert state_of(conn, job) == "discarded"
    assert results_notifications(results_listener, conn) == 1

    # Expiry cancels a waiting job past its deadline.
    expiring = wait.options(expires_in=3600).enqueue(conn)
    mark_awaited(conn, [expiring])
    conn.execute("UPDATE pgqueue.jobs_live SET expires_at = now() - interval '1 second' WHERE id = %s", [expiring])
    tick(conn, None)
    assert state_of(conn, expiring) == "cancelled"
    assert results_notifications(results_listener, conn) == 1
    with pytest.raises(pgqueue.JobFailed, match="expired") as info:
        app.result(conn, expiring)
    assert info.value.expired
    assert info.value.state == "cancelled"


def test_marking_an_awaited_job_and_finishing_it_race_without_a_lost_wakeup(
    app: pgqueue.App, conn: Conn, results_listener: Conn
) -> None:
    """Both orders of the two lock holders: the waiter's mark commits first (the completion
    waits for it, then reads the flag from the row's newest version: it notifies), or the
    completion locks first (the mark waits for it and finds the job gone; the next read
    sees it completed)."""
    dsn = conn.info.dsn
    (first, t1), (second, t2) = claimed(conn, app, 2)

    def complete_first(out: list[set[int]]) -> None:
        with psycopg.connect(dsn, autocommit=True) as c:
            out.append(record(c, [(first, t1)]))

    def mark_second(out: list[int]) -> None:
        with psycopg.connect(dsn, autocommit=True) as c:
            out.append(mark_awaited(c, [second]))

    # 1. The mark holds the row; the completion waits, then reads the flag.
    done: list[set[int]] = []
    with psycopg.connect(dsn) as marker:
        assert mark_awaited(marker, [first]) == 1  # in an open transaction: the row stays locked
        completer = threading.Thread(target=complete_first, args=(done,))
        completer.start()
        wait_for_a_lock_wait(conn)
        marker.commit()
    completer.join(30)
    assert done == [{first}]
    assert results_notifications(results_listener, conn) == 1

    # 2. The completion holds the row; the mark waits, then finds nothing left to mark.
    marked: list[int] = []
    with psycopg.connect(dsn) as finisher:
        assert record(finisher, [(second, t2)]) == {second}  # not committed yet
        marker_thread = threading.Thread(target=mark_second, args=(marked,))
        marker_thread.start()
        wait_for_a_lock_wait(conn)
        finisher.commit()
    marker_thread.join(30)
    assert marked == [0]
    assert app.result(conn, second) == {"r": 1}
    assert results_notifications(results_listener, conn) == 0  # not awaited when it finished


def wait_for_a_lock_wait(conn: Conn) -> None:
    """Wait until another session of this database waits for a lock."""
    wait_until(
        lambda: (
            conn.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'"
            ).fetchone()
            == (1,)
        ),
        timeout=30,
    )
