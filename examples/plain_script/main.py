"""pgqueue without a framework: enqueue in your transaction, run a worker, read results.

export PGQUEUE_DSN=postgresql://localhost/mydb
python examples/plain_script/main.py
"""

from __future__ import annotations

import asyncio
import os

import psycopg

import pgqueue

app = pgqueue.App()  # $PGQUEUE_DSN


@app.task(queue="thumbnails", max_attempts=3)
def thumbnail(photo_id: int, size: int) -> dict[str, int]:
    if size <= 0:
        raise ValueError(f"bad size {size}")
    return {"photo_id": photo_id, "bytes": size * size // 10}


async def run_until_done(handles: list[pgqueue.JobHandle]) -> list[object]:
    """Run a worker in this process until every job finished; returns their results."""
    worker = app.worker(concurrency=4)
    running = asyncio.create_task(worker.run())
    results: list[object] = []
    for handle in handles:
        try:
            results.append(await handle.result_async(timeout=60))
        except pgqueue.JobFailed as exc:
            results.append(f"failed: {exc}")
    worker.stop()
    await running
    return results


def main() -> None:
    app.migrate()
    with psycopg.connect(os.environ["PGQUEUE_DSN"]) as conn, conn.transaction():
        conn.execute("CREATE TABLE IF NOT EXISTS photos (id int PRIMARY KEY)")
        conn.execute("INSERT INTO photos SELECT generate_series(1, 5) ON CONFLICT DO NOTHING")
        handles = [thumbnail.enqueue(conn, photo_id=i, size=100 * i) for i in range(1, 5)]
        handles.append(thumbnail.options(max_attempts=1).enqueue(conn, photo_id=5, size=0))
    # Committed: the photos and their jobs exist together.
    for handle, result in zip(handles, asyncio.run(run_until_done(handles)), strict=True):
        print(f"job {int(handle)}: {result}")


if __name__ == "__main__":
    main()
