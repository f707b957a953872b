from __future__ import annotations

from typing import Any

import psycopg

import pgqueue
from tests.conftest import async_wait_until, job_states, running_worker


async def test_enqueue_and_run(app: pgqueue.App, conn: psycopg.Connection[Any]) -> None:
    seen: list[int] = []

    @app.task(name="add")
    def add(x: int) -> None:
        seen.append(x)

    with conn.transaction():
        add.enqueue(conn, x=1)
    async with running_worker(app):
        await async_wait_until(lambda: seen == [1])
    assert job_states(conn) == {"completed": 1}
