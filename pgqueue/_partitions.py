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
from psycopg import sql

from ._dsn import migrate_hint
from ._sql import queries_for
from .errors import SchemaNotInstalledError

__all__ = ["FINISHED_PARENTS", "drop_day", "ensure_partitions", "partition_name"]

log = logging.getLogger("pgqueue.partitions")

FINISHED_PARENTS = ("jobs_completed", "jobs_discarded", "jobs_cancelled")
_STORAGE = sql.SQL(
    "fillfactor = 100, autovacuum_vacuum_insert_scale_factor = 0.05, autovacuum_vacuum_scale_factor = 0.05"
)


def partition_name(parent: str, day: date) -> str:
    return f"{parent}_{day:%Y%m%d}"


def lock_name(schema: str) -> str:
    return f"pgqueue.partitions:{schema}"


def _owns_parents(conn: psycopg.Connection[Any], schema: str) -> bool:
    """Whether this session may create partitions itself (it owns, or is a member of the
    owner of, the finished-job parents; a superuser always may)."""
    row = conn.execute(
        "SELECT pg_has_role(current_user, c.relowner, 'USAGE') FROM pg_class c WHERE c.oid = to_regclass(%s)",
        [f'"{schema}".jobs_completed'],
    ).fetchone()
    return bool(row and row[0])


def _create_day_via_owner(conn: psycopg.Connection[Any], schema: str, parent: str, day: date) -> None:
    # A worker role (see pgqueue.roles) may not create tables: the owner's SECURITY DEFINER
    # function does it, and only this.
    try:
        conn.execute(sql.SQL("SELECT {}.create_partition(%s, %s)").format(sql.Identifier(schema)), [parent, day])
    except psycopg.errors.UndefinedFunction:
        raise SchemaNotInstalledError(
            f"this role does not own schema {schema!r} and cannot create its day partitions: "
            f"{migrate_hint(conn, schema, '--create-roles')} as a superuser (it installs create_partition() "
            "for the worker role), or run the worker as the schema's owner"
        ) from None


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


def drop_day(conn: psycopg.Connection[Any], schema: str, child: str) -> None:
    """Drop one finished-job day partition: directly when this session owns the parents,
    else through the owner's ``drop_partition()`` (the worker role; see pgqueue.roles)."""
    if _owns_parents(conn, schema):
        conn.execute(sql.SQL("DROP TABLE IF EXISTS {}.{}").format(sql.Identifier(schema), sql.Identifier(child)))
    else:
        conn.execute(sql.SQL("SELECT {}.drop_partition(%s)").format(sql.Identifier(schema)), [child])


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
        create = None
        for parent in FINISHED_PARENTS:
            for offset in range(-1, days_ahead + 1):
                day = today + timedelta(days=offset)
                if partition_name(parent, day) not in existing:
                    if create is None:
                        create = _create_day if _owns_parents(conn, schema) else _create_day_via_owner
                    create(conn, schema, parent, day)
                    created += 1
    if created:
        log.info("created %d finished-job partitions in schema %s", created, schema)
    return created
