"""The one background waiter of an app and database: every ``handle.result()`` and
``await handle.result_async()`` of the process goes through it.

It owns one connection (``application_name`` "pgqueue results <pid>"), LISTENing on the
results channel, in a daemon thread running its own event loop, so that blocking callers
in any thread and coroutines on any loop share it. A caller registers a job and gets a
:class:`concurrent.futures.Future`; it enforces its own timeout on it, so no caller ever
waits past its timeout whatever happens to the connection.

The waiter's loop, on every wake-up (a new registration, a NOTIFY, the poll timer):

1. marks the newly registered jobs as awaited (``job_await``), *before* reading their
   state, so that whatever finishes one of them later sends a NOTIFY; a job finishing in
   between is waited for by that statement and found finished by the next;
2. reads every pending job with one query (``job_results``) and resolves the futures of
   those that finished (a row; the caller turns it into its value or error).

The connection can die: it is replaced (with backoff), LISTEN is re-issued and every
pending job read again, so no NOTIFY missed while it was down loses a wake-up. Polling
every ``poll_interval`` seconds is only a safety net. With nothing pending for
``idle_close`` seconds the connection is closed and the thread ends; the next wait starts
them again.

Why this module is over 300 lines: the registration, the connection's life (replace,
re-LISTEN, re-read) and the idle shutdown share one thread's state and are correct only
together.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import logging
import os
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import psycopg

from .._db.conn import application_name, brief, within
from .._db.results import ResultRow, ResultsDB
from .._tasks import wait_set
from ..errors import PgQueueError, ResultTimeout
from ..retry import Backoff, Retries
from .outcome import is_finished, not_found, value_of

__all__ = ["ResultWaiter"]

log = logging.getLogger("pgqueue.results")

Future = concurrent.futures.Future[ResultRow]

#: Longest a statement of the waiter may take before its connection is presumed dead.
STATEMENT_TIMEOUT = 30.0


@dataclass
class _Run:
    """One life of the waiter's thread: its loop and the event that wakes it."""

    loop: asyncio.AbstractEventLoop | None = None
    wake: asyncio.Event | None = None
    thread: threading.Thread | None = None
    done: bool = False
    stop: bool = False  # close() asked it to end


class _Stop(Exception):  # noqa: N818 - a signal within the waiter's loop
    """close() was called: end the waiter's loop."""


@dataclass
class _Pending:
    futures: list[Future] = field(default_factory=list)
    state: str | None = None  # as last read (None: not read yet)


class ResultWaiter:
    """Waits for jobs' results on behalf of every caller of the process (see the module)."""

    def __init__(
        self,
        dsn: Callable[[], str],
        schema: str,
        *,
        poll_interval: float = 5.0,
        health_interval: float = 15.0,
        idle_close: float = 30.0,
        max_backoff: float = 5.0,
    ) -> None:
        self.dsn = dsn  # asked for at each connection
        self.db = ResultsDB(schema)
        self.poll_interval = poll_interval
        self.health_interval = health_interval
        self.idle_close = idle_close
        self.max_backoff = max_backoff
        self._lock = threading.Lock()
        self._pending: dict[int, _Pending] = {}
        self._unmarked: set[int] = set()
        self._run: _Run | None = None
        self._pid = os.getpid()
        #: Observability (tests, logs): the listening backend, connections made, reads
        #: done, and why the waiter last failed to reach the database (None: it did not).
        self.backend_pid: int | None = None
        self.connections = 0
        self.reads = 0
        self.last_error: str | None = None

    # -- callers (any thread) ---------------------------------------------------------------

    def wait(self, job_id: int, timeout: float | None) -> Any:
        """Block until job ``job_id`` finished; return its result (see ``JobHandle.result``)."""
        fut = self.watch(job_id)
        try:
            row = fut.result(timeout)
        except concurrent.futures.TimeoutError:
            error = self._timeout(job_id, timeout)
            fut.cancel()
            raise error from None
        except BaseException:  # interrupted (or the wait failed): stop waiting
            fut.cancel()
            raise
        return value_of(row)

    async def wait_async(self, job_id: int, timeout: float | None) -> Any:
        """:meth:`wait` for coroutines: the caller's loop is never blocked."""
        fut = self.watch(job_id)
        wrapped = asyncio.wrap_future(fut)
        try:
            done, _ = await asyncio.wait({wrapped}, timeout=timeout)
        except BaseException:  # the caller was cancelled: stop waiting for it
            wrapped.cancel()
            raise
        if not done:
            error = self._timeout(job_id, timeout)
            wrapped.cancel()  # cancels ``fut`` too, which takes it off the pending jobs
            raise error
        return value_of(wrapped.result())

    def watch(self, job_id: int) -> Future:
        """A future resolved with job ``job_id``'s row once it finished (or failed with
        :class:`~pgqueue.JobNotFoundError`, or the error that keeps it from being read).
        Cancel it to stop waiting."""
        fut: Future = concurrent.futures.Future()
        with self._lock:
            if os.getpid() != self._pid:  # a forked child: the parent's thread is not here
                self._pid, self._run = os.getpid(), None
                self._pending.clear()
                self._unmarked.clear()
            self._pending.setdefault(job_id, _Pending()).futures.append(fut)
            self._unmarked.add(job_id)
            self._start_or_poke()
        fut.add_done_callback(lambda f: self._forget(job_id, f) if f.cancelled() else None)
        return fut

    def close(self, timeout: float = 10.0) -> None:
        """Stop the waiter's thread and close its connection; waits still pending fail
        with :class:`~pgqueue.PgQueueError`. A later wait starts it again."""
        with self._lock:
            run = self._run
            if run is None or run.done:
                return
            run.stop = True
            if run.loop is not None and run.wake is not None:
                with contextlib.suppress(RuntimeError):  # its loop just closed
                    run.loop.call_soon_threadsafe(run.wake.set)
        if run.thread is not None and run.thread is not threading.current_thread():
            run.thread.join(timeout)

    @property
    def pending(self) -> int:
        """Jobs waited for now."""
        with self._lock:
            return len(self._pending)

    def _forget(self, job_id: int, fut: Future) -> None:
        with self._lock:
            entry = self._pending.get(job_id)
            if entry is None:
                return
            entry.futures = [f for f in entry.futures if f is not fut]
            if not entry.futures:
                del self._pending[job_id]
                self._unmarked.discard(job_id)

    def _timeout(self, job_id: int, timeout: float | None) -> ResultTimeout:
        with self._lock:
            entry = self._pending.get(job_id)
            state = entry.state if entry is not None else None
        seen = f"last seen {state}" if state else "its state could not be read yet"
        if state is None and self.last_error:
            seen += f" ({self.last_error})"
        return ResultTimeout(f"job {job_id} did not finish within {timeout:g}s ({seen})", job_id=job_id, state=state)

    def _start_or_poke(self) -> None:
        # Under self._lock.
        run = self._run
        if run is None or run.done:
            run = self._run = _Run()
            run.thread = threading.Thread(target=self._thread_main, args=(run,), name="pgqueue-results", daemon=True)
            run.thread.start()
        elif run.loop is not None and run.wake is not None:
            try:
                run.loop.call_soon_threadsafe(run.wake.set)
            except RuntimeError:  # the loop just closed: the thread is ending
                run.done = True
                self._start_or_poke()

    # -- the waiter's thread ----------------------------------------------------------------

    def _thread_main(self, run: _Run) -> None:
        try:
            asyncio.run(self._main(run))
        except _Stop:
            self._fail_all(PgQueueError("the results waiter was closed"), quiet=True)
        except BaseException as exc:  # a daemon thread: say why it died, and let callers know
            log.exception("results waiter stopped")
            self._fail_all(PgQueueError(f"the results waiter stopped: {exc!r}"))
        finally:
            with self._lock:
                run.done = True
                if self._pending and self._run is run and not run.stop:
                    self._start_or_poke()  # registered while it was ending

    async def _main(self, run: _Run) -> None:
        with self._lock:
            run.loop = asyncio.get_running_loop()
            run.wake = asyncio.Event()
        run.wake.set()  # whatever was registered before the loop existed
        retries = Retries(Backoff(base=0.05, cap=self.max_backoff, jitter=False))
        while True:
            if await self._idle(run):
                return
            conn: psycopg.AsyncConnection[Any] | None = None
            try:
                dsn = self.dsn()
                conn = await psycopg.AsyncConnection.connect(dsn, autocommit=True, **application_name(dsn, "results"))
                await within(STATEMENT_TIMEOUT, self.db.listen(conn), "subscribing to the results channel")
                self.backend_pid = conn.info.backend_pid
                self.connections += 1
                self.last_error = None
                if self.connections > 1:
                    log.info("results waiter reconnected (backend pid %s)", self.backend_pid)
                retries.reset()
                if await self._serve(run, conn):
                    return
            except (psycopg.Error, OSError) as exc:
                self.last_error = brief(exc)
                delay = retries.next()
                log.warning("results waiter: %s; reconnecting in %.2fs", self.last_error, delay)
                await self._sleep(run, delay)
            finally:
                self.backend_pid = None
                if conn is not None:
                    await conn.close()

    async def _idle(self, run: _Run) -> bool:
        """Wait while nothing is pending; True when the thread should end (nothing was
        registered for ``idle_close`` seconds)."""
        wake = _wake_event(run)
        while True:
            with self._lock:
                if self._pending:
                    return False
            _check_stop(run)
            wake.clear()
            if await wait_set(wake, self.idle_close):
                _check_stop(run)
                continue
            with self._lock:
                if not self._pending:
                    run.done = True
                    return True

    async def _sleep(self, run: _Run, delay: float) -> None:
        wake = _wake_event(run)
        _check_stop(run)
        wake.clear()
        await wait_set(wake, delay)
        _check_stop(run)

    async def _serve(self, run: _Run, conn: psycopg.AsyncConnection[Any]) -> bool:
        """Serve the pending jobs on ``conn`` until it fails (raises) or nothing was
        pending for ``idle_close`` seconds (returns True: the thread ends)."""
        loop = asyncio.get_running_loop()
        read_all = True  # a new connection: whatever finished while none listened
        while True:
            with self._lock:
                marking = sorted(self._unmarked)
                self._unmarked.clear()
                pending = sorted(self._pending)
            if marking:
                try:
                    await within(STATEMENT_TIMEOUT, self.db.mark_awaited(conn, marking), "marking jobs awaited")
                except (psycopg.OperationalError, asyncio.CancelledError):
                    with self._lock:  # not known to be marked: mark them again
                        self._unmarked.update(i for i in marking if i in self._pending)
                    raise
                except (psycopg.Error, PgQueueError) as exc:  # not transient: a schema, a privilege
                    self._fail(marking, exc)
                    marking = []
            # Jobs marked before this round are covered by their NOTIFY: a registration
            # alone needs only the new ones read.
            reading = pending if read_all else marking
            if reading:
                await self._read(conn, reading)
            with self._lock:
                idle = not self._pending
            if idle:
                if await self._idle_on(run, conn):
                    return True
                read_all = False  # woken by a registration: it is read with its marking
                continue
            next_poll = loop.time() + self.poll_interval
            while True:
                event = await self._next_event(run, conn, max(0.0, min(self.health_interval, next_poll - loop.time())))
                if event != "quiet":
                    read_all = event == "notify"
                    break
                if loop.time() >= next_poll:
                    read_all = True  # the safety net: read everything now and then
                    break
                await within(self.health_interval, self.db.ping(conn), "health check")

    async def _read(self, conn: psycopg.AsyncConnection[Any], job_ids: list[int]) -> None:
        try:
            rows = await within(STATEMENT_TIMEOUT, self.db.read(conn, job_ids), "reading results")
        except psycopg.OperationalError:
            raise
        except (psycopg.Error, PgQueueError) as exc:  # not transient: a schema, a privilege
            self._fail(job_ids, exc)
            return
        self.reads += 1
        self._resolve(job_ids, rows)

    async def _idle_on(self, run: _Run, conn: psycopg.AsyncConnection[Any]) -> bool:
        """Nothing pending, connected: keep the connection for ``idle_close`` seconds (and
        check on it), then give it up. True: give up (the thread ends)."""
        wake = _wake_event(run)
        loop = asyncio.get_running_loop()
        until = loop.time() + self.idle_close
        while True:
            with self._lock:
                if self._pending:
                    return False
                if loop.time() >= until:
                    run.done = True
                    return True
            _check_stop(run)
            wake.clear()
            if await wait_set(wake, min(self.health_interval, until - loop.time())):
                _check_stop(run)
            else:
                await within(self.health_interval, self.db.ping(conn), "health check")

    async def _next_event(self, run: _Run, conn: psycopg.AsyncConnection[Any], timeout: float) -> str:
        """Wait up to ``timeout`` seconds: ``"notify"`` (a NOTIFY came), ``"wake"`` (a job
        was registered) or ``"quiet"`` (neither)."""
        wake = _wake_event(run)
        _check_stop(run)
        wake.clear()
        with self._lock:  # registered since the last look: no need to wait
            if self._unmarked:
                return "wake"
        listening = asyncio.ensure_future(self._next_notify(conn, timeout))
        woken = asyncio.ensure_future(wake.wait())
        try:
            await asyncio.wait({listening, woken}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            woken.cancel()
            if not listening.done():
                # Between messages: cancelling the wait leaves the connection idle and
                # whole (psycopg keeps what arrives meanwhile for the next notifies()).
                listening.cancel()
            (got,) = await asyncio.gather(listening, return_exceptions=True)
        if isinstance(got, BaseException) and not isinstance(got, asyncio.CancelledError):
            raise got
        _check_stop(run)
        if got is True:
            return "notify"
        return "wake" if wake.is_set() else "quiet"

    async def _next_notify(self, conn: psycopg.AsyncConnection[Any], timeout: float) -> bool:
        got = False
        # Consumed to its end (stop_after), so the generator releases the connection.
        async for _ in conn.notifies(timeout=timeout, stop_after=1):
            got = True
        return got

    # -- resolving --------------------------------------------------------------------------

    def _resolve(self, reading: list[int], rows: list[ResultRow]) -> None:
        found = {row.id: row for row in rows}
        settle: list[tuple[int, list[Future], ResultRow | None]] = []
        with self._lock:
            for job_id in reading:
                entry = self._pending.get(job_id)
                if entry is None:
                    continue
                row = found.get(job_id)
                if row is not None and not is_finished(row):
                    entry.state = row.state
                    continue
                del self._pending[job_id]
                self._unmarked.discard(job_id)
                settle.append((job_id, entry.futures, row))
        for job_id, futures, row in settle:  # outside the lock: callbacks may run here
            for fut in futures:
                _settle(fut, row if row is not None else not_found(job_id))

    def _fail(self, job_ids: list[int], exc: BaseException, *, quiet: bool = False) -> None:
        if not quiet:
            log.error("results waiter cannot read results: %s", exc)
        with self._lock:
            entries = [self._pending.pop(i) for i in job_ids if i in self._pending]
            self._unmarked.difference_update(job_ids)
        for entry in entries:
            for fut in entry.futures:
                _settle(fut, exc)

    def _fail_all(self, exc: BaseException, *, quiet: bool = False) -> None:
        with self._lock:
            ids = list(self._pending)
        self._fail(ids, exc, quiet=quiet)


def _wake_event(run: _Run) -> asyncio.Event:
    """The run's wake-up event, which its loop creates before anything waits on it."""
    if run.wake is None:
        raise RuntimeError("pgqueue results waiter: the loop's wake-up event is missing")
    return run.wake


def _check_stop(run: _Run) -> None:
    if run.stop:
        raise _Stop()


def _settle(fut: Future, outcome: ResultRow | BaseException) -> None:
    try:
        if isinstance(outcome, BaseException):
            fut.set_exception(outcome)
        else:
            fut.set_result(outcome)
    except concurrent.futures.InvalidStateError:  # cancelled meanwhile (its caller gave up)
        pass
