"""Finished-job partitions: one per final state and UTC day, created ahead of need.

New partitions are created standalone and then ATTACHed, which takes only a SHARE UPDATE
EXCLUSIVE lock on the parent: workers moving finished rows in are never blocked. Only the
process holding the partition advisory lock (namespaced to the schema) does this.
"""

from __future__ import annotations

import logging
from datetime import date, timedelta
from typing import Any

import psycopg
import psycopg.errors

from .._db import schema as db

__all__ = ["FINISHED_PARENTS", "drop_day", "ensure_partitions", "partition_name"]

log = logging.getLogger("pgqueue.partitions")

FINISHED_PARENTS = ("jobs_completed", "jobs_discarded", "jobs_cancelled")


def partition_name(parent: str, day: date) -> str:
    return f"{parent}_{day:%Y%m%d}"


def _create_day_via_owner(conn: psycopg.Connection[Any], schema: str, parent: str, day: date) -> None:
    # A worker role (see pgqueue.roles) may not create tables: the owner's SECURITY DEFINER
    # function does it, and only this.
    db.create_day_partition_via_owner(conn, schema, parent, day)


def _create_day(conn: psycopg.Connection[Any], schema: str, parent: str, day: date) -> None:
    db.attach_day_partition(conn, schema, parent, partition_name(parent, day), day)


def drop_day(conn: psycopg.Connection[Any], schema: str, child: str) -> None:
    """Drop one finished-job day partition: directly when this session owns the parents,
    else through the owner's ``drop_partition()`` (the worker role; see pgqueue.roles).
    The caller holds the partitions lock (``lock_try``/``lock_wait``) in this transaction."""
    if db.owns_finished_parents(conn, schema):
        db.drop_day_partition(conn, schema, child)
    else:
        db.drop_day_partition_via_owner(conn, schema, child)


def ensure_partitions(conn: psycopg.Connection[Any], schema: str, *, days_ahead: int, wait: bool = False) -> int:
    """Create missing day partitions from yesterday to ``days_ahead`` days from today.

    Returns how many were created; 0 also when another process holds the lock and
    ``wait`` is false.
    """
    created = 0
    with conn.transaction():
        if wait:
            db.lock_wait(conn, "partitions", schema)
        elif not db.lock_try(conn, "partitions", schema):
            return 0
        db.lock_timeout(conn, schema, 5)
        today = db.utc_day(db.db_now(conn, schema))
        existing = {row.child for row in db.partition_list(conn, schema)}
        create = None
        for parent in FINISHED_PARENTS:
            for offset in range(-1, days_ahead + 1):
                day = today + timedelta(days=offset)
                if partition_name(parent, day) not in existing:
                    if create is None:
                        create = _create_day if db.owns_finished_parents(conn, schema) else _create_day_via_owner
                    create(conn, schema, parent, day)
                    created += 1
    if created:
        log.info("created %d finished-job partitions in schema %s", created, schema)
    return created
