"""The fault controller: injects one fault at a time on a schedule and counts them."""

from __future__ import annotations

import random
import signal
import threading
import time
from collections import Counter
from collections.abc import Callable

import psycopg

from .cluster import PrivateCluster
from .workers import Slot, WorkerPool

__all__ = ["FAULT_KINDS", "FaultController"]

#: Faults the controller injects (handler faults come from the job mix).
FAULT_KINDS = (
    "sigkill",
    "sigterm",
    "sigstop",
    "term_listener",
    "term_pool",
    "term_job",
    "pg_restart",
    "net_reset",
    "net_blackhole",
    "net_latency",
    "net_stale",
)


class FaultController:
    def __init__(
        self, cluster: PrivateCluster, workers: WorkerPool, *, lease: float, seed: int, log: Callable[[str], None]
    ) -> None:
        self.cluster = cluster
        self.workers = workers
        self.lease = lease
        self.rng = random.Random(seed)
        self.log = log
        self.counts: Counter[str] = Counter()
        self.stop = threading.Event()

    # -- schedule -----------------------------------------------------------------------

    def run(self, duration: float, *, gap: tuple[float, float] = (1.0, 4.0)) -> None:
        """Inject faults for ``duration`` seconds: every kind in a shuffled round, round
        after round. The first round is always completed (within twice ``duration``), so
        even a short run sees each kind at least once."""
        started = time.monotonic()
        deadline = started + duration
        round_: list[str] = []
        while not self.stop.is_set():
            now = time.monotonic()
            first_round_done = all(self.counts[k] for k in FAULT_KINDS)
            if now >= deadline and (first_round_done or now >= started + 2 * duration):
                break
            if not round_:
                round_ = list(FAULT_KINDS)
                self.rng.shuffle(round_)
            kind = round_.pop()
            started = time.monotonic()
            try:
                applied = getattr(self, f"_{kind}")()
            except Exception as exc:  # noqa: BLE001 - a failed injection is reported, not fatal
                self.log(f"fault {kind} could not be injected: {exc!r}")
                applied = False
            if applied:
                self.counts[kind] += 1
                self.log(f"fault {kind} ({time.monotonic() - started:.1f}s)")
            else:
                round_.insert(0, kind)  # try it again later in this round
            self.stop.wait(self.rng.uniform(*gap))

    def _slot(self) -> Slot:
        live = [s for s in self.workers.slots if s.proc is not None and s.proc.poll() is None]
        return self.rng.choice(live or self.workers.slots)

    # -- processes ----------------------------------------------------------------------

    def _sigkill(self) -> bool:
        return self.workers.kill(self._slot())

    def _sigterm(self) -> bool:
        return self.workers.terminate(self._slot())

    def _sigstop(self) -> bool:
        return self.workers.freeze(self._slot(), self.lease + self.rng.uniform(1.0, 3.0), self.stop)

    # -- backends -----------------------------------------------------------------------

    def _terminate(self, purpose: str) -> bool:
        pids = self.workers.pids()
        self.rng.shuffle(pids)
        with psycopg.connect(self.cluster.dsn(), autocommit=True, connect_timeout=5) as admin:
            for pid in pids:
                rows = admin.execute(
                    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = %s",
                    [f"pgqueue {purpose} {pid}"],
                ).fetchall()
                if any(r[0] for r in rows):
                    return True
        return False

    def _term_listener(self) -> bool:
        return self._terminate("listener")

    def _term_pool(self) -> bool:
        return self._terminate("worker")

    def _term_job(self) -> bool:
        return self._terminate("job")

    def _pg_restart(self) -> bool:
        self.cluster.restart(self.rng.choice(["fast", "immediate"]))
        return True

    # -- network ------------------------------------------------------------------------

    def _net_reset(self) -> bool:
        slot = self._slot()
        slot.proxy.set_mode("reset")
        self.stop.wait(self.rng.uniform(0.5, 2.0))
        slot.proxy.heal()
        return True

    def _net_blackhole(self) -> bool:
        slot = self._slot()
        slot.proxy.set_mode("blackhole")
        self.stop.wait(self.rng.uniform(1.0, 2.0 * self.lease))
        if self.rng.random() < 0.5:
            slot.proxy.set_mode("reset")  # the partition heals, but the connections are gone
        slot.proxy.heal()
        return True

    def _net_latency(self) -> bool:
        slot = self._slot()
        slot.proxy.set_mode("latency", self.rng.uniform(0.02, 0.3))
        self.stop.wait(self.rng.uniform(2.0, 6.0))
        slot.proxy.heal()
        return True

    def _net_stale(self) -> bool:
        """The connections open now hang for good (a NAT or firewall forgot them); new
        connections pass. The worker must give up on the hung ones and reconnect."""
        slot = self._slot()
        slot.proxy.set_mode("stale")
        self.stop.wait(self.rng.uniform(self.lease, 3.0 * self.lease))
        slot.proxy.heal()
        return True

    def heal_all(self) -> None:
        for slot in self.workers.slots:
            slot.proxy.heal()
            if slot.proc is not None and slot.proc.poll() is None:
                self.workers.signal(slot, signal.SIGCONT)
