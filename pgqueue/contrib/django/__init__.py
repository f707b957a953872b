"""pgqueue in a Django project (``pip install 'postgres-jobqueue[django]'``).

* :mod:`.backend`: a ``django.tasks`` backend (Django 6, or the ``django-tasks`` package
  on Django 5.2) that enqueues on Django's own database connection, so a task enqueued
  inside ``transaction.atomic()`` commits and rolls back with it;
* :func:`enqueue`: enqueue a pgqueue task on that connection too;
* ``manage.py pgqueue_work`` runs a worker, ``manage.py pgqueue ...`` any other pgqueue
  command, both on the database of the Django settings;
* the schema comes with ``manage.py migrate`` (app ``pgqueue.contrib.django``), or with
  ``pgqueue migrate``.

Settings (all optional): ``PGQUEUE = {"DATABASE": "default", "SCHEMA": "pgqueue", "APP":
"myproject.tasks:app"}``; ``APP`` names a pgqueue App whose own tasks the worker runs too.
See docs/django.md.
"""

from __future__ import annotations

from typing import Any

from ...app import Task
from ...results.handle import JobHandle
from .conf import psycopg_connection

__all__ = ["enqueue"]


def enqueue(task: Task[Any, Any], /, *, using: str | None = None, **kwargs: Any) -> JobHandle:
    """Enqueue a pgqueue task on Django's connection (``using``: a database alias, default
    the ``PGQUEUE["DATABASE"]`` one), in its current transaction: inside
    ``transaction.atomic()`` the job commits with it; outside, at once (autocommit)."""
    return task.enqueue(psycopg_connection(using), **kwargs)
