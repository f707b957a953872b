"""Running worker processes from the CLI: signals, and ``--processes N`` supervision.

This is the only place that installs signal handlers. SIGTERM or SIGINT asks for a
graceful stop; a second one exits at once (the rescuer recovers whatever was running).
With several processes the parent forwards signals to its children and restarts any
child that dies unexpectedly.
"""

from __future__ import annotations

import asyncio
import logging
import multiprocessing
import os
import signal
import sys
import threading
import time
from dataclasses import replace
from typing import Any

from ._loader import load_app
from .config import WorkerConfig

__all__ = ["run_processes", "run_worker"]

log = logging.getLogger("pgqueue.cli")


def run_worker(target: str, dsn: str | None, schema: str | None, config: WorkerConfig) -> int:
    """Run one worker in this process until a signal stops it; returns the exit code."""
    app = load_app(target)
    if dsn:
        app._dsn = dsn
    if schema:
        from ._sql import validate_schema

        app.schema = validate_schema(schema)
    worker = app.worker(config)

    async def main() -> None:
        loop = asyncio.get_running_loop()
        signals_seen = 0

        def on_signal(signum: int) -> None:
            nonlocal signals_seen
            signals_seen += 1
            if signals_seen > 1:
                log.warning("second %s: exiting now", signal.Signals(signum).name)
                logging.shutdown()
                os._exit(130)
            log.info("%s received: shutting down gracefully", signal.Signals(signum).name)
            worker.stop()

        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, on_signal, sig)
        await worker.run()

    asyncio.run(main())
    _exit_if_threads_hang()
    return 0


def _exit_if_threads_hang() -> None:
    # A sync handler stuck past its timeout cannot be interrupted; do not let it keep the
    # process alive after the worker has released its job.
    stuck = [t for t in threading.enumerate() if t.name.startswith("pgqueue-job") and t.is_alive()]
    if stuck:
        log.warning("%d handler threads still running after shutdown; exiting anyway", len(stuck))
        logging.shutdown()
        sys.stdout.flush()
        os._exit(0)


def _child(target: str, dsn: str | None, schema: str | None, config: WorkerConfig, log_level: int) -> None:
    logging.basicConfig(level=log_level, format="%(asctime)s %(levelname)s %(processName)s %(name)s: %(message)s")
    sys.exit(run_worker(target, dsn, schema, config))


def run_processes(
    target: str, dsn: str | None, schema: str | None, config: WorkerConfig, processes: int, log_level: int
) -> int:
    """Run ``processes`` worker processes, each with its own loop and LISTEN connection."""
    load_app(target)  # fail fast, in the parent, on a bad target
    ctx = multiprocessing.get_context("spawn")
    stopping = False
    children: dict[int, Any] = {}

    def start(slot: int) -> None:
        cfg = replace(config, worker_id="") if config.worker_id else config
        proc = ctx.Process(
            target=_child, args=(target, dsn, schema, cfg, log_level), name=f"worker-{slot}", daemon=False
        )
        proc.start()
        children[slot] = proc

    def forward(signum: int, _frame: Any) -> None:
        nonlocal stopping
        if stopping:
            for proc in children.values():
                if proc.is_alive():
                    proc.kill()
            return
        stopping = True
        log.info("%s received: stopping %d worker processes", signal.Signals(signum).name, len(children))
        for proc in children.values():
            if proc.is_alive() and proc.pid:
                os.kill(proc.pid, signum)

    signal.signal(signal.SIGTERM, forward)
    signal.signal(signal.SIGINT, forward)
    for slot in range(processes):
        start(slot)
    restarts: dict[int, float] = {}
    while children:
        time.sleep(0.2)
        for slot, proc in list(children.items()):
            if proc.is_alive():
                continue
            del children[slot]
            if stopping:
                continue
            log.error("worker process %s exited with code %s; restarting it", proc.name, proc.exitcode)
            delay = min(restarts.get(slot, 0.5) * 2, 30.0)
            restarts[slot] = delay
            time.sleep(delay)
            start(slot)
    return 0
