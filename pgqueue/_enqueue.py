"""Turning a call like ``task.enqueue(conn, x=1)`` into a job: validation and JSON
encoding. No I/O: the statements run in :mod:`pgqueue._db.enqueue`, which also translates
the database's refusals.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from datetime import datetime, timedelta
from typing import Any

from .config import validate_queue
from .errors import ConfigError, InvalidArgumentsError, PayloadTooLargeError
from .models import RUN_AT_MAX, RUN_AT_MIN, JobSpec

__all__ = [
    "DEFAULT_MAX_PAYLOAD_BYTES",
    "MAX_ARGS_DEPTH",
    "encode_args",
    "make_spec",
    "validate_task_name",
]

DEFAULT_MAX_PAYLOAD_BYTES = 1024 * 1024
PRIORITY_RANGE = range(-32768, 32768)
#: max_attempts is an int4 column; the claim passes task limits as int[].
MAX_ATTEMPTS_LIMIT = 2**31 - 1
#: Deepest nesting of containers in a job's arguments (the arguments object is level 1).
#: Python decodes JSON recursively: a payload much deeper than this cannot be decoded by a
#: worker whose stack is already in use, so it is refused here rather than poison a worker.
MAX_ARGS_DEPTH = 100
#: The one rule for task names (fullmatch: "$" would let a trailing newline in).
TASK_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_.:-]{0,199}")
# json.dumps writes a NUL character as \u0000; a literal backslash before "u0000" is
# written as \\u0000, so only an odd run of backslashes is a real NUL.
_NUL_ESCAPE = re.compile(r"(?<!\\)(?:\\\\)*\\u0000")


def validate_task_name(task: str) -> str:
    """Return ``task`` if it is a valid task name, else raise :class:`ConfigError`."""
    if not isinstance(task, str) or not TASK_NAME.fullmatch(task):
        raise ConfigError(
            f"invalid task name {task!r}: use 1-200 characters (letters, digits, _ . : -), starting with a letter or _"
        )
    return task


def _too_deep(value: Any, limit: int) -> bool:
    """Whether containers nest more than ``limit`` levels deep in ``value`` (iterative:
    it must not itself hit the recursion limit)."""
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict):
            children: Iterable[Any] = item.values()
        elif isinstance(item, (list, tuple)):
            children = item
        else:
            continue
        if depth > limit:
            return True
        stack.extend((child, depth + 1) for child in children)
    return False


def _find_bad_argument(args: Mapping[str, Any]) -> str:
    for name, value in args.items():
        if _too_deep(value, MAX_ARGS_DEPTH - 1):
            return f"argument {name!r}: nested more than {MAX_ARGS_DEPTH} levels deep"
        try:
            json.dumps(value, allow_nan=False, ensure_ascii=False).encode("utf-8")
        except (TypeError, ValueError, UnicodeEncodeError, RecursionError) as exc:
            return f"argument {name!r}: {exc}"
    return "arguments are not JSON-serialisable"


def encode_args(task: str, args: Mapping[str, Any], max_bytes: int) -> str:
    """Encode job arguments as JSON text, or raise an error naming the bad argument."""
    for key in args:
        if not isinstance(key, str):
            raise InvalidArgumentsError(f"task {task!r}: argument names must be strings, got {key!r}")
    try:
        text = json.dumps(args, allow_nan=False, ensure_ascii=False, separators=(",", ":"))
        size = len(text.encode("utf-8"))
    except (TypeError, ValueError, UnicodeEncodeError, RecursionError):
        raise InvalidArgumentsError(
            f"task {task!r}: {_find_bad_argument(args)} (args must be JSON: str, int, float, bool, None, list, dict)"
        ) from None
    # Nesting can only exceed the limit when there are that many brackets (a cheap test
    # that keeps the walk off the common path).
    if text.count("[") + text.count("{") > MAX_ARGS_DEPTH and _too_deep(args, MAX_ARGS_DEPTH):
        raise InvalidArgumentsError(f"task {task!r}: {_find_bad_argument(args)}")
    if "\\u0000" in text and _NUL_ESCAPE.search(text):
        raise InvalidArgumentsError(
            f"task {task!r}: arguments contain a NUL character (\\u0000), which PostgreSQL jsonb cannot store"
        )
    if size > max_bytes:
        raise PayloadTooLargeError(
            f"task {task!r}: arguments are {size} bytes of JSON, over the {max_bytes}-byte limit "
            "(App(max_payload_bytes=...))"
        )
    return text


def _seconds(delay: float | timedelta | None) -> float | None:
    if delay is None:
        return None
    seconds = delay.total_seconds() if isinstance(delay, timedelta) else float(delay)
    if not seconds >= 0 or seconds > 10 * 365 * 86400:
        raise ConfigError(f"delay must be between 0 and ten years, got {delay!r}")
    return seconds


def _check_run_at(run_at: datetime) -> None:
    if not isinstance(run_at, datetime) or run_at.tzinfo is None or run_at.utcoffset() is None:
        raise ConfigError(f"run_at must be a timezone-aware datetime, got {run_at!r}")
    try:
        in_range = RUN_AT_MIN <= run_at < RUN_AT_MAX
    except OverflowError:
        in_range = False
    if not in_range:
        raise ConfigError(f"run_at must be between {RUN_AT_MIN:%Y-%m-%d} and {RUN_AT_MAX:%Y-%m-%d} UTC, got {run_at!r}")


def _check_unique_key(unique_key: str) -> None:
    if not isinstance(unique_key, str) or not 1 <= len(unique_key) <= 200:
        raise ConfigError("unique_key must be a string of 1-200 characters")
    if "\x00" in unique_key:
        raise ConfigError("unique_key contains a NUL character, which PostgreSQL text cannot store")
    try:
        unique_key.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise ConfigError(f"unique_key is not valid Unicode text ({exc.reason} at position {exc.start})") from None


def check_max_attempts(max_attempts: int) -> int:
    """Return ``max_attempts`` if it is an int in 1..2**31-1, else raise :class:`ConfigError`."""
    if (
        isinstance(max_attempts, bool)
        or not isinstance(max_attempts, int)
        or not 1 <= max_attempts <= MAX_ATTEMPTS_LIMIT
    ):
        raise ConfigError(f"max_attempts must be an int in 1..{MAX_ATTEMPTS_LIMIT}, got {max_attempts!r}")
    return max_attempts


def make_spec(
    task: str,
    args: Mapping[str, Any],
    *,
    queue: str,
    priority: int,
    run_at: datetime | None,
    delay: float | timedelta | None,
    unique_key: str | None,
    max_attempts: int | None,
    max_bytes: int,
) -> JobSpec:
    validate_task_name(task)
    validate_queue(queue)
    if isinstance(priority, bool) or not isinstance(priority, int) or priority not in PRIORITY_RANGE:
        raise ConfigError(f"priority must be an int in -32768..32767, got {priority!r}")
    if run_at is not None and delay is not None:
        raise ConfigError("give run_at or delay, not both")
    if run_at is not None:
        _check_run_at(run_at)
    if unique_key is not None:
        _check_unique_key(unique_key)
    if max_attempts is not None:
        check_max_attempts(max_attempts)
    return JobSpec(
        task=task,
        args_json=encode_args(task, args, max_bytes),
        queue=queue,
        priority=priority,
        run_at=run_at,
        delay=_seconds(delay),
        unique_key=unique_key,
        max_attempts=max_attempts,
    )
