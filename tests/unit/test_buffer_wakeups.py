"""Buffered (prefetched) jobs start as soon as anything lets them: a slot freeing up, or
a lease freeing up once its outcome is written. The second once went unnoticed when the
queue had run dry (no backlog, so nobody woke the fetcher): jobs claimed ahead then sat in
the buffer with every slot idle until the next poll, 5 s later with LISTEN."""

from __future__ import annotations

import asyncio
import uuid
from datetime import UTC, datetime, timedelta

import pgqueue
from pgqueue.models import Job
from pgqueue.worker.handler import COMPLETED


def job(job_id: int) -> Job:
    now = datetime.now(UTC)
    return Job(job_id, "default", "noop", {}, 0, 1, 3, uuid.uuid4(), now, now, timedelta(0))


async def test_a_lease_freed_by_a_written_outcome_starts_the_buffered_jobs() -> None:
    app = pgqueue.App(dsn="postgresql://unused")

    @app.task(name="noop")
    async def noop() -> None:
        return None

    worker = app.worker(concurrency=2)
    executor, capacity, leases = worker.executor, worker.capacity, worker.leases
    capacity.prefetch = 2
    # Every slot is free, but the leases of outcomes not yet written fill the allowance
    # (2 x concurrency + prefetch): nothing may start yet.
    waiting = [job(i) for i in range(1, 7)]
    for j in waiting:
        leases.hold(j)
    assert capacity.free() == 0
    claimed = [job(10), job(11)]
    executor.submit(claimed, 0.0, float("inf"))
    assert [j.id for j, _, _ in executor.buffer] == [10, 11]
    assert not executor.running
    capacity.backlog = False  # the last claim emptied the queue
    capacity.wake.clear()

    executor.written(waiting[0], COMPLETED, True)  # the completer wrote one outcome

    assert sorted(executor.running) == [10], "a freed lease must start a buffered job"
    assert [j.id for j, _, _ in executor.buffer] == [11]
    await asyncio.gather(*executor.running.values(), return_exceptions=True)
