"""The worker registry: register at start, heartbeat, deregister on stop, dead rows cleaned."""

from __future__ import annotations

import asyncio
import os
import socket
from typing import Any

import psycopg
import pytest

import pgqueue
from pgqueue.maintenance.retention import apply_retention
from tests.conftest import async_wait_until, running_worker

Conn = psycopg.Connection[Any]


def worker_row(conn: Conn, worker_id: str) -> dict[str, Any] | None:
    cur = conn.execute("SELECT * FROM pgqueue.workers WHERE worker_id = %s", [worker_id])
    row = cur.fetchone()
    if row is None:
        return None
    assert cur.description is not None
    return dict(zip([c.name for c in cur.description], row, strict=True))


async def test_worker_registers_heartbeats_and_deregisters(app: pgqueue.App, conn: Conn) -> None:
    gate = asyncio.Event()
    running = asyncio.Event()

    @app.task(name="held", queue="reg")
    async def held() -> None:
        running.set()
        await gate.wait()

    async with running_worker(app, heartbeat_interval=0.2, lease=2.0, concurrency=4) as worker:
        row = worker_row(conn, worker.worker_id)
        assert row is not None, "registered before started is set"
        assert row["host"] == socket.gethostname()
        assert row["pid"] == os.getpid()
        assert sorted(row["queues"]) == sorted(worker.queues)
        assert "reg" in row["queues"]
        assert row["concurrency"] == 4
        assert row["version"] == pgqueue.__version__
        assert row["alive"] is True
        first_beat = row["last_heartbeat"]

        held.enqueue(conn)
        await asyncio.wait_for(running.wait(), 20)

        def beat_seen() -> bool:
            r = worker_row(conn, worker.worker_id)
            return r is not None and r["last_heartbeat"] > first_beat and r["in_flight"] == 1

        await async_wait_until(beat_seen)
        await async_wait_until(lambda: (worker_row(conn, worker.worker_id) or {}).get("listener_connected"))
        health = conn.execute("SELECT workers_alive, listeners_connected FROM pgqueue.health").fetchone()
        assert health == (1, 1)
        gate.set()
    assert worker_row(conn, worker.worker_id) is None, "a graceful stop removes the registration"


async def test_a_stalled_worker_reappears_at_its_next_heartbeat(app: pgqueue.App, conn: Conn) -> None:
    async with running_worker(app, heartbeat_interval=0.2, lease=2.0) as worker:
        conn.execute("DELETE FROM pgqueue.worker_registry")
        await async_wait_until(lambda: worker_row(conn, worker.worker_id) is not None)


def test_expired_registrations_are_not_alive_and_are_cleaned_later(conn: Conn) -> None:
    insert = (
        "INSERT INTO pgqueue.worker_registry (worker_id, host, pid, queues, concurrency, expires_at, version)"
        " VALUES (%s, 'h', 1, '{default}', 1, now() + %s::interval, '0')"
    )
    conn.execute(insert, ["alive", "30 seconds"])
    conn.execute(insert, ["just_dead", "-1 minute"])
    conn.execute(insert, ["long_dead", "-10 minutes"])
    alive = dict(conn.execute("SELECT worker_id, alive FROM pgqueue.workers").fetchall())
    assert alive == {"alive": True, "just_dead": False, "long_dead": False}
    assert conn.execute("SELECT workers_alive FROM pgqueue.health").fetchone() == (1,)

    result = apply_retention(conn, "pgqueue", {"completed": None, "discarded": None, "cancelled": None}, by="t")
    assert result.leader
    assert result.registrations_removed == 1
    left = {r[0] for r in conn.execute("SELECT worker_id FROM pgqueue.workers")}
    assert left == {"alive", "just_dead"}


async def test_idle_worker_keeps_heartbeating_with_a_ttl_of_three_intervals(app: pgqueue.App, conn: Conn) -> None:
    async with running_worker(app, heartbeat_interval=0.3, lease=2.0) as worker:
        row = worker_row(conn, worker.worker_id)
        assert row is not None
        base = row["last_heartbeat"]

        def advanced() -> bool:
            r = worker_row(conn, worker.worker_id)
            return r is not None and (r["last_heartbeat"] - base).total_seconds() >= 4 * 0.3

        await async_wait_until(advanced)  # no jobs held: the registry beat alone keeps going
        row = worker_row(conn, worker.worker_id)
        assert row is not None
        assert (row["expires_at"] - row["last_heartbeat"]).total_seconds() == pytest.approx(0.9)
