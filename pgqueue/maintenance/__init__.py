"""Maintenance every worker process runs, as periodic services of one shape (:mod:`.service`):

* :mod:`.tick`: the scheduler + rescuer tick, every ``maintenance_interval``;
* :mod:`.upkeep`: finished-job partitions created ahead (:mod:`.partitions`) and retention
  (:mod:`.retention`), every ``partition_interval``;
* :mod:`.vacuum`: the live partition vacuumed when dead tuples pile up.

Each decides under an advisory lock, so whichever process wins does the round. Cron's
scheduler (:mod:`pgqueue.cron.scheduler`) has the same shape and joins the group.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .._db.jobs import JobsDB
from ..config import WorkerConfig
from .service import Connect, Maintainer, PeriodicService
from .tick import TickService
from .upkeep import PartitionService, RetentionService
from .vacuum import VacuumService

__all__ = ["Maintainer", "PartitionService", "PeriodicService", "RetentionService", "TickService", "maintainer"]


def maintainer(
    db: JobsDB,
    connect: Connect,
    *,
    dsn: Callable[[], str],
    schema: str,
    config: WorkerConfig,
    worker_id: str,
    on_pinned: Callable[[bool], None] | None = None,
) -> tuple[Maintainer, PartitionService]:
    """Every maintenance service of a worker, grouped; and the partition service alone
    (the completer repairs a missing partition with it)."""
    partitions = PartitionService(dsn=dsn, schema=schema, config=config)
    services: list[PeriodicService[Any]] = [
        TickService(db, connect, config),
        partitions,
        RetentionService(dsn=dsn, schema=schema, config=config, worker_id=worker_id),
    ]
    if config.vacuum_interval > 0:
        services.append(VacuumService(db, connect, schema=schema, config=config, on_pinned=on_pinned))
    return Maintainer(services), partitions
