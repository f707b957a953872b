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
from typing import Any

from ._dsn import FROM_OPTION, Database, announce, announced_by_parent, open_connection
from ._loader import load_app
from .config import WorkerConfig
from .errors import DatabaseUnavailableError, PgQueueError
from .logging_setup import configure_logging
from .migrate import require_current

__all__ = ["run_processes", "run_worker"]

log = logging.getLogger("pgqueue.cli")


def run_worker(
    target: str, dsn: str | None, schema: str | None, config: WorkerConfig, source: str = FROM_OPTION
) -> int:
    """Run one worker in this process until a signal stops it; returns the exit code.

    ``dsn`` (from ``source``) overrides the app's own database; without it the app resolves
    its ``App(dsn=...)``, ``$PGQUEUE_DSN`` or the embedded server, and says which.
    """
    app = load_app(target)
    app.configure(dsn=dsn, schema=schema, source=source)
    announce(app.database)
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


EXIT_FATAL = 3  # a child that cannot start (bad schema, bad config): restarting will not help
HEALTHY_RUN = 60.0  # a child that lived this long restarts without the accumulated backoff


def _child(target: str, db: Database, schema: str | None, config: WorkerConfig, log_level: int) -> None:
    configure_logging(log_level, os.environ.get("PGQUEUE_LOG_FORMAT", "text"), process_name=True)
    announced_by_parent(db)
    try:
        code = run_worker(target, db.dsn, schema, config, db.source)
    except DatabaseUnavailableError as exc:
        # Transient (a restart, a failover, a network cut): the parent restarts this child
        # with backoff; it must not take the other workers down with it.
        print(f"error: {exc}", file=sys.stderr)
        code = 1
    except PgQueueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        code = EXIT_FATAL
    sys.exit(code)


def preflight(target: str, dsn: str | None, schema: str | None) -> Database:
    """Check, in the parent, what would make every child fail at once; returns the database."""
    app = load_app(target)
    app.configure(dsn=dsn, schema=schema)
    announce(app.database)
    with open_connection(app.database) as conn:
        require_current(conn, app.schema)
    return app.database


def run_processes(
    target: str, dsn: str | None, schema: str | None, config: WorkerConfig, processes: int, log_level: int
) -> int:
    """Run ``processes`` worker processes, each with its own loop and LISTEN connection."""
    db = preflight(target, dsn, schema)  # resolved once: every child uses this database
    ctx = multiprocessing.get_context("spawn")
    stop = threading.Event()
    children: dict[int, Any] = {}
    started_at: dict[int, float] = {}
    exit_code = 0

    def start(slot: int) -> None:
        proc = ctx.Process(
            target=_child, args=(target, db, schema, config, log_level), name=f"worker-{slot}", daemon=False
        )
        proc.start()
        children[slot] = proc
        started_at[slot] = time.monotonic()

    def forward(signum: int, _frame: Any) -> None:
        if stop.is_set():
            for proc in children.values():
                if proc.is_alive():
                    proc.kill()
            return
        stop.set()
        log.info("%s received: stopping %d worker processes", signal.Signals(signum).name, len(children))
        for proc in children.values():
            if proc.is_alive() and proc.pid:
                os.kill(proc.pid, signum)

    signal.signal(signal.SIGTERM, forward)
    signal.signal(signal.SIGINT, forward)
    for slot in range(processes):
        start(slot)
    backoff: dict[int, float] = {}
    while children:
        stop.wait(0.2)
        for slot, proc in list(children.items()):
            if proc.is_alive():
                continue
            del children[slot]
            if stop.is_set():
                continue
            if proc.exitcode == EXIT_FATAL:
                log.error("worker process %s cannot start; stopping all workers", proc.name)
                exit_code = EXIT_FATAL
                forward(signal.SIGTERM, None)
                continue
            if time.monotonic() - started_at[slot] > HEALTHY_RUN:
                backoff.pop(slot, None)  # it ran fine for a while: this is a fresh failure
            delay = min(backoff.get(slot, 0.25) * 2, 30.0)
            backoff[slot] = delay
            log.error("worker process %s exited with code %s; restarting it in %.1fs", proc.name, proc.exitcode, delay)
            if stop.wait(delay):
                continue  # asked to stop while waiting: do not start a child nobody will stop
            start(slot)
    return exit_code
