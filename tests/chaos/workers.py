"""``pgqueue work`` subprocesses for chaos runs, each behind its own fault proxy, restarted
whenever they die; every signal sent and every death is recorded for the checker."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from .proxy import Proxy

__all__ = ["ProcEvent", "WorkerPool"]

REPO = Path(__file__).resolve().parents[2]
EXIT_BY_HANDLER = 70  # chaos.exit's os._exit code


@dataclass(frozen=True)
class ProcEvent:
    pid: int
    what: str  # sigkill, sigterm, sigstop, sigcont, exit:<code>
    at: datetime


@dataclass
class Slot:
    index: int
    proxy: Proxy
    dsn: str
    proc: subprocess.Popen[bytes] | None = None
    held: bool = False  # the controller owns the restart


class WorkerPool:
    def __init__(
        self,
        *,
        count: int,
        db_host: str,
        db_port: int,
        dsn_for_port: Callable[[int], str],
        ledger_dsn: str,
        logdir: Path,
        args: list[str],
    ) -> None:
        self.ledger_dsn = ledger_dsn
        self.logdir = logdir
        self.args = args
        self.events: list[ProcEvent] = []
        self.starts = 0
        self.slots: list[Slot] = []
        for i in range(count):
            proxy = Proxy(db_host, db_port)
            port = proxy.start()
            self.slots.append(Slot(i, proxy, dsn_for_port(port)))
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._monitor = threading.Thread(target=self._watch, name="chaos-workers", daemon=True)

    # -- lifecycle ----------------------------------------------------------------------

    def start(self) -> None:
        for slot in self.slots:
            self._spawn(slot)
        self._monitor.start()

    def _spawn(self, slot: Slot) -> None:
        env = {k: v for k, v in os.environ.items() if not k.startswith("PGQUEUE_")}
        env["PYTHONUNBUFFERED"] = "1"
        env["PGQUEUE_CHAOS_LEDGER_DSN"] = self.ledger_dsn
        cmd = [sys.executable, "-m", "pgqueue", "work", "tests.chaos.app:app", "--dsn", slot.dsn, *self.args]
        with open(self.logdir / f"worker-{slot.index}.log", "ab") as out:
            slot.proc = subprocess.Popen(
                cmd, cwd=REPO, stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True
            )
        self.starts += 1

    def _record(self, pid: int, what: str) -> None:
        with self._lock:
            self.events.append(ProcEvent(pid, what, datetime.now(UTC)))

    def _watch(self) -> None:
        while not self._stop.wait(0.2):
            for slot in self.slots:
                with self._lock:
                    proc = slot.proc
                    if proc is None or slot.held or proc.poll() is None:
                        continue
                self._record(proc.pid, f"exit:{proc.returncode}")
                with self._lock:
                    if not slot.held and not self._stop.is_set():
                        self._spawn(slot)

    def stop(self, timeout: float = 20) -> None:
        self._stop.set()
        self._monitor.join(5)
        for slot in self.slots:
            if slot.proc is not None and slot.proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(slot.proc.pid, signal.SIGCONT)
                slot.proc.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + timeout
        for slot in self.slots:
            if slot.proc is None:
                continue
            try:
                slot.proc.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(slot.proc.pid, signal.SIGKILL)
                slot.proc.wait(10)
        for slot in self.slots:
            slot.proxy.close()

    # -- faults -------------------------------------------------------------------------

    def pids(self) -> list[int]:
        return [s.proc.pid for s in self.slots if s.proc is not None and s.proc.poll() is None]

    def signal(self, slot: Slot, signum: signal.Signals) -> int | None:
        proc = slot.proc
        if proc is None or proc.poll() is not None:
            return None
        self._record(proc.pid, signum.name.lower())
        with contextlib.suppress(ProcessLookupError):
            os.kill(proc.pid, signum)
        return proc.pid

    def kill(self, slot: Slot) -> bool:
        return self.signal(slot, signal.SIGKILL) is not None

    def terminate(self, slot: Slot, timeout: float = 15) -> bool:
        """SIGTERM (graceful stop), then SIGKILL if it is not gone after ``timeout``."""
        with self._lock:
            slot.held = True
        try:
            if self.signal(slot, signal.SIGTERM) is None:
                return False
            assert slot.proc is not None
            try:
                slot.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.signal(slot, signal.SIGKILL)
                slot.proc.wait(10)
            self._record(slot.proc.pid, f"exit:{slot.proc.returncode}")
            with self._lock:
                self._spawn(slot)
            return True
        finally:
            with self._lock:
                slot.held = False

    def freeze(self, slot: Slot, seconds: float, stop: threading.Event) -> bool:
        """SIGSTOP for ``seconds`` (longer than the lease: a zombie), then SIGCONT."""
        pid = self.signal(slot, signal.SIGSTOP)
        if pid is None:
            return False
        stop.wait(seconds)
        self._record(pid, "sigcont")
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGCONT)
        return True

    def log_text(self) -> str:
        return "\n".join(
            (self.logdir / f"worker-{s.index}.log").read_text(errors="replace")
            for s in self.slots
            if (self.logdir / f"worker-{s.index}.log").exists()
        )
