"""How many jobs the fetcher may claim now, and the wake-up that tells it to.

Two limits, whichever is lower: handler slots (``concurrency`` attempts at once), and the
leases held, which also count outcomes not yet written: at most one concurrency's worth
of outcomes may wait for the completer, so a slow database slows claiming instead of
piling up leases that must be heartbeated.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sized

__all__ = ["Capacity"]


class Capacity:
    def __init__(self, *, concurrency: int, fetch_batch: int, leases: Sized, wake: asyncio.Event) -> None:
        self.concurrency = concurrency
        self.leases = leases
        #: Set to make the fetcher claim now (free capacity, a notification, stop).
        self.wake = wake
        #: Slots taken by running attempts.
        self.used = 0
        #: The last claim came back full: more is waiting than was taken.
        self.backlog = False
        # With a backlog, refill once this much is free rather than one job at a time.
        self._refill_at = max(1, min(concurrency, fetch_batch) // 2)

    def free(self) -> int:
        return min(self.concurrency - self.used, 2 * self.concurrency - len(self.leases))

    def take(self) -> None:
        self.used += 1

    def release(self) -> None:
        self.used -= 1
        self.refill()

    def refill(self) -> None:
        """Something freed up (a slot, a lease): wake the fetcher if work is waiting."""
        if self.backlog and self.free() >= self._refill_at:
            self.wake.set()
