"""Fixtures and helpers shared by the enqueue test modules (loaded as a pytest plugin
from conftest.py)."""

from __future__ import annotations

import tempfile
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import psycopg
import pytest
from psycopg import pq, sql
from psycopg.rows import dict_row

import pgqueue
from pgqueue._db.jobs import cursor_params, outcome_params
from pgqueue._db.sql import queries_for
from pgqueue.models import JobState, Outcome

Conn = psycopg.Connection[Any]
AConn = psycopg.AsyncConnection[Any]
NoopTask = pgqueue.Task[..., None]

CHANNEL = "pgqueue_wakeup"
Q = queries_for("pgqueue")


# -- fixtures and helpers ---------------------------------------------------------------


@pytest.fixture
def noop(app: pgqueue.App) -> NoopTask:
    """A task on queue 'work' with max_attempts=4 and priority 0."""

    @app.task(name="noop", queue="work", max_attempts=4)
    def noop_fn(**kwargs: Any) -> None:
        return None

    return noop_fn


@pytest.fixture
def uploads(conn: Conn) -> Conn:
    """The caller's own table, to check atomicity with the caller's writes."""
    conn.execute("CREATE TABLE uploads (id serial PRIMARY KEY, name text NOT NULL)")
    return conn


def get_job(conn: Conn, job_id: int) -> dict[str, Any] | None:
    with conn.cursor(row_factory=dict_row) as cur:
        cur.execute(
            "SELECT id, state::text AS state, queue, task, args, priority, run_at, attempt, max_attempts,"
            " unique_key, errors, finished_at FROM pgqueue.jobs WHERE id = %s",
            [job_id],
        )
        return cur.fetchone()


def must_get_job(conn: Conn, job_id: int) -> dict[str, Any]:
    job = get_job(conn, job_id)
    assert job is not None, f"job {job_id} does not exist"
    return job


def count_jobs(conn: Conn) -> int:
    row = conn.execute("SELECT count(*) FROM pgqueue.jobs").fetchone()
    assert row is not None
    return int(row[0])


def count_uploads(conn: Conn) -> int:
    row = conn.execute("SELECT count(*) FROM uploads").fetchone()
    assert row is not None
    return int(row[0])


def db_now(conn: Conn) -> datetime:
    row = conn.execute("SELECT now()").fetchone()
    assert row is not None
    value: datetime = row[0]
    return value


@dataclass
class Trace:
    text: str = ""

    @property
    def round_trips(self) -> int:
        """Server replies that end a request cycle (one per client round trip)."""
        return sum(1 for line in self.text.splitlines() if line.startswith("B") and "\tReadyForQuery" in line)

    @property
    def frontend_messages(self) -> int:
        return sum(1 for line in self.text.splitlines() if line.startswith("F"))


@contextmanager
def libpq_trace(conn: Conn | AConn) -> Iterator[Trace]:
    """Record every protocol message libpq exchanges on ``conn`` during the block."""
    result = Trace()
    with tempfile.TemporaryFile("w+") as f:
        conn.pgconn.trace(f.fileno())
        conn.pgconn.set_trace_flags(pq.Trace.SUPPRESS_TIMESTAMPS | pq.Trace.REGRESS_MODE)
        try:
            yield result
        finally:
            conn.pgconn.untrace()
            f.seek(0)
            result.text = f.read()


def claim(conn: Conn, queue: str, tasks: dict[str, int], limit: int = 10) -> list[tuple[Any, ...]]:
    """Claim jobs with the worker's own claim query."""
    return conn.execute(
        Q["job_claim_one_queue"],
        {
            **cursor_params([queue]),
            "tasks": list(tasks),
            "task_max_attempts": list(tasks.values()),
            "limit": limit,
            "lease": 30.0,
            "worker_id": "test-worker",
        },
    ).fetchall()


def complete(conn: Conn, job_id: int, token: uuid.UUID, state: JobState = JobState.COMPLETED) -> None:
    """Record an outcome with the worker's own query; asserts the lease was accepted."""
    rows = conn.execute(Q["job_record_outcomes"], outcome_params([(job_id, token, Outcome(state))])).fetchall()
    assert [r[0] for r in rows] == [job_id]


def notifications_until_sentinel(listener: Conn, sender: Conn) -> list[psycopg.Notify]:
    """Everything ``listener`` received before a sentinel sent now by ``sender``.

    Notifications are delivered in commit order, so once the sentinel (committed after
    everything the test did) arrives, every earlier notification has arrived too: no
    arbitrary waiting needed to assert that something was NOT sent.
    """
    sentinel = f"sentinel-{uuid.uuid4().hex}"
    assert sender.autocommit
    sender.execute("SELECT pg_notify(%s, %s)", [CHANNEL, sentinel])
    got: list[psycopg.Notify] = []
    for notify in listener.notifies(timeout=15):
        if notify.payload == sentinel:
            return got
        got.append(notify)
    raise AssertionError(f"sentinel notification never arrived; received {got}")


@pytest.fixture
def listener(dsn: str) -> Iterator[Conn]:
    with psycopg.connect(dsn, autocommit=True) as c:
        c.execute(sql.SQL("LISTEN {}").format(sql.Identifier(CHANNEL)))
        yield c


# Arguments that must survive JSON -> jsonb -> Python unchanged.
ROUND_TRIP_ARGS: dict[str, Any] = {
    "text": "héllo wörld 😀 — \t tab \n newline \\ backslash \"quote\" 'single'",
    "big": 2**62,
    "neg": -17,
    "float": 0.1,
    "bool": True,
    "none": None,
    "list": [1, "two", [3.5], {"four": 4}],
    "nested": {"a": {"b": {"c": []}}},
    "empty": "",
}
