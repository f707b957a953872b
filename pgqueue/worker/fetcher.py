"""The fetch loop: claims batches sized to free capacity and hands them to the executor.

* A claim takes at most ``min(free capacity, fetch_batch)`` jobs, and at most each queue's
  free slots where queues have slots of their own (:mod:`.capacity`). One that came back
  full means more is waiting: the loop claims again at once while capacity lasts, and
  again as soon as half of it frees up. A partial claim means the queues are drained (or
  held back by limits): the loop sleeps until a wake-up (NOTIFY, free capacity, a slot of
  a held-back queue, a rate window opening, stop) or the poll interval, the safety net
  (longer while the listener is connected).
* Flow control (:mod:`.flow`): while any of this process's queues is controlled or any of
  its tasks limited, claims take the limited path; the view is re-read when an operator
  changes a control, and at least every heartbeat interval.
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
import uuid
from collections.abc import Callable, Mapping, Sequence

from .._db.conn import RECONNECT_BACKOFF, TRANSIENT, AConn, brief, within
from .._db.errors import PartitionMissingError
from .._db.jobs import ClaimHint, JobsDB
from ..config import WorkerConfig
from ..models import Job, Outcome
from ..retry import Retries
from .capacity import Capacity
from .claim_cursor import ClaimCursors
from .completer import Batch, Completer
from .connections import Connections
from .executor import Executor
from .flow import FlowControl
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
        flow: FlowControl,
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
        self.flow = flow
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
                before = capacity.free_by_queue() if capacity.pooled else None
                if before is not None and max(before.values(), default=0) <= 0:
                    capacity.backlog = True  # every queue's own slots are taken
                    await self._wait()
                    continue
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
                if before is not None:
                    capacity.observe_claim(before, jobs, limit)
                if capacity.backlog and capacity.free() > 0:
                    continue  # more is waiting and we have room: claim again now
            await self._wait()

    async def _claim(self, limit: int) -> list[Job] | None:
        """One claim with the buffered outcomes; None when nothing was claimed because it
        failed (after waiting out the backoff) or a stop came first."""
        batch: Batch = []
        try:
            async with self.connections.connection() as conn:
                if self.stopping.is_set():
                    return None  # stop() came while we waited for a connection
                began = time.monotonic()
                await self.flow.refresh_if_due(conn, began)
                batch = self.completer.take()
                outcomes = [(j.id, j.lease_token, o) for j, o in batch]
                if self.flow.limited:
                    jobs, written = await self._claim_limited(conn, limit, outcomes)
                else:
                    jobs, written = await self._claim_plain(conn, limit, outcomes, began)
        except _CLAIM_RETRIED as exc:
            if batch:
                self.completer.give_back(batch)  # the completer retries (and repairs partitions)
            delay = self._retries.next()
            log.warning("claim failed (%s); retrying in %.2fs", brief(exc), delay)
            await self._sleep_unless_stopping(delay)
            return None
        self._retries.reset()
        if batch:
            self.completer.acknowledge(batch, written)
        return jobs

    async def _claim_plain(
        self, conn: AConn, limit: int, outcomes: list[tuple[int, uuid.UUID, Outcome]], began: float
    ) -> tuple[list[Job], set[int]]:
        cfg = self.config
        after = self.cursors.after(began)
        queue_limits = self.capacity.free_by_queue() if self.capacity.pooled else None
        queues = self.queues
        if queue_limits is not None:
            queues = [q for q in queues if queue_limits[q] > 0]
            if len(queues) == 1:
                limit = min(limit, queue_limits[queues[0]])
        jobs, written = await within(
            cfg.lease,  # a claim answered after its lease is worthless anyway
            self.db.claim(
                conn,
                queues=queues,
                task_limits=self.task_limits,
                limit=limit,
                lease=cfg.lease,
                worker_id=self.worker_id,
                outcomes=outcomes,
                after=after,
                queue_limits=queue_limits,
            ),
            "claim",
        )
        done = time.monotonic()
        self.cursors.observe(jobs, from_head=not after, elapsed=done - began, now=done)
        return jobs, written

    async def _claim_limited(
        self, conn: AConn, limit: int, outcomes: list[tuple[int, uuid.UUID, Outcome]]
    ) -> tuple[list[Job], set[int]]:
        cfg = self.config
        free = self.capacity.free_by_queue()
        hints: list[ClaimHint]
        jobs, hints, written = await within(
            cfg.lease,
            self.db.claim_limited(
                conn,
                queues=self.flow.queue_order(),
                queue_limits=free,
                task_limits=self.task_limits,
                limit=limit,
                lease=cfg.lease,
                worker_id=self.worker_id,
                key_cursors=self.flow.key_cursors,
                unkeyed=self.flow.unkeyed(time.monotonic()),
                outcomes=outcomes,
            ),
            "claim",
        )
        self.flow.observe(hints, time.monotonic())
        self.capacity.blocked = set(self.flow.blocked)
        return jobs, written

    async def _wait(self) -> None:
        self.report.stats.fetcher_waiting = True
        try:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.capacity.wake.wait(), self._poll_timeout())
        finally:
            self.report.stats.fetcher_waiting = False

    def _poll_timeout(self) -> float:
        cfg = self.config
        timeout = max(cfg.poll_interval, cfg.poll_interval_listening) if self.listening() else cfg.poll_interval
        if self.flow.wake_at is not None:  # a rate window frees a start then
            timeout = min(timeout, max(self.flow.wake_at - time.monotonic(), 0.0))
        return timeout

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
