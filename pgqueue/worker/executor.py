"""Owns every attempt this process runs, from the claim to its log line.

One attempt, top to bottom (:meth:`Executor.attempt`): take a slot and hold the lease
(:meth:`~Executor.start`), open the attempt's cancel flag, run the handler
(:mod:`.handler`), turn an operator's cancel into the ``cancelled`` outcome, hand the
outcome to the completer (a transactional handler committed its own), free the slot; when
the completer reports the outcome written, drop the lease and record it once (stats,
metrics, the log line: :class:`~pgqueue.worker.stats.Report`). The attempt's task returns
the outcome it handed over.

Jobs claimed beyond the free slots (prefetch, :mod:`.prefetch`) wait in a buffer
(:meth:`Executor.submit`); a slot freed by an attempt goes straight to the next of them.
Each has a deadline to start by, while enough of its lease is left for the heartbeat
(which extends running jobs' leases only) to reach it; one past it is not run but handed
back to the fetcher to release (:meth:`Executor.take_expired`). On stop the buffer is
emptied first (:meth:`Executor.take_buffered`) and released.

The heartbeat's answer comes here too (:meth:`~Executor.on_heartbeat`): an attempt whose
lease was lost is cancelled (its outcome would be fenced anyway), and an operator's
cancel request sets the attempt's flag (and cancels an ``async def`` handler).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
from collections import deque
from collections.abc import Iterable, Mapping

from ..models import CANCEL_FLAG, CancelFlag, Job, JobState, Outcome
from ..task import TaskDef
from .cancels import CancelFlags, operator_cancel_outcome
from .capacity import Capacity
from .completer import Completer
from .handler import Attempt, HandlerRunner
from .leases import Heartbeat, Leases
from .prefetch import Prefetch
from .stats import Report

__all__ = ["Executor"]

log = logging.getLogger("pgqueue.worker")


class Executor:
    def __init__(
        self,
        *,
        tasks: Mapping[str, TaskDef],
        runner: HandlerRunner,
        capacity: Capacity,
        leases: Leases,
        completer: Completer,
        report: Report,
        worker_id: str,
        prefetch: Prefetch | None = None,
    ) -> None:
        self.tasks = tasks
        self.runner = runner
        self.capacity = capacity
        self.leases = leases
        self.completer = completer
        self.report = report
        self.worker_id = worker_id
        self.cancels = CancelFlags()
        #: job id -> the task running its attempt.
        self.running: dict[int, asyncio.Task[Outcome | None]] = {}
        self._started_at: dict[int, float] = {}
        self.prefetch = prefetch
        #: Claimed jobs waiting for a slot, each with the monotonic times of its claim and
        #: of the deadline to start it by.
        self.buffer: deque[tuple[Job, float, float]] = deque()
        #: Buffered jobs whose deadline passed, for the fetcher to release.
        self.expired: list[Job] = []
        self._starting = True

    # -- the buffer -----------------------------------------------------------------------

    def submit(self, jobs: Iterable[Job], claimed_at: float, start_by: float) -> None:
        """Start claimed jobs while slots are free and buffer the rest (their lease is
        held in the database, not yet heartbeated), to start by ``start_by``."""
        self.buffer.extend((job, claimed_at, start_by) for job in jobs)
        self.fill()

    def fill(self) -> None:
        """Start buffered jobs while slots are free; set aside those past their deadline."""
        buffer = self.buffer
        free = self.capacity.free() if self._starting else 0
        while buffer and free > 0:
            job, claimed_at, start_by = buffer.popleft()
            if time.monotonic() >= start_by:
                self._expire(job, claimed_at)
                continue
            self.start(job)
            free -= 1
        self._prune_buffer()
        self.capacity.unbuffered(len(buffer))

    def _prune_buffer(self) -> None:
        # Deadlines grow along the buffer (claims come in order): look at the head only.
        now = time.monotonic()
        while self.buffer and self.buffer[0][2] <= now:
            job, claimed_at, _ = self.buffer.popleft()
            self._expire(job, claimed_at)

    def _expire(self, job: Job, claimed_at: float) -> None:
        self.expired.append(job)
        if self.prefetch is not None:
            self.prefetch.stalled(time.monotonic() - claimed_at)
        self.capacity.wake.set()

    def take_expired(self) -> list[Job]:
        """Buffered jobs whose lease ran too short to start them (to release)."""
        self._prune_buffer()
        self.capacity.unbuffered(len(self.buffer))
        expired, self.expired = self.expired, []
        return expired

    def stop_starting(self) -> None:
        """Start no more buffered jobs (stopping: they will be released)."""
        self._starting = False

    def take_buffered(self) -> list[Job]:
        """Stop starting buffered jobs; return every one not started (to release)."""
        self._starting = False
        jobs = [job for job, _, _ in self.buffer] + self.expired
        self.buffer.clear()
        self.expired = []
        self.capacity.unbuffered(0)
        return jobs

    @property
    def next_deadline(self) -> float | None:
        """When the first buffered job must have started by (None: buffer empty)."""
        return self.buffer[0][2] if self.buffer else None

    # -- one attempt ----------------------------------------------------------------------

    def start(self, job: Job) -> None:
        """Start a claimed job's attempt (its lease is held from now on)."""
        stale = self.running.get(job.id)
        if stale is not None:
            # This process claimed the job again while an earlier attempt still runs here:
            # that attempt lost its lease (the process froze past it and the job was
            # rescued), so it can never complete. Stop it; its outcome would be fenced.
            log.warning("job %d claimed again while a stale attempt still ran here; cancelling that one", job.id)
            stale.cancel()
        self.capacity.take(job.queue)
        self.leases.hold(job)
        self._started_at[job.id] = time.monotonic()
        self.running[job.id] = asyncio.create_task(self.attempt(job), name=f"pgqueue-job-{job.id}")

    async def attempt(self, job: Job) -> Outcome | None:
        """Run one attempt; returns the outcome handed to the completer, or None when
        nothing was left to write (a transactional completion, a lost lease)."""
        task = self.tasks[job.task]
        flag = self.cancels.open(job.id, interruptible=task.is_async)
        CANCEL_FLAG.set(flag)
        try:
            attempt = await self.runner.run(task, job)
        except BaseException as exc:
            if not self.cancels.absorbs(job.id, exc):
                # Cancelled: by shutdown (which releases the lease) or by a lost lease
                # (already dropped). Either way nothing is written from here.
                self._forget(job.id, flag)
                self._slot_done(job)
                raise
            attempt = Attempt(operator_cancel_outcome(job, self.worker_id))
        outcome = self.cancels.adjust(job.id, attempt.outcome)
        self._forget(job.id, flag)
        try:
            if outcome is not None:
                if job.id in self.leases.held:
                    self.completer.submit(job, outcome)
            elif attempt.committed:
                # Transactional success: the completion committed with the handler's writes.
                self.leases.forget([job.id])
                self.report.finished(job, JobState.COMPLETED, self._took(job))
            else:
                self.leases.forget([job.id])
                self._started_at.pop(job.id, None)
                self.report.refused(job, None)
            if attempt.straggler is not None:
                with contextlib.suppress(BaseException):
                    await attempt.straggler
        finally:
            self._slot_done(job)
        return outcome

    def _slot_done(self, job: Job) -> None:
        started = self._started_at.get(job.id)
        if started is not None and self.prefetch is not None:
            self.prefetch.observe_job(time.monotonic() - started)
        self.capacity.release(job.queue)
        if self.buffer:
            self.fill()

    def written(self, job: Job, outcome: Outcome, accepted: bool) -> None:
        """The completer wrote ``outcome`` (``accepted``), or the fence refused it."""
        if self.leases.drop(job):
            if self.buffer:
                # Unwritten outcomes may have held the buffer back with slots free (see
                # Capacity.free): the freed lease lets the next buffered job start now.
                # Nothing else would start it once the queue ran dry (no backlog, so the
                # fetcher is not woken).
                self.fill()
            self.capacity.refill()
        seconds = self._took(job)
        if not accepted:
            self.report.refused(job, outcome)
            return
        self.report.finished(job, outcome.state, seconds, outcome)

    def _forget(self, job_id: int, flag: CancelFlag) -> None:
        """Drop an attempt's bookkeeping, unless a newer attempt of the job owns it."""
        if self.running.get(job_id) is asyncio.current_task():
            del self.running[job_id]
        self.cancels.close(job_id, flag)

    def _took(self, job: Job) -> float | None:
        started = self._started_at.pop(job.id, None)
        return None if started is None else time.monotonic() - started

    # -- what the heartbeat brings --------------------------------------------------------

    def on_heartbeat(self, beat: Heartbeat) -> None:
        for job_id in self.cancels.request(beat.cancel):
            log.info("job %d: cancel requested by an operator; cancelling its handler", job_id)
            self._cancel(job_id)
        for job_id in beat.lost:
            self._cancel(job_id)

    def _cancel(self, job_id: int) -> None:
        running = self.running.get(job_id)
        if running is not None:
            running.cancel()

    # -- stopping -------------------------------------------------------------------------

    async def stop(self, timeout: float) -> dict[int, uuid.UUID]:
        """Let running attempts finish for up to ``timeout`` seconds, then cancel the rest;
        returns the leases of the attempts cut short (to release them)."""
        if self.running:
            await asyncio.wait(list(self.running.values()), timeout=timeout)
        leftover = self.leases.of(self.running)
        for task in list(self.running.values()):
            task.cancel()
        if self.running:
            await asyncio.wait(list(self.running.values()), timeout=5)
        return leftover
