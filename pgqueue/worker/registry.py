"""A worker's presence in the database.

:class:`Registry` upserts the worker's row in ``worker_registry`` at start and at every
heartbeat (one statement; riding in the same round trip as the lease extension when jobs
are held), and deletes it on a graceful stop. Rows of workers that died without stopping
expire (``workers.alive`` turns false after 3 heartbeat intervals) and are removed by
maintenance.
"""

from __future__ import annotations

import os
import socket
import uuid
from collections.abc import Mapping, Sequence
from typing import Any

from .._db.conn import AConn
from .._db.jobs import JobsDB
from .._version import __version__
from ..config import ALIVE_INTERVALS, WorkerConfig

__all__ = ["Registry"]


class Registry:
    def __init__(
        self, db: JobsDB, worker_id: str, queues: Sequence[str], config: WorkerConfig, *, concurrency: int | None = None
    ) -> None:
        self.db = db
        self.worker_id = worker_id
        self._static: dict[str, Any] = {
            "worker_id": worker_id,
            "host": socket.gethostname(),
            "pid": os.getpid(),
            "queues": list(queues),
            "concurrency": config.concurrency if concurrency is None else concurrency,
            "ttl": ALIVE_INTERVALS * config.heartbeat_interval,
            "version": __version__,
        }

    async def beat(
        self,
        conn: AConn,
        held: Mapping[int, uuid.UUID],
        lease: float,
        *,
        in_flight: int,
        listener_connected: bool,
    ) -> dict[int, bool]:
        """Refresh the registration and extend ``held`` leases in one round trip.

        Returns the ids whose lease was extended, each mapped to whether an operator asked
        that job to stop.
        """
        params = {**self._static, "in_flight": in_flight, "listener_connected": listener_connected}
        if not held:
            await self.db.register(conn, params)
            return {}
        return await self.db.register_and_extend_leases(conn, params, held, lease)

    async def deregister(self, conn: AConn) -> None:
        await self.db.deregister(conn, self.worker_id)
