"""Bad input to flow control, from Python and from SQL: one clear error each, and nothing
changed. And the operator's view of the controls."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import psycopg
import pytest

from pgqueue import ConfigError, InvalidQueueError, UnknownQueueError, ops

Conn = psycopg.Connection[Any]


def controls(conn: Conn) -> list[tuple[Any, ...]]:
    return conn.execute("SELECT * FROM pgqueue.queues ORDER BY name").fetchall()


@pytest.fixture
def known(conn: Conn) -> Conn:
    ops.add_queue(conn, "pgqueue", "images")
    ops.set_queue_limits(conn, "pgqueue", "images", concurrency=4)
    return conn


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"concurrency": 0}, "concurrency must be an int between 1 and 1000000"),
        ({"concurrency": -3}, "concurrency must be an int between 1 and 1000000"),
        ({"concurrency": 1_000_001}, "concurrency must be an int between 1 and 1000000"),
        ({"concurrency": 2.5}, "concurrency must be an int"),
        ({"concurrency": True}, "concurrency must be an int"),
        ({"key_concurrency": 0}, "key_concurrency must be an int"),
        ({"rate": (10, 0)}, "rate period must be between 1 millisecond and 7 days, got 0s"),
        ({"rate": (10, -1)}, "rate period must be between"),
        ({"rate": (10, timedelta(days=8))}, "rate period must be between"),
        ({"rate": (0, 60)}, "rate limit must be an int between 1"),
        ({"rate": (10, float("nan"))}, "rate period must be seconds or a timedelta"),
        ({"rate": 10}, "rate must be (limit, period)"),
        ({"key_rate": (5, 0.0)}, "key_rate period must be between"),
        ({"key_concurrency": 2, "key_fifo": True}, "fifo needs a key concurrency of 1, got 2"),
    ],
)
def test_a_bad_limit_is_one_clear_error_and_changes_nothing(known: Conn, changes: dict[str, Any], message: str) -> None:
    before = controls(known)
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace(")", r"\)")):
        ops.set_queue_limits(known, "pgqueue", "images", **changes)
    assert controls(known) == before


def test_an_unknown_queue_is_refused_until_added_or_created(conn: Conn) -> None:
    with pytest.raises(UnknownQueueError, match="unknown queue 'imags'"):
        ops.set_queue_limits(conn, "pgqueue", "imags", concurrency=3)
    with pytest.raises(UnknownQueueError, match="unknown queue 'imags'"):
        ops.pause_queue(conn, "pgqueue", "imags")
    assert controls(conn) == []
    assert ops.pause_queue(conn, "pgqueue", "new", create=True) is True
    assert ops.set_queue_limits(conn, "pgqueue", "other", concurrency=3, create=True).concurrency == 3
    assert [r[0] for r in controls(conn)] == ["new", "other"]


def test_a_queue_with_jobs_is_known_without_being_added(conn: Conn) -> None:
    conn.execute("SELECT pgqueue.enqueue('t', queue => 'busy')")
    assert ops.pause_queue(conn, "pgqueue", "busy") is True


@pytest.mark.parametrize("name", ["", "bad name", "x" * 65, "-leading", "new\nline"])
def test_an_invalid_queue_name_is_refused_before_the_database_is_asked(conn: Conn, name: str) -> None:
    with pytest.raises(InvalidQueueError, match="invalid queue name"):
        ops.pause_queue(conn, "pgqueue", name, create=True)
    assert controls(conn) == []


def test_a_bad_task_limit_is_refused(conn: Conn) -> None:
    with pytest.raises(ConfigError, match="invalid task name"):
        ops.set_task_limit(conn, "pgqueue", "bad task", 3)
    with pytest.raises(ConfigError, match="concurrency must be an int between 1"):
        ops.set_task_limit(conn, "pgqueue", "reports.build", 0)
    assert ops.task_controls(conn, "pgqueue") == []
    ops.set_task_limit(conn, "pgqueue", "reports.build", 5)
    ops.set_task_limit(conn, "pgqueue", "reports.build", None)
    assert ops.task_controls(conn, "pgqueue") == []


@pytest.mark.parametrize(
    ("statement", "message"),
    [
        ("SELECT pgqueue.set_queue_limit('images', 0)", "concurrency must be between 1 and 1000000, got 0"),
        ("SELECT pgqueue.set_queue_limit('images', -1)", "concurrency must be between 1 and 1000000"),
        ("SELECT pgqueue.set_queue_rate('images', 10, interval '0')", "rate period must be between 1 millisecond"),
        ("SELECT pgqueue.set_queue_rate('images', 10, NULL)", "rate needs both a limit and a period"),
        ("SELECT pgqueue.set_key_limit('images', 3, true)", "fifo needs a key concurrency of 1, got 3"),
        ("SELECT pgqueue.set_key_rate('images', 0, interval '1 minute')", "key rate must be between 1 and"),
        ("SELECT pgqueue.set_queue_limit('nope', 3)", "unknown queue 'nope'"),
        ("SELECT pgqueue.pause_queue('bad name')", "invalid queue name 'bad name'"),
        ("SELECT pgqueue.set_task_limit('', 3)", "invalid task name ''"),
        ("SELECT pgqueue.set_task_limit('t', 0)", "concurrency must be between 1 and 1000000, got 0"),
    ],
)
def test_the_sql_functions_refuse_bad_input_alike(known: Conn, statement: str, message: str) -> None:
    before = controls(known)
    with pytest.raises(psycopg.Error, match=message):
        known.execute(statement.encode())
    assert controls(known) == before


def test_the_sql_functions_set_what_the_views_show(conn: Conn) -> None:
    conn.execute("SELECT pgqueue.add_queue('api')")
    conn.execute("SELECT pgqueue.set_queue_rate('api', 100, interval '1 minute')")
    conn.execute("SELECT pgqueue.set_key_limit('api', 1, fifo => true)")
    conn.execute("SELECT pgqueue.pause_queue('api')")
    conn.execute("SELECT pgqueue.set_task_limit('reports.build', 5)")
    (api,) = ops.queue_controls(conn, "pgqueue")
    assert (api.queue, api.paused, api.rate_limit, api.rate_period_seconds) == ("api", True, 100, 60.0)
    assert (api.key_concurrency, api.key_fifo, api.concurrency) == (1, True, None)
    assert [(t.task, t.concurrency, t.running) for t in ops.task_controls(conn, "pgqueue")] == [("reports.build", 5, 0)]
    # Removing the key limit takes FIFO with it; the other settings stay.
    control = ops.set_queue_limits(conn, "pgqueue", "api", key_concurrency=None)
    assert (control.key_concurrency, control.key_fifo, control.rate_limit, control.paused) == (None, False, 100, True)


async def test_a_change_wakes_every_worker_with_one_notification(conn: Conn, dsn: str) -> None:
    ops.add_queue(conn, "pgqueue", "q")
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as listener:
        await listener.execute("LISTEN pgqueue_wakeup")
        ops.set_queue_limits(conn, "pgqueue", "q", concurrency=3, rate=(5, 1))
        payloads = [n.payload async for n in listener.notifies(timeout=5, stop_after=1)]
    assert payloads == ["*flow"]
