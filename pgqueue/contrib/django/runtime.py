"""The pgqueue side of Django tasks: one pgqueue task, ``django.tasks.run``, carries every
``django.tasks`` task (its import path, args and kwargs) and runs it in the worker; the
app the worker runs is made from the Django settings."""

from __future__ import annotations

import functools
from dataclasses import replace
from datetime import datetime
from typing import Any

from django.conf import settings
from django.db import close_old_connections
from django.utils import timezone
from django.utils.module_loading import import_string

from ...app import App
from ...config import DEFAULT_QUEUE
from ...models import JobContext
from ...runner.loader import load_app
from ._tasks_api import TaskContext, TaskResult, TaskResultStatus
from .conf import dsn, schema, setting

__all__ = ["BRIDGE_TASK", "get_app", "max_attempts", "task_result"]

#: The pgqueue task that runs django.tasks tasks.
BRIDGE_TASK = "django.tasks.run"


def max_attempts() -> int:
    """Attempts of a Django task (``PGQUEUE["MAX_ATTEMPTS"]``, default 1: a failed Django
    task is FAILED, as Django's API expects; more makes pgqueue retry it with backoff)."""
    return int(setting("MAX_ATTEMPTS", 1))


def task_result(
    task: Any,
    job_id: int,
    status: Any,
    args: list[Any],
    kwargs: dict[str, Any],
    backend: str,
    *,
    enqueued_at: datetime | None = None,
    started_at: datetime | None = None,
    finished_at: datetime | None = None,
    errors: list[Any] | None = None,
    worker_ids: list[str] | None = None,
) -> Any:
    return TaskResult(
        task=task,
        id=str(job_id),
        status=status,
        enqueued_at=enqueued_at,
        started_at=started_at,
        last_attempted_at=started_at,
        finished_at=finished_at,
        args=args,
        kwargs=kwargs,
        backend=backend,
        errors=errors or [],
        worker_ids=worker_ids or [],
    )


def run_django_task(ctx: JobContext, path: str, args: list[Any], kwargs: dict[str, Any], backend: str) -> Any:
    """Run the ``django.tasks`` task at ``path``; its return value becomes the job's result."""
    task = import_string(path)
    close_old_connections()  # this worker thread's Django connections: as after a request
    try:
        if task.takes_context:
            job = ctx.job
            result = task_result(
                task, job.id, TaskResultStatus.RUNNING, args, kwargs, backend,
                enqueued_at=job.created_at, started_at=timezone.now(), worker_ids=[ctx.worker_id] * job.attempt,
            )  # fmt: skip
            return task.call(TaskContext(task_result=result), *args, **kwargs)
        return task.call(*args, **kwargs)
    finally:
        close_old_connections()


@functools.cache
def get_app() -> App:
    """The pgqueue app of this Django project: ``PGQUEUE["APP"]`` (``module:attribute``)
    or a new one, on the Django database and schema, with ``django.tasks.run`` registered."""
    target = setting("APP")
    app = load_app(str(target)) if target else App()
    app.configure(dsn=dsn(), schema=schema(), source="the Django settings")
    if BRIDGE_TASK not in app.tasks:
        app.task(name=BRIDGE_TASK, pass_context=True, max_attempts=max_attempts())(run_django_task)
    if app.worker_config.queues is None:  # serve the queues of the project's pgqueue backends too
        served = {t.queue for t in app.tasks.values()} | set(django_queues()) | {DEFAULT_QUEUE}
        app.worker_config = replace(app.worker_config, queues=tuple(sorted(served)))
    return app


def django_queues() -> list[str]:
    """The queues of the ``TASKS`` backends that are pgqueue's (their ``QUEUES``)."""
    found: list[str] = []
    for params in (getattr(settings, "TASKS", None) or {}).values():
        if isinstance(params, dict) and str(params.get("BACKEND", "")).startswith("pgqueue.contrib.django"):
            found.extend(params.get("QUEUES") or [DEFAULT_QUEUE])
    return found
