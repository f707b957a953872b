"""The invariant checker: reads the job table, the handlers' ledger and the producer's
intent after a chaos run, and condenses them into one summary line.

* **lost**: a committed job that is not in a final state (or not there at all);
* **phantom**: a rolled-back job that exists or ever ran;
* **overlaps**: two runs of one job at the same time; each must be explained by one of the
  two leases having ended by the time the overlap began (when the later run started): an
  outcome or a rescue recorded for its attempt, or its worker stopped/killed/partitioned.
  Either run may be the stale one: the earlier run's lease may have been rescued while it
  ran, or a frozen worker may start an attempt whose lease was rescued before it started;
* **duplicates**: a job whose handler body finished more than once; each must be explained:
  all runs but one lost their lease (an error entry for their attempt, e.g. a rescue, or
  their worker stopped, frozen or killed after they started);
* **tx_effects**: a completed transactional job has exactly one effect row, any other none;
* **over_max**: an attempt number above the job's ``max_attempts``;
* **unrun**: a job marked completed although no run of its handler finished.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

import psycopg

from .limits import LimitReport
from .producer import Intent
from .workers import ProcEvent
from .workflows import WorkflowReport

__all__ = ["Report", "Run", "check", "check_runs"]

FINAL = {"completed", "discarded", "cancelled"}
TX_KINDS = {"chaos.tx", "chaos.tx_async"}
#: Ledger results of a handler body that returned normally. "late" is chaos.hang_sync's
#: first attempt, which returns after its timeout: usually the timeout wins, but when the
#: whole process was frozen (SIGSTOP) past both, the handler's return is seen first and
#: legitimately completes the job (asyncio.wait_for returns a result that is ready).
RETURNED = {"ok", "late"}
#: How long after a handler returns its outcome may still be unwritten (buffered, retried
#: through a fault); a worker stopped within it may have lost the lease before writing.
OUTCOME_WINDOW = timedelta(seconds=10)


@dataclass
class Run:
    token: str
    job_id: int
    attempt: int
    kind: str
    pid: int
    started_at: datetime
    ended_at: datetime | None
    result: str | None


@dataclass
class Report:
    jobs: int = 0
    committed: int = 0
    rolled_back: int = 0
    unknown: int = 0
    runs: int = 0
    states: Counter[str] = field(default_factory=Counter)
    faults: Counter[str] = field(default_factory=Counter)
    lost: list[int] = field(default_factory=list)
    phantom: list[int] = field(default_factory=list)
    overlaps_explained: int = 0
    overlaps_unexplained: list[int] = field(default_factory=list)
    duplicates_explained: int = 0
    duplicates_unexplained: list[int] = field(default_factory=list)
    tx_wrong: list[int] = field(default_factory=list)
    over_max: list[int] = field(default_factory=list)
    unrun: list[int] = field(default_factory=list)
    side_task_deaths: int = 0  # a worker stopped itself on an unexpected error (a bug)
    wakes: Counter[str] = field(default_factory=Counter)  # the producer's NOTIFY window decisions
    seconds: float = 0.0
    #: With flow control in the run: whether the limits, rates and pause held.
    limits: LimitReport | None = None
    #: With workflows in the run: whether dependencies and batch callbacks held.
    workflows: WorkflowReport | None = None

    @property
    def ok(self) -> bool:
        return not (
            self.lost
            or self.phantom
            or self.overlaps_unexplained
            or self.duplicates_unexplained
            or self.tx_wrong
            or self.over_max
            or self.unrun
            or self.side_task_deaths
            or (self.limits is not None and bool(self.limits.violations))
            or (self.workflows is not None and bool(self.workflows.violations))
        )

    def line(self) -> str:
        faults = " ".join(f"{k}={v}" for k, v in sorted(self.faults.items()))
        states = " ".join(f"{k}={v}" for k, v in sorted(self.states.items()))
        dup_total = self.duplicates_explained + len(self.duplicates_unexplained)
        ovl_total = self.overlaps_explained + len(self.overlaps_unexplained)
        return (
            f"chaos {'PASS' if self.ok else 'FAIL'}: jobs={self.jobs} (committed={self.committed}"
            f" rolled_back={self.rolled_back} unknown={self.unknown}; {states}) runs={self.runs}"
            f" faults={sum(self.faults.values())} ({faults}) lost={len(self.lost)} phantom={len(self.phantom)}"
            f" duplicates={dup_total} ({self.duplicates_explained} explained/{len(self.duplicates_unexplained)}"
            f" unexplained) overlaps={ovl_total} ({self.overlaps_explained}/{len(self.overlaps_unexplained)})"
            f" tx_effects_wrong={len(self.tx_wrong)} attempts_over_max={len(self.over_max)}"
            f" completed_unrun={len(self.unrun)} worker_side_task_deaths={self.side_task_deaths}"
            f" wakes=({' '.join(f'{k}={v}' for k, v in sorted(self.wakes.items()))})"
            f" in {self.seconds:.0f}s"
            + (f"; {self.limits.line()}" if self.limits is not None else "")
            + (f"; {self.workflows.line()}" if self.workflows is not None else "")
        )

    def failing(self) -> list[int]:
        return sorted(
            {
                *self.lost,
                *self.phantom,
                *self.overlaps_unexplained,
                *self.duplicates_unexplained,
                *self.tx_wrong,
                *self.over_max,
                *self.unrun,
            }
        )

    def details(self) -> str:
        parts = []
        for name in (
            "lost",
            "phantom",
            "overlaps_unexplained",
            "duplicates_unexplained",
            "tx_wrong",
            "over_max",
            "unrun",
        ):
            ids = getattr(self, name)
            if ids:
                parts.append(f"{name}: {sorted(ids)[:20]}")
        return "; ".join(parts)


def _end_of_lease(errors: list[dict[str, Any]], attempt: int) -> datetime | None:
    """When the lease of ``attempt`` ended for the database: its error entry (a failure
    outcome or a rescue), if one was recorded."""
    times = [datetime.fromisoformat(str(e["at"])) for e in errors if e.get("attempt") == attempt and e.get("at")]
    return min(times) if times else None


def check(conn: psycopg.Connection[Any], intent: Intent, events: list[ProcEvent], faults: Counter[str]) -> Report:
    rep = Report(faults=Counter(faults))
    jobs: dict[int, dict[str, Any]] = {}
    for row in conn.execute("SELECT id, task, state::text, attempt, max_attempts, errors FROM pgqueue.jobs"):
        jobs[row[0]] = {"task": row[1], "state": row[2], "attempt": row[3], "max": row[4], "errors": row[5] or []}
    runs: dict[int, list[Run]] = defaultdict(list)
    for r in conn.execute(
        "SELECT token::text, job_id, attempt, kind, pid, started_at, ended_at, result"
        " FROM chaos_runs ORDER BY started_at"
    ):
        runs[r[1]].append(Run(*r))
    effects = Counter(r[0] for r in conn.execute("SELECT job_id FROM chaos_effects"))

    # Unknown commits: the job table says which way they went.
    committed = dict(intent.committed)
    rolled_back = dict(intent.rolled_back)
    for job_id, task in intent.unknown.items():
        (committed if job_id in jobs else rolled_back)[job_id] = task
    rep.committed, rep.rolled_back, rep.unknown = len(committed), len(rolled_back), len(intent.unknown)
    rep.jobs = len(committed) + len(rolled_back)
    rep.runs = sum(len(v) for v in runs.values())

    for job_id in committed:
        job = jobs.get(job_id)
        rep.states[job["state"] if job else "missing"] += 1
        if job is None or job["state"] not in FINAL:
            rep.lost.append(job_id)
    for job_id in rolled_back:
        if job_id in jobs or job_id in runs or job_id in effects:
            rep.phantom.append(job_id)

    # When each worker process was stopped, frozen or died: its leases were not valid after.
    troubled: dict[int, list[datetime]] = defaultdict(list)
    deaths: dict[int, datetime] = {}
    for ev in events:
        if ev.what in ("sigkill", "sigterm", "sigstop") or ev.what.startswith("exit:"):
            troubled[ev.pid].append(ev.at)
        if ev.what.startswith("exit:"):
            deaths[ev.pid] = ev.at

    for job_id, job in jobs.items():
        if job["max"] is not None and job["attempt"] > job["max"]:
            rep.over_max.append(job_id)
            continue
        if job["max"] is not None and any(r.attempt > job["max"] for r in runs.get(job_id, [])):
            rep.over_max.append(job_id)
        if job["state"] == "completed" and not any(r.result in RETURNED for r in runs.get(job_id, [])):
            rep.unrun.append(job_id)
        if job["task"] in TX_KINDS:
            want = 1 if job["state"] == "completed" else 0
            if effects.get(job_id, 0) != want:
                rep.tx_wrong.append(job_id)
    for job_id, count in effects.items():
        if job_id not in jobs and count:
            rep.tx_wrong.append(job_id)

    for job_id, job_runs in runs.items():
        errors = jobs[job_id]["errors"] if job_id in jobs else []
        check_runs(rep, job_runs, errors, troubled, deaths)
    return rep


def _explained(a: Run, before: datetime, errors: list[dict[str, Any]], troubled: dict[int, list[datetime]]) -> bool:
    """Had run ``a`` lost its lease by ``before``?"""
    ended = _end_of_lease(errors, a.attempt)
    if ended is not None and ended <= before:
        return True
    # Its worker was killed, stopped or terminated meanwhile (a graceful stop releases its
    # jobs without an error entry); or the network cut it off long enough for a rescue,
    # which leaves an error entry anyway.
    return any(a.started_at <= t <= before for t in troubled.get(a.pid, []))


def _lease_lost(r: Run, errors: list[dict[str, Any]], troubled: dict[int, list[datetime]]) -> bool:
    """Did run ``r``'s attempt end other than by its own completion: an error entry for it
    (a failure, a rescue), or its worker stopped, frozen or killed after it started?"""
    if _end_of_lease(errors, r.attempt) is not None:
        return True
    until = (r.ended_at or r.started_at) + OUTCOME_WINDOW
    return any(r.started_at <= t <= until for t in troubled.get(r.pid, []))


def check_runs(
    rep: Report,
    job_runs: list[Run],
    errors: list[dict[str, Any]],
    troubled: dict[int, list[datetime]],
    deaths: dict[int, datetime],
) -> None:
    """Count the overlaps and duplicates among one job's runs (ordered by start) into
    ``rep``, given the job's error entries and when each worker process was stopped,
    frozen or killed (``troubled``) or died (``deaths``)."""
    job_id = job_runs[0].job_id
    overlapping = False
    unexplained_overlap = False
    for i, a in enumerate(job_runs):
        for b in job_runs[i + 1 :]:
            if a.ended_at is not None and a.ended_at <= b.started_at:
                continue
            if a.ended_at is None:
                # No end written: the handler was cancelled (its error entry says when) or
                # its process died. Either way it stopped then.
                stopped = [t for t in (_end_of_lease(errors, a.attempt), deaths.get(a.pid)) if t is not None]
                if stopped and min(stopped) <= b.started_at:
                    continue
            overlapping = True
            # The overlap began when b started: a double run under a valid lease only if
            # both leases were still valid then. Either may be the stale one.
            began = b.started_at
            if not (_explained(a, began, errors, troubled) or _explained(b, began, errors, troubled)):
                unexplained_overlap = True
    if overlapping:
        if unexplained_overlap:
            rep.overlaps_unexplained.append(job_id)
        else:
            rep.overlaps_explained += 1

    done = [r for r in job_runs if r.ended_at is not None and r.result in RETURNED]
    if len(done) > 1:
        # At most one of them may have held its lease to the end. Not necessarily the last
        # to start: a frozen worker may start a stale attempt after its job was rescued.
        holders = [r for r in done if not _lease_lost(r, errors, troubled)]
        if len(holders) <= 1:
            rep.duplicates_explained += 1
        else:
            rep.duplicates_unexplained.append(job_id)
