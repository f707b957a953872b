"""A pgqueue worker with one no-op task, ``bench.noop`` (with ``--result 1`` it returns a
small dict, stored as the job's result; a job enqueued with ``s`` sleeps that many seconds; with
``--uvloop 1`` it runs on uvloop's event loop)."""

from __future__ import annotations

import asyncio
import logging
import signal
from typing import Any

import pgqueue
from bench.workers._common import parse, ready, report

REPORT = False
RESULT = False


def build_app(dsn: str, notify_window: float = 0.0) -> pgqueue.App:
    app = pgqueue.App(dsn=dsn, notify_window=notify_window)

    @app.task(name="bench.noop")
    async def noop(k: str | None = None, t: float | None = None, s: float | None = None) -> Any:
        if REPORT:
            report(k)
        if s:
            await asyncio.sleep(s)
        return {"ok": True, "k": k} if RESULT else None

    return app


def main() -> None:
    global REPORT, RESULT
    args = parse(
        [
            ("--fetch-batch", int, 100),
            ("--claim-cursor-threshold", float, 0.02),
            ("--result", int, 0),
            ("--uvloop", int, 0),
        ]
    )
    REPORT = args.report
    RESULT = bool(args.result)
    logging.basicConfig(level=logging.WARNING)
    app = build_app(args.dsn)
    worker = app.worker(
        concurrency=args.concurrency,
        fetch_batch=args.fetch_batch,
        queues=tuple(args.queues.split(",")),
        listen=not args.no_listen,
        poll_interval=args.poll_interval,
        claim_cursor_threshold=args.claim_cursor_threshold,
    )

    async def run() -> None:
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, worker.stop)
        task = asyncio.create_task(worker.run())
        await worker.started.wait()
        ready()
        await task
        stats: Any = worker.stats
        print(f"STATS claims={stats.claims} empty_claims={stats.empty_claims} completed={stats.completed}", flush=True)

    if args.uvloop:
        import uvloop

        uvloop.run(run())
    else:
        asyncio.run(run())


if __name__ == "__main__":
    main()
