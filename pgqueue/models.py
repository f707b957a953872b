"""Plain data types shared by every layer: job states, claimed jobs, jobs to enqueue."""

from __future__ import annotations

import contextvars
import enum
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, Final

from .errors import Cancel

__all__ = [
    "FINAL_STATES",
    "BatchInfo",
    "RUN_AT_MAX",
    "RUN_AT_MIN",
    "Job",
    "JobContext",
    "JobSpec",
    "JobState",
    "Outcome",
]


class JobState(enum.StrEnum):
    """A job's state (River/Oban vocabulary)."""

    AVAILABLE = "available"  #: ready to be claimed
    SCHEDULED = "scheduled"  #: waiting for its run_at
    RUNNING = "running"  #: claimed under a lease
    RETRYABLE = "retryable"  #: failed, waiting for its backoff to pass
    COMPLETED = "completed"  #: final: the handler returned
    DISCARDED = "discarded"  #: final, dead letter: out of attempts or not retryable
    CANCELLED = "cancelled"  #: final: cancelled by a handler or an operator


FINAL_STATES = frozenset({JobState.COMPLETED, JobState.DISCARDED, JobState.CANCELLED})

#: run_at must fall in this range (UTC), as the jobs_run_at_range CHECK also enforces:
#: inside it every time zone's view of the value is a valid Python datetime.
RUN_AT_MIN = datetime(1900, 1, 1, tzinfo=UTC)
RUN_AT_MAX = datetime(9999, 1, 1, tzinfo=UTC)

#: Default of ``Job.scheduled_at`` for code that builds a Job without it: replaced by run_at.
_SAME_AS_RUN_AT: Final = datetime.min.replace(tzinfo=UTC)


@dataclass(frozen=True, slots=True)
class Job:
    """A claimed job, as a handler's context sees it.

    ``run_at`` is when this attempt was due: a retry moves it. ``scheduled_at`` is the
    time the job was scheduled for when it was enqueued (a cron job: its tick), the same
    on every attempt. ``snoozes`` counts the handler's snoozes (each gave its attempt
    back); ``expires_at`` is the deadline by which an attempt must start (None: none);
    ``concurrency_key`` the job's key for per-key concurrency limits (None: none).
    """

    id: int
    queue: str
    task: str
    args: dict[str, Any]
    priority: int
    attempt: int
    max_attempts: int
    lease_token: uuid.UUID
    run_at: datetime
    created_at: datetime
    pickup_delay: timedelta
    scheduled_at: datetime = _SAME_AS_RUN_AT
    snoozes: int = 0
    expires_at: datetime | None = None
    concurrency_key: str | None = None
    #: Whether the job was enqueued with dependencies (its context carries its parents'
    #: results).
    has_parents: bool = False

    def __post_init__(self) -> None:
        if self.scheduled_at is _SAME_AS_RUN_AT:
            object.__setattr__(self, "scheduled_at", self.run_at)


@dataclass(frozen=True, slots=True)
class BatchInfo:
    """A batch's counts, as a callback's ``ctx.batch`` shows them (every member settled)."""

    id: int
    total: int
    completed: int
    discarded: int
    cancelled: int


@dataclass(slots=True)
class JobContext:
    """Passed as first argument to handlers declared with ``pass_context=True``.

    For ``transactional=True`` tasks, ``conn`` is the connection whose open transaction
    also records the job's completion: the handler's writes on it commit together with the
    completion, or not at all. It is a psycopg ``AsyncConnection`` for ``async def``
    handlers and a ``Connection`` for plain ones; ``None`` for non-transactional tasks.
    """

    job: Job
    worker_id: str
    conn: Any = None
    #: Set by the worker when an operator cancels this running job (``cancel_job()``);
    #: picked up from the attempt that creates the context.
    cancel_flag: CancelFlag | None = field(default_factory=lambda: CANCEL_FLAG.get(None))
    #: Jobs with dependencies: each parent's result by parent id (None for a parent that
    #: returned None, or did not complete and the dependency's policy ran this job anyway);
    #: ``parent_states`` says which. Empty for jobs without dependencies.
    parent_results: dict[int, Any] = field(default_factory=dict)
    #: Each parent's final state by parent id ("completed", "discarded", "cancelled").
    parent_states: dict[int, str] = field(default_factory=dict)
    #: A batch callback (on_success, on_complete, on_discard): the batch it reports on,
    #: with its counts per outcome. None for every other job.
    batch: BatchInfo | None = None

    @property
    def cancel_requested(self) -> bool:
        """True once an operator asked this job to stop (seen at the worker's heartbeat)."""
        return self.cancel_flag is not None and self.cancel_flag.is_set()

    def check_cancelled(self) -> None:
        """Raise :class:`pgqueue.Cancel` if an operator asked this job to stop.

        Long sync handlers call this between steps: they cannot be interrupted otherwise.
        """
        if self.cancel_requested:
            raise Cancel("cancelled by an operator")


class CancelFlag:
    """Set once when an operator cancels a running attempt; read from any thread.

    One is made per attempt on the hot path, so it is a plain attribute rather than a
    ``threading.Event`` (nothing waits on it; handlers poll it)."""

    __slots__ = ("_set",)

    def __init__(self) -> None:
        self._set = False

    def set(self) -> None:
        self._set = True

    def is_set(self) -> bool:
        return self._set


#: The running attempt's cancel flag; the worker sets it in each job's task context, and
#: the executor carries that context into the handler's thread.
CANCEL_FLAG: contextvars.ContextVar[CancelFlag] = contextvars.ContextVar("pgqueue_cancel_flag")


@dataclass(frozen=True, slots=True)
class JobSpec:
    """A job ready to enqueue, built with ``task.job(...)`` for ``App.enqueue_many``.

    ``expires_in`` (seconds) is a deadline counted from the job's run_at, turned into
    ``expires_at`` on the database clock. ``unique_key`` alone deduplicates against live
    jobs; with the unique rules (``unique_period`` seconds, ``unique_states``,
    ``unique_mode``, set by :class:`pgqueue.Unique`) it is the key of the unique ledger.
    """

    task: str
    args_json: str
    queue: str
    priority: int = 0
    run_at: datetime | None = None
    delay: float | None = None
    unique_key: str | None = None
    max_attempts: int | None = None
    concurrency_key: str | None = None
    expires_at: datetime | None = None
    expires_in: float | None = None
    unique_period: float | None = None
    unique_states: tuple[str, ...] | None = None
    unique_mode: str | None = None
    #: Existing jobs this one waits for: (job id, policy), policy "cancel" (cancel this
    #: job if that one ends discarded or cancelled) or "run" (run it anyway).
    depends_on: tuple[tuple[int, str], ...] = ()

    @property
    def unique_rules(self) -> bool:
        """Whether the job goes through the unique ledger (not just ``unique_key``)."""
        return self.unique_mode is not None


# The frozen dataclass's __init__ sets each of JobSpec's 15 fields with a generic
# object.__setattr__ call: 4.3 us per job (3.3 us positionally), as much as the rest of a
# bulk enqueue's Python work per job. new_spec() fills the same slots through their own
# descriptors (1.7 us). tests/unit/test_job_spec.py holds it to JobSpec(...) field by field.
_new = object.__new__
(
    _set_task, _set_args_json, _set_queue, _set_priority, _set_run_at, _set_delay, _set_unique_key,
    _set_max_attempts, _set_concurrency_key, _set_expires_at, _set_expires_in, _set_unique_period,
    _set_unique_states, _set_unique_mode, _set_depends_on,
) = (getattr(JobSpec, name).__set__ for name in JobSpec.__slots__)  # fmt: skip


def new_spec(
    task: str,
    args_json: str,
    queue: str,
    priority: int,
    run_at: datetime | None,
    delay: float | None,
    unique_key: str | None,
    max_attempts: int | None,
    concurrency_key: str | None,
    expires_at: datetime | None,
    expires_in: float | None,
    unique_period: float | None,
    unique_states: tuple[str, ...] | None,
    unique_mode: str | None,
    depends_on: tuple[tuple[int, str], ...],
) -> JobSpec:
    """``JobSpec(...)`` with every field given, without the frozen dataclass's per-field
    ``object.__setattr__`` (internal: make_spec() builds every job through it)."""
    spec: JobSpec = _new(JobSpec)
    _set_task(spec, task)
    _set_args_json(spec, args_json)
    _set_queue(spec, queue)
    _set_priority(spec, priority)
    _set_run_at(spec, run_at)
    _set_delay(spec, delay)
    _set_unique_key(spec, unique_key)
    _set_max_attempts(spec, max_attempts)
    _set_concurrency_key(spec, concurrency_key)
    _set_expires_at(spec, expires_at)
    _set_expires_in(spec, expires_in)
    _set_unique_period(spec, unique_period)
    _set_unique_states(spec, unique_states)
    _set_unique_mode(spec, unique_mode)
    _set_depends_on(spec, depends_on)
    return spec


@dataclass(frozen=True, slots=True)
class Outcome:
    """What an attempt ended in, ready to be written (internal: the worker's record).

    ``available`` or ``scheduled`` is a snooze: the job waits ``delay`` seconds (0:
    available at once) and its attempt is given back.
    """

    state: JobState  # retryable, completed, discarded, cancelled; available/scheduled: snoozed
    delay: float = 0.0  # seconds before the next attempt (retryable and snoozed only)
    error: Mapping[str, Any] | None = None
    #: completed only: the handler's return value as JSON text (None: it returned None).
    result: str | None = None

    @property
    def snoozed(self) -> bool:
        return self.state is JobState.AVAILABLE or self.state is JobState.SCHEDULED
