"""The chaos suite's worker app: ``pgqueue work tests.chaos.app:app``.

Every handler writes one row per run to ``chaos_runs`` (job id, attempt, lease token,
worker, pid, start and end on the database clock) through its own direct connection
(``$PGQUEUE_CHAOS_LEDGER_DSN``), so network faults injected between the worker and the
database do not hide what ran. The transactional tasks also write an effect row through
``ctx.conn``: it commits with the job's completion, so it must exist exactly once.

Some handlers misbehave on their first attempt on purpose: they hang past their timeout,
allocate a lot of memory and then ask for more than exists, or kill their own process.
"""

from __future__ import annotations

import asyncio
import os
import threading
import time
from typing import Any

import psycopg

import pgqueue
from pgqueue._wake import MAX_WINDOW

__all__ = ["MAX_ATTEMPTS", "app", "create_tables"]

# The worker's DSN comes from --dsn. The producer's bursts use the largest NOTIFY window:
# its quiet jobs rely on the workers' echoes (or polls), under every fault.
app = pgqueue.App(notify_window=MAX_WINDOW)
MAX_ATTEMPTS = 8
FAIL_ATTEMPTS = 3
RETRY = pgqueue.Backoff(base=0.2, cap=2.0)
HOG_BYTES = 256 << 20

_local = threading.local()


def create_tables(conn: psycopg.Connection[Any]) -> None:
    conn.execute(
        "CREATE TABLE IF NOT EXISTS chaos_runs ("
        " token uuid PRIMARY KEY, job_id bigint NOT NULL, attempt int NOT NULL, kind text NOT NULL,"
        " worker text NOT NULL, pid int NOT NULL,"
        " started_at timestamptz NOT NULL DEFAULT clock_timestamp(), ended_at timestamptz, result text,"
        " claimed_at timestamptz, ckey text)"
    )
    conn.execute("CREATE INDEX IF NOT EXISTS chaos_runs_job ON chaos_runs (job_id)")
    conn.execute("CREATE TABLE IF NOT EXISTS chaos_effects (job_id bigint NOT NULL, attempt int NOT NULL, token uuid)")


def _ledger(statement: str, params: list[Any]) -> None:
    """Run one ledger statement on this thread's direct connection, riding out restarts.

    Statements are idempotent (keyed by lease token), so a retry after an ambiguous
    commit is harmless.
    """
    deadline = time.monotonic() + 120
    backoff = 0.05
    while True:
        conn: psycopg.Connection[Any] | None = getattr(_local, "conn", None)
        try:
            if conn is None or conn.closed:
                conn = psycopg.connect(os.environ["PGQUEUE_CHAOS_LEDGER_DSN"], autocommit=True, connect_timeout=5)
                _local.conn = conn
            conn.execute(statement, params)
            return
        except psycopg.OperationalError:
            if conn is not None:
                conn.close()
            if time.monotonic() > deadline:
                raise
            time.sleep(backoff)
            backoff = min(backoff * 2, 2.0)


def _start(ctx: pgqueue.JobContext, kind: str) -> None:
    """A run begins: with the claim's own clock reading (the row's started_at, while this
    lease holds it) and the job's concurrency key, for the limits checker."""
    job = ctx.job
    _ledger(
        "INSERT INTO chaos_runs (token, job_id, attempt, kind, worker, pid, claimed_at, ckey)"
        " VALUES (%s, %s, %s, %s, %s, %s,"
        "  (SELECT started_at FROM pgqueue.jobs_live WHERE id = %s AND lease_token = %s),"
        "  (SELECT concurrency_key FROM pgqueue.jobs WHERE id = %s))"
        " ON CONFLICT (token) DO NOTHING",
        [job.lease_token, job.id, job.attempt, kind, ctx.worker_id, os.getpid(), job.id, job.lease_token, job.id],
    )


def _end(ctx: pgqueue.JobContext, result: str = "ok") -> None:
    _ledger(
        "UPDATE chaos_runs SET ended_at = clock_timestamp(), result = %s WHERE token = %s AND ended_at IS NULL",
        [result, ctx.job.lease_token],
    )


@app.task(name="chaos.ok", max_attempts=MAX_ATTEMPTS, retry=RETRY, pass_context=True)
def ok(ctx: pgqueue.JobContext, tag: str, ms: int = 0) -> None:
    _start(ctx, "ok")
    time.sleep(ms / 1000)
    _end(ctx)


@app.task(name="chaos.ok_async", max_attempts=MAX_ATTEMPTS, retry=RETRY, pass_context=True)
async def ok_async(ctx: pgqueue.JobContext, tag: str, ms: int = 0) -> None:
    await asyncio.to_thread(_start, ctx, "ok_async")
    await asyncio.sleep(ms / 1000)
    await asyncio.to_thread(_end, ctx)


@app.task(name="chaos.tx", max_attempts=MAX_ATTEMPTS, retry=RETRY, transactional=True)
def tx(ctx: pgqueue.JobContext, tag: str, ms: int = 0) -> None:
    _start(ctx, "tx")
    ctx.conn.execute(
        "INSERT INTO chaos_effects (job_id, attempt, token) VALUES (%s, %s, %s)",
        [ctx.job.id, ctx.job.attempt, ctx.job.lease_token],
    )
    time.sleep(ms / 1000)
    _end(ctx)


@app.task(name="chaos.tx_async", max_attempts=MAX_ATTEMPTS, retry=RETRY, transactional=True)
async def tx_async(ctx: pgqueue.JobContext, tag: str, ms: int = 0) -> None:
    await asyncio.to_thread(_start, ctx, "tx_async")
    await ctx.conn.execute(
        "INSERT INTO chaos_effects (job_id, attempt, token) VALUES (%s, %s, %s)",
        [ctx.job.id, ctx.job.attempt, ctx.job.lease_token],
    )
    await asyncio.sleep(ms / 1000)
    await asyncio.to_thread(_end, ctx)


@app.task(name="chaos.hang", max_attempts=MAX_ATTEMPTS, retry=RETRY, timeout=1.0, pass_context=True)
async def hang(ctx: pgqueue.JobContext, tag: str, ms: int = 0) -> None:
    """First attempt hangs until its timeout cancels it."""
    await asyncio.to_thread(_start, ctx, "hang")
    if ctx.job.attempt == 1:
        await asyncio.sleep(3600)
    await asyncio.to_thread(_end, ctx)


@app.task(name="chaos.hang_sync", max_attempts=MAX_ATTEMPTS, retry=RETRY, timeout=1.0, pass_context=True)
def hang_sync(ctx: pgqueue.JobContext, tag: str, ms: int = 0) -> None:
    """First attempt outlives its timeout in a thread nobody can interrupt."""
    _start(ctx, "hang_sync")
    if ctx.job.attempt == 1:
        time.sleep(2.5)
        _end(ctx, "late")
        return
    _end(ctx)


@app.task(name="chaos.hog", max_attempts=MAX_ATTEMPTS, retry=RETRY, pass_context=True)
def hog(ctx: pgqueue.JobContext, tag: str, ms: int = 0) -> None:
    """First attempt fills a few hundred MB, then asks for more memory than exists."""
    _start(ctx, "hog")
    if ctx.job.attempt == 1:
        ballast = b"x" * HOG_BYTES  # really touched, not just reserved
        try:
            bytearray(1 << 62)  # MemoryError
        finally:
            del ballast
    _end(ctx)


@app.task(name="chaos.exit", max_attempts=MAX_ATTEMPTS, retry=RETRY, pass_context=True)
def exit_(ctx: pgqueue.JobContext, tag: str, ms: int = 0) -> None:
    """First attempt kills its worker process outright."""
    _start(ctx, "exit")
    if ctx.job.attempt == 1:
        os._exit(70)
    _end(ctx)


@app.task(name="chaos.fail", max_attempts=FAIL_ATTEMPTS, retry=RETRY, pass_context=True)
def fail(ctx: pgqueue.JobContext, tag: str, ms: int = 0) -> None:
    """Always fails: must end discarded after exactly its attempts."""
    _start(ctx, "fail")
    _end(ctx, "raised")
    raise RuntimeError("chaos: this task always fails")
