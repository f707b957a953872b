"""The worker: one asyncio loop that claims, runs and reports jobs.

Design notes (the guarantees these uphold are in docs/guarantees.md):

* **Fetch.** Claims are sized to free capacity (never more than ``fetch_batch``). A claim
  that came back full means more work is waiting, so the loop claims again at once while
  capacity lasts, and again as soon as half of the capacity frees up. A partial claim
  means the queue is drained: the loop sleeps until a notification, the poll interval, or
  stop.
* **Leases.** Every claimed job carries a lease token. The heartbeat extends all leases
  this process holds (running jobs and outcomes not yet written) in one statement; a job
  missing from its answer was rescued elsewhere, so its handler is cancelled if it can be
  and its outcome will be refused by the fence.
* **Outcomes** go to the completer, which writes them in batches. Transactional tasks
  write their own completion inside the handler's transaction.
* **Maintenance** (scheduler + rescuer, partitions) runs in every process; a
  transaction-scoped advisory lock picks one process per tick. So does the **cron**
  scheduler (``_cron_loop``), when the app declares schedules.
* **Shutdown** (``stop()``): stop claiming, let in-flight jobs finish for up to
  ``shutdown_timeout``, cancel the rest and release them to ``available`` without
  counting the attempt, then write every pending outcome.
* Side tasks are supervised: if one dies of an unexpected error the worker stops and
  ``run()`` raises it, rather than limping on.

Signals are the caller's business (the CLI installs them); this is a library object.

Why this module is long (~590 lines): start-up, the fetch loop, the lease heartbeat and
shutdown all read and write the same in-flight state (active attempts, cancel flags, the
completer's buffer). Maintenance and cron already run as separate services; moving the
heartbeat into its own module and letting the executor own an attempt end to end are
the next splits.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import logging
import os
import secrets
import socket
import threading
import time
import uuid
from dataclasses import dataclass
from typing import Any

import psycopg
import psycopg.errors
import psycopg_pool

from .._db.conn import application_name, brief, within
from .._db.jobs import JobsDB, Outcome
from .._db.safe_json import configure_connection
from .._dsn import open_connection, unavailable
from ..app import App
from ..config import DEFAULT_QUEUE, WorkerConfig
from ..cron.scheduler import CronScheduler, CronService, scheduler_for
from ..errors import DatabaseUnavailableError
from ..logging_setup import log_outcome
from ..maintenance.partitions import ensure_partitions
from ..maintenance.service import RECONNECT_BACKOFF
from ..maintenance.services import maintainer
from ..metrics import WorkerMetrics, serve_metrics
from ..migrate import require_current
from ..models import CANCEL_FLAG, CancelFlag, Job, JobState
from ..retry import Retries
from .claim_cursor import ClaimCursors
from .completer import Completer
from .db_wait import wait_for_database
from .executor import Attempt, Executor
from .listener import Listener
from .registry import CancelFlags, Registry

__all__ = ["Worker", "WorkerStats"]

log = logging.getLogger("pgqueue.worker")


@dataclass
class WorkerStats:
    """Counters since start; read them from the worker's loop."""

    claimed: int = 0
    completed: int = 0
    retried: int = 0
    discarded: int = 0
    cancelled: int = 0
    refused: int = 0  # outcomes fenced off because the lease had been lost
    released: int = 0
    claims: int = 0
    empty_claims: int = 0
    #: The fetch loop is waiting for a wake-up (NOTIFY, poll timer, free capacity) with no
    #: claim in flight: a signal tests can await instead of counting claims.
    fetcher_waiting: bool = False


def _default_worker_id() -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(3)}"


class Worker:
    def __init__(self, app: App, config: WorkerConfig | None = None) -> None:
        self.app = app
        self.config = config or app.worker_config
        self.worker_id = self.config.worker_id or _default_worker_id()
        queues = self.config.queues or sorted(
            {t.queue for t in app.tasks.values()} | {s.queue for s in app.schedules.values()} | {DEFAULT_QUEUE}
        )
        self.queues: tuple[str, ...] = tuple(queues)
        self.db = JobsDB(app.schema)
        self.stats = WorkerStats()
        self.started = asyncio.Event()
        self.listener: Listener | None = None
        self.cron: CronScheduler | None = None
        self._stopping = asyncio.Event()
        self._wake = asyncio.Event()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._active: dict[int, asyncio.Task[None]] = {}
        self._held: dict[int, uuid.UUID] = {}
        self._started_at: dict[int, float] = {}
        self._slots_used = 0
        self._backlog = False
        self._cursors = ClaimCursors(self.config.claim_cursor_threshold)
        self._cancels = CancelFlags()
        self._registry = Registry(self.db, self.worker_id, self.queues, self.config)
        self.metrics: WorkerMetrics | None = None
        self._failure: BaseException | None = None
        self._side_tasks: list[asyncio.Task[None]] = []
        self._sync_pool: psycopg_pool.ConnectionPool | None = None
        self._sync_pool_lock = threading.Lock()
        self._executor: Executor | None = None
        # Held while a heartbeat refreshes the registration, so that the final
        # deregistration cannot be overtaken by a heartbeat (a stopped worker shown alive).
        self._beat_lock = asyncio.Lock()
        self._beats_over = False
        self._maintainer, self._partitions = maintainer(
            self.db,
            self._connection,
            dsn=lambda: self.app.dsn,
            schema=app.schema,
            config=self.config,
            worker_id=self.worker_id,
            on_pinned=self._cursors.set_pinned,
        )

    # -- control ----------------------------------------------------------------------

    def stop(self) -> None:
        """Ask for a graceful stop. Safe to call from any thread or a signal handler."""
        loop = self._loop
        if loop is None:
            self._stopping.set()
        elif loop.is_running():
            loop.call_soon_threadsafe(self._request_stop)
        else:
            self._request_stop()

    def _request_stop(self) -> None:
        if not self._stopping.is_set():
            log.info(
                "worker %s stopping: no new claims; waiting for %d in-flight jobs", self.worker_id, len(self._active)
            )
        self._stopping.set()
        self._wake.set()

    def wake(self) -> None:
        self._wake.set()

    @property
    def in_flight(self) -> int:
        return len(self._active)

    @property
    def sync_handlers_running(self) -> int:
        """Sync handlers still running in their threads (after a stop: the stuck ones)."""
        return 0 if self._executor is None else self._executor.sync_running

    # -- main -------------------------------------------------------------------------

    async def run(self) -> None:
        """Run until :meth:`stop`; raises if a side task failed."""
        self._loop = asyncio.get_running_loop()
        cfg = self.config
        dsn = self.app.dsn
        if not cfg.wait_for_database:
            await asyncio.to_thread(self._check_database, dsn)
        elif not await wait_for_database(lambda: self._reach_database(dsn), dsn, self._stopping, log):
            log.info("worker %s stopped before it started", self.worker_id)
            return
        transactional_async = any(t.transactional and t.is_async for t in self.app.tasks.values())
        pool = psycopg_pool.AsyncConnectionPool(
            dsn,
            min_size=2,
            # fetcher, completer, heartbeat, maintenance, vacuum, cron (+ transactional handlers)
            max_size=6 + (cfg.concurrency if transactional_async else 0),
            kwargs={"autocommit": True, **application_name(dsn, "worker")},
            configure=configure_connection,  # no stored args can crash a claim
            open=False,
            name=f"pgqueue-{self.worker_id}",
        )
        threads = concurrent.futures.ThreadPoolExecutor(max_workers=cfg.concurrency, thread_name_prefix="pgqueue-job")
        try:
            await pool.open(wait=True, timeout=30)
            self._pool = pool
            self._executor = Executor(
                db=self.db, worker_id=self.worker_id, threads=threads, pool=pool, sync_pool=self._get_sync_pool
            )
            self._completer = Completer(
                self.db,
                pool,
                batch_size=cfg.completion_batch,
                interval=cfg.completion_interval,
                on_written=self._on_written,
                repair_partitions=self._partitions.run_once,
                timeout=cfg.lease,
            )
            self._spawn(self._completer.run(), "completer")
            self._spawn(self._heartbeat_loop(), "heartbeat")
            self.cron = scheduler_for(self.app, pool, worker_id=self.worker_id)
            if self.cron is not None:
                self._maintainer.add(CronService(self.cron))
            self._maintainer.start(self._side_task_done)
            if cfg.listen:
                self.listener = Listener(
                    dsn,
                    self.db,
                    self.queues,
                    self.wake,
                    health_interval=cfg.listener_health_interval,
                )
                self._spawn(self.listener.run(), "listener")
            log.info(
                "worker %s started: queues=%s concurrency=%d tasks=%d database=%s schema=%s",
                self.worker_id,
                ",".join(self.queues),
                cfg.concurrency,
                len(self.app.tasks),
                self.app.database.display,
                self.app.schema,
            )
            await self._start_observability()
            self.started.set()
            await self._fetch_loop()
            await self._shutdown()
        finally:
            if self.metrics is not None:
                await asyncio.to_thread(self.metrics.close)
            await self._maintainer.stop()
            for t in self._side_tasks:
                t.cancel()
            await asyncio.gather(*self._side_tasks, return_exceptions=True)
            threads.shutdown(wait=False, cancel_futures=True)
            await pool.close()
            if self._sync_pool is not None:
                await asyncio.to_thread(self._sync_pool.close)
        if self._failure is not None:
            raise self._failure

    async def _start_observability(self) -> None:
        """Register in the worker registry; serve metrics if ``metrics_port`` is set."""
        async with self._pool.connection() as conn:
            await self._registry.beat(conn, {}, self.config.lease, in_flight=0, listener_connected=False)
        self.metrics = await serve_metrics(self)

    async def _reach_database(self, dsn: str) -> None:
        # An async connect first: unlike the check in a thread, stop() can cut it short.
        try:
            aconn = await psycopg.AsyncConnection.connect(dsn, autocommit=True, connect_timeout=10)
        except psycopg.OperationalError as exc:
            raise unavailable(exc, dsn) from exc
        await aconn.close()
        await asyncio.to_thread(self._check_database, dsn)

    def _check_database(self, dsn: str) -> None:
        try:
            with open_connection(dsn) as conn:
                require_current(conn, self.app.schema)
                ensure_partitions(conn, self.app.schema, days_ahead=self.config.partition_days_ahead)
        except psycopg.OperationalError as exc:  # lost after connecting
            raise DatabaseUnavailableError.from_exc(exc) from exc

    def _connection(self) -> contextlib.AbstractAsyncContextManager[psycopg.AsyncConnection[Any]]:
        return self._pool.connection()

    def _spawn(self, coro: Any, name: str) -> None:
        task = asyncio.create_task(coro, name=f"pgqueue-{name}")
        task.add_done_callback(self._side_task_done)
        self._side_tasks.append(task)

    def _side_task_done(self, task: asyncio.Task[None]) -> None:
        if task.cancelled():
            return
        exc = task.exception()
        if exc is not None and self._failure is None:
            log.error("worker side task %s died: %r; stopping the worker", task.get_name(), exc, exc_info=exc)
            self._failure = exc
            self._request_stop()

    def _get_sync_pool(self) -> psycopg_pool.ConnectionPool:
        with self._sync_pool_lock:
            if self._sync_pool is None:
                self._sync_pool = psycopg_pool.ConnectionPool(
                    self.app.dsn,
                    min_size=1,
                    max_size=self.config.concurrency,
                    kwargs={"autocommit": True, **application_name(self.app.dsn, "job")},
                    open=True,
                )
            return self._sync_pool

    # -- fetching ---------------------------------------------------------------------

    async def _fetch_loop(self) -> None:
        cfg = self.config
        task_limits = self.app.task_limits()
        retries = Retries(RECONNECT_BACKOFF)
        while not self._stopping.is_set():
            self._wake.clear()
            free = self._free_capacity()
            if free <= 0:
                self._backlog = True
            elif task_limits:
                limit = min(free, cfg.fetch_batch)
                batch: list[tuple[Job, Outcome]] = []
                try:
                    async with self._pool.connection() as conn:
                        if self._stopping.is_set():
                            break  # stop() came while we waited for a connection
                        batch = self._completer.take()
                        began = time.monotonic()
                        after = self._cursors.after(began)
                        jobs, written = await within(
                            cfg.lease,  # a claim answered after its lease is worthless anyway
                            self.db.claim(
                                conn,
                                queues=self.queues,
                                task_limits=task_limits,
                                limit=limit,
                                lease=cfg.lease,
                                worker_id=self.worker_id,
                                outcomes=[(j.id, j.lease_token, o) for j, o in batch],
                                after=after,
                            ),
                            "claim",
                        )
                    done = time.monotonic()
                    self._cursors.observe(jobs, from_head=not after, elapsed=done - began, now=done)
                    retries.reset()
                    if batch:
                        self._completer.acknowledge(batch, written)
                except (psycopg.OperationalError, psycopg_pool.PoolTimeout, psycopg.errors.CheckViolation) as exc:
                    if batch:
                        self._completer.give_back(batch)  # the completer retries (and repairs partitions)
                    if isinstance(exc, psycopg.errors.CheckViolation) and "no partition" not in str(exc):
                        raise
                    delay = retries.next()
                    log.warning("claim failed (%s); retrying in %.2fs", brief(exc), delay)
                    await self._sleep_unless_stopping(delay)
                    continue
                if self._stopping.is_set() and jobs:
                    await self._release_unstarted(jobs)
                    break
                self.stats.claims += 1
                self.stats.claimed += len(jobs)
                if self.metrics is not None:
                    self.metrics.jobs_claimed(jobs)
                if not jobs:
                    self.stats.empty_claims += 1
                for job in jobs:
                    self._start(job)
                self._backlog = len(jobs) == limit
                if self._backlog and self._free_capacity() > 0:
                    continue  # more is waiting and we have room: claim again now
            self.stats.fetcher_waiting = True
            try:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._wake.wait(), self._poll_timeout())
            finally:
                self.stats.fetcher_waiting = False

    def _poll_timeout(self) -> float:
        cfg = self.config
        if self.listener is not None and self.listener.connected.is_set():
            return max(cfg.poll_interval, cfg.poll_interval_listening)
        return cfg.poll_interval

    async def _release_unstarted(self, jobs: list[Job]) -> None:
        try:
            async with self._pool.connection() as conn:
                self.stats.released += await within(
                    self.config.lease, self.db.release(conn, {j.id: j.lease_token for j in jobs}), "release"
                )
        except (psycopg.OperationalError, psycopg_pool.PoolTimeout) as exc:
            log.error("could not release %d jobs claimed during stop (%s); the rescuer will", len(jobs), brief(exc))

    async def _sleep_unless_stopping(self, seconds: float) -> None:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._stopping.wait(), seconds)

    def _start(self, job: Job) -> None:
        stale = self._active.get(job.id)
        if stale is not None:
            # This process claimed the job again while an earlier attempt still runs here:
            # that attempt lost its lease (the process froze past it and the job was
            # rescued), so it can never complete. Stop it; its outcome would be fenced.
            log.warning("job %d claimed again while a stale attempt still ran here; cancelling that one", job.id)
            stale.cancel()
        self._slots_used += 1
        self._held[job.id] = job.lease_token
        self._started_at[job.id] = time.monotonic()
        self._active[job.id] = asyncio.create_task(self._run_job(job), name=f"pgqueue-job-{job.id}")

    def _forget(self, job_id: int, flag: CancelFlag) -> None:
        """Drop an attempt's bookkeeping, unless a newer attempt of the job owns it."""
        if self._active.get(job_id) is asyncio.current_task():
            del self._active[job_id]
        self._cancels.close(job_id, flag)

    async def _run_job(self, job: Job) -> None:
        task = self.app.tasks[job.task]
        flag = self._cancels.open(job.id, interruptible=task.is_async)
        CANCEL_FLAG.set(flag)
        try:
            assert self._executor is not None  # set by run() before any job starts
            attempt = await self._executor.run(task, job)
        except BaseException as exc:
            if not self._cancels.absorbs(job.id, exc):
                # Cancelled: by shutdown (which releases the lease) or by a lost lease
                # (already dropped from _held). Either way nothing is written from here.
                self._forget(job.id, flag)
                self._slot_freed()
                raise
            attempt = Attempt(self._cancels.cancelled_outcome(job, self.worker_id))  # operator cancel
        attempt.outcome = self._cancels.adjust(job.id, attempt.outcome)
        self._forget(job.id, flag)
        try:
            if attempt.outcome is not None:
                if job.id in self._held:
                    self._completer.submit(job, attempt.outcome)
            elif attempt.committed:
                # Transactional success: the completion committed with the handler's writes.
                self._held.pop(job.id, None)
                self._log_outcome(job, JobState.COMPLETED)
                self.stats.completed += 1
            else:
                self._held.pop(job.id, None)
                self.stats.refused += 1
                log.warning(
                    "job %d %s: transactional completion refused, the lease was lost; rolled back", job.id, job.task
                )
            if attempt.straggler is not None:
                with contextlib.suppress(BaseException):
                    await attempt.straggler
        finally:
            self._slot_freed()

    def _free_capacity(self) -> int:
        # Handler slots, but also back-pressure from the completer: at most one
        # concurrency's worth of outcomes may wait to be written (their leases are held and
        # heartbeated), so a slow database slows claiming instead of piling up leases.
        cfg = self.config
        return min(cfg.concurrency - self._slots_used, 2 * cfg.concurrency - len(self._held))

    def _slot_freed(self) -> None:
        self._slots_used -= 1
        self._maybe_refill()

    def _maybe_refill(self) -> None:
        if self._backlog and self._free_capacity() >= max(
            1, min(self.config.concurrency, self.config.fetch_batch) // 2
        ):
            self._wake.set()

    # -- outcomes ---------------------------------------------------------------------

    def _on_written(self, job: Job, outcome: Outcome, accepted: bool) -> None:
        if self._held.get(job.id) == job.lease_token:
            del self._held[job.id]
            self._maybe_refill()
        if not accepted:
            self.stats.refused += 1
            if self.metrics is not None:
                self.metrics.outcome_refused(job)
            log.warning(
                "job %d %s attempt %d: outcome %s refused, the lease was lost (the job was rescued)",
                job.id,
                job.task,
                job.attempt,
                outcome.state,
            )
            return
        if outcome.state is JobState.COMPLETED:
            self.stats.completed += 1
        elif outcome.state is JobState.RETRYABLE:
            self.stats.retried += 1
        elif outcome.state is JobState.DISCARDED:
            self.stats.discarded += 1
        elif outcome.state is JobState.CANCELLED:
            self.stats.cancelled += 1
        self._log_outcome(job, outcome.state, outcome)

    def _log_outcome(self, job: Job, state: JobState, outcome: Outcome | None = None) -> None:
        started = self._started_at.pop(job.id, None)
        seconds = None if started is None else time.monotonic() - started
        if self.metrics is not None:
            self.metrics.job_finished(job, state, seconds)
        log_outcome(
            log,
            job,
            state,
            seconds=seconds,
            error=outcome.error if outcome is not None else None,
            retry_in=outcome.delay if outcome is not None and state is JobState.RETRYABLE else None,
            log_args=self.app.tasks[job.task].log_args,
        )

    # -- leases -----------------------------------------------------------------------

    async def _heartbeat_loop(self) -> None:
        cfg = self.config
        while True:
            await asyncio.sleep(cfg.heartbeat_interval)
            async with self._beat_lock:
                if self._beats_over:
                    return
                await self._heartbeat(cfg)

    async def _heartbeat(self, cfg: WorkerConfig) -> None:
        held = dict(self._held)
        # Also the registry's heartbeat: one statement per interval when idle.
        listening = self.listener is not None and self.listener.connected.is_set()
        try:
            async with self._pool.connection() as conn:
                still = await within(
                    cfg.lease,
                    self._registry.beat(
                        conn, held, cfg.lease, in_flight=len(self._active), listener_connected=listening
                    ),
                    "heartbeat",
                )
        except (psycopg.OperationalError, psycopg_pool.PoolTimeout) as exc:
            log.warning("heartbeat failed for %d leases (%s)", len(held), brief(exc))
            return
        for job_id in self._cancels.request(still):
            log.info("job %d: cancel requested by an operator; cancelling its handler", job_id)
            active = self._active.get(job_id)
            if active is not None:
                active.cancel()
        for job_id in held.keys() - still:
            if self._held.get(job_id) != held[job_id]:
                continue  # its outcome was written meanwhile: not lost
            del self._held[job_id]
            log.warning("job %d: lease lost (rescued by another process); cancelling its handler", job_id)
            active = self._active.get(job_id)
            if active is not None:
                active.cancel()

    # -- shutdown ---------------------------------------------------------------------

    async def _shutdown(self) -> None:
        cfg = self.config
        if self._active:
            await asyncio.wait(list(self._active.values()), timeout=cfg.shutdown_timeout)
        leftover = {job_id: self._held[job_id] for job_id in self._active if job_id in self._held}
        for task in list(self._active.values()):
            task.cancel()
        if self._active:
            await asyncio.wait(list(self._active.values()), timeout=5)
        if leftover:
            try:
                async with self._pool.connection() as conn:
                    released = await within(cfg.lease, self.db.release(conn, leftover), "release")
                self.stats.released += released
                log.warning(
                    "shutdown timeout (%.1fs): released %d unfinished jobs back to available",
                    cfg.shutdown_timeout,
                    released,
                )
            except (psycopg.OperationalError, psycopg_pool.PoolTimeout) as exc:
                log.error("could not release %d jobs (%s); the rescuer will retry them", len(leftover), brief(exc))
            for job_id in leftover:
                self._held.pop(job_id, None)
        try:
            await asyncio.wait_for(self._completer.flush(), timeout=max(cfg.shutdown_timeout, 5.0))
        except TimeoutError:
            log.error(
                "could not write %d job outcomes before exiting; the rescuer will retry them",
                len(self._completer),
            )
        async with self._beat_lock:
            self._beats_over = True
        try:
            await self._registry.deregister(self._pool)
        except (psycopg.OperationalError, psycopg_pool.PoolTimeout) as exc:
            log.warning("could not remove the worker's registration (%s); it will expire", exc)
        log.info("worker %s stopped", self.worker_id)
