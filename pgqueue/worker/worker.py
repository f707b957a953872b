"""The worker: one asyncio loop that claims, runs and reports jobs.

:class:`Worker` builds its units when it is made and wires them; ``run()`` starts them,
runs the fetch loop until :meth:`Worker.stop`, and shuts down in order. Each unit is its
own module (the guarantees they uphold are in docs/guarantees.md):

* :mod:`.fetcher`: claims batches sized to :mod:`.capacity`, wakes on NOTIFY
  (:mod:`.listener`), polls as the safety net;
* :mod:`.executor`: owns each attempt end to end, running handlers through
  :mod:`.handler`, honouring operator cancels (:mod:`.cancels`);
* :mod:`.completer`: writes outcomes in batches (or with the next claim);
* :mod:`.leases`: the heartbeat that extends every lease held and the registration
  (:mod:`.registry`);
* maintenance (scheduler + rescuer tick, partitions, retention, vacuum) and cron, as
  periodic services that every process runs; the database picks one per round.

Side tasks are supervised: if one dies of an unexpected error the worker stops and
``run()`` raises it, rather than limping on. Shutdown (``stop()``): stop claiming, release
the jobs claimed ahead (prefetch) that never started, let in-flight jobs finish for up to
``shutdown_timeout``, cancel the rest and release them to ``available`` without counting
the attempt, write every pending outcome, deregister.

Signals are the caller's business (the CLI installs them); this is a library object.

Why this module is over 300 lines: it builds and wires every unit above (``__init__``)
and runs them in order (``run()``); each unit's logic lives in its own module.
"""

from __future__ import annotations

import asyncio
import logging
import os
import secrets
import socket
import uuid
from collections.abc import Coroutine, Mapping
from typing import Any, Protocol

from .._db.conn import TRANSIENT, brief, within
from .._db.jobs import JobsDB
from .._dsn import Database
from .._tasks import cancel_and_wait
from ..config import DEFAULT_QUEUE, WorkerConfig
from ..cron.schedule import Schedule
from ..cron.scheduler import CronScheduler, CronService
from ..maintenance import maintainer
from ..metrics import WorkerMetrics, serve_metrics
from ..task import TaskDef
from .capacity import Capacity
from .claim_cursor import ClaimCursors
from .completer import Completer
from .connections import Connections
from .db_wait import check_database, reach_database, wait_for_database
from .executor import Executor
from .fetcher import Fetcher
from .flow import FlowControl
from .handler import HandlerRunner
from .leases import Leases
from .listener import Listener
from .prefetch import Prefetch
from .registry import Registry
from .stats import Report, WorkerStats

__all__ = ["Worker", "WorkerApp", "WorkerStats"]

log = logging.getLogger("pgqueue.worker")


class WorkerApp(Protocol):
    """What a worker needs of its app (:class:`~pgqueue.App` is one)."""

    @property
    def tasks(self) -> Mapping[str, TaskDef]: ...
    @property
    def schema(self) -> str: ...
    @property
    def worker_config(self) -> WorkerConfig: ...
    @property
    def dsn(self) -> str: ...
    @property
    def database(self) -> Database: ...
    @property
    def max_result_bytes(self) -> int: ...
    def declared_schedules(self) -> list[Schedule]: ...


def _default_worker_id() -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(3)}"


class Worker:
    def __init__(self, app: WorkerApp, config: WorkerConfig | None = None) -> None:
        """Build the worker's units (nothing connects until :meth:`run`).

        Raises:
            ConfigError: an ``@app.periodic`` decorated a function that never became a task.
        """
        self.app = app
        self.config = cfg = config or app.worker_config
        self.worker_id = cfg.worker_id or _default_worker_id()
        tasks = app.tasks
        schedules = app.declared_schedules()
        self.queues: tuple[str, ...] = cfg.queues or tuple(
            sorted(
                {t.queue for t in tasks.values()}
                | {s.queue for s in schedules}
                | set(cfg.queue_concurrency)
                | {DEFAULT_QUEUE}
            )
        )
        self.db = JobsDB(app.schema)
        self.stats = WorkerStats()
        self.started = asyncio.Event()
        self.metrics: WorkerMetrics | None = None
        self._stopping = asyncio.Event()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._failure: BaseException | None = None
        self._side_tasks: list[asyncio.Task[None]] = []

        #: job id -> lease token of every lease held (the leases' own map, sized by capacity).
        self.leases_held: dict[int, uuid.UUID] = {}
        self.capacity = Capacity(
            concurrency=cfg.concurrency,
            fetch_batch=cfg.fetch_batch,
            leases=self.leases_held,
            wake=asyncio.Event(),
            queues=self.queues,
            queue_concurrency=cfg.queue_concurrency,
        )
        slots = self.capacity.concurrency  # every queue's slots: the most jobs run at once
        transactional_async = any(t.transactional and t.is_async for t in tasks.values())
        self.connections = Connections(
            name=self.worker_id,
            handler_connections=slots if transactional_async else 0,
            sync_connections=slots,
            session_plans=self.db.use_session_plans,
        )
        self.report = Report(self.stats, log_args=lambda task: tasks[task].log_args)
        self.cursors = ClaimCursors(cfg.claim_cursor_threshold)
        self.maintainer, partitions = maintainer(
            self.db,
            self.connections.connection,
            dsn=lambda: app.dsn,
            schema=app.schema,
            config=cfg,
            worker_id=self.worker_id,
            on_pinned=self.cursors.set_pinned,
        )
        self.completer = Completer(
            self.db,
            self.connections,
            batch_size=cfg.completion_batch,
            interval=cfg.completion_interval,
            repair_partitions=partitions.run_once,
            timeout=cfg.lease,
        )
        self.leases = Leases(
            connections=self.connections,
            registry=Registry(self.db, self.worker_id, self.queues, cfg, concurrency=slots),
            config=cfg,
            held=self.leases_held,
        )
        self.prefetch = Prefetch(concurrency=slots, fetch_batch=cfg.fetch_batch)
        self.flow = FlowControl(self.db, self.queues, tasks, refresh_interval=cfg.heartbeat_interval)
        self.executor = Executor(
            tasks=tasks,
            runner=HandlerRunner(
                db=self.db,
                worker_id=self.worker_id,
                connections=self.connections,
                threads=slots,
                max_result_bytes=app.max_result_bytes,
            ),
            capacity=self.capacity,
            leases=self.leases,
            completer=self.completer,
            report=self.report,
            worker_id=self.worker_id,
            prefetch=self.prefetch,
        )
        self.completer.subscribe(self.executor.written)
        self.completer.on_flushed(lambda batch: self.capacity.outcomes_written(j.queue for j, _ in batch))
        self.listener = (
            Listener(
                lambda: self.connections.dsn,
                self.db,
                self.queues,
                self.wake,
                health_interval=cfg.listener_health_interval,
                on_flow=self._flow_changed,
            )
            if cfg.listen
            else None
        )
        self.fetcher = Fetcher(
            db=self.db,
            connections=self.connections,
            config=cfg,
            worker_id=self.worker_id,
            queues=self.queues,
            task_limits={name: t.max_attempts for name, t in tasks.items()},
            capacity=self.capacity,
            executor=self.executor,
            completer=self.completer,
            cursors=self.cursors,
            flow=self.flow,
            report=self.report,
            stopping=self._stopping,
            listening=self._listening,
            prefetch=self.prefetch,
        )
        self.cron = (
            CronScheduler(schedules, self.connections, schema=app.schema, worker_id=self.worker_id)
            if schedules
            else None
        )
        if self.cron is not None:
            self.maintainer.add(CronService(self.cron))

    # -- control --------------------------------------------------------------------------

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
            log.info("worker %s stopping: no new claims; waiting for %d in-flight jobs", self.worker_id, self.in_flight)
        self._stopping.set()
        self.executor.stop_starting()
        self.wake()

    def wake(self) -> None:
        """Make the fetcher claim now (the listener calls this on NOTIFY)."""
        self.capacity.wake.set()

    def _flow_changed(self) -> None:
        """An operator paused, resumed or limited something: re-read before claiming."""
        self.flow.invalidate()
        self.wake()

    @property
    def in_flight(self) -> int:
        """Jobs this process holds: running, and claimed ahead in the prefetch buffer."""
        return len(self.executor.running) + len(self.executor.buffer)

    @property
    def sync_handlers_running(self) -> int:
        """Sync handlers still running in their threads (after a stop: the stuck ones)."""
        return self.executor.runner.sync_running

    # -- the run, in order ----------------------------------------------------------------

    async def run(self) -> None:
        """Run until :meth:`stop`; raises if a side task failed."""
        self._loop = asyncio.get_running_loop()
        if not await self._reach_database():
            log.info("worker %s stopped before it started", self.worker_id)
            return
        try:
            await self.connections.open(self.app.dsn)
            await self._start()
            await self.fetcher.run()
            await self._shutdown()
        finally:
            await self._close()
        if self._failure is not None:
            raise self._failure

    async def _start(self) -> None:
        cfg = self.config
        self._spawn(self.completer.run(), "completer")
        self._spawn(self.leases.run(self._status, self.executor.on_heartbeat), "heartbeat")
        self.maintainer.start(self._side_task_done)
        if self.listener is not None:
            self._spawn(self.listener.run(), "listener")
        log.info(
            "worker %s started: queues=%s concurrency=%d tasks=%d database=%s schema=%s",
            self.worker_id,
            ",".join(f"{q}={cfg.queue_concurrency[q]}" if q in cfg.queue_concurrency else q for q in self.queues),
            self.capacity.concurrency,
            len(self.app.tasks),
            self.app.database.display,
            self.app.schema,
        )
        await self.leases.register(self._status)
        async with self.connections.connection() as conn:
            await self.db.add_queues(conn, self.queues)  # operators may pause and limit them now
        self.metrics = self.report.metrics = await serve_metrics(
            cfg,
            dsn=self.connections.dsn,
            schema=self.app.schema,
            queues=self.queues,
            in_flight=lambda: self.in_flight,
            listener_connected=lambda: float(self._listening()),
        )
        self.started.set()

    async def _shutdown(self) -> None:
        """After the fetch loop ended: finish or release in-flight jobs, write every
        outcome, deregister."""
        cfg = self.config
        unstarted = self.executor.take_buffered()
        if unstarted:  # prefetched, never started: back to available first
            await self.fetcher.release_unstarted(unstarted, "buffered at stop")
        leftover = await self.executor.stop(cfg.shutdown_timeout)
        if leftover:
            try:
                async with self.connections.connection() as conn:
                    released = await within(cfg.lease, self.db.release(conn, leftover), "release")
                self.stats.released += released
                log.warning(
                    "shutdown timeout (%.1fs): released %d unfinished jobs back to available",
                    cfg.shutdown_timeout,
                    released,
                )
            except TRANSIENT as exc:
                log.error("could not release %d jobs (%s); the rescuer will retry them", len(leftover), brief(exc))
            self.leases.forget(leftover)
        # Not wait_for: a flush waiting on the pool can swallow its cancellation (see
        # cancel_and_wait), and wait_for would then wait for it for ever.
        flush = asyncio.ensure_future(self.completer.flush())
        done, _ = await asyncio.wait({flush}, timeout=max(cfg.shutdown_timeout, 5.0))
        if done:
            flush.result()
        else:
            log.error(
                "could not write %d job outcomes before exiting; the rescuer will retry them", len(self.completer)
            )
            await cancel_and_wait([flush])
        await self.leases.close()
        log.info("worker %s stopped", self.worker_id)

    async def _close(self) -> None:
        """Whatever happened: stop every side task and close every resource."""
        if self.metrics is not None:
            await asyncio.to_thread(self.metrics.close)
        await self.maintainer.stop()
        await cancel_and_wait(self._side_tasks)
        self.executor.runner.close()
        await self.connections.close()

    # -- helpers --------------------------------------------------------------------------

    async def _reach_database(self) -> bool:
        """Check the database and schema; with ``wait_for_database``, wait for them (False:
        stopped meanwhile).

        Raises:
            DatabaseUnavailableError, SchemaNotInstalledError: without ``wait_for_database``.
        """
        dsn, schema, days = self.app.dsn, self.app.schema, self.config.partition_days_ahead
        if not self.config.wait_for_database:
            await asyncio.to_thread(check_database, dsn, schema, days_ahead=days)
            return True
        return await wait_for_database(lambda: reach_database(dsn, schema, days_ahead=days), dsn, self._stopping, log)

    def _listening(self) -> bool:
        return self.listener is not None and self.listener.connected.is_set()

    def _status(self) -> tuple[int, bool]:
        """What the registration shows: (jobs in flight, listener connected)."""
        return self.in_flight, self._listening()

    def _spawn(self, coro: Coroutine[Any, Any, None], name: str) -> None:
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
