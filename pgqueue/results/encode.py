"""A handler's return value as the JSON text stored with its job: checked and encoded once,
in the worker, before the completion is written. No I/O."""

from __future__ import annotations

import json
from typing import Any

from .._enqueue import _NUL_ESCAPE, MAX_ARGS_DEPTH, _too_deep
from ..errors import ConfigError, ResultError

__all__ = ["DEFAULT_MAX_RESULT_BYTES", "MAX_RESULT_DEPTH", "check_max_result_bytes", "encode_result"]

#: Default of ``App(max_result_bytes=...)``: 1 MiB of JSON text.
DEFAULT_MAX_RESULT_BYTES = 1024 * 1024
#: Largest cap allowed: a jsonb value is at most 255 MiB, and a result travels in the
#: completion batch's one parameter with every other outcome of the batch.
MAX_RESULT_BYTES_LIMIT = 64 * 1024 * 1024
#: Deepest nesting of containers in a result, as for arguments: deeper values could not be
#: decoded again by Python's JSON decoder where they are read.
MAX_RESULT_DEPTH = MAX_ARGS_DEPTH


def check_max_result_bytes(value: int) -> int:
    """``value`` if it is a valid ``max_result_bytes``, else :class:`ConfigError`."""
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_RESULT_BYTES_LIMIT:
        raise ConfigError(f"max_result_bytes must be an int in 1..{MAX_RESULT_BYTES_LIMIT}, got {value!r}")
    return value


def encode_result(task: str, value: Any, max_bytes: int) -> str:
    """``value`` (not None) as compact JSON text, or :class:`ResultError` naming the problem:
    not JSON-serialisable (a set, an object, NaN, a NUL character), nested too deeply, or
    more than ``max_bytes`` bytes of UTF-8."""
    try:
        text = json.dumps(value, allow_nan=False, ensure_ascii=False, separators=(",", ":"))
    except (TypeError, ValueError, RecursionError) as exc:
        problem = "it is nested too deeply" if isinstance(exc, RecursionError) else str(exc)
        raise ResultError(
            f"task {task!r} returned a value that is not JSON: {problem} "
            "(return str, int, float, bool, None, list or dict, or None for no result)"
        ) from None
    if text.count("[") + text.count("{") > MAX_RESULT_DEPTH and _too_deep(value, MAX_RESULT_DEPTH):
        raise ResultError(f"task {task!r} returned a value nested more than {MAX_RESULT_DEPTH} levels deep")
    if "\\u0000" in text and _NUL_ESCAPE.search(text):
        raise ResultError(
            f"task {task!r} returned a value with a NUL character (\\u0000), which PostgreSQL jsonb cannot store"
        )
    try:
        size = len(text.encode("utf-8"))
    except UnicodeEncodeError as exc:  # a lone surrogate in a string
        raise ResultError(f"task {task!r} returned a value that is not JSON: {exc}") from None
    if size > max_bytes:
        raise ResultError(
            f"task {task!r} returned {size} bytes of JSON, over the {max_bytes}-byte limit (App(max_result_bytes=...))"
        )
    return text
