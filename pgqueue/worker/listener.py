"""One LISTEN connection per worker process, turning notifications into wake-ups.

The listener is an optimisation, never a dependency: while it is down the fetcher polls,
and each (re)connection triggers a catch-up fetch for anything missed in between. A quiet
connection is health-checked every ``health_interval`` seconds, so a silently dead socket
is noticed and replaced.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Collection
from typing import Any, TypeVar

import psycopg

from .._db.conn import application_name, brief, within
from .._db.jobs import JobsDB
from .._wake import MAX_WINDOW, parse_echo
from ..retry import Backoff, Retries

__all__ = ["FLOW_CHANGED", "Listener"]

#: The payload of the notification sent when a pause or a limit changes (no queue name
#: starts with '*').
FLOW_CHANGED = "*flow"

#: Added to an echo's delay: the producer's and this process's clocks may run at slightly
#: different rates, and the delay is whole milliseconds.
ECHO_MARGIN = 0.002

T = TypeVar("T")

log = logging.getLogger("pgqueue.listener")


class Listener:
    def __init__(
        self,
        dsn: Callable[[], str],
        db: JobsDB,
        queues: Collection[str],
        on_wake: Callable[[], None],
        *,
        health_interval: float = 15.0,
        max_backoff: float = 5.0,
        on_flow: Callable[[], None] | None = None,
    ) -> None:
        self.dsn = dsn  # asked for at each connection: the worker knows it once it runs
        self.db = db  # LISTENs on its schema's wake-up channel
        self.queues = frozenset(queues)
        self.on_wake = on_wake
        #: Called when an operator changed a pause or a limit (the '*flow' notification).
        self.on_flow = on_flow
        self.health_interval = health_interval
        self.max_backoff = max_backoff
        self.connected = asyncio.Event()
        self.reconnects = 0
        self.backend_pid: int | None = None
        self.echoes = 0  # echo requests heard (a test signal)

    async def run(self) -> None:
        retries = Retries(Backoff(base=0.05, cap=self.max_backoff, jitter=False))
        while True:
            conn: psycopg.AsyncConnection[Any] | None = None
            try:
                dsn = self.dsn()
                conn = await psycopg.AsyncConnection.connect(dsn, autocommit=True, **application_name(dsn, "listener"))
                await self.db.listen(conn)
                self.backend_pid = conn.info.backend_pid
                if self.reconnects:
                    log.info("listener reconnected (backend pid %s)", self.backend_pid)
                self.connected.set()
                retries.reset()
                self.on_wake()  # catch up on anything enqueued while we were not listening
                # ... and once more when any producer's NOTIFY window opened before we
                # listened has closed (pgqueue/_wake.py): its quiet jobs commit before that.
                asyncio.get_running_loop().call_later(MAX_WINDOW, self.on_wake)
                await self._listen(conn)
            except asyncio.CancelledError:
                raise
            except psycopg.Error as exc:
                if self.on_flow is not None:
                    self.on_flow()  # changes may have come while we could not hear them
                was_connected = self.connected.is_set()
                self.connected.clear()
                self.reconnects += 1
                if was_connected:
                    log.warning("listener connection lost (%s); polling until it is back", brief(exc))
                delay = retries.next()
                if not was_connected:
                    log.warning("listener cannot connect (%s); retrying in %.2fs", brief(exc), delay)
                self.on_wake()
                await asyncio.sleep(delay)
            finally:
                self.connected.clear()
                if conn is not None:
                    await conn.close()

    async def _listen(self, conn: psycopg.AsyncConnection[Any]) -> None:
        while True:
            async for notify in conn.notifies(timeout=self.health_interval):
                if notify.payload in self.queues:
                    self.on_wake()
                elif notify.payload == FLOW_CHANGED and self.on_flow is not None:
                    self.on_flow()
                elif (echo := parse_echo(notify.payload)) is not None and echo[0] in self.queues:
                    # A fast producer skips its NOTIFYs for a while: wake again once that
                    # window has closed, so whatever it committed meanwhile is claimed.
                    self.echoes += 1
                    asyncio.get_running_loop().call_later(echo[1] + ECHO_MARGIN, self.on_wake)
            # Quiet for a while: prove the connection lives. A socket whose peer vanished
            # without a FIN or RST (a partition, a stateful firewall forgetting it) would
            # block this forever, leaving a "connected" listener that hears nothing.
            await within(self.health_interval, self.db.ping(conn), "health check")
