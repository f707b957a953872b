"""Schema migrations: ordered, idempotent, recorded, and serialised by an advisory lock."""

from __future__ import annotations

import logging
from typing import Any

import psycopg

from ._db import schema as db
from ._db.sql import load_migrations, validate_schema
from ._dsn import migrate_hint
from .errors import MigrationError, SchemaNotInstalledError
from .maintenance.partitions import ensure_partitions

__all__ = ["current_version", "latest_version", "migrate", "payload_limit", "require_current", "set_payload_limit"]

log = logging.getLogger("pgqueue.migrate")


def latest_version() -> int:
    return max(m.version for m in load_migrations())


def migrate(
    conn: psycopg.Connection[Any],
    schema: str,
    *,
    partition_days_ahead: int = 2,
    max_payload_bytes: int | None = None,
    as_role: str | None = None,
) -> list[int]:
    """Apply every pending migration to ``schema``; returns the versions applied.

    All pending migrations run in one transaction under a lock keyed on the schema, so
    concurrent ``migrate`` calls queue up and the later ones find nothing to do.
    ``max_payload_bytes`` (re)sets the server-side cap on a job's stored arguments.
    ``as_role`` runs everything under ``SET ROLE`` (e.g. the schema's owner role from
    :mod:`pgqueue.roles`), so the objects created belong to that role.
    """
    validate_schema(schema)
    if as_role is None:
        return _migrate(conn, schema, partition_days_ahead, max_payload_bytes)
    if not conn.autocommit:
        raise MigrationError("migrate(as_role=...) needs an autocommit connection")
    db.set_role(conn, schema, as_role)
    try:
        return _migrate(conn, schema, partition_days_ahead, max_payload_bytes)
    finally:
        if not conn.closed:
            db.reset_role(conn, schema)


def _migrate(
    conn: psycopg.Connection[Any], schema: str, partition_days_ahead: int, max_payload_bytes: int | None
) -> list[int]:
    applied_now: list[int] = []
    with conn.transaction():
        db.lock_wait(conn, "migrate", schema)
        db.create_migrations_table(conn, schema)
        done = db.migrations_applied(conn, schema)
        for migration in load_migrations():
            if migration.version in done:
                continue
            try:
                db.run_migration(conn, schema, migration)
            except psycopg.Error as exc:
                raise MigrationError(f"migration {migration.version:04d}_{migration.name} failed: {exc}") from exc
            db.record_migration(conn, schema, migration)
            applied_now.append(migration.version)
            log.info("applied migration %04d_%s to schema %s", migration.version, migration.name, schema)
        if max_payload_bytes is not None:
            set_payload_limit(conn, schema, max_payload_bytes)
    ensure_partitions(conn, schema, days_ahead=partition_days_ahead, wait=True)
    return applied_now


def payload_limit(conn: psycopg.Connection[Any], schema: str) -> int | None:
    """The server-side cap on stored argument bytes, read from its CHECK constraint."""
    return db.payload_limit(conn, schema)


def set_payload_limit(conn: psycopg.Connection[Any], schema: str, max_bytes: int) -> None:
    """Replace the server-side payload cap (scans only the live partition)."""
    if not isinstance(max_bytes, int) or not 1024 <= max_bytes <= 1024**3:
        raise MigrationError("max_payload_bytes must be an integer between 1 KiB and 1 GiB")
    if payload_limit(conn, schema) == max_bytes:
        return
    with conn.transaction():
        db.lock_timeout(conn, schema, 10)
        db.set_payload_limit(conn, schema, max_bytes)
    log.info("server-side payload cap of schema %s set to %d bytes", schema, max_bytes)


def current_version(conn: psycopg.Connection[Any], schema: str) -> int | None:
    """The schema's applied version, or None when pgqueue is not installed there."""
    return db.schema_version(conn, validate_schema(schema))


def require_current(conn: psycopg.Connection[Any], schema: str) -> None:
    """Raise :class:`SchemaNotInstalledError` unless the schema is fully migrated."""
    version = current_version(conn, schema)
    latest = latest_version()
    if version is None:
        raise SchemaNotInstalledError(f"schema {schema!r} has no pgqueue tables: {migrate_hint(conn, schema)}")
    if version < latest:
        raise SchemaNotInstalledError(
            f"schema {schema!r} is at version {version}, this pgqueue needs {latest}: {migrate_hint(conn, schema)}"
        )
