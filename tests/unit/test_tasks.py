"""pgqueue._tasks.wait_set: waiting for an event with a deadline."""

from __future__ import annotations

import asyncio

import pytest

from pgqueue._tasks import wait_set


async def test_wait_set_returns_true_once_the_event_is_set() -> None:
    event = asyncio.Event()
    asyncio.get_running_loop().call_soon(event.set)
    assert await wait_set(event, 60) is True


async def test_wait_set_returns_false_when_the_time_runs_out() -> None:
    assert await wait_set(asyncio.Event(), 0.01) is False


async def test_wait_set_lets_a_cancellation_from_outside_through() -> None:
    waiting = asyncio.create_task(wait_set(asyncio.Event(), 60))
    await asyncio.sleep(0)  # let it start waiting
    waiting.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiting
