"""Unique jobs: :class:`Unique`, the rules under which a job holds its key, and how a key
is derived from a task and its arguments. Pure: the database side is ``enqueue()``'s
ledger (``unique_keys``), see docs/tasks-and-workers.md."""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Iterable, Mapping
from datetime import timedelta
from typing import Any, Final, Literal

from .errors import ConfigError
from .models import JobState

__all__ = ["MAX_PERIOD", "MODES", "Unique", "UniqueMode"]

UniqueMode = Literal["keep", "replace", "debounce"]
MODES: Final = ("keep", "replace", "debounce")
#: The longest period: ten years, in seconds (the SQL function's bound too).
MAX_PERIOD: Final = 3650 * 86400.0
#: Keys are stored in text columns of at most 200 characters; longer ones are hashed.
MAX_KEY: Final = 200

_LIVE = ("available", "scheduled", "running", "retryable")
_WAITING = ("available", "scheduled", "retryable")
_FINISHED = frozenset({"completed", "discarded", "cancelled"})
_ORDER = {s.value: i for i, s in enumerate(JobState)}


class Unique:
    """The rules under which a job is unique: give it to ``@app.task(unique=...)`` or to
    ``task.options(unique=...)``.

    The key is the task's name plus the arguments named in ``args`` (``None``: all of
    them, with the handler's defaults filled in; ``[]``: the task alone), or the
    ``unique_key`` given at enqueue. A job holds its key while it is in one of ``states``
    and, with a ``period`` (seconds or a timedelta), for at most that long after it took
    the key: a sliding window that starts at each job's enqueue. An enqueue that finds the
    key held does what ``mode`` says:

    * ``"keep"``: nothing; it returns the holder's id.
    * ``"replace"``: a holder still waiting (available, scheduled, retryable) takes this
      enqueue's arguments, priority, run_at, concurrency key and deadline.
    * ``"debounce"``: a holder still waiting moves its run_at to this enqueue's, if later.

    A running or finished holder is never changed. ``states`` defaults to the live states
    (available, scheduled, running, retryable) for ``keep`` and to the waiting ones for
    ``replace`` and ``debounce`` (so an enqueue while the job runs makes a new one).
    Finished states (completed, discarded, cancelled) need a ``period``.

    Raises:
        ConfigError: an unknown state or mode, a bad period, finished states without a
        period, or ``args`` that is not a list of names.
    """

    __slots__ = ("args", "mode", "period", "states")

    args: tuple[str, ...] | None
    period: float | None
    states: tuple[str, ...]
    mode: UniqueMode

    def __init__(
        self,
        *,
        args: Iterable[str] | None = None,
        period: float | timedelta | None = None,
        states: Iterable[JobState | str] | None = None,
        mode: UniqueMode = "keep",
    ) -> None:
        if mode not in MODES:
            raise ConfigError(f"Unique(mode=...) must be one of {', '.join(MODES)}, got {mode!r}")
        self.mode = mode
        self.args = _names(args)
        self.period = _period(period)
        self.states = _states(states, mode)
        if self.period is None and _FINISHED.intersection(self.states):
            raise ConfigError(
                "Unique(states=...) with completed, discarded or cancelled needs a period: "
                "a finished job holds its key for the period after it took it"
            )

    def key_for(self, task: str, args: Mapping[str, Any], defaults: Mapping[str, Any] | None = None) -> str:
        """The key of a job of ``task`` with ``args``: the task name and the chosen
        arguments as canonical JSON (hashed when longer than 200 characters). An argument
        not given reads as its handler default (``defaults``), else as null."""
        fallback = defaults or {}
        names = sorted({*args, *fallback}) if self.args is None else sorted(self.args)
        picked = {n: args[n] if n in args else fallback.get(n) for n in names}
        text = json.dumps(picked, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)
        key = f"{task}:{text}"
        if len(key) <= MAX_KEY:
            return key
        return f"{task[:100]}:sha256:{hashlib.sha256(key.encode('utf-8')).hexdigest()}"

    def __repr__(self) -> str:
        return f"Unique(args={self.args!r}, period={self.period!r}, states={self.states!r}, mode={self.mode!r})"

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Unique):
            return NotImplemented
        return (self.args, self.period, self.states, self.mode) == (other.args, other.period, other.states, other.mode)

    def __hash__(self) -> int:
        return hash((self.args, self.period, self.states, self.mode))


def _names(args: Iterable[str] | None) -> tuple[str, ...] | None:
    if args is None:
        return None
    if isinstance(args, str | bytes) or not isinstance(args, Iterable):
        raise ConfigError(f"Unique(args=...) must be a list of argument names, got {args!r}")
    names = list(args)
    bad = [n for n in names if not isinstance(n, str) or not n]
    if bad:
        raise ConfigError(f"Unique(args=...) must name arguments by their names (strings), got {bad[0]!r}")
    return tuple(sorted(set(names)))


def _period(period: float | timedelta | None) -> float | None:
    if period is None:
        return None
    try:
        seconds = period.total_seconds() if isinstance(period, timedelta) else float(period)
    except (TypeError, ValueError):
        seconds = math.nan
    if isinstance(period, bool) or not 0 < seconds <= MAX_PERIOD:  # also refuses NaN and infinity
        raise ConfigError(
            f"Unique(period=...) must be positive seconds (or a timedelta) up to ten years, got {period!r}"
        )
    return seconds


def _states(states: Iterable[JobState | str] | None, mode: str) -> tuple[str, ...]:
    if states is None:
        return _LIVE if mode == "keep" else _WAITING
    if isinstance(states, str | bytes) or not isinstance(states, Iterable):
        raise ConfigError(f"Unique(states=...) must be a list of states, got {states!r}")
    out: set[str] = set()
    for state in states:
        value = state.value if isinstance(state, JobState) else state
        if not isinstance(value, str) or value not in _ORDER:
            raise ConfigError(
                f"Unique(states=...): unknown state {state!r} (use {', '.join(s.value for s in JobState)})"
            )
        out.add(value)
    if not out:
        raise ConfigError("Unique(states=...) must name at least one state")
    return tuple(sorted(out, key=_ORDER.__getitem__))
