"""A worker's presence in the database, and what its heartbeat brings back.

* :class:`Registry` upserts the worker's row in ``worker_registry`` at start and at every
  heartbeat (one statement; riding in the same round trip as the lease extension when
  jobs are held), and deletes it on a graceful stop. Rows of workers that died without
  stopping expire (``workers.alive`` turns false after 3 heartbeat intervals) and are
  removed by maintenance.
* :class:`CancelFlags` tracks operator cancel requests (``cancel_job()``) for running
  jobs, which the lease heartbeat reports. An async handler is cancelled at once; a sync
  handler sees ``ctx.cancel_requested`` / ``ctx.check_cancelled()``. Either way the
  attempt ends ``cancelled`` unless the handler completed anyway.
"""

from __future__ import annotations

import asyncio
import os
import socket
import uuid
from collections.abc import Mapping, Sequence
from typing import Any

import psycopg
import psycopg_pool

from .._db.jobs import JobsDB, Outcome
from .._version import __version__
from ..config import WorkerConfig
from ..errors import Cancel
from ..models import CancelFlag, Job, JobState
from .executor import error_record

__all__ = ["DEAD_WORKER_GRACE", "CancelFlags", "Registry", "operator_cancel_outcome"]

AConn = psycopg.AsyncConnection[Any]

#: A registration expired for this long (seconds) is removed by maintenance.
DEAD_WORKER_GRACE = 300.0
#: A worker counts as alive for this many heartbeat intervals after its last heartbeat.
ALIVE_INTERVALS = 3


class Registry:
    def __init__(self, db: JobsDB, worker_id: str, queues: Sequence[str], config: WorkerConfig) -> None:
        self.db = db
        self.worker_id = worker_id
        self._static: dict[str, Any] = {
            "worker_id": worker_id,
            "host": socket.gethostname(),
            "pid": os.getpid(),
            "queues": list(queues),
            "concurrency": config.concurrency,
            "ttl": ALIVE_INTERVALS * config.heartbeat_interval,
            "version": __version__,
        }

    async def beat(
        self,
        conn: AConn,
        held: Mapping[int, uuid.UUID],
        lease: float,
        *,
        in_flight: int,
        listener_connected: bool,
    ) -> dict[int, bool]:
        """Refresh the registration and extend ``held`` leases in one round trip.

        Returns the ids whose lease was extended, each mapped to whether an operator asked
        that job to stop.
        """
        params = {**self._static, "in_flight": in_flight, "listener_connected": listener_connected}
        if not held:
            await self.db.register(conn, params)
            return {}
        return await self.db.register_and_extend_leases(conn, params, held, lease)

    async def deregister(self, pool: psycopg_pool.AsyncConnectionPool) -> None:
        async with pool.connection() as conn:
            await self.db.deregister(conn, self.worker_id)


def operator_cancel_outcome(job: Job, worker_id: str) -> Outcome:
    """The outcome of an attempt stopped because an operator cancelled the job."""
    return Outcome(JobState.CANCELLED, error=error_record(Cancel("cancelled by an operator"), job, worker_id))


class CancelFlags:
    """One flag per running job; set when the heartbeat reports a cancel request."""

    def __init__(self) -> None:
        self._flags: dict[int, tuple[CancelFlag, bool]] = {}

    def open(self, job_id: int, *, interruptible: bool) -> CancelFlag:
        """A fresh flag for an attempt; ``interruptible``: its asyncio task may be cancelled
        (async handlers; a sync handler's thread cannot be interrupted)."""
        flag = CancelFlag()
        self._flags[job_id] = (flag, interruptible)
        return flag

    def close(self, job_id: int, flag: CancelFlag) -> None:
        """Drop an attempt's flag (not a newer attempt's of the same job)."""
        entry = self._flags.get(job_id)
        if entry is not None and entry[0] is flag:
            del self._flags[job_id]

    def request(self, job_ids: Mapping[int, bool]) -> list[int]:
        """Set the flags of the jobs whose heartbeat answer says cancel; returns the ids
        whose asyncio task should be cancelled now (newly flagged, interruptible)."""
        to_cancel: list[int] = []
        for job_id, wanted in job_ids.items():
            entry = self._flags.get(job_id)
            if not wanted or entry is None or entry[0].is_set():
                continue
            entry[0].set()
            if entry[1]:
                to_cancel.append(job_id)
        return to_cancel

    def requested(self, job_id: int) -> bool:
        entry = self._flags.get(job_id)
        return entry is not None and entry[0].is_set()

    def absorbs(self, job_id: int, exc: BaseException) -> bool:
        """True when ``exc`` is the cancellation we caused for an operator cancel (and no
        other cancellation, such as shutdown, is pending): the attempt then ends as
        ``cancelled`` instead of propagating."""
        if not isinstance(exc, asyncio.CancelledError) or not self.requested(job_id):
            return False
        current = asyncio.current_task()
        return current is not None and current.uncancel() == 0

    def adjust(self, job_id: int, outcome: Outcome | None) -> Outcome | None:
        """A failed attempt of a job an operator cancelled ends ``cancelled``, not retried;
        a completed one stays completed (the work was done)."""
        if outcome is None or not self.requested(job_id):
            return outcome
        if outcome.state in (JobState.RETRYABLE, JobState.DISCARDED):
            return Outcome(JobState.CANCELLED, error=outcome.error)
        return outcome

    def cancelled_outcome(self, job: Job, worker_id: str) -> Outcome:
        return operator_cancel_outcome(job, worker_id)
