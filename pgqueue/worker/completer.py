"""Buffers attempt outcomes and writes them in batches.

Two ways out, whichever comes first:

* **piggyback**: when the fetcher claims, it takes the buffered outcomes and sends them in
  the same pipeline (one round trip, one commit) as the claim;
* **timer**: otherwise a batch is written ``interval`` seconds after its first outcome
  arrived, or at once when it reaches ``batch_size``. Such a write can free global slots
  that a claim made meanwhile still saw taken, so it is announced (:meth:`on_flushed`).

Writes are fenced by lease token, so a batch can be retried after a connection error
without harm; outcomes stay buffered (and their leases keep being extended) until the
database has acknowledged them.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

from .._db.conn import RECONNECT_BACKOFF, TRANSIENT, brief, within
from .._db.errors import PartitionMissingError
from .._db.jobs import JobsDB
from .._tasks import wait_set
from ..models import Job, Outcome
from ..retry import Retries
from .connections import Connections

__all__ = ["Batch", "Completer", "Written"]

log = logging.getLogger("pgqueue.completer")

Batch = list[tuple[Job, Outcome]]
#: Told of every outcome once the database answered: (job, outcome, accepted by the fence).
Written = Callable[[Job, Outcome, bool], None]


class Completer:
    def __init__(
        self,
        db: JobsDB,
        connections: Connections,
        *,
        batch_size: int,
        interval: float,
        repair_partitions: Callable[[], Awaitable[object]],
        timeout: float = 30.0,
    ) -> None:
        self.db = db
        self.connections = connections
        self.batch_size = batch_size
        self.interval = interval
        self._subscribers: list[Written] = []
        self._flushed: list[Callable[[Batch], None]] = []
        self.repair_partitions = repair_partitions
        self.timeout = timeout  # longest a write may hang before its connection is given up
        self._pending: Batch = []
        self._arrived = asyncio.Event()
        self._full = asyncio.Event()
        self._lock = asyncio.Lock()

    def subscribe(self, on_written: Written) -> None:
        """Call ``on_written`` for every outcome the database answered for."""
        self._subscribers.append(on_written)

    def on_flushed(self, callback: Callable[[Batch], None]) -> None:
        """Call ``callback`` with every batch this completer wrote itself (not those a
        claim carried: that claim already saw them)."""
        self._flushed.append(callback)

    def submit(self, job: Job, outcome: Outcome) -> None:
        self._pending.append((job, outcome))
        self._arrived.set()
        if len(self._pending) >= self.batch_size:
            self._full.set()

    def __len__(self) -> int:
        return len(self._pending)

    def take(self) -> Batch:
        """Hand up to ``batch_size`` buffered outcomes to a caller that will write them and
        then call :meth:`acknowledge` (or :meth:`give_back` on failure)."""
        if self._lock.locked() or not self._pending:
            return []
        batch = self._pending[: self.batch_size]
        del self._pending[: len(batch)]
        return batch

    def give_back(self, batch: Batch) -> None:
        self._pending[:0] = batch
        self._arrived.set()

    def acknowledge(self, batch: Batch, written: set[int]) -> None:
        for job, outcome in batch:
            accepted = job.id in written
            for on_written in self._subscribers:
                on_written(job, outcome, accepted)

    async def run(self) -> None:
        while True:
            await self._arrived.wait()
            if len(self._pending) < self.batch_size and self.interval > 0:
                await wait_set(self._full, self.interval)
            await self.flush()

    async def flush(self) -> None:
        """Write everything buffered now, retrying connection errors with backoff."""
        async with self._lock:
            retries = Retries(RECONNECT_BACKOFF)
            while self._pending:
                batch = self._pending[: self.batch_size]
                try:
                    async with self.connections.hot() as conn:
                        written = await within(
                            self.timeout,
                            self.db.record_outcomes(conn, [(j.id, j.lease_token, o) for j, o in batch]),
                            "recording outcomes",
                        )
                except PartitionMissingError as exc:
                    log.warning("finished-job partition missing (%s); creating it", exc)
                    await self.repair_partitions()
                    continue
                except TRANSIENT as exc:
                    delay = retries.next()
                    log.warning(
                        "could not record %d job outcomes (%s); retrying in %.2fs", len(batch), brief(exc), delay
                    )
                    await asyncio.sleep(delay)
                    continue
                del self._pending[: len(batch)]
                self.acknowledge(batch, written)
                for callback in self._flushed:
                    callback(batch)
            self._arrived.clear()
            self._full.clear()
