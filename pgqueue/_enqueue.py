"""Turning a call like ``task.enqueue(conn, x=1)`` into a job: validation and JSON
encoding. No I/O: the statements run in :mod:`pgqueue._db.enqueue`, which also translates
the database's refusals.
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Callable, Iterable, Mapping
from datetime import datetime, timedelta
from typing import Any

from .config import validate_queue
from .errors import ConfigError, InvalidArgumentsError, PayloadTooLargeError
from .models import RUN_AT_MAX, RUN_AT_MIN, JobSpec, new_spec
from .unique import Unique

__all__ = [
    "DEFAULT_MAX_PAYLOAD_BYTES",
    "MAX_ARGS_DEPTH",
    "check_expires_in",
    "check_key",
    "concurrency_key_from",
    "encode_args",
    "make_spec",
    "node_json",
    "validate_task_name",
]

DEFAULT_MAX_PAYLOAD_BYTES = 1024 * 1024
PRIORITY_RANGE = range(-32768, 32768)
#: Longest delay or deadline: ten years, in seconds.
MAX_SECONDS = 10 * 365 * 86400
#: unique_key and concurrency_key are text of 1-200 characters (CHECKs on jobs_live).
MAX_KEY = 200
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


#: One encoder for every job (json.dumps with options would build one per call).
_ENCODER = json.JSONEncoder(allow_nan=False, ensure_ascii=False, separators=(",", ":"))


#: Values that cannot hold a container: an arguments dict of only these cannot be cyclic.
_LEAF_TYPES = frozenset({str, int, float, bool, type(None)})


def _make_encode() -> Callable[[Any], str]:
    """``_ENCODER.encode``, without the Python layers it adds to every call (1.7 us of a
    2.2 us encode of ``{}``, measured). Arguments of plain values only (most jobs) go
    through one C encoder built once, without the memo of containers that detects
    cycles, since they cannot hold one; anything else through a C encoder with a fresh
    memo, exactly as ``_ENCODER.encode`` would (a cycle is refused at once; without the
    memo it would recurse until the recursion limit, or past the C stack where an app
    has raised that limit). Where the C encoder is missing, ``_ENCODER.encode`` itself."""
    make = getattr(json.encoder, "c_make_encoder", None)
    if make is None:  # pragma: no cover - CPython always has it
        return _ENCODER.encode
    e = _ENCODER
    options = (
        e.default, json.encoder.encode_basestring, e.indent, e.key_separator, e.item_separator,
        e.sort_keys, e.skipkeys, e.allow_nan,
    )  # fmt: skip
    flat = make(None, *options)
    join = "".join
    leaves = _LEAF_TYPES

    def encode(value: Any) -> str:
        if type(value) is dict:
            for v in value.values():
                if type(v) not in leaves:
                    break
            else:
                return join(flat(value, 0))
        return join(make({}, *options)(value, 0))

    return encode


_encode = _make_encode()


def encode_args(task: str, args: Mapping[str, Any], max_bytes: int) -> str:
    """Encode job arguments as JSON text, or raise an error naming the bad argument."""
    for key in args:
        if not isinstance(key, str):
            raise InvalidArgumentsError(f"task {task!r}: argument names must be strings, got {key!r}")
    try:
        text = _encode(args)
        # A character is at most 4 bytes of UTF-8: only a long text needs counting (the
        # encoding also refuses lone surrogates, which PostgreSQL cannot store).
        size = len(text) if text.isascii() else len(text.encode("utf-8"))
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
    if not seconds >= 0 or seconds > MAX_SECONDS:
        raise ConfigError(f"delay must be between 0 and ten years, got {delay!r}")
    return seconds


def check_expires_in(expires_in: float | timedelta) -> float:
    """``expires_in`` in seconds if it is a positive span up to ten years, else
    :class:`ConfigError` (zero would expire a job before it could start)."""
    try:
        seconds = expires_in.total_seconds() if isinstance(expires_in, timedelta) else float(expires_in)
    except (TypeError, ValueError):
        seconds = float("nan")
    if isinstance(expires_in, bool) or not 0 < seconds <= MAX_SECONDS:  # also refuses NaN and infinity
        raise ConfigError(f"expires_in must be positive seconds (or a timedelta) up to ten years, got {expires_in!r}")
    return seconds


def _check_time(name: str, value: datetime) -> None:
    if not isinstance(value, datetime) or value.tzinfo is None or value.utcoffset() is None:
        raise ConfigError(f"{name} must be a timezone-aware datetime, got {value!r}")
    try:
        in_range = RUN_AT_MIN <= value < RUN_AT_MAX
    except OverflowError:
        in_range = False
    if not in_range:
        raise ConfigError(f"{name} must be between {RUN_AT_MIN:%Y-%m-%d} and {RUN_AT_MAX:%Y-%m-%d} UTC, got {value!r}")


def _check_run_at(run_at: datetime) -> None:
    _check_time("run_at", run_at)


def check_key(name: str, key: str) -> None:
    if not isinstance(key, str) or not 1 <= len(key) <= MAX_KEY:
        got = f"{len(key)} characters" if isinstance(key, str) else repr(key)
        raise ConfigError(f"{name} must be a string of 1-{MAX_KEY} characters, got {got}")
    if "\x00" in key:
        raise ConfigError(f"{name} contains a NUL character, which PostgreSQL text cannot store")
    try:
        key.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise ConfigError(f"{name} is not valid Unicode text ({exc.reason} at position {exc.start})") from None


def _check_unique_key(unique_key: str) -> None:
    check_key("unique_key", unique_key)


def concurrency_key_from(task: str, arg: str, args: Mapping[str, Any], defaults: Mapping[str, Any]) -> str:
    """The concurrency key a task declares with ``concurrency_key="<arg>"``: the value of
    that argument (or the handler's default for it) as text.

    Raises:
        InvalidArgumentsError: the argument is missing or None, not a str or an int, or
        its text is not a valid key (empty, over 200 characters, a NUL character).
    """
    where = f"task {task!r}: its concurrency_key comes from argument {arg!r}"
    if arg in args:
        value = args[arg]
    elif arg in defaults:
        value = defaults[arg]
    else:
        raise InvalidArgumentsError(f"{where}, which was not given")
    if value is None or isinstance(value, bool) or not isinstance(value, str | int):
        raise InvalidArgumentsError(f"{where}, which must be a str or an int, got {type(value).__name__}")
    key = str(value)
    try:
        check_key("concurrency_key", key)
    except ConfigError as exc:
        raise InvalidArgumentsError(f"{where}: {exc}") from None
    return key


def _deadline(
    expires_at: datetime | None, expires_in: float | timedelta | None, run_at: datetime | None
) -> tuple[datetime | None, float | None]:
    """Checked ``(expires_at, expires_in seconds)``. A deadline already past by the
    database clock is not refused here (the client cannot see that clock, and a
    transaction may commit after it anyway): the job is cancelled as expired unstarted."""
    if expires_at is not None and expires_in is not None:
        raise ConfigError("give expires_at or expires_in, not both")
    if expires_at is not None:
        _check_time("expires_at", expires_at)
        if run_at is not None and expires_at <= run_at:
            raise ConfigError(
                f"expires_at {expires_at.isoformat()} is not after run_at {run_at.isoformat()}: "
                "the job could never start"
            )
        return expires_at, None
    return None, None if expires_in is None else check_expires_in(expires_in)


def check_max_attempts(max_attempts: int) -> int:
    """Return ``max_attempts`` if it is an int in 1..2**31-1, else raise :class:`ConfigError`."""
    if (
        isinstance(max_attempts, bool)
        or not isinstance(max_attempts, int)
        or not 1 <= max_attempts <= MAX_ATTEMPTS_LIMIT
    ):
        raise ConfigError(f"max_attempts must be an int in 1..{MAX_ATTEMPTS_LIMIT}, got {max_attempts!r}")
    return max_attempts


def _check_common_uncached(task: Any, queue: Any, priority: Any) -> None:
    validate_task_name(task)
    validate_queue(queue)
    if isinstance(priority, bool) or not isinstance(priority, int) or priority not in PRIORITY_RANGE:
        raise ConfigError(f"priority must be an int in -32768..32767, got {priority!r}")


#: The checks every job needs, remembered for the few (task, queue, priority) a producer
#: uses (a refusal raises, so only valid ones are remembered).
_check_common_cached = functools.lru_cache(maxsize=1024)(_check_common_uncached)


def _check_common(task: Any, queue: Any, priority: Any) -> None:
    if type(task) is str and type(queue) is str and type(priority) is int:
        _check_common_cached(task, queue, priority)
    else:
        _check_common_uncached(task, queue, priority)


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
    concurrency_key: str | None = None,
    expires_at: datetime | None = None,
    expires_in: float | timedelta | None = None,
    unique: Unique | None = None,
    defaults: Mapping[str, Any] | None = None,
    depends_on: tuple[tuple[int, str], ...] = (),
) -> JobSpec:
    """A checked job. ``concurrency_key`` is final (a declared argument already read);
    ``unique`` rules with no ``unique_key`` derive the key from ``task`` and ``args``
    (``defaults``: the handler's default values)."""
    _check_common(task, queue, priority)
    if run_at is not None and delay is not None:
        raise ConfigError("give run_at or delay, not both")
    if run_at is not None:
        _check_run_at(run_at)
    if unique_key is not None:
        _check_unique_key(unique_key)
    if max_attempts is not None:
        check_max_attempts(max_attempts)
    if concurrency_key is not None:
        check_key("concurrency_key", concurrency_key)
    deadline, expires_seconds = _deadline(expires_at, expires_in, run_at)
    delay_seconds = _seconds(delay)
    args_json = encode_args(task, args, max_bytes)
    if unique is not None and not isinstance(unique, Unique):
        raise ConfigError(f"unique must be a pgqueue.Unique, got {unique!r}")
    if unique is not None and unique_key is None:
        unique_key = unique.key_for(task, args, defaults)
    if depends_on and unique_key is not None:
        raise ConfigError(f"task {task!r}: a job with dependencies cannot have a unique_key or unique rules")
    period, states, mode = (None, None, None) if unique is None else (unique.period, unique.states, unique.mode)
    return new_spec(
        task, args_json, queue, priority, run_at, delay_seconds, unique_key, max_attempts,
        concurrency_key, deadline, expires_seconds, period, states, mode, depends_on,
    )  # fmt: skip


def node_json(spec: JobSpec, deps: Iterable[tuple[str, int, str]], has_children: bool) -> str:
    """One node of ``enqueue_workflow()`` as JSON text: the job, its dependencies as
    ``(kind, ref, policy)`` (kind "n": an earlier node's index, "j": an existing job id)
    and whether later nodes depend on it. The arguments go in as the JSON text they are."""
    head = {
        "task": spec.task,
        "queue": spec.queue,
        "priority": spec.priority,
        "run_at": None if spec.run_at is None else spec.run_at.isoformat(),
        "delay": spec.delay,
        "max_attempts": spec.max_attempts,
        "concurrency_key": spec.concurrency_key,
        "expires_at": None if spec.expires_at is None else spec.expires_at.isoformat(),
        "expires_in": spec.expires_in,
        "has_children": has_children,
        "deps": [list(d) for d in deps],
    }
    return json.dumps(head, separators=(",", ":"))[:-1] + ',"args":' + spec.args_json + "}"
