"""The test suite's own helpers (tests/conftest.py): a worker that hangs on shutdown fails
its test with the stacks that show where it hangs, instead of a bare timeout."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest

from tests.conftest import running_worker, task_and_thread_stacks


class HangingWorker:
    """Starts, then never finishes after stop(): a stand-in for a worker stuck in shutdown."""

    def __init__(self) -> None:
        self.started = asyncio.Event()

    async def run(self) -> None:
        self.started.set()
        await stuck_in_shutdown()

    def stop(self) -> None:
        pass


async def stuck_in_shutdown() -> None:
    await asyncio.Event().wait()


class HangingApp:
    def worker(self, **config: Any) -> HangingWorker:
        return HangingWorker()


async def test_a_worker_hanging_on_stop_fails_with_the_stacks_of_its_tasks() -> None:
    app: Any = HangingApp()
    with pytest.raises(AssertionError, match=r"did not stop within 0.2s of stop\(\)") as failure:
        async with running_worker(app, stop_timeout=0.2):
            pass
    assert "stuck_in_shutdown" in str(failure.value)


def test_stacks_name_every_thread() -> None:
    release = threading.Event()
    thread = threading.Thread(target=release.wait, name="parked-helper", daemon=True)
    thread.start()
    try:

        async def collect() -> str:
            return task_and_thread_stacks()

        stacks = asyncio.run(collect())
    finally:
        release.set()
        thread.join(10)
    assert "Thread parked-helper:" in stacks
    assert "Thread MainThread:" in stacks
