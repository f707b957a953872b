"""A worker that always claims two jobs ahead (a fixed prefetch) and whose ``hold`` jobs
never finish, for the SIGKILL test: ``python -m tests.apps.prefetching DSN``."""

from __future__ import annotations

import asyncio
import sys

import pgqueue


async def _main(dsn: str) -> None:
    app = pgqueue.App(dsn=dsn)

    @app.task(name="hold")
    async def hold() -> None:
        await asyncio.sleep(3600)

    worker = app.worker(concurrency=1, lease=5.0, heartbeat_interval=1.0, poll_interval=0.2)
    worker.prefetch.fixed = 2
    await worker.run()


if __name__ == "__main__":
    asyncio.run(_main(sys.argv[1]))
