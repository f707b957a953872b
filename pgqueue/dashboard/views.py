"""What each page shows, read from the database: plain functions of a connection and the
config, free of HTTP, so tests and the handlers share them. Reads go through
:mod:`pgqueue.ops` and the views; the overview, the failures and the jobs list have their
own queries (one statement per refresh; failures over a bounded window; a keyset page that
looks at a bounded number of jobs)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any, TypeVar

from .. import ops
from .._db import cron as cron_db
from .._db import dashboard as db
from .._db.conn import Conn
from ..cron.ticks import CronExpr
from ..errors import ConfigError
from ..models import JobState
from .charts import Point, bar_chart, line_chart
from .config import DashboardConfig
from .filters import JobFilter

__all__ = ["JobView", "Overview", "job_view", "jobs_page", "overview"]

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Overview:
    at: datetime
    queues: list[ops.QueueStats]
    paused: set[str]
    throughput_svg: str
    failure_svg: str
    totals: dict[str, int]


def _stats(row: dict[str, Any]) -> ops.QueueStats:
    names = {f.name for f in dataclasses.fields(ops.QueueStats)}
    values: dict[str, Any] = {k: (float(v) if isinstance(v, Decimal) else v) for k, v in row.items() if k in names}
    return ops.QueueStats(**values)


def overview(conn: Conn, config: DashboardConfig) -> Overview:
    """Queues, their state and the charts: one statement, one round trip."""
    row = db.overview_row(conn, config.schema, minutes=config.chart_minutes)
    at: datetime = row["at"]
    end = at.replace(second=0, microsecond=0)
    span = config.chart_minutes
    per_minute = [[0, 0, 0] for _ in range(span + 1)]  # oldest first
    for r in row["series"]:
        ago = int(r["ago"])
        if 0 <= ago <= span:
            slot = per_minute[span - ago]
            slot[0] += int(r["completed"])
            slot[1] += int(r["discarded"])
            slot[2] += int(r["cancelled"])
    labels = [(end - timedelta(minutes=span - i)).strftime("%H:%M") for i in range(span + 1)]
    bars = [Point(lbl, (float(c), float(d))) for lbl, (c, d, _) in zip(labels, per_minute, strict=True)]
    rates = [
        Point(lbl, (100.0 * d / (c + d) if c + d else 0.0,)) for lbl, (c, d, _) in zip(labels, per_minute, strict=True)
    ]
    queues = [_stats(r) for r in row["queues"]]
    totals = {
        "available": sum(q.available for q in queues),
        "scheduled": sum(q.scheduled for q in queues),
        "running": sum(q.running for q in queues),
        "retryable": sum(q.retryable for q in queues),
        "completed_1m": sum(q.completed_1m for q in queues),
        "discarded_5m": sum(q.discarded_5m for q in queues),
    }
    return Overview(
        at=at,
        queues=queues,
        paused=set(row["paused"]),
        throughput_svg=bar_chart("Finished jobs per minute (completed, discarded)", bars, ("completed", "discarded")),
        failure_svg=line_chart("Discarded share of finished jobs per minute", rates, "%", floor=5.0),
        totals=totals,
    )


@dataclass(frozen=True, slots=True)
class JobsPage:
    jobs: list[ops.JobSummary]
    next_before: int | None  #: the next page starts below this id (None: last page)
    scanned: int
    scanned_to: int | None
    bounded: bool  #: a narrowing filter: the page looked at a bounded window of jobs


def jobs_page(conn: Conn, config: DashboardConfig, flt: JobFilter, before: int | None) -> JobsPage:
    query = flt.page_query(
        before=before, limit=config.page_size, scan_limit=config.scan_limit, args_tasks=config.args_tasks()
    )
    page = db.job_page(conn, config.schema, query)
    names = [f.name for f in dataclasses.fields(ops.JobSummary)]
    jobs = [ops.JobSummary(**{**{n: r[n] for n in names}, "state": JobState(r["state"])}) for r in page.rows]
    if len(page.rows) >= query.limit:
        nxt: int | None = page.rows[-1]["id"]
    elif page.scanned >= query.scan and page.scanned_to is not None:
        nxt = page.scanned_to
    else:
        nxt = None
    return JobsPage(jobs, nxt, page.scanned, page.scanned_to, flt.narrows)


@dataclass(frozen=True, slots=True)
class JobView:
    job: ops.JobDetail
    args_visible: bool
    cron_tick: dict[str, Any] | None
    relations: list[tuple[str, list[int]]] | None


def job_view(conn: Conn, config: DashboardConfig, job_id: int) -> JobView:
    """Raises JobNotFoundError."""
    job = ops.get_job(conn, config.schema, job_id)
    tick = db.job_cron_tick(conn, config.schema, job_id)
    relations = (config.job_relations or workflow_relations)(conn, config.schema, job_id)
    return JobView(job, config.args_visible(job.task), tick, relations or None)


def workflow_relations(conn: Conn, schema: str, job_id: int) -> list[tuple[str, list[int]]]:
    """A job's parents, children and batch (see docs/workflows.md); empty for a plain job."""
    rel = ops.job_relations(conn, schema, job_id)
    out: list[tuple[str, list[int]]] = []
    if rel.workflow_id is not None:
        parents = [p for p, _, _ in rel.parents]
        out.append((f"Workflow {rel.workflow_id}, waiting for {rel.waiting_on or 0} parent(s); parents", parents))
        out.append(("Children", [c for c, _ in rel.children]))
    if rel.batch_id is not None:
        out.append((f"Member of batch {rel.batch_id}", []))
    return out


def _build(cls: type[T], row: dict[str, Any]) -> T:
    names = {f.name for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
    return cls(**{k: (float(v) if isinstance(v, Decimal) else v) for k, v in row.items() if k in names})


def workers(conn: Conn, config: DashboardConfig) -> list[ops.WorkerInfo]:
    """The ``workers`` view (and nothing else: ``ops.status`` reads every view)."""
    return [_build(ops.WorkerInfo, r) for r in db.workers_rows(conn, config.schema)]


#: The failures page shows this many groups at most, the latest first.
MAX_FAILURE_GROUPS = 500


@dataclass(frozen=True, slots=True)
class Failures:
    """Failed jobs grouped by task and error type over a bounded window (see
    ``dash_failures``): the newest live jobs that failed, and the newest jobs discarded or
    cancelled in the last 24 hours, ``window`` of each at most."""

    groups: list[ops.FailureGroup]  #: the latest first, at most :data:`MAX_FAILURE_GROUPS`
    window: int  #: ``failure_window``
    live: int  #: live jobs that failed, in the window
    finished: int  #: jobs discarded or cancelled in the last 24 hours, in the window

    @property
    def live_full(self) -> bool:
        """Older live jobs that failed were left out."""
        return self.live >= self.window

    @property
    def finished_full(self) -> bool:
        """Older jobs discarded or cancelled in the last 24 hours were left out."""
        return self.finished >= self.window


def failures(conn: Conn, config: DashboardConfig) -> Failures:
    rows = db.failure_rows(conn, config.schema, window=config.failure_window, groups=MAX_FAILURE_GROUPS)
    live = int(rows[0]["window_live"]) if rows else 0
    finished = int(rows[0]["window_finished"]) if rows else 0
    groups = [_build(ops.FailureGroup, r) for r in rows if r["task"] is not None]
    return Failures(groups, config.failure_window, live, finished)


@dataclass(frozen=True, slots=True)
class CronView:
    row: cron_db.StatusRow
    next_tick: datetime | None  #: None: inactive schedule, or an expression edited into nonsense


def cron(conn: Conn, config: DashboardConfig) -> list[CronView]:
    """Every schedule the database knows, with its next tick (as ``pgqueue cron list``
    computes it: after the later of its last tick and now)."""
    out = []
    for row in cron_db.status_rows(conn, config.schema):
        cursor = row.defined_at if row.last_tick is None else max(row.last_tick, row.defined_at)
        try:
            nxt = CronExpr(row.cron, row.timezone, hash_key=row.name).next_after(max(cursor, row.db_now))
        except ConfigError:
            nxt = None
        out.append(CronView(row, nxt if row.active else None))
    return out


def queues(conn: Conn, config: DashboardConfig) -> tuple[list[ops.QueueControl], list[ops.TaskControl]]:
    """Every known queue's controls, and the queues with live jobs that have none yet
    (shown as running with no limit)."""
    controls = ops.queue_controls(conn, config.schema)
    known = {c.queue for c in controls}
    extra = [_unset(name) for name in db.queue_names(conn, config.schema) if name not in known]
    return sorted([*controls, *extra], key=lambda c: c.queue), ops.task_controls(conn, config.schema)


def _unset(queue: str) -> ops.QueueControl:
    return ops.QueueControl(
        queue=queue,
        paused=False,
        concurrency=None,
        running=0,
        key_concurrency=None,
        key_fifo=False,
        rate_limit=None,
        rate_period_seconds=None,
        starts_in_window=0,
        key_rate_limit=None,
        key_rate_period_seconds=None,
        changed_at=None,
    )
