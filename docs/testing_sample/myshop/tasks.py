"""A small shop: an order is saved with its confirmation email job, in one transaction."""

from __future__ import annotations

from typing import Any

import psycopg

import pgqueue

app = pgqueue.App()


@app.task(queue="mail", max_attempts=3)
def send_confirmation(order_id: int, email: str) -> str:
    if not email.endswith("@example.com"):
        raise ValueError(f"cannot mail {email}")
    return f"mailed order {order_id} to {email}"


@app.task(transactional=True)
def mark_shipped(ctx: pgqueue.JobContext, order_id: int) -> None:
    ctx.conn.execute("UPDATE orders SET shipped = true WHERE id = %s", [order_id])


def place_order(conn: psycopg.Connection[Any], order_id: int, email: str) -> None:
    with conn.transaction():
        conn.execute("INSERT INTO orders (id, email) VALUES (%s, %s)", [order_id, email])
        send_confirmation.enqueue(conn, order_id=order_id, email=email)
        mark_shipped.options(delay=86400).enqueue(conn, order_id=order_id)
