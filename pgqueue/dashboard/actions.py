"""The dashboard's writes: retry, cancel or delete one job, a selection, or every job
matching the jobs page's filter; pause and resume a queue, set its limits (concurrency,
rate, per-key concurrency and FIFO, per-key rate).

Every action is a CSRF-checked POST, confirmed in the browser first, and logged on the
``pgqueue.dashboard`` logger with who did it. Selections run ``batch_size`` jobs per
transaction. "All matching" runs one batch per request, newest first, each batch its own
transaction: the page posts the next batch when one returns, so closing the page (or
"Stop") interrupts it safely between batches, and what was done stays done.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

from starlette.datastructures import FormData
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.routing import Route

from .. import ops
from .._db import dashboard as db
from .._db.conn import Conn
from ..errors import ConfigError
from .config import DashboardConfig
from .core import dash_of, handled
from .filters import ACTION_STATES, JobFilter, parse_before
from .limits import limits_text, parse_limits

__all__ = ["ROUTES", "apply_action"]

log = logging.getLogger("pgqueue.dashboard")
ACTIONS = ("retry", "cancel", "delete")
MAX_SELECTION = 10_000


@dataclass(frozen=True, slots=True)
class Outcome:
    asked: int
    changed: int

    def text(self, action: str) -> str:
        done = {"retry": "retried", "cancel": "cancelled or asked to stop", "delete": "deleted"}[action]
        return f"{action}: {self.changed} of {self.asked} jobs {done}"


def apply_action(conn: Conn, config: DashboardConfig, action: str, ids: list[int]) -> Outcome:
    """Run ``action`` on ``ids``, ``batch_size`` per transaction."""
    changed = 0
    for start in range(0, len(ids), config.batch_size):
        chunk = ids[start : start + config.batch_size]
        if action == "retry":
            changed += len(db.retry_jobs(conn, config.schema, chunk))
        elif action == "cancel":
            states = db.cancel_jobs(conn, config.schema, chunk)
            changed += sum(1 for s in states.values() if s in ("cancelled", "running"))
        else:
            changed += len(db.delete_jobs(conn, config.schema, chunk))
    return Outcome(len(ids), changed)


def _action(form: FormData) -> str:
    action = str(form.get("action") or "")
    if action not in ACTIONS:
        raise ConfigError(f"unknown action {action[:40]!r}: use retry, cancel or delete")
    return action


def _ids(form: FormData) -> list[int]:
    ids: list[int] = []
    for value in form.getlist("ids"):
        parsed = parse_before(str(value))
        if parsed is None:
            continue
        ids.append(parsed)
    if not ids:
        raise ConfigError("no job selected")
    if len(ids) > MAX_SELECTION:
        raise ConfigError(f"at most {MAX_SELECTION} jobs can be selected at once")
    return sorted(set(ids), reverse=True)


async def _checked_form(request: Request) -> FormData:
    form = await request.form()
    problem = dash_of(request).guard.csrf_ok(request, str(form.get("csrf") or "") or None)
    if problem is not None:
        raise PermissionError(problem)
    return form


def _back(request: Request, form: FormData) -> str:
    """Where to go after an action: a path of this dashboard (never another site)."""
    back = str(form.get("back") or "")
    root = str(request.url_for("overview")).rstrip("/")
    if back.startswith("/") and not back.startswith("//") and "\\" not in back:
        base = request.url_for("overview").path.rstrip("/")
        if back.startswith(base + "/") or back == base:
            return back
    return root + "/jobs"


def _with_msg(request: Request, url: str, msg: str) -> str:
    """``url`` carrying ``msg`` for the next page, signed (see :meth:`Guard.sign`)."""
    sig = dash_of(request).guard.sign(msg)
    return f"{url}{'&' if '?' in url else '?'}msg={quote(msg)}&sig={sig}"


@handled
async def jobs_action(request: Request) -> Response:
    dash = dash_of(request)
    form = await _checked_form(request)
    action, ids = _action(form), _ids(form)
    outcome = await dash.run(lambda conn, cfg: apply_action(conn, cfg, action, ids))
    actor = dash.guard.actor(request)
    log.info("dashboard: %s by %s on jobs %s: %s", action, actor, _id_list(ids), outcome.text(action))
    return RedirectResponse(_with_msg(request, _back(request, form), outcome.text(action)), status_code=303)


def _id_list(ids: list[int]) -> str:
    shown = ", ".join(str(i) for i in ids[:20])
    return shown + (f" and {len(ids) - 20} more" if len(ids) > 20 else "")


@dataclass(frozen=True, slots=True)
class BatchResult:
    seen: int
    changed: int
    next_before: int | None  #: None: done


def bulk_batch(conn: Conn, config: DashboardConfig, action: str, flt: JobFilter, before: int | None) -> BatchResult:
    """One batch of "all matching": the next ``batch_size`` matching jobs below ``before``."""
    if flt.state is not None and flt.state not in ACTION_STATES[action]:
        raise ConfigError(f"cannot {action} {flt.state.value} jobs")
    query = flt.page_query(
        before=before, limit=config.batch_size, scan_limit=config.scan_limit, args_tasks=config.args_tasks()
    )
    page = db.job_page(conn, config.schema, query)
    ids = [int(r["id"]) for r in page.rows if r["state"] in {s.value for s in ACTION_STATES[action]}]
    outcome = apply_action(conn, config, action, ids) if ids else Outcome(0, 0)
    if len(page.rows) >= query.limit:
        nxt: int | None = int(page.rows[-1]["id"])
    elif page.scanned >= query.scan and page.scanned_to is not None:
        nxt = page.scanned_to
    else:
        nxt = None
    return BatchResult(len(ids), outcome.changed, nxt)


def _count(form: FormData, name: str) -> int:
    value = str(form.get(name) or "0")
    return int(value) if value.isdigit() and len(value) < 12 else 0


@handled
async def jobs_bulk(request: Request) -> Response:
    dash = dash_of(request)
    form = await _checked_form(request)
    action = _action(form)
    flt = JobFilter.parse({k: str(v) for k, v in form.items() if isinstance(v, str)})
    before = parse_before(str(form.get("before") or "")) if form.get("before") else None
    result = await dash.run(lambda conn, cfg: bulk_batch(conn, cfg, action, flt, before))
    total_seen = _count(form, "seen") + result.seen
    total_changed = _count(form, "changed") + result.changed
    actor = dash.guard.actor(request)
    log.info(
        "dashboard: %s of all jobs matching %s by %s: batch below %s changed %d of %d (%d so far)",
        action,
        flt.params() or "no filter",
        actor,
        before if before is not None else "the newest",
        result.changed,
        result.seen,
        total_changed,
    )
    context: dict[str, Any] = {
        "action": action,
        "f": flt,
        "next_before": result.next_before,
        "seen": total_seen,
        "changed": total_changed,
    }
    return dash.render(request, "bulk.html", context)


def _queue_action(fn: Callable[[Conn, str, str], Any], verb: str) -> Callable[[Request], Any]:
    @handled
    async def endpoint(request: Request) -> Response:
        dash = dash_of(request)
        form = await _checked_form(request)
        queue = str(form.get("queue") or "")
        await dash.run(lambda conn, cfg: fn(conn, cfg.schema, queue))
        log.info("dashboard: %s queue %r by %s", verb, queue, dash.guard.actor(request))
        target = str(request.url_for("queues"))
        return RedirectResponse(_with_msg(request, target, f"queue {queue} {verb}"), status_code=303)

    endpoint.__name__ = f"queue_{verb}"
    return endpoint


@handled
async def queue_limit(request: Request) -> Response:
    """Set the limits of a queue that the form changed (see :mod:`.limits`)."""
    dash = dash_of(request)
    form = await _checked_form(request)
    queue = str(form.get("queue") or "")
    change = parse_limits(form)
    target = str(request.url_for("queues"))
    if change.empty:
        return RedirectResponse(_with_msg(request, target, f"queue {queue}: no limit changed"), status_code=303)
    control = await dash.run(lambda conn, cfg: ops.set_queue_limits(conn, cfg.schema, queue, **change.kwargs()))
    log.info("dashboard: queue %r limits set by %s: %s", queue, dash.guard.actor(request), change.describe())
    return RedirectResponse(_with_msg(request, target, f"queue {queue}: {limits_text(control)}"), status_code=303)


ROUTES = [
    Route("/actions/jobs", jobs_action, methods=["POST"], name="jobs_action"),
    Route("/actions/bulk", jobs_bulk, methods=["POST"], name="jobs_bulk"),
    Route("/actions/queues/pause", _queue_action(ops.pause_queue, "paused"), methods=["POST"], name="queue_pause"),
    Route("/actions/queues/resume", _queue_action(ops.resume_queue, "resumed"), methods=["POST"], name="queue_resume"),
    Route("/actions/queues/limit", queue_limit, methods=["POST"], name="queue_limit"),
]
