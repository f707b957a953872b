"""Batches: jobs added at once or over time, then closed; callback jobs (``on_success``,
``on_complete``, ``on_discard``) fire exactly once when the batch is closed and its last
member settled. The counting and the firing happen in the statements that finish the
members (migration 0012); this module only builds the calls.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

import psycopg

from ._db import workflows as db
from ._enqueue import node_json
from .errors import ConfigError
from .models import BatchInfo, JobSpec
from .results.handle import JobHandle, ResultSource

__all__ = ["Batch", "BatchInfo", "callbacks_json"]


def _node(job: JobSpec, extra: dict[str, Any]) -> str:
    if not isinstance(job, JobSpec):
        raise ConfigError(f"a batch takes jobs from task.job(...), got {type(job).__name__}")
    if job.unique_key is not None:
        raise ConfigError(f"task {job.task!r}: a job of a batch cannot have a unique_key or unique rules")
    text = node_json(job, [("j", pid, policy) for pid, policy in job.depends_on], False)
    return text[:-1] + "," + json.dumps(extra, separators=(",", ":"))[1:] if extra else text


def callbacks_json(on_success: JobSpec | None, on_complete: JobSpec | None, on_discard: JobSpec | None) -> str:
    """The ``batch_create()`` argument: each callback given, as an enqueue_workflow() node."""
    given = {"on_success": on_success, "on_complete": on_complete, "on_discard": on_discard}
    for name, job in given.items():
        if job is not None and job.depends_on:
            raise ConfigError(f"{name}: a batch callback cannot have dependencies of its own")
    parts = [f'"{name}":{_node(job, {})}' for name, job in given.items() if job is not None]
    return "{" + ",".join(parts) + "}"


class Batch:
    """An open batch (from ``app.create_batch(conn, ...)``): :meth:`add` members in any
    transactions, then :meth:`close` it; the callbacks fire once every member settled."""

    def __init__(self, batch_id: int, schema: str, source: ResultSource | None = None) -> None:
        self.id = batch_id
        self.schema = schema
        self._source = source

    def __repr__(self) -> str:
        return f"<Batch {self.id}>"

    def _nodes(self, jobs: Iterable[JobSpec]) -> str:
        nodes = [_node(job, {"batch": self.id, "outside_workflows": True}) for job in jobs]
        if not nodes:
            raise ConfigError("no jobs to add to the batch")
        return "[" + ",".join(nodes) + "]"

    def add(self, conn: psycopg.Connection[Any], *jobs: JobSpec) -> list[JobHandle]:
        """Enqueue ``jobs`` as members, in ``conn``'s transaction; their handles.

        Raises:
            WorkflowError: the batch does not exist or is closed (nothing is added).
        """
        ids = db.enqueue_graph(conn, self.schema, self._nodes(jobs))
        return [JobHandle(i, self._source) for i in ids]

    async def add_async(self, conn: psycopg.AsyncConnection[Any], *jobs: JobSpec) -> list[JobHandle]:
        ids = await db.enqueue_graph_async(conn, self.schema, self._nodes(jobs))
        return [JobHandle(i, self._source) for i in ids]

    def close(self, conn: psycopg.Connection[Any]) -> None:
        """No more members; the callbacks fire when the last member settles (at once if
        they all did already, or there are none)."""
        db.batch_close(conn, self.schema, self.id)

    async def close_async(self, conn: psycopg.AsyncConnection[Any]) -> None:
        await db.batch_close_async(conn, self.schema, self.id)
