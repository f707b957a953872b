"""What a task is to the worker: a handler and the settings it runs under.

:class:`TaskDef` is the runtime's view of a task (the worker, cron and the executor use
only this); :class:`pgqueue.Task` (in :mod:`pgqueue.app`) adds the app it belongs to and
the enqueue API.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

from ._task_args import ArgsChecker
from .errors import ConfigError
from .retry import Backoff
from .unique import Unique

__all__ = ["TaskDef"]


class TaskDef:
    """A handler plus its settings."""

    def __init__(
        self,
        fn: Callable[..., Any],
        *,
        name: str,
        queue: str,
        priority: int,
        max_attempts: int,
        timeout: float | None,
        retry: Backoff,
        non_retryable: tuple[type[BaseException], ...],
        transactional: bool,
        pass_context: bool,
        log_args: bool,
        concurrency_key: str | None = None,
        expires_in: float | None = None,
        unique: Unique | None = None,
    ) -> None:
        self.fn = fn
        self.name = name
        self.queue = queue
        self.priority = priority
        self.max_attempts = max_attempts
        self.timeout = timeout
        self.retry = retry
        self.non_retryable = non_retryable
        self.transactional = transactional
        self.pass_context = pass_context or transactional
        self.log_args = log_args
        self.is_async = inspect.iscoroutinefunction(fn)
        #: The handler's signature, read once: what job arguments it accepts.
        self.args_checker = ArgsChecker(name, fn, pass_context=self.pass_context)
        #: The argument whose value is each job's concurrency key (None: no key).
        self.concurrency_key = concurrency_key
        if concurrency_key is not None:
            self.check_arg_names("concurrency_key", [concurrency_key])
        #: Default deadline of the task's jobs, seconds after their run_at (None: none).
        self.expires_in = expires_in
        #: The unique rules of the task's jobs (None: not unique).
        self.unique = unique
        if unique is not None:
            self.check_unique(unique)

    def check_arg_names(self, what: str, names: list[str]) -> None:
        """Raise :class:`ConfigError` unless every one of ``names`` is an argument the
        handler takes (any name does for a handler with ``**kwargs``)."""
        if not all(isinstance(n, str) and n for n in names):
            raise ConfigError(f"task {self.name!r}: {what} must name an argument of the handler, got {names!r}")
        unknown = self.args_checker.unknown_names(names)
        if unknown:
            raise ConfigError(
                f"task {self.name!r}: {what} names {', '.join(map(repr, unknown))}, which the handler does not "
                f"take ({self.args_checker.takes()})"
            )

    def check_unique(self, unique: Unique) -> None:
        """Raise :class:`ConfigError` unless ``unique`` fits this task's handler."""
        if not isinstance(unique, Unique):
            raise ConfigError(f"task {self.name!r}: unique must be a pgqueue.Unique, got {unique!r}")
        if unique.args:
            self.check_arg_names("Unique(args=...)", list(unique.args))

    def __repr__(self) -> str:
        return f"<Task {self.name} queue={self.queue}>"
