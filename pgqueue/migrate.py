"""Schema migrations: ordered, idempotent, recorded, and serialised by an advisory lock."""

from __future__ import annotations

import logging
from typing import Any

import psycopg
from psycopg import sql

from ._dsn import migrate_hint
from ._partitions import ensure_partitions
from ._sql import load_migrations, validate_schema
from .errors import MigrationError, SchemaNotInstalledError

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
    conn.execute(sql.SQL("SET ROLE {}").format(sql.Identifier(as_role)))
    try:
        return _migrate(conn, schema, partition_days_ahead, max_payload_bytes)
    finally:
        if not conn.closed:
            conn.execute("RESET ROLE")


def _migrate(
    conn: psycopg.Connection[Any], schema: str, partition_days_ahead: int, max_payload_bytes: int | None
) -> list[int]:
    ident = sql.Identifier(schema)
    applied_now: list[int] = []
    with conn.transaction():
        conn.execute("SELECT pg_advisory_xact_lock(hashtextextended(%s, 0))", [f"pgqueue.migrate:{schema}"])
        # Only when missing: CREATE SCHEMA IF NOT EXISTS needs CREATE on the database even
        # when the schema exists, which the owner role of an installed schema need not have.
        if conn.execute("SELECT to_regnamespace(%s) IS NULL", [schema]).fetchone() == (True,):
            conn.execute(sql.SQL("CREATE SCHEMA {}").format(ident))
        conn.execute(
            sql.SQL(
                "CREATE TABLE IF NOT EXISTS {}.migrations ("
                " version integer PRIMARY KEY,"
                " name text NOT NULL,"
                " applied_at timestamptz NOT NULL DEFAULT now())"
            ).format(ident)
        )
        done = {r[0] for r in conn.execute(sql.SQL("SELECT version FROM {}.migrations").format(ident))}
        for migration in load_migrations():
            if migration.version in done:
                continue
            try:
                conn.execute(migration.bound(schema))
            except psycopg.Error as exc:
                raise MigrationError(f"migration {migration.version:04d}_{migration.name} failed: {exc}") from exc
            conn.execute(
                sql.SQL("INSERT INTO {}.migrations (version, name) VALUES (%s, %s)").format(ident),
                [migration.version, migration.name],
            )
            applied_now.append(migration.version)
            log.info("applied migration %04d_%s to schema %s", migration.version, migration.name, schema)
        if max_payload_bytes is not None:
            set_payload_limit(conn, schema, max_payload_bytes)
    ensure_partitions(conn, schema, days_ahead=partition_days_ahead, wait=True)
    return applied_now


def payload_limit(conn: psycopg.Connection[Any], schema: str) -> int | None:
    """The server-side cap on stored argument bytes, read from its CHECK constraint."""
    row = conn.execute(
        "SELECT substring(pg_get_constraintdef(c.oid) from '<= ([0-9]+)')::bigint"
        " FROM pg_constraint c JOIN pg_class t ON t.oid = c.conrelid"
        " JOIN pg_namespace n ON n.oid = t.relnamespace"
        " WHERE n.nspname = %s AND t.relname = 'jobs_live' AND c.conname = 'jobs_args_size'",
        [schema],
    ).fetchone()
    return None if row is None else int(row[0])


def set_payload_limit(conn: psycopg.Connection[Any], schema: str, max_bytes: int) -> None:
    """Replace the server-side payload cap (scans only the live partition)."""
    if not isinstance(max_bytes, int) or not 1024 <= max_bytes <= 1024**3:
        raise MigrationError("max_payload_bytes must be an integer between 1 KiB and 1 GiB")
    if payload_limit(conn, schema) == max_bytes:
        return
    with conn.transaction():
        conn.execute("SET LOCAL lock_timeout = '10s'")
        conn.execute(
            sql.SQL(
                "ALTER TABLE {s}.jobs_live DROP CONSTRAINT IF EXISTS jobs_args_size,"
                " ADD CONSTRAINT jobs_args_size CHECK (pg_column_size(args) <= {n})"
            ).format(s=sql.Identifier(schema), n=sql.Literal(max_bytes))
        )
    log.info("server-side payload cap of schema %s set to %d bytes", schema, max_bytes)


def current_version(conn: psycopg.Connection[Any], schema: str) -> int | None:
    """The schema's applied version, or None when pgqueue is not installed there."""
    exists = conn.execute("SELECT to_regclass(%s)", [f'"{validate_schema(schema)}".migrations']).fetchone()
    if exists is None or exists[0] is None:
        return None
    row = conn.execute(sql.SQL("SELECT max(version) FROM {}.migrations").format(sql.Identifier(schema))).fetchone()
    return None if row is None else row[0]


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
