"""The fetch loop: claims batches sized to free capacity and hands them to the executor.

* A claim takes at most ``min(free capacity, fetch_batch)`` jobs (:mod:`.capacity`). One
  that came back full means more is waiting: the loop claims again at once while capacity
  lasts, and again as soon as half of it frees up. A partial claim means the queues are
  drained: the loop sleeps until a wake-up (NOTIFY, free capacity, stop) or the poll
  interval, the safety net (longer while the listener is connected).
* Buffered outcomes ride along with the claim (one round trip, one commit for both; see
  the completer).
* A claim that fails (database unreachable, a finished-job partition missing) gives its
  outcomes back to the completer and is retried with backoff.
* Once stopping, nothing new is claimed; jobs claimed by a claim in flight when the stop
  came are released at once, their attempt not counted.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Mapping, Sequence

from .._db.conn import RECONNECT_BACKOFF, TRANSIENT, brief, within
from .._db.errors import PartitionMissingError
from .._db.jobs import JobsDB
from ..config import WorkerConfig
from ..models import Job
from ..retry import Retries
from .capacity import Capacity
from .claim_cursor import ClaimCursors
from .completer import Batch, Completer
from .connections import Connections
from .executor import Executor
from .stats import Report

__all__ = ["Fetcher"]

log = logging.getLogger("pgqueue.worker")

#: A claim failing with these is tried again: the database is unreachable, or a buffered
#: outcome's partition is missing (the completer creates it on its next write).
_CLAIM_RETRIED: tuple[type[BaseException], ...] = (*TRANSIENT, PartitionMissingError)


class Fetcher:
    def __init__(
        self,
        *,
        db: JobsDB,
        connections: Connections,
        config: WorkerConfig,
        worker_id: str,
        queues: Sequence[str],
        task_limits: Mapping[str, int],
        capacity: Capacity,
        executor: Executor,
        completer: Completer,
        cursors: ClaimCursors,
        report: Report,
        stopping: asyncio.Event,
        listening: Callable[[], bool],
    ) -> None:
        self.db = db
        self.connections = connections
        self.config = config
        self.worker_id = worker_id
        self.queues = queues
        #: Tasks this process runs, with their max_attempts (a job enqueued without one
        #: gets its task's at claim); jobs of other tasks are left to other workers.
        self.task_limits = task_limits
        self.capacity = capacity
        self.executor = executor
        self.completer = completer
        self.cursors = cursors
        self.report = report
        self.stopping = stopping
        self.listening = listening
        self._retries = Retries(RECONNECT_BACKOFF)

    @property
    def wake_pending(self) -> bool:
        """A wake-up came that the loop has not acted on yet (a test signal)."""
        return self.capacity.wake.is_set()

    async def run(self) -> None:
        """Claim until stopped."""
        cfg = self.config
        capacity = self.capacity
        while not self.stopping.is_set():
            capacity.wake.clear()
            free = capacity.free()
            if free <= 0:
                capacity.backlog = True
            elif self.task_limits:
                limit = min(free, cfg.fetch_batch)
                jobs = await self._claim(limit)
                if jobs is None:
                    continue  # failed (and waited), or stopping
                if self.stopping.is_set() and jobs:
                    await self._release_unstarted(jobs)
                    break
                self.report.claimed(jobs)
                for job in jobs:
                    self.executor.start(job)
                capacity.backlog = len(jobs) == limit
                if capacity.backlog and capacity.free() > 0:
                    continue  # more is waiting and we have room: claim again now
            await self._wait()

    async def _claim(self, limit: int) -> list[Job] | None:
        """One claim with the buffered outcomes; None when nothing was claimed because it
        failed (after waiting out the backoff) or a stop came first."""
        cfg = self.config
        batch: Batch = []
        try:
            async with self.connections.connection() as conn:
                if self.stopping.is_set():
                    return None  # stop() came while we waited for a connection
                batch = self.completer.take()
                began = time.monotonic()
                after = self.cursors.after(began)
                jobs, written = await within(
                    cfg.lease,  # a claim answered after its lease is worthless anyway
                    self.db.claim(
                        conn,
                        queues=self.queues,
                        task_limits=self.task_limits,
                        limit=limit,
                        lease=cfg.lease,
                        worker_id=self.worker_id,
                        outcomes=[(j.id, j.lease_token, o) for j, o in batch],
                        after=after,
                    ),
                    "claim",
                )
        except _CLAIM_RETRIED as exc:
            if batch:
                self.completer.give_back(batch)  # the completer retries (and repairs partitions)
            delay = self._retries.next()
            log.warning("claim failed (%s); retrying in %.2fs", brief(exc), delay)
            await self._sleep_unless_stopping(delay)
            return None
        done = time.monotonic()
        self.cursors.observe(jobs, from_head=not after, elapsed=done - began, now=done)
        self._retries.reset()
        if batch:
            self.completer.acknowledge(batch, written)
        return jobs

    async def _wait(self) -> None:
        self.report.stats.fetcher_waiting = True
        try:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.capacity.wake.wait(), self._poll_timeout())
        finally:
            self.report.stats.fetcher_waiting = False

    def _poll_timeout(self) -> float:
        cfg = self.config
        if self.listening():
            return max(cfg.poll_interval, cfg.poll_interval_listening)
        return cfg.poll_interval

    async def _release_unstarted(self, jobs: list[Job]) -> None:
        try:
            async with self.connections.connection() as conn:
                self.report.stats.released += await within(
                    self.config.lease, self.db.release(conn, {j.id: j.lease_token for j in jobs}), "release"
                )
        except TRANSIENT as exc:
            log.error("could not release %d jobs claimed during stop (%s); the rescuer will", len(jobs), brief(exc))

    async def _sleep_unless_stopping(self, seconds: float) -> None:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.stopping.wait(), seconds)
