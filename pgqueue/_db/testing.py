"""The statements of :mod:`pgqueue.testing`: claiming one job in the test's process,
reading waiting jobs, moving the test clock, cloning test databases. Blocking
connections only: tests call these from plain functions."""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import psycopg
from psycopg import sql

from ..models import Job
from .conn import Conn
from .sql import queries_for, validate_schema

__all__ = [
    "DatabaseState",
    "TestingDB",
    "WaitingJob",
    "clone_database",
    "database_state",
    "drop_database",
    "restore_database",
]


@dataclass(frozen=True, slots=True)
class WaitingJob:
    """A job waiting to run (available, scheduled or retryable), as tests see it."""

    __test__ = False  # not a pytest test class

    id: int
    task: str
    queue: str
    args: dict[str, Any]
    state: str
    priority: int
    run_at: datetime
    attempt: int
    max_attempts: int | None
    unique_key: str | None


class TestingDB:
    __test__ = False

    def __init__(self, schema: str) -> None:
        self.schema = validate_schema(schema)
        self.q = queries_for(schema)

    @staticmethod
    def _task_params(tasks: Mapping[str, int]) -> dict[str, Any]:
        return {"tasks": list(tasks), "task_max_attempts": list(tasks.values())}

    def claim_next(
        self, conn: Conn, *, queues: Sequence[str] | None, tasks: Mapping[str, int], lease: float, worker_id: str
    ) -> Job | None:
        """Claim the next due job of ``queues`` (None: all) whose task is in ``tasks``
        (name -> default max_attempts)."""
        params = {"queues": None if queues is None else list(queues), "lease": lease, "worker_id": worker_id}
        row = conn.execute(self.q["testing_claim_next"], {**params, **self._task_params(tasks)}).fetchone()
        return None if row is None else Job(*row)

    def claim_job(
        self, conn: Conn, job_id: int, *, tasks: Mapping[str, int], lease: float, worker_id: str
    ) -> Job | None:
        """Claim job ``job_id`` whatever its timer; None when it is not waiting (or does
        not exist: its transaction rolled back)."""
        params = {"id": job_id, "lease": lease, "worker_id": worker_id, **self._task_params(tasks)}
        row = conn.execute(self.q["testing_claim_job"], params).fetchone()
        return None if row is None else Job(*row)

    def waiting_jobs(self, conn: Conn, *, task: str | None, queue: str | None) -> list[WaitingJob]:
        params = {"task": task, "queue": queue}
        return [WaitingJob(*row) for row in conn.execute(self.q["testing_waiting_jobs"], params).fetchall()]

    def next_timer(self, conn: Conn, *, queues: Sequence[str] | None, tasks: Mapping[str, int]) -> float | None:
        """Seconds until the first waiting job of ``queues`` is due (None: none waits)."""
        params = {"queues": None if queues is None else list(queues), **self._task_params(tasks)}
        row = conn.execute(self.q["testing_next_timer"], params).fetchone()
        return None if row is None or row[0] is None else float(row[0])

    def advance(self, conn: Conn, seconds: float, *, queues: Sequence[str] | None) -> int:
        """Move the waiting jobs' timers ``seconds`` earlier; returns how many became due."""
        params = {"seconds": seconds, "queues": None if queues is None else list(queues)}
        row = conn.execute(self.q["testing_advance"], params).fetchone()
        return 0 if row is None else int(row[0])


def clone_database(conn: Conn, name: str, template: str) -> None:
    """``CREATE DATABASE name TEMPLATE template`` (``conn`` in autocommit)."""
    conn.execute(queries_for("pgqueue").compose("testing_create_database", {"name": name, "template": template}))


def drop_database(conn: Conn, name: str) -> None:
    """Drop database ``name`` if it exists, ending its sessions (``conn`` in autocommit)."""
    conn.execute(queries_for("pgqueue").compose("testing_drop_database", {"name": name}))


# -- reusing a test database ---------------------------------------------------------------

Table = tuple[str, str]


@dataclass(frozen=True, slots=True)
class DatabaseState:
    """What a test database held when it was fresh, to put it back after a test."""

    #: The statement that reads :attr:`structure`.
    structure_query: sql.Composed
    #: Each catalog's row count and sum of xmins (``testing_catalogs``): any DDL changes it.
    structure: list[tuple[str, int, int]]
    #: The tables that had rows, with their row count and digest.
    seeded: dict[Table, tuple[int, str]]
    #: Every sequence (quoted name) with its start and last value (None: never used).
    sequences: dict[str, tuple[int, int | None]]


def _q() -> Any:
    return queries_for("pgqueue")


def _table_digest(conn: Conn, table: Table) -> tuple[int, str]:
    query = _q().compose("testing_table_digest", {"table_schema": table[0], "table_name": table[1]})
    row = conn.execute(query).fetchone()
    return (0, "") if row is None else (int(row[0]), str(row[1]))


def _used_tables(conn: Conn) -> list[Table]:
    return [(str(s), str(n)) for s, n in conn.execute(_q()["testing_used_tables"]).fetchall()]


def _structure_query(conn: Conn) -> sql.Composed:
    catalogs = [str(name) for (name,) in conn.execute(_q()["testing_catalogs"]).fetchall()]
    parts = [_q().compose("testing_catalog_digest", {"catalog": name}, {"catalog_name": name}) for name in catalogs]
    return sql.SQL(" UNION ALL ").join([*parts, sql.SQL(_q()["testing_database_digest"].decode())])


def _structure(conn: Conn, query: sql.Composed) -> list[tuple[str, int, int]]:
    rows = conn.execute(query, prepare=True).fetchall()  # planning 50 scans costs more than running them
    return [(str(name), int(count), int(xmins)) for name, count, xmins in rows]


def _sequences(conn: Conn) -> dict[str, tuple[int, int | None]]:
    rows = conn.execute(_q()["testing_sequences"]).fetchall()
    return {str(name): (int(start), None if last is None else int(last)) for name, start, last in rows}


def database_state(conn: Conn) -> DatabaseState:
    """The state of the fresh database ``conn`` is connected to (autocommit)."""
    seeded = {}
    for table in _used_tables(conn):
        count, digest = _table_digest(conn, table)
        if count:
            seeded[table] = (count, digest)
    query = _structure_query(conn)
    return DatabaseState(query, _structure(conn, query), seeded, _sequences(conn))


def _deletion_order(conn: Conn, tables: list[Table]) -> list[Table]:
    """``tables`` with each table before those it references."""
    pending = set(tables)
    references = [((a, b), (c, d)) for a, b, c, d in conn.execute(_q()["testing_foreign_keys"]).fetchall()]
    order: list[Table] = []
    while pending:
        free = sorted(t for t in pending if not any(ref == t and src in pending for src, ref in references))
        if not free:  # a cycle: the deletes may fail, and the database is then replaced
            free = sorted(pending)
        order.extend(free)
        pending.difference_update(free)
    return order


class _NotRestored(Exception):  # noqa: N818
    pass


def _restore_rows(conn: Conn, state: DatabaseState) -> None:
    used = _used_tables(conn)
    for table in used:
        if table in state.seeded and _table_digest(conn, table) != state.seeded[table]:
            raise _NotRestored(f"{table} differs from the template's rows")
    for table in _deletion_order(conn, [t for t in used if t not in state.seeded]):
        conn.execute(_q().compose("testing_empty_table", {"table_schema": table[0], "table_name": table[1]}))
    for table in _used_tables(conn):  # what the deletes did (triggers): only the template's rows left
        if _table_digest(conn, table) != state.seeded.get(table, (0, _EMPTY_DIGEST)):
            raise _NotRestored(f"{table} still has rows")


_EMPTY_DIGEST = "d41d8cd98f00b204e9800998ecf8427e"  # md5 of ''


#: How long the sessions a test left get to exit (seconds).
SESSIONS_EXIT = 5.0


def _end_sessions(conn: Conn) -> bool:
    """End the other sessions on the database; False if one is still there after
    :data:`SESSIONS_EXIT` seconds, or a prepared transaction is."""
    row = conn.execute(_q()["testing_end_sessions"]).fetchone()
    pids = [] if row is None else list(row[0])
    deadline = time.monotonic() + SESSIONS_EXIT
    while pids and time.monotonic() < deadline:
        row = conn.execute(_q()["testing_sessions_left"], {"pids": pids}).fetchone()
        pids = [] if row is None else list(row[0])
    prepared = conn.execute(_q()["testing_prepared_transactions"]).fetchone()
    return not pids and prepared is not None and prepared[0] == 0


def restore_database(conn: Conn, state: DatabaseState) -> bool:
    """Put the database ``conn`` (autocommit) is connected to back to ``state``, if only
    its rows and sequences changed: end the other sessions, delete the rows tests added,
    reset the sequences. False (having changed nothing, or only rows) when that cannot
    make it equal: its structure changed (any DDL), a session or a prepared transaction
    outlived the test, a table of the template's rows was changed."""
    if not _end_sessions(conn):
        return False
    if _structure(conn, state.structure_query) != state.structure:
        return False
    try:
        with conn.transaction():
            _restore_rows(conn, state)
    except (_NotRestored, psycopg.errors.IntegrityError):
        return False
    sequences = _sequences(conn)
    if sequences.keys() != state.sequences.keys():
        return False
    for name, (start, last) in state.sequences.items():
        if sequences[name][1] != last:
            params = {"sequence": name, "value": start if last is None else last, "called": last is not None}
            conn.execute(_q()["testing_set_sequence"], params)
    return True
