"""Flow control for operators: pause and resume queues, set their limits and the tasks',
and see them with what they count now. The library behind ``pgqueue queues`` and
``pgqueue tasks``; the same functions exist in SQL (``pgqueue.pause_queue(...)`` ...).

Everything here is stored in the database and takes effect at every worker's next claim,
with no restart: a paused queue starts nothing (running jobs finish); a limit counts the
jobs running anywhere. A change never stops a job that already runs: lowering a limit
below what runs now only keeps new jobs from starting until enough have finished.

Rates are a sliding window: at most ``limit`` starts in any ``period`` seconds.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Final

from .._db import flow as db
from .._db.conn import Conn
from .._db.sql import validate_schema
from .._enqueue import validate_task_name
from ..config import validate_queue
from ..errors import ConfigError, UnknownQueueError

__all__ = [
    "KEEP",
    "Keep",
    "Rate",
    "QueueControl",
    "TaskControl",
    "add_queue",
    "pause_queue",
    "queue_controls",
    "resume_queue",
    "set_queue_limits",
    "set_task_limit",
    "task_controls",
]

#: The most a limit may be.
MAX_LIMIT = 1_000_000
#: Rate periods run from a millisecond to a week.
MIN_PERIOD, MAX_PERIOD = 0.001, 7 * 86_400.0


class Keep:
    """The type of :data:`KEEP`."""

    def __repr__(self) -> str:
        return "KEEP"


#: Leave this setting as it is (the default of every :func:`set_queue_limits` option).
KEEP: Final = Keep()

Rate = tuple[int, float | timedelta]


@dataclass(frozen=True, slots=True)
class QueueControl:
    """A known queue, as the ``queue_controls`` view shows it."""

    queue: str
    paused: bool
    #: Most running jobs of the queue across every node (None: no limit) ...
    concurrency: int | None
    #: ... and how many run now.
    running: int
    #: Most running jobs per concurrency key; with ``key_fifo`` a key's jobs run one at a
    #: time in enqueue order.
    key_concurrency: int | None
    key_fifo: bool
    #: At most ``rate_limit`` starts in any ``rate_period_seconds`` ...
    rate_limit: int | None
    rate_period_seconds: float | None
    #: ... and the starts in the current window.
    starts_in_window: int
    #: The same per concurrency key.
    key_rate_limit: int | None
    key_rate_period_seconds: float | None
    changed_at: datetime | None

    @property
    def limited(self) -> bool:
        return any(
            v is not None for v in (self.concurrency, self.key_concurrency, self.rate_limit, self.key_rate_limit)
        )


@dataclass(frozen=True, slots=True)
class TaskControl:
    """A task's concurrency limit across every node and queue, and its running jobs."""

    task: str
    concurrency: int
    running: int
    changed_at: datetime | None


def _limit(name: str, value: int | None) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_LIMIT:
        raise ConfigError(f"{name} must be an int between 1 and {MAX_LIMIT} (None removes it), got {value!r}")
    return value


def _rate(name: str, rate: Rate | None) -> tuple[int | None, float | None]:
    if rate is None:
        return None, None
    if not isinstance(rate, tuple) or len(rate) != 2:
        raise ConfigError(f"{name} must be (limit, period), e.g. (100, 60) for 100 starts a minute; got {rate!r}")
    limit, period = rate
    seconds = period.total_seconds() if isinstance(period, timedelta) else period
    if isinstance(seconds, bool) or not isinstance(seconds, (int, float)) or not math.isfinite(seconds):
        raise ConfigError(f"{name} period must be seconds or a timedelta, got {period!r}")
    if not MIN_PERIOD <= seconds <= MAX_PERIOD:
        raise ConfigError(f"{name} period must be between 1 millisecond and 7 days, got {seconds:g}s")
    return _limit(f"{name} limit", limit), float(seconds)


def _queue(schema: str, queue: str) -> str:
    validate_schema(schema)
    return validate_queue(queue)


def add_queue(conn: Conn, schema: str, queue: str) -> bool:
    """Make a queue known before any worker served it, so that it can be paused or limited
    ahead; True if it was new."""
    return db.add_queue(conn, schema, _queue(schema, queue))


def pause_queue(conn: Conn, schema: str, queue: str, *, create: bool = False) -> bool:
    """Stop every worker starting jobs of ``queue`` at its next claim (running jobs
    finish); True if the queue was running. ``create``: also for a queue not known yet.

    Raises:
        UnknownQueueError: no worker served the queue and no job is in it (and not ``create``).
    """
    _queue(schema, queue)
    with conn.transaction():
        if create:
            db.add_queue(conn, schema, queue)
        return db.pause_queue(conn, schema, queue)


def resume_queue(conn: Conn, schema: str, queue: str, *, create: bool = False) -> bool:
    """Let workers start jobs of ``queue`` again; True if it was paused."""
    _queue(schema, queue)
    with conn.transaction():
        if create:
            db.add_queue(conn, schema, queue)
        return db.resume_queue(conn, schema, queue)


def set_queue_limits(
    conn: Conn,
    schema: str,
    queue: str,
    *,
    concurrency: int | Keep | None = KEEP,
    rate: Rate | Keep | None = KEEP,
    key_concurrency: int | Keep | None = KEEP,
    key_fifo: bool | Keep = KEEP,
    key_rate: Rate | Keep | None = KEEP,
    create: bool = False,
) -> QueueControl:
    """Change the limits of ``queue`` that are given (None removes one; the others are
    kept), in one transaction, and return the queue's controls.

    * ``concurrency``: most jobs of the queue running at once across every node;
    * ``rate``: ``(limit, period)``, at most ``limit`` starts in any ``period`` (seconds
      or a timedelta) across every node;
    * ``key_concurrency``: most jobs running at once per concurrency key; ``key_fifo=True``
      (with ``key_concurrency=1``) starts a key's jobs strictly in enqueue order, each
      once the previous one has finished;
    * ``key_rate``: ``(limit, period)`` per concurrency key.

    Raises:
        ConfigError: a limit out of 1..1,000,000, a period out of 1 ms..7 days, FIFO
            without a key concurrency of 1 (nothing is changed).
        UnknownQueueError: no worker served the queue and no job is in it (and not ``create``).
    """
    _queue(schema, queue)
    changes: list[Callable[[], None]] = []
    if not isinstance(concurrency, Keep):
        n = _limit("concurrency", concurrency)
        changes.append(lambda: db.set_queue_limit(conn, schema, queue, n))
    if not isinstance(rate, Keep):
        rate_limit, rate_period = _rate("rate", rate)
        changes.append(lambda: db.set_queue_rate(conn, schema, queue, rate_limit, rate_period))
    if not isinstance(key_concurrency, Keep) or not isinstance(key_fifo, Keep):
        key_n = key_concurrency if isinstance(key_concurrency, Keep) else _limit("key_concurrency", key_concurrency)
        changes.append(lambda: _set_key_limit(conn, schema, queue, key_n, key_fifo))
    if not isinstance(key_rate, Keep):
        key_rate_limit, key_rate_period = _rate("key_rate", key_rate)
        changes.append(lambda: db.set_key_rate(conn, schema, queue, key_rate_limit, key_rate_period))
    with conn.transaction():
        if create:
            db.add_queue(conn, schema, queue)
        for change in changes:
            change()
        rows = db.queue_controls(conn, schema, queue)
    if not rows:  # no change was asked for, and the queue is unknown
        raise UnknownQueueError(f"unknown queue {queue!r}: no worker has served it and no job is in it")
    return QueueControl(**rows[0])


def _set_key_limit(conn: Conn, schema: str, queue: str, key_n: int | Keep | None, fifo: bool | Keep) -> None:
    """Set the key concurrency and the FIFO flag together, keeping whichever was not
    given; removing the key concurrency removes FIFO with it."""
    if isinstance(key_n, Keep) or isinstance(fifo, Keep):
        rows = db.queue_controls(conn, schema, queue)
        current = rows[0] if rows else {"key_concurrency": None, "key_fifo": False}
        if isinstance(key_n, Keep):
            key_n = current["key_concurrency"]
        if isinstance(fifo, Keep):
            fifo = bool(current["key_fifo"]) and key_n is not None
    db.set_key_limit(conn, schema, queue, key_n, bool(fifo))


def set_task_limit(conn: Conn, schema: str, task: str, concurrency: int | None) -> None:
    """At most ``concurrency`` running jobs of ``task`` across every node and queue (None:
    no limit). Takes effect at every worker's next claim.

    Raises:
        ConfigError: an invalid task name, or a limit out of 1..1,000,000.
    """
    validate_schema(schema)
    validate_task_name(task)
    db.set_task_limit(conn, schema, task, _limit("concurrency", concurrency))


def queue_controls(conn: Conn, schema: str) -> list[QueueControl]:
    """Every known queue: paused, its limits and what they count now."""
    return [QueueControl(**row) for row in db.queue_controls(conn, validate_schema(schema))]


def task_controls(conn: Conn, schema: str) -> list[TaskControl]:
    """Every task limit and the jobs of the task running now."""
    return [TaskControl(**row) for row in db.task_controls(conn, validate_schema(schema))]
