"""Reading the Django settings: which database, which schema, and that database's psycopg
3 connection (the one Django itself uses, in Django's transaction)."""

from __future__ import annotations

from typing import Any

import psycopg
from django.conf import settings
from django.db import connections
from django.db.backends.base.base import BaseDatabaseWrapper
from psycopg.conninfo import make_conninfo

from ...errors import ConfigError

__all__ = ["database_alias", "django_connection", "dsn", "psycopg_connection", "schema", "setting"]

#: Connection parameters Django passes to psycopg that are not libpq's.
_NOT_LIBPQ = {"cursor_factory", "context", "prepare_threshold", "server_side_binding", "assume_role", "pool"}


def setting(name: str, default: Any = None) -> Any:
    """One key of the ``PGQUEUE`` settings dict."""
    values = getattr(settings, "PGQUEUE", None) or {}
    if not isinstance(values, dict):
        raise ConfigError(f"settings.PGQUEUE must be a dict, got {values!r}")
    return values.get(name, default)


def database_alias(using: str | None = None) -> str:
    return using or str(setting("DATABASE", "default"))


def schema() -> str:
    return str(setting("SCHEMA", "pgqueue"))


def django_connection(using: str | None = None) -> BaseDatabaseWrapper:
    """Django's connection for ``using``, checked to be PostgreSQL on psycopg 3.

    Raises:
        ConfigError: another database engine, or PostgreSQL through psycopg2.
    """
    alias = database_alias(using)
    if alias not in settings.DATABASES:
        raise ConfigError(f"pgqueue: no database {alias!r} in settings.DATABASES (PGQUEUE['DATABASE'])")
    conn = connections[alias]
    if conn.vendor != "postgresql":
        raise ConfigError(
            f"pgqueue needs PostgreSQL, but Django's database {alias!r} is {conn.vendor} "
            f"({conn.settings_dict['ENGINE']})"
        )
    from django.db.backends.postgresql.psycopg_any import is_psycopg3

    if not is_psycopg3:
        raise ConfigError(
            f"pgqueue enqueues on psycopg 3 connections, but Django's database {alias!r} uses psycopg2: "
            "install psycopg (3) and uninstall psycopg2 (Django prefers psycopg 3 when both are there)"
        )
    return conn


def psycopg_connection(using: str | None = None) -> psycopg.Connection[Any]:
    """The psycopg connection Django uses for ``using``, in Django's current transaction
    (inside ``transaction.atomic()``, the atomic block's)."""
    conn = django_connection(using)
    conn.ensure_connection()
    raw = conn.connection
    if not isinstance(raw, psycopg.Connection):
        raise ConfigError(f"pgqueue: Django's database {conn.alias!r} has no psycopg 3 connection ({raw!r})")
    return raw


def dsn(using: str | None = None) -> str:
    """A libpq connection string for Django's database ``using`` (for workers and commands,
    which hold connections of their own)."""
    params = django_connection(using).get_connection_params()
    kept = {k: v for k, v in params.items() if k not in _NOT_LIBPQ and isinstance(v, str | int) and v != ""}
    return make_conninfo("", **kept)
