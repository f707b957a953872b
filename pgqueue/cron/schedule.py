"""Cron schedules: declaring them (``@app.periodic``, ``app.add_schedule``) and deciding,
from a cursor and the database's "now", which ticks are due under the missed-tick policy.

The scheduler that turns due ticks into jobs lives in :mod:`.scheduler`; the time
arithmetic (croniter, time zones, DST) in :mod:`.ticks`. The declared schedules belong to
the :class:`~pgqueue.App`; the rules for declaring them are here.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from typing import Any, Literal, get_args

from .. import _enqueue
from ..config import DEFAULT_QUEUE, validate_queue
from ..errors import ConfigError, InvalidArgumentsError
from ..task import TaskDef
from .ticks import CronExpr

__all__ = [
    "DEFAULT_GRACE",
    "DEFAULT_MAX_CATCHUP",
    "DEFAULT_MISSED",
    "Due",
    "MissedPolicy",
    "Schedule",
    "build_schedule",
    "check_args",
    "due_ticks",
    "park",
    "take_parked",
    "with_task_settings",
]

MissedPolicy = Literal["skip", "latest", "all"]
DEFAULT_MISSED: MissedPolicy = "latest"
DEFAULT_MAX_CATCHUP = 100
MAX_CATCHUP_LIMIT = 10_000
#: A tick is *missed* once it is more than this overdue (seconds); younger ones always fire.
DEFAULT_GRACE = 60.0
# Schedule names end up in the job's unique_key ("cron:<name>:<tick>"), capped at 200.
_SCHEDULE_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.:-]{0,149}")  # fullmatch: "$" accepts a trailing "\n"


@dataclass(frozen=True)
class Schedule:
    """One named schedule: enqueue ``task`` with ``args`` at every tick of ``cron``.

    ``missed`` decides what happens to ticks more than ``grace`` seconds overdue (all
    scheduler nodes were down, or the schedule was paused): ``"skip"`` drops them,
    ``"latest"`` fires the most recent one, ``"all"`` fires the most recent
    ``max_catchup`` of them. Ticks less overdue than ``grace`` always fire.

    Raises:
        ConfigError: any field is invalid (bad expression, unknown zone, bad policy...).
    """

    name: str
    task: str
    cron: str
    timezone: str = "UTC"
    queue: str = DEFAULT_QUEUE
    priority: int = 0
    args: Mapping[str, Any] = field(default_factory=dict, hash=False)
    missed: MissedPolicy = DEFAULT_MISSED
    max_catchup: int = DEFAULT_MAX_CATCHUP
    grace: float = DEFAULT_GRACE
    max_payload_bytes: int = field(default=_enqueue.DEFAULT_MAX_PAYLOAD_BYTES, repr=False, compare=False)
    #: The jobs' concurrency key and deadline (seconds after the tick), from the task's
    #: declaration when the app knows the task (see :func:`with_task_settings`).
    concurrency_key: str | None = field(default=None, compare=False)
    expires_in: float | None = field(default=None, compare=False)
    #: The arguments as JSON text (what the job carries).
    args_json: str = field(init=False, repr=False, compare=False)
    expr: CronExpr = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not _SCHEDULE_NAME.fullmatch(self.name):
            raise ConfigError(
                f"invalid schedule name {self.name!r}: use 1-150 characters (letters, digits, _ . : -), "
                "starting with a letter, digit or _"
            )
        if not isinstance(self.task, str) or not _enqueue.TASK_NAME.fullmatch(self.task):
            raise ConfigError(f"schedule {self.name!r}: invalid task name {self.task!r}")
        validate_queue(self.queue)
        if isinstance(self.priority, bool) or not isinstance(self.priority, int):
            raise ConfigError(f"schedule {self.name!r}: priority must be an int")
        if self.priority not in _enqueue.PRIORITY_RANGE:
            raise ConfigError(f"schedule {self.name!r}: priority must be in -32768..32767")
        if self.missed not in get_args(MissedPolicy):
            raise ConfigError(f"schedule {self.name!r}: missed must be 'skip', 'latest' or 'all', got {self.missed!r}")
        if (
            isinstance(self.max_catchup, bool)
            or not isinstance(self.max_catchup, int)
            or not 1 <= self.max_catchup <= MAX_CATCHUP_LIMIT
        ):
            raise ConfigError(
                f"schedule {self.name!r}: max_catchup must be an int in 1..{MAX_CATCHUP_LIMIT}, "
                f"got {self.max_catchup!r}"
            )
        if isinstance(self.grace, bool) or not isinstance(self.grace, int | float) or not 0 < self.grace <= 86400:
            raise ConfigError(f"schedule {self.name!r}: grace must be between 0 and 86400 seconds, got {self.grace!r}")
        if not isinstance(self.args, Mapping):
            raise ConfigError(f"schedule {self.name!r}: args must be a mapping of argument names to JSON values")
        try:
            expr = CronExpr(self.cron, self.timezone, hash_key=self.name)
        except ConfigError as exc:
            raise ConfigError(f"schedule {self.name!r}: {exc}") from None
        if self.concurrency_key is not None:
            try:
                _enqueue.check_key("concurrency_key", self.concurrency_key)
            except ConfigError as exc:
                raise ConfigError(f"schedule {self.name!r}: {exc}") from None
        if self.expires_in is not None:
            object.__setattr__(self, "expires_in", _enqueue.check_expires_in(self.expires_in))
        args_json = _enqueue.encode_args(self.task, self.args, self.max_payload_bytes)
        object.__setattr__(self, "args", json.loads(args_json))
        object.__setattr__(self, "args_json", args_json)
        object.__setattr__(self, "expr", expr)

    @property
    def expression(self) -> str:
        """The expression as the scheduler evaluates it (a hashed ``H`` resolved)."""
        return self.expr.expression

    def unique_key(self, tick: datetime) -> str:
        """The job's unique_key for ``tick``: ``cron:<name>:<tick in UTC, ISO 8601>``."""
        return f"cron:{self.name}:{tick.astimezone(UTC).strftime('%Y-%m-%dT%H:%M:%SZ')}"

    def due(self, cursor: datetime, now: datetime) -> Due:
        """Which ticks in ``(cursor, now]`` fire, and the new cursor (see :class:`Due`)."""
        return due_ticks(self, cursor, now)


@dataclass(frozen=True)
class Due:
    """The outcome of :func:`due_ticks`."""

    #: Ticks to enqueue a job for, ascending.
    fire: list[datetime]
    #: The latest tick at or before ``now`` (fired or dropped), or None when no tick fell
    #: in the window. Stored as the schedule's ``last_tick``: no tick at or before it is
    #: ever considered again.
    cursor: datetime | None
    #: Whether missed ticks (older than the grace period) were dropped by the policy.
    dropped: bool = False


def due_ticks(schedule: Schedule, cursor: datetime, now: datetime) -> Due:
    """Apply the missed-tick policy to the ticks in ``(cursor, now]``.

    On-time ticks (at most ``grace`` overdue) always fire. Of the missed ones (older),
    ``skip`` fires none, ``latest`` the most recent, ``all`` the most recent
    ``max_catchup``. Only the windows that can matter are enumerated, so a long
    downtime under a per-second schedule costs no more than ``max_catchup`` ticks.
    """
    expr = schedule.expr
    if now <= cursor:
        return Due([], None)
    boundary = now - timedelta(seconds=schedule.grace)
    on_time = expr.ticks(max(cursor, boundary), now)
    if boundary <= cursor:
        return Due(on_time, on_time[-1] if on_time else None)
    keep = {"skip": 0, "latest": 1, "all": schedule.max_catchup}[schedule.missed]
    missed = expr.latest(cursor, boundary, max(keep, 1))
    if not missed:
        return Due(on_time, on_time[-1] if on_time else None)
    fired_missed = missed if keep else []
    dropped = keep == 0 or bool(expr.ticks(cursor, missed[0] - timedelta(microseconds=1), limit=1))
    new_cursor = on_time[-1] if on_time else missed[-1]
    return Due(fired_missed + on_time, new_cursor, dropped)


# -- declaring (the App keeps the declared schedules; these are the rules) ----------------

#: Where an ``@app.periodic`` below ``@app.task`` parks its options on the plain function,
#: until ``@app.task`` wraps it and registers the schedule.
_PARKED_ATTR = "__pgqueue_schedules__"


def build_schedule(
    task_name: str,
    name: str | None,
    options: Mapping[str, Any],
    *,
    known: TaskDef | None,
    max_payload_bytes: int,
) -> Schedule:
    """The schedule ``options`` declare for ``task_name``; ``queue`` and ``priority``
    default to the task's when it is ``known`` here, else ``"default"`` and 0.

    Raises:
        ConfigError: any option is invalid.
    """
    opts = dict(options)
    if opts.get("queue") is None:
        opts["queue"] = known.queue if known is not None else DEFAULT_QUEUE
    if opts.get("priority") is None:
        opts["priority"] = known.priority if known is not None else 0
    if opts.get("args") is None:
        opts["args"] = {}
    return Schedule(name=name or task_name, task=task_name, max_payload_bytes=max_payload_bytes, **opts)


def check_args(schedule: Schedule, task: TaskDef) -> None:
    """Refuse a schedule whose ``args`` its task's handler would not accept, or from which
    the task's ``concurrency_key`` argument cannot be read."""
    problem = task.args_checker.problem(schedule.args)
    if problem is not None:
        raise ConfigError(f"schedule {schedule.name!r}: args do not fit task {task.name!r}: {problem}")
    with_task_settings(schedule, task)


def with_task_settings(schedule: Schedule, task: TaskDef) -> Schedule:
    """``schedule`` with its task's concurrency key (read from the schedule's args) and
    default deadline, which its jobs carry like any enqueue of the task.

    Raises:
        ConfigError: the key cannot be read from the schedule's args.
    """
    key = None
    if task.concurrency_key is not None:
        try:
            key = _enqueue.concurrency_key_from(
                task.name, task.concurrency_key, schedule.args, task.args_checker.defaults
            )
        except InvalidArgumentsError as exc:  # at declaration: the schedule's own mistake
            raise ConfigError(f"schedule {schedule.name!r}: {exc}") from None
    if key == schedule.concurrency_key and task.expires_in == schedule.expires_in:
        return schedule
    return replace(schedule, concurrency_key=key, expires_in=task.expires_in)


def park(fn: Callable[..., Any], name: str | None, options: Mapping[str, Any]) -> None:
    """Keep a schedule's options on ``fn`` until it becomes a task (see :func:`take_parked`)."""
    parked: list[tuple[str | None, dict[str, Any]]] = getattr(fn, _PARKED_ATTR, [])
    parked.append((name, dict(options)))
    setattr(fn, _PARKED_ATTR, parked)


def take_parked(fn: Callable[..., Any]) -> list[tuple[str | None, dict[str, Any]]]:
    """The schedules parked on ``fn`` (name, options), removed from it."""
    parked: list[tuple[str | None, dict[str, Any]]] = getattr(fn, _PARKED_ATTR, [])
    if parked:
        delattr(fn, _PARKED_ATTR)
    return parked
