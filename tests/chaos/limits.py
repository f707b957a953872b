"""Flow control under faults: the limits a chaos run sets, a pause in the middle of it, and
the ledger check that they held.

The handlers' ledger (``chaos_runs``) says when each run started and ended on the database
clock, which lease token it ran under, the job's concurrency key and when the claim took
the job (the row's ``started_at``: the claim's own clock reading, the instant the limits
were checked at). From it the checker rebuilds, for every instant, the runs that held a
valid lease, and checks:

* **concurrency**: never more runs under a valid lease than the queue's limit, any key's
  limit or the limited task's limit. A run holds its lease from its start until the first
  of: its end, an error entry for its attempt (a failure outcome or a rescue), its
  worker's death, or its worker's stop plus the shutdown timeout (released then);
* **rates**: never more claims in any window of the rate's period than its limit, for the
  queue and for each key (claims are counted from their own clock readings);
* **pause**: no claim between a pause and the resume (with a grace for a claim whose
  snapshot the pause's commit just missed).
"""

from __future__ import annotations

from bisect import bisect_right
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

import psycopg

from pgqueue import ops

from .workers import ProcEvent

__all__ = ["LimitReport", "Limits", "apply_limits", "check_limits"]

QUEUE = "default"
#: A claim whose statement began before a pause committed may read the queue as running;
#: its clock reading is taken microseconds later. This is a generous bound for that.
PAUSE_GRACE = timedelta(seconds=1)


@dataclass(frozen=True)
class Limits:
    """The controls of a run (None: not set). The default sets every kind at once; see
    :meth:`keys_only` for the other shape the claim has."""

    queue_concurrency: int | None = 8
    key_concurrency: int = 2
    keys: int = 6
    rate: tuple[int, float] | None = (40, 1.0)  # at most 40 claims in any second
    key_rate: tuple[int, float] | None = (12, 1.0)
    task: str | None = "chaos.ok_async"
    task_concurrency: int = 3
    shutdown_timeout: float = 3.0

    @classmethod
    def keys_only(cls) -> Limits:
        """Per-key concurrency and nothing else: the one-statement key walk, with workers
        claiming ahead into their buffers (which other controls turn off)."""
        return cls(queue_concurrency=None, rate=None, key_rate=None, task=None)


@dataclass
class LimitReport:
    runs: int = 0
    max_queue: int = 0
    max_key: int = 0
    max_task: int = 0
    max_rate: int = 0
    max_key_rate: int = 0
    claims_while_paused: int = 0
    pauses: int = 0
    violations: list[str] = field(default_factory=list)

    def line(self) -> str:
        return (
            f"limits {'PASS' if not self.violations else 'FAIL'}: runs={self.runs} peak running queue="
            f"{self.max_queue} key={self.max_key} task={self.max_task} peak claims/window queue={self.max_rate}"
            f" key={self.max_key_rate} pauses={self.pauses} claims_while_paused={self.claims_while_paused}"
            + (f" violations: {'; '.join(self.violations[:10])}" if self.violations else "")
        )


def apply_limits(conn: psycopg.Connection[Any], limits: Limits) -> None:
    ops.set_queue_limits(
        conn,
        "pgqueue",
        QUEUE,
        concurrency=limits.queue_concurrency,
        key_concurrency=limits.key_concurrency,
        rate=limits.rate,
        key_rate=limits.key_rate,
        create=True,
    )
    if limits.task is not None:
        ops.set_task_limit(conn, "pgqueue", limits.task, limits.task_concurrency)


@dataclass
class _Run:
    job_id: int
    attempt: int
    task: str
    key: str | None
    pid: int
    started_at: datetime
    ended_at: datetime | None
    claimed_at: datetime | None


def _peak(intervals: list[tuple[datetime, datetime]]) -> int:
    """The most intervals open at one instant (an end at t closes before a start at t)."""
    events = sorted([(s, 1) for s, _ in intervals] + [(e, -1) for _, e in intervals])
    peak = now = 0
    for _, d in events:
        now += d
        peak = max(peak, now)
    return peak


def _explain_peak(intervals: list[tuple[_Run, datetime, datetime]], reasons: dict[tuple[int, int], str]) -> str:
    """The runs open at the first instant the queue's peak was reached: what a violation
    report needs to be looked into."""
    events = sorted(
        [(s, 1, r) for r, s, _ in intervals] + [(e, -1, r) for r, _, e in intervals], key=lambda x: (x[0], x[1])
    )
    peak = max(0, _peak([(s, e) for _, s, e in intervals]))
    open_runs: dict[tuple[int, int], tuple[_Run, datetime, datetime]] = {}
    spans = {(r.job_id, r.attempt): (r, s, e) for r, s, e in intervals}
    for _at, d, run in events:
        key = (run.job_id, run.attempt)
        if d > 0:
            open_runs[key] = spans[key]
        else:
            open_runs.pop(key, None)
        if len(open_runs) >= peak:
            break
    return "open at the peak: " + ", ".join(
        f"job {r.job_id} attempt {r.attempt} pid {r.pid} key {r.key} {s.time()}..{e.time()} ({reasons.get(k)})"
        for k, (r, s, e) in sorted(open_runs.items(), key=lambda kv: kv[1][1])
    )


def _window_peak(times: list[datetime], period: timedelta) -> int:
    """The most of ``times`` in any window (t - period, t]."""
    times = sorted(times)
    return max((i + 1 - bisect_right(times, t - period, 0, i + 1) for i, t in enumerate(times)), default=0)


def lease_intervals(
    runs: list[_Run], errors: dict[int, list[dict[str, Any]]], events: list[ProcEvent], shutdown_timeout: float
) -> tuple[list[tuple[_Run, datetime, datetime]], dict[tuple[int, int], str]]:
    """Each run's span under a valid lease, and what ended it: the run's own end, an error
    entry for its attempt (a failure outcome or a rescue, stamped no later than the commit
    that freed its slot), its worker's death, or its worker's stop plus the shutdown timeout
    (the worker releases what still runs no earlier than that). Every end is at or before
    the moment the database stopped counting the run, so a peak above a limit is a real
    overshoot, never an artefact of the bookkeeping."""
    deaths: dict[int, list[datetime]] = defaultdict(list)
    stops: dict[int, list[datetime]] = defaultdict(list)
    for ev in events:
        if ev.what == "sigkill" or ev.what.startswith("exit:"):
            deaths[ev.pid].append(ev.at)
        elif ev.what == "sigterm":
            # ev.at is recorded before the signal is sent; the worker waits shutdown_timeout
            # from when it handles the signal before it releases what still runs.
            stops[ev.pid].append(ev.at + timedelta(seconds=shutdown_timeout))
    intervals: list[tuple[_Run, datetime, datetime]] = []
    reasons: dict[tuple[int, int], str] = {}
    for run in runs:
        labelled = [("ended", run.ended_at)] if run.ended_at is not None else []
        labelled += [
            (f"error {e.get('type') or ''}".strip(), datetime.fromisoformat(str(e["at"])))
            for e in errors.get(run.job_id, [])
            if e.get("attempt") == run.attempt and e.get("at")
        ]
        labelled += [("died", t) for t in deaths.get(run.pid, []) if t >= run.started_at]
        labelled += [("stopped", t) for t in stops.get(run.pid, []) if t >= run.started_at]
        if labelled:
            reason, end = min(labelled, key=lambda x: x[1])
        else:
            reason, end = "open", datetime.max.replace(tzinfo=run.started_at.tzinfo)
        if end > run.started_at:
            intervals.append((run, run.started_at, end))
            reasons[(run.job_id, run.attempt)] = reason
    return intervals, reasons


def check_limits(
    conn: psycopg.Connection[Any],
    limits: Limits,
    events: list[ProcEvent],
    pauses: list[tuple[datetime, datetime]],
) -> LimitReport:
    rep = LimitReport(pauses=len(pauses))
    errors: dict[int, list[dict[str, Any]]] = {
        r[0]: r[1] or [] for r in conn.execute("SELECT id, errors FROM pgqueue.jobs")
    }
    runs = [
        _Run(*r)
        for r in conn.execute(
            "SELECT r.job_id, r.attempt, j.task, r.ckey, r.pid, r.started_at, r.ended_at, r.claimed_at"
            " FROM chaos_runs AS r JOIN pgqueue.jobs AS j ON j.id = r.job_id"
        )
    ]
    rep.runs = len(runs)
    intervals, reasons = lease_intervals(runs, errors, events, limits.shutdown_timeout)

    rep.max_queue = _peak([(s, e) for _, s, e in intervals])
    by_key: dict[str, list[tuple[datetime, datetime]]] = defaultdict(list)
    for run, s, e in intervals:
        if run.key is not None:
            by_key[run.key].append((s, e))
    rep.max_key = max((_peak(v) for v in by_key.values()), default=0)
    if limits.task is not None:
        rep.max_task = _peak([(s, e) for run, s, e in intervals if run.task == limits.task])

    claims = {(r.job_id, r.attempt): r for r in runs if r.claimed_at is not None}
    if limits.rate is not None:
        rep.max_rate = _window_peak(
            [r.claimed_at for r in claims.values() if r.claimed_at], timedelta(seconds=limits.rate[1])
        )
    key_claims: dict[str, list[datetime]] = defaultdict(list)
    for r in claims.values():
        if r.key is not None and r.claimed_at is not None:
            key_claims[r.key].append(r.claimed_at)
    if limits.key_rate is not None:
        key_p = timedelta(seconds=limits.key_rate[1])
        rep.max_key_rate = max((_window_peak(v, key_p) for v in key_claims.values()), default=0)
    for paused, resumed in pauses:
        rep.claims_while_paused += sum(
            1 for r in claims.values() if r.claimed_at and paused + PAUSE_GRACE < r.claimed_at < resumed
        )

    if limits.queue_concurrency is not None and rep.max_queue > limits.queue_concurrency:
        rep.violations.append(f"queue ran {rep.max_queue} > {limits.queue_concurrency}")
        rep.violations.append(_explain_peak(intervals, reasons))
    if rep.max_key > limits.key_concurrency:
        rep.violations.append(f"a key ran {rep.max_key} > {limits.key_concurrency}")
    if limits.task is not None and rep.max_task > limits.task_concurrency:
        rep.violations.append(f"{limits.task} ran {rep.max_task} > {limits.task_concurrency}")
    if limits.rate is not None and rep.max_rate > limits.rate[0]:
        rep.violations.append(f"{rep.max_rate} claims in {limits.rate[1]}s > {limits.rate[0]}")
    if limits.key_rate is not None and rep.max_key_rate > limits.key_rate[0]:
        rep.violations.append(f"a key had {rep.max_key_rate} claims in {limits.key_rate[1]}s > {limits.key_rate[0]}")
    if rep.claims_while_paused:
        rep.violations.append(f"{rep.claims_while_paused} claims while paused")
    return rep
