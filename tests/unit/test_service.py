"""The periodic-service base: its loop driven step by step, with an injected clock."""

from __future__ import annotations

import asyncio
import logging

import psycopg
import pytest

from pgqueue.maintenance.service import Maintainer, PeriodicService
from pgqueue.retry import Backoff, Retries


class StopLoopError(Exception):
    """Raised by the fake sleep to end a loop after the rounds a test wants."""


class Clock:
    """Records every requested sleep instead of sleeping; ends the loop after ``rounds``."""

    def __init__(self, rounds: int) -> None:
        self.rounds = rounds
        self.sleeps: list[float] = []

    async def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        if len(self.sleeps) > self.rounds:
            raise StopLoopError


class Counting(PeriodicService[int]):
    name = "counting"
    what = "counting"

    def __init__(self, outcomes: list[int | BaseException], **kwargs: object) -> None:
        super().__init__(log=logging.getLogger("tests.service"), **kwargs)  # type: ignore[arg-type]
        self.outcomes = outcomes
        self.reported: list[int] = []

    async def run_once(self) -> int:
        outcome = self.outcomes.pop(0)
        if isinstance(outcome, BaseException):
            raise outcome
        return outcome

    def report(self, result: int) -> None:
        self.reported.append(result)


def fixed(low: float, high: float) -> float:
    return high  # the top of every jitter range


async def test_waits_an_interval_before_each_round_and_reports_results() -> None:
    clock = Clock(rounds=2)
    service = Counting([3, 0], interval=10.0, sleep=clock.sleep, rand=fixed)
    with pytest.raises(StopLoopError):
        await service.run()
    assert clock.sleeps == [12.0, 12.0, 12.0]  # first delay, then after each round (+20% jitter)
    assert service.reported == [3, 0]


async def test_a_failure_logs_one_line_and_waits_the_backoff_until_a_success(caplog: pytest.LogCaptureFixture) -> None:
    down = psycopg.OperationalError("connection refused")
    clock = Clock(rounds=4)
    service = Counting(
        [down, down, 1, down],
        interval=10.0,
        jitter=0.0,
        failure_backoff=Backoff(base=1.0, cap=3.0, jitter=False),
        sleep=clock.sleep,
    )
    with caplog.at_level(logging.WARNING, logger="tests.service"), pytest.raises(StopLoopError):
        await service.run()
    assert clock.sleeps == [10.0, 1.0, 2.0, 10.0, 1.0]  # the backoff starts over after the success
    lines = [r.getMessage() for r in caplog.records]
    assert lines == [
        "counting failed (connection refused); trying again in 1.0s",
        "counting failed (connection refused); trying again in 2.0s",
        "counting failed (connection refused); trying again in 1.0s",
    ]


async def test_without_a_failure_backoff_a_failed_round_is_retried_at_the_interval() -> None:
    service = Counting([psycopg.OperationalError("x")], interval=5.0, jitter=0.0)
    assert await service.step() == 5.0


async def test_an_unexpected_error_ends_the_loop() -> None:
    service = Counting([ValueError("bug")], interval=5.0, jitter=0.0)
    with pytest.raises(ValueError, match="bug"):
        await service.step()


async def test_start_and_stop_are_idempotent() -> None:
    gate = asyncio.Event()

    async def wait(seconds: float) -> None:
        await gate.wait()

    service = Counting([], interval=1.0, sleep=wait)
    await service.stop()  # never started: fine
    task = service.start()
    assert service.start() is task
    assert service.started
    await service.stop()
    await service.stop()
    assert task.cancelled()
    assert not service.started


async def test_the_maintainer_starts_and_stops_its_services_together() -> None:
    gate = asyncio.Event()

    async def wait(seconds: float) -> None:
        await gate.wait()

    services = [Counting([], interval=1.0, sleep=wait), Counting([], interval=1.0, sleep=wait)]
    ended: list[asyncio.Task[None]] = []
    maintainer = Maintainer(services)
    maintainer.start(ended.append)
    maintainer.start(ended.append)  # already running: no second task, no second callback
    assert all(s.started for s in services)
    await maintainer.stop()
    assert not any(s.started for s in services)
    assert len(ended) == 2


def test_retries_walk_a_backoff_and_start_over() -> None:
    retries = Retries(Backoff(base=0.05, cap=5.0, jitter=False))
    assert [retries.next() for _ in range(9)] == [0.05, 0.1, 0.2, 0.4, 0.8, 1.6, 3.2, 5.0, 5.0]
    retries.reset()
    assert retries.next() == 0.05


class CancelledMidQuery(PeriodicService[int]):
    """A round whose query, cancelled by stop(), surfaces as QueryCanceled (as psycopg's can)."""

    name = "midquery"
    what = "mid-query round"

    def __init__(self) -> None:
        super().__init__(interval=0.0, jitter=0.0, log=logging.getLogger("test"))
        self.in_query = asyncio.Event()
        self.let_cancel_through = False  # lets a failing test clean up

    async def run_once(self) -> int:
        self.in_query.set()
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            if self.let_cancel_through:
                raise
            raise psycopg.errors.QueryCanceled("canceling statement due to user request") from None
        return 0


async def test_stop_during_a_query_that_reports_query_canceled_ends_the_loop() -> None:
    service = CancelledMidQuery()
    task = service.start()
    await asyncio.wait_for(service.in_query.wait(), 5)
    task.cancel()  # what stop() does
    done, _ = await asyncio.wait({task}, timeout=5)
    try:
        assert task in done, "the cancelled query was retried as a failure: the loop never ends"
    finally:
        service.let_cancel_through = True
        await service.stop()


async def test_stop_ends_a_service_whose_round_swallowed_the_cancellation() -> None:
    # On Python 3.11, asyncio.wait_for (psycopg_pool's wait for a connection) swallows a
    # cancellation that arrives as its awaitable finishes; the round then goes on, and a
    # single cancel() would leave the loop running for ever.
    swallowed = asyncio.Event()

    class Swallowing(Counting):
        stop_resend = 0.05

        async def run_once(self) -> int:
            if not swallowed.is_set():
                try:
                    await asyncio.Event().wait()
                except asyncio.CancelledError:
                    swallowed.set()  # ... and carry on, as the race does
            return 1

    async def tick(seconds: float) -> None:
        await asyncio.sleep(0)

    service = Swallowing([], interval=1.0, sleep=tick)
    task = service.start()
    await asyncio.sleep(0.01)
    stopping = asyncio.create_task(service.stop())
    done, _ = await asyncio.wait({stopping}, timeout=30)  # no cancellation of its own on timeout
    assert swallowed.is_set()
    assert task.done()
    assert stopping in done
