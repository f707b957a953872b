"""pgqueue: a transactional job queue and cron scheduler that needs only PostgreSQL."""

from __future__ import annotations

from ._version import __version__
from .app import App, Task
from .batch import Batch
from .config import WorkerConfig
from .cron.schedule import Schedule
from .cron.scheduler import CronScheduler
from .errors import (
    Cancel,
    ConfigError,
    DatabaseUnavailableError,
    EnqueueError,
    InvalidArgumentsError,
    InvalidQueueError,
    JobFailed,
    JobNotFinishedError,
    JobNotFoundError,
    MigrationError,
    PayloadTooLargeError,
    PgQueueError,
    ResultError,
    ResultTimeout,
    Retry,
    SchemaNotInstalledError,
    Snooze,
    UnknownQueueError,
    UnknownTaskError,
    WorkflowError,
)
from .models import BatchInfo, Job, JobContext, JobSpec, JobState
from .results.handle import JobHandle
from .retry import Backoff
from .unique import Unique
from .worker.worker import Worker
from .workflow import Dependency, Workflow

__all__ = [
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
    "UnknownQueueError",
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
    "Unique",
    "UnknownTaskError",
    "Worker",
    "WorkerConfig",
    "Workflow",
    "WorkflowError",
    "__version__",
]
