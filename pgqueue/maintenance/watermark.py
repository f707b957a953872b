"""How far back the maintenance tick looks for due timers.

The tick (scheduler + rescuer) walks the live partition's timers index up to now(). Every
claimed job leaves entries there (its running version, keyed by lease expiry) that die
when it finishes; normally VACUUM removes them, but while some transaction holds an old
snapshot it cannot, and a tick that scans from the beginning of time walks all of them,
every second. So each process remembers how far its last complete tick got and the next
one starts a margin before that. A timer can land behind the watermark only if the
transaction that wrote it ran for longer than the margin (for instance a producer's long
transaction enqueuing a job with a short delay); a full scan every ``full_every`` seconds
catches those, so such a job is promoted at most that much late. Deadlines (expiry) are
looked at the same way: a job whose deadline passed while it ran, and which then asked
for a retry, is cancelled by the next full scan (the claims skip it meanwhile).
"""

from __future__ import annotations

from datetime import datetime, timedelta

from .._db.jobs import TickResult

__all__ = ["TickWatermark"]


class TickWatermark:
    def __init__(self, *, margin: timedelta = timedelta(seconds=5), full_every: float = 60.0) -> None:
        self.margin = margin
        self.full_every = full_every
        self._since: datetime | None = None
        self._next_full = 0.0

    def since(self, now: float) -> datetime | None:
        """Where the next tick starts scanning (None: from the beginning)."""
        if self._since is None or now >= self._next_full:
            return None
        return self._since

    def observe(self, result: TickResult, *, scanned_since: datetime | None, batch: int, now: float) -> None:
        """Record a tick. Only a complete pass moves the watermark: a pass that hit its
        batch limit left due timers behind, and the next one must start where it did."""
        if (
            not result.leader
            or result.promoted >= batch
            or result.rescued + result.discarded >= batch
            or result.expired >= batch
        ):
            return
        if scanned_since is None:
            self._next_full = now + self.full_every
        self._since = result.now - self.margin
