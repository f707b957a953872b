"""The ``django.tasks`` API: Django's own from 6.0, else the ``django-tasks`` package
(the same API under another name, for Django 5.2). Looked up by name, so that type
checkers see one set of names whichever is installed."""

from __future__ import annotations

import importlib
from typing import Any

__all__ = [
    "PACKAGE",
    "BaseTaskBackend",
    "TaskContext",
    "TaskError",
    "TaskResult",
    "TaskResultDoesNotExist",
    "TaskResultStatus",
    "task_enqueued",
]


def _package() -> str:
    try:
        importlib.import_module("django.tasks")
    except ImportError:
        return "django_tasks"
    return "django.tasks"


#: Where the API comes from: "django.tasks" (Django >= 6.0) or "django_tasks".
PACKAGE = _package()


def _get(module: str, name: str) -> Any:
    return getattr(importlib.import_module(f"{PACKAGE}{module}"), name)


BaseTaskBackend: Any = _get(".backends.base", "BaseTaskBackend")
TaskContext: Any = _get(".base", "TaskContext")
TaskError: Any = _get(".base", "TaskError")
TaskResult: Any = _get(".base", "TaskResult")
TaskResultStatus: Any = _get(".base", "TaskResultStatus")
TaskResultDoesNotExist: Any = _get(".exceptions", "TaskResultDoesNotExist")
task_enqueued: Any = _get(".signals", "task_enqueued")
