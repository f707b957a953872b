"""Periodic services: one loop shape for everything a worker does every so often.

A concrete service says what one round does (``run_once()``, which returns a small result
of counts that tests call directly) and, if it needs to, how long to wait after it; this
base supplies the rest:

* the wait before the first round and between rounds: ``interval`` scaled by a random
  factor in ``[1 - jitter, 1 + jitter]``, so processes do not wake in lockstep;
* transient database errors (``transient``): one warning line per failure, then a wait
  taken from ``failure_backoff`` (a :class:`~pgqueue.retry.Backoff`), reset after the next
  success; any other error ends the loop and reaches whoever supervises the task;
* ``start()`` and ``stop()``, both idempotent (stopping a service never started is fine).

The clock is injected: ``sleep`` and ``rand`` default to :func:`asyncio.sleep` and
:func:`random.uniform`, and the unit tests replace them. :class:`Maintainer` starts and
stops a group of services together.
"""

from __future__ import annotations

import abc
import asyncio
import logging
import random
from collections.abc import Awaitable, Callable, Iterable
from contextlib import AbstractAsyncContextManager
from typing import Any, ClassVar, Generic, TypeVar

from .._db.conn import TRANSIENT, AConn, brief
from .._tasks import RESEND, cancel_and_wait
from ..retry import Backoff, Retries

__all__ = ["Connect", "Maintainer", "PeriodicService"]

R = TypeVar("R")


#: A connection from the worker's pool (``pool.connection()``).
Connect = Callable[[], AbstractAsyncContextManager[AConn]]

Sleep = Callable[[float], Awaitable[None]]
Uniform = Callable[[float, float], float]


class PeriodicService(abc.ABC, Generic[R]):
    """Base of a service that runs :meth:`run_once` every ``interval`` seconds."""

    #: What the service is called: its task is ``pgqueue-<name>``.
    name: ClassVar[str]
    #: What a failure line calls one round ("<what> failed (...)").
    what: ClassVar[str]
    #: Errors logged and retried; anything else ends the loop.
    transient: ClassVar[tuple[type[BaseException], ...]] = TRANSIENT
    #: Seconds between cancellations while :meth:`stop` waits (see ``cancel_and_wait``).
    stop_resend: ClassVar[float] = RESEND

    def __init__(
        self,
        *,
        interval: float,
        jitter: float = 0.2,
        failure_backoff: Backoff | None = None,
        log: logging.Logger,
        sleep: Sleep = asyncio.sleep,
        rand: Uniform = random.uniform,
    ) -> None:
        self.interval = interval
        self.jitter = jitter
        # By default a failed round is simply tried again at the next interval.
        backoff = failure_backoff or Backoff(base=interval, factor=1.0, cap=interval, jitter=False)
        self.failures = Retries(backoff)
        self.log = log
        self.sleep = sleep
        self.rand = rand
        self._task: asyncio.Task[None] | None = None

    # -- what a concrete service says ------------------------------------------------

    @abc.abstractmethod
    async def run_once(self) -> R:
        """One round; returns its counts."""

    def report(self, result: R) -> None:
        """Log a round's result (Info only when something happened)."""

    def first_delay(self) -> float:
        """Seconds before the first round: one jittered interval."""
        return self.jittered(self.interval)

    def delay_after(self, result: R) -> float:
        """Seconds between a successful round and the next: one jittered interval."""
        return self.jittered(self.interval)

    def failure_line(self, exc: BaseException, delay: float) -> str:
        return f"{self.what} failed ({brief(exc)}); trying again in {delay:.1f}s"

    # -- the loop --------------------------------------------------------------------

    def jittered(self, seconds: float) -> float:
        return seconds * self.rand(1.0 - self.jitter, 1.0 + self.jitter) if self.jitter else seconds

    async def step(self) -> float:
        """One round with its error handling; returns the seconds to wait before the next."""
        try:
            result = await self.run_once()
        except self.transient as exc:
            task = asyncio.current_task()
            if task is not None and task.cancelling():
                # stop() cancelled a query, and psycopg reported it as QueryCanceled (an
                # OperationalError): that is the stop, not a failure to retry.
                raise asyncio.CancelledError from exc
            delay = self.jittered(self.failures.next())
            self.log.warning("%s", self.failure_line(exc, delay))
            return delay
        self.failures.reset()
        self.report(result)
        return self.delay_after(result)

    async def run(self) -> None:
        """Run until cancelled."""
        await self.sleep(self.first_delay())
        while True:
            await self.sleep(await self.step())

    # -- start / stop ----------------------------------------------------------------

    @property
    def started(self) -> bool:
        return self._task is not None and not self._task.done()

    def start(self) -> asyncio.Task[None]:
        """Start the loop (in the running event loop); a second call returns the same task."""
        if self._task is None or self._task.done():
            self._task = asyncio.create_task(self.run(), name=f"pgqueue-{self.name}")
        return self._task

    async def stop(self) -> None:
        """Cancel the loop and wait for it; fine before start and when called twice."""
        task, self._task = self._task, None
        if task is None:
            return
        await cancel_and_wait([task], resend=self.stop_resend)


class Maintainer:
    """Starts and stops a group of periodic services together."""

    def __init__(self, services: Iterable[PeriodicService[Any]] = ()) -> None:
        self.services: list[PeriodicService[Any]] = list(services)

    def add(self, service: PeriodicService[Any]) -> None:
        self.services.append(service)

    def start(self, on_done: Callable[[asyncio.Task[None]], object] | None = None) -> None:
        """Start every service; ``on_done`` sees each task end (to supervise them)."""
        for service in self.services:
            already = service.started
            task = service.start()
            if on_done is not None and not already:
                task.add_done_callback(on_done)

    async def stop(self) -> None:
        await asyncio.gather(*(service.stop() for service in self.services))
