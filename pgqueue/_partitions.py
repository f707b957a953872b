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
from psycopg import sql

from ._sql import queries_for

__all__ = ["FINISHED_PARENTS", "ensure_partitions", "partition_name"]

log = logging.getLogger("pgqueue.partitions")

FINISHED_PARENTS = ("jobs_completed", "jobs_discarded", "jobs_cancelled")
_STORAGE = sql.SQL(
    "fillfactor = 100, autovacuum_vacuum_insert_scale_factor = 0.05, autovacuum_vacuum_scale_factor = 0.05"
)


def partition_name(parent: str, day: date) -> str:
    return f"{parent}_{day:%Y%m%d}"


def lock_name(schema: str) -> str:
    return f"pgqueue.partitions:{schema}"


def _create_day(conn: psycopg.Connection[Any], schema: str, parent: str, day: date) -> None:
    s = sql.Identifier(schema)
    child = sql.Identifier(partition_name(parent, day))
    conn.execute(
        sql.SQL(
            "CREATE TABLE {s}.{child} (LIKE {s}.{parent} INCLUDING DEFAULTS INCLUDING CONSTRAINTS) WITH ({storage})"
        ).format(s=s, child=child, parent=sql.Identifier(parent), storage=_STORAGE)
    )
    conn.execute(
        sql.SQL("ALTER TABLE {s}.{parent} ATTACH PARTITION {s}.{child} FOR VALUES FROM ({lo}) TO ({hi})").format(
            s=s,
            parent=sql.Identifier(parent),
            child=child,
            lo=sql.Literal(f"{day.isoformat()} 00:00:00+00"),
            hi=sql.Literal(f"{(day + timedelta(days=1)).isoformat()} 00:00:00+00"),
        )
    )


def ensure_partitions(conn: psycopg.Connection[Any], schema: str, *, days_ahead: int, wait: bool = False) -> int:
    """Create missing day partitions from yesterday to ``days_ahead`` days from today.

    Returns how many were created; 0 also when another process holds the lock and
    ``wait`` is false.
    """
    q = queries_for(schema)
    created = 0
    with conn.transaction():
        if wait:
            conn.execute("SELECT pg_advisory_xact_lock(hashtextextended(%s, 0))", [lock_name(schema)])
        else:
            got = conn.execute(q["partition_lock"], {"lock_name": lock_name(schema)}).fetchone()
            if not got or not got[0]:
                return 0
        conn.execute("SET LOCAL lock_timeout = '5s'")
        today: date = conn.execute(q["db_today"]).fetchone()[0]  # type: ignore[index]
        existing = {row[1] for row in conn.execute(q["partition_list"], {"schema": schema})}
        for parent in FINISHED_PARENTS:
            for offset in range(-1, days_ahead + 1):
                day = today + timedelta(days=offset)
                if partition_name(parent, day) not in existing:
                    _create_day(conn, schema, parent, day)
                    created += 1
    if created:
        log.info("created %d finished-job partitions in schema %s", created, schema)
    return created
