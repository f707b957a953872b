"""Stopping asyncio tasks for good."""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from typing import Any

__all__ = ["cancel_and_wait"]


async def cancel_and_wait(tasks: Iterable[asyncio.Task[Any]], *, resend: float = 1.0) -> None:
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
