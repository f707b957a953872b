"""A FastAPI app with pgqueue: orders are saved with their confirmation job in one
transaction, and the app's lifespan runs the worker.

    export PGQUEUE_DSN=postgresql://localhost/mydb
    pgqueue migrate
    uvicorn app:api
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from fastapi import FastAPI, HTTPException

import pgqueue
from pgqueue.contrib.asgi import Queue

app = pgqueue.App()  # $PGQUEUE_DSN


@app.task(transactional=True)
async def confirm_order(ctx: pgqueue.JobContext, order_id: int) -> str:
    await ctx.conn.execute("UPDATE orders SET confirmed = true WHERE id = %s", [order_id])
    return f"order {order_id} confirmed"


queue = Queue(app, concurrency=10)


@asynccontextmanager
async def lifespan(api: FastAPI) -> AsyncIterator[None]:
    async with queue.lifespan(api):
        async with queue.connection() as conn:
            await conn.execute("CREATE TABLE IF NOT EXISTS orders (id int PRIMARY KEY, job bigint, confirmed bool)")
        yield


api = FastAPI(lifespan=lifespan)


@api.post("/orders/{order_id}")
async def create_order(order_id: int) -> dict[str, int]:
    async with queue.connection() as conn, conn.transaction():
        job = await confirm_order.enqueue_async(conn, order_id=order_id)
        await conn.execute("INSERT INTO orders (id, job, confirmed) VALUES (%s, %s, false)", [order_id, job])
    return {"order": order_id, "job": job}


@api.get("/orders/{order_id}")
async def get_order(order_id: int) -> dict[str, Any]:
    async with queue.connection() as conn:
        row = await (await conn.execute("SELECT job, confirmed FROM orders WHERE id = %s", [order_id])).fetchone()
        if row is None:
            raise HTTPException(404, "no such order")
        try:
            result = await app.result_async(conn, row[0])
        except pgqueue.JobNotFinishedError:
            result = None
    return {"order": order_id, "confirmed": row[1], "result": result}
