"""Operations on jobs and queues and a status snapshot: the library API behind ``pgqueue
jobs``, ``pgqueue queues``, ``pgqueue tasks`` and ``pgqueue status``/``top``, usable from
any Python code with a psycopg connection.

Every function takes the caller's connection and the schema name (validated, always
quoted); values are bound parameters. Read functions never write. ``retry_jobs`` and
``purge_jobs`` commit in batches, so give them a connection with no transaction open.
"""

from __future__ import annotations

from .._duration import parse_duration
from .enqueue import enqueue_job, make_job
from .jobs import (
    cancel_job,
    get_job,
    list_jobs,
    purge_jobs,
    retry_job,
    retry_jobs,
)
from .queues import (
    KEEP,
    QueueControl,
    TaskControl,
    add_queue,
    pause_queue,
    queue_controls,
    resume_queue,
    set_queue_limits,
    set_task_limit,
    task_controls,
)
from .results import JobDetail, JobError, JobSummary, PurgeResult, RetryResult, jsonable
from .status import FailureGroup, Health, QueueStats, StatusSnapshot, WorkerInfo, status
from .workflows import (
    BatchProgress,
    JobRelations,
    WorkflowJob,
    WorkflowProgress,
    batch_progress,
    cancel_batch,
    cancel_workflow,
    job_relations,
    retry_workflow,
    workflow_jobs,
    workflow_progress,
)

__all__ = [
    "KEEP",
    "BatchProgress",
    "FailureGroup",
    "Health",
    "JobDetail",
    "JobError",
    "JobRelations",
    "JobSummary",
    "PurgeResult",
    "QueueControl",
    "QueueStats",
    "RetryResult",
    "StatusSnapshot",
    "TaskControl",
    "WorkerInfo",
    "WorkflowJob",
    "WorkflowProgress",
    "add_queue",
    "batch_progress",
    "cancel_batch",
    "cancel_job",
    "cancel_workflow",
    "enqueue_job",
    "get_job",
    "job_relations",
    "jsonable",
    "list_jobs",
    "make_job",
    "parse_duration",
    "pause_queue",
    "purge_jobs",
    "queue_controls",
    "resume_queue",
    "retry_job",
    "retry_jobs",
    "retry_workflow",
    "set_queue_limits",
    "set_task_limit",
    "status",
    "task_controls",
    "workflow_jobs",
    "workflow_progress",
]
