"""Exceptions raised by pgqueue, and the control signals a handler may raise.

::

    PgQueueError
    ├── ConfigError                 invalid setting, name or task declaration
    ├── DatabaseUnavailableError    the server refused us, is unreachable, or did not answer
    ├── SchemaNotInstalledError     `pgqueue migrate` has not been run (or is behind)
    ├── MigrationError
    ├── EnqueueError                a job was refused before it reached the table
    │   ├── UnknownTaskError
    │   ├── InvalidArgumentsError   args are not JSON-serialisable (names the argument)
    │   │   └── UndecodableArgsError  a stored job's args cannot be decoded (the job is discarded)
    │   ├── PayloadTooLargeError
    │   ├── InvalidQueueError
    │   └── WorkflowError           a dependency names no job, or a workflow has a cycle
    ├── UnknownQueueError           an operator named a queue no worker serves and no job is in
    ├── JobNotFoundError
    ├── JobNotFinishedError         a result was asked of a job still waiting or running
    │   └── ResultTimeout           ... and it did not finish in the time given (a TimeoutError)
    ├── JobFailed                   the job ended without a result: discarded, cancelled or expired
    └── ResultError                 a handler returned what cannot be stored (the job is discarded)

    JobControl (raised by handlers; not errors)
    ├── Retry(after=...)            try again later (counts as an attempt)
    ├── Snooze(after=...)           run again later; the attempt is given back
    └── Cancel(reason)              stop for good: the job ends as `cancelled`
"""

from __future__ import annotations

from datetime import timedelta
from typing import Literal, Self

import psycopg

__all__ = [
    "Cancel",
    "ConfigError",
    "DatabaseUnavailableError",
    "EnqueueError",
    "InvalidArgumentsError",
    "InvalidQueueError",
    "JobControl",
    "JobFailed",
    "JobNotFinishedError",
    "JobNotFoundError",
    "MigrationError",
    "PayloadTooLargeError",
    "PgQueueError",
    "ResultError",
    "ResultTimeout",
    "Retry",
    "SchemaNotInstalledError",
    "Snooze",
    "UndecodableArgsError",
    "UnknownQueueError",
    "UnknownTaskError",
    "WorkflowError",
]


class PgQueueError(Exception):
    """Base class of every error pgqueue raises."""

    def __init__(self, message: str | None = None) -> None:
        super().__init__(message or (self.__doc__ or "").strip())


class ConfigError(PgQueueError, ValueError):
    """Invalid configuration."""


Reason = Literal["refused", "unreachable", "timeout", "failed"]


class DatabaseUnavailableError(PgQueueError):
    """The database could not be reached."""

    #: Why: ``"refused"`` the server answered and said no (no such database, role or
    #: password); ``"unreachable"`` nothing answers there (connection refused, no such
    #: socket or host); ``"timeout"`` something accepted but did not answer in time;
    #: ``"failed"`` anything else (a connection lost mid-way, a TLS failure, ...).
    reason: Reason

    def __init__(self, message: str | None = None, *, reason: Reason = "failed") -> None:
        super().__init__(message)
        self.reason = reason

    @classmethod
    def from_exc(cls, exc: BaseException, where: str | None = None, timeout: float | None = None) -> Self:
        """The one place that turns a failed connection into a message naming the cause.

        ``where`` names the server (``host:port`` or the socket); ``timeout`` is the
        connect timeout in seconds that expired, when that is what happened.
        """
        text = str(exc).strip()
        lines = [line.strip() for line in text.splitlines() if line.strip()] or [type(exc).__name__]
        at = f" at {where}" if where else ""
        if isinstance(exc, psycopg.errors.ConnectionTimeout) or "timeout expired" in lines[0]:
            within = f" within {timeout:g}s" if timeout is not None else " in time"
            return cls(
                f"the database server{at} did not answer{within} (connect_timeout): is it overloaded, "
                "or is something other than PostgreSQL listening there?",
                reason="timeout",
            )
        said = _server_said(text)
        if said is not None:
            return cls(f"the database server{at} refused the connection: {said}", reason="refused")
        detail = lines[0].rsplit(" failed: ", 1)[-1]
        if any(marker in detail.lower() for marker in _UNREACHABLE):
            advice = f" ({_lower_first(lines[1])})" if len(lines) > 1 else ""
            return cls(f"cannot reach the database server{at}: {_lower_first(detail)}{advice}", reason="unreachable")
        return cls(f"the connection to the database server{at} failed: {_lower_first(detail)}", reason="failed")


# What libpq and psycopg say when nothing answers at the address.
_UNREACHABLE = (
    "connection refused",
    "no such file or directory",  # no socket in that directory: no server there
    "failed to resolve host",
    "could not translate host name",
    "name or service not known",
    "network is unreachable",
    "no route to host",
)


def _server_said(text: str) -> str | None:
    """What the server answered, when it refused the connection (``FATAL: ...``)."""
    for line in text.splitlines():
        _, fatal, message = line.partition("FATAL:")
        if fatal:
            return message.strip()
        if "fe_sendauth: no password supplied" in line:
            return "it asks for a password and none was given (add it to the DSN, PGPASSWORD or ~/.pgpass)"
    return None


def _lower_first(text: str) -> str:
    return text[:1].lower() + text[1:]


class SchemaNotInstalledError(PgQueueError):
    """The pgqueue schema is not installed here: run `pgqueue migrate`."""


class MigrationError(PgQueueError):
    """A migration failed."""


class EnqueueError(PgQueueError, ValueError):
    """The job was refused."""


class WorkflowError(EnqueueError):
    """A workflow or a dependency was refused: a cycle, a dependency on a job that does not
    exist, or a bad policy. Nothing of it was created."""


class UnknownTaskError(EnqueueError, LookupError):
    """No task with this name is registered."""


class InvalidArgumentsError(EnqueueError, TypeError):
    """Job arguments must be a JSON object of JSON-serialisable values."""


class UndecodableArgsError(InvalidArgumentsError):
    """The job's stored arguments cannot be decoded into Python values."""


class PayloadTooLargeError(EnqueueError):
    """The job's arguments exceed the payload size limit."""


class InvalidQueueError(EnqueueError):
    """Invalid queue name."""


class UnknownQueueError(PgQueueError, LookupError):
    """No worker has served this queue and no job is in it (add it first)."""


class JobNotFoundError(PgQueueError, LookupError):
    """No job with this id."""


class JobNotFinishedError(PgQueueError):
    """The job has not finished yet: it has no result to give."""

    def __init__(self, message: str | None = None, *, job_id: int | None = None, state: str | None = None) -> None:
        super().__init__(message)
        #: The job asked about, and the state it was last seen in (None: not seen yet).
        self.job_id = job_id
        self.state = state


class ResultTimeout(JobNotFinishedError, TimeoutError):  # noqa: N818 - the name users look for
    """The job did not finish within the time given."""


class JobFailed(PgQueueError):  # noqa: N818 - what happened to the job, not an error of the call
    """The job ended without a result: discarded, cancelled (by a handler, an operator or
    its deadline) or expired. Carries its id, final state and last error."""

    def __init__(
        self,
        message: str | None = None,
        *,
        job_id: int | None = None,
        state: str | None = None,
        error_type: str | None = None,
        error_message: str | None = None,
    ) -> None:
        super().__init__(message)
        self.job_id = job_id
        #: ``discarded`` or ``cancelled`` (a :class:`~pgqueue.JobState`).
        self.state = state
        #: The last error recorded for the job (None: none, e.g. an operator cancelled it
        #: before it ever ran): its type, as ``module.QualifiedName``, and its message.
        self.error_type = error_type
        self.error_message = error_message

    @property
    def expired(self) -> bool:
        """True when the job was cancelled because it had not started by its deadline."""
        return self.error_type == EXPIRED_ERROR_TYPE


#: The error type recorded on a job cancelled by its deadline (``expires_at``).
EXPIRED_ERROR_TYPE = "pgqueue.Expired"


class ResultError(PgQueueError, ValueError):
    """A handler returned a value that cannot be stored as its job's result (not JSON, or
    over ``App(max_result_bytes=...)``). The job is discarded: no retry can fix it."""


class JobControl(Exception):  # noqa: N818 - signals, not errors
    """Base of the exceptions a handler raises to steer its job."""


#: The longest a handler may put its job off (Retry, Snooze): ten years, in seconds.
MAX_AFTER = 10 * 365 * 86400


def _after_seconds(signal: str, after: float | timedelta) -> float:
    """``after`` in seconds, or :class:`ConfigError` naming ``signal`` (NaN, infinity,
    negative, over ten years or not a number)."""
    try:
        seconds = after.total_seconds() if isinstance(after, timedelta) else float(after)
    except (TypeError, ValueError):
        seconds = float("nan")
    if isinstance(after, bool) or not 0 <= seconds <= MAX_AFTER:  # also refuses NaN and infinity
        raise ConfigError(
            f"{signal}(after=...) must be seconds (or a timedelta) between 0 and ten years, got {after!r}"
        )
    return seconds


class Retry(JobControl):
    """Ask for another attempt, after ``after`` seconds (or a timedelta).

    The attempt still counts: when it was the last one, the job is discarded.
    """

    def __init__(self, after: float | timedelta = 0.0, reason: str = "retry requested") -> None:
        seconds = _after_seconds("Retry", after)
        super().__init__(reason)
        self.after = seconds
        self.reason = reason


class Snooze(JobControl):
    """Put the job off for ``after`` seconds (or a timedelta) without using up an attempt.

    The attempt counted when the job was claimed is given back and the job's ``snoozes``
    count goes up instead; ``after=0`` makes it available again at once. No error is
    recorded. A job with a deadline (``expires_at``) that passes while it sleeps is
    cancelled as expired. Bad values (negative, NaN, over ten years) raise
    :class:`ConfigError` where the Snooze is made, which fails the attempt like any error.
    """

    def __init__(self, after: float | timedelta = 0.0) -> None:
        seconds = _after_seconds("Snooze", after)
        super().__init__(f"snoozed for {seconds:g}s")
        self.after = seconds


class Cancel(JobControl):
    """End the job as ``cancelled`` without further attempts."""

    def __init__(self, reason: str = "cancelled by the handler") -> None:
        super().__init__(reason)
        self.reason = reason
