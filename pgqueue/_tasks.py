"""Stopping asyncio tasks for good."""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from typing import Any

__all__ = ["RESEND", "cancel_and_wait", "wait_set"]


#: Seconds between cancellations of a task that is still running: longer than psycopg
#: takes to clean up after one (it sends the server a cancel request, up to 5 s, then
#: reads what the query still returns, up to 5 s), so a second one cannot cut that short.
RESEND = 12.0


async def cancel_and_wait(tasks: Iterable[asyncio.Task[Any]], *, resend: float = RESEND) -> None:
    """Cancel ``tasks`` and wait until every one is done, cancelling again every ``resend``
    seconds those still running. A single cancel() is not enough: on Python 3.11,
    ``asyncio.wait_for`` (which psycopg_pool uses while a client waits for a connection)
    swallows a cancellation that arrives just as what it waits for finishes, and the task
    runs on. Their exceptions are retrieved (their owners log them where they matter)."""
    tasks = list(tasks)
    pending = {t for t in tasks if not t.done()}
    for t in pending:
        t.cancel()
    while pending:
        _, pending = await asyncio.wait(pending, timeout=resend)
        for t in pending:
            t.cancel()
    for t in tasks:
        if not t.cancelled():
            t.exception()


async def wait_set(event: asyncio.Event, seconds: float) -> bool:
    """Wait until ``event`` is set, for at most ``seconds``; True if it was set. With
    ``asyncio.timeout``, not ``wait_for``: no task per wait, a ``set()`` resumes the caller
    directly (``wait_for``'s inner task takes two more turns of the loop), and a
    cancellation from outside is never swallowed."""
    try:
        async with asyncio.timeout(seconds):
            return await event.wait()
    except TimeoutError:
        return False
