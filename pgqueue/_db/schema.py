"""The DB layer of installing and shaping a schema: migrations, the payload cap, the
finished-job day partitions, the roles script and advisory locks taken by name.

Every statement is a named query of ``sql/queries/schema.sql`` (or ``sql/roles.sql``);
callers pass a connection and get plain values back. Synchronous: migrate, partitions
and retention run on blocking connections.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta

import psycopg
from psycopg import sql

from .._dsn import migrate_hint
from ..errors import SchemaNotInstalledError
from .conn import Conn, expect_row
from .errors import translated
from .sql import LockPurpose, Migration, lock_name, queries_for, sql_root

__all__ = [
    "PartitionRow",
    "attach_day_partition",
    "brin_recent_indexes",
    "brin_summarize",
    "create_day_partition_via_owner",
    "create_migrations_table",
    "db_now",
    "drop_day_partition",
    "drop_day_partition_via_owner",
    "lock_timeout",
    "lock_try",
    "lock_wait",
    "migrations_applied",
    "owns_finished_parents",
    "partition_list",
    "payload_limit",
    "record_migration",
    "registry_cleanup",
    "reset_role",
    "roles_script",
    "roles_script_text",
    "run_migration",
    "run_roles_script",
    "schema_version",
    "set_payload_limit",
    "set_role",
    "settings_put",
    "unique_keys_prune",
    "utc_day",
]


# -- locks and the clock ------------------------------------------------------------------


def lock_wait(conn: Conn, purpose: LockPurpose, schema: str) -> None:
    """Wait for the transaction-scoped advisory lock of ``purpose`` in ``schema``.

    Raises:
        LockBusyError: not granted within the transaction's ``lock_timeout``.
    """
    with translated(conn, schema, missing_schema=False, lock=True):
        conn.execute(queries_for(schema)["lock_wait"], {"lock_name": lock_name(purpose, schema)})


def lock_try(conn: Conn, purpose: LockPurpose, schema: str) -> bool:
    """Take the lock if it is free (until the transaction ends); False when another holds it."""
    row = conn.execute(queries_for(schema)["lock_try"], {"lock_name": lock_name(purpose, schema)}).fetchone()
    return bool(row and row[0])


def lock_timeout(conn: Conn, schema: str, seconds: float) -> None:
    """``SET LOCAL lock_timeout`` for the current transaction."""
    conn.execute(queries_for(schema)["lock_timeout_local"], {"timeout": f"{int(seconds * 1000)}ms"})


def db_now(conn: Conn, schema: str) -> datetime:
    """The database clock (the transaction's start)."""
    row = expect_row(conn.execute(queries_for(schema)["db_now"]).fetchone(), "db_now")
    return row[0]  # type: ignore[no-any-return]


# -- migrations ---------------------------------------------------------------------------


def set_role(conn: Conn, schema: str, role: str) -> None:
    conn.execute(queries_for(schema).compose("role_set", identifiers={"role": role}))


def reset_role(conn: Conn, schema: str) -> None:
    conn.execute(queries_for(schema)["role_reset"])


def create_migrations_table(conn: Conn, schema: str) -> None:
    """Create the schema (only when missing) and its version table."""
    q = queries_for(schema)
    # Only when missing: CREATE SCHEMA IF NOT EXISTS needs CREATE on the database even
    # when the schema exists, which the owner role of an installed schema need not have.
    if conn.execute(q["schema_missing"], {"schema_name": schema}).fetchone() == (True,):
        conn.execute(q["schema_create"])
    conn.execute(q["migrations_create"])


def migrations_applied(conn: Conn, schema: str) -> set[int]:
    return {r[0] for r in conn.execute(queries_for(schema)["migrations_applied"])}


def run_migration(conn: Conn, schema: str, migration: Migration) -> None:
    conn.execute(migration.bound(schema))


def record_migration(conn: Conn, schema: str, migration: Migration) -> None:
    conn.execute(queries_for(schema)["migration_record"], {"version": migration.version, "name": migration.name})


def schema_version(conn: Conn, schema: str) -> int | None:
    """The applied version, or None when the schema has no version table."""
    q = queries_for(schema)
    exists = conn.execute(q["migrations_exist"], {"table": f'"{schema}".migrations'}).fetchone()
    if exists is None or exists[0] is None:
        return None
    row = conn.execute(q["schema_version"]).fetchone()
    return None if row is None else int(row[0])


def payload_limit(conn: Conn, schema: str) -> int | None:
    row = conn.execute(queries_for(schema)["payload_limit"], {"schema_name": schema}).fetchone()
    return None if row is None else int(row[0])


def set_payload_limit(conn: Conn, schema: str, max_bytes: int) -> None:
    conn.execute(queries_for(schema).compose("payload_limit_set", literals={"max_bytes": max_bytes}))


# -- finished-job day partitions ----------------------------------------------------------


@dataclass(frozen=True, slots=True)
class PartitionRow:
    parent: str  #: jobs_completed, jobs_discarded or jobs_cancelled
    child: str  #: <parent>_YYYYMMDD
    day: date  #: the UTC day it holds
    reltuples: int  #: the planner's row estimate (-1: never analysed)


def partition_list(conn: Conn, schema: str) -> list[PartitionRow]:
    """The finished-job day partitions, oldest day first."""
    rows = conn.execute(queries_for(schema)["partition_list"], {"schema_name": schema}).fetchall()
    return [PartitionRow(r[0], r[1], r[2], int(r[3])) for r in rows]


def owns_finished_parents(conn: Conn, schema: str) -> bool:
    row = conn.execute(queries_for(schema)["partition_owner_is_me"], {"table": f'"{schema}".jobs_completed'}).fetchone()
    return bool(row and row[0])


def attach_day_partition(conn: Conn, schema: str, parent: str, child: str, day: date) -> None:
    """Create ``child`` standalone and attach it to ``parent`` for the UTC ``day``."""
    q = queries_for(schema)
    names = {"parent": parent, "child": child}
    conn.execute(q.compose("partition_create", identifiers=names))
    bounds = {"lo": f"{day.isoformat()} 00:00:00+00", "hi": f"{(day + timedelta(days=1)).isoformat()} 00:00:00+00"}
    conn.execute(q.compose("partition_attach", identifiers=names, literals=bounds))


def create_day_partition_via_owner(conn: Conn, schema: str, parent: str, day: date) -> None:
    """Create a day partition through the owner's SECURITY DEFINER function (a worker
    role may not create tables; see pgqueue.roles).

    Raises:
        SchemaNotInstalledError: the function is missing (the roles were never installed).
    """
    try:
        conn.execute(queries_for(schema)["partition_create_via_owner"], {"parent": parent, "day": day})
    except psycopg.errors.UndefinedFunction:
        raise SchemaNotInstalledError(
            f"this role does not own schema {schema!r} and cannot create its day partitions: "
            f"{migrate_hint(conn, schema, '--create-roles')} as a superuser (it installs create_partition() "
            "for the worker role), or run the worker as the schema's owner"
        ) from None


def drop_day_partition(conn: Conn, schema: str, child: str) -> None:
    """DROP a day partition (the session owns it).

    Raises:
        LockBusyError: the parent's lock was not granted within ``lock_timeout``.
    """
    with translated(conn, schema, missing_schema=False, lock=True):
        conn.execute(queries_for(schema).compose("partition_drop", identifiers={"child": child}))


def drop_day_partition_via_owner(conn: Conn, schema: str, child: str) -> None:
    """Drop a day partition through the owner's function (see :func:`drop_day_partition`)."""
    with translated(conn, schema, missing_schema=False, lock=True):
        conn.execute(queries_for(schema)["partition_drop_via_owner"], {"child": child})


# -- retention's bookkeeping --------------------------------------------------------------


def settings_put(conn: Conn, schema: str, names: list[str], values: list[str], *, by: str) -> None:
    """Record the settings the maintenance leader applied (values are JSON texts)."""
    conn.execute(queries_for(schema)["settings_put"], {"names": names, "values": values, "by": by})


def registry_cleanup(conn: Conn, schema: str, grace: float) -> int:
    """Remove registrations that expired more than ``grace`` seconds ago; returns how many."""
    row = conn.execute(queries_for(schema)["registry_cleanup"], {"grace": grace}).fetchone()
    return int(row[0]) if row else 0


def unique_keys_prune(
    conn: Conn, schema: str, *, after: str, batch: int, kept_since: datetime | None
) -> tuple[int, str | None]:
    """Prune the next ``batch`` unique-ledger rows in key order after ``after`` of those
    that hold nothing any more (one statement); ``kept_since``: the oldest finished_at
    retention still keeps (None: do not look for holders retention removed). Returns how
    many went and the last key looked at (None: no rows left)."""
    row = conn.execute(
        queries_for(schema)["unique_keys_prune"], {"after": after, "batch": batch, "kept_since": kept_since}
    ).fetchone()
    return (0, None) if row is None else (int(row[0]), row[1])


def brin_recent_indexes(conn: Conn, schema: str) -> list[str]:
    """Qualified names of the BRIN indexes on today's and yesterday's finished partitions."""
    return [r[0] for r in conn.execute(queries_for(schema)["brin_recent_indexes"], {"schema": schema}).fetchall()]


def brin_summarize(conn: Conn, schema: str, index: str) -> int:
    """Summarise an index's new block ranges; returns how many were added.

    Raises:
        NotPermittedError: this role may not (only the owner may).
    """
    with translated(conn, schema, missing_schema=False, privilege=True):
        row = conn.execute(queries_for(schema)["brin_summarize"], {"index": index}).fetchone()
    return int(row[0]) if row else 0


# -- roles --------------------------------------------------------------------------------


def roles_script(schema: str, roles: Mapping[str, str]) -> sql.Composed:
    """``sql/roles.sql`` bound to ``schema`` and the role names (by kind: owner, ...)."""
    text = (sql_root() / "roles.sql").read_text("utf-8")  # our own package file, never user input
    params: dict[str, sql.Composable] = {"schema": sql.Identifier(schema), "schema_name": sql.Literal(schema)}
    for kind, name in roles.items():
        params[kind] = sql.Identifier(name)
        params[f"{kind}_name"] = sql.Literal(name)
    return sql.SQL(text).format(**params)


def roles_script_text(schema: str, roles: Mapping[str, str]) -> str:
    """The roles script for ``psql``, wrapped in one transaction."""
    body = roles_script(schema, roles).as_string(None)
    return f"BEGIN;\n\n{body.strip()}\n\nCOMMIT;\n"


def run_roles_script(conn: Conn, schema: str, roles: Mapping[str, str]) -> None:
    with conn.transaction():
        conn.execute(roles_script(schema, roles))


def utc_day(now: datetime) -> date:
    """The UTC day of a database time (partition bounds are UTC days)."""
    return now.astimezone(UTC).date()
