"""How many jobs the fetcher may claim now, per queue, and the wake-up that tells it to.

Slots come in pools: a queue given its own concurrency (``WorkerConfig.queue_concurrency``)
has a pool of that many slots to itself; every other queue this process serves shares one
pool of ``concurrency`` slots. A claim takes at most the free slots of each queue's pool.

Two limits apply on top, whichever is lower: the slots, and the leases held, which also
count outcomes not yet written: at most one concurrency's worth of outcomes may wait for
the completer (plus the prefetch target: short jobs finish faster than a commit, so as
many outcomes as the buffer holds jobs may wait), so a slow database slows claiming
instead of piling up leases that must be heartbeated.

The fetcher is woken when a slot frees up and waiting work can use it: the last claim of
the slot's pool came back full (``backlog``: more is waiting), or limits held back the
slot's queue (``blocked``: a job of that queue finishing frees one of its global slots,
which the next claim, carrying the job's outcome, can take at once). When the completer
wrote that outcome on its own instead, a claim meanwhile may have seen the slot still
taken; the write wakes the fetcher again (:meth:`Capacity.outcomes_written`).

Prefetch (:mod:`.prefetch`): a claim may also take up to ``prefetch`` jobs beyond the free
slots, which the executor buffers (``buffered``) and starts as slots free up. While jobs
are buffered a freed slot goes to the next of them, so the fetcher is woken instead when
the buffer runs down to half its target.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Mapping, Sequence, Sized

from ..models import Job

__all__ = ["Capacity"]

_SHARED = ""  # the pool of queues without their own (queue names are never empty)


class Capacity:
    def __init__(
        self,
        *,
        concurrency: int,
        fetch_batch: int,
        leases: Sized,
        wake: asyncio.Event,
        queues: Sequence[str] = (),
        queue_concurrency: Mapping[str, int] | None = None,
    ) -> None:
        own = {q: n for q, n in (queue_concurrency or {}).items() if q in queues}
        #: Slots per pool: each queue with its own concurrency, and the shared pool.
        self.slots: dict[str, int] = dict(own)
        if not queues or any(q not in own for q in queues):
            self.slots[_SHARED] = concurrency
        self._pool_of = {q: (q if q in own else _SHARED) for q in queues}
        #: Slots in all pools: the most attempts this process runs at once.
        self.concurrency = sum(self.slots.values())
        self.leases = leases
        #: Set to make the fetcher claim now (free capacity, a notification, stop).
        self.wake = wake
        #: Slots taken by running attempts, in all pools and per pool.
        self.used = 0
        self._used: dict[str, int] = dict.fromkeys(self.slots, 0)
        #: The last claim came back full: more is waiting than was taken.
        self.backlog = False
        #: Queues whose waiting jobs limits held back at the last claim.
        self.blocked: set[str] = set()
        #: With slots per queue: queues whose last claim took all their free slots.
        self.waiting: set[str] = set()
        #: Jobs to hold claimed beyond the free slots (set by the fetcher; 0: none).
        self.prefetch = 0
        #: Jobs claimed and waiting in the executor's buffer for a slot.
        self.buffered = 0
        # With a backlog, refill once this much of a pool is free rather than one job at a time.
        self._refill_at = {p: max(1, min(n, fetch_batch) // 2) for p, n in self.slots.items()}

    @property
    def pooled(self) -> bool:
        """Whether some queue has slots of its own (claims then cap each queue)."""
        return len(self.slots) > 1 or _SHARED not in self.slots

    def free(self) -> int:
        return min(self.concurrency - self.used, 2 * self.concurrency + self.prefetch - len(self.leases))

    def claimable(self, fetch_batch: int) -> int:
        """Jobs the next claim may take: the free slots, plus what the buffer lacks of
        ``prefetch`` (nothing more while unwritten outcomes hold the slots back)."""
        free = self.free()
        if free <= 0 and self.used < self.concurrency:
            return 0  # slots are free but leases are not: outcomes wait to be written
        shortfall = max(self.prefetch - self.buffered, 0)
        return min(max(free, 0) + shortfall, fetch_batch)

    def refill_due(self) -> bool:
        """Whether a claim is worth making now: a slot is free, or the buffer ran down to
        half its target."""
        if self.free() > 0:
            return True
        return self.prefetch > 0 and self.buffered <= self.prefetch // 2 and self.used >= self.concurrency

    def unbuffered(self, buffered: int) -> None:
        """The buffer now holds ``buffered`` jobs; wake the fetcher if jobs left it, it ran
        low and more is waiting."""
        before, self.buffered = self.buffered, buffered
        # Only when jobs left the buffer: a fetcher that cannot claim (outcomes hold the
        # leases back) must not be woken over and over by a buffer that stays low.
        if buffered < before and self.backlog and self.prefetch and buffered <= self.prefetch // 2:
            self.wake.set()

    def free_by_queue(self, *, prefetch: bool = False) -> dict[str, int]:
        """Each served queue's free slots (its pool's), capped by :meth:`free`; with
        ``prefetch``, plus what the buffer lacks of its target (one shared pool only)."""
        total = self.free()
        extra = max(self.prefetch - self.buffered, 0) if prefetch and not self.pooled else 0
        return {q: max(min(self.slots[p] - self._used[p], total), 0) + extra for q, p in self._pool_of.items()}

    def take(self, queue: str) -> None:
        self.used += 1
        self._used[self._pool(queue)] += 1

    def release(self, queue: str) -> None:
        pool = self._pool(queue)
        self.used -= 1
        self._used[pool] -= 1
        if self.buffered:
            return  # the next buffered job takes the slot (the buffer running low wakes)
        pool_free = self.slots.get(pool, 0) - self._used[pool]
        if queue in self.blocked or (
            (self.backlog or queue in self.waiting) and pool_free >= self._refill_at.get(pool, 1)
        ):
            self.wake.set()

    def outcomes_written(self, queues: Iterable[str]) -> None:
        """The completer wrote outcomes of jobs of ``queues`` on its own (not riding on a
        claim): where limits held a queue back, its global slots are free only now, and a
        claim made while the write was in flight saw them taken; wake the fetcher."""
        if self.blocked and not self.blocked.isdisjoint(queues):
            self.wake.set()

    def observe_claim(self, free_before: Mapping[str, int], jobs: Iterable[Job], limit: int) -> None:
        """With slots per queue: note the queues whose claim took all their free slots
        (more of them is probably waiting), and those it could not look at (no free slot:
        a wake-up for them, such as a NOTIFY, was spent on the others)."""
        taken: dict[str, int] = {}
        for job in jobs:
            taken[job.queue] = taken.get(job.queue, 0) + 1
        self.waiting = {q for q, n in free_before.items() if n <= 0 or taken.get(q, 0) >= min(n, limit)}

    def refill(self) -> None:
        """A lease freed up: wake the fetcher if work is waiting and enough is free."""
        if self.backlog and self.free() >= min(self._refill_at.values()):
            self.wake.set()

    def _pool(self, queue: str) -> str:
        # A queue this process does not serve (a job claimed before a config change) counts
        # against the shared pool, which then exists.
        pool = self._pool_of.get(queue, _SHARED)
        if pool not in self._used:
            self._used[pool] = 0
        return pool
