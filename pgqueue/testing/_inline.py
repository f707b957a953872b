"""Inline mode: a job enqueued while it is on runs as soon as its transaction commits.

``with inline(app):`` wraps, for its duration, enqueue on the app's tasks and the commit
points of psycopg connections (``Connection.commit``, the end of ``conn.transaction()``
blocks and their async twins). Each enqueue remembers its job id on the connection it
used; when that connection's outermost transaction ends, the jobs are claimed and run in
this process (:mod:`._run`), one after the other. A rolled back job does not exist, so
there is nothing to claim: it never runs. An enqueue on an autocommit connection outside
any transaction is committed at once, so its job runs before enqueue returns. Scheduled
jobs (``delay``, ``run_at``) run at once too. ``enqueue_many`` is not covered (use
:func:`pgqueue.testing.drain`).

A handler's error is raised from the commit point (after the commit), unless
``raise_errors=False``; the failed attempt is recorded as a worker would.
"""

from __future__ import annotations

import asyncio
import threading
import weakref
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from typing import Any
from unittest import mock

import psycopg
from psycopg.pq import TransactionStatus

from ..app import App, Task
from ._run import Ran, claim_and_run, task_limits

__all__ = ["InlineRuns", "inline"]


class InlineRuns:
    """What inline mode ran, in order (:attr:`runs`), and what is still pending."""

    def __init__(self, app: App, raise_errors: bool) -> None:
        self.app = app
        self.raise_errors = raise_errors
        self.runs: list[Ran] = []
        self._pending: weakref.WeakKeyDictionary[Any, list[int]] = weakref.WeakKeyDictionary()
        self._lock = threading.Lock()

    def add(self, conn: Any, job_id: int) -> None:
        with self._lock:
            self._pending.setdefault(conn, []).append(job_id)

    def take(self, conn: Any) -> list[int]:
        if conn.info.transaction_status != TransactionStatus.IDLE:
            return []  # still inside a transaction (a savepoint ended, or no commit yet)
        with self._lock:
            return self._pending.pop(conn, [])

    def run(self, job_ids: list[int]) -> None:
        """Run the jobs (those that committed); raise the first handler error."""
        if not job_ids:
            return
        errors: list[Exception] = []
        with psycopg.connect(self.app.dsn, autocommit=True) as conn:
            for job_id in job_ids:
                ran = claim_and_run(self.app, conn, job_id, task_limits(self.app))
                if ran is not None:
                    self.runs.append(ran)
                    if ran.error is not None:
                        errors.append(ran.error)
        if errors and self.raise_errors:
            raise errors[0]


@contextmanager
def inline(app: App, *, raise_errors: bool = True) -> Iterator[InlineRuns]:
    """Run ``app``'s jobs as soon as the transaction that enqueued them commits, for the
    duration of the block; yields an :class:`InlineRuns` listing what ran."""
    state = InlineRuns(app, raise_errors)
    enqueue, enqueue_async = Task.enqueue, Task.enqueue_async
    commit, acommit = psycopg.Connection.commit, psycopg.AsyncConnection.commit
    tx_exit, atx_exit = psycopg.Transaction.__exit__, psycopg.AsyncTransaction.__aexit__

    def inline_enqueue(self: Task[Any, Any], conn: psycopg.Connection[Any], **kwargs: Any) -> Any:
        handle = enqueue(self, conn, **kwargs)
        if self.app is app:
            state.add(conn, int(handle))
            state.run(state.take(conn))
        return handle

    async def inline_enqueue_async(self: Task[Any, Any], conn: psycopg.AsyncConnection[Any], **kwargs: Any) -> Any:
        handle = await enqueue_async(self, conn, **kwargs)
        if self.app is app:
            state.add(conn, int(handle))
            await asyncio.to_thread(state.run, state.take(conn))
        return handle

    def inline_commit(self: psycopg.Connection[Any]) -> None:
        commit(self)
        state.run(state.take(self))

    async def inline_acommit(self: psycopg.AsyncConnection[Any]) -> None:
        await acommit(self)
        await asyncio.to_thread(state.run, state.take(self))

    def inline_tx_exit(self: psycopg.Transaction, exc_type: Any, exc: Any, tb: Any) -> bool:
        swallowed = tx_exit(self, exc_type, exc, tb)
        ids = state.take(self.connection)
        if exc_type is None:
            state.run(ids)
        return swallowed

    async def inline_atx_exit(self: psycopg.AsyncTransaction, exc_type: Any, exc: Any, tb: Any) -> bool:
        swallowed = await atx_exit(self, exc_type, exc, tb)
        ids = state.take(self.connection)
        if exc_type is None:
            await asyncio.to_thread(state.run, ids)
        return swallowed

    with ExitStack() as stack:
        for target, name, replacement in (
            (Task, "enqueue", inline_enqueue),
            (Task, "enqueue_async", inline_enqueue_async),
            (psycopg.Connection, "commit", inline_commit),
            (psycopg.AsyncConnection, "commit", inline_acommit),
            (psycopg.Transaction, "__exit__", inline_tx_exit),
            (psycopg.AsyncTransaction, "__aexit__", inline_atx_exit),
        ):
            stack.enter_context(mock.patch.object(target, name, replacement))
        yield state
