"""Least-privilege roles for one pgqueue schema: owner, producer, worker, inspector.

The SQL lives in ``sql/roles.sql``; this module names the roles, renders the template with
validated, quoted identifiers and runs it (or returns it for a DBA to run). Role names
are ``<prefix>_owner``, ``<prefix>_producer``, ``<prefix>_worker`` and
``<prefix>_inspector``; the prefix defaults to the schema name. The roles are NOLOGIN
groups: grant them to login users (``GRANT pgqueue_worker TO app_worker``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import psycopg

from ._db import schema as db
from ._db.sql import validate_schema
from .errors import ConfigError

__all__ = ["RoleNames", "apply_roles", "render_roles_sql", "role_names"]

_PREFIX = re.compile(r"[a-z_][a-z0-9_]{0,47}")


@dataclass(frozen=True)
class RoleNames:
    owner: str
    producer: str
    worker: str
    inspector: str

    def all(self) -> tuple[str, str, str, str]:
        return (self.owner, self.producer, self.worker, self.inspector)


def role_names(schema: str, prefix: str | None = None) -> RoleNames:
    """The four role names of ``schema``; raises :class:`ConfigError` on a bad prefix."""
    validate_schema(schema)
    prefix = schema if prefix is None else prefix
    if not isinstance(prefix, str) or not _PREFIX.fullmatch(prefix) or prefix.startswith("pg_"):
        raise ConfigError(
            f"invalid role prefix {prefix!r}: use 1-48 lowercase letters, digits or _, not starting with a digit or pg_"
        )
    return RoleNames(f"{prefix}_owner", f"{prefix}_producer", f"{prefix}_worker", f"{prefix}_inspector")


def _by_kind(schema: str, names: RoleNames) -> dict[str, str]:
    if schema == "public":
        raise ConfigError("roles need pgqueue in its own schema, not public")
    return dict(zip(("owner", "producer", "worker", "inspector"), names.all(), strict=True))


def render_roles_sql(schema: str, prefix: str | None = None) -> str:
    """The roles SQL for ``schema``, ready for ``psql`` (wrapped in one transaction)."""
    return db.roles_script_text(schema, _by_kind(schema, role_names(schema, prefix)))


def apply_roles(conn: psycopg.Connection[Any], schema: str, prefix: str | None = None) -> RoleNames:
    """Create the roles (when missing), give the schema to the owner role and grant the
    others their privileges, in one transaction. Needs a superuser connection."""
    names = role_names(schema, prefix)
    db.run_roles_script(conn, schema, _by_kind(schema, names))
    return names
