"""Batches against the real database: members added at once or over time, then closed;
the callbacks fire exactly once when the last member settles (or at close, when all
settled before), with the counts per outcome in their context; a closed batch takes no
member; a rolled-back creation leaves nothing; cancelling a batch cancels its members."""

from __future__ import annotations

import asyncio
from typing import Any

import psycopg
import pytest

import pgqueue
from pgqueue import WorkflowError, ops
from pgqueue._db import workflows as wdb
from tests.apps.support import state_of
from tests.cli_support import invoke
from tests.conftest import async_wait_until, running_worker

Conn = psycopg.Connection[Any]
FINAL = {"completed", "discarded", "cancelled"}


def batch_row(conn: Conn, batch_id: int) -> tuple[Any, ...]:
    found = wdb.batch_get(conn, "pgqueue", batch_id)
    assert found is not None, f"no batch {batch_id}"
    return found


def callbacks_of(conn: Conn, batch_id: int) -> list[tuple[str, str]]:
    return [
        (str(r[0]), str(r[1]))
        for r in conn.execute(
            "SELECT j.task, j.state::text FROM pgqueue.batches AS b"
            " JOIN pgqueue.jobs AS j ON j.id = ANY(b.callback_ids) WHERE b.id = %s ORDER BY j.id",
            [batch_id],
        ).fetchall()
    ]


async def test_callbacks_fire_once_with_counts(app: pgqueue.App, conn: Conn) -> None:
    seen: list[tuple[str, pgqueue.BatchInfo | None]] = []

    @app.task(name="b.member", max_attempts=1)
    def member(fail: bool) -> None:
        if fail:
            raise ValueError("no")

    @app.task(name="b.done", pass_context=True)
    def done(ctx: pgqueue.JobContext, kind: str) -> None:
        seen.append((kind, ctx.batch))

    with conn.transaction():
        batch = app.create_batch(
            conn,
            on_success=done.job(kind="success"),
            on_complete=done.job(kind="complete"),
            on_discard=done.job(kind="discard"),
        )
        first = batch.add(conn, member.job(fail=False), member.job(fail=True))
    second = app.batch(batch.id).add(conn, member.job(fail=False))  # added over time
    async with running_worker(app, concurrency=4):
        await async_wait_until(lambda: all(state_of(conn, j) in FINAL for j in [*first, *second]), timeout=30)
        assert callbacks_of(conn, batch.id) == []  # not closed yet: nothing fires
        batch.close(conn)
        await async_wait_until(lambda: len(seen) == 2, timeout=30)
    assert sorted(k for k, _ in seen) == ["complete", "discard"]
    info = seen[0][1]
    assert info == pgqueue.BatchInfo(batch.id, 3, 2, 1, 0)
    assert callbacks_of(conn, batch.id) == [("b.done", "completed"), ("b.done", "completed")]
    row = batch_row(conn, batch.id)
    assert row[1:7] == (3, 2, 1, 0, 0, True)
    # Closing again fires nothing more; a closed batch takes no member.
    batch.close(conn)
    assert len(callbacks_of(conn, batch.id)) == 2
    with pytest.raises(WorkflowError, match="closed"):
        batch.add(conn, member.job(fail=False))


async def test_success_fires_at_the_last_completion(app: pgqueue.App, conn: Conn) -> None:
    @app.task(name="b.ok")
    async def ok(n: int) -> int:
        await asyncio.sleep(0)
        return n

    @app.task(name="b.cb")
    def cb(kind: str) -> None: ...

    batch = app.create_batch(conn, on_success=cb.job(kind="s"), on_discard=cb.job(kind="d"))
    batch.add(conn, *(ok.job(n=i) for i in range(20)))
    batch.close(conn)
    async with running_worker(app, concurrency=8):
        await async_wait_until(lambda: callbacks_of(conn, batch.id) == [("b.cb", "completed")], timeout=30)
    args = conn.execute(
        "SELECT j.args FROM pgqueue.batches AS b JOIN pgqueue.jobs AS j ON j.id = ANY(b.callback_ids) WHERE b.id = %s",
        [batch.id],
    ).fetchall()
    assert args == [({"kind": "s"},)]


def test_empty_batch_fires_at_close_and_rollback_leaves_nothing(app: pgqueue.App, conn: Conn) -> None:
    @app.task(name="b.e")
    def e() -> None: ...

    def create_then_fail() -> None:
        with conn.transaction():
            b = app.create_batch(conn, on_complete=e.job())
            b.add(conn, e.job(), e.job())
            b.close(conn)
            raise RuntimeError("roll back")

    with pytest.raises(RuntimeError):
        create_then_fail()
    assert conn.execute("SELECT count(*) FROM pgqueue.batches").fetchone() == (0,)
    assert conn.execute("SELECT count(*) FROM pgqueue.jobs").fetchone() == (0,)
    empty = app.create_batch(conn, on_complete=e.job())
    empty.close(conn)
    assert callbacks_of(conn, empty.id) == [("b.e", "available")]
    with pytest.raises(WorkflowError, match="no batch with id 4242"):
        app.batch(4242).close(conn)
    with pytest.raises(WorkflowError, match="does not exist or is closed"):
        app.batch(4242).add(conn, e.job())


def test_cancel_batch_cancels_members_and_fires_on_discard(app: pgqueue.App, conn: Conn, dsn: str) -> None:
    @app.task(name="b.c")
    def c() -> None: ...

    batch = app.create_batch(conn, on_discard=c.job())
    members = batch.add(conn, c.job(), c.job(), c.job())
    assert ops.cancel_batch(conn, "pgqueue", batch.id) == 3
    assert [state_of(conn, m) for m in members] == ["cancelled"] * 3
    assert callbacks_of(conn, batch.id) == [("b.c", "available")]
    assert batch_row(conn, batch.id)[1:7] == (3, 0, 0, 3, 0, True)
    assert ops.job_relations(conn, "pgqueue", members[0]).batch_id == batch.id
    shown = invoke("jobs", "show", str(members[0]), "--dsn", dsn)
    assert any(line.split()[1:3] == ["batch", str(batch.id)] for line in shown.output.splitlines() if line.split())
    progress = invoke("batches", "show", str(batch.id), "--dsn", dsn)
    assert f"batch {batch.id}: 3 members, 0 completed, 0 discarded, 3 cancelled, 0 pending" in progress.output


async def test_async_twins(app: pgqueue.App, conn: Conn, dsn: str) -> None:
    @app.task(name="b.a")
    def a() -> None: ...

    async with await psycopg.AsyncConnection.connect(dsn) as aconn:
        batch = await app.create_batch_async(aconn, on_complete=a.job())
        members = await batch.add_async(aconn, a.job(), a.job())
        graph = await app.chain(a.job(), a.job()).enqueue_async(aconn)
        await batch.close_async(aconn)
        await aconn.commit()
    assert [state_of(conn, m) for m in members] == ["available", "available"]
    assert [state_of(conn, g) for g in graph] == ["available", "scheduled"]
    assert batch_row(conn, batch.id)[1] == 2
