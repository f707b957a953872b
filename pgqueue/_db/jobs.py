"""The worker's seam to the database: one typed coroutine per query, nothing else.

The modules of ``pgqueue._db`` are the only ones that run SQL (tests/unit/test_sql_seam.py
holds the rest of the package to it); this one runs the worker's statements. Rows become
:class:`~pgqueue.models.Job` objects here.

Why this module is about 400 lines: it is a flat list of one small method per statement
the worker runs (claims, limited claims, outcomes, leases, timers, listening); splitting
it would scatter the one place that says what the worker asks of PostgreSQL.
"""

from __future__ import annotations

import json
import uuid
import weakref
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from ..models import Job, Outcome
from .conn import AConn, Conn, expect_row
from .errors import NotPermittedError, translated
from .sql import lock_name, queries_for

__all__ = [
    "HEAD",
    "ClaimHint",
    "ClaimKey",
    "FlowSettings",
    "JobsDB",
    "LiveStats",
    "TickResult",
    "VacuumResult",
    "cursor_params",
    "outcome_params",
]

#: A position in claim order, ((-priority), run_at, id) ascending: where a claim of one
#: queue resumes scanning the claim index (see pgqueue.worker.claim_cursor).
ClaimKey = tuple[int, datetime, int]
#: Before every key: a scan "after" it starts at the head of the index.
HEAD: ClaimKey = (-(2**31), datetime(1, 1, 1, tzinfo=UTC), 0)


@dataclass(frozen=True, slots=True)
class ClaimHint:
    """What a limited claim learnt about one queue besides the jobs it took."""

    queue: str
    #: Seconds until a full rate window frees a start (None: not held back by a rate).
    wait: float | None
    #: Available jobs wait that the queue's limits hold back now.
    blocked: bool
    #: The last concurrency key visited: the next claim of this process starts after it.
    key_cursor: str | None
    #: In a queue with per-key controls: whether the claim looked for jobs without a key
    #: and found some (None: it did not look).
    unkeyed: bool | None = None


@dataclass(frozen=True, slots=True)
class FlowSettings:
    """Which of a worker's queues are controlled (paused or limited) and which of its
    tasks have a concurrency limit: the scopes its claims must lock."""

    controlled_queues: frozenset[str]
    limited_tasks: frozenset[str]
    #: Controlled queues with a global concurrency limit or a rate (queue or key): where
    #: workers must not claim ahead (see :attr:`prefetchable`).
    no_claim_ahead: frozenset[str] = frozenset()

    @property
    def any(self) -> bool:
        return bool(self.controlled_queues or self.limited_tasks)

    @property
    def prefetchable(self) -> bool:
        """Whether jobs may be claimed ahead into a buffer: not under a global concurrency
        limit of a queue or task (a buffered job would keep a slot from another worker),
        nor under a rate (a start is counted at the claim: a buffered job would start
        later than counted, so handler starts could bunch up past the rate). Under key
        concurrency a buffered job holds only its own key's slot."""
        return not (self.no_claim_ahead or self.limited_tasks)


@dataclass(frozen=True, slots=True)
class TickResult:
    leader: bool
    promoted: int
    rescued: int
    discarded: int
    now: datetime  # the database clock at the tick
    expired: int = 0  # waiting jobs cancelled because their deadline passed


@dataclass(frozen=True, slots=True)
class LiveStats:
    dead: int
    live: int
    can_vacuum: bool
    snapshot_age: float  # seconds: the oldest snapshot another session of the database holds
    modified: int = 0  # rows changed since the last ANALYZE


@dataclass(frozen=True, slots=True)
class VacuumResult:
    dead_before: int
    dead_after: int  # left behind: still visible to some snapshot
    #: (pid, application_name, seconds) of the oldest snapshot holder when much was left
    holder: tuple[Any, ...] | None = None


def outcome_params(items: Sequence[tuple[int, uuid.UUID, Outcome]]) -> dict[str, Any]:
    """Parameters of ``job_record_outcomes`` (shared by the sync transactional path).

    An outcome carries a ``result`` key only when its handler returned something: the
    batch of jobs that return None is encoded as it always was."""
    rows = [
        {"id": job_id, "token": str(token), "state": o.state.value, "delay": o.delay, "error": o.error}
        if o.result is None
        else {
            "id": job_id,
            "token": str(token),
            "state": o.state.value,
            "delay": o.delay,
            "error": o.error,
            "result": o.result,
        }
        for job_id, token, o in items
    ]
    return {"outcomes": json.dumps(rows, default=str)}


def cursor_params(
    queues: Sequence[str],
    after: Mapping[str, ClaimKey] | None = None,
    queue_limits: Mapping[str, int] | None = None,
) -> dict[str, Any]:
    """Queue and cursor parameters of ``job_claim_one_queue`` (one queue) or
    ``job_claim_many_queues``; queues without a cursor are scanned from the head, and
    queues missing from ``queue_limits`` are capped only by the claim's limit."""
    keys = [(after or {}).get(q, HEAD) for q in queues]
    if len(queues) == 1:
        return {
            "queue": queues[0],
            "after_priority": keys[0][0],
            "after_run_at": keys[0][1],
            "after_id": keys[0][2],
        }
    return {
        "queues": list(queues),
        "queue_limits": [(queue_limits or {}).get(q) for q in queues],
        "after_priority": [k[0] for k in keys],
        "after_run_at": [k[1] for k in keys],
        "after_id": [k[2] for k in keys],
    }


class JobsDB:
    def __init__(self, schema: str) -> None:
        self.schema = schema
        self.q = queries_for(schema)
        #: Connections whose whole session runs on the worker's plans (see
        #: :meth:`use_session_plans`).
        self._session_plans: weakref.WeakSet[AConn] = weakref.WeakSet()

    async def use_session_plans(self, conn: AConn) -> None:
        """Set the worker's plans (``worker_plans``) for the whole session of ``conn``, a
        connection that only the worker's own claims, outcomes and heartbeats will use
        (never a handler's statements). On it those statements skip ``worker_plans``, and a
        claim with no outcomes to write, or outcomes written alone, is one plain statement
        rather than a pipeline, which costs the client about twice the CPU of one."""
        await conn.execute(self.q["worker_session_plans"])
        self._session_plans.add(conn)

    async def _worker_plans(self, conn: AConn) -> None:
        """Send ``worker_plans`` first in this pipeline or transaction, unless the session
        of ``conn`` already runs on them."""
        if conn not in self._session_plans:
            await conn.execute(self.q["worker_plans"])

    async def claim(
        self,
        conn: AConn,
        *,
        queues: Sequence[str],
        task_limits: Mapping[str, int],
        limit: int,
        lease: float,
        worker_id: str,
        outcomes: Sequence[tuple[int, uuid.UUID, Outcome]] = (),
        after: Mapping[str, ClaimKey] | None = None,
        queue_limits: Mapping[str, int] | None = None,
    ) -> tuple[list[Job], set[int]]:
        """Claim up to ``limit`` jobs; returns them with the ids of ``outcomes`` written.

        ``after`` gives, per queue, the claim-order key to resume scanning after (see
        ``_claim_cursor``); queues missing from it are scanned from the head.
        ``queue_limits`` caps the jobs of single queues (this process's free slots for
        them; a single queue's cap is already in ``limit``). Controlled queues and limited
        tasks are skipped: :meth:`claim_limited` claims them.

        Buffered ``outcomes`` ride along in the same pipeline: one round trip and one
        commit for both (a failure of either rolls back both, and both are retried).

        Raises:
            PartitionMissingError: an outcome's finished-job partition does not exist.
        """
        params: dict[str, Any] = {
            "tasks": list(task_limits),
            "task_max_attempts": list(task_limits.values()),
            "limit": limit,
            "lease": lease,
            "worker_id": worker_id,
        }
        params.update(cursor_params(queues, after, queue_limits))
        query = self.q["job_claim_one_queue" if len(queues) == 1 else "job_claim_many_queues"]
        with translated(conn, self.schema, missing_schema=False, partition=True):
            return await self._claim_and_record(conn, query, params, outcomes)

    async def claim_limited(
        self,
        conn: AConn,
        *,
        queues: Sequence[str],
        queue_limits: Mapping[str, int],
        task_limits: Mapping[str, int],
        limit: int,
        lease: float,
        worker_id: str,
        key_cursors: Mapping[str, str | None],
        unkeyed: Mapping[str, bool] | None = None,
        outcomes: Sequence[tuple[int, uuid.UUID, Outcome]] = (),
    ) -> tuple[list[Job], list[ClaimHint], set[int]]:
        """Claim up to ``limit`` jobs of ``queues`` (at most ``queue_limits[q]`` of each)
        that every flow control allows: pause, global queue and task concurrency, per-key
        concurrency and FIFO, rates. One round trip: the buffered ``outcomes``, the locks
        of the controlled scopes and the claim, in one transaction. ``unkeyed[q]`` False
        skips the search for jobs without a concurrency key in a queue with per-key
        controls (missing: search).

        Returns the jobs, one :class:`ClaimHint` per queue looked at, and the ids of
        ``outcomes`` written.

        Raises:
            PartitionMissingError: an outcome's finished-job partition does not exist.
        """
        tasks = list(task_limits)
        lock = {"queues": list(queues), "tasks": tasks, "lock_prefix": lock_name("limit", self.schema) + ":"}
        params: dict[str, Any] = {
            "queues": list(queues),
            "queue_limits": [queue_limits.get(q) for q in queues],
            "tasks": tasks,
            "task_max_attempts": list(task_limits.values()),
            "limit": limit,
            "lease": lease,
            "worker_id": worker_id,
            "key_cursors": [key_cursors.get(q) for q in queues],
            "unkeyed": [(unkeyed or {}).get(q, True) for q in queues],
        }
        with translated(conn, self.schema, missing_schema=False, partition=True):
            async with conn.pipeline() as pipeline:
                written_cur = conn.cursor()
                lock_cur = conn.cursor()
                claim_cur = conn.cursor()
                hints_cur = conn.cursor()
                if outcomes:
                    await written_cur.execute(self.q["job_record_outcomes"], outcome_params(outcomes))
                await lock_cur.execute(self.q["job_claim_lock"], lock)
                await claim_cur.execute(self.q["job_claim_limited"], params)
                await hints_cur.execute(self.q["job_claim_hints"])
                await pipeline.sync()
                written = {row[0] for row in await written_cur.fetchall()} if outcomes else set()
                jobs = [Job(*row) for row in await claim_cur.fetchall()]
                hints_row = await hints_cur.fetchone()
        hints = [
            ClaimHint(h["queue"], h["wait"], bool(h["blocked"]), h["key_cursor"], h.get("unkeyed"))
            for h in json.loads(hints_row[0] if hints_row and hints_row[0] else "[]")
        ]
        return jobs, hints, written

    async def flow_settings(self, conn: AConn, queues: Sequence[str], tasks: Sequence[str]) -> FlowSettings:
        """Which of ``queues`` are controlled and which of ``tasks`` are limited now."""
        cur = await conn.execute(self.q["flow_settings"], {"queues": list(queues), "tasks": list(tasks)})
        rows = await cur.fetchall()
        return FlowSettings(
            frozenset(name for kind, name in rows if kind == "q"),
            frozenset(name for kind, name in rows if kind == "t"),
            frozenset(name for kind, name in rows if kind == "g"),
        )

    async def add_queues(self, conn: AConn, queues: Sequence[str]) -> None:
        """Record the queues this worker serves (known to operators from now on)."""
        await conn.execute(self.q["queue_add_many"], {"queues": list(queues)})

    async def _claim_and_record(
        self, conn: AConn, query: bytes, params: dict[str, Any], outcomes: Sequence[tuple[int, uuid.UUID, Outcome]]
    ) -> tuple[list[Job], set[int]]:
        """The buffered outcomes (if any) and the claim in one pipeline: one round trip and one
        transaction, on the worker's plans (``worker_plans``, or the session's)."""
        if not outcomes and conn in self._session_plans:
            cur = await conn.execute(query, params)
            return [Job(*row) for row in await cur.fetchall()], set()
        async with conn.pipeline() as pipeline:
            await self._worker_plans(conn)
            written_cur = conn.cursor()
            claim_cur = conn.cursor()
            if outcomes:
                await written_cur.execute(self.q["job_record_outcomes"], outcome_params(outcomes))
            await claim_cur.execute(query, params)
            await pipeline.sync()
            written = {row[0] for row in await written_cur.fetchall()} if outcomes else set()
            jobs = [Job(*row) for row in await claim_cur.fetchall()]
        return jobs, written

    async def record_outcomes(self, conn: AConn, items: Sequence[tuple[int, uuid.UUID, Outcome]]) -> set[int]:
        """Write outcomes; returns the ids whose lease was still valid (the rest are fenced).

        Raises:
            PartitionMissingError: a finished-job partition does not exist.
        """
        with translated(conn, self.schema, missing_schema=False, partition=True):
            if conn in self._session_plans:
                cur = await conn.execute(self.q["job_record_outcomes"], outcome_params(items))
            else:
                async with conn.pipeline():  # one round trip, one transaction (or the caller's)
                    await conn.execute(self.q["worker_plans"])
                    cur = await conn.execute(self.q["job_record_outcomes"], outcome_params(items))
            return {row[0] for row in await cur.fetchall()}

    def record_outcomes_sync(self, conn: Conn, items: Sequence[tuple[int, uuid.UUID, Outcome]]) -> set[int]:
        """:meth:`record_outcomes` on a blocking connection (a transactional sync handler's
        transaction, so the outcome commits with the handler's writes)."""
        with translated(conn, self.schema, missing_schema=False, partition=True):
            with conn.pipeline():
                conn.execute(self.q["worker_plans"])
                cur = conn.execute(self.q["job_record_outcomes"], outcome_params(items))
            return {row[0] for row in cur.fetchall()}

    async def register(self, conn: AConn, registration: Mapping[str, Any]) -> None:
        """Create or refresh this worker's row in ``worker_registry`` (``registry_upsert``)."""
        await conn.execute(self.q["registry_upsert"], registration)

    async def register_and_extend_leases(
        self, conn: AConn, registration: Mapping[str, Any], held: Mapping[int, uuid.UUID], lease: float
    ) -> dict[int, bool]:
        """:meth:`register` and :meth:`extend_leases` in one round trip (a pipeline), on the
        worker's plans (``worker_plans``)."""
        async with conn.pipeline():
            await self._worker_plans(conn)
            await self.register(conn, registration)
            return await self.extend_leases(conn, held, lease)

    async def deregister(self, conn: AConn, worker_id: str) -> None:
        await conn.execute(self.q["registry_delete"], {"worker_id": worker_id})

    async def listen(self, conn: AConn) -> None:
        """LISTEN on the schema's wake-up channel."""
        await conn.execute(self.q["queue_listen"])

    async def ping(self, conn: AConn) -> None:
        """One round trip that proves the connection lives."""
        await conn.execute(self.q["connection_ping"])

    async def extend_leases(self, conn: AConn, held: Mapping[int, uuid.UUID], lease: float) -> dict[int, bool]:
        """Heartbeat: the ids whose lease was extended, each mapped to whether an operator
        asked that job to stop (``cancel_job()``)."""
        cur = await conn.execute(
            self.q["job_extend_leases"], {"ids": list(held), "tokens": list(held.values()), "lease": lease}
        )
        return {row[0]: bool(row[1]) for row in await cur.fetchall()}

    async def release(self, conn: AConn, held: Mapping[int, uuid.UUID]) -> int:
        cur = await conn.execute(self.q["job_release"], {"ids": list(held), "tokens": list(held.values())})
        row = await cur.fetchone()
        return int(row[0]) if row else 0

    async def maintenance_tick(
        self,
        conn: AConn,
        *,
        batch: int,
        backoff_base: float,
        backoff_cap: float,
        default_max_attempts: int,
        since: datetime | None = None,
    ) -> TickResult:
        """One scheduler + rescuer + expiry pass if this process wins the lock; only timers
        and deadlines at or after ``since`` are looked at (None: all of them)."""
        cur = await conn.execute(
            self.q["maintenance_tick"],
            {
                "lock_name": lock_name("maintenance", self.schema),
                "since": since,
                "batch": batch,
                "backoff_base": backoff_base,
                "backoff_cap": backoff_cap,
                "default_max_attempts": default_max_attempts,
            },
        )
        row = expect_row(await cur.fetchone(), "maintenance_tick")
        return TickResult(bool(row[0]), int(row[1]), int(row[2]), int(row[3]), row[5], int(row[6]))

    async def live_stats(self, conn: AConn) -> LiveStats:
        """Dead/live row counts of the live partition, whether this role may VACUUM it, and
        the age of the oldest snapshot another session holds: one cheap query."""
        cur = await conn.execute(self.q["live_dead_tuples"], {"table": f'"{self.schema}".jobs_live'})
        row = await cur.fetchone()
        if row is None:
            return LiveStats(0, 0, False, 0.0, 0)
        return LiveStats(int(row[0]), int(row[1]), bool(row[2]), float(row[3] or 0.0), int(row[4]))

    async def analyze_live(self, conn: AConn) -> None:
        """Refresh the live partition's planner statistics (``conn`` in autocommit)."""
        await conn.execute(self.q["analyze_live"], prepare=False)

    async def vacuum_live_if_needed(self, conn: AConn, threshold: int, stats: LiveStats) -> VacuumResult | None:
        """VACUUM the live partition if ``stats`` show enough dead tuples and no other
        process is doing it; returns what it achieved, or None if it did not run. ``conn``
        must be in autocommit mode."""
        if stats.dead < max(threshold, stats.live):
            return None
        if not stats.can_vacuum:
            raise NotPermittedError(f"this role may not VACUUM {self.schema}.jobs_live (not its owner)")
        lock = {"lock_name": lock_name("vacuum", self.schema)}
        cur = await conn.execute(self.q["vacuum_lock"], lock)
        got = await cur.fetchone()
        if not got or not got[0]:
            return None
        try:
            with translated(conn, self.schema, missing_schema=False, privilege=True):
                await conn.execute(self.q["vacuum_live"], prepare=False)  # utility statements cannot be prepared
        finally:
            await conn.execute(self.q["vacuum_unlock"], lock)
        after = await self.live_stats(conn)
        holder = None
        if after.dead >= threshold:
            cur = await conn.execute(self.q["oldest_snapshot"])
            holder = await cur.fetchone()
        return VacuumResult(stats.dead, after.dead, holder)
