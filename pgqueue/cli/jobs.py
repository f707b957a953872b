"""``pgqueue jobs …``: list, show, retry, cancel and purge jobs (thin calls into ``ops``)."""

from __future__ import annotations

import json
from datetime import datetime, timedelta
from typing import Annotated, Any

import typer
from rich import box
from rich.markup import escape
from rich.panel import Panel
from rich.syntax import Syntax
from rich.table import Table
from rich.text import Text

from .. import ops
from .._db.admin import db_now
from ..models import JobState
from ..ops.jobs import MAX_LIST_LIMIT
from .common import STATE_STYLE, DsnOpt, SchemaOpt, app, connect, console, fail, guard
from .render import fit_table

__all__ = ["STATE_STYLE", "ago", "jobs_app", "print_json", "seconds"]

jobs_app = typer.Typer(help="Inspect and act on jobs.", no_args_is_help=True)
app.add_typer(jobs_app, name="jobs")

JsonOpt = Annotated[bool, typer.Option("--json", help="Machine-readable JSON on stdout.")]
JobIdArg = Annotated[int, typer.Argument(metavar="ID", help="The job's id.")]


def print_json(value: Any) -> None:
    """Plain JSON on stdout (no rich markup or wrapping), stable keys, ISO 8601 times."""
    typer.echo(json.dumps(ops.jsonable(value), indent=2, ensure_ascii=False))


def seconds(value: float | None) -> str:
    """A span of seconds, short: 950ms, 12s, 4m 05s, 3h 02m, 2d 04h."""
    if value is None:
        return "-"
    v = abs(value)
    if v < 1:
        return f"{v * 1000:.0f}ms"
    if v < 60:
        return f"{v:.0f}s"
    if v < 3600:
        return f"{int(v // 60)}m {int(v % 60):02d}s"
    if v < 86400:
        return f"{int(v // 3600)}h {int(v % 3600 // 60):02d}m"
    return f"{int(v // 86400)}d {int(v % 86400 // 3600):02d}h"


def ago(ts: datetime | None, now: datetime) -> str:
    """How long before ``now`` (the database clock) ``ts`` was, or how long until it."""
    if ts is None:
        return "-"
    delta = (now - ts).total_seconds()
    return f"{seconds(delta)} ago" if delta >= 0 else f"in {seconds(delta)}"


def _clip(text: str, width: int) -> str:
    line = text.splitlines()[0] if text else ""
    return line if len(line) <= width else line[: width - 1] + "…"


def _state_text(state: str) -> Text:
    return Text(state, style=STATE_STYLE.get(state, ""))


@jobs_app.command("list")
def list_cmd(
    state: Annotated[str | None, typer.Option(help="Only jobs in this state.")] = None,
    queue: Annotated[str | None, typer.Option(help="Only jobs of this queue.")] = None,
    task: Annotated[str | None, typer.Option(help="Only jobs of this task.")] = None,
    limit: Annotated[int, typer.Option(min=1, max=MAX_LIST_LIMIT, help="At most this many jobs.")] = 50,
    as_json: JsonOpt = False,
    dsn: DsnOpt = None,
    schema: SchemaOpt = "pgqueue",
) -> None:
    """The most recent jobs (highest id first), optionally filtered."""

    def go() -> tuple[list[ops.JobSummary], datetime]:
        with connect(dsn) as conn:
            return ops.list_jobs(conn, schema, state=state, queue=queue, task=task, limit=limit), db_now(conn, schema)

    jobs, now = guard(go)
    if as_json:
        print_json(jobs)
        return
    table = Table(title=f"{len(jobs)} job(s), newest first", title_justify="left", box=box.SIMPLE_HEAD)
    id_width = max((len(str(j.id)) for j in jobs), default=2)
    table.add_column("id", justify="right", no_wrap=True, min_width=id_width)
    table.add_column("state", no_wrap=True, min_width=9)
    table.add_column("queue", no_wrap=True, overflow="ellipsis", max_width=16)
    table.add_column("task", no_wrap=True, overflow="ellipsis", max_width=32)
    table.add_column("try", justify="right", no_wrap=True)
    table.add_column("created", justify="right", no_wrap=True)
    table.add_column("run/finish", justify="right", no_wrap=True)
    table.add_column("last error")
    for j in jobs:
        when = ago(j.finished_at, now) if j.finished_at else ago(j.run_at, now)
        table.add_row(
            str(j.id),
            _state_text(j.state.value),
            escape(j.queue),
            escape(j.task),
            f"{j.attempt}/{j.max_attempts if j.max_attempts is not None else '-'}"
            + (f" ({j.snoozes} snooze{'s' if j.snoozes != 1 else ''})" if j.snoozes else ""),
            ago(j.created_at, now),
            when,
            Text(_clip(j.last_error or "", 80), style="red"),
        )
    console.print(fit_table(table))


@jobs_app.command("show")
def show_cmd(job_id: JobIdArg, as_json: JsonOpt = False, dsn: DsnOpt = None, schema: SchemaOpt = "pgqueue") -> None:
    """One job: its fields, arguments, result, attempts and every error with its traceback."""

    def go() -> tuple[ops.JobDetail, ops.JobRelations, datetime]:
        with connect(dsn) as conn:
            return ops.get_job(conn, schema, job_id), ops.job_relations(conn, schema, job_id), db_now(conn, schema)

    job, rel, now = guard(go)
    if as_json:
        data = ops.jsonable(job)
        if rel.workflow_id is not None or rel.parents or rel.children or rel.batch_id is not None:
            data["workflow"] = ops.jsonable(rel)
        print_json(data)
        return
    grid = Table.grid(padding=(0, 2))
    grid.add_column(style="bold")
    grid.add_column()
    rows: list[tuple[str, str | Text]] = [
        ("state", _state_text(job.state.value)),
        ("queue", escape(job.queue)),
        ("task", escape(job.task)),
        ("priority", str(job.priority)),
        ("attempts", f"{job.attempt} of {job.max_attempts if job.max_attempts is not None else '(task default)'}"),
        ("snoozes", f"{job.snoozes} (attempts given back)" if job.snoozes else "0"),
        ("created", f"{job.created_at.isoformat()} ({ago(job.created_at, now)})"),
        ("run at", f"{job.run_at.isoformat()} ({ago(job.run_at, now)})"),
        ("scheduled for", f"{job.scheduled_at.isoformat()} ({ago(job.scheduled_at, now)})"),
    ]
    if job.started_at:
        rows.append(("started", f"{job.started_at.isoformat()} ({ago(job.started_at, now)})"))
    if job.finished_at:
        rows.append(("finished", f"{job.finished_at.isoformat()} ({ago(job.finished_at, now)})"))
    if job.lease_expires_at:
        rows.append(("lease until", f"{job.lease_expires_at.isoformat()} ({ago(job.lease_expires_at, now)})"))
    if job.cancel_requested_at:
        rows.append(("cancel asked", f"{job.cancel_requested_at.isoformat()} ({ago(job.cancel_requested_at, now)})"))
    if job.worker_id:
        rows.append(("worker", escape(job.worker_id)))
    if job.expires_at:
        rows.append(("expires at", f"{job.expires_at.isoformat()} ({ago(job.expires_at, now)})"))
    if job.concurrency_key:
        rows.append(("concurrency key", escape(job.concurrency_key)))
    if job.unique_key:
        rows.append(("unique key", escape(job.unique_key)))
    if job.dedupe_key:
        rows.append(("unique key", f"{escape(job.dedupe_key)} (unique rules)"))
    rows.extend(_relation_rows(rel))
    for key, value in rows:
        grid.add_row(key, value)
    console.print(Panel(grid, title=f"job {job.id}", title_align="left", expand=False))
    console.print(Text("args", style="bold"))
    console.print(Syntax(json.dumps(job.args, indent=2, ensure_ascii=False), "json", word_wrap=True))
    if job.state is JobState.COMPLETED:
        _print_result(job.result)
    if not job.errors:
        console.print(Text("no errors", style="dim"))
    for i, e in enumerate(job.errors, 1):
        head = Text(f"error {i}/{len(job.errors)}", style="bold red")
        head.append(f"  attempt {e.attempt if e.attempt is not None else '?'}", style="bold")
        if e.at:
            head.append(f"  {e.at.isoformat()}")
        if e.worker:
            head.append(f"  on {e.worker}", style="dim")
        console.print(head)
        console.print(Text(f"{e.type}: {e.message}", style="red"))
        if e.traceback:
            console.print(Panel(Text(e.traceback.rstrip(), style="dim"), title="traceback", title_align="left"))


def _relation_rows(rel: ops.JobRelations) -> list[tuple[str, str | Text]]:
    """`jobs show`'s lines on a job's workflow: its id, parents (policy, settled state) and children."""
    rows: list[tuple[str, str | Text]] = []
    if rel.batch_id is not None:
        rows.append(("batch", str(rel.batch_id)))
    if rel.workflow_id is None and not rel.parents and not rel.children:
        return rows
    rows.append(("workflow", str(rel.workflow_id)))
    if rel.waiting_on:
        rows.append(("waiting for", f"{rel.waiting_on} parent(s)"))
    if rel.parents:
        rows.append(("parents", ", ".join(f"{p} ({policy}: {state or 'open'})" for p, policy, state in rel.parents)))
    if rel.children:
        rows.append(("children", ", ".join(f"{c} ({policy})" for c, policy in rel.children)))
    return rows


#: Longest result shown in full by `jobs show` (characters of indented JSON); --json has it all.
RESULT_SHOWN = 10_000


def _print_result(result: object) -> None:
    console.print(Text("result", style="bold"))
    if result is None:
        console.print(Text("none (the handler returned None)", style="dim"))
        return
    text = json.dumps(result, indent=2, ensure_ascii=False)
    if len(text) > RESULT_SHOWN:
        console.print(Syntax(text[:RESULT_SHOWN], "json", word_wrap=True))
        console.print(Text(f"… {len(text) - RESULT_SHOWN:,} more characters: see --json", style="dim"))
        return
    console.print(Syntax(text, "json", word_wrap=True))


@jobs_app.command("retry")
def retry_cmd(
    job_id: Annotated[int | None, typer.Argument(metavar="[ID]", help="The job to retry.")] = None,
    all_discarded: Annotated[bool, typer.Option("--all-discarded", help="Retry every discarded job.")] = False,
    task: Annotated[str | None, typer.Option(help="With --all-discarded: only this task's jobs.")] = None,
    dsn: DsnOpt = None,
    schema: SchemaOpt = "pgqueue",
) -> None:
    """Put a discarded or cancelled job (or every discarded one) back to available."""
    if (job_id is None) == (not all_discarded):
        raise fail("give either a job ID or --all-discarded")
    if task is not None and not all_discarded:
        raise fail("--task only goes with --all-discarded")

    if job_id is not None:
        jid = job_id

        def one() -> tuple[bool, JobState | None]:
            with connect(dsn) as conn:
                if ops.retry_job(conn, schema, jid):
                    return True, None
                return False, ops.get_job(conn, schema, jid).state

        done, state = guard(one)
        if not done:
            raise fail(f"job {jid} is {state}: only discarded or cancelled jobs can be retried")
        console.print(f"job {jid} is available again")
        return

    def many() -> ops.RetryResult:
        with connect(dsn) as conn:
            return ops.retry_jobs(conn, schema, task=task)

    result = guard(many)
    scope = f" of task {escape(task)}" if task else ""
    console.print(f"{result.retried} discarded job(s){scope} available again")
    if result.skipped:
        console.print(f"{result.skipped} skipped: a live job holds their unique_key", style="yellow")


@jobs_app.command("cancel")
def cancel_cmd(job_id: JobIdArg, dsn: DsnOpt = None, schema: SchemaOpt = "pgqueue") -> None:
    """Cancel a job: at once if it waits, at its next check if it runs."""

    def go() -> JobState:
        with connect(dsn) as conn:
            return ops.cancel_job(conn, schema, job_id)

    state = guard(go)
    if state is JobState.CANCELLED:
        console.print(f"job {job_id} cancelled")
    elif state is JobState.RUNNING:
        console.print(f"job {job_id} is running: its worker will cancel it at its next check")
    else:
        raise fail(f"job {job_id} already finished as {state}: nothing to cancel")


@jobs_app.command("purge")
def purge_cmd(
    state: Annotated[str, typer.Option(help="completed, discarded or cancelled.")],
    older_than: Annotated[
        str, typer.Option(help="Finished longer ago than this: a duration like 30s, 90m, 12h, 7d, 1d12h, 2w.")
    ],
    batch_size: Annotated[int, typer.Option(min=1, help="Rows per DELETE transaction in the boundary day.")] = 5000,
    as_json: JsonOpt = False,
    dsn: DsnOpt = None,
    schema: SchemaOpt = "pgqueue",
) -> None:
    """Remove finished jobs: whole day partitions are dropped, the boundary day is deleted in batches."""

    def go() -> ops.PurgeResult:
        age: timedelta = ops.parse_duration(older_than, option="--older-than")
        with connect(dsn) as conn:
            return ops.purge_jobs(conn, schema, state=state, older_than=age, batch_size=batch_size)

    result = guard(go)
    if as_json:
        print_json(result)
        return
    parts = len(result.dropped_partitions)
    console.print(
        f"purged {result.state} jobs finished before {result.cutoff.isoformat()}: "
        f"dropped {parts} partition(s) (~{result.dropped_rows_estimate:,} rows), "
        f"deleted {result.deleted_rows:,} row(s)"
    )
