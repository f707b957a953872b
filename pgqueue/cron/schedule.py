"""Cron schedules: declaring them (``@app.periodic``, ``app.add_schedule``) and deciding,
from a cursor and the database's "now", which ticks are due under the missed-tick policy.

The scheduler loop that turns due ticks into jobs lives in ``_cron_loop``; the time
arithmetic (croniter, time zones, DST) in ``_cron_time``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any, Literal, TypeVar, get_args

from .. import _enqueue
from ..config import DEFAULT_QUEUE, validate_queue
from ..errors import ConfigError
from .ticks import CronExpr

if TYPE_CHECKING:
    from ..app import App, Task

__all__ = ["DEFAULT_GRACE", "DEFAULT_MAX_CATCHUP", "DEFAULT_MISSED", "Due", "MissedPolicy", "Schedule"]

MissedPolicy = Literal["skip", "latest", "all"]
DEFAULT_MISSED: MissedPolicy = "latest"
DEFAULT_MAX_CATCHUP = 100
MAX_CATCHUP_LIMIT = 10_000
#: A tick is *missed* once it is more than this overdue (seconds); younger ones always fire.
DEFAULT_GRACE = 60.0
# Schedule names end up in the job's unique_key ("cron:<name>:<tick>"), capped at 200.
_SCHEDULE_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.:-]{0,149}")  # fullmatch: "$" accepts a trailing "\n"
_TASK_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_.:-]{0,199}")
_PENDING_ATTR = "__pgqueue_schedules__"

F = TypeVar("F", bound=Callable[..., Any])


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
    #: The arguments as JSON text (what the job carries).
    args_json: str = field(init=False, repr=False, compare=False)
    expr: CronExpr = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not _SCHEDULE_NAME.fullmatch(self.name):
            raise ConfigError(
                f"invalid schedule name {self.name!r}: use 1-150 characters (letters, digits, _ . : -), "
                "starting with a letter, digit or _"
            )
        if not isinstance(self.task, str) or not _TASK_NAME.fullmatch(self.task):
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
        args_json = _enqueue.encode_args(self.task, self.args, self.max_payload_bytes)
        object.__setattr__(self, "args", json.loads(args_json))
        object.__setattr__(self, "args_json", args_json)
        object.__setattr__(self, "expr", expr)

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


# -- declaring ------------------------------------------------------------------------------


def _schedule_for(app: App, task_name: str, name: str | None, options: dict[str, Any]) -> Schedule:
    known = app.tasks.get(task_name)
    if options.get("queue") is None:
        options["queue"] = known.queue if known is not None else DEFAULT_QUEUE
    if options.get("priority") is None:
        options["priority"] = known.priority if known is not None else 0
    if options.get("args") is None:
        options["args"] = {}
    return Schedule(name=name or task_name, task=task_name, max_payload_bytes=app.max_payload_bytes, **options)


def check_args(schedule: Schedule, task: Task[Any, Any]) -> None:
    """Refuse a schedule whose ``args`` its task's handler would not accept."""
    problem = task.args_checker.problem(schedule.args)
    if problem is not None:
        raise ConfigError(f"schedule {schedule.name!r}: args do not fit task {task.name!r}: {problem}")


def register(app: App, schedule: Schedule) -> Schedule:
    if schedule.name in app.schedules:
        raise ConfigError(
            f"schedule {schedule.name!r} is already declared in this app; give each schedule of a task its own name="
        )
    known = app.tasks.get(schedule.task)
    if known is not None:  # a task of another service cannot be checked here
        check_args(schedule, known)
    app.schedules[schedule.name] = schedule
    return schedule


def periodic(app: App, name: str | None, options: dict[str, Any]) -> Callable[[F], F]:
    """The decorator behind :meth:`App.periodic`.

    Above ``@app.task`` it receives the task and registers at once. Below it, it receives
    the plain function: the options are parked on the function and validated now, and
    ``@app.task`` registers the schedule when it wraps the function.
    """
    from ..app import Task

    # Validate everything but the task name now, so mistakes surface where they are made.
    _schedule_for(app, "periodic", name or "periodic", dict(options))

    def decorate(target: F) -> F:
        if isinstance(target, Task):
            register(app, _schedule_for(app, target.name, name, dict(options)))
        elif callable(target):
            pending: list[tuple[str | None, dict[str, Any]]] = getattr(target, _PENDING_ATTR, [])
            pending.append((name, dict(options)))
            setattr(target, _PENDING_ATTR, pending)
            app._unbound_periodic.append(target)
        else:
            raise ConfigError(f"@app.periodic decorates a task or a function, not {target!r}")
        return target

    return decorate


def bind_pending(app: App, fn: Callable[..., Any], task: Task[Any, Any]) -> None:
    """Called by ``@app.task``: check the schedules already declared for it by name, and
    register those parked on ``fn`` by a lower ``@app.periodic``."""
    for schedule in app.schedules.values():
        if schedule.task == task.name:
            check_args(schedule, task)
    pending: list[tuple[str | None, dict[str, Any]]] = getattr(fn, _PENDING_ATTR, [])
    for name, options in pending:
        register(app, _schedule_for(app, task.name, name, dict(options)))
    if pending:
        delattr(fn, _PENDING_ATTR)
        app._unbound_periodic[:] = [f for f in app._unbound_periodic if f is not fn]


def add_schedule(app: App, name: str, task: str, options: dict[str, Any]) -> Schedule:
    """The function behind :meth:`App.add_schedule` (a task given by name)."""
    return register(app, _schedule_for(app, task, name, options))


def schedules_of(app: App) -> list[Schedule]:
    """The app's schedules, sorted by name.

    Raises:
        ConfigError: an ``@app.periodic`` decorated a function that never became a task.
    """
    if app._unbound_periodic:
        names = ", ".join(getattr(f, "__qualname__", repr(f)) for f in app._unbound_periodic)
        raise ConfigError(f"@app.periodic on {names}, which is not a task: stack it directly above or below @app.task")
    return [app.schedules[n] for n in sorted(app.schedules)]
