"""A ``django.tasks`` backend on pgqueue.

``TASKS = {"default": {"BACKEND": "pgqueue.contrib.django.backend.PgQueueBackend",
"QUEUES": ["default", "emails"]}}``. ``task.enqueue(...)`` inserts a job on Django's own
connection (the ``PGQUEUE["DATABASE"]`` alias, or ``OPTIONS["DATABASE"]``), inside
Django's current transaction: in ``transaction.atomic()`` it commits or rolls back with
the block. ``manage.py pgqueue_work`` runs the jobs. Results: ``get_result(id)`` reads the
job (status, times, errors) and its return value through :meth:`pgqueue.App.result`.
"""

from __future__ import annotations

from typing import Any

import psycopg
from django.utils import timezone
from django.utils.module_loading import import_string

from ...errors import JobNotFoundError
from ...models import JobState
from ...ops.jobs import get_job
from ._tasks_api import BaseTaskBackend, TaskError, TaskResultDoesNotExist, TaskResultStatus, task_enqueued
from .conf import dsn, psycopg_connection, schema
from .runtime import BRIDGE_TASK, get_app, max_attempts, task_result

__all__ = ["PgQueueBackend"]

_STATUS = {
    JobState.AVAILABLE: TaskResultStatus.READY,
    JobState.SCHEDULED: TaskResultStatus.READY,
    JobState.RETRYABLE: TaskResultStatus.READY,
    JobState.RUNNING: TaskResultStatus.RUNNING,
    JobState.COMPLETED: TaskResultStatus.SUCCESSFUL,
    JobState.DISCARDED: TaskResultStatus.FAILED,
    JobState.CANCELLED: TaskResultStatus.FAILED,
}


class PgQueueBackend(BaseTaskBackend):
    supports_defer = True
    supports_async_task = True
    supports_get_result = True
    supports_priority = True

    def __init__(self, alias: str, params: dict[str, Any]) -> None:
        super().__init__(alias, params)
        self.using: str | None = self.options.get("DATABASE")

    def enqueue(self, task: Any, args: Any, kwargs: Any) -> Any:
        """Enqueue ``task`` in Django's current transaction; returns its ``TaskResult``
        (``id``: the pgqueue job id).

        Raises:
            InvalidTaskError: the task does not fit this backend (django.tasks' checks).
            InvalidArgumentsError: the arguments are not JSON.
            ConfigError: Django's database is not PostgreSQL on psycopg 3.
        """
        self.validate_task(task)
        conn = psycopg_connection(self.using)
        bridge = get_app().get_task(BRIDGE_TASK)
        job_id = bridge.options(
            queue=task.queue_name, priority=task.priority, run_at=task.run_after, max_attempts=max_attempts()
        ).enqueue(conn, path=task.module_path, args=list(args), kwargs=dict(kwargs), backend=self.alias)
        result = task_result(
            task, int(job_id), TaskResultStatus.READY, list(args), dict(kwargs), self.alias, enqueued_at=timezone.now()
        )
        task_enqueued.send(type(self), task_result=result)
        return result

    def get_result(self, result_id: str) -> Any:
        """The task's result now (the job as the database has it, committed).

        Raises:
            TaskResultDoesNotExist: no Django task job has this id.
        """
        try:
            job_id = int(result_id)
        except (TypeError, ValueError):
            raise TaskResultDoesNotExist(result_id) from None
        app = get_app()
        with psycopg.connect(dsn(self.using), autocommit=True) as conn:
            try:
                job = get_job(conn, schema(), job_id)
            except JobNotFoundError:
                raise TaskResultDoesNotExist(result_id) from None
            if job.task != BRIDGE_TASK:
                raise TaskResultDoesNotExist(result_id)
            value = app.result(conn, job_id) if job.state == JobState.COMPLETED else None
        result = task_result(
            import_string(job.args["path"]), job_id, _STATUS[job.state], job.args["args"], job.args["kwargs"],
            self.alias, enqueued_at=job.created_at, started_at=job.started_at, finished_at=job.finished_at,
            errors=[TaskError(exception_class_path=e.type, traceback=e.traceback or "") for e in job.errors],
            worker_ids=[job.worker_id] * job.attempt if job.worker_id else [],
        )  # fmt: skip
        object.__setattr__(result, "_return_value", value)
        return result
