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
from .retry import Backoff

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

    def __repr__(self) -> str:
        return f"<Task {self.name} queue={self.queue}>"
