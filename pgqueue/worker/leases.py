"""The leases this process holds, and the heartbeat that keeps them alive.

Design notes:

* A lease is held from the claim until the database acknowledged the attempt's outcome
  (or its transactional completion committed, or it was released): running jobs and
  outcomes still waiting in the completer's buffer alike, so a slow database never lets
  a finished job's lease expire into a rescue.
* Every ``heartbeat_interval`` one statement extends every lease held and refreshes the
  worker's registration (a pipeline of two when leases are held; the registration alone
  when idle). A lease missing from the answer was lost: the job was rescued elsewhere
  after this process froze past the lease, or cancelled. The :class:`Heartbeat` handed to
  the executor lists it, so that its handler is stopped; its outcome, if it still comes,
  will be refused by the fence.
* The answer also says which held jobs an operator asked to cancel.
* A heartbeat that fails (database unreachable) is logged and tried again at the next
  interval: the lease is long enough for several to fail.
* :meth:`close` ends the heartbeats before the final deregistration, under the same lock,
  so a late heartbeat can never re-register a worker that stopped.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

from .._db.conn import TRANSIENT, brief, within
from ..config import WorkerConfig
from ..models import Job
from .connections import Connections
from .registry import Registry

__all__ = ["Heartbeat", "Leases"]

log = logging.getLogger("pgqueue.worker")

#: What a registration shows besides the worker's identity: (jobs in flight, listener up).
Status = Callable[[], tuple[int, bool]]


@dataclass(frozen=True, slots=True)
class Heartbeat:
    """What one heartbeat learnt."""

    #: Jobs whose lease was lost (already forgotten here).
    lost: list[int]
    #: Every lease extended, each mapped to whether an operator asked that job to stop.
    cancel: Mapping[int, bool]


class Leases:
    def __init__(
        self,
        *,
        connections: Connections,
        registry: Registry,
        config: WorkerConfig,
        held: dict[int, uuid.UUID] | None = None,
    ) -> None:
        self.connections = connections
        self.registry = registry
        self.config = config
        #: job id -> lease token, for every lease held (``held``: a map to share, else new).
        self.held: dict[int, uuid.UUID] = {} if held is None else held
        self._lock = asyncio.Lock()
        self._over = False

    # -- what is held -------------------------------------------------------------------

    def __len__(self) -> int:
        return len(self.held)

    def hold(self, job: Job) -> None:
        self.held[job.id] = job.lease_token

    def holds(self, job: Job) -> bool:
        """Whether this attempt's lease is still ours (not lost, not released)."""
        return self.held.get(job.id) == job.lease_token

    def drop(self, job: Job) -> bool:
        """Forget this attempt's lease (its outcome is written); False if it was not held
        (lost meanwhile, or a newer attempt of the job holds the id)."""
        if self.held.get(job.id) != job.lease_token:
            return False
        del self.held[job.id]
        return True

    def forget(self, job_ids: Iterable[int]) -> None:
        """Drop these leases whatever their token (released, or completed transactionally)."""
        for job_id in job_ids:
            self.held.pop(job_id, None)

    def of(self, job_ids: Iterable[int]) -> dict[int, uuid.UUID]:
        """The leases held for ``job_ids``."""
        return {job_id: self.held[job_id] for job_id in job_ids if job_id in self.held}

    # -- the database side --------------------------------------------------------------

    async def register(self, status: Status) -> None:
        """The first registration, before any claim."""
        in_flight, listening = status()
        async with self.connections.connection() as conn:
            await self.registry.beat(conn, {}, self.config.lease, in_flight=in_flight, listener_connected=listening)

    async def run(self, status: Status, on_beat: Callable[[Heartbeat], None]) -> None:
        """Heartbeat every ``heartbeat_interval`` until :meth:`close` (or cancelled),
        handing each answer to ``on_beat``."""
        while True:
            await asyncio.sleep(self.config.heartbeat_interval)
            async with self._lock:
                if self._over:
                    return
                beat = await self.beat(status)
            if beat is not None:
                on_beat(beat)

    async def beat(self, status: Status) -> Heartbeat | None:
        """One heartbeat: extend every lease held, refresh the registration; None when the
        database could not be reached."""
        cfg = self.config
        held = dict(self.held)
        in_flight, listening = status()
        try:
            async with self.connections.hot() as conn:
                still = await within(
                    cfg.lease,
                    self.registry.beat(conn, held, cfg.lease, in_flight=in_flight, listener_connected=listening),
                    "heartbeat",
                )
        except TRANSIENT as exc:
            log.warning("heartbeat failed for %d leases (%s)", len(held), brief(exc))
            return None
        lost = []
        for job_id in held.keys() - still:
            if self.held.get(job_id) != held[job_id]:
                continue  # its outcome was written meanwhile: not lost
            del self.held[job_id]
            log.warning("job %d: lease lost (rescued by another process); cancelling its handler", job_id)
            lost.append(job_id)
        return Heartbeat(lost, still)

    async def close(self) -> None:
        """Stop heartbeating, then remove the registration (a stopped worker is not shown
        alive, and no late heartbeat can bring it back)."""
        async with self._lock:
            self._over = True
        try:
            async with self.connections.connection() as conn:
                await self.registry.deregister(conn)
        except TRANSIENT as exc:
            log.warning("could not remove the worker's registration (%s); it will expire", exc)
