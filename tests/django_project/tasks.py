"""django.tasks tasks of the test project (``django.tasks`` on Django 6, else the
``django-tasks`` package)."""

from __future__ import annotations

import importlib
from typing import Any

from django.db import connection

task: Any = importlib.import_module("pgqueue.contrib.django._tasks_api")._get("", "task")


@task(queue_name="emails", priority=10)
def send_welcome(user_id: int, email: str) -> dict[str, Any]:
    with connection.cursor() as cur:  # Django's ORM connection, in the worker's thread
        cur.execute("INSERT INTO sent (user_id, email) VALUES (%s, %s)", [user_id, email])
    return {"sent_to": email}


@task()
def explode() -> None:
    raise ValueError("the task exploded")


@task(takes_context=True)
def with_context(context: Any, n: int) -> dict[str, Any]:
    return {"n": n, "attempt": context.attempt, "id": context.task_result.id}


@task()
async def async_double(n: int) -> int:
    return n * 2
