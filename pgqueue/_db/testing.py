"""The statements of :mod:`pgqueue.testing`: claiming one job in the test's process,
reading waiting jobs, moving the test clock, cloning test databases. Blocking
connections only: tests call these from plain functions."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from ..models import Job
from .conn import Conn
from .sql import queries_for, validate_schema

__all__ = ["TestingDB", "WaitingJob", "clone_database", "drop_database"]


@dataclass(frozen=True, slots=True)
class WaitingJob:
    """A job waiting to run (available, scheduled or retryable), as tests see it."""

    __test__ = False  # not a pytest test class

    id: int
    task: str
    queue: str
    args: dict[str, Any]
    state: str
    priority: int
    run_at: datetime
    attempt: int
    max_attempts: int | None
    unique_key: str | None


class TestingDB:
    __test__ = False

    def __init__(self, schema: str) -> None:
        self.schema = validate_schema(schema)
        self.q = queries_for(schema)

    @staticmethod
    def _task_params(tasks: Mapping[str, int]) -> dict[str, Any]:
        return {"tasks": list(tasks), "task_max_attempts": list(tasks.values())}

    def claim_next(
        self, conn: Conn, *, queues: Sequence[str] | None, tasks: Mapping[str, int], lease: float, worker_id: str
    ) -> Job | None:
        """Claim the next due job of ``queues`` (None: all) whose task is in ``tasks``
        (name -> default max_attempts)."""
        params = {"queues": None if queues is None else list(queues), "lease": lease, "worker_id": worker_id}
        row = conn.execute(self.q["testing_claim_next"], {**params, **self._task_params(tasks)}).fetchone()
        return None if row is None else Job(*row)

    def claim_job(
        self, conn: Conn, job_id: int, *, tasks: Mapping[str, int], lease: float, worker_id: str
    ) -> Job | None:
        """Claim job ``job_id`` whatever its timer; None when it is not waiting (or does
        not exist: its transaction rolled back)."""
        params = {"id": job_id, "lease": lease, "worker_id": worker_id, **self._task_params(tasks)}
        row = conn.execute(self.q["testing_claim_job"], params).fetchone()
        return None if row is None else Job(*row)

    def waiting_jobs(self, conn: Conn, *, task: str | None, queue: str | None) -> list[WaitingJob]:
        params = {"task": task, "queue": queue}
        return [WaitingJob(*row) for row in conn.execute(self.q["testing_waiting_jobs"], params).fetchall()]

    def next_timer(self, conn: Conn, *, queues: Sequence[str] | None, tasks: Mapping[str, int]) -> float | None:
        """Seconds until the first waiting job of ``queues`` is due (None: none waits)."""
        params = {"queues": None if queues is None else list(queues), **self._task_params(tasks)}
        row = conn.execute(self.q["testing_next_timer"], params).fetchone()
        return None if row is None or row[0] is None else float(row[0])

    def advance(self, conn: Conn, seconds: float, *, queues: Sequence[str] | None) -> int:
        """Move the waiting jobs' timers ``seconds`` earlier; returns how many became due."""
        params = {"seconds": seconds, "queues": None if queues is None else list(queues)}
        row = conn.execute(self.q["testing_advance"], params).fetchone()
        return 0 if row is None else int(row[0])


def clone_database(conn: Conn, name: str, template: str) -> None:
    """``CREATE DATABASE name TEMPLATE template`` (``conn`` in autocommit)."""
    conn.execute(queries_for("pgqueue").compose("testing_create_database", {"name": name, "template": template}))


def drop_database(conn: Conn, name: str) -> None:
    """Drop database ``name`` if it exists, ending its sessions (``conn`` in autocommit)."""
    conn.execute(queries_for("pgqueue").compose("testing_drop_database", {"name": name}))
