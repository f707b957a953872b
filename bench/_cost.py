"""What a measured window cost: WAL bytes, worker CPU and PostgreSQL server CPU.

:class:`CostMeter` brackets a workload's window (``start`` ... ``stop``) and reports, per job:

* **WAL B/job**: WAL written in the window. With the ``pg_walinspect`` extension (PostgreSQL
  15+, superuser to create it) the window's WAL records are read back and only those of
  *this database* are counted: records whose block references name this database's OID,
  plus every record of a transaction that wrote such a block (its commit record).
  Checkpoint and other cluster-wide records, and other databases' writes, are left out;
  their share of the window is kept as ``WAL others %``. So that a busy server cannot
  recycle the window's WAL segments before they are read (a checkpoint triggered by other
  databases' writes can), a *temporary* physical replication slot reserves them from the
  window's start until they are read; it is dropped then, or with the session if the bench
  dies (it needs the REPLICATION privilege; without it the window is read unprotected).
  Each record counts with its
  alignment padding (``end_lsn - start_lsn``); full-page images are inside that figure and
  also reported apart (``WAL FPI B/job``), since a checkpoint falling in one run's window
  inflates it. Without ``pg_walinspect`` (or when the window's WAL was already recycled)
  the figure is the whole cluster's ``pg_current_wal_insert_lsn()`` difference, and
  ``wal_source`` says so: other databases' activity is then counted too.
* **worker CPU us/job**: user + system time of the contender's worker processes over the
  window, from ``/proc/PID/stat`` (every thread of the process; 10 ms ticks).
* **server CPU us/job**: user + system time of the PostgreSQL backends connected to this
  database, from ``/proc/PID/stat`` (only when the server runs on this machine), except
  the bench harness's own connections (``application_name`` = :data:`HARNESS_APP`:
  preloading, polling, sampling): the workers' backends, the producers' in steady, and
  autovacuum workers on this database. Backends are looked up every ``interval`` seconds;
  one that exits between two looks loses its last interval, so the figure is a floor.
  The cluster's shared processes (WAL writer, checkpointer, background writer) are not
  attributed to any database and are left out.

Figures are NaN where they cannot be measured (not Linux, a remote server).
"""

from __future__ import annotations

import itertools
import math
import os
import re
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg

from bench._db import HARNESS_APP, connect

Conn = psycopg.Connection[Any]

_PROC = Path("/proc")
_TICK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def proc_times(pid: int) -> tuple[float, float] | None:
    """(user + system CPU seconds, start time in seconds since boot) of a process, or None."""
    try:
        raw = (_PROC / str(pid) / "stat").read_text()
    except OSError:
        return None
    # The command name (field 2) is in parentheses and may hold spaces: split after it.
    fields = raw[raw.rindex(")") + 2 :].split()
    # fields[0] is field 3 (state): utime is field 14, stime 15, starttime 22.
    return (int(fields[11]) + int(fields[12])) / _TICK, int(fields[19]) / _TICK


def proc_name(pid: int) -> str | None:
    try:
        return (_PROC / str(pid) / "comm").read_text().strip()
    except OSError:
        return None


def uptime() -> float:
    """Seconds since boot, the clock ``/proc/PID/stat`` start times are on."""
    return float((_PROC / "uptime").read_text().split()[0])


def cpu_seconds(pids: list[int]) -> float:
    """CPU seconds used so far by these processes (those still alive)."""
    return sum(t[0] for t in map(proc_times, pids) if t is not None)


# -- WAL ------------------------------------------------------------------------------------

WALINSPECT = "pg_walinspect"

# Records of this database: a block reference into it ("rel <tablespace>/<db oid>/<rel>"),
# or any record of a transaction that wrote such a block (its COMMIT carries no block).
# Grouped by window part (records before/after the split LSN).
WAL_RECORDS_SQL = """
WITH r AS (
    SELECT start_lsn >= %(split)s::pg_lsn AS late,
           (end_lsn - start_lsn)::bigint AS bytes,
           fpi_length::bigint AS fpi,
           xid::text::bigint AS x,
           coalesce(block_ref, '') ~ %(pattern)s AS touches
    FROM pg_get_wal_records_info(%(start)s::pg_lsn, %(end)s::pg_lsn)
), tx AS (SELECT DISTINCT x FROM r WHERE touches AND x <> 0)
SELECT late,
       coalesce(sum(bytes) FILTER (WHERE touches OR x IN (SELECT x FROM tx)), 0),
       coalesce(sum(fpi) FILTER (WHERE touches OR x IN (SELECT x FROM tx)), 0),
       coalesce(sum(bytes), 0)
FROM r GROUP BY late
"""


@dataclass
class WalWindow:
    """WAL bytes of a window, split in two at an optional mark (e.g. enqueue / run)."""

    source: str  # "pg_walinspect (this database)" or "pg_current_wal_insert_lsn (whole cluster)"
    ours: tuple[int, int]  # (before the mark, after it)
    fpi: tuple[int, int]
    cluster: int  # every record in the window, all databases

    @property
    def total(self) -> int:
        return sum(self.ours)


def _lsn(conn: Conn) -> str:
    row = conn.execute("SELECT pg_current_wal_insert_lsn()::text").fetchone()
    assert row is not None
    return str(row[0])


def enable_walinspect(conn: Conn) -> bool:
    """Create pg_walinspect in this database if it can be; True when it is there."""
    row = conn.execute("SELECT installed_version FROM pg_available_extensions WHERE name = %s", [WALINSPECT]).fetchone()
    if row is None:
        return False
    if row[0] is None:
        try:
            conn.execute(f"CREATE EXTENSION IF NOT EXISTS {WALINSPECT}")
        except psycopg.Error:
            return False
    return True


_SLOTS = itertools.count()  # slot names are unique per bench process


def reserve_wal(conn: Conn) -> str | None:
    """Hold WAL from now on with a temporary physical replication slot; its name, or None
    when this role may not create one (or no slot is free)."""
    name = f"pgqueue_bench_{os.getpid()}_{next(_SLOTS)}"
    try:
        conn.execute("SELECT pg_create_physical_replication_slot(%s, true, true)", [name])
    except psycopg.Error:
        return None
    return name


def release_wal(conn: Conn, slot: str | None) -> None:
    if slot is not None:
        conn.execute("SELECT pg_drop_replication_slot(%s)", [slot])


def _wait_flushed(conn: Conn, lsn: str, timeout: float = 5.0) -> None:
    # pg_walinspect reads only flushed WAL; the WAL writer flushes within wal_writer_delay.
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        row = conn.execute("SELECT pg_current_wal_flush_lsn() >= %s::pg_lsn", [lsn]).fetchone()
        if row and row[0]:
            return
        time.sleep(0.02)


def wal_window(conn: Conn, start: str, split: str, end: str, inspect: bool) -> WalWindow:
    why = "pg_walinspect unavailable"
    if inspect:
        _wait_flushed(conn, end)
        row = conn.execute("SELECT oid FROM pg_database WHERE datname = current_database()").fetchone()
        assert row is not None
        try:
            rows = conn.execute(
                WAL_RECORDS_SQL, {"start": start, "end": end, "split": split, "pattern": rf"rel \d+/{row[0]}/"}
            ).fetchall()
        except psycopg.Error as exc:  # e.g. the window's segments were already recycled
            why = f"pg_walinspect failed: {exc}"
        else:
            parts = {bool(late): (int(o), int(f), int(c)) for late, o, f, c in rows}
            early, late = parts.get(False, (0, 0, 0)), parts.get(True, (0, 0, 0))
            return WalWindow(
                "pg_walinspect (this database)", (early[0], late[0]), (early[1], late[1]), early[2] + late[2]
            )
    row = conn.execute(
        "SELECT pg_wal_lsn_diff(%s::pg_lsn, %s::pg_lsn)::bigint, pg_wal_lsn_diff(%s::pg_lsn, %s::pg_lsn)::bigint",
        [split, start, end, split],
    ).fetchone()
    assert row is not None
    return WalWindow(f"pg_current_wal_insert_lsn (whole cluster; {why})", (int(row[0]), int(row[1])), (0, 0), sum(row))


# -- server CPU -----------------------------------------------------------------------------

BACKENDS_SQL = """
SELECT pid FROM pg_stat_activity
WHERE datname = current_database() AND pid <> pg_backend_pid()
  AND application_name IS DISTINCT FROM %s
"""


@dataclass
class BackendCpu:
    """CPU of this database's backends (but the harness's), looked up every ``interval`` s."""

    dsn: str
    interval: float = 0.2
    since: float = 0.0  # window start, seconds since boot
    first: dict[int, float] = field(default_factory=dict)
    last: dict[int, float] = field(default_factory=dict)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None
    _error: Exception | None = None

    def look(self, conn: Conn) -> None:
        for (pid,) in conn.execute(BACKENDS_SQL, [HARNESS_APP]).fetchall():
            times = proc_times(pid)
            if times is None:
                continue
            cpu, started = times
            if pid not in self.first:
                # A backend born inside the window spent all its CPU in it.
                self.first[pid] = 0.0 if started >= self.since else cpu
            self.last[pid] = cpu

    def start(self, conn: Conn) -> None:
        self.since = uptime()
        self.look(conn)
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            with connect(self.dsn) as conn:
                while not self._stop.wait(self.interval):
                    self.look(conn)
        except Exception as exc:  # noqa: BLE001 - handed to the caller: stop() re-raises it
            self._error = exc

    def stop(self, conn: Conn) -> float:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(30)
        if self._error is not None:
            raise self._error
        self.look(conn)
        return sum(self.last[pid] - base for pid, base in self.first.items())


def server_is_local(conn: Conn) -> bool:
    """Whether this connection's backend is a process on this machine (its /proc is ours)."""
    row = conn.execute("SELECT pg_backend_pid()").fetchone()
    return row is not None and proc_name(int(row[0])) == "postgres"


# -- the meter --------------------------------------------------------------------------------


@dataclass
class CostMeter:
    """WAL, worker CPU and server CPU over one window; see the module docstring.

    ``start()`` before the window, ``mark()`` (optional) where its first part ends (e.g. the
    enqueue's commit in drain), ``stop()`` at its end with the worker processes still alive.
    """

    dsn: str
    worker_pids: list[int]
    inspect: bool = True  # try pg_walinspect; False: the cluster-wide LSN difference
    _conn: Conn | None = None
    _lsn: list[str] = field(default_factory=list)
    _workers0: float = 0.0
    _backends: BackendCpu | None = None
    _slot: str | None = None
    result: dict[str, float] = field(default_factory=dict)
    wal_source: str = ""

    def start(self) -> CostMeter:
        self._conn = connect(self.dsn)
        self.inspect = self.inspect and enable_walinspect(self._conn)
        self._slot = reserve_wal(self._conn) if self.inspect else None
        if server_is_local(self._conn):
            self._backends = BackendCpu(self.dsn)
            self._backends.start(self._conn)
        self._workers0 = cpu_seconds(self.worker_pids)
        self._lsn = [_lsn(self._conn)]
        return self

    def mark(self) -> None:
        assert self._conn is not None
        self._lsn.append(_lsn(self._conn))

    def stop(self, jobs: int) -> dict[str, float]:
        """Stop measuring; returns the per-job figures (also kept in ``result``)."""
        assert self._conn is not None
        conn = self._conn
        try:
            end = _lsn(conn)
            workers = cpu_seconds(self.worker_pids) - self._workers0
            server = self._backends.stop(conn) if self._backends is not None else math.nan
            split = self._lsn[1] if len(self._lsn) > 1 else end
            wal = wal_window(conn, self._lsn[0], split, end, self.inspect)
            release_wal(conn, self._slot)
        finally:
            conn.close()  # a temporary slot not dropped yet goes with the session
        self.wal_source = wal.source
        per = max(jobs, 1)
        out = {
            "WAL B/job": wal.total / per,
            "WAL FPI B/job": sum(wal.fpi) / per,
            "worker CPU us/job": workers * 1e6 / per if self.worker_pids else math.nan,
            "server CPU us/job": server * 1e6 / per,
        }
        if len(self._lsn) > 1:  # the two parts: before the mark (enqueue) and after (run)
            out["WAL enqueue B/job"] = wal.ours[0] / per
            out["WAL run B/job"] = wal.ours[1] / per
        if wal.source.startswith("pg_walinspect"):
            out["WAL others %"] = 100 * (wal.cluster - wal.total) / wal.cluster if wal.cluster else 0.0
        self.result = out
        return out


def warnings_for(sources: Iterable[str]) -> list[str]:
    """What to say next to the figures about how WAL was measured (one line for all runs)."""
    fallbacks = [s for s in sources if s.startswith("pg_current_wal")]
    if not fallbacks:
        return []
    # The reasons, without the segment file names that make each one unique.
    reasons = sorted({re.sub(r"pg_wal/\w+", "pg_wal/...", s.partition("; ")[2].rstrip(")")) for s in fallbacks})
    return [
        f"WAL per job is the whole cluster's in {len(fallbacks)} run(s) ({'; '.join(reasons)}): other "
        "databases' writes during those runs are counted too; run on an otherwise idle server"
    ]
