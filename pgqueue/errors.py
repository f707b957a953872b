"""Exceptions raised by pgqueue, and the control signals a handler may raise.

::

    PgQueueError
    ├── ConfigError                 invalid setting, name or task declaration
    ├── DatabaseUnavailableError    the database cannot be reached
    ├── SchemaNotInstalledError     `pgqueue migrate` has not been run (or is behind)
    ├── MigrationError
    ├── EnqueueError                a job was refused before it reached the table
    │   ├── UnknownTaskError
    │   ├── InvalidArgumentsError   args are not JSON-serialisable (names the argument)
    │   ├── PayloadTooLargeError
    │   └── InvalidQueueError
    └── JobNotFoundError

    JobControl (raised by handlers; not errors)
    ├── Retry(after=...)            try again later (counts as an attempt)
    └── Cancel(reason)              stop for good: the job ends as `cancelled`
"""

from __future__ import annotations

from datetime import timedelta

__all__ = [
    "Cancel",
    "ConfigError",
    "DatabaseUnavailableError",
    "EnqueueError",
    "InvalidArgumentsError",
    "InvalidQueueError",
    "JobControl",
    "JobNotFoundError",
    "MigrationError",
    "PayloadTooLargeError",
    "PgQueueError",
    "Retry",
    "SchemaNotInstalledError",
    "UnknownTaskError",
]


class PgQueueError(Exception):
    """Base class of every error pgqueue raises."""

    def __init__(self, message: str | None = None) -> None:
        super().__init__(message or (self.__doc__ or "").strip())


class ConfigError(PgQueueError, ValueError):
    """Invalid configuration."""


class DatabaseUnavailableError(PgQueueError):
    """The database could not be reached."""

    @classmethod
    def from_exc(cls, exc: BaseException) -> DatabaseUnavailableError:
        text = str(exc).strip()
        first = text.splitlines()[0] if text else type(exc).__name__
        return cls(f"cannot reach the database: {first}")


class SchemaNotInstalledError(PgQueueError):
    """The pgqueue schema is not installed here: run `pgqueue migrate`."""


class MigrationError(PgQueueError):
    """A migration failed."""


class EnqueueError(PgQueueError, ValueError):
    """The job was refused."""


class UnknownTaskError(EnqueueError, LookupError):
    """No task with this name is registered."""


class InvalidArgumentsError(EnqueueError, TypeError):
    """Job arguments must be a JSON object of JSON-serialisable values."""


class PayloadTooLargeError(EnqueueError):
    """The job's arguments exceed the payload size limit."""


class InvalidQueueError(EnqueueError):
    """Invalid queue name."""


class JobNotFoundError(PgQueueError, LookupError):
    """No job with this id."""


class JobControl(Exception):  # noqa: N818 - signals, not errors
    """Base of the exceptions a handler raises to steer its job."""


class Retry(JobControl):
    """Ask for another attempt, after ``after`` seconds (or a timedelta).

    The attempt still counts: when it was the last one, the job is discarded.
    """

    def __init__(self, after: float | timedelta = 0.0, reason: str = "retry requested") -> None:
        seconds = after.total_seconds() if isinstance(after, timedelta) else float(after)
        if not 0 <= seconds <= 10 * 365 * 86400:  # also refuses NaN and infinity
            raise ConfigError(f"Retry(after=...) must be between 0 and ten years, got {after!r}")
        super().__init__(reason)
        self.after = seconds
        self.reason = reason


class Cancel(JobControl):
    """End the job as ``cancelled`` without further attempts."""

    def __init__(self, reason: str = "cancelled by the handler") -> None:
        super().__init__(reason)
        self.reason = reason
