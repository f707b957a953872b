"""What a worker counts and tells: :class:`WorkerStats` (read by tests and the CLI), and
:class:`Report`, where every claim and every finished attempt is recorded once: in the
stats, in the Prometheus metrics when they are served, and as one log line per attempt."""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from ..logging_setup import log_outcome
from ..metrics import WorkerMetrics
from ..models import Job, JobState, Outcome

__all__ = ["Report", "WorkerStats"]

log = logging.getLogger("pgqueue.worker")


@dataclass
class WorkerStats:
    """Counters since start; read them from the worker's loop."""

    claimed: int = 0
    completed: int = 0
    retried: int = 0
    discarded: int = 0
    cancelled: int = 0
    snoozed: int = 0  # attempts that snoozed (Snooze): put off, the attempt given back
    refused: int = 0  # outcomes fenced off because the lease had been lost
    released: int = 0
    claims: int = 0
    empty_claims: int = 0
    #: The fetch loop is waiting for a wake-up (NOTIFY, poll timer, free capacity) with no
    #: claim in flight: a signal tests can await instead of counting claims.
    fetcher_waiting: bool = False


_COUNTERS = {
    JobState.COMPLETED: "completed",
    JobState.RETRYABLE: "retried",
    JobState.DISCARDED: "discarded",
    JobState.CANCELLED: "cancelled",
    JobState.AVAILABLE: "snoozed",  # only a snooze ends an attempt in a waiting state
    JobState.SCHEDULED: "snoozed",
}


class Report:
    """Records claims and finished attempts; ``log_args(task)`` says whether a task's
    arguments may appear in its log lines."""

    def __init__(self, stats: WorkerStats, log_args: Callable[[str], bool]) -> None:
        self.stats = stats
        self.log_args = log_args
        #: Set by the worker once the metrics endpoint is up (``metrics_port``).
        self.metrics: WorkerMetrics | None = None

    def claimed(self, jobs: Sequence[Job]) -> None:
        stats = self.stats
        stats.claims += 1
        stats.claimed += len(jobs)
        if not jobs:
            stats.empty_claims += 1
        if self.metrics is not None:
            self.metrics.jobs_claimed(jobs)

    def finished(self, job: Job, state: JobState, seconds: float | None, outcome: Outcome | None = None) -> None:
        """An attempt's outcome was written (or, transactional, committed)."""
        counter = _COUNTERS.get(state)
        if counter is not None:
            setattr(self.stats, counter, getattr(self.stats, counter) + 1)
        if self.metrics is not None:
            self.metrics.job_finished(job, state, seconds)
        log_outcome(
            log,
            job,
            state,
            seconds=seconds,
            error=outcome.error if outcome is not None else None,
            retry_in=outcome.delay
            if outcome is not None and (state is JobState.RETRYABLE or outcome.snoozed)
            else None,
            log_args=self.log_args(job.task),
        )

    def refused(self, job: Job, outcome: Outcome | None) -> None:
        """An attempt's outcome was fenced off: its lease had been lost."""
        self.stats.refused += 1
        if outcome is None:
            log.warning(
                "job %d %s: transactional completion refused, the lease was lost; rolled back", job.id, job.task
            )
            return
        if self.metrics is not None:
            self.metrics.outcome_refused(job)
        log.warning(
            "job %d %s attempt %d: outcome %s refused, the lease was lost (the job was rescued)",
            job.id,
            job.task,
            job.attempt,
            outcome.state,
        )
