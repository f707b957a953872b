"""Log formats for ``pgqueue work --log-format text|kv|json``.

* ``text``: the classic ``time LEVEL logger: message`` line.
* ``kv``: one ``key=value`` line per record (logfmt): ``ts``, ``level``, ``logger``,
  ``msg``, then the record's structured fields (job_id, task, queue, attempt, state,
  duration_ms, error_type, ...), then ``exc`` with the traceback, if any.
* ``json``: the same fields as one JSON object per line.

Job arguments are never logged unless the task opts in with ``log_args=True``: the
worker adds them (as ``job_args``) only then, in every format.
"""

from __future__ import annotations

import json
import logging
import re
import sys
from datetime import UTC, datetime
from typing import Any

from .models import Job, JobState

__all__ = [
    "FORMATS",
    "JsonFormatter",
    "KeyValueFormatter",
    "configure_logging",
    "job_fields",
    "log_outcome",
    "make_formatter",
]

FORMATS = ("text", "kv", "json")
TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
TEXT_FORMAT_PROCESS = "%(asctime)s %(levelname)s %(processName)s %(name)s: %(message)s"

# Attributes every LogRecord has; anything else on a record came from ``extra=``.
_STANDARD = frozenset(vars(logging.LogRecord("x", logging.INFO, "x", 0, "x", None, None))) | {
    "message",
    "asctime",
    "taskName",
}
_BARE = re.compile(r"^[A-Za-z0-9_.:/@+\-]+$")


def record_fields(record: logging.LogRecord) -> dict[str, Any]:
    """The structured fields a record carries (its ``extra=`` values)."""
    return {k: v for k, v in vars(record).items() if k not in _STANDARD and not k.startswith("_")}


def _timestamp(record: logging.LogRecord) -> str:
    return datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _kv_value(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    text = value if isinstance(value, str) else json.dumps(value, default=str, separators=(",", ":"))
    return text if _BARE.match(text) else json.dumps(text)


class _StructuredFormatter(logging.Formatter):
    def fields(self, record: logging.LogRecord) -> dict[str, Any]:
        """The record as ordered fields: time, level, logger, message, extras, traceback."""
        out: dict[str, Any] = {
            "ts": _timestamp(record),
            "level": record.levelname,
            "logger": record.name,
            "msg": record.getMessage(),
        }
        out.update(record_fields(record))
        if record.exc_info:
            out["exc"] = self.formatException(record.exc_info)
        return out


class KeyValueFormatter(_StructuredFormatter):
    """``key=value`` pairs (logfmt); values with spaces or quotes are JSON-quoted."""

    def format(self, record: logging.LogRecord) -> str:
        return " ".join(f"{key}={_kv_value(value)}" for key, value in self.fields(record).items())


class JsonFormatter(_StructuredFormatter):
    """One JSON object per line."""

    def format(self, record: logging.LogRecord) -> str:
        return json.dumps(self.fields(record), default=str, ensure_ascii=False)


def make_formatter(fmt: str, *, process_name: bool = False) -> logging.Formatter:
    if fmt == "kv":
        return KeyValueFormatter()
    if fmt == "json":
        return JsonFormatter()
    if fmt == "text":
        return logging.Formatter(TEXT_FORMAT_PROCESS if process_name else TEXT_FORMAT)
    raise ValueError(f"unknown log format {fmt!r}: use one of {', '.join(FORMATS)}")


class _PgQueueHandler(logging.StreamHandler):  # type: ignore[type-arg]
    """Marks the handler this module installed, so configuring again replaces it."""


def configure_logging(level: int, fmt: str = "text", *, process_name: bool = False) -> None:
    """Log to stderr at ``level`` in ``fmt``; replaces a handler installed here before and
    leaves other handlers alone."""
    handler = _PgQueueHandler(sys.stderr)
    handler.setFormatter(make_formatter(fmt, process_name=process_name))
    root = logging.getLogger()
    for old in [h for h in root.handlers if isinstance(h, _PgQueueHandler)]:
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level)


def job_fields(
    job: Job,
    state: JobState,
    *,
    seconds: float | None = None,
    error: Any = None,
    retry_in: float | None = None,
    log_args: bool = False,
) -> dict[str, Any]:
    """Structured fields of a job outcome record (``extra=``); args only with ``log_args``."""
    fields: dict[str, Any] = {
        "job_id": job.id,
        "task": job.task,
        "queue": job.queue,
        "attempt": job.attempt,
        "max_attempts": job.max_attempts,
        "state": str(state),
    }
    if _snoozed(state):
        fields["snoozed"] = True
        fields["snoozes"] = job.snoozes + 1
    if seconds is not None:
        fields["duration_ms"] = round(seconds * 1000, 3)
    if error is not None:
        fields["error_type"] = error.get("type")
    if retry_in is not None:
        fields["retry_in_s"] = round(retry_in, 3)
    if log_args:
        fields["job_args"] = job.args
    return fields


def _snoozed(state: JobState) -> bool:
    """Only a snooze ends an attempt in a waiting state."""
    return state is JobState.AVAILABLE or state is JobState.SCHEDULED


def log_outcome(
    log: logging.Logger,
    job: Job,
    state: JobState,
    *,
    seconds: float | None,
    error: Any = None,
    retry_in: float | None = None,
    log_args: bool = False,
) -> None:
    """One INFO line per finished attempt, with its structured fields; args only with
    ``log_args``."""
    if not log.isEnabledFor(logging.INFO):
        return
    took = "" if seconds is None else f" in {seconds * 1000:.1f}ms"
    detail = "" if error is None else f": {error.get('type')}: {str(error.get('message'))[:200]}"
    snoozed = _snoozed(state)
    if retry_in is not None:
        detail += f" ({'again' if snoozed else 'retry'} in {retry_in:.1f}s)"
    args = f" args={job.args!r}" if log_args else ""
    log.info(
        "job %d %s queue=%s attempt=%d/%d %s%s%s%s",
        job.id,
        job.task,
        job.queue,
        job.attempt,
        job.max_attempts,
        f"snoozed ({job.snoozes + 1} so far, attempt given back)" if snoozed else state,
        took,
        detail,
        args,
        extra=job_fields(job, state, seconds=seconds, error=error, retry_in=retry_in, log_args=log_args),
    )
