"""A test app whose handler kills its worker process on every attempt (recovery tests).

Each attempt is recorded in the ``ledger`` table (created by the tests) before the crash.
"""

from __future__ import annotations

import os

import psycopg

import pgqueue

app = pgqueue.App()  # the DSN comes from --dsn / PGQUEUE_DSN


@app.task(name="crash", max_attempts=2)
def crash(key: str) -> None:
    with psycopg.connect(app.dsn, autocommit=True) as conn:
        conn.execute("INSERT INTO ledger (job_key, event, pid) VALUES (%s, 'start', %s)", [key, os.getpid()])
    os._exit(23)  # the worker dies mid-job, every time
