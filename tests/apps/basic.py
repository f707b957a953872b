"""A small app for CLI and subprocess tests. Handlers record their runs in a ledger table
(created by the tests) so the test process can observe what ran, and when."""

from __future__ import annotations

import os
import time
from typing import Any

import psycopg

import pgqueue

app = pgqueue.App()  # the DSN comes from --dsn / PGQUEUE_DSN


def _ledger(job_key: str, event: str) -> None:
    with psycopg.connect(app.dsn, autocommit=True) as conn:
        conn.execute("INSERT INTO ledger (job_key, event, pid) VALUES (%s, %s, %s)", [job_key, event, os.getpid()])


@app.task(name="record")
def record(key: str) -> None:
    _ledger(key, "done")


@app.task(name="slow", max_attempts=5)
def slow(key: str, seconds: float) -> None:
    _ledger(key, "start")
    time.sleep(seconds)
    _ledger(key, "done")


@app.task(name="tx_record", transactional=True, max_attempts=5)
def tx_record(ctx: pgqueue.JobContext, key: str, die_first: bool = False) -> None:
    conn: psycopg.Connection[Any] = ctx.conn
    conn.execute("INSERT INTO effects (job_key, attempt) VALUES (%s, %s)", [key, ctx.job.attempt])
    if die_first and ctx.job.attempt == 1:
        os._exit(17)  # crash after writing, before the transaction commits
