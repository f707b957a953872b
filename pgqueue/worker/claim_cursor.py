"""Where the next claim of each queue starts scanning the claim index.

A claim walks the live partition's claim index in claim order (priority DESC, run_at,
id). Every job claimed leaves a dead entry at the head of that index. VACUUM (and index
scans marking entries dead) normally clean them up within moments, so scanning from the
head stays cheap. While some transaction holds an old snapshot, though, nothing dead
since that snapshot can be removed or even marked, and every claim walks (and visits the
heap for) all the entries left by every job claimed meanwhile: claims get slower as the
backlog of dead entries grows, and throughput collapses.

So when dead rows are pinned (the maintenance service sees an old snapshot while dead
tuples pile up: ``set_pinned``) and a claim from the head turns out expensive, the worker
switches to resuming each
queue's scan after the last job it claimed (minus a small margin, to catch jobs whose
run_at is slightly older because their producer's transaction started earlier), and
rewinds to the head now and then, so that jobs that appear behind the cursor (a higher
priority, a retry or scheduled job whose run_at is older, a long producer transaction)
are still found. The rewind interval grows with the head scan's cost, so rewinds take at
most about ``REWIND_BUDGET`` of the time; in a healthy database claims stay cheap, the
cursor never engages and the claim order is exact.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import datetime, timedelta
from typing import NamedTuple

from .._db.jobs import HEAD as HEAD_KEY
from ..models import Job

__all__ = ["HEAD", "ClaimCursor", "ClaimCursors"]

#: Share of wall time that rewinding to the head may cost while the cursor is engaged.
REWIND_BUDGET = 0.1
#: Rewind at least this often, so jobs behind the cursor wait at most about this long
#: (longer only while a head scan costs more than REWIND_BUDGET of it).
MIN_REWIND_INTERVAL = 1.0
#: Resume this much before the last claimed job's run_at: producers' transactions commit
#: out of run_at order (run_at is their now(), the transaction's start).
RUN_AT_MARGIN = timedelta(milliseconds=100)


class ClaimCursor(NamedTuple):
    """A position in claim order: ((-priority), run_at, id) ascending."""

    neg_priority: int
    run_at: datetime
    id: int

    @classmethod
    def of(cls, job: Job) -> ClaimCursor:
        return cls(-job.priority, job.run_at, job.id)


#: Before every key: a scan "after" it starts at the head of the index.
HEAD = ClaimCursor(*HEAD_KEY)


class ClaimCursors:
    """Per-queue claim cursors of one worker process. ``threshold`` (seconds) is the
    head-claim duration from which the cursor engages; 0 disables it."""

    def __init__(self, threshold: float) -> None:
        self.threshold = threshold
        self.pinned = False
        self._keys: dict[str, ClaimCursor] = {}
        self._rewind_at = 0.0
        self.rewinds = 0

    @property
    def engaged(self) -> bool:
        return bool(self._keys)

    def set_pinned(self, pinned: bool) -> None:
        """Whether an old snapshot keeps dead rows alive; when it ends, claims go back to
        scanning from the head (exact order) at once."""
        self.pinned = pinned
        if not pinned:
            self._keys.clear()

    def after(self, now: float) -> Mapping[str, ClaimCursor]:
        """The cursors for the next claim (empty: scan from the head); rewinds when due."""
        if self._keys and now >= self._rewind_at:
            self._keys.clear()
            self.rewinds += 1
        return {q: k._replace(run_at=k.run_at - RUN_AT_MARGIN, id=0) for q, k in self._keys.items()}

    def observe(self, jobs: Iterable[Job], *, from_head: bool, elapsed: float, now: float) -> None:
        """Record a claim's result: ``elapsed`` is how long the claim took."""
        if from_head:
            if self.threshold <= 0 or elapsed < self.threshold or not self.pinned:
                return  # the head is cheap, or slow for another reason: claim in exact order
            self._rewind_at = now + max(MIN_REWIND_INTERVAL, elapsed / REWIND_BUDGET)
        for job in jobs:
            key = ClaimCursor.of(job)
            if key > self._keys.get(job.queue, HEAD):
                self._keys[job.queue] = key
