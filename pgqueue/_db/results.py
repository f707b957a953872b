"""The DB layer of results: marking jobs as awaited, reading finished jobs' results, and the
results channel's LISTEN (``sql/queries/results.sql``). Storing a result is part of the
worker's completion (:mod:`.jobs`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

from .conn import AConn, Conn, expect_row
from .errors import translated
from .sql import queries_for

__all__ = ["ResultRow", "ResultsDB"]


class ResultRow(NamedTuple):
    """A job as a waiter sees it: its state, and once finished its result (JSON text, None
    when there is none) and its last error."""

    id: int
    state: str
    result: str | None
    error_type: str | None
    error_message: str | None


class ResultsDB:
    def __init__(self, schema: str) -> None:
        self.schema = schema
        self.q = queries_for(schema)

    async def listen(self, conn: AConn) -> None:
        """LISTEN on the schema's results channel."""
        with translated(conn, self.schema):
            await conn.execute(self.q["results_listen"])

    async def mark_awaited(self, conn: AConn, ids: Sequence[int]) -> int:
        """Flag the live jobs among ``ids`` as awaited (see ``job_await``); returns how
        many were flagged now. Read their state with :meth:`read` afterwards, in a later
        statement."""
        with translated(conn, self.schema):
            cur = await conn.execute(self.q["job_await"], {"ids": list(ids)})
            return int(expect_row(await cur.fetchone(), "job_await")[0])

    async def read(self, conn: AConn, ids: Sequence[int]) -> list[ResultRow]:
        """The jobs of ``ids`` that exist (``job_results``)."""
        with translated(conn, self.schema):
            cur = await conn.execute(self.q["job_results"], {"ids": list(ids)})
            return [ResultRow(*row) for row in await cur.fetchall()]

    def read_sync(self, conn: Conn, ids: Sequence[int]) -> list[ResultRow]:
        """:meth:`read` on a blocking connection (the caller's, in its transaction)."""
        with translated(conn, self.schema):
            return [ResultRow(*row) for row in conn.execute(self.q["job_results"], {"ids": list(ids)}).fetchall()]

    async def ping(self, conn: AConn) -> None:
        """One round trip that proves the connection lives."""
        await conn.execute(self.q["connection_ping"])
