"""A test app for the lifecycle of ``pgqueue work`` (signals, start-up).

``hold`` records its start in the ``ledger`` table, then runs until the test opens the
gate (a row in ``gates``), so a test decides when in-flight jobs may finish. With
``$LIFECYCLE_IMPORT_GATE`` set to a directory, a *worker process* of a supervisor (not the
supervisor itself) announces that it is importing this module, then waits for the file
``open`` there: a test can act while the worker processes are still starting.
"""

from __future__ import annotations

import multiprocessing
import os
import time
from pathlib import Path

import psycopg

import pgqueue

GATE_TIMEOUT = 120.0  # a test that forgot to open a gate fails instead of hanging

_import_gate = os.environ.get("LIFECYCLE_IMPORT_GATE")
if _import_gate and multiprocessing.parent_process() is not None:
    Path(_import_gate, f"importing-{os.getpid()}").touch()
    _deadline = time.monotonic() + GATE_TIMEOUT
    while not Path(_import_gate, "open").exists() and time.monotonic() < _deadline:
        time.sleep(0.02)

app = pgqueue.App()  # the DSN comes from --dsn / PGQUEUE_DSN


def _ledger(conn: psycopg.Connection[object], key: str, event: str) -> None:
    conn.execute("INSERT INTO ledger (job_key, event, pid) VALUES (%s, %s, %s)", [key, event, os.getpid()])


@app.task(name="hold", max_attempts=3)
def hold(key: str) -> None:
    with psycopg.connect(app.dsn, autocommit=True) as conn:
        _ledger(conn, key, "start")
        deadline = time.monotonic() + GATE_TIMEOUT
        while conn.execute("SELECT 1 FROM gates WHERE name = 'jobs'").fetchone() is None:
            if time.monotonic() > deadline:
                raise TimeoutError("the test never opened the gate")
            time.sleep(0.05)
        _ledger(conn, key, "done")
