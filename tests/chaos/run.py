"""One chaos run, start to finish: a private cluster, worker subprocesses behind fault
proxies, a producer, the fault controller, a drain with faults off, then the checker."""

from __future__ import annotations

import contextlib
import shutil
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any

import psycopg

from pgqueue import ops
from pgqueue._wake import MAX_WINDOW, WakeThrottle
from pgqueue.migrate import migrate

from .app import app, create_tables
from .checker import Report, check
from .cluster import PrivateCluster
from .faults import FaultController
from .limits import Limits, apply_limits, check_limits
from .producer import Producer
from .workers import EXIT_BY_HANDLER, WorkerPool
from .workflows import WorkflowProducer, check_workflows

__all__ = ["run_chaos"]

LEASE = 4.0
WORKER_ARGS = [
    "--concurrency", "8",
    "--lease", str(LEASE),
    "--heartbeat-interval", "1",
    "--poll-interval", "0.5",
    "--shutdown-timeout", "3",
    "--log-level", "WARNING",
]  # fmt: skip


def _log(msg: str) -> None:
    print(f"[chaos {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def run_chaos(
    seconds: float,
    *,
    workers: int = 3,
    rate: float = 15.0,
    seed: int | None = None,
    drain_timeout: float = 240.0,
    keep: Path | None = None,
    keep_always: bool = False,
    log: Callable[[str], None] = _log,
    limits: Limits | None = None,
    workflow_rate: float | None = None,
) -> Report:
    """Inject faults for ``seconds`` while jobs flow, drain, check; returns the report.

    With ``limits`` the queue runs under them (and is paused for a few seconds in the
    middle), every job carries a concurrency key, and ``report.limits`` says whether they
    held. With ``workflow_rate``, diamond-shaped graphs and batches with callbacks are
    created at that rate too (one in ten a batch), and ``report.workflows`` says whether
    dependencies, callbacks and rolled-back creations held.

    Worker logs and the server log are copied to ``keep`` (if given) when the run fails
    (or always, with ``keep_always``).
    """
    seed = int(time.time()) if seed is None else seed
    started = time.monotonic()
    app.wakes = WakeThrottle(MAX_WINDOW)  # this run's window decisions only
    cluster = PrivateCluster()
    pool: WorkerPool | None = None
    producer: Producer | None = None
    flows: WorkflowProducer | None = None
    report: Report | None = None
    try:
        cluster.start()
        with psycopg.connect(cluster.dsn(), autocommit=True) as admin:
            admin.execute("CREATE DATABASE chaos")
        direct = cluster.dsn("chaos")
        with psycopg.connect(direct, autocommit=True) as conn:
            migrate(conn, "pgqueue")
            create_tables(conn)
            if limits is not None:
                apply_limits(conn, limits)
        log(f"seed={seed} cluster on port {cluster.port} ({cluster.bindir}); logs in {cluster.root}")
        pool = WorkerPool(
            count=workers,
            db_host="127.0.0.1",
            db_port=cluster.port,
            dsn_for_port=lambda port: cluster.dsn("chaos", port=port),
            ledger_dsn=direct,
            logdir=cluster.root,
            args=WORKER_ARGS,
        )
        pool.start()
        _wait_for_listeners(direct, workers)
        producer = Producer(direct, rate=rate, seed=seed, keys=limits.keys if limits else 0)
        producer.start()
        if workflow_rate is not None:
            flows = WorkflowProducer(direct, rate=workflow_rate, seed=seed)
            flows.start()
        controller = FaultController(cluster, pool, lease=LEASE, seed=seed, log=log)
        pauser = _Pauser(direct, after=seconds * 0.4, hold=3.0, log=log) if limits is not None else None
        if pauser is not None:
            pauser.start()
        controller.run(seconds)
        if pauser is not None:
            pauser.join()
        producer.stop()
        if flows is not None:
            flows.stop()
        controller.heal_all()
        log(f"faults done ({sum(controller.counts.values())}); producer enqueued {producer.enqueued}; draining")
        wanted = set(producer.intent.committed) | set(producer.intent.unknown)
        if flows is not None:
            wanted |= flows.ids()
            log(f"workflow producer: {len(flows.diamonds)} diamonds, {len(flows.batches)} batches committed")
        _drain(direct, wanted, drain_timeout, log)
        if flows is not None:
            _drain_callbacks(direct, drain_timeout, log)
        pool.stop()
        faults = Counter(controller.counts)
        with psycopg.connect(direct, autocommit=True) as conn:
            faults.update(_handler_faults(conn))
            faults["worker_died_by_handler"] = sum(1 for e in pool.events if e.what == f"exit:{EXIT_BY_HANDLER}")
            report = check(conn, producer.intent, pool.events, faults)
            if limits is not None:
                report.limits = check_limits(conn, limits, pool.events, pauser.windows if pauser else [])
            if flows is not None:
                report.workflows = check_workflows(conn, flows)
        report.side_task_deaths = pool.log_text().count("worker side task")
        report.wakes = Counter({w.value: n for w, n in app.wakes.planned.items()})
        report.wakes["repair"] = app.wakes.repairs
        report.seconds = time.monotonic() - started
        if not report.ok:
            log(f"FAILED: {report.details()}")
            with psycopg.connect(direct, autocommit=True) as conn:
                for job_id in report.failing()[:10]:
                    log(_describe(conn, job_id))
        return report
    finally:
        if producer is not None:
            producer.stop()
        if flows is not None:
            flows.stop()
        if pool is not None:
            with contextlib.suppress(Exception):
                pool.stop(timeout=5)
        if keep is not None and (keep_always or report is None or not report.ok):
            keep.mkdir(parents=True, exist_ok=True)
            for f in cluster.root.glob("*.log"):
                shutil.copy(f, keep / f.name)
            log(f"logs kept in {keep}")
        cluster.destroy()


class _Pauser(threading.Thread):
    """Pauses the queue ``after`` seconds for ``hold`` seconds, riding out faults, and
    records the window (database clock: after the pause committed, before the resume)."""

    def __init__(self, dsn: str, *, after: float, hold: float, log: Callable[[str], None]) -> None:
        super().__init__(name="chaos-pauser", daemon=True)
        self.dsn, self.after, self.hold, self.log = dsn, after, hold, log
        self.windows: list[tuple[datetime, datetime]] = []

    def _clock_after(self, change: Callable[[psycopg.Connection[Any]], object]) -> datetime:
        deadline = time.monotonic() + 60
        while True:
            try:
                with psycopg.connect(self.dsn, autocommit=True, connect_timeout=5) as conn:
                    change(conn)
                    row = conn.execute("SELECT clock_timestamp()").fetchone()
                    assert row is not None
                    return row[0]  # type: ignore[no-any-return]
            except psycopg.OperationalError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.5)

    def run(self) -> None:
        time.sleep(self.after)
        paused = self._clock_after(lambda c: ops.pause_queue(c, "pgqueue", "default"))
        self.log("queue paused")
        time.sleep(self.hold)
        resumed = self._clock_after(lambda c: None)  # read before the resume commits
        self._clock_after(lambda c: ops.resume_queue(c, "pgqueue", "default"))
        self.log("queue resumed")
        self.windows.append((paused, resumed))


def _wait_for_listeners(dsn: str, count: int, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    with psycopg.connect(dsn, autocommit=True) as conn:
        while True:
            row = conn.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE application_name LIKE 'pgqueue listener %'"
            ).fetchone()
            if row is not None and row[0] >= count:
                return
            if time.monotonic() > deadline:
                raise RuntimeError(f"workers did not start within {timeout}s")
            time.sleep(0.1)


def _drain(dsn: str, ids: set[int], timeout: float, log: Callable[[str], None]) -> None:
    """Wait until every committed job is final (faults are off; retries may be backing off).

    Gives up when no job became final for ``timeout`` seconds (a stall: what the checker then
    reports as lost), or after four times that in all. A backlog that limits drain slowly
    but steadily (a rate of 40 starts a second, 8 at a time) is waited for."""
    started = time.monotonic()
    deadline = started + timeout
    wanted = sorted(ids)
    last = -1
    while True:
        with contextlib.suppress(psycopg.OperationalError), psycopg.connect(dsn, autocommit=True) as conn:
            row = conn.execute("SELECT count(*) FROM pgqueue.jobs_live WHERE id = ANY(%s)", [wanted]).fetchone()
            left = row[0] if row else -1
            if left == 0:
                return
            if left != last:
                log(f"draining: {left} jobs not final yet")
                if 0 <= left < last:
                    deadline = time.monotonic() + timeout  # progress: wait for the rest
                last = left
        now = time.monotonic()
        if now > deadline or now > started + 4 * timeout:
            log(f"drain stopped after {now - started:.0f}s ({timeout:g}s without progress, or 4x that in all)")
            return
        time.sleep(0.5)


def _drain_callbacks(dsn: str, timeout: float, log: Callable[[str], None]) -> None:
    """Wait until the batches' callback jobs (enqueued as the last members settled) are final."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with contextlib.suppress(psycopg.OperationalError), psycopg.connect(dsn, autocommit=True) as conn:
            row = conn.execute(
                "SELECT count(*) FROM pgqueue.jobs_live AS j JOIN pgqueue.batches AS b ON j.id = ANY(b.callback_ids)"
            ).fetchone()
            if row is not None and row[0] == 0:
                return
        time.sleep(0.5)
    log(f"callbacks not drained after {timeout}s")


def _describe(conn: psycopg.Connection[Any], job_id: int) -> str:
    """A failing job's row and runs, for the log."""
    job = conn.execute(
        "SELECT task, state::text, attempt, max_attempts, errors FROM pgqueue.jobs WHERE id = %s", [job_id]
    ).fetchone()
    runs = conn.execute(
        "SELECT attempt, kind, pid, started_at, ended_at, result FROM chaos_runs WHERE job_id = %s ORDER BY started_at",
        [job_id],
    ).fetchall()
    errors = [(e.get("attempt"), e.get("type"), e.get("at")) for e in (job[4] if job else None) or []]
    return f"job {job_id}: {job[:4] if job else None} errors={errors} runs={runs}"


def _handler_faults(conn: psycopg.Connection[Any]) -> Counter[str]:
    """Misbehaving first attempts that actually ran (hang, hog, exit)."""
    rows = conn.execute(
        "SELECT kind, count(*) FROM chaos_runs WHERE attempt = 1 AND kind IN ('hang', 'hang_sync', 'hog', 'exit')"
        " GROUP BY kind"
    ).fetchall()
    return Counter({f"handler_{k}": int(n) for k, n in rows})
