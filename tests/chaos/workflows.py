"""Workflows and batches under faults: a producer of diamond-shaped graphs and of batches
with callbacks (a share rolled back on purpose), and the check that

* no job started before all its parents completed (a child of a parent that failed under
  the policy "cancel" never ran and ended cancelled; under "run" it ran after the parent
  finished);
* every batch fired its callbacks exactly once (one job per expected callback) and with
  the right one: on_success when every member completed, on_discard otherwise;
* nothing is stuck: every job of a committed graph or batch is final, every batch fired;
* rolled-back creations left nothing: no job, no batch row.

Runs are the handlers' ledger (``chaos_runs``, database clock); a parent's ``finished_at``
is its completion transaction's start, before the commit that released the child, so a
child's run must start strictly after it.
"""

from __future__ import annotations

import random
import threading
import uuid
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import psycopg

from .app import app

__all__ = ["WorkflowProducer", "WorkflowReport", "check_workflows"]

#: A diamond: top -> (left, right) -> bottom. Edges as (child, parent) positions.
EDGES = [(1, 0), (2, 0), (3, 1), (3, 2)]


class _RollbackError(Exception):
    pass


@dataclass
class Diamond:
    ids: list[int]
    policies: dict[tuple[int, int], str]  # (child pos, parent pos) -> policy


@dataclass
class BatchIntent:
    batch_id: int
    members: list[int]


@dataclass
class WorkflowReport:
    diamonds: int = 0
    batches: int = 0
    rolled_back: int = 0
    unknown: int = 0
    jobs: int = 0
    early_starts: list[int] = field(default_factory=list)
    ran_despite_cancel: list[int] = field(default_factory=list)
    stuck: list[int] = field(default_factory=list)
    callbacks_wrong: list[int] = field(default_factory=list)
    phantoms: list[int] = field(default_factory=list)
    parents_failed: int = 0
    ran_anyway: int = 0
    batches_with_failures: int = 0

    @property
    def violations(self) -> list[str]:
        out = []
        for name in ("early_starts", "ran_despite_cancel", "stuck", "callbacks_wrong", "phantoms"):
            items = getattr(self, name)
            if items:
                out.append(f"{name}={items[:10]}")
        return out

    def line(self) -> str:
        return (
            f"workflows {'PASS' if not self.violations else 'FAIL'}: diamonds={self.diamonds} batches={self.batches}"
            f" (rolled_back={self.rolled_back} unknown={self.unknown}) jobs={self.jobs}"
            f" parents_failed={self.parents_failed} ran_anyway={self.ran_anyway}"
            f" batches_with_failures={self.batches_with_failures} early_starts={len(self.early_starts)}"
            f" ran_despite_cancel={len(self.ran_despite_cancel)} stuck={len(self.stuck)}"
            f" callbacks_wrong={len(self.callbacks_wrong)} phantoms={len(self.phantoms)}"
            + (f" violations: {'; '.join(self.violations)}" if self.violations else "")
        )


class WorkflowProducer:
    """Creates a diamond or a batch per transaction, ``rate`` per second; one in
    ``batch_every`` is a batch; ``rollback_share`` of them are rolled back on purpose."""

    def __init__(self, dsn: str, *, rate: float, seed: int, batch_every: int = 10, rollback_share: float = 0.1) -> None:
        self.dsn, self.rate, self.batch_every, self.rollback_share = dsn, rate, batch_every, rollback_share
        self.rng = random.Random(seed + 1)
        self.diamonds: list[Diamond] = []
        self.batches: list[BatchIntent] = []
        self.rolled_back_jobs: list[int] = []
        self.rolled_back_batches: list[int] = []
        self.rolled_back_diamonds = 0
        self.unknown_diamonds: list[Diamond] = []
        self.unknown_batches: list[BatchIntent] = []
        self.count = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="chaos-workflows", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(60)

    def ids(self) -> set[int]:
        out: set[int] = set()
        for d in [*self.diamonds, *self.unknown_diamonds]:
            out.update(d.ids)
        for b in [*self.batches, *self.unknown_batches]:
            out.update(b.members)
        return out

    def _run(self) -> None:
        conn: psycopg.Connection[Any] | None = None
        backoff = 0.05
        while not self._stop.is_set():
            try:
                if conn is None or conn.closed:
                    conn = psycopg.connect(self.dsn, connect_timeout=5)
                self.count += 1
                if self.count % self.batch_every == 0:
                    self._batch(conn)
                else:
                    self._diamond(conn)
                backoff = 0.05
            except psycopg.OperationalError:
                if conn is not None:
                    conn.close()
                conn = None
                self._stop.wait(backoff)
                backoff = min(backoff * 2, 2.0)
                continue
            self._stop.wait(self.rng.expovariate(self.rate))
        if conn is not None:
            conn.close()

    def _job(self, fail: bool = False) -> Any:
        if fail:
            return app.get_task("chaos.fail").job(tag=uuid.uuid4().hex)
        task = self.rng.choice(["chaos.ok", "chaos.ok", "chaos.ok_async", "chaos.tx"])
        return app.get_task(task).job(tag=uuid.uuid4().hex, ms=self.rng.choice([0, 0, 20, 200]))

    def _diamond(self, conn: psycopg.Connection[Any]) -> None:
        from pgqueue import Dependency

        roll_back = self.rng.random() < self.rollback_share
        policies = {edge: ("run" if self.rng.random() < 0.3 else "cancel") for edge in EDGES}
        wf = app.workflow()
        nodes = [wf.add(self._job(fail=self.rng.random() < 0.1))]
        nodes.append(wf.add(self._job(), after=[Dependency(nodes[0], policies[(1, 0)])]))  # type: ignore[arg-type]
        nodes.append(wf.add(self._job(), after=[Dependency(nodes[0], policies[(2, 0)])]))  # type: ignore[arg-type]
        nodes.append(
            wf.add(
                self._job(),
                after=[Dependency(nodes[1], policies[(3, 1)]), Dependency(nodes[2], policies[(3, 2)])],  # type: ignore[arg-type]
            )
        )
        ids: list[int] = []
        try:
            with conn.transaction():
                ids = [int(h) for h in wf.enqueue(conn)]
                if roll_back:
                    raise _RollbackError
        except _RollbackError:
            self.rolled_back_jobs.extend(ids)
            self.rolled_back_diamonds += 1
            return
        except psycopg.OperationalError:
            if ids:
                self.unknown_diamonds.append(Diamond(ids, policies))
            raise
        self.diamonds.append(Diamond(ids, policies))

    def _batch(self, conn: psycopg.Connection[Any]) -> None:
        roll_back = self.rng.random() < self.rollback_share
        cb = app.get_task("chaos.ok")
        members: list[int] = []
        batch_id = 0
        try:
            with conn.transaction():
                batch = app.create_batch(conn, on_success=cb.job(tag="cb"), on_discard=cb.job(tag="cb"),
                                         on_complete=cb.job(tag="cb"))  # fmt: skip
                batch_id = batch.id
                for _ in range(self.rng.randint(3, 8)):
                    members.extend(int(h) for h in batch.add(conn, self._job(fail=self.rng.random() < 0.1)))
                batch.close(conn)
                if roll_back:
                    raise _RollbackError
        except _RollbackError:
            self.rolled_back_jobs.extend(members)
            self.rolled_back_batches.append(batch_id)
            return
        except psycopg.OperationalError:
            if batch_id:
                self.unknown_batches.append(BatchIntent(batch_id, members))
            raise
        self.batches.append(BatchIntent(batch_id, members))


def check_workflows(conn: psycopg.Connection[Any], producer: WorkflowProducer) -> WorkflowReport:
    rep = WorkflowReport()
    jobs: dict[int, tuple[str, datetime | None]] = {
        r[0]: (r[1], r[2]) for r in conn.execute("SELECT id, state::text, finished_at FROM pgqueue.jobs")
    }
    starts: dict[int, list[datetime]] = defaultdict(list)
    for job_id, started in conn.execute("SELECT job_id, started_at FROM chaos_runs"):
        starts[job_id].append(started)
    diamonds = list(producer.diamonds)
    for d in producer.unknown_diamonds:
        if d.ids[0] in jobs:
            diamonds.append(d)
        else:
            rep.rolled_back += 1
        rep.unknown += 1
    rep.diamonds = len(diamonds)
    for d in diamonds:
        rep.jobs += len(d.ids)
        for job_id in d.ids:
            if jobs.get(job_id, ("missing", None))[0] not in ("completed", "discarded", "cancelled"):
                rep.stuck.append(job_id)
        # A child "runs" after its parents settle; under "cancel" a failed parent cancels it.
        doomed: set[int] = set()
        for child, parent in sorted(EDGES):
            c, p = d.ids[child], d.ids[parent]
            p_state, p_done = jobs.get(p, ("missing", None))
            policy = d.policies[(child, parent)]
            failed = p_state != "completed" or p in doomed
            if failed and policy == "cancel":
                doomed.add(c)
            if starts.get(c) and p_done is not None and min(starts[c]) <= p_done:
                rep.early_starts.append(c)
            if starts.get(c) and p_done is None:
                rep.early_starts.append(c)
        if jobs.get(d.ids[0], ("", None))[0] != "completed":
            rep.parents_failed += 1
        for c in doomed:
            if starts.get(c):
                rep.ran_despite_cancel.append(c)
            elif jobs.get(c, ("", None))[0] != "cancelled":
                rep.stuck.append(c)
        rep.ran_anyway += sum(
            1
            for child, parent in EDGES
            if d.policies[(child, parent)] == "run" and jobs.get(d.ids[parent], ("", None))[0] != "completed"
            and starts.get(d.ids[child])
        )  # fmt: skip
    batches = list(producer.batches)
    known = {r[0]: r[1:] for r in conn.execute(
        "SELECT id, fired_at, total, completed, discarded, cancelled, callback_ids FROM pgqueue.batches"
    )}  # fmt: skip
    for b in producer.unknown_batches:
        if b.batch_id in known:
            batches.append(b)
        else:
            rep.rolled_back += 1
        rep.unknown += 1
    rep.batches = len(batches)
    for b in batches:
        rep.jobs += len(b.members)
        row = known.get(b.batch_id)
        if row is None or row[0] is None or row[1] != len(b.members):
            rep.stuck.append(-b.batch_id)
            continue
        _, _total, completed, discarded, cancelled, callback_ids = row
        failed = discarded + cancelled
        rep.batches_with_failures += failed > 0
        members_completed = sum(1 for m in b.members if jobs.get(m, ("", None))[0] == "completed")
        if members_completed != completed or len(callback_ids or []) != 2:
            rep.callbacks_wrong.append(b.batch_id)
        for cb in callback_ids or []:
            if jobs.get(cb, ("missing", None))[0] not in ("completed", "discarded", "cancelled"):
                rep.stuck.append(cb)
    # Exactly once: one callback job per expected callback, whatever raced.
    per_batch = {
        r[0]: r[1]
        for r in conn.execute(
            "SELECT b.id, count(j.id) FROM pgqueue.batches AS b JOIN pgqueue.jobs AS j ON j.id = ANY(b.callback_ids)"
            " GROUP BY b.id"
        )
    }
    cb_jobs = conn.execute("SELECT count(*) FROM pgqueue.jobs WHERE args ->> 'tag' = 'cb'").fetchone()
    expected = sum(per_batch.values())
    if cb_jobs is None or cb_jobs[0] != expected or any(n != 2 for n in per_batch.values()):
        rep.callbacks_wrong.append(0)
    rolled = set(producer.rolled_back_jobs)
    rep.rolled_back += len(producer.rolled_back_batches) + producer.rolled_back_diamonds
    rep.phantoms.extend(sorted(j for j in rolled if j in jobs or j in starts))
    rep.phantoms.extend(-b for b in producer.rolled_back_batches if b in known)
    return rep
