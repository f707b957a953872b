"""Workflows: jobs that wait for other jobs. A :class:`Workflow` is a graph of jobs built
in Python and enqueued in one call, atomically in the caller's transaction (rolled back:
none of it exists); chains and groups are workflows of a particular shape.

The database does the rest: a job with parents waits (state ``scheduled``, listed by the
``waiting_jobs`` view) until the statement that finishes its last parent releases it, or
cancels it when a parent failed under the policy ``"cancel"`` (see migration 0011).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Literal, Self

import psycopg

from ._db import workflows as db
from ._enqueue import node_json
from .errors import ConfigError, WorkflowError
from .models import JobSpec
from .results.handle import JobHandle, ResultSource

__all__ = ["Dependency", "Node", "Policy", "Workflow", "normalise_depends_on"]

Policy = Literal["cancel", "run"]
_POLICIES = ("cancel", "run")


class Node:
    """A job of a :class:`Workflow` not enqueued yet; usable as an index into the list of
    handles :meth:`Workflow.enqueue` returns (``handles[node]``)."""

    __slots__ = ("_workflow", "index")

    def __init__(self, workflow: Workflow, index: int) -> None:
        self._workflow = workflow
        self.index = index

    def __index__(self) -> int:
        return self.index

    def __repr__(self) -> str:
        return f"<Node {self.index}: {self._workflow._jobs[self.index].task}>"


@dataclass(frozen=True, slots=True)
class Dependency:
    """A dependency with its policy for a parent that ends discarded or cancelled:
    ``"cancel"`` (the default) cancels the dependent job, and in turn its own dependents;
    ``"run"`` runs it anyway. ``job`` is a node of the same workflow, or an existing job
    (its id or :class:`~pgqueue.JobHandle`)."""

    job: Node | int
    on_failure: Policy = "cancel"

    def __post_init__(self) -> None:
        if self.on_failure not in _POLICIES:
            raise ConfigError(f"on_failure must be 'cancel' or 'run', got {self.on_failure!r}")
        if not isinstance(self.job, Node) and (isinstance(self.job, bool) or not isinstance(self.job, int)):
            raise ConfigError(f"a dependency is a job id, a JobHandle or a workflow node, got {self.job!r}")


def _dependency(item: Any, on_failure: Policy = "cancel") -> Dependency:
    return item if isinstance(item, Dependency) else Dependency(item, on_failure)


def normalise_depends_on(items: Iterable[Any]) -> tuple[tuple[int, str], ...]:
    """``depends_on=[...]`` of an enqueue (job ids, handles or Dependency of them) as
    ``(id, policy)`` pairs, each id once (the first policy given wins)."""
    if isinstance(items, int | str | bytes | Dependency):
        raise ConfigError("depends_on is a list of job ids, JobHandles or pgqueue.Dependency")
    seen: dict[int, str] = {}
    for item in items:
        dep = _dependency(item)
        if isinstance(dep.job, Node):
            raise ConfigError(
                "depends_on of a single enqueue names existing jobs; use Workflow.add(after=...) for nodes"
            )
        if dep.job < 1:
            raise WorkflowError(f"depends_on names job {dep.job}, which does not exist")
        seen.setdefault(int(dep.job), dep.on_failure)
    return tuple(seen.items())


class Workflow:
    """A graph of jobs enqueued together (make one with ``app.workflow()``,
    ``app.chain(...)`` or ``app.group(...)``).

    ``add(job, after=[...])`` adds a job that waits for nodes of this workflow and/or
    existing jobs; ``then(*jobs)`` adds jobs that wait for every current leaf (a chain
    step, or the fan-in of a group); ``depend(child, parent)`` adds an edge later (which
    can close a cycle: :meth:`enqueue` refuses it). ``enqueue(conn)`` creates it all in
    ``conn``'s transaction and returns a handle per job, in the order added.
    """

    def __init__(self, schema: str, source: ResultSource | None = None) -> None:
        self.schema = schema
        self._source = source
        self._jobs: list[JobSpec] = []
        self._deps: list[dict[int | tuple[str, int], str]] = []  # per node: parent -> policy
        self._children: list[int] = []  # per node: how many nodes depend on it

    def __len__(self) -> int:
        return len(self._jobs)

    def add(self, job: JobSpec, *, after: Iterable[Node | int | Dependency] = ()) -> Node:
        """Add ``job``, waiting for everything in ``after``; returns its node."""
        if not isinstance(job, JobSpec):
            raise ConfigError(f"Workflow.add takes a job from task.job(...), got {type(job).__name__}")
        if job.unique_key is not None:
            raise ConfigError(f"task {job.task!r}: a job of a workflow cannot have a unique_key or unique rules")
        node = Node(self, len(self._jobs))
        self._jobs.append(job)
        self._deps.append({})
        self._children.append(0)
        for pid, policy in job.depends_on:
            self._deps[node.index].setdefault(("j", pid), policy)
        for item in after:
            self.depend(node, item)
        return node

    def depend(self, child: Node, parent: Node | int | Dependency, on_failure: Policy = "cancel") -> None:
        """Make ``child`` wait for ``parent`` (a node of this workflow or an existing job)."""
        if not isinstance(child, Node) or child._workflow is not self:
            raise ConfigError(f"{child!r} is not a node of this workflow")
        dep = _dependency(parent, on_failure)
        if isinstance(dep.job, Node):
            if dep.job._workflow is not self:
                raise ConfigError(f"{dep.job!r} is a node of another workflow")
            if dep.job.index == child.index:
                raise WorkflowError(f"{child!r} cannot depend on itself")
            if dep.job.index not in self._deps[child.index]:
                self._children[dep.job.index] += 1
            self._deps[child.index].setdefault(dep.job.index, dep.on_failure)
        else:
            self._deps[child.index].setdefault(("j", int(dep.job)), dep.on_failure)

    def leaves(self) -> list[Node]:
        """The nodes nothing in this workflow depends on yet."""
        return [Node(self, i) for i, n in enumerate(self._children) if n == 0]

    def then(self, *jobs: JobSpec, on_failure: Policy = "cancel") -> Self:
        """Add ``jobs``, each waiting for every current leaf; returns the workflow."""
        leaves = self.leaves()
        for job in jobs:
            self.add(job, after=[Dependency(leaf, on_failure) for leaf in leaves])
        return self

    def _order(self) -> list[int]:
        """Node indices in a topological order (Kahn's algorithm, lowest index first).

        Raises:
            WorkflowError: the edges form a cycle (named by its nodes).
        """
        pending = [sum(1 for p in deps if isinstance(p, int)) for deps in self._deps]
        children: list[list[int]] = [[] for _ in self._jobs]
        for i, deps in enumerate(self._deps):
            for p in deps:
                if isinstance(p, int):
                    children[p].append(i)
        ready = [i for i, n in enumerate(pending) if n == 0]
        order: list[int] = []
        while ready:
            i = ready.pop(0)
            order.append(i)
            for c in children[i]:
                pending[c] -= 1
                if pending[c] == 0:
                    ready.append(c)
        if len(order) < len(self._jobs):
            stuck = [Node(self, i) for i, n in enumerate(pending) if n > 0]
            raise WorkflowError(f"the workflow has a cycle among {stuck}: a job cannot wait for itself")
        return order

    def nodes_json(self) -> tuple[str, list[int]]:
        """The ``enqueue_workflow()`` argument, and for each position in it the node index."""
        if not self._jobs:
            raise WorkflowError("the workflow has no jobs")
        order = self._order()
        position = {node: pos for pos, node in enumerate(order)}
        parts = []
        for i in order:
            deps = [
                ("n", position[p], policy) if isinstance(p, int) else ("j", p[1], policy)
                for p, policy in self._deps[i].items()
            ]
            parts.append(node_json(self._jobs[i], deps, self._children[i] > 0))
        return "[" + ",".join(parts) + "]", order

    def _handles(self, ids: list[int], order: list[int]) -> list[JobHandle]:
        by_node = dict(zip(order, ids, strict=True))
        return [JobHandle(by_node[i], self._source) for i in range(len(self._jobs))]

    def enqueue(self, conn: psycopg.Connection[Any]) -> list[JobHandle]:
        """Create every job in ``conn``'s transaction; a handle per job in the order added.

        Raises:
            WorkflowError: a cycle, or a dependency on a job that does not exist (nothing
            is created).
        """
        text, order = self.nodes_json()
        return self._handles(db.enqueue_graph(conn, self.schema, text), order)

    async def enqueue_async(self, conn: psycopg.AsyncConnection[Any]) -> list[JobHandle]:
        """:meth:`enqueue` on an asyncio connection."""
        text, order = self.nodes_json()
        return self._handles(await db.enqueue_graph_async(conn, self.schema, text), order)
