"""This process's view of flow control: which claim path to take, and when to look again.

Pauses and limits live in the database (``queues``, ``task_limits``) and are enforced by
the claim statements themselves, so this view only chooses the path, never decides what
may start:

* when none of the worker's queues is controlled and none of its tasks is limited, the
  plain claims run (they skip controlled queues and limited tasks by themselves, so a
  stale view can delay a newly limited queue's jobs, never over-start them);
* otherwise every claim is a limited claim (``claim_lock`` + ``claim_pick``), which is
  right for any queue, controlled or not.

The view is re-read when an operator changes a control (a ``*flow`` notification) and at
least every ``refresh_interval`` seconds. A limited claim also says, per queue, whether
limits hold back waiting jobs (then a local job of that queue finishing is worth a claim
at once: its slot is free again), when a full rate window frees a start, and where its
round of concurrency keys stopped (the next claim continues after it).

In a queue with per-key controls, jobs without a key are found only by walking past the
keyed ones; a claim looks for them while that search finds some, and otherwise at most
every :data:`UNKEYED_INTERVAL` seconds (so an unkeyed job that arrives in such a queue
while its keyed jobs wait may start up to that much later).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from .._db.conn import AConn
from .._db.jobs import ClaimHint, FlowSettings, JobsDB

__all__ = ["UNKEYED_INTERVAL", "FlowControl"]

#: How often a limited claim looks for jobs without a key in a queue with per-key controls
#: when the last search found none.
UNKEYED_INTERVAL = 1.0


class FlowControl:
    def __init__(self, db: JobsDB, queues: Sequence[str], tasks: Iterable[str], *, refresh_interval: float) -> None:
        self.db = db
        self.queues = list(queues)
        self.tasks = list(tasks)
        self.refresh_interval = refresh_interval
        self.settings = FlowSettings(frozenset(), frozenset())
        #: queue -> the last concurrency key a limited claim visited.
        self.key_cursors: dict[str, str | None] = {}
        #: Queues whose waiting jobs limits held back at the last limited claim.
        self.blocked: set[str] = set()
        #: Monotonic time when a full rate window frees a start (None: no such wait).
        self.wake_at: float | None = None
        self.refreshes = 0
        #: queue -> when the search for jobs without a key is due again (absent: now).
        self._unkeyed_due: dict[str, float] = {}
        self._refresh_at = 0.0
        self._turn = 0

    @property
    def limited(self) -> bool:
        """Whether claims must take the limited path."""
        return self.settings.any

    def invalidate(self) -> None:
        """An operator changed a control: read the settings again before the next claim."""
        self._refresh_at = 0.0

    async def refresh_if_due(self, conn: AConn, now: float) -> None:
        if now < self._refresh_at:
            return
        self.settings = await self.db.flow_settings(conn, self.queues, self.tasks)
        self._refresh_at = now + self.refresh_interval
        self.refreshes += 1
        if not self.settings.any:
            self.blocked.clear()
            self.wake_at = None

    def queue_order(self) -> list[str]:
        """The queues for the next limited claim, each in turn first: a limited claim
        fills its queues one after the other, so none may always come last."""
        if not self.queues:
            return []
        self._turn = (self._turn + 1) % len(self.queues)
        return self.queues[self._turn :] + self.queues[: self._turn]

    def unkeyed(self, now: float) -> dict[str, bool]:
        """Per queue, whether the next limited claim should look for jobs without a key."""
        return {queue: now >= self._unkeyed_due.get(queue, 0.0) for queue in self.queues}

    def observe(self, hints: Sequence[ClaimHint], now: float) -> None:
        """Take in what a limited claim said about each queue it looked at."""
        waits = []
        for hint in hints:
            self.key_cursors[hint.queue] = hint.key_cursor
            if hint.unkeyed is True:
                self._unkeyed_due.pop(hint.queue, None)
            elif hint.unkeyed is False:
                self._unkeyed_due[hint.queue] = now + UNKEYED_INTERVAL
            if hint.blocked:
                self.blocked.add(hint.queue)
            else:
                self.blocked.discard(hint.queue)
            if hint.wait is not None:
                waits.append(hint.wait)
        self.wake_at = now + min(waits) if waits else None
