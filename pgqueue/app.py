"""The application object: task registry, enqueue entry points and database settings.

:class:`App` and :class:`Task` live together: ``@app.task`` makes a Task, and a Task's
``app`` is its App (the enqueue API goes through both). That is why this module is
about 620 lines: the whole declaration API (tasks, schedules, enqueue, results, workflows, batches), where
users read it. What the worker needs
of a task is :class:`pgqueue.task.TaskDef`, which the runtime uses instead.
"""

from __future__ import annotations

import math
import threading
from collections.abc import AsyncIterable, Callable, Iterable, Mapping
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Any, Generic, Literal, ParamSpec, Protocol, TypeVar, overload

import psycopg

from . import _dsn, _enqueue
from ._db import enqueue as _enqueue_db
from ._db import workflows as _batch_db
from ._db.results import ResultsDB
from ._db.sql import validate_schema
from ._wake import DEFAULT_WINDOW as DEFAULT_NOTIFY_WINDOW
from ._wake import WakeThrottle
from .batch import Batch, callbacks_json
from .config import DEFAULT_MAX_ATTEMPTS, DEFAULT_QUEUE, WorkerConfig, validate_queue
from .cron import schedule as _cron
from .errors import ConfigError, InvalidArgumentsError, UnknownTaskError
from .migrate import migrate
from .models import JobSpec
from .results.encode import DEFAULT_MAX_RESULT_BYTES, check_max_result_bytes
from .results.handle import JobHandle
from .results.outcome import result_of
from .results.waiter import ResultWaiter
from .retry import Backoff
from .task import TaskDef
from .unique import Unique
from .worker import Worker
from .workflow import Dependency, Workflow, normalise_depends_on

__all__ = ["App", "Task", "TaskOptions"]

P = ParamSpec("P")
R = TypeVar("R")
_F = TypeVar("_F", bound=Callable[..., Any])


@dataclass(frozen=True)
class TaskOptions:
    """Per-enqueue overrides, from ``task.options(...)``."""

    queue: str | None = None
    priority: int | None = None
    run_at: datetime | None = None
    delay: float | timedelta | None = None
    unique_key: str | None = None
    max_attempts: int | None = None
    concurrency_key: str | None = None
    expires_at: datetime | None = None
    expires_in: float | timedelta | None = None
    #: False: not unique, whatever the task declares.
    unique: Unique | Literal[False] | None = None
    #: Existing jobs the job waits for, as (id, policy) pairs.
    depends_on: tuple[tuple[int, str], ...] = ()


class Task(TaskDef, Generic[P, R]):
    """A registered handler plus its settings. Calling it runs the function directly."""

    def __init__(self, app: App, fn: Callable[..., Any], **settings: Any) -> None:
        super().__init__(fn, **settings)
        self.app = app
        self._defaults = TaskOptions()

    def __call__(self, *args: P.args, **kwargs: P.kwargs) -> R:
        return self.fn(*args, **kwargs)  # type: ignore[no-any-return]

    def options(
        self,
        *,
        queue: str | None = None,
        priority: int | None = None,
        run_at: datetime | None = None,
        delay: float | timedelta | None = None,
        unique_key: str | None = None,
        max_attempts: int | None = None,
        concurrency_key: str | None = None,
        expires_at: datetime | None = None,
        expires_in: float | timedelta | None = None,
        unique: Unique | Literal[False] | None = None,
        depends_on: Iterable[int | Dependency] | None = None,
    ) -> Task[P, R]:
        """A copy of this task whose enqueues use these settings.

        ``concurrency_key`` replaces the key the task derives from an argument.
        ``expires_at`` (a time) or ``expires_in`` (seconds after the job's run_at) is the
        deadline by which an attempt must start; either replaces the task's
        ``expires_in``. ``unique`` replaces the task's unique rules (``False``: none);
        with unique rules, ``unique_key`` names the key instead of the arguments.
        ``depends_on`` lists existing jobs (ids, handles, or :class:`~pgqueue.Dependency`
        for the policy on a failed parent) the job waits for; see docs/workflows.md.

        Raises:
            ConfigError: ``unique`` names arguments the handler does not take, or is not
            a :class:`~pgqueue.Unique`.
        """
        if unique is not None and unique is not False:
            self.check_unique(unique)
        bound: Task[P, R] = Task.__new__(Task)
        bound.__dict__.update(self.__dict__)
        d = self._defaults
        deadline = expires_at is not None or expires_in is not None
        bound._defaults = TaskOptions(
            queue=d.queue if queue is None else queue,
            priority=d.priority if priority is None else priority,
            run_at=d.run_at if run_at is None else run_at,
            delay=d.delay if delay is None else delay,
            unique_key=d.unique_key if unique_key is None else unique_key,
            max_attempts=d.max_attempts if max_attempts is None else max_attempts,
            concurrency_key=d.concurrency_key if concurrency_key is None else concurrency_key,
            expires_at=expires_at if deadline else d.expires_at,
            expires_in=expires_in if deadline else d.expires_in,
            unique=d.unique if unique is None else unique,
            depends_on=d.depends_on if depends_on is None else normalise_depends_on(depends_on),
        )
        return bound

    def job(self, **kwargs: Any) -> JobSpec:
        """A validated job for :meth:`App.enqueue_many`.

        Raises:
            InvalidArgumentsError: the handler's signature does not accept ``kwargs``
            (an unknown, misspelt or missing argument), or they are not JSON.
        """
        problem = self.args_checker.problem(kwargs)
        if problem is not None:
            raise InvalidArgumentsError(f"task {self.name!r}: {problem}")
        o = self._defaults
        concurrency_key = o.concurrency_key
        if concurrency_key is None and self.concurrency_key is not None:
            concurrency_key = _enqueue.concurrency_key_from(
                self.name, self.concurrency_key, kwargs, self.args_checker.defaults
            )
        deadline = o.expires_at is not None or o.expires_in is not None
        return _enqueue.make_spec(
            self.name,
            kwargs,
            queue=self.queue if o.queue is None else o.queue,
            priority=self.priority if o.priority is None else o.priority,
            run_at=o.run_at,
            delay=o.delay,
            unique_key=o.unique_key,
            max_attempts=o.max_attempts,
            max_bytes=self.app.max_payload_bytes,
            concurrency_key=concurrency_key,
            expires_at=o.expires_at,
            expires_in=o.expires_in if deadline else self.expires_in,
            unique=(self.unique if o.unique is None else o.unique) or None,
            defaults=self.args_checker.defaults,
            depends_on=o.depends_on,
        )

    def enqueue(self, conn: psycopg.Connection[Any], **kwargs: Any) -> JobHandle:
        """Enqueue in ``conn``'s current transaction; returns the job's id as a
        :class:`~pgqueue.JobHandle` (an ``int`` that can also wait for the result)."""
        return JobHandle(_enqueue_db.enqueue_one(conn, self.app.schema, self.job(**kwargs), self.app.wakes), self.app)

    async def enqueue_async(self, conn: psycopg.AsyncConnection[Any], **kwargs: Any) -> JobHandle:
        """Enqueue in ``conn``'s current transaction; returns the job's
        :class:`~pgqueue.JobHandle`."""
        job_id = await _enqueue_db.enqueue_one_async(conn, self.app.schema, self.job(**kwargs), self.app.wakes)
        return JobHandle(job_id, self.app)


class _TaskDecorator(Protocol):
    def __call__(self, fn: Callable[P, R], /) -> Task[P, R]: ...


class App:
    """A pgqueue application: its tasks, its database and its schema.

    ``dsn`` falls back to ``$PGQUEUE_DSN``, then to the embedded PostgreSQL server; it is
    resolved only when a worker or a migration needs it, never by enqueue (which uses the
    caller's connection). :attr:`database` says which one was chosen and why.
    """

    def __init__(
        self,
        dsn: str | None = None,
        schema: str = "pgqueue",
        *,
        max_payload_bytes: int = _enqueue.DEFAULT_MAX_PAYLOAD_BYTES,
        max_result_bytes: int = DEFAULT_MAX_RESULT_BYTES,
        worker_config: WorkerConfig | None = None,
        notify_window: float = DEFAULT_NOTIFY_WINDOW,
    ) -> None:
        self._dsn = dsn
        self._dsn_source = _dsn.FROM_APP
        self._database: _dsn.Database | None = None
        self.schema = validate_schema(schema)
        if max_payload_bytes < 1:
            raise ConfigError("max_payload_bytes must be positive")
        self.max_payload_bytes = max_payload_bytes
        #: Largest result a handler may return, in bytes of JSON; a bigger one discards its job.
        self.max_result_bytes = check_max_result_bytes(max_result_bytes)
        #: A producer enqueueing faster than one job per this many seconds, one statement
        #: per transaction, notifies once per window; 0: every job notifies (pgqueue/_wake.py).
        self.wakes = WakeThrottle(notify_window)
        self._waiter: ResultWaiter | None = None
        self._waiter_lock = threading.Lock()
        self.worker_config = worker_config or WorkerConfig()
        self.tasks: dict[str, Task[Any, Any]] = {}
        self.schedules: dict[str, _cron.Schedule] = {}
        self._unbound_periodic: list[Callable[..., Any]] = []  # @app.periodic below a future @app.task

    # -- configuration ------------------------------------------------------------------

    @property
    def database(self) -> _dsn.Database:
        """The database in use and where its DSN came from (resolved on first use).

        Raises:
            ConfigError: the DSN is not a valid connection string.
            DatabaseUnavailableError: no DSN anywhere, and the embedded server cannot start.
        """
        if self._database is None:
            self._database = _dsn.resolve_database(self._dsn, source=self._dsn_source)
            if self._database.source == _dsn.FROM_EMBEDDED:
                _dsn.announce(self._database)  # nobody asked for it: say so, in one line
        return self._database

    @property
    def dsn(self) -> str:
        """The connection string, starting the embedded server if nothing else is set."""
        return self.database.dsn

    def configure(self, *, dsn: str | None = None, schema: str | None = None, source: str = _dsn.FROM_OPTION) -> None:
        """Point the app at another database or schema, before any worker starts.

        The command line uses it for ``--dsn`` and ``--schema``; ``source`` says where
        ``dsn`` came from (as printed by ``pgqueue``), ``--dsn`` unless told otherwise.
        """
        if dsn:
            self._dsn, self._dsn_source, self._database = dsn, source, None
        if schema:
            self.schema = validate_schema(schema)
        if dsn or schema:
            self._waiter = None  # waits from now on go to the new database (the old waiter idles out)

    @overload
    def task(self, fn: Callable[P, R], /) -> Task[P, R]: ...

    @overload
    def task(
        self,
        /,
        *,
        name: str | None = None,
        queue: str = DEFAULT_QUEUE,
        priority: int = 0,
        max_attempts: int = DEFAULT_MAX_ATTEMPTS,
        timeout: float | None = None,
        retry: Backoff | None = None,
        non_retryable: Iterable[type[BaseException]] = (),
        transactional: bool = False,
        pass_context: bool = False,
        log_args: bool = False,
        concurrency_key: str | None = None,
        expires_in: float | timedelta | None = None,
        unique: Unique | None = None,
    ) -> _TaskDecorator: ...

    def task(
        self,
        fn: Callable[..., Any] | None = None,
        /,
        *,
        name: str | None = None,
        queue: str = DEFAULT_QUEUE,
        priority: int = 0,
        max_attempts: int = DEFAULT_MAX_ATTEMPTS,
        timeout: float | None = None,
        retry: Backoff | None = None,
        non_retryable: Iterable[type[BaseException]] = (),
        transactional: bool = False,
        pass_context: bool = False,
        log_args: bool = False,
        concurrency_key: str | None = None,
        expires_in: float | timedelta | None = None,
        unique: Unique | None = None,
    ) -> Any:
        """Register a handler. ``name`` defaults to ``"module.function"``.

        ``transactional=True`` passes a :class:`~pgqueue.JobContext` whose ``conn`` holds
        the transaction that also records the completion (exactly-once effects).
        ``non_retryable`` exceptions discard the job at once. ``timeout`` fails an attempt
        that runs longer (it then follows the retry policy).
        ``concurrency_key`` names the argument whose value (a str or an int) is each job's
        concurrency key. ``expires_in`` is the default deadline of the task's jobs, in
        seconds after their run_at. ``unique`` makes the task's jobs unique
        (:class:`~pgqueue.Unique`).

        Raises:
            ConfigError: at declaration, for a bad setting, or a ``concurrency_key`` or
            ``Unique(args=...)`` naming an argument the handler does not take.
        """

        def register(func: Callable[..., Any]) -> Task[Any, Any]:
            task_name = name or f"{func.__module__}.{func.__qualname__}"
            if not _enqueue.TASK_NAME.fullmatch(task_name):
                raise ConfigError(f"invalid task name {task_name!r}: give name=... (letters, digits, _ . : -)")
            if task_name in self.tasks:
                raise ConfigError(f"task {task_name!r} is already registered")
            validate_queue(queue)
            _enqueue.check_max_attempts(max_attempts)
            if timeout is not None and not timeout > 0:
                raise ConfigError("timeout must be positive")
            if priority not in _enqueue.PRIORITY_RANGE:
                raise ConfigError("priority must be in -32768..32767")
            default_deadline = None if expires_in is None else _enqueue.check_expires_in(expires_in)
            created: Task[Any, Any] = Task(
                self,
                func,
                name=task_name,
                queue=queue,
                priority=priority,
                max_attempts=max_attempts,
                timeout=timeout,
                retry=retry or Backoff(),
                non_retryable=tuple(non_retryable),
                transactional=transactional,
                pass_context=pass_context,
                log_args=log_args,
                concurrency_key=concurrency_key,
                expires_in=default_deadline,
                unique=unique,
            )
            self.tasks[task_name] = created
            self._bind_parked(func, created)
            return created

        return register(fn) if fn is not None else register

    def get_task(self, name: str) -> Task[Any, Any]:
        try:
            return self.tasks[name]
        except KeyError:
            known = ", ".join(sorted(self.tasks)) or "none"
            raise UnknownTaskError(f"unknown task {name!r} (registered: {known})") from None

    # -- cron -------------------------------------------------------------------------

    def periodic(
        self,
        *,
        cron: str,
        name: str | None = None,
        timezone: str = "UTC",
        queue: str | None = None,
        priority: int | None = None,
        args: Mapping[str, Any] | None = None,
        missed: _cron.MissedPolicy = _cron.DEFAULT_MISSED,
        max_catchup: int = _cron.DEFAULT_MAX_CATCHUP,
        grace: float = _cron.DEFAULT_GRACE,
    ) -> Callable[[_F], _F]:
        """Run a task on a cron schedule; stack it directly above or below ``@app.task``.

        ``name`` (unique in the app, default: the task's name) identifies the schedule in
        the database; keep it stable, renaming starts a new schedule. ``queue`` and
        ``priority`` default to the task's. ``missed`` (``"skip"``, ``"latest"``, ``"all"``
        up to ``max_catchup``) decides what happens to ticks more than ``grace`` seconds
        overdue. Every worker process runs the scheduler; each tick becomes exactly one job.

        Raises:
            ConfigError: at declaration, for a bad expression, zone, policy or name.
        """
        options = {
            "cron": cron, "timezone": timezone, "queue": queue, "priority": priority, "args": args,
            "missed": missed, "max_catchup": max_catchup, "grace": grace,
        }  # fmt: skip
        # Validate everything but the task name now, so mistakes surface where they are made.
        _cron.build_schedule(
            "periodic", name or "periodic", options, known=None, max_payload_bytes=self.max_payload_bytes
        )

        def decorate(target: _F) -> _F:
            if isinstance(target, Task):
                self._add_schedule(self._schedule(target.name, name, options))
            elif callable(target):
                _cron.park(target, name, options)  # @app.task, applied next, registers it
                self._unbound_periodic.append(target)
            else:
                raise ConfigError(f"@app.periodic decorates a task or a function, not {target!r}")
            return target

        return decorate

    def add_schedule(
        self,
        name: str,
        *,
        task: str,
        cron: str,
        timezone: str = "UTC",
        queue: str | None = None,
        priority: int | None = None,
        args: Mapping[str, Any] | None = None,
        missed: _cron.MissedPolicy = _cron.DEFAULT_MISSED,
        max_catchup: int = _cron.DEFAULT_MAX_CATCHUP,
        grace: float = _cron.DEFAULT_GRACE,
    ) -> _cron.Schedule:
        """Declare a schedule for a task given by name (it may live in another service).

        Same options as :meth:`periodic`; ``queue``/``priority`` default to the task's
        when it is registered in this app, else ``"default"``/0.
        """
        options = {
            "cron": cron, "timezone": timezone, "queue": queue, "priority": priority, "args": args,
            "missed": missed, "max_catchup": max_catchup, "grace": grace,
        }  # fmt: skip
        return self._add_schedule(self._schedule(task, name, options))

    def declared_schedules(self) -> list[_cron.Schedule]:
        """The app's schedules, sorted by name; those of tasks registered here carry the
        task's concurrency key (read from the schedule's args) and ``expires_in``.

        Raises:
            ConfigError: an ``@app.periodic`` decorated a function that never became a task.
        """
        if self._unbound_periodic:
            names = ", ".join(getattr(f, "__qualname__", repr(f)) for f in self._unbound_periodic)
            raise ConfigError(
                f"@app.periodic on {names}, which is not a task: stack it directly above or below @app.task"
            )
        out = []
        for name in sorted(self.schedules):
            schedule = self.schedules[name]
            known = self.tasks.get(schedule.task)
            out.append(schedule if known is None else _cron.with_task_settings(schedule, known))
        return out

    def _schedule(
        self, task: str, name: str | None, options: Mapping[str, Any], *, known: bool = True
    ) -> _cron.Schedule:
        """The schedule ``options`` declare; defaults come from ``task`` when it is
        registered here (and ``known``)."""
        return _cron.build_schedule(
            task, name, options, known=self.tasks.get(task) if known else None, max_payload_bytes=self.max_payload_bytes
        )

    def _add_schedule(self, schedule: _cron.Schedule) -> _cron.Schedule:
        if schedule.name in self.schedules:
            raise ConfigError(
                f"schedule {schedule.name!r} is already declared in this app; "
                "give each schedule of a task its own name="
            )
        known = self.tasks.get(schedule.task)
        if known is not None:  # a task of another service cannot be checked here
            _cron.check_args(schedule, known)
        self.schedules[schedule.name] = schedule
        return schedule

    def _bind_parked(self, fn: Callable[..., Any], task: Task[Any, Any]) -> None:
        """``@app.task`` made ``task`` of ``fn``: check the schedules already declared for it
        by name, and register those a lower ``@app.periodic`` parked on ``fn``."""
        for schedule in self.schedules.values():
            if schedule.task == task.name:
                _cron.check_args(schedule, task)
        parked = _cron.take_parked(fn)
        for name, options in parked:
            self._add_schedule(self._schedule(task.name, name, options))
        if parked:
            self._unbound_periodic[:] = [f for f in self._unbound_periodic if f is not fn]

    # -- enqueue by name ----------------------------------------------------------------

    def enqueue(self, conn: psycopg.Connection[Any], task: str, /, **kwargs: Any) -> JobHandle:
        """Enqueue a registered task by name in ``conn``'s current transaction; returns the
        job's :class:`~pgqueue.JobHandle`."""
        return self.get_task(task).enqueue(conn, **kwargs)

    async def enqueue_async(self, conn: psycopg.AsyncConnection[Any], task: str, /, **kwargs: Any) -> JobHandle:
        return await self.get_task(task).enqueue_async(conn, **kwargs)

    def enqueue_many(self, conn: psycopg.Connection[Any], jobs: Iterable[JobSpec]) -> int:
        """Enqueue many jobs with COPY in ``conn``'s transaction; returns how many.

        ``jobs`` may be any iterable, consumed as a stream (memory stays flat). Jobs with a
        ``unique_key`` (or unique rules) go through the deduplicating path instead of COPY,
        after the others, in key order (so that two batches sharing keys cannot deadlock).
        It returns a count, not handles: COPY does not send the new ids back (enqueue the
        jobs whose results you want one by one, or find them with ``pgqueue.ops``).
        """
        return _enqueue_db.enqueue_many(conn, self.schema, jobs)

    async def enqueue_many_async(
        self, conn: psycopg.AsyncConnection[Any], jobs: Iterable[JobSpec] | AsyncIterable[JobSpec]
    ) -> int:
        return await _enqueue_db.enqueue_many_async(conn, self.schema, jobs)

    # -- workflows ----------------------------------------------------------------------

    def workflow(self) -> Workflow:
        """An empty :class:`~pgqueue.Workflow` (a graph of jobs enqueued in one call)."""
        return Workflow(self.schema, self)

    def chain(self, *jobs: JobSpec) -> Workflow:
        """A workflow running ``jobs`` one after the other: each waits for the one before."""
        wf = self.workflow()
        for job in jobs:
            wf.then(job)
        return wf

    def group(self, *jobs: JobSpec) -> Workflow:
        """A workflow of independent ``jobs``; ``.then(job)`` adds one that waits for all."""
        wf = self.workflow()
        for job in jobs:
            wf.add(job)
        return wf

    def create_batch(
        self,
        conn: psycopg.Connection[Any],
        *,
        on_success: JobSpec | None = None,
        on_complete: JobSpec | None = None,
        on_discard: JobSpec | None = None,
    ) -> Batch:
        """Create an open :class:`~pgqueue.Batch` in ``conn``'s transaction. Once it is
        closed and its last member settled, ``on_success`` runs if every member completed,
        ``on_discard`` if any ended discarded or cancelled, ``on_complete`` in either case
        (each once; their ``ctx.batch`` has the counts)."""
        callbacks = callbacks_json(on_success, on_complete, on_discard)
        return Batch(_batch_db.batch_create(conn, self.schema, callbacks), self.schema, self)

    async def create_batch_async(
        self,
        conn: psycopg.AsyncConnection[Any],
        *,
        on_success: JobSpec | None = None,
        on_complete: JobSpec | None = None,
        on_discard: JobSpec | None = None,
    ) -> Batch:
        callbacks = callbacks_json(on_success, on_complete, on_discard)
        return Batch(await _batch_db.batch_create_async(conn, self.schema, callbacks), self.schema, self)

    def batch(self, batch_id: int) -> Batch:
        """A :class:`~pgqueue.Batch` created earlier, by id (to add members or close it)."""
        return Batch(_check_job_id(batch_id), self.schema, self)

    # -- results ------------------------------------------------------------------------

    def handle(self, job_id: int) -> JobHandle:
        """A :class:`~pgqueue.JobHandle` for a job id kept from earlier (a handle made by
        enqueue is one already), to wait for its result."""
        return JobHandle(_check_job_id(job_id), self)

    def result(self, conn: psycopg.Connection[Any], job_id: int) -> Any:
        """The result of a finished job, read now on ``conn`` (in its transaction, if one is
        open): what its handler returned (None when it returned None). Never waits.

        Raises:
            JobNotFinishedError: the job is still waiting or running (``.state`` says which).
            JobFailed: the job was discarded, cancelled or expired (carries its last error).
            JobNotFoundError: no job has this id (never committed, or removed by retention).
        """
        job_id = _check_job_id(job_id)
        return result_of(job_id, ResultsDB(self.schema).read_sync(conn, [job_id]))

    async def result_async(self, conn: psycopg.AsyncConnection[Any], job_id: int) -> Any:
        """:meth:`result` on an asyncio connection."""
        job_id = _check_job_id(job_id)
        return result_of(job_id, await ResultsDB(self.schema).read(conn, [job_id]))

    def wait_result(self, job_id: int, timeout: float | None) -> Any:
        """Block until job ``job_id`` finished and return its result (what
        :meth:`JobHandle.result <pgqueue.JobHandle.result>` does)."""
        return self._result_waiter().wait(_check_job_id(job_id), _check_timeout(timeout))

    async def wait_result_async(self, job_id: int, timeout: float | None) -> Any:
        """Await job ``job_id``'s result (what ``JobHandle.result_async`` does)."""
        return await self._result_waiter().wait_async(_check_job_id(job_id), _check_timeout(timeout))

    def _result_waiter(self) -> ResultWaiter:
        """The process's waiter for this app's database (made on first use)."""
        with self._waiter_lock:
            if self._waiter is None:
                self._waiter = ResultWaiter(lambda: self.dsn, self.schema)
            return self._waiter

    # -- operations ---------------------------------------------------------------------

    def migrate(self) -> list[int]:
        """Apply pending migrations; returns the versions applied."""
        with _dsn.open_connection(self.database) as conn:
            return migrate(conn, self.schema)

    def worker(self, config: WorkerConfig | None = None, **overrides: Any) -> Worker:
        """A :class:`~pgqueue.Worker` for this app (not started)."""
        cfg = replace(config or self.worker_config, **overrides)
        return Worker(self, cfg)


def _check_job_id(job_id: int) -> int:
    if isinstance(job_id, bool) or not isinstance(job_id, int):
        raise ConfigError(f"a job id is an int, got {job_id!r}")
    return int(job_id)


def _check_timeout(timeout: float | None) -> float | None:
    if timeout is None:
        return None
    if isinstance(timeout, bool) or not isinstance(timeout, int | float) or math.isnan(timeout) or timeout < 0:
        raise ConfigError(f"timeout must be None (no limit) or seconds >= 0, got {timeout!r}")
    return None if math.isinf(timeout) else float(timeout)
