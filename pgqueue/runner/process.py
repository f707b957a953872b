"""One worker process of ``pgqueue work``: its configuration, its stop signals, its exit.

SIGTERM or SIGINT asks for a graceful stop; a second request exits at once with code 130
(the rescuer recovers whatever was running). The same signal delivered twice within
``REPEAT_WINDOW`` (directly from the process group and forwarded by the supervisor) is one
request: see ``pgqueue.runner.stop_signals``.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import sys
from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import Any

from .._dsn import FROM_OPTION, announce
from ..app import App
from ..config import WorkerConfig
from .loader import load_app
from .stop_signals import STOP_SIGNALS, StopSignals, Verdict, signal_name

__all__ = ["EXIT_FORCED", "park_stop_signals", "run_worker", "worker_config"]

log = logging.getLogger("pgqueue.cli")

EXIT_FORCED = 130  # stopped by a second signal, without waiting for in-flight jobs


def worker_config(app: App, overrides: Mapping[str, Any]) -> WorkerConfig:
    """The app's ``worker_config`` with only the given settings replaced (validated)."""
    return replace(app.worker_config, **overrides)


def park_stop_signals() -> None:
    """Ignore SIGINT and SIGTERM from now on (a process that is done, or not ready yet)."""
    for sig in STOP_SIGNALS:
        signal.signal(sig, signal.SIG_IGN)


def run_worker(
    target: str,
    dsn: str | None,
    schema: str | None,
    overrides: Mapping[str, Any],
    *,
    source: str = FROM_OPTION,
    on_ready: Callable[[], None] | None = None,
) -> int:
    """Run one worker in this process until a signal stops it; returns the exit code.

    ``on_ready`` is called once the stop signals are handled (a supervisor then knows that
    a stop it forwards will be heard). ``dsn`` (from ``source``) overrides the app's own
    database; without it the app resolves its ``App(dsn=...)``, ``$PGQUEUE_DSN`` or the
    embedded server, and says which.
    """
    app = load_app(target)
    app.configure(dsn=dsn, schema=schema, source=source)
    announce(app.database)
    worker = app.worker(worker_config(app, overrides))
    signals = StopSignals()

    def on_signal(signum: int) -> None:
        verdict = signals.receive(signum)
        if verdict is Verdict.REPEAT:
            return  # the same request, delivered twice
        if verdict is Verdict.FORCE:
            log.warning("second %s: exiting now", signal_name(signum))
            logging.shutdown()
            os._exit(EXIT_FORCED)
        log.info("%s received: shutting down gracefully", signal_name(signum))
        worker.stop()

    async def main() -> None:
        loop = asyncio.get_running_loop()
        for sig in STOP_SIGNALS:
            loop.add_signal_handler(sig, on_signal, sig)
        # A supervisor starts its children with the stop signals blocked (and ignored):
        # a stop that arrived meanwhile is delivered now.
        signal.pthread_sigmask(signal.SIG_UNBLOCK, STOP_SIGNALS)
        if on_ready is not None:
            on_ready()
        try:
            await worker.run()
        finally:
            # Closing the loop would restore the default handlers, and a late copy of the
            # stop signal would then kill a process that stopped cleanly.
            signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)
            for sig in STOP_SIGNALS:
                loop.remove_signal_handler(sig)
            park_stop_signals()
            signal.pthread_sigmask(signal.SIG_UNBLOCK, STOP_SIGNALS)

    asyncio.run(main())
    _exit_if_handlers_hang(worker.sync_handlers_running)
    return 0


def _exit_if_handlers_hang(running: int) -> None:
    # A sync handler stuck past its timeout cannot be interrupted; do not let it keep the
    # process alive after the worker has released its job.
    if running:
        plural = "s" if running != 1 else ""
        log.warning("%d sync handler%s still running after shutdown; exiting anyway", running, plural)
        logging.shutdown()
        sys.stdout.flush()
        os._exit(0)
