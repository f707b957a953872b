"""How many jobs to claim beyond the free slots, so that short jobs never wait for a claim.

A worker at concurrency ``c`` whose jobs take ``t`` seconds each runs ``c / t`` jobs a
second; a claim takes ``r`` seconds. Claiming only for free slots, each slot idles for a
claim's round trip between jobs, which for no-op jobs at low concurrency is most of the
time. So the fetcher claims up to :meth:`Prefetch.target` more than the free slots and the
executor keeps them in a buffer, starting one the moment a slot frees: about twice what
the slots run during one claim (``2 c r / t``), at most ``fetch_batch``, and none when jobs
are long (fewer than half a job per slot per claim: nothing to gain).

Both times are moving averages measured here: a claim's round trip, and a slot's
occupancy per job (from the attempt's start to the slot's release, so including the
loop's own delay, which is what the slots really take). Until both were measured the
target is 0. A buffered job whose lease ran short before a slot freed means the jobs got
long: :meth:`Prefetch.stalled` turns prefetching off until finished jobs say otherwise.

Buffered jobs hold a lease in the database, but the heartbeat does not extend it (they
are not running): a buffer never keeps jobs from other workers for longer than a lease.
"""

from __future__ import annotations

__all__ = ["Prefetch"]

#: Weight of each new measurement in the moving averages.
_ALPHA = 0.2


class Prefetch:
    def __init__(self, *, concurrency: int, fetch_batch: int) -> None:
        self.concurrency = concurrency
        self.fetch_batch = fetch_batch
        #: Moving average of a claim's round trip, seconds (None: none measured yet).
        self.claim_seconds: float | None = None
        #: Moving average of a slot's occupancy per job, seconds (None: none finished yet).
        self.job_seconds: float | None = None
        #: A fixed target instead of the estimate (tests and A/B measurements); prefetching
        #: still stays off where it must (see the fetcher).
        self.fixed: int | None = None

    def observe_claim(self, seconds: float) -> None:
        self.claim_seconds = _average(self.claim_seconds, seconds)

    def observe_job(self, seconds: float) -> None:
        self.job_seconds = _average(self.job_seconds, seconds)

    def stalled(self, seconds: float) -> None:
        """A buffered job waited ``seconds`` without a slot freeing up: jobs are long now."""
        self.job_seconds = max(self.job_seconds or 0.0, seconds)

    def target(self) -> int:
        """Jobs to hold in the buffer, beyond the free slots."""
        if self.fixed is not None:
            return self.fixed
        if not self.claim_seconds or not self.job_seconds:
            return 0
        per_claim = self.concurrency * self.claim_seconds / self.job_seconds
        if per_claim < 0.5:
            return 0
        return min(self.fetch_batch, round(2 * per_claim))


def _average(current: float | None, sample: float) -> float:
    return sample if current is None else current + _ALPHA * (sample - current)
