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
* Prefetch (:mod:`.prefetch`): for short jobs a claim also takes up to a target number of
  jobs beyond the free slots, which the executor buffers and starts as slots free up; the
  loop claims again when the buffer ran down to half its target. Never where a buffered
  job would hold something back: queues with slots of their own, global concurrency
  limits on a queue or task, transactional handlers. Buffered jobs whose lease ran short are released here.
* Once stopping, nothing new is claimed; jobs claimed by a claim in flight when the stop
  came are released at once, their attempt not counted.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Callable, Mapping, Sequence

from .._db.conn import RECONNECT_BACKOFF, TRANSIENT, AConn, brief, within
from .._db.errors import PartitionMissingError
from .._db.jobs import ClaimHint, JobsDB
from .._tasks import wait_set
from ..config import WorkerConfig
from ..models import Job, Outcome
from ..retry import Retries
from .capacity import Capacity
from .claim_cursor import ClaimCursors
from .completer import Batch, Completer
from .connections import Connections
from .executor import Executor
from .flow import FlowControl
from .prefetch import Prefetch
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
        prefetch: Prefetch,
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
        self.prefetch = prefetch
        self._transactional = any(t.transactional for t in executor.tasks.values())
        # A buffered job starts by its claim + this; the rest of its lease covers the time
        # until the first heartbeat after it started, with a tenth of the lease to spare.
        self._buffer_window = config.lease - config.heartbeat_interval - config.lease / 10

    @property
    def wake_pending(self) -> bool:
        """A wake-up came that the loop has not acted on yet (a test signal)."""
        return self.capacity.wake.is_set()

    async def run(self) -> None:
        """Claim until stopped."""
        cfg = self.config
        capacity = self.capacity
        executor = self.executor
        while not self.stopping.is_set():
            capacity.wake.clear()
            expired = executor.take_expired()
            if expired:
                await self.release_unstarted(expired, "whose lease ran short in the buffer")
            executor.fill()
            capacity.prefetch = self._prefetch_target()
            limit = capacity.claimable(cfg.fetch_batch)
            if limit <= 0:
                capacity.backlog = True
            elif self.task_limits:
                before = capacity.free_by_queue() if capacity.pooled else None
                if before is not None and max(before.values(), default=0) <= 0:
                    capacity.backlog = True  # every queue's own slots are taken
                    await self._wait()
                    continue
                claimed_at = time.monotonic()
                jobs = await self._claim(limit)
                if jobs is None:
                    continue  # failed (and waited), or stopping
                if self.stopping.is_set() and jobs:
                    await self.release_unstarted(jobs, "claimed during stop")
                    break
                self.prefetch.observe_claim(time.monotonic() - claimed_at)
                self.report.claimed(jobs)
                # A buffered job must start while enough of its lease is left for the
                # heartbeat to reach it (the database's clock started it after claimed_at).
                executor.submit(jobs, claimed_at, claimed_at + self._buffer_window)
                capacity.backlog = len(jobs) == limit
                if before is not None:
                    capacity.observe_claim(before, jobs, limit)
                if capacity.backlog and capacity.refill_due():
                    continue  # more is waiting and we have room: claim again now
            await self._wait()

    def _prefetch_target(self) -> int:
        """Jobs to claim beyond the free slots. None where a buffered job would hold
        something back: a slot of a queue with its own (pools), a globally limited slot
        (a limited claim counts claimed jobs as started), or a connection (transactional
        handlers). Key and rate limits and pauses allow it (see FlowSettings.prefetchable)."""
        if self.capacity.pooled or self._transactional or self.stopping.is_set():
            return 0
        if self.flow.limited and not self.flow.settings.prefetchable:
            return 0
        return self.prefetch.target()

    async def _claim(self, limit: int) -> list[Job] | None:
        """One claim with the buffered outcomes; None when nothing was claimed because it
        failed (after waiting out the backoff) or a stop came first."""
        batch: Batch = []
        try:
            async with self.connections.hot() as conn:
                if self.stopping.is_set():
                    return None  # stop() came while we waited for a connection
                began = time.monotonic()
                await self.flow.refresh_if_due(conn, began)
                if self.flow.limited and not self.flow.settings.prefetchable and limit > self.capacity.free():
                    # Global limits came into force since the limit was set with prefetch:
                    # such a claim must never take more than the free slots.
                    self.capacity.prefetch = 0
                    return None
                batch = self.completer.take()
                outcomes = [(j.id, j.lease_token, o) for j, o in batch]
                if self.flow.limited:
                    # On PostgreSQL's own planner settings, which claim_pick() was tuned
                    # for, not on the hot connection's.
                    async with self.connections.connection() as plain:
                        jobs, written = await self._claim_limited(plain, limit, outcomes)
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
        free = self.capacity.free_by_queue(prefetch=self.flow.settings.prefetchable)
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
            await wait_set(self.capacity.wake, self._poll_timeout())
        finally:
            self.report.stats.fetcher_waiting = False

    def _poll_timeout(self) -> float:
        cfg = self.config
        timeout = max(cfg.poll_interval, cfg.poll_interval_listening) if self.listening() else cfg.poll_interval
        if self.flow.wake_at is not None:  # a rate window frees a start then
            timeout = min(timeout, max(self.flow.wake_at - time.monotonic(), 0.0))
        deadline = self.executor.next_deadline
        if deadline is not None:  # a buffered job must be released then
            timeout = min(timeout, max(deadline - time.monotonic(), 0.0))
        return timeout

    async def release_unstarted(self, jobs: list[Job], why: str) -> None:
        """Hand claimed jobs that never started back as available, their attempt not
        counted (a job whose lease was lost meanwhile is left alone)."""
        try:
            async with self.connections.connection() as conn:
                self.report.stats.released += await within(
                    self.config.lease, self.db.release(conn, {j.id: j.lease_token for j in jobs}), "release"
                )
        except TRANSIENT as exc:
            log.error("could not release %d jobs %s (%s); the rescuer will", len(jobs), why, brief(exc))

    async def _sleep_unless_stopping(self, seconds: float) -> None:
        await wait_set(self.stopping, seconds)
