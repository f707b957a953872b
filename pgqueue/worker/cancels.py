"""Operator cancel requests for running attempts (``cancel_job()``).

The lease heartbeat reports, per held job, whether an operator asked it to stop. An async
handler is then cancelled at once; a sync handler (whose thread cannot be interrupted)
sees ``ctx.cancel_requested`` / ``ctx.check_cancelled()``. Either way the attempt ends
``cancelled`` unless the handler completed anyway.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping

from ..errors import Cancel
from ..models import CancelFlag, Job, JobState, Outcome
from .handler import error_record

__all__ = ["CancelFlags", "operator_cancel_outcome"]


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
        """A failed or snoozed attempt of a job an operator cancelled ends ``cancelled``,
        not retried; a completed one stays completed (the work was done)."""
        if outcome is None or not self.requested(job_id):
            return outcome
        if outcome.state in (JobState.RETRYABLE, JobState.DISCARDED) or outcome.snoozed:
            return Outcome(JobState.CANCELLED, error=outcome.error)
        return outcome

    def cancelled_outcome(self, job: Job, worker_id: str) -> Outcome:
        return operator_cancel_outcome(job, worker_id)
