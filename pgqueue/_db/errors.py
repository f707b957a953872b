"""Where database errors become pgqueue's: the one translation boundary.

What leaves the DB package is one of three kinds:

* pgqueue's public errors (:class:`~pgqueue.SchemaNotInstalledError`,
  :class:`~pgqueue.PayloadTooLargeError`, ...), for refusals a user can act on:
  :func:`enqueue_error` for enqueue, :func:`translated` for everything else;
* the internal signals below, for conditions the runtime handles itself (repair a
  partition, skip a busy one, leave an optional step to autovacuum);
* :class:`psycopg.OperationalError` and pool timeouts, unchanged: the database is
  unreachable right now, and every caller treats that as transient.

Anything else (a bug, a constraint nobody expects) propagates unchanged.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import psycopg
from psycopg import errors as pgerrors

from .._dsn import migrate_hint
from ..errors import (
    ConfigError,
    EnqueueError,
    InvalidQueueError,
    PayloadTooLargeError,
    SchemaNotInstalledError,
    UnknownQueueError,
)
from ..models import RUN_AT_MAX, RUN_AT_MIN
from .conn import AnyConn

__all__ = [
    "LockBusyError",
    "NotPermittedError",
    "PartitionMissingError",
    "enqueue_error",
    "schema_missing",
    "translated",
]


#: SQLSTATEs of a schema without (some of) pgqueue's objects.
_MISSING = (pgerrors.UndefinedTable, pgerrors.UndefinedFunction, pgerrors.UndefinedColumn, pgerrors.InvalidSchemaName)


class PartitionMissingError(Exception):
    """A finished job's day partition does not exist (yet): create it and write again."""


class LockBusyError(Exception):
    """A lock was not granted within the session's ``lock_timeout``."""


class NotPermittedError(Exception):
    """The session's role lacks a privilege that an optional step needs."""


def schema_missing(conn: AnyConn, schema: str) -> SchemaNotInstalledError:
    return SchemaNotInstalledError(
        f"schema {schema!r} lacks pgqueue's tables, views or functions: {migrate_hint(conn, schema)}"
    )


def _is_missing_partition(exc: psycopg.Error) -> bool:
    # PostgreSQL raises check_violation with no constraint name for a row that fits no
    # partition; its message is the only thing that tells it apart from a CHECK.
    return (
        isinstance(exc, pgerrors.CheckViolation)
        and exc.diag.constraint_name is None
        and (exc.diag.message_primary or "").startswith("no partition of relation")
    )


@contextmanager
def translated(
    conn: AnyConn | None,
    schema: str,
    *,
    missing_schema: bool = True,
    partition: bool = False,
    lock: bool = False,
    privilege: bool = False,
    flow: bool = False,
) -> Iterator[None]:
    """Translate what the statements inside raise (sync or async code alike), each rule
    where its caller wants it:

    * ``missing_schema``: missing tables, views, functions -> :class:`SchemaNotInstalledError`
      (``conn`` names the database in the hint);
    * ``partition``: a row that fits no partition -> :class:`PartitionMissingError`;
    * ``lock``: ``lock_timeout`` expired -> :class:`LockBusyError`;
    * ``privilege``: insufficient privilege -> :class:`NotPermittedError`;
    * ``flow``: the flow-control functions' refusals -> :class:`UnknownQueueError` (an
      unknown queue) and :class:`ConfigError` (a bad name, limit or period).
    """
    try:
        yield
    except _MISSING:
        if not missing_schema or conn is None:
            raise
        raise schema_missing(conn, schema) from None
    except pgerrors.CheckViolation as exc:
        if partition and _is_missing_partition(exc):
            raise PartitionMissingError(exc.diag.message_primary) from exc
        raise
    except pgerrors.LockNotAvailable as exc:
        if not lock:
            raise
        raise LockBusyError(exc.diag.message_primary) from exc
    except pgerrors.InsufficientPrivilege as exc:
        if not privilege:
            raise
        raise NotPermittedError(exc.diag.message_primary) from exc
    except pgerrors.UndefinedObject as exc:
        if not flow:
            raise
        raise UnknownQueueError(_with_hint(exc)) from None
    except pgerrors.InvalidParameterValue as exc:
        if not flow:
            raise
        raise ConfigError(_with_hint(exc)) from None


def _with_hint(exc: psycopg.Error) -> str:
    """The database's message without its "pgqueue: " prefix, and its hint."""
    text = (exc.diag.message_primary or str(exc)).removeprefix("pgqueue: ")
    return f"{text} ({exc.diag.message_hint})" if exc.diag.message_hint else text


def enqueue_error(exc: psycopg.Error, conn: AnyConn, schema: str) -> Exception:
    """Map the database's refusal of a job to pgqueue's error, or return it unchanged."""
    if isinstance(exc, _MISSING):
        return SchemaNotInstalledError(
            f"pgqueue is not installed in this database ({exc.diag.message_primary}): {migrate_hint(conn, schema)}"
        )
    if isinstance(exc, pgerrors.CheckViolation) and exc.diag.constraint_name == "jobs_args_size":
        return PayloadTooLargeError(
            "arguments exceed the server's payload limit (constraint jobs_args_size; to raise it, "
            f"{migrate_hint(conn, schema, '--max-payload-bytes', 'N')})"
        )
    if isinstance(exc, pgerrors.CheckViolation) and exc.diag.constraint_name == "jobs_run_at_range":
        return ConfigError(
            f"run_at must be between {RUN_AT_MIN:%Y-%m-%d} and {RUN_AT_MAX:%Y-%m-%d} UTC (constraint jobs_run_at_range)"
        )
    if isinstance(exc, pgerrors.InvalidParameterValue) and "queue" in (exc.diag.message_primary or ""):
        return InvalidQueueError(exc.diag.message_primary)
    if isinstance(exc, pgerrors.InsufficientPrivilege):
        return EnqueueError(
            f"this database role may not enqueue ({exc.diag.message_primary}): grant it the producer "
            "role of the schema (see `pgqueue migrate --print-roles-sql`)"
        )
    return exc
