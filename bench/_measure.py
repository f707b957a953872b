"""Measuring while a workload runs: producer processes and their commit times, samplers
polling the database in the background, pickup latencies and percentiles.

Wall-clock times (``time.time()``) are used wherever two processes' moments are compared:
producers, workers and the samplers all run on this machine, so their clocks agree.
"""

from __future__ import annotations

import math
import re
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import psycopg

from bench._contenders import Contender
from bench._runner import REPO

Conn = psycopg.Connection[Any]


# -- producers ----------------------------------------------------------------------------


@dataclass
class Producers:
    """``count`` producer processes of one contender, started together at ``start_at``.

    Each prints ``<key> <commit wall time>`` lines (every job for ``bench.workers.producer``
    with a rate, one per transaction for ``bench._feeder``) and ``DONE <n> <elapsed>``.
    Lines are read as they come (a full pipe would stall the producer).
    """

    dsn: str
    contender: str
    count: int
    duration: float
    module: str = "bench._feeder"
    extra: tuple[str, ...] = ()
    start_delay: float = 1.0
    start_at: float = 0.0
    sent: dict[str, float] = field(default_factory=dict)  # key -> commit time
    commits: list[float] = field(default_factory=list)  # every reported commit time
    done: int = 0  # jobs committed, from the DONE lines
    _procs: list[subprocess.Popen[str]] = field(default_factory=list)
    _threads: list[threading.Thread] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _done_lines: list[str] = field(default_factory=list)

    def start(self) -> float:
        """Spawn the producers; returns the wall-clock instant they all begin."""
        self.start_at = time.time() + self.start_delay
        cmd = [
            sys.executable,
            "-m",
            self.module,
            "--dsn",
            self.dsn,
            "--contender",
            self.contender,
            "--duration",
            str(self.duration),
            "--start-at",
            f"{self.start_at:.6f}",
            *self.extra,
        ]
        for _ in range(self.count):
            proc = subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.PIPE, text=True)
            self._procs.append(proc)
            t = threading.Thread(target=self._read, args=(proc,), daemon=True)
            t.start()
            self._threads.append(t)
        return self.start_at

    def _read(self, proc: subprocess.Popen[str]) -> None:
        assert proc.stdout is not None
        with proc.stdout:
            for line in proc.stdout:
                if line.startswith("DONE "):
                    with self._lock:
                        self._done_lines.append(line)
                    continue
                key, _, at = line.partition(" ")
                if at:
                    t = float(at)
                    with self._lock:
                        self.sent[key] = t
                        self.commits.append(t)

    def wait(self, timeout: float | None = None) -> int:
        """Wait for every producer; returns the jobs they committed in all."""
        timeout = self.duration + self.start_delay + 120 if timeout is None else timeout
        failed = []
        for proc in self._procs:
            try:
                rc = proc.wait(timeout)
            except subprocess.TimeoutExpired:
                proc.kill()
                rc = proc.wait()
            if rc != 0:
                failed.append(rc)
        for t in self._threads:
            t.join(10)
        if failed or len(self._done_lines) != len(self._procs):
            raise RuntimeError(f"{self.contender} producer failed (exit codes {failed or '0, no DONE line'})")
        self.done = sum(int(line.split()[1]) for line in self._done_lines)
        self.commits.sort()
        return self.done

    def kill(self) -> None:
        for proc in self._procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        for t in self._threads:
            t.join(5)


# -- background sampling ------------------------------------------------------------------


@dataclass
class Sampler:
    """Calls ``probe(conn)`` every ``interval`` seconds on its own connection, in a thread.

    Each sample is ``(wall time taken, value)``; a failing probe stops the sampler and the
    error is re-raised by :meth:`stop`.
    """

    dsn: str
    probe: Callable[[Conn], Any]
    interval: float
    samples: list[tuple[float, Any]] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None
    _error: Exception | None = None

    def start(self) -> Sampler:
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        return self

    def _run(self) -> None:
        try:
            with psycopg.connect(self.dsn, autocommit=True) as conn:
                next_at = time.monotonic()
                while not self._stop.is_set():
                    at = time.time()
                    self.samples.append((at, self.probe(conn)))
                    next_at += self.interval
                    self._stop.wait(max(next_at - time.monotonic(), 0))
        except Exception as exc:  # noqa: BLE001 - handed to the caller: stop() re-raises it
            self._error = exc

    def stop(self) -> list[tuple[float, Any]]:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(30)
        if self._error is not None:
            raise self._error
        self.samples.sort(key=lambda s: s[0])
        return self.samples


def count_probe(sql: str) -> Callable[[Conn], int]:
    def probe(conn: Conn) -> int:
        row = conn.execute(sql).fetchone()
        return int(row[0]) if row else 0

    return probe


# -- what the database shows ----------------------------------------------------------------

ACTIVITY_SQL = """
SELECT count(*) FILTER (WHERE wait_event_type = 'Lock'),
       count(*) FILTER (WHERE wait_event_type = 'LWLock'),
       count(*) FILTER (WHERE state = 'active')
FROM pg_stat_activity
WHERE datname = current_database() AND pid <> pg_backend_pid()
"""


def activity_probe(conn: Conn) -> tuple[int, int, int]:
    """(backends waiting on a heavyweight lock, on an LWLock, active) in this database."""
    row = conn.execute(ACTIVITY_SQL).fetchone()
    return (int(row[0]), int(row[1]), int(row[2])) if row else (0, 0, 0)


TABLE_SQL = """
SELECT coalesce(s.n_dead_tup, 0), coalesce(s.n_live_tup, 0),
       pg_relation_size(c.oid), pg_indexes_size(c.oid),
       coalesce(s.autovacuum_count, 0) + coalesce(s.vacuum_count, 0),
       coalesce(s.autoanalyze_count, 0) + coalesce(s.analyze_count, 0)
FROM pg_class c LEFT JOIN pg_stat_user_tables s ON s.relid = c.oid
WHERE c.oid = %s::regclass
"""


def vacuum_warnings(dsn: str) -> list[str]:
    """What makes dead-tuple and size figures unlike production's, said up front."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute("SHOW autovacuum").fetchone()
    if row and row[0] == "off":
        return [
            "autovacuum is off on this server: nothing vacuums the job tables during a run (baseline "
            "included), so dead tuples and sizes only grow; turn it on to measure what production sees"
        ]
    return []


def job_table(conn: Conn, contender: Contender) -> str | None:
    """The relation a contender keeps unfinished jobs in: the one its ``remaining_sql``
    counts (``pgqueue.jobs_live``, ``bench_raw.jobs``), if that names a single table."""
    m = re.search(r"\bFROM\s+([\w.\"]+)\s*$", contender.remaining_sql.strip(), re.IGNORECASE)
    if not m:
        return None
    row = conn.execute("SELECT to_regclass(%s)::text", [m.group(1)]).fetchone()
    return m.group(1) if row and row[0] else None


def table_probe(relation: str) -> Callable[[Conn], dict[str, float]]:
    """Dead and live tuples, heap and index size, vacuum and analyze runs so far.

    The tuple counts are statistics: they lag by about a second, and each ANALYZE replaces
    them with an estimate from its sample (so they can drop without a VACUUM)."""

    def probe(conn: Conn) -> dict[str, float]:
        conn.execute("SELECT pg_stat_clear_snapshot()")
        row = conn.execute(TABLE_SQL, [relation]).fetchone()
        if row is None:
            return {}
        return {
            "dead tuples": row[0],
            "live tuples": row[1],
            "table MB": row[2] / 2**20,
            "index MB": row[3] / 2**20,
            "vacuums": row[4],
            "analyzes": row[5],
        }

    return probe


# -- latency ------------------------------------------------------------------------------


def latencies_ms(sent: dict[str, float], started: dict[str, float]) -> list[float]:
    """Pickup latency of every sent job a worker reported: handler start - commit."""
    return sorted((started[k] - t) * 1000 for k, t in sent.items() if k in started)


def percentile(sorted_values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile of already sorted values (q in 0..100)."""
    if not sorted_values:
        return math.nan
    rank = max(math.ceil(q / 100 * len(sorted_values)), 1)
    return sorted_values[rank - 1]


def latency_summary(lat: Sequence[float]) -> dict[str, float]:
    return {
        "p50 ms": percentile(lat, 50),
        "p95 ms": percentile(lat, 95),
        "p99 ms": percentile(lat, 99),
        "max ms": lat[-1] if lat else math.nan,
    }


def wait_until(predicate: Callable[[], bool], timeout: float, interval: float = 0.01) -> bool:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            return False
        time.sleep(interval)
    return True
