"""Bad input to enqueue: each gets a clear pgqueue error and leaves no job behind."""

from __future__ import annotations

import json
import os
from datetime import UTC, datetime
from typing import Any

import psycopg
import pytest
from psycopg import pq

import pgqueue
from tests.enqueue_support import (
    Conn,
    NoopTask,
    count_jobs,
    count_uploads,
    libpq_trace,
    must_get_job,
)

# -- bad input -------------------------------------------------------------------------


def test_unknown_task_name(conn: Conn, app: pgqueue.App, noop: NoopTask) -> None:
    @app.task(name="alpha")
    def alpha() -> None:
        return None

    with pytest.raises(pgqueue.UnknownTaskError) as info:
        app.enqueue(conn, "nope.missing", x=1)
    message = str(info.value)
    assert "nope.missing" in message
    assert "alpha" in message
    assert "noop" in message
    assert isinstance(info.value, pgqueue.EnqueueError)
    assert count_jobs(conn) == 0


async def test_unknown_task_name_async(dsn: str, conn: Conn, app: pgqueue.App) -> None:
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as aconn:
        with pytest.raises(pgqueue.UnknownTaskError, match="ghost"):
            await app.enqueue_async(aconn, "ghost")
    assert count_jobs(conn) == 0


class _Opaque:
    pass


@pytest.mark.parametrize(
    "bad",
    [{1, 2}, _Opaque(), datetime(2024, 1, 1, tzinfo=UTC), b"bytes", [1, {2}], {"deep": {"x": object()}}],
    ids=["set", "object", "datetime", "bytes", "nested-set", "nested-object"],
)
def test_non_json_argument_is_named(conn: Conn, noop: NoopTask, bad: Any) -> None:
    with pytest.raises(pgqueue.InvalidArgumentsError) as info:
        noop.enqueue(conn, good=1, the_bad_one=bad)
    assert "the_bad_one" in str(info.value)
    assert "good" not in str(info.value).replace("the_bad_one", "")
    with pytest.raises(pgqueue.InvalidArgumentsError, match="the_bad_one"):
        noop.job(the_bad_one=bad)
    assert count_jobs(conn) == 0


@pytest.mark.parametrize("value", [float("nan"), float("inf"), -float("inf"), [1.0, float("nan")]])
def test_non_finite_floats_rejected(conn: Conn, noop: NoopTask, value: Any) -> None:
    with pytest.raises(pgqueue.InvalidArgumentsError, match="ratio"):
        noop.enqueue(conn, ratio=value)
    assert count_jobs(conn) == 0


@pytest.mark.parametrize(
    "args",
    [{"s": "a\x00b"}, {"s": ["ok", "\x00"]}, {"s": {"k\x00ey": 1}}, {"s\x00": 1}],
    ids=["value", "in-list", "in-nested-key", "in-arg-name"],
)
def test_nul_character_rejected(conn: Conn, noop: NoopTask, args: dict[str, Any]) -> None:
    with pytest.raises(pgqueue.InvalidArgumentsError, match="NUL"):
        noop.enqueue(conn, **args)
    assert count_jobs(conn) == 0


def test_lone_surrogate_is_named(conn: Conn, noop: NoopTask) -> None:
    with pytest.raises(pgqueue.InvalidArgumentsError, match="broken"):
        noop.enqueue(conn, fine="ok", broken="\ud800")
    assert count_jobs(conn) == 0


def test_payload_limit_is_exact(dsn: str, conn: Conn) -> None:
    app = pgqueue.App(dsn=dsn, max_payload_bytes=100)

    @app.task(name="small")
    def small(s: str) -> None:
        return None

    fits = "é" * 46  # {"s":"…"} is 8 bytes plus 2 bytes per é: exactly 100
    job_id = small.enqueue(conn, s=fits)
    assert must_get_job(conn, job_id)["args"] == {"s": fits}
    with pytest.raises(pgqueue.PayloadTooLargeError) as info:
        small.enqueue(conn, s=fits + "x")
    assert "101 bytes" in str(info.value)
    assert "100-byte limit" in str(info.value)
    with pytest.raises(pgqueue.PayloadTooLargeError):
        small.job(s="y" * 1000)
    assert count_jobs(conn) == 1


def test_server_side_payload_limit(dsn: str, conn: Conn) -> None:
    from pgqueue.migrate import migrate, payload_limit

    app = pgqueue.App(dsn=dsn, max_payload_bytes=16 * 1024 * 1024)

    @app.task(name="big")
    def big(blob: str) -> None:
        return None

    assert payload_limit(conn, "pgqueue") == 8 * 1024 * 1024  # the shipped default
    migrate(conn, "pgqueue", max_payload_bytes=1024 * 1024)
    assert payload_limit(conn, "pgqueue") == 1024 * 1024
    blob = os.urandom(1024 * 1024).hex()  # 2 MiB of incompressible text
    with pytest.raises(pgqueue.PayloadTooLargeError, match="server"):
        big.enqueue(conn, blob=blob)
    with pytest.raises(pgqueue.PayloadTooLargeError, match="server"):
        app.enqueue_many(conn, [big.job(blob=blob)])
    assert count_jobs(conn) == 0
    # Raising the cap lets the same payload in, intact.
    migrate(conn, "pgqueue", max_payload_bytes=4 * 1024 * 1024)
    job_id = big.enqueue(conn, blob=blob)
    row = conn.execute("SELECT args->>'blob' FROM pgqueue.jobs WHERE id = %s", [job_id]).fetchone()
    assert row is not None
    assert row[0] == blob


def a_handler(x: int) -> None:
    return None


INVALID_QUEUES = ["", "a b", "x" * 65, "q;drop table", "-dash", "tab\t", "ünï"]


@pytest.mark.parametrize("queue", INVALID_QUEUES)
def test_invalid_queue_names_in_options(conn: Conn, noop: NoopTask, queue: str) -> None:
    with pytest.raises(pgqueue.InvalidQueueError, match="queue"):
        noop.options(queue=queue).enqueue(conn)
    with pytest.raises(pgqueue.InvalidQueueError, match="queue"):
        noop.options(queue=queue).job()
    assert count_jobs(conn) == 0


@pytest.mark.parametrize("queue", INVALID_QUEUES)
def test_invalid_queue_names_in_task_declaration(app: pgqueue.App, queue: str) -> None:
    with pytest.raises(pgqueue.InvalidQueueError, match="queue"):
        app.task(name="declared", queue=queue)(a_handler)
    assert "declared" not in app.tasks


def test_longest_valid_queue_name(conn: Conn, noop: NoopTask) -> None:
    queue = "Q" + "x_.:-9" * 10 + "abc"
    assert len(queue) == 64
    assert must_get_job(conn, noop.options(queue=queue).enqueue(conn))["queue"] == queue


@pytest.mark.parametrize("priority", [32768, -32769, 10**6, True, 1.5, "1"])
def test_priority_out_of_range(conn: Conn, noop: NoopTask, priority: Any) -> None:
    with pytest.raises(pgqueue.ConfigError, match="priority"):
        noop.options(priority=priority).enqueue(conn)
    assert count_jobs(conn) == 0


def test_priority_bounds_are_accepted(conn: Conn, app: pgqueue.App, noop: NoopTask) -> None:
    hi = noop.options(priority=32767).enqueue(conn)
    lo = noop.options(priority=-32768).enqueue(conn)
    assert must_get_job(conn, hi)["priority"] == 32767
    assert must_get_job(conn, lo)["priority"] == -32768
    with pytest.raises(pgqueue.ConfigError, match="priority"):
        app.task(name="too.high", priority=40000)(a_handler)


def test_naive_run_at_rejected(conn: Conn, noop: NoopTask) -> None:
    with pytest.raises(pgqueue.ConfigError, match="timezone"):
        noop.options(run_at=datetime(2030, 1, 1, 12, 0)).enqueue(conn)
    assert count_jobs(conn) == 0


def test_schema_not_installed(empty_dsn: str, noop: NoopTask) -> None:
    with psycopg.connect(empty_dsn, autocommit=True) as c:
        with pytest.raises(pgqueue.SchemaNotInstalledError, match="pgqueue migrate"):
            noop.enqueue(c, x=1)
        with pytest.raises(pgqueue.SchemaNotInstalledError, match="pgqueue migrate"):
            noop.app.enqueue_many(c, [noop.job(x=1)])
        with pytest.raises(pgqueue.SchemaNotInstalledError, match="pgqueue migrate"):
            noop.options(unique_key="k").enqueue(c)
        assert c.execute("SELECT count(*) FROM pg_namespace WHERE nspname = 'pgqueue'").fetchone() == (0,)


async def test_schema_not_installed_async(empty_dsn: str, noop: NoopTask) -> None:
    async with await psycopg.AsyncConnection.connect(empty_dsn, autocommit=True) as aconn:
        with pytest.raises(pgqueue.SchemaNotInstalledError, match="pgqueue migrate"):
            await noop.enqueue_async(aconn, x=1)
        with pytest.raises(pgqueue.SchemaNotInstalledError, match="pgqueue migrate"):
            await noop.app.enqueue_many_async(aconn, [noop.job(x=1)])


def test_client_side_rejection_leaves_callers_transaction_usable(uploads: Conn, noop: NoopTask) -> None:
    conn = uploads
    app = noop.app
    with conn.transaction():
        conn.execute("INSERT INTO uploads (name) VALUES ('kept.png')")
        rejections: list[tuple[type[Exception], Any]] = [
            (pgqueue.InvalidArgumentsError, lambda: noop.enqueue(conn, bad={1})),
            (pgqueue.InvalidArgumentsError, lambda: noop.enqueue(conn, bad=float("nan"))),
            (pgqueue.InvalidArgumentsError, lambda: noop.enqueue(conn, bad="\x00")),
            (pgqueue.InvalidQueueError, lambda: noop.options(queue="a b").enqueue(conn)),
            (pgqueue.ConfigError, lambda: noop.options(priority=99999).enqueue(conn)),
            (pgqueue.ConfigError, lambda: noop.options(run_at=datetime(2030, 1, 1)).enqueue(conn)),
            (pgqueue.UnknownTaskError, lambda: app.enqueue(conn, "missing")),
            (pgqueue.PayloadTooLargeError, lambda: noop.enqueue(conn, big="x" * (2 * 1024 * 1024))),
        ]
        for error, call in rejections:
            with libpq_trace(conn) as trace, pytest.raises(error):
                call()
            assert trace.frontend_messages == 0, f"{error.__name__}: SQL was sent: {trace.text}"
            assert conn.info.transaction_status == pq.TransactionStatus.INTRANS
        job_id = noop.enqueue(conn, fine=True)
    assert count_uploads(conn) == 1
    assert must_get_job(conn, job_id)["args"] == {"fine": True}
    assert count_jobs(conn) == 1


@pytest.mark.parametrize("schema", ['a"; drop', "Upper", "1abc", "", "has space", "x" * 49, "sch-ema", "pg.q"])
def test_invalid_schema_names_rejected(dsn: str, schema: str) -> None:
    with pytest.raises(pgqueue.ConfigError, match="schema"):
        pgqueue.App(dsn=dsn, schema=schema)


def test_valid_schema_names_accepted(dsn: str) -> None:
    for schema in ("pgqueue", "jobs_custom", "_x", "a1", "x" * 48):
        assert pgqueue.App(dsn=dsn, schema=schema).schema == schema


def test_enqueue_with_json_text_args_is_not_double_encoded(conn: Conn, noop: NoopTask) -> None:
    # A string that looks like JSON stays a string.
    job_id = noop.enqueue(conn, payload=json.dumps({"a": 1}))
    assert must_get_job(conn, job_id)["args"] == {"payload": '{"a": 1}'}
