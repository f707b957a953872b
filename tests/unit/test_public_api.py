"""The public API is what ``pgqueue/__init__.py`` exports, and it changes only on purpose:
adding or removing a name means editing PUBLIC below in the same change."""

from __future__ import annotations

import pgqueue

PUBLIC = [
    "App",
    "Backoff",
    "Batch",
    "BatchInfo",
    "Cancel",
    "ConfigError",
    "CronScheduler",
    "DatabaseUnavailableError",
    "Dependency",
    "EnqueueError",
    "InvalidArgumentsError",
    "InvalidQueueError",
    "Job",
    "JobContext",
    "JobFailed",
    "JobHandle",
    "JobNotFinishedError",
    "JobNotFoundError",
    "JobSpec",
    "JobState",
    "MigrationError",
    "PayloadTooLargeError",
    "PgQueueError",
    "ResultError",
    "ResultTimeout",
    "Retry",
    "Schedule",
    "SchemaNotInstalledError",
    "Snooze",
    "Task",
    "UnknownQueueError",
    "Unique",
    "UnknownTaskError",
    "Worker",
    "WorkerConfig",
    "Workflow",
    "WorkflowError",
    "__version__",
]


def test_all_is_pinned() -> None:
    assert sorted(pgqueue.__all__) == sorted(PUBLIC)
    assert len(set(pgqueue.__all__)) == len(pgqueue.__all__), "a name is exported twice"


def test_every_exported_name_resolves() -> None:
    missing = [name for name in pgqueue.__all__ if not hasattr(pgqueue, name)]
    assert missing == []


def test_star_import_gives_exactly_the_public_names() -> None:
    namespace: dict[str, object] = {}
    exec("from pgqueue import *", namespace)
    assert sorted(n for n in namespace if n != "__builtins__") == sorted(PUBLIC)


def test_exported_errors_share_one_base() -> None:
    errors = [getattr(pgqueue, n) for n in PUBLIC if n.endswith("Error")]
    assert errors
    assert [e.__name__ for e in errors if not issubclass(e, pgqueue.PgQueueError)] == []
