"""Hostile names, numbers, times and batches, one test each, against a real PostgreSQL
and real workers: unknown tasks, SQL injection and lookalike characters in queue, task and
schema names, out-of-range priorities, attempts, delays and run_at values, a bad row in the
middle of enqueue_many, a handler's absurd retry request. As in test_hostile.py, each
test ends by proving that the canary, the bystander jobs and the schema are intact.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import psycopg
import pytest
from psycopg.types.json import Jsonb
from typer.testing import CliRunner

import pgqueue
from pgqueue._db.errors import enqueue_error
from pgqueue.cli import app as cli_app
from pgqueue.migrate import migrate
from tests.enqueue_support import Conn, count_jobs, must_get_job
from tests.hostile_support import (
    INJECTIONS,
    LOOKALIKES,
    Check,
    EchoTask,
    run_until_final,
    sql_enqueue,
)

# -- unknown tasks ---------------------------------------------------------------------------------


async def test_unknown_tasks_wait_for_a_worker_that_knows_them(
    dsn: str, conn: Conn, app: pgqueue.App, echo: EchoTask, received: dict[int, dict[str, Any]], intact: Check
) -> None:
    with pytest.raises(pgqueue.UnknownTaskError, match=r"'not\.registered'.*hostile\.echo"):
        app.enqueue(conn, "not.registered", x=1)
    row = conn.execute("SELECT pgqueue.enqueue('not.registered', queue => 'hq')").fetchone()
    assert row is not None
    unknown_sql = int(row[0])
    result = CliRunner().invoke(cli_app, ["enqueue", "also.unknown", "--queue", "hq", "--dsn", dsn])
    assert result.exit_code == 0, result.output
    unknown_cli = int(result.output.strip())
    known = echo.enqueue(conn, n=1)
    states = await run_until_final(app, [known], conn)
    assert states == {known: "completed"}
    for job_id in (unknown_sql, unknown_cli):
        job = must_get_job(conn, job_id)
        assert (job["state"], job["attempt"], job["errors"]) == ("available", 0, [])  # kept, untouched
    # A worker that knows the task picks it up later.
    late: list[int] = []

    @app.task(name="not.registered", queue="hq")
    def now_registered() -> None:
        late.append(1)

    assert await run_until_final(app, [unknown_sql], conn) == {unknown_sql: "completed"}
    assert late == [1]
    intact()


# -- SQL injection and lookalikes in names --------------------------------------------------------


@pytest.mark.parametrize("queue", INJECTIONS + LOOKALIKES)
def test_hostile_queue_names_are_refused(
    dsn: str, conn: Conn, app: pgqueue.App, echo: EchoTask, intact: Check, queue: str
) -> None:
    with pytest.raises(pgqueue.InvalidQueueError, match="invalid queue name"):
        echo.options(queue=queue).enqueue(conn)
    with pytest.raises(pgqueue.InvalidQueueError):
        app.task(name="declared.here", queue=queue)(lambda: None)
    with pytest.raises(pgqueue.InvalidQueueError):
        pgqueue.WorkerConfig(queues=(queue,))
    if "\x00" not in queue:
        with pytest.raises(psycopg.errors.InvalidParameterValue, match="invalid queue name"):
            conn.execute("SELECT pgqueue.enqueue('hostile.echo', queue => %s)", [queue])
    result = CliRunner().invoke(cli_app, ["enqueue", "hostile.echo", "--queue", queue, "--dsn", dsn])
    assert result.exit_code == 1
    assert "invalid queue name" in result.output
    assert count_jobs(conn) == 2
    intact()


@pytest.mark.parametrize("task", INJECTIONS + LOOKALIKES)
async def test_hostile_task_names_are_refused_or_stored_as_plain_data(
    dsn: str, conn: Conn, app: pgqueue.App, echo: EchoTask, intact: Check, task: str
) -> None:
    with pytest.raises(pgqueue.ConfigError, match="invalid task name"):
        app.task(name=task)(lambda: None)
    result = CliRunner().invoke(cli_app, ["enqueue", task, "--dsn", dsn])
    assert result.exit_code == 1
    assert "invalid task name" in result.output
    if "\x00" in task:
        with pytest.raises(psycopg.DataError, match="NUL"):
            conn.execute("SELECT pgqueue.enqueue(%s, queue => 'hq')", [task])
        intact()
        return
    # The SQL function stores any name as data: a bound value never becomes SQL, and no
    # worker can register such a name, so the job just waits (see unknown tasks).
    row = conn.execute("SELECT pgqueue.enqueue(%s, queue => 'hq')", [task]).fetchone()
    assert row is not None
    known = echo.enqueue(conn, n=1)
    assert await run_until_final(app, [known], conn) == {known: "completed"}
    assert must_get_job(conn, row[0])["task"] == task
    assert must_get_job(conn, row[0])["state"] == "available"
    intact()


@pytest.mark.parametrize("schema", [*INJECTIONS, *LOOKALIKES, "pgqueue\n", "PgQueue", "pg queue"])
def test_hostile_schema_names_are_refused_everywhere(dsn: str, conn: Conn, intact: Check, schema: str) -> None:
    with pytest.raises(pgqueue.ConfigError, match="invalid schema name"):
        pgqueue.App(dsn=dsn, schema=schema)
    with pytest.raises(pgqueue.ConfigError, match="invalid schema name"):
        migrate(conn, schema)
    for command in (["migrate"], ["enqueue", "t"], ["migrate", "--print-roles-sql"]):
        result = CliRunner().invoke(cli_app, [*command, "--schema", schema, "--dsn", dsn])
        assert result.exit_code == 1, result.output
        assert "invalid schema name" in result.output
    intact()


async def test_injection_text_in_unique_keys_and_args_round_trips(
    conn: Conn, app: pgqueue.App, echo: EchoTask, received: dict[int, dict[str, Any]], intact: Check
) -> None:
    ids: dict[int, str] = {}
    for text in INJECTIONS + [t for t in LOOKALIKES if "\x00" not in t]:
        first = echo.options(unique_key=text).enqueue(conn, payload=text, **{text.strip() or "blank": text})
        assert echo.options(unique_key=text).enqueue(conn, payload="again") == first  # deduplicated
        via_sql = conn.execute(
            "SELECT pgqueue.enqueue('hostile.echo', %s, queue => 'hq', unique_key => %s)", [Jsonb({"k": text}), text]
        ).fetchone()
        assert via_sql == (first,)
        ids[first] = text
    states = await run_until_final(app, list(ids), conn)
    assert set(states.values()) == {"completed"}
    for job_id, text in ids.items():
        assert received[job_id]["payload"] == text
        assert must_get_job(conn, job_id)["unique_key"] == text
    intact()


# -- priorities, max_attempts, delays and run_at ----------------------------------------------------


async def test_priorities_at_and_past_the_bounds(
    conn: Conn, app: pgqueue.App, echo: EchoTask, received: dict[int, dict[str, Any]], intact: Check
) -> None:
    for bad in (32768, -32769, 2**31 - 1, -(2**31), 2**31, 2**63, -(2**63) - 1, True, 1.5, "1"):
        with pytest.raises(pgqueue.ConfigError, match="priority"):
            echo.options(priority=bad).enqueue(conn)  # type: ignore[arg-type]
    with pytest.raises(pgqueue.ConfigError, match="priority"):
        app.task(name="too.urgent", priority=2**31)(lambda: None)
    for bad in (32768, -32769, 2**31 - 1, -(2**31)):
        with pytest.raises(psycopg.errors.NumericValueOutOfRange, match="priority"):
            conn.execute("SELECT pgqueue.enqueue('hostile.echo', priority => %s::int)", [bad])
    for bad in (2**31, -(2**31) - 1, 2**63):
        with pytest.raises((psycopg.errors.NumericValueOutOfRange, psycopg.errors.UndefinedFunction)):
            conn.execute("SELECT pgqueue.enqueue('hostile.echo', priority => %s)", [bad])
    assert count_jobs(conn) == 2
    lo = echo.options(priority=-32768).enqueue(conn, n="lo")
    hi = sql_enqueue(conn, '{"n": "hi"}', priority=32767)
    mid = echo.enqueue(conn, n="mid")
    assert await run_until_final(app, [lo, hi, mid], conn, concurrency=1) == {
        lo: "completed",
        hi: "completed",
        mid: "completed",
    }
    assert list(received) == [hi, mid, lo]  # claim order: priority DESC
    intact()


def test_max_attempts_past_the_int4_bound(conn: Conn, app: pgqueue.App, echo: EchoTask, intact: Check) -> None:
    for bad in (0, -1, 2**31, 2**63, True, 2.5):
        with pytest.raises(pgqueue.ConfigError, match="max_attempts"):
            echo.options(max_attempts=bad).enqueue(conn)  # type: ignore[arg-type]
        with pytest.raises(pgqueue.ConfigError, match="max_attempts"):
            app.task(name=f"attempts.x{abs(hash(str(bad)))}", max_attempts=bad)(lambda: None)  # type: ignore[arg-type]
    job_id = echo.options(max_attempts=2**31 - 1).enqueue(conn)
    assert must_get_job(conn, job_id)["max_attempts"] == 2**31 - 1
    intact()


def test_negative_and_huge_delays(conn: Conn, echo: EchoTask, intact: Check) -> None:
    bad_delays: list[Any] = [
        -1,
        -0.001,
        float("nan"),
        float("inf"),
        -float("inf"),
        11 * 365 * 86400,
        timedelta(days=-1),
        timedelta.max,
        1e308,
    ]
    for delay in bad_delays:
        with pytest.raises(pgqueue.ConfigError, match="delay must be between 0 and ten years"):
            echo.options(delay=delay).enqueue(conn)
        with pytest.raises(pgqueue.ConfigError, match="delay"):
            echo.options(delay=delay).job()
    for after in (-1, float("nan"), float("inf"), 1e12):
        with pytest.raises(pgqueue.ConfigError, match="Retry"):
            pgqueue.Retry(after=after)
    for cap in (float("nan"), float("inf"), 1e12):
        with pytest.raises(pgqueue.ConfigError, match="Backoff"):
            pgqueue.Backoff(cap=cap)
    longest = echo.options(delay=timedelta(days=3650)).enqueue(conn)
    job = must_get_job(conn, longest)
    assert job["state"] == "scheduled"
    assert job["run_at"].year >= datetime.now(UTC).year + 9
    assert count_jobs(conn) == 3
    intact()


async def test_run_at_far_in_the_past_and_future(
    conn: Conn, app: pgqueue.App, echo: EchoTask, received: dict[int, dict[str, Any]], intact: Check
) -> None:
    plus14 = timezone(timedelta(hours=14))
    refused: list[datetime] = [
        datetime(1, 1, 1, tzinfo=UTC),
        datetime.min.replace(tzinfo=plus14),  # year 0 in UTC: not even a Python datetime
        datetime(1900, 1, 1, 5, tzinfo=plus14),  # 1899-12-31 in UTC
        datetime.max.replace(tzinfo=UTC),
        datetime(9999, 1, 1, tzinfo=UTC),
    ]
    for run_at in refused:
        with pytest.raises(pgqueue.ConfigError, match="run_at must be between 1900-01-01 and 9999-01-01"):
            echo.options(run_at=run_at).enqueue(conn)
    # Values only SQL can write, each of which used to stop every worker of the queue:
    # '-infinity' broke the claim itself, a BC date broke the worker after its claim.
    for expression in ("'-infinity'", "'infinity'", "'4000-01-01 BC'", "'200000-01-01'", "'1899-12-31 23:59:59+00'"):
        with pytest.raises(psycopg.errors.CheckViolation, match="jobs_run_at_range"):
            conn.execute(f"SELECT pgqueue.enqueue('hostile.echo', queue => 'hq', run_at => {expression})".encode())
    # A producer's own INSERT meets the same CHECK; pgqueue translates it on its paths.
    with pytest.raises(psycopg.errors.CheckViolation, match="jobs_run_at_range") as info:
        conn.execute(
            "INSERT INTO pgqueue.jobs_live (task, queue, state, run_at) VALUES ('t', 'hq', 'available', %s)",
            ["-infinity"],
        )
    assert "between 1900-01-01 and 9999-01-01" in str(enqueue_error(info.value, conn, "pgqueue"))
    assert count_jobs(conn) == 2
    oldest = echo.options(run_at=datetime(1900, 1, 1, tzinfo=UTC)).enqueue(conn, n="1900")
    past = echo.options(run_at=datetime(2000, 1, 1, 12, tzinfo=plus14)).enqueue(conn, n="2000")
    future = echo.options(run_at=datetime(9998, 12, 31, tzinfo=UTC)).enqueue(conn, n="9998")
    assert must_get_job(conn, future)["state"] == "scheduled"
    assert await run_until_final(app, [oldest, past], conn) == {oldest: "completed", past: "completed"}
    assert set(received) == {oldest, past}  # the far-future job still waits
    assert must_get_job(conn, future)["state"] == "scheduled"
    intact()


# -- enqueue_many with a bad row in the middle ---------------------------------------------------------


async def test_enqueue_many_with_a_bad_row_in_the_middle_enqueues_nothing(
    dsn: str, conn: Conn, app: pgqueue.App, echo: EchoTask, intact: Check
) -> None:
    def generator(bad_at: int, bad: Any) -> Iterator[Any]:
        for i in range(1, 1001):
            yield echo.job(n=i, value=bad) if i == bad_at else echo.job(n=i)

    with pytest.raises(pgqueue.InvalidArgumentsError, match=r"enqueue_many row 500: .*'value'.*set"):
        app.enqueue_many(conn, generator(500, {1}))
    with pytest.raises(pgqueue.InvalidArgumentsError, match=r"enqueue_many row 3: .*NUL"):
        app.enqueue_many(conn, generator(3, "\x00"))
    with pytest.raises(pgqueue.InvalidArgumentsError, match=r"enqueue_many row 2: expected a job from task\.job"):
        app.enqueue_many(conn, [echo.job(n=1), {"n": 2}, echo.job(n=3)])  # type: ignore[list-item]
    # A row the server refuses: the error names it, counting keyed rows too.
    huge = pgqueue.models.JobSpec(
        task="hostile.echo", args_json=json.dumps({"b": os.urandom(5 << 20).hex()}), queue="hq"
    )
    rows = [echo.job(n=1), echo.options(unique_key="k1").job(n=2), echo.job(n=3), huge, echo.job(n=5)]
    with pytest.raises(pgqueue.PayloadTooLargeError, match="enqueue_many row 4: "):
        app.enqueue_many(conn, rows)
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as aconn:

        async def agen() -> Any:
            yield echo.job(n=1)
            yield echo.job(n=2, when=datetime.now(UTC))

        with pytest.raises(pgqueue.InvalidArgumentsError, match=r"enqueue_many row 2: .*'when'"):
            await app.enqueue_many_async(aconn, agen())
    # Inside the caller's transaction: nothing of the batch (nor the caller's own rows) stays.
    conn.execute("CREATE TABLE uploads (n int)")

    def callers_transaction() -> None:
        with conn.transaction():
            conn.execute("INSERT INTO uploads VALUES (1)")
            app.enqueue_many(conn, generator(7, float("nan")))

    with pytest.raises(pgqueue.InvalidArgumentsError, match="row 7"):
        callers_transaction()
    assert conn.execute("SELECT count(*) FROM uploads").fetchone() == (0,)
    assert count_jobs(conn) == 2
    assert app.enqueue_many(conn, generator(0, None)) == 1000  # the same stream, all good
    intact_ids = conn.execute("SELECT count(*) FROM pgqueue.jobs WHERE task = 'hostile.echo'").fetchone()
    assert intact_ids == (1000,)
    intact()


# -- a handler's hostile retry request -------------------------------------------------------------------


async def test_a_handler_asking_for_an_infinite_retry_delay_fails_normally(
    conn: Conn, app: pgqueue.App, intact: Check
) -> None:
    calls: list[int] = []

    @app.task(name="hostile.retry", queue="hq", max_attempts=2, retry=pgqueue.Backoff(base=0.01, jitter=False))
    def retry_forever() -> None:
        calls.append(1)
        raise pgqueue.Retry(after=float("inf"))

    job_id = retry_forever.enqueue(conn)
    assert await run_until_final(app, [job_id], conn) == {job_id: "discarded"}
    job = must_get_job(conn, job_id)
    assert len(calls) == 2
    assert [e["type"] for e in job["errors"]] == ["pgqueue.errors.ConfigError"] * 2
    assert "ten years" in job["errors"][0]["message"]
    intact()
