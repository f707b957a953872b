"""The worker runtime: one asyncio loop per process that claims, runs and reports jobs.

:class:`Worker` wires the units together; each unit is its own module: the fetcher
(claims), the executor (one attempt end to end), the completer (outcomes in batches), the
leases (heartbeat), the listener (LISTEN/NOTIFY wake-ups) and the registry (the worker's
row in the database).
"""

from __future__ import annotations

from .worker import Worker, WorkerStats

__all__ = ["Worker", "WorkerStats"]
