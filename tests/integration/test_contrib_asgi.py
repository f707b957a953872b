"""pgqueue.contrib.asgi in a FastAPI app on a real database: enqueue from request
handlers on the app's pool, an in-process worker runs the jobs, and shutdown lets the
job in flight finish."""

from __future__ import annotations

import threading
from typing import Any

import psycopg
import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

import pgqueue
from pgqueue.contrib.asgi import Queue
from tests.conftest import job_states, wait_until


def make_api(app: pgqueue.App, **options: Any) -> tuple[FastAPI, Queue]:
    queue = Queue(app, poll_interval=0.2, maintenance_interval=0.2, **options)
    api = FastAPI(lifespan=queue.lifespan)

    @api.post("/orders/{order_id}")
    async def create_order(order_id: int) -> dict[str, int]:
        async with queue.connection() as conn, conn.transaction():
            await conn.execute("INSERT INTO orders (id) VALUES (%s)", [order_id])
            handle = await app.get_task("confirm").enqueue_async(conn, order_id=order_id)
        return {"job": int(handle)}

    @api.post("/fail/{order_id}")
    async def fail_order(order_id: int) -> None:
        async with queue.connection() as conn, conn.transaction():
            await app.get_task("confirm").enqueue_async(conn, order_id=order_id)
            raise RuntimeError("the request failed after enqueueing")

    @api.post("/hold")
    async def hold() -> dict[str, int]:
        return {"job": int(await queue.enqueue("hold"))}

    return api, queue


@pytest.fixture
def shop(app: pgqueue.App, conn: psycopg.Connection[Any]) -> pgqueue.App:
    conn.execute("CREATE TABLE orders (id int PRIMARY KEY, confirmed bool DEFAULT false)")

    @app.task(name="confirm", transactional=True)
    async def confirm(ctx: pgqueue.JobContext, order_id: int) -> str:
        await ctx.conn.execute("UPDATE orders SET confirmed = true WHERE id = %s", [order_id])
        return f"order {order_id} confirmed"

    return app


def test_request_handlers_enqueue_and_the_in_process_worker_runs_the_jobs(
    shop: pgqueue.App, conn: psycopg.Connection[Any]
) -> None:
    api, _ = make_api(shop)
    with TestClient(api, raise_server_exceptions=False) as client:
        job = client.post("/orders/1").json()["job"]
        assert client.post("/fail/2").status_code == 500  # rolled back: no job
        wait_until(lambda: job_states(conn).get("completed") == 1)
        assert shop.result(conn, job) == "order 1 confirmed"
    assert conn.execute("SELECT id, confirmed FROM orders").fetchall() == [(1, True)]
    assert job_states(conn) == {"completed": 1}


def test_shutdown_lets_the_job_in_flight_finish(shop: pgqueue.App, conn: psycopg.Connection[Any]) -> None:
    started = threading.Event()
    box: dict[str, Queue] = {}

    @shop.task(name="hold")
    async def hold() -> str:
        started.set()
        await box["queue"].wait_stopping()  # runs until shutdown has begun, then finishes
        assert box["queue"].stopping
        return "finished after the stop"

    api, queue = make_api(shop)
    box["queue"] = queue
    with TestClient(api) as client:
        job = client.post("/hold").json()["job"]
        assert started.wait(30)
    # Leaving the block ran the shutdown: the worker stopped, the handler saw it and finished.
    assert job_states(conn) == {"completed": 1}
    assert shop.result(conn, job) == "finished after the stop"


def test_enqueue_only_without_a_worker_and_errors(shop: pgqueue.App, conn: psycopg.Connection[Any]) -> None:
    api, queue = make_api(shop, worker=False)
    with pytest.raises(pgqueue.ConfigError, match="lifespan"):
        queue.pool  # noqa: B018
    with TestClient(api) as client:
        client.post("/orders/3")
        assert queue.worker is None
    assert job_states(conn) == {"available": 1}
    with pytest.raises(pgqueue.ConfigError, match=r"pgqueue\.App"):
        Queue("not an app")  # type: ignore[arg-type]


def test_a_worker_that_cannot_start_fails_the_startup(empty_dsn: str) -> None:
    app = pgqueue.App(dsn=empty_dsn)  # no schema there
    api = FastAPI(lifespan=Queue(app).lifespan)
    with pytest.raises(pgqueue.SchemaNotInstalledError), TestClient(api):
        pass
