"""``pgqueue work --processes N``: a parent that starts, stops and restarts worker processes.

Signals. The parent keeps SIGINT and SIGTERM blocked and reads them with
``sigtimedwait`` (no handler runs in the middle of its bookkeeping), and ignored. Worker
processes inherit both across exec: a child starts parked, deaf to stop signals (a blocked
one waits), and tells the parent over a pipe once it handles them. A stop that came before
that is forwarded then, so it is never lost; a stop from the process group (Ctrl-C, ``kill -TERM
-PGID``) reaches a ready child twice, directly and forwarded, which the child counts once
(``pgqueue.runner.stop_signals``). A second stop kills the children.

Exit code: 0 when every child stopped cleanly; 130 when forced; 3 when a child cannot start
(restarting would not help); 128+N when a child was killed by signal N; otherwise the
gravest code a child exited with. A child that dies unexpectedly is restarted with backoff.

Why this module is about 300 lines: the signal protocol above is one piece (blocking,
parking, forwarding, counting a stop once) and reads best whole.
"""

from __future__ import annotations

import logging
import multiprocessing
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from contextlib import suppress
from dataclasses import dataclass
from multiprocessing import resource_tracker
from multiprocessing.connection import Connection
from multiprocessing.process import BaseProcess
from typing import Any

from .._dsn import Database, announce, announced_by_parent, open_connection
from ..errors import DatabaseUnavailableError, PgQueueError
from ..logging_setup import configure_logging
from ..migrate import require_current
from ..retry import Backoff, Retries
from ..worker.db_wait import BACKOFF, log_attempt
from .loader import load_app
from .process import EXIT_FORCED, park_stop_signals, run_worker, worker_config
from .stop_signals import STOP_SIGNALS, StopSignals, Verdict, signal_name

__all__ = ["EXIT_FATAL", "combined_exit_code", "run_processes", "run_worker"]

log = logging.getLogger("pgqueue.cli")

EXIT_FATAL = 3  # a child that cannot start (bad schema, bad config): restarting will not help
#: A child that died is restarted after 0.5 s, doubling up to 30 s.
RESTART_BACKOFF = Backoff(base=0.5, cap=30.0, jitter=False)
HEALTHY_RUN = 60.0  # a child that lived this long restarts without the accumulated backoff
_TICK = 0.2  # how often the parent looks at its children when no signal arrives


def _child(
    target: str, db: Database, schema: str | None, overrides: Mapping[str, Any], log_level: int, ready: Connection
) -> None:
    configure_logging(log_level, os.environ.get("PGQUEUE_LOG_FORMAT", "text"), process_name=True)
    announced_by_parent(db)

    def report_ready() -> None:
        ready.send_bytes(b"ready")
        ready.close()

    try:
        code = run_worker(target, db.dsn, schema, overrides, source=db.source, on_ready=report_ready)
    except DatabaseUnavailableError as exc:
        # Transient (a restart, a failover, a network cut): the parent restarts this child
        # with backoff; it must not take the other workers down with it.
        print(f"error: {exc}", file=sys.stderr)
        code = 1
    except PgQueueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        code = EXIT_FATAL
    sys.exit(code)


def preflight(target: str, dsn: str | None, schema: str | None, overrides: Mapping[str, Any]) -> tuple[Database, str]:
    """Check, in the parent, the settings that would make every child fail at once;
    returns the database (resolved once, and said which) and schema the children will use
    (:func:`check_database` checks them)."""
    app = load_app(target)
    app.configure(dsn=dsn, schema=schema)
    announce(app.database)
    worker_config(app, overrides)  # a bad combination of settings fails here, once
    return app.database, app.schema


def check_database(db: Database, schema: str) -> None:
    with open_connection(db) as conn:
        require_current(conn, schema)


def combined_exit_code(codes: Iterable[int]) -> int:
    """One exit code for the children's (``multiprocessing`` codes: -N for signal N)."""
    shell = [128 - code if code < 0 else code for code in codes if code]

    def gravity(code: int) -> tuple[bool, bool, bool, int]:
        return (code == EXIT_FATAL, code > 128 and code != EXIT_FORCED, code == EXIT_FORCED, code)

    return max(shell, key=gravity, default=0)


@dataclass
class _Child:
    proc: BaseProcess
    ready_pipe: Connection
    started_at: float
    ready: bool = False
    stop_sent: bool = False


def run_processes(
    target: str,
    dsn: str | None,
    schema: str | None,
    overrides: Mapping[str, Any],
    processes: int,
    log_level: int,
    *,
    wait_for_database: bool = False,
) -> int:
    """Run ``processes`` worker processes, each with its own loop and LISTEN connection.

    Leaves SIGINT and SIGTERM blocked and ignored in this process: call it last.
    """
    # multiprocessing starts its resource tracker on first use and then *unblocks* SIGINT
    # and SIGTERM: start it before they are blocked.
    resource_tracker.ensure_running()
    signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)
    # Setting SIG_IGN discards a pending signal: take those first.
    early = signal.sigpending() & set(STOP_SIGNALS)
    park_stop_signals()
    supervisor = _Supervisor(target, dsn, schema, overrides, processes, log_level)
    for signum in sorted(early):
        supervisor.on_signal(signum)
    return supervisor.run(wait_for_database)


class _Supervisor:
    def __init__(
        self,
        target: str,
        dsn: str | None,
        schema: str | None,
        overrides: Mapping[str, Any],
        processes: int,
        log_level: int,
    ) -> None:
        self.args: tuple[Any, ...] = (target, dsn, schema, dict(overrides), log_level)
        self.processes = processes
        self.signals = StopSignals()
        self.stop_signum: int | None = None
        self.forced = False
        self.fatal = False
        self.children: dict[int, _Child] = {}
        self.exit_codes: list[int] = []
        self.ctx = multiprocessing.get_context("spawn")

    @property
    def stopping(self) -> bool:
        return self.stop_signum is not None

    # -- signals ------------------------------------------------------------------------

    def pause(self, seconds: float) -> None:
        """Wait up to ``seconds`` for a stop signal, and act on it."""
        info = signal.sigtimedwait(STOP_SIGNALS, max(seconds, 0.0))
        if info is not None:
            self.on_signal(info.si_signo)

    def on_signal(self, signum: int) -> None:
        verdict = self.signals.receive(signum)
        if verdict is Verdict.REPEAT:
            return
        if verdict is Verdict.FORCE:
            log.warning("second %s: killing %d worker processes", signal_name(signum), len(self.children))
            self.forced = True
            for child in self.children.values():
                child.proc.kill()
            return
        log.info("%s received: stopping %d worker processes", signal_name(signum), len(self.children))
        self.stop_all(signum)

    def stop_all(self, signum: int) -> None:
        if self.stop_signum is None:
            self.stop_signum = signum
        for child in self.children.values():
            self.forward_stop(child)

    def forward_stop(self, child: _Child) -> None:
        # A child that is not ready yet ignores signals: it gets the stop once it reports.
        if self.stop_signum is None or not child.ready or child.stop_sent or child.proc.pid is None:
            return
        child.stop_sent = True
        with suppress(ProcessLookupError):
            os.kill(child.proc.pid, self.stop_signum)

    # -- children -----------------------------------------------------------------------

    def start(self, slot: int) -> None:
        reader, writer = self.ctx.Pipe(duplex=False)
        proc = self.ctx.Process(target=_child, args=(*self.args, writer), name=f"worker-{slot}", daemon=False)
        proc.start()
        signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)  # in case the tracker was restarted
        writer.close()
        self.children[slot] = _Child(proc, reader, time.monotonic())

    def collect_ready(self) -> None:
        for child in self.children.values():
            if child.ready or not child.ready_pipe.poll():
                continue
            try:
                child.ready_pipe.recv_bytes()
            except (EOFError, OSError):
                continue  # it died before it was ready: reaped below
            child.ready = True
            self.forward_stop(child)

    def run(self, wait_for_database: bool) -> int:
        target, dsn, schema, overrides, log_level = self.args
        db, resolved_schema = preflight(target, dsn, schema, overrides)
        self.args = (target, db, resolved_schema, overrides, log_level)  # every child uses this database
        if not self.database_reachable(db, resolved_schema, wait_for_database):
            log.info("stopped before the worker processes started")
            return 0
        for slot in range(self.processes):
            self.start(slot)
        retries: dict[int, Retries] = {}
        restart_at: dict[int, float] = {}
        while self.children or (restart_at and not self.stopping):
            self.pause(min([_TICK, *(at - time.monotonic() for at in restart_at.values())]))
            self.collect_ready()
            for slot, child in list(self.children.items()):
                if child.proc.is_alive():
                    continue
                child.proc.join()
                child.ready_pipe.close()
                del self.children[slot]
                code = child.proc.exitcode if child.proc.exitcode is not None else 1
                if self.stopping:
                    self.exit_codes.append(code)
                    continue
                if code == EXIT_FATAL:
                    log.error("worker process %s cannot start; stopping all workers", child.proc.name)
                    self.fatal = True
                    self.stop_all(signal.SIGTERM)
                    continue
                if time.monotonic() - child.started_at > HEALTHY_RUN:
                    retries.pop(slot, None)  # it ran fine for a while: this is a fresh failure
                delay = retries.setdefault(slot, Retries(RESTART_BACKOFF)).next()
                log.error("worker process %s exited with code %s; restarting it in %.1fs", child.proc.name, code, delay)
                restart_at[slot] = time.monotonic() + delay
            if self.stopping:
                restart_at.clear()  # do not start a child nobody would stop
            for slot, at in list(restart_at.items()):
                if time.monotonic() >= at:
                    del restart_at[slot]
                    self.start(slot)
        if self.forced:
            return EXIT_FORCED
        if self.fatal:
            return EXIT_FATAL
        return combined_exit_code(self.exit_codes)

    def database_reachable(self, db: Database, schema: str, wait: bool) -> bool:
        """Check the database; with ``wait``, retry with backoff until it answers or a stop
        arrives (False)."""
        attempt = 0
        while True:
            error = self.watching_signals(lambda: check_database(db, schema))
            if error is None:
                return not self.stopping
            if self.stopping:
                return False
            if not wait or not isinstance(error, DatabaseUnavailableError):
                raise error
            attempt += 1
            delay = BACKOFF.delay(attempt)
            log_attempt(log, db.dsn, attempt, error, delay)
            deadline = time.monotonic() + delay
            while not self.stopping and time.monotonic() < deadline:
                self.pause(deadline - time.monotonic())
            if self.stopping:
                return False

    def watching_signals(self, fn: Callable[[], None]) -> BaseException | None:
        """Run ``fn`` in a thread while acting on signals; returns its error, if any. A stop
        does not wait for it (the thread is a daemon)."""
        errors: list[BaseException] = []

        def call() -> None:
            try:
                fn()
            except BaseException as exc:  # noqa: BLE001 - handed back to the caller
                errors.append(exc)

        thread = threading.Thread(target=call, name="pgqueue-preflight", daemon=True)
        thread.start()
        while thread.is_alive() and not self.stopping:
            self.pause(0.05)
        return errors[0] if errors else None
