"""Flow control statements of operators: pause, resume, limits, and reading them back.

Every change is one call of a SQL function of migration 0008 (which validates, refuses an
unknown queue and wakes the workers); several changes made together run in the caller's
transaction. Errors leave as pgqueue's (see :func:`~pgqueue._db.errors.translated`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from psycopg.rows import dict_row

from .conn import Conn, expect_row
from .errors import translated
from .sql import queries_for

__all__ = [
    "add_queue",
    "pause_queue",
    "queue_controls",
    "resume_queue",
    "set_key_limit",
    "set_key_rate",
    "set_queue_limit",
    "set_queue_rate",
    "set_task_limit",
    "task_controls",
]

Row = dict[str, Any]


def _call(conn: Conn, schema: str, query: str, params: Mapping[str, Any]) -> Any:
    with translated(conn, schema, flow=True):
        row = conn.execute(queries_for(schema)[query], params).fetchone()
    return expect_row(row, query)[0]


def add_queue(conn: Conn, schema: str, queue: str) -> bool:
    return bool(_call(conn, schema, "queue_add", {"queue": queue}))


def pause_queue(conn: Conn, schema: str, queue: str) -> bool:
    return bool(_call(conn, schema, "queue_pause", {"queue": queue}))


def resume_queue(conn: Conn, schema: str, queue: str) -> bool:
    return bool(_call(conn, schema, "queue_resume", {"queue": queue}))


def set_queue_limit(conn: Conn, schema: str, queue: str, concurrency: int | None) -> None:
    _call(conn, schema, "queue_set_limit", {"queue": queue, "concurrency": concurrency})


def set_queue_rate(conn: Conn, schema: str, queue: str, limit: int | None, period: float | None) -> None:
    _call(conn, schema, "queue_set_rate", {"queue": queue, "limit": limit, "period": period})


def set_key_limit(conn: Conn, schema: str, queue: str, concurrency: int | None, fifo: bool) -> None:
    _call(conn, schema, "queue_set_key_limit", {"queue": queue, "concurrency": concurrency, "fifo": fifo})


def set_key_rate(conn: Conn, schema: str, queue: str, limit: int | None, period: float | None) -> None:
    _call(conn, schema, "queue_set_key_rate", {"queue": queue, "limit": limit, "period": period})


def set_task_limit(conn: Conn, schema: str, task: str, concurrency: int | None) -> None:
    _call(conn, schema, "task_set_limit", {"task": task, "concurrency": concurrency})


def queue_controls(conn: Conn, schema: str, queue: str | None = None) -> list[Row]:
    with translated(conn, schema), conn.cursor(row_factory=dict_row) as cur:
        return cur.execute(queries_for(schema)["queue_controls"], {"queue": queue}).fetchall()


def task_controls(conn: Conn, schema: str) -> list[Row]:
    with translated(conn, schema), conn.cursor(row_factory=dict_row) as cur:
        return cur.execute(queries_for(schema)["task_controls"]).fetchall()
